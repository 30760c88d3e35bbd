"""TensorBow's throughput at two commits, interleaved: did a change cost speed?

    PYTHONPATH=. .venv/bin/python -m benchmarks.trees --before REV \
        [--after REV] [--runs 5] -- SUITE_ARGS...

SUITE_ARGS are `python -m benchmarks.suite replicas ...`'s (one repeat a
run is enough: the runs are the repeats). Each commit is checked out in a
worktree of its own; the libraries this checkout built are used for both,
so the C++ sources must be the same at both commits, unless
`--before-libraries DIR` names a directory holding the libraries built
from the before commit's sources (e.g. a copy of tensorbow/*.so made
then). The runs alternate (before, after, before, ...), each a process of
its own. Prints, per
configuration, TensorBow's median images/s at each commit, the median of
its ratio to TensorFlow's in the same process (which machine drift between
processes moves less), and after / before of each.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args):
  return subprocess.run(["git", "-C", ROOT, *args], check=True,
                        capture_output=True, text=True).stdout.strip()


def _checkout(rev, folder, libraries):
  """A worktree of `rev` in `folder`, with the libraries in directory
  `libraries`."""
  _git("worktree", "add", "--detach", folder, rev)
  for library in glob.glob(os.path.join(libraries, "*.so")):
    shutil.copy(library, os.path.join(folder, "tensorbow"))
  return folder


def _rows(tree, suite_args, out):
  """TensorBow's rows of one run of the suite in `tree`."""
  env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="2")
  subprocess.run([sys.executable, "-m", "benchmarks.suite", *suite_args,
                  "--out", out], cwd=tree, env=env, check=True,
                 capture_output=True)
  with open(os.path.join(out, suite_args[0] + ".json")) as f:
    rows = json.load(f)["rows"]
  return {(r["model"], r["batch_size"], r["replicas"], r["algorithm"]):
          (r["median"], r["vs_tf"])
          for r in rows if r["session"] == "tensorbow"}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--before", required=True)
  parser.add_argument("--after", default="HEAD")
  parser.add_argument("--runs", type=int, default=5)
  parser.add_argument(
      "--before-libraries", metavar="DIR",
      help="the libraries built from the before commit's C++ sources "
      "(default: this checkout's, which needs the same sources)")
  parser.add_argument("suite_args", nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  suite_args = [a for a in args.suite_args if a != "--"]
  own = os.path.join(ROOT, "tensorbow")
  libraries = {"before": args.before_libraries or own, "after": own}
  if args.before_libraries is None and _git(
      "diff", "--name-only", args.before, args.after, "--", "cc"):
    parser.error(f"the C++ sources differ between {args.before} and "
                 f"{args.after}: give --before-libraries, the libraries "
                 "built from the before commit's sources")
  if not glob.glob(os.path.join(libraries["before"], "*.so")):
    parser.error(f"no libraries (*.so) in {libraries['before']}")
  # Resolved now: a branch may move while the runs go on.
  revs = {side: _git("rev-parse", "--short", getattr(args, side))
          for side in ("before", "after")}
  work = tempfile.mkdtemp(prefix="tensorbow_trees_")
  trees = {}
  try:
    for side in ("before", "after"):
      trees[side] = _checkout(revs[side], os.path.join(work, side),
                              libraries[side])
    seen = {"before": [], "after": []}
    for run in range(args.runs):
      for side in ("before", "after"):
        seen[side].append(_rows(trees[side], suite_args,
                                os.path.join(work, f"out_{side}_{run}")))
        print(f"run {run + 1} of {args.runs}: {side} done", file=sys.stderr,
              flush=True)
  finally:
    for tree in trees.values():
      _git("worktree", "remove", "--force", tree)
    shutil.rmtree(work, ignore_errors=True)
  print(f"before {args.before} ({revs['before']}, libraries in "
        f"{libraries['before']}), after {args.after} ({revs['after']}), "
        f"{args.runs} runs each, alternated: "
        f"python -m benchmarks.suite {' '.join(suite_args)}\n")
  print("| model | batch | L | algorithm | before img/s | after img/s | "
        "after / before | before vs TF | after vs TF | after / before |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for key in sorted(seen["before"][0], key=str):
    rate = {s: statistics.median(r[key][0] for r in seen[s]) for s in seen}
    vs_tf = {s: statistics.median(r[key][1] for r in seen[s]) for s in seen}
    print(f"| {' | '.join(str(k) for k in key)} | {rate['before']:.0f} | "
          f"{rate['after']:.0f} | {rate['after'] / rate['before']:.3f} | "
          f"{vs_tf['before']:.3f} | {vs_tf['after']:.3f} | "
          f"{vs_tf['after'] / vs_tf['before']:.3f} |")


if __name__ == "__main__":
  main()
