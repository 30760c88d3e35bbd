"""Soak: many waves with injected faults, then many session lifetimes.

Waves: an MLP trained by momentum SGD under SMA for `--waves` waves; every
`--fault_every` waves one run fails, alternately by a failing assert in
one replica's shard and by a real SIGINT (sent from inside the graph, by a
py_func, while the wave computes). A clean session trained on the same
batches without the failed ones must end at the same central model; the
process's RSS is sampled as it goes.

Cycles: `--cycles` times, a graph and a session (`--cycle_kind`: TensorBow
or tf.compat.v1.Session, one kind per process, since freed memory of one
kind is reused by the other) are created, trained `--cycle_waves` waves
and closed; the RSS is sampled every ten cycles. (Sessions sharing one
graph are another matter: TensorBow's replicas then stay in that graph.)

  python -m benchmarks.soak --waves 10000 --fault_every 100 --cycles 0
  python -m benchmarks.soak --waves 0 --cycles 300 --cycle_kind tensorbow
  python -m benchmarks.soak --waves 0 --cycles 300 --cycle_kind tf
"""
import argparse
import gc
import json
import os
import platform
import signal

import numpy as np
import tensorflow as tf

import tensorbow as tb

ROWS, FEATURES, HIDDEN, CLASSES = 32, 20, 32, 5
NO_POISON = -1
_INTERRUPT = [False]


def rss_mb():
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maybe_interrupt(x):
  if _INTERRUPT[0]:
    _INTERRUPT[0] = False
    os.kill(os.getpid(), signal.SIGINT)
  return x


class Model(object):

  def __init__(self):
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.compat.v1.set_random_seed(3)
      self.x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
      self.y = tf.compat.v1.placeholder(tf.int32, [None])
      self.ids = tf.compat.v1.placeholder(tf.int32, [None])
      self.poison = tf.compat.v1.placeholder_with_default(NO_POISON, [])
      guard = tf.debugging.assert_none_equal(self.ids, self.poison)
      signal_op = tf.compat.v1.py_func(_maybe_interrupt, [self.ids],
                                       tf.int32)
      with tf.control_dependencies([guard, signal_op]):
        x = tf.identity(self.x)
      w1 = tf.compat.v1.get_variable("w1", [FEATURES, HIDDEN])
      b1 = tf.compat.v1.get_variable("b1", [HIDDEN],
                                     initializer=tf.zeros_initializer())
      w2 = tf.compat.v1.get_variable("w2", [HIDDEN, CLASSES])
      logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
      self.loss = tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y,
                                                         logits=logits))
      self.train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(
          self.loss)
      self.init = tf.compat.v1.global_variables_initializer()
      self.weights = [w1, b1, w2]

  def feeds(self, wave, poison=NO_POISON):
    rng = np.random.RandomState(wave)
    x = rng.randn(ROWS, FEATURES).astype(np.float32)
    y = (x[:, :CLASSES].argmax(1)).astype(np.int32)
    return {self.x: x, self.y: y, self.ids: np.arange(ROWS, dtype=np.int32),
            self.poison: poison}


def soak(waves, fault_every, replicas):
  """Trains with faults and without; returns the measurements."""
  m, clean = Model(), Model()
  faulted = {"assert": 0, "interrupt": 0}
  rss = []
  with tb.TensorBowSession(graph=m.graph, replicas=replicas) as sess, \
      tb.TensorBowSession(graph=clean.graph, replicas=replicas) as ref:
    sess.run(m.init)
    ref.run(clean.init)
    for wave in range(waves):
      if wave % fault_every == fault_every // 2:
        kind = "assert" if (wave // fault_every) % 2 == 0 else "interrupt"
        try:
          if kind == "assert":
            # A row of the last replica's shard.
            sess.run(m.train, m.feeds(wave, poison=ROWS - 1))
          else:
            _INTERRUPT[0] = True
            sess.run(m.train, m.feeds(wave))
        except (tf.errors.InvalidArgumentError, KeyboardInterrupt):
          faulted[kind] += 1
        else:
          raise AssertionError(f"wave {wave}: the {kind} did not fail")
        continue  # the clean session never sees this batch
      sess.run(m.train, m.feeds(wave))
      ref.run(clean.train, clean.feeds(wave))
      if wave % 500 == 0 or wave == waves - 1:
        rss.append((wave, round(rss_mb(), 1)))
    got, want = sess.run(m.weights), ref.run(clean.weights)
  difference = max(float(np.max(np.abs(a - b))) for a, b in zip(got, want))
  scale = max(float(np.max(np.abs(b))) for b in want)
  return {"waves": waves, "faults": faulted,
          "max_abs_difference": difference, "max_abs_weight": scale,
          "rss_mb": rss}


def _cycle(kind, cycle_waves, replicas):
  m = Model()
  sess = (tb.TensorBowSession(graph=m.graph, replicas=replicas)
          if kind == "tensorbow" else tf.compat.v1.Session(graph=m.graph))
  sess.run(m.init)
  for wave in range(cycle_waves):
    sess.run(m.train, m.feeds(wave))
  sess.close()


def cycles(count, cycle_waves, replicas, kind):
  """RSS after every tenth create/train/close cycle of `kind`."""
  rss = []
  for i in range(count + 1):
    if i % 10 == 0:
      gc.collect()
      rss.append((i, round(rss_mb(), 1)))
    if i < count:
      _cycle(kind, cycle_waves, replicas)
  steady = rss[len(rss) // 3]
  return {"kind": kind, "rss_mb": rss,
          "mb_per_cycle_after_a_third": round(
              (rss[-1][1] - steady[1]) / max(1, rss[-1][0] - steady[0]), 4)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--waves", type=int, default=10000)
  parser.add_argument("--fault_every", type=int, default=100)
  parser.add_argument("--replicas", type=int, default=4)
  parser.add_argument("--cycles", type=int, default=300)
  parser.add_argument("--cycle_waves", type=int, default=5)
  parser.add_argument("--cycle_kind", choices=["tensorbow", "tf"],
                      default="tensorbow")
  parser.add_argument("--tf_mode", choices=["v1", "graph"], default="v1")
  parser.add_argument("--json", help="also write the results here")
  args = parser.parse_args()
  if args.tf_mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  result = {"machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "tf_mode": args.tf_mode,
            "replicas": args.replicas}
  if args.waves:
    result["soak"] = soak(args.waves, args.fault_every, args.replicas)
    print(json.dumps(result["soak"]), flush=True)
  if args.cycles:
    result["cycles"] = cycles(args.cycles, args.cycle_waves, args.replicas,
                              args.cycle_kind)
    print(json.dumps(result["cycles"]), flush=True)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
