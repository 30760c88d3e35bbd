"""`tensorbow-run`, the command line (its entry point, for now,
tensorbow/run.py). Not imported by `import tensorbow`: the library does
not need it.

- launch.py: `--workers W`, W local workers started and watched.
- chief.py: on a cluster, what only the chief writes.
"""
