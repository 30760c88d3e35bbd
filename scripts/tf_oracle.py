"""Runs TensorFlow's own session tests with TensorBowSession standing in.

    .venv/bin/python scripts/tf_oracle.py [--replicas 2] TEST_FILE...

TensorFlow's test files (`tensorflow/python/client/session_test.py`,
`session_partial_run_test.py`, `tensorflow/python/training/
gradient_descent_test.py`) are not in its wheel and not in this
repository: give their paths (copies of TensorFlow's sources). Each file
runs four times, each in a fresh pytest process: with
`tf.compat.v1.Session` and with `TensorBowSession(replicas=N)`, in both
TF1 modes (scripts/tf_oracle_plugin.py). Prints, per file and mode, how
many tests pass with each, and the tests that pass with TensorFlow's
session and not with TensorBow's.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(path, mode, session, replicas):
  """({test id: outcome}, TensorBowSessions made) of one pytest process
  over `path`."""
  with tempfile.TemporaryDirectory() as tmp:
    report = os.path.join(tmp, "report.xml")
    count = os.path.join(tmp, "count")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ORACLE_COUNT=count)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT, os.path.join(ROOT, "scripts"), env.get("PYTHONPATH", "")])
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", os.devnull,
         "--rootdir", os.path.dirname(os.path.abspath(path)),
         "-p", "tf_oracle_plugin", "-p", "no:cacheprovider",
         f"--tf-mode={mode}", f"--oracle-session={session}",
         f"--oracle-replicas={replicas}", f"--junitxml={report}", path],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        check=False, timeout=3600)
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
      name = f"{case.get('classname')}.{case.get('name')}"
      kinds = [child.tag for child in case]
      outcomes[name] = ("failed" if "failure" in kinds or "error" in kinds
                        else "skipped" if "skipped" in kinds else "passed")
    with open(count) as f:
      return outcomes, int(f.read())


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--replicas", type=int, default=2)
  parser.add_argument("--modes", default="v1,graph")
  parser.add_argument("files", nargs="+")
  args = parser.parse_args(argv)
  missing = 0
  for path in args.files:
    for mode in args.modes.split(","):
      plain, _ = run(path, mode, "tf", args.replicas)
      ours, made = run(path, mode, "tensorbow", args.replicas)
      passing = sorted(n for n, o in plain.items() if o == "passed")
      lost = [n for n in passing if ours.get(n) != "passed"]
      missing += len(lost)
      print(f"{os.path.basename(path)} [{mode}]: {len(plain)} tests; "
            f"pass with Session {len(passing)}, with TensorBowSession"
            f"(replicas={args.replicas}) "
            f"{sum(o == 'passed' for o in ours.values())} ({made} "
            f"TensorBowSessions made); "
            f"pass with Session only: {len(lost)}")
      for name in lost:
        print(f"  {name}: {ours.get(name, 'not run')}")
  return 1 if missing else 0


if __name__ == "__main__":
  sys.exit(main())
