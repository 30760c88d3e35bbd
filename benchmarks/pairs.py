"""Two commands timed against each other as whole processes, in turn.

    PYTHONPATH=. .venv/bin/python -m benchmarks.pairs [-n 5] [--warmup 1] \
        [--cwd DIR] --vs "COMMAND B" -- COMMAND A ...

Runs each command `--warmup` times unmeasured, then `-n` pairs in turn (A,
B, A, B, ...), each a child process whose output is thrown away. Per run
it takes the wall time, the user and system CPU seconds and the peak
resident memory (the child's resource usage, from wait4). Prints, per
measure, the min, median and max of A's runs, of B's and of A/B over the
pairs (pair i's A over its B): the ratio of the medians and the spread of
the pairs' ratios are the figures to quote. Interleaving puts a slow
spell of the machine on both commands alike.

A command that exits non-zero stops the run, with the end of its stderr.
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

MEASURES = ("wall s", "user s", "sys s", "cpu s", "peak MiB")


def measure(command, cwd=None):
  """{measure: value} of one run of `command` (a list), or RuntimeError
  with its stderr's end if it fails."""
  with tempfile.TemporaryFile() as stderr:
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=stderr)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
      stderr.seek(0)
      raise RuntimeError(
          f"{shlex.join(command)} exited {child.returncode}:\n"
          f"{stderr.read().decode(errors='replace')[-2000:]}")
  return {"wall s": wall, "user s": usage.ru_utime,
          "sys s": usage.ru_stime, "cpu s": usage.ru_utime + usage.ru_stime,
          "peak MiB": usage.ru_maxrss / 1024.0}  # KiB on Linux


def summary(a_runs, b_runs):
  """{measure: {"A"|"B"|"A/B": (min, median, max)}} of paired runs: A's,
  B's and pair i's A over its B."""
  rows = {}
  for name in MEASURES:
    a = [run[name] for run in a_runs]
    b = [run[name] for run in b_runs]
    ratios = [x / y for x, y in zip(a, b) if y > 0]
    rows[name] = {label: _spread(values) for label, values in
                  (("A", a), ("B", b), ("A/B", ratios)) if values}
  return rows


def run_pairs(a, b, pairs, warmup=0, cwd=None):
  """(A's runs, B's runs): `warmup` unmeasured runs of each, then `pairs`
  measured runs of each in turn, A first."""
  for _ in range(warmup):
    measure(a, cwd)
    measure(b, cwd)
  a_runs, b_runs = [], []
  for _ in range(pairs):
    a_runs.append(measure(a, cwd))
    b_runs.append(measure(b, cwd))
  return a_runs, b_runs


def report(a, b, rows, pairs):
  """The printed table of `summary`'s rows."""
  lines = [f"A = {shlex.join(a)}", f"B = {shlex.join(b)}",
           f"{pairs} pairs, in turn (A B A B ...), whole processes",
           f"{'':14}{'min':>10}{'median':>10}{'max':>10}"]
  for label in ("A", "B", "A/B"):
    for name, by_label in rows.items():
      if label in by_label:
        low, mid, high = by_label[label]
        digits = 4 if label == "A/B" else 3
        lines.append(f"{label + ' ' + name:14}{low:>10.{digits}f}"
                     f"{mid:>10.{digits}f}{high:>10.{digits}f}")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(
      description="Two commands timed against each other, in turn.")
  parser.add_argument("-n", "--pairs", type=int, default=5)
  parser.add_argument("--warmup", type=int, default=1)
  parser.add_argument("--cwd", default=None)
  parser.add_argument("--vs", required=True, help="command B, quoted")
  parser.add_argument("command", nargs=argparse.REMAINDER,
                      help="command A, after --")
  args = parser.parse_args(argv)
  a = args.command[1:] if args.command[:1] == ["--"] else args.command
  if not a or args.pairs < 1:
    parser.error("give command A after -- and at least one pair")
  b = shlex.split(args.vs)
  a_runs, b_runs = run_pairs(a, b, args.pairs, args.warmup, args.cwd)
  print(report(a, b, summary(a_runs, b_runs), args.pairs))


def _spread(values):
  return min(values), statistics.median(values), max(values)


if __name__ == "__main__":
  sys.exit(main())
