"""A `Saver` over some of the variables (issue #63, contract rule 12):
TensorBow's state beside its checkpoint is theirs alone, under the names
the Saver gives them, and restoring it leaves every other variable's
state — central value, replicas, slots, the algorithm's buffers — and the
count of waves bit-identical (tensorbow/checkpoint.py).

Each test trains a two-layer model, saves the hidden layer's kernel with a
renaming Saver after 5 waves, trains 60 more, restores it, and compares a
full Saver's checkpoint and state taken just before and just after the
restore (the state the next wave starts from) with the one taken at the
save.
"""
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.cli import launch

from children import child_env

tf1 = tf.compat.v1
RNG = np.random.RandomState(13)
XS = RNG.randn(4, 12, 3).astype(np.float32)
YS = RNG.randn(4, 12, 1).astype(np.float32)
SAVED_AT, TRAINED_ON = 5, 60
SUBSET = {"features/kernel": "hidden/w"}  # the renaming Saver's var_list
TWO_CPUS = tf1.ConfigProto(device_count={"CPU": 2})


class Model(object):
  """Two dense layers under Momentum, with a Saver of the hidden kernel
  renamed (`partial`) and one of every variable (`full`)."""

  def __init__(self):
    self.graph = tf.Graph()
    with self.graph.as_default():
      self.x = tf1.placeholder(tf.float32, [None, 3])
      self.y = tf1.placeholder(tf.float32, [None, 1])
      init = tf1.initializers.random_normal(seed=3)
      hidden_w = tf1.get_variable("hidden/w", [3, 4], initializer=init)
      hidden_b = tf1.get_variable("hidden/b", [4], initializer=init)
      head_w = tf1.get_variable("head/w", [4, 1], initializer=init)
      head_b = tf1.get_variable("head/b", [1], initializer=init)
      hidden = tf.nn.relu(tf.matmul(self.x, hidden_w) + hidden_b)
      loss = tf.reduce_mean(tf.square(tf.matmul(hidden, head_w) + head_b -
                                      self.y))
      self.train = tf1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
      self.init = tf1.global_variables_initializer()
      self.partial = tf1.train.Saver(var_list={
          name: hidden_w for name in SUBSET})
      self.full = tf1.train.Saver()

  def wave(self, sess, step):
    sess.run(self.train, {self.x: XS[step % 4], self.y: YS[step % 4]})


def _state(sess, model, prefix):
  """{key: value} of every variable's central value (`central:<name>`)
  and TensorBow's state, from a full Saver's checkpoint at `prefix`."""
  model.full.save(sess, prefix, write_meta_graph=False, write_state=False)
  return _read_state(prefix)


def _read_state(prefix, state_file=None):
  """What _state returns, from the files at `prefix` (the replicas' state
  from `state_file`, default the one process's)."""
  reader = tf.train.load_checkpoint(prefix)
  values = {f"central:{name}": reader.get_tensor(name)
            for name in reader.get_variable_to_shape_map()}
  state_file = state_file or prefix + ".tensorbow.npz"
  if os.path.exists(state_file):  # none before the replicas are copied
    with np.load(state_file) as data:
      values.update((k, data[k]) for k in data.files)
  return values


def _of_subset(key):
  """Whether `key` is the state of the restored variable (not its slot)."""
  return (key == "central:hidden/w" or
          re.match(r"hidden/w/(replica_\d+|sma/|local_sgd/)", key) is not None)


def _partial_restore(tmp_path, **options):
  """(state at the save, just before the restore, just after it, keys of
  the partial Saver's state file) of a session with `options`."""
  model = Model()
  path = str(tmp_path / "partial")
  with tb.TensorBowSession(graph=model.graph, **options) as sess:
    sess.run(model.init)
    for step in range(SAVED_AT):
      model.wave(sess, step)
    model.partial.save(sess, path, write_meta_graph=False)
    saved = _state(sess, model, str(tmp_path / "saved"))
    for step in range(SAVED_AT, SAVED_AT + TRAINED_ON):
      model.wave(sess, step)
    before = _state(sess, model, str(tmp_path / "before"))
    model.partial.restore(sess, path)
    after = _state(sess, model, str(tmp_path / "after"))
  files = set()
  if os.path.exists(path + ".tensorbow.npz"):
    with np.load(path + ".tensorbow.npz") as data:
      files = set(data.files)
  return saved, before, after, files


def _assert_scoped(saved, before, after):
  """Every key outside the subset as before the restore; the subset as
  saved; the count of waves kept."""
  assert set(after) == set(before)
  subset = sorted(k for k in after if _of_subset(k))
  others = sorted(k for k in after if not _of_subset(k) and
                  not k.startswith("__"))
  assert "central:hidden/w" in subset and "central:head/w" in others
  for key in others:
    np.testing.assert_array_equal(after[key], before[key], err_msg=key)
  for key in subset:
    np.testing.assert_array_equal(after[key], saved[key], err_msg=key)
  # Sixty waves moved both, so "as before" and "as saved" tell them apart.
  for key in ("central:hidden/w", "central:head/w"):
    assert not np.array_equal(before[key], saved[key])
  if "__waves__" in saved:
    assert int(saved["__waves__"]) == SAVED_AT
    assert int(after["__waves__"]) == int(before["__waves__"]) == (
        SAVED_AT + TRAINED_ON)


def _assert_file_is_the_subsets(files, replicas):
  """The partial Saver's state file holds its variable alone, by the
  Saver's name for it."""
  states = {k for k in files if not k.startswith("__")}
  assert all(k.startswith("features/kernel/") for k in states), states
  if replicas > 1:
    assert {f"features/kernel/replica_{r}" for r in range(replicas)} <= (
        states)


