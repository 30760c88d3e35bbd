"""A sweep of the TF1 idiom generator's seeds (issue #61), outside CI.

    TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=.:tests .venv/bin/python \\
        -m benchmarks.sweep_idioms --seeds 200 --out /tmp/sweep_idioms

Runs the compositions of seeds [first, first + seeds) through the
generator's checks (tests/idioms/generator.py): at L = 1 against
`tf.compat.v1.Session` (to tolerance with the fast kernels; bit-equal with
`--exact`, which sets TENSORBOW_FAST_KERNELS=0), and at L = 4 against
the contract; each check bounded by `--timeout` seconds. Prints a table
of the counts (compositions, differences at L = 1, contract violations
at L = 4, hangs, other errors) and writes each failing seed's
reproduction script and error to `--out`. Last, it prints the seeds
that passed every check and, weighted by the seconds their checks took,
hold every choice of every block five times with the fewest seconds
(`generator.cover`): tests/idioms/test_generated.py's fast tier.
"""
import argparse
import collections
import os
import sys
import time
import traceback


def defect_class(composition, tier, kind, message):
  """The defect class a failure looks like, from the composition's
  choices and the error: the classes this generator's sweeps found
  (tests/idioms/test_generated.py, benchmarks/RESULTS.md)."""
  c = composition.choices
  if kind == "hang":
    return "hang"
  if "UnsplittableBatch" in message:
    return "fixed-size batch refused"
  if ("must have the same first dimension" in message or
      "Condition x == y" in message):
    return "batch given whole"
  if "TensorListPushBack" in message:
    return "fixed-size batch through a v2 while loop"
  if tier != "l4" and c["dropout"] and c["plain_run"]:
    return "random stream of plain runs"
  if tier == "l4" and kind == "difference" and "count" in message:
    return "counts not the batch's"
  if tier == "l4" and kind == "difference" and "fetch" in message:
    return "fetch not the batch's"
  return "unclassified"


def _outcome(differential, composition, tier, timeout):
  """("ok" | "difference" | "hang" | "error", message)."""
  try:
    differential.check(composition, (tier,), timeout)
    return "ok", ""
  except TimeoutError as e:
    return "hang", str(e)
  except AssertionError:
    return "difference", traceback.format_exc()
  except Exception:  # pylint: disable=broad-except
    return "error", traceback.format_exc()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seeds", type=int, default=200)
  parser.add_argument("--first", type=int, default=0)
  parser.add_argument("--tf-mode", choices=("v1", "graph"), default="v1")
  parser.add_argument("--exact", action="store_true",
                      help="TENSORBOW_FAST_KERNELS=0: bit-equal at L = 1")
  parser.add_argument("--timeout", type=float, default=120)
  parser.add_argument("--out", default="/tmp/sweep_idioms")
  args = parser.parse_args(argv)
  if args.exact:
    os.environ["TENSORBOW_FAST_KERNELS"] = "0"
  else:
    os.environ.setdefault("TENSORBOW_FAST_KERNELS", "all")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  from idioms import differential  # pylint: disable=g-import-not-at-top
  from idioms import generator  # pylint: disable=g-import-not-at-top

  os.makedirs(args.out, exist_ok=True)
  tiers = ("exact" if args.exact else "fast", "l4")
  counts = {tier: collections.Counter() for tier in tiers}
  failing = []
  seconds_of = {}  # seed -> seconds of its checks, where all passed
  start = time.time()
  for seed in range(args.first, args.first + args.seeds):
    composition = generator.generate(seed)
    began = time.time()
    for tier in tiers:
      kind, message = _outcome(differential, composition, tier,
                               args.timeout)
      counts[tier][kind] += 1
      if kind != "ok":
        failing.append((seed, tier, kind,
                        defect_class(composition, tier, kind, message)))
        stem = os.path.join(args.out, f"seed{seed}")
        with open(stem + ".py", "w") as f:
          f.write(composition.script())
        with open(f"{stem}.{tier}.txt", "w") as f:
          f.write(message)
      if kind == "hang":
        # The hung thread keeps its session: later seeds would share a
        # machine with it.
        break
    if not any(f[0] == seed for f in failing):
      seconds_of[seed] = time.time() - began
    print(f"seed {seed}: " + ", ".join(
        f"{t} {counts[t].most_common()}" for t in tiers), file=sys.stderr)
  seconds = time.time() - start
  print(f"\n{args.seeds} compositions (seeds {args.first}.."
        f"{args.first + args.seeds - 1}), --tf-mode={args.tf_mode}, "
        f"{'TENSORBOW_FAST_KERNELS=0' if args.exact else 'fast kernels'}, "
        f"{seconds:.0f} s\n")
  print("| check | ok | differences | hangs | other errors |")
  print("| --- | --- | --- | --- | --- |")
  names = {"fast": "L = 1, to tolerance", "exact": "L = 1, bit-equal",
           "l4": "L = 4, the contract"}
  for tier in tiers:
    c = counts[tier]
    print(f"| {names[tier]} | {c['ok']} | {c['difference']} | {c['hang']} "
          f"| {c['error']} |")
  print()
  classes = collections.Counter((tier, name) for _, tier, _, name in failing)
  print("| check | defect class | seeds |")
  print("| --- | --- | --- |")
  for (tier, name), n in sorted(classes.items()):
    print(f"| {names[tier]} | {name} | {n} |")
  print()
  for seed, tier, kind, name in failing:
    print(f"seed {seed} {tier} {kind}: {name}")
  print(f"\nscripts and errors in {args.out}")
  passed = sorted(seconds_of)
  chosen = generator.cover(passed, cost=seconds_of)
  print(f"\nthe fewest-seconds seeds holding every choice 5 times "
        f"({len(chosen)}, {sum(seconds_of[s] for s in chosen):.0f} s): "
        f"{tuple(chosen)}")


if __name__ == "__main__":
  main()
