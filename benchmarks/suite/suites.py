"""The benchmark suites: TensorBow against tf.compat.v1.Session.

Each suite returns a JSON-ready dict: its parameters, "rows" (one per
measured configuration) and "derived" (the ratios the targets are stated
in). Throughput suites measure their configurations interleaved in one
process (harness.interleave); time-to-accuracy runs are one run each.
"""
import statistics
import time

import numpy as np
import tensorflow as tf

from models import data as tb_data
from benchmarks.suite import harness
from tensorbow.session import TensorBowSession


def replicas(models, batch_sizes, replica_counts, algorithms, repeats,
             seconds, log=None):
  """Images/s against L, per model and batch size, with "sma" and "none".

  Per (model, batch size) one interleaved group: TF and TensorBow at every
  L and algorithm, the algorithms of one L measured next to each other.
  Derived: TensorBow's ratio to TF, and the cost of synchronisation at
  each L, twice: 1 - sma / none of the medians, and 1 - the median of the
  ratios taken repeat by repeat ("sma_cost_paired", with the 95 % interval
  of that median, "sma_cost_interval"), which cancels the drift between
  repeats that scatters the first.
  """
  rows, derived = [], []
  for model in models:
    for batch in batch_sizes:
      group = [harness.Throughput(model, "tf", batch)]
      configs = {(r, a): harness.Throughput(model, "tensorbow", batch, r, a)
                 for a in algorithms for r in replica_counts}
      group += configs.values()
      harness.interleave(
          group[:1] + [configs[r, a] for r in replica_counts
                       for a in algorithms], repeats, seconds, log)
      records = [c.record() for c in group]
      for c in group:
        c.close()
      tf_median = records[0]["median"]
      for rec in records:
        rec["vs_tf"] = rec["median"] / tf_median
      rows.extend(records)
      by_key = {(r["replicas"], r["algorithm"]): r for r in records[1:]}
      for r in replica_counts:
        sma, none = by_key.get((r, "sma")), by_key.get((r, "none"))
        paired = (harness.paired_ratio(configs[r, "sma"], configs[r, "none"])
                  if sma and none else None)
        interval = paired and paired["interval"]
        derived.append(dict(
            model=model, batch_size=batch, replicas=r,
            sma_vs_tf=sma and sma["vs_tf"], none_vs_tf=none and none["vs_tf"],
            sma_cost=(1 - sma["median"] / none["median"]
                      if sma and none else None),
            sma_cost_paired=paired and 1 - paired["median"],
            sma_cost_interval=interval and [1 - interval[1],
                                            1 - interval[0]]))
  return {"models": models, "batch_sizes": batch_sizes,
          "replicas": replica_counts, "algorithms": algorithms,
          "repeats": repeats, "seconds": seconds, "rows": rows,
          "derived": derived}


