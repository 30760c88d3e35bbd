"""The checks of a generated composition (tests/idioms/generator.py), on
the corpus' harness (tests/idioms/harness.py):

* `check_one_replica`: at L = 1 every fetched value and every variable
  after each run equal `tf.compat.v1.Session`'s (DESIGN.md, "L = 1 is
  plain training"): to RTOL with the fast kernels, bit-equal with
  `TENSORBOW_FAST_KERNELS=0`;
* `check_four_replicas`: at L = 4 (DESIGN.md, "What leaves the
  replicas"), the first wave's fetched values and the writes that are
  not the model's equal TensorFlow's on the whole batch (those computed
  from no random op and no batch statistics); counters of rows and
  steps, over every wave, equal TensorFlow's and the rows trained; a
  restore from a Saver over a subset leaves every variable outside it
  as it was, bit for bit, and sets those inside to what was saved
  (DESIGN.md, "Checkpoints"); and where the SMA reference applies
  (`Composition.follows_sma`) the central model after every wave equals
  it (DESIGN.md, "Synchronous model averaging").

Every check runs under `bounded`, so that a hang fails a seed instead of
the suite.
"""
import os
import threading

import numpy as np
import tensorflow as tf

from idioms import compose
from idioms import harness

TIMEOUT = 120  # seconds a composition's check may take before it "hangs"
# The fast kernels' rounding, grown over a composition's steps through
# optimizers that divide by a root of the squared gradients (Adagrad,
# RMSProp): looser than the corpus' harness.RTOL for one idiom.
RTOL, ATOL = 1e-5, 1e-6


def bounded(fn, seconds=TIMEOUT):
  """fn() in a thread; raises TimeoutError (a hang) after `seconds`."""
  outcome = {}

  def target():
    try:
      outcome["value"] = fn()
    except BaseException as e:  # pylint: disable=broad-except
      outcome["error"] = e

  thread = threading.Thread(target=target, daemon=True)
  thread.start()
  thread.join(seconds)
  if thread.is_alive():
    raise TimeoutError(f"no result in {seconds} s: a hang")
  if "error" in outcome:
    raise outcome["error"]
  return outcome.get("value")


def trace(composition, make_session):
  """Per run of the composition's schedule: (fetched values, {variable:
  value} after the run), of every global and local variable."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(harness.SEED)
    program = composition.program()
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
    variables = (tf.compat.v1.global_variables() +
                 tf.compat.v1.local_variables())
  runs = []
  with make_session(graph) as sess:
    sess.run(init)
    ctx = program["prepare"](sess)
    for i, kind in enumerate(composition.schedule):
      fetched = program["run"](sess, kind, i, ctx)
      values = sess.run([v.value() for v in variables])
      runs.append((fetched, dict(zip([v.name for v in variables], values))))
  return runs


def check_one_replica(composition, exact, expected):
  """At L = 1 every fetch and every variable after each run equal
  TensorFlow's (`expected`, its trace): bit-equal (`exact`) or to
  RTOL."""
  actual = trace(composition, harness.tb_session(1))
  # Batch normalisation scales the fast kernels' rounding up by the
  # inverse of the batch's deviation.
  rtol, atol = (RTOL, ATOL * (10 if composition.mixes_rows else 1))
  for i, ((fetched, state), (fetched_tb, state_tb)) in enumerate(
      zip(expected, actual)):
    assert sorted(fetched_tb) == sorted(fetched), i
    for key in fetched:
      harness.assert_same(fetched_tb[key], fetched[key],
                          f"run {i}, fetch {key}", exact, rtol, atol)
    assert sorted(state_tb) == sorted(state)
    for name, value in state.items():
      harness.assert_same(state_tb[name], value, f"run {i}, {name}", exact,
                          rtol, atol)


def _is_count(name):
  """Variables that count rows or steps, whatever the weights are."""
  return (name.startswith(("rows_", "steps_", "global_step")) or
          name.endswith("/count:0"))


def _is_model_or_optimizers(name, trainable):
  return (name in trainable or "_power" in name or
          any(name.startswith(t[:-len(":0")] + "/") for t in trainable))


def _assert_l4(actual, expected, what):
  expected, actual = np.asarray(expected), np.asarray(actual)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
  if np.issubdtype(expected.dtype, np.inexact):
    np.testing.assert_allclose(actual, expected, rtol=harness.L4_RTOL,
                               atol=harness.L4_ATOL, err_msg=what)
  else:
    np.testing.assert_array_equal(actual, expected, err_msg=what)


def _trainable(composition):
  graph = tf.Graph()
  with graph.as_default():
    composition.program()
  return set(v.name for v in graph.get_collection(
      tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES))


def _assert_first_wave(composition, expected, actual, trainable):
  """The first run trains; every replica starts from the central model.
  Its fetches and the writes that are not the model's are the whole
  batch's, unless drawn or mixed over rows (batch statistics)."""
  (fetched, state), (fetched_tb, state_tb) = expected[0], actual[0]
  per_replica = composition.random or composition.mixes_rows
  for key, value in fetched.items():
    if value is None:
      assert fetched_tb[key] is None, key
    elif not per_replica or key == "rows":
      _assert_l4(fetched_tb[key], value, f"first wave, fetch {key}")
  for name, value in state.items():
    if _is_model_or_optimizers(name, trainable):
      continue
    if per_replica and not _is_count(name):
      continue  # a metric's total of drawn or batch-normalised values
    _assert_l4(state_tb[name], value, f"first wave, {name}")


