"""What a plain run costs beside TensorFlow's: a queue runner's enqueue.

    PYTHONPATH=. .venv/bin/python -m benchmarks.plain_runs [--calls 5000] \
        [--repeats 5] [--tf_mode v1]

A reader pipeline's queue runners run `make_callable(enqueue)` once a
record, from several threads beside the training runs. This times that
callable on a FIFOQueue of small records under tf.compat.v1.Session and
under TensorBowSession (L = 1), the two in turn, `--repeats` times
`--calls` calls each; prints the median microseconds a call of each and
their ratio.
"""
import argparse
import statistics
import time

import tensorflow as tf


def _per_call(make_session, enqueue, dequeue, calls):
  with make_session() as sess:
    call = sess.make_callable(enqueue)
    drain = sess.make_callable(dequeue)
    for _ in range(100):
      call()
    start = time.perf_counter()
    for _ in range(calls):
      call()
    seconds = time.perf_counter() - start
    drain()
  return seconds / calls * 1e6


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--calls", type=int, default=5000)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--tf_mode", choices=("v1", "graph"), default="v1")
  args = parser.parse_args(argv)
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  import tensorbow  # pylint: disable=g-import-not-at-top
  queue = tf.queue.FIFOQueue(args.calls + 200, [tf.float32], shapes=[[4]])
  enqueue = queue.enqueue([tf.ones([4])])
  dequeue = queue.dequeue_many(args.calls + 100)
  sessions = {"tf": tf.compat.v1.Session,
              "tensorbow": lambda: tensorbow.TensorBowSession(replicas=1)}
  seen = {name: [] for name in sessions}
  for _ in range(args.repeats):
    for name, make in sessions.items():
      seen[name].append(_per_call(make, enqueue, dequeue, args.calls))
  tf_us = statistics.median(seen["tf"])
  tb_us = statistics.median(seen["tensorbow"])
  print(f"enqueue callable, {args.calls} calls x {args.repeats} repeats, "
        f"{args.tf_mode} mode: tf.compat.v1.Session {tf_us:.1f} us "
        f"({min(seen['tf']):.1f}-{max(seen['tf']):.1f}), TensorBowSession "
        f"{tb_us:.1f} us ({min(seen['tensorbow']):.1f}-"
        f"{max(seen['tensorbow']):.1f}), ratio {tb_us / tf_us:.2f}")


if __name__ == "__main__":
  main()
