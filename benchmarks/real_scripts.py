"""TF1 scripts as people write them, under tf.compat.v1.Session and under
`tensorbow-run`, side by side.

    PYTHONPATH=. .venv/bin/python -m benchmarks.real_scripts \
        [--replicas auto[,1,...]] [--repeats 3] [SCRIPT...]

The scripts are in benchmarks/real_scripts/ (an MLP, the "Deep MNIST" CNN,
an autoencoder with summaries and a Saver, the CIFAR-10 tutorial's queue
runners and MonitoredTrainingSession, an MLP fed by a one-shot iterator
over arrays held in the graph), each at its own batch size.
Each repeat runs every script once as `python script.py` and once as
`python -m tensorbow.run --replicas R script.py` for each R of
`--replicas`, in turn, and times the whole process. Prints per script the
median wall time of each, its ratio to TensorFlow's (and auto's to
L = 1's when both are run), the final test accuracy and loss each printed
(TensorFlow's first) and the L each run's last tuning decision chose
("none" where it made none, as at a fixed L).

With `--aa`, each repeat ends with TensorFlow again: its median over the
first TensorFlow's is the A/A ratio, and the range of that ratio over the
repeats (each repeat's second TensorFlow run over its first) the spread a
ratio needs to exceed to say anything; the accuracy and loss columns add
the range of TensorFlow's over both (its A/A spread).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "benchmarks", "real_scripts")
DEFAULT = ("mlp.py", "cnn.py", "autoencoder.py", "queue_cnn.py",
           "dataset_mlp.py")
_RESULT = re.compile(r"RESULT accuracy=(\S+) loss=(\S+)")
# tensorbow-run's line for an auto-tuner decision: "... -> (L, groups,
# inline) (why)".
_DECISION = re.compile(r"auto-tuner, run \d+: .* -> \((\d+), ")


def run(command):
  """(wall seconds, accuracy, loss, the auto-tuner's last L or None) of one
  script run."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONPATH=os.pathsep.join([ROOT, SCRIPTS]))
  start = time.perf_counter()
  done = subprocess.run(command, env=env, cwd=SCRIPTS, capture_output=True,
                        text=True, check=False)
  seconds = time.perf_counter() - start
  match = _RESULT.search(done.stdout)
  if done.returncode != 0 or match is None:
    raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
  decisions = _DECISION.findall(done.stderr)
  replicas = int(decisions[-1]) if decisions else None
  return seconds, float(match.group(1)), float(match.group(2)), replicas


AA = "tf A/A"


def sessions_for(settings, aa):
  """{session: script -> command}, in the order each repeat runs them:
  TensorFlow, `tensorbow-run --replicas R` for each R of `settings`, and
  with `aa` TensorFlow again."""
  sessions = {"tf": lambda script: [sys.executable, script]}
  for r in settings:
    sessions[r] = (lambda r: lambda script: [
        sys.executable, "-m", "tensorbow.run", "--replicas", r, script])(r)
  if aa:
    sessions[AA] = sessions["tf"]
  return sessions


def _auto_and_one(settings):
  """Whether `settings` has both auto and L = 1 (an "auto / 1" column)."""
  return {"auto", "1"} <= set(settings)


def header(settings, aa):
  """The table's two header lines."""
  columns = (["script", "tf.Session (s)"] +
             [c for r in settings
              for c in (f"--replicas {r} (s)", "ratio to tf")] +
             (["auto / 1"] if _auto_and_one(settings) else []) +
             (["A/A", "A/A range"] if aa else []) +
             ["accuracy", "loss", "last tuned L"])
  return ["| " + " | ".join(columns) + " |",
          "|" + " --- |" * len(columns)]


def row(script, results, settings):
  """The table line of `script` from `results`: {session: [run()'s
  tuple per repeat]}, with an AA session if A/A was run."""
  median = {name: [statistics.median(r[i] for r in runs)
                   for i in range(3)] for name, runs in results.items()}
  cells = [script, f"{median['tf'][0]:.1f}"]
  for r in settings:
    cells += [f"{median[r][0]:.1f}", f"{median[r][0] / median['tf'][0]:.2f}"]
  if _auto_and_one(settings):
    cells.append(f"{median['auto'][0] / median['1'][0]:.2f}")
  if AA in results:
    paired = [again[0] / first[0]
              for first, again in zip(results["tf"], results[AA])]
    cells += [f"{median[AA][0] / median['tf'][0]:.2f}",
              f"{min(paired):.2f}-{max(paired):.2f}"]
  for i in (1, 2):
    text = " / ".join(f"{median[n][i]:.4f}" for n in results)
    if AA in results:
      tf_values = [r[i] for n in ("tf", AA) for r in results[n]]
      text += f" (tf {min(tf_values):.4f}-{max(tf_values):.4f})"
    cells.append(text)
  cells.append("; ".join(
      f"{r}: " + ", ".join("none" if x[3] is None else str(x[3])
                           for x in results[r]) for r in settings))
  return "| " + " | ".join(cells) + " |"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", default="auto",
                      help="comma list: each is run, e.g. auto,1")
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--aa", action="store_true",
                      help="run TensorFlow again last in each repeat (A/A)")
  parser.add_argument("scripts", nargs="*", default=list(DEFAULT))
  args = parser.parse_args(argv)
  settings = args.replicas.split(",")
  sessions = sessions_for(settings, args.aa)
  print("\n".join(header(settings, args.aa)))
  for script in args.scripts:
    results = {name: [] for name in sessions}
    for _ in range(args.repeats):
      for name, command in sessions.items():
        results[name].append(run(command(script)))
    print(row(script, results, settings), flush=True)


if __name__ == "__main__":
  main()