def _assert_counts(composition, expected, actual):
  """Counts over every wave equal TensorFlow's."""
  final, final_tb = expected[-1][1], actual[-1][1]
  counts = [n for n in final if _is_count(n)]
  for name in counts:
    _assert_l4(final_tb[name], final[name], f"count {name}")
  # Where TensorFlow counts every row trained, so must TensorBow; where
  # it does not (a restore set the count back, a dead step), it must
  # count as TensorFlow does (above).
  rows = compose.BATCH * composition.schedule.count("train")
  for name in counts:
    if name.startswith("rows_") and final[name] == rows:
      assert final_tb[name] == rows, (name, final_tb[name], rows)


def _assert_restored(composition, actual, saved):
  """After the restore, the saved variables are what the save saved and
  every other variable is as before it, bit for bit."""
  schedule = composition.schedule
  at_save = actual[schedule.index("save")][1]
  r = schedule.index("restore")
  before, after = actual[r - 1][1], actual[r][1]
  for name, value in after.items():
    if name in saved:
      np.testing.assert_array_equal(value, at_save[name],
                                    err_msg=f"{name} restored")
    else:
      np.testing.assert_array_equal(value, before[name],
                                    err_msg=f"{name}, not saved")


def check_four_replicas(composition, expected, replicas=harness.REPLICAS):
  """The contract at L = `replicas` (DESIGN.md, "What leaves the
  replicas"), as the module's docstring lists it; `expected` is
  TensorFlow's trace."""
  actual = trace(composition, harness.tb_session(replicas))
  _assert_first_wave(composition, expected, actual, _trainable(composition))
  _assert_counts(composition, expected, actual)
  if composition.choices["saver"] is not None:
    graph = tf.Graph()
    with graph.as_default():
      saved = set(composition.program()["saved"])
    _assert_restored(composition, actual, saved)
  if composition.follows_sma:
    _assert_follows_sma(composition, actual, replicas)


def _assert_follows_sma(composition, actual, replicas):
  """The central model after the last wave equals the harness's SMA
  reference, and so do the fetched mean losses."""
  reference = composition.reference().idiom()
  expected_runs, expected_vars = harness.sma_reference(reference, replicas)
  if composition.choices["loss"] in ("mean", "two_summed"):
    for i, merged in enumerate(expected_runs):
      # tf.nest flattens a dict in its keys' order.
      loss = actual[i][0]["loss"]
      k = sorted(actual[i][0]).index("loss")
      # The reference merges in float64 (harness.merge).
      _assert_l4(loss, np.asarray(merged[k], loss.dtype), f"run {i}, loss")
  state_tb = actual[-1][1]
  # Under batch normalisation the layers before it get gradients of
  # near-cancelling terms, which Adam-like optimizers scale up: a fixed
  # batch's kernels round them apart from the reference's by more.
  rtol = harness.L4_RTOL * (10 if composition.mixes_rows else 1)
  for name, value in expected_vars.items():
    np.testing.assert_allclose(state_tb[name], value, rtol=rtol,
                               atol=harness.L4_ATOL, err_msg=name)


def check(composition, tiers, timeout=TIMEOUT):
  """Runs the checks of `tiers` ("fast", "exact", "l4") on one trace of
  TensorFlow's, bounded in time together."""
  if "exact" in tiers:
    assert os.environ.get("TENSORBOW_FAST_KERNELS") == "0", (
        "the exact tier needs TENSORBOW_FAST_KERNELS=0")

  def run():
    expected = trace(composition, harness.tf_session)
    for tier in tiers:
      if tier == "l4":
        check_four_replicas(composition, expected)
      else:
        check_one_replica(composition, tier == "exact", expected)

  return bounded(run, timeout)