@pytest.mark.parametrize("kernels", ["0", "all"])
@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_a_partial_restore_leaves_the_other_variables_as_they_were(
    tmp_path, monkeypatch, replicas, kernels):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", kernels)
  saved, before, after, files = _partial_restore(tmp_path, replicas=replicas)
  _assert_scoped(saved, before, after)
  _assert_file_is_the_subsets(files, replicas)
  if replicas > 1:
    assert "hidden/w/sma/central_prev" in after
    assert "head/w/Momentum/replica_1" in after


def test_a_partial_restore_keeps_local_sgds_phase_and_velocity(tmp_path):
  saved, before, after, files = _partial_restore(
      tmp_path, replicas=2, algorithm=tb.algorithms.LocalSGD(
          period=3, outer_momentum=0.5))
  _assert_scoped(saved, before, after)
  _assert_file_is_the_subsets(files, 2)
  assert "head/w/local_sgd/velocity" in after


def test_a_partial_restore_on_two_devices(tmp_path):
  saved, before, after, files = _partial_restore(
      tmp_path, replicas=4, config=TWO_CPUS, devices=["/cpu:0", "/cpu:1"])
  _assert_scoped(saved, before, after)
  _assert_file_is_the_subsets(files, 4)
  assert "head/w/sma/device_1/central_prev" in after


@pytest.mark.parametrize("replicas", [1, 4])
def test_a_full_restore_resumes_exactly(tmp_path, replicas):
  """A Saver of every variable restores every variable's state and the
  count of waves, as before Savers were scoped."""
  model = Model()
  path = str(tmp_path / "saved")
  with tb.TensorBowSession(graph=model.graph, replicas=replicas) as sess:
    sess.run(model.init)
    for step in range(SAVED_AT):
      model.wave(sess, step)
    saved = _state(sess, model, path)
    for step in range(SAVED_AT, SAVED_AT + 3):
      model.wave(sess, step)
    model.full.restore(sess, path)
    after = _state(sess, model, str(tmp_path / "after"))
  assert set(after) == set(saved)
  for key in saved:
    np.testing.assert_array_equal(after[key], saved[key], err_msg=key)


# One worker of two, 2 replicas each: the scenario of _partial_restore,
# each worker's state in its own file beside the chief's checkpoint.
WORKER = """\
import sys
import numpy as np
import tensorflow as tf
{mode}
import tensorbow as tb
import test_partial_restore as t

model = t.Model()
out = sys.argv[1]
with model.graph.as_default(), tb.TensorBowSession(
    graph=model.graph, replicas=2, cluster_timeout=60.0) as sess:
  sess.run(model.init)
  for step in range(t.SAVED_AT):
    model.wave(sess, step)
  model.partial.save(sess, out + "/partial", write_meta_graph=False)
  model.full.save(sess, out + "/saved", write_meta_graph=False)
  for step in range(t.SAVED_AT, t.SAVED_AT + t.TRAINED_ON):
    model.wave(sess, step)
  model.full.save(sess, out + "/before", write_meta_graph=False)
  model.partial.restore(sess, out + "/partial")
  model.full.save(sess, out + "/after", write_meta_graph=False)
"""


@pytest.mark.slow
def test_a_partial_restore_on_two_workers(tmp_path, tf_mode_statement):
  script = tmp_path / "worker.py"
  script.write_text(WORKER.format(mode=tf_mode_statement))
  # The workers import this module and the package from this checkout.
  status = launch.run_workers(
      [sys.executable, str(script), str(tmp_path)], 2, threads=1,
      environ=child_env(os.path.dirname(os.path.abspath(__file__))))
  assert status == 0
  for worker in range(2):
    saved, before, after = (
        _read_state(str(tmp_path / name),
                    str(tmp_path / f"{name}.tensorbow-worker{worker}.npz"))
        for name in ("saved", "before", "after"))
    _assert_scoped(saved, before, after)
    with np.load(tmp_path / f"partial.tensorbow-worker{worker}.npz") as data:
      _assert_file_is_the_subsets(data.files, 2)


def test_two_partial_restores_in_a_row_keep_both(tmp_path):
  """A Saver of the hidden kernel, then one of the head's, restored with no
  training run between them: each variable takes its own Saver's state,
  the first not lost to the second (seeding.py merges what they load)."""
  model = Model()
  with model.graph.as_default():
    head = tf1.train.Saver(var_list={"head": [
        v for v in tf1.global_variables() if v.op.name == "head/w"][0]})
  first, second = str(tmp_path / "hidden"), str(tmp_path / "head")
  with tb.TensorBowSession(graph=model.graph, replicas=4) as sess:
    sess.run(model.init)
    for step in range(SAVED_AT):
      model.wave(sess, step)
    model.partial.save(sess, first, write_meta_graph=False)
    head.save(sess, second, write_meta_graph=False)
    saved = _state(sess, model, str(tmp_path / "saved"))
    for step in range(SAVED_AT, SAVED_AT + TRAINED_ON):
      model.wave(sess, step)
    before = _state(sess, model, str(tmp_path / "before"))
    model.partial.restore(sess, first)
    head.restore(sess, second)
    after = _state(sess, model, str(tmp_path / "after"))

  def restored(key):
    return _of_subset(key) or key == "central:head/w" or re.match(
        r"head/w/(replica_\d+|sma/)", key) is not None
  assert any(k.startswith("hidden/w/replica_") for k in after)
  for key in sorted(after):
    if key.startswith("__"):
      continue
    expected = saved[key] if restored(key) else before[key]
    np.testing.assert_array_equal(after[key], expected, err_msg=key)
