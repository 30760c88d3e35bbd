"""`tensorbow-run`, the command line: runs an unmodified TF1 script with
TensorFlow's session classes replaced by TensorBow's. Not imported by
`import tensorbow`: the library does not need it.

- main.py: the arguments, the script run in this process.
- options.py: the flags of the session options a command sets, read once
  into one `SessionOptions` (tensorbow/options.py) and written back as
  each worker's flags.
- patches.py: the stand-ins for `tf.compat.v1.Session`,
  `InteractiveSession`, the session creators and `SessionManager`, and the
  patch that puts them (and sessions.py's) in place while the script runs.
- sessions.py: `Maker`, the launcher's options under a script's own for
  every session it makes; the stand-ins for TensorBow's own classes.
- report.py: the line printed at exit, naming the sessions made.
- launch.py: `--workers W`, W local workers started and watched.
- chief.py: on a cluster, what only the chief writes.

`tensorbow-run` is `main.main`; `python -m tensorbow.run` runs it too.
"""