def auto(models, batch_sizes, replica_counts, repeats, seconds, log=None):
  """Images/s of replicas="auto" against fixed L and TF, per run batch.

  Per (model, rows per run B) one interleaved group: TF at batch B,
  TensorBow at each fixed L of `replica_counts` that divides B (B/L rows a
  replica), and TensorBow with replicas="auto" fed B rows, measured once
  its tuner has settled (the tuning runs are not measured). Derived: auto
  over the best fixed L and over TF, and what auto chose.
  """
  rows, derived = [], []
  for model in models:
    for batch_size in batch_sizes:
      fixed = [harness.Throughput(model, "tensorbow", batch_size // r, r)
               for r in replica_counts if batch_size % r == 0]
      tuned = harness.Throughput(model, "tensorbow", batch_size, "auto")
      tuning_runs = tuned.settle()
      if log is not None:
        log(f"{tuned.name}: settled after {tuning_runs} runs at "
            f"L={tuned.session.replicas}")
      group = [harness.Throughput(model, "tf", batch_size)] + fixed + [tuned]
      records = harness.interleave(group, repeats, seconds, log)
      for c in group:
        c.close()
      tf_median = records[0]["median"]
      for rec in records:
        rec["rows_per_run"] = batch_size
        rec["vs_tf"] = rec["median"] / tf_median
      best = max(records[1:-1], key=lambda r: r["median"])
      derived.append(dict(
          model=model, rows_per_run=batch_size,
          auto_replicas=records[-1]["chosen_replicas"],
          auto_stream_groups=records[-1]["chosen_stream_groups"],
          auto_inline=records[-1]["chosen_inline"],
          tuning_runs=tuning_runs, best_fixed_replicas=best["replicas"],
          auto_vs_best_fixed=records[-1]["median"] / best["median"],
          auto_vs_tf=records[-1]["vs_tf"], best_fixed_vs_tf=best["vs_tf"]))
      rows.extend(records)
  return {"models": models, "batch_sizes": batch_sizes,
          "replicas": replica_counts, "repeats": repeats, "seconds": seconds,
          "rows": rows, "derived": derived}


def batch(model, batch_sizes, replica_counts, repeats, seconds, log=None):
  """Images/s against the batch size: TF, and TensorBow at each L (SMA).

  One interleaved group. Derived: each configuration's ratio to TF at the
  largest batch size (the machine's large-batch throughput).
  """
  group = [harness.Throughput(model, "tf", b) for b in batch_sizes]
  group += [harness.Throughput(model, "tensorbow", b, r)
            for r in replica_counts for b in batch_sizes]
  records = harness.interleave(group, repeats, seconds, log)
  for c in group:
    c.close()
  large = records[len(batch_sizes) - 1]["median"]
  for rec in records:
    rec["vs_tf_largest_batch"] = rec["median"] / large
  return {"model": model, "batch_sizes": batch_sizes,
          "replicas": replica_counts, "repeats": repeats, "seconds": seconds,
          "rows": records}


def tta(target, tf_batch_sizes, tensorbow_batch_sizes, tensorbow_replicas,
        max_epochs, learning_rate, train_size=None, log=None, previous=None):
  """Time and epochs to `target` test accuracy, LeNet on Fashion-MNIST.

  One run per configuration (they take minutes each), TF at every batch
  size and TensorBow at every (batch size, L). Derived: the best (least
  wall time among runs that reached the target) of each and their ratio.

  `previous`, an earlier result of this suite with the same target, epochs,
  learning rate and training set, contributes its rows: its configurations
  are not run again, so a sweep can be completed over several sessions.

  Raises:
    ValueError: `previous` was run with other settings.
  """
  settings = {"target": target, "max_epochs": max_epochs,
              "learning_rate": learning_rate, "train_size": train_size}
  rows = []
  if previous is not None:
    differ = {k: (previous.get(k), v) for k, v in settings.items()
              if previous.get(k) != v}
    if differ:
      raise ValueError(f"the previous tta result was run with other "
                       f"settings (previous, now): {differ}")
    rows = list(previous["rows"])
  done = {(r["session"], r["batch_size"], r["replicas"]) for r in rows}
  runs = [("tf", b, 1) for b in tf_batch_sizes]
  runs += [("tensorbow", b, r) for b in tensorbow_batch_sizes
           for r in tensorbow_replicas]
  runs = [run for run in runs if run not in done]
  dataset = (tb_data.load_dataset("fashion_mnist", train_size=train_size)
             if runs else None)
  for session, b, r in runs:
    result = harness.time_to_accuracy("lenet", session, b, r, target,
                                      max_epochs, learning_rate, dataset)
    rows.append(result)
    if log is not None:
      log(f"{session} b{b} L={r}: accuracy {result['test_accuracy']:.4f} "
          f"after {result['epochs']:.2f} epochs, {result['wall_time']:.1f} s"
          f" ({result['stop_reason']})")

  rows.sort(key=lambda r: (r["session"] != "tf", r["batch_size"],
                           r["replicas"]))

  def best(session):
    reached = [r for r in rows if r["session"] == session and r["reached"]]
    return min(reached, key=lambda r: r["wall_time"]) if reached else None

  best_tf, best_tb = best("tf"), best("tensorbow")
  return {**settings, "rows": rows, "best_tf": best_tf,
          "best_tensorbow": best_tb,
          "ratio": (best_tb["wall_time"] / best_tf["wall_time"]
                    if best_tf and best_tb else None)}


def _trivial_graph():
  """The smallest training graph: one scalar weight, SGD on mean(w * x)."""
  graph = tf.Graph()
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
    w = tf.compat.v1.get_variable("w", initializer=1.0)
    loss = tf.reduce_mean(w * x)
    train = tf.compat.v1.train.GradientDescentOptimizer(1e-6).minimize(loss)
    init = tf.compat.v1.global_variables_initializer()
  return graph, x, train, init


def overhead(replica_counts, repeats, seconds, log=None):
  """Per-task cost of a trivial learning task against Session.run's.

  TF: seconds per `tf.compat.v1.Session.run` of the trivial training step.
  TensorBow ("none": no synchronisation), at each L: seconds per wave / L,
  which spreads the Python cost of one `run` over L tasks, and the median
  C++ task time from `task_timings()` (one TF_SessionRun of the trivial
  graph by a worker). Interleaved; derived: ratios to TF's per-call cost.
  """
  configs = []
  graph, x, train, init = _trivial_graph()
  plain = tf.compat.v1.Session(graph=graph)
  plain.run(init)
  configs.append(("tf", 1, plain, x, train))
  for r in replica_counts:
    graph, x, train, init = _trivial_graph()
    sess = TensorBowSession(graph=graph, replicas=r, algorithm="none")
    sess.run(init)
    configs.append(("tensorbow", r, sess, x, train))
  samples = {i: [] for i in range(len(configs))}
  task_times = {i: [] for i in range(len(configs))}
  for rep in range(repeats):
    for i, (kind, r, sess, x, train) in enumerate(configs):
      feed = {x: np.ones(r, np.float32)}
      for _ in range(20):
        sess.run(train, feed)
      if kind == "tensorbow":
        sess.clear_task_timings()
      calls = 0
      start = time.perf_counter()
      while time.perf_counter() - start < seconds:
        sess.run(train, feed)
        calls += 1
      per_task = (time.perf_counter() - start) / (calls * r)
      samples[i].append(per_task)
      if kind == "tensorbow":
        task_times[i].extend(t.end - t.start for t in sess.task_timings()
                             if t.replica >= 0)
      if log is not None:
        log(f"repeat {rep + 1}/{repeats} {kind} L={r}: "
            f"{per_task * 1e6:.1f} us per task")
  rows = []
  tf_cost = statistics.median(samples[0])
  for i, (kind, r, sess, _, _) in enumerate(configs):
    rec = dict(session=kind, replicas=r,
               **harness.summary([s * 1e6 for s in samples[i]]))
    rec["unit"] = "us per task"
    rec["vs_tf"] = statistics.median(samples[i]) / tf_cost
    if task_times[i]:
      rec["cpp_task_median_us"] = statistics.median(task_times[i]) * 1e6
      rec["cpp_task_vs_tf"] = statistics.median(task_times[i]) / tf_cost
    rows.append(rec)
    sess.close()
  return {"replicas": replica_counts, "repeats": repeats, "seconds": seconds,
          "rows": rows}
