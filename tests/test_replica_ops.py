"""Replica-suffixed variable ops (cc/ops/replica_ops.cc) against NumPy.

Each test runs the ops directly in a graph of its own: replica r's copy is
set, trained and read through a handle or reference resolved from a fed
replica index, and every aggregate (mean, stack, set) is compared with the
same computation on NumPy arrays.
"""
import numpy as np
import pytest
import tensorflow as tf

import tensorbow  # noqa: F401  (loads the op library)
from tensorbow import ops as tb_ops

tf1 = tf.compat.v1
L = 4
SHAPE = (3, 2)
LIB = tb_ops.library()


class Replicas(object):
  """One replicated variable `v` of L copies, with a fed replica index."""

  def __init__(self, dtype=tf.float32, name="v", num_replicas=L):
    self.graph = tf.Graph()
    self.sess = tf1.Session(graph=self.graph)
    self.attrs = dict(var_name=name, num_replicas=num_replicas)
    with self.graph.as_default():
      self.replica = tf1.placeholder(tf.int32, [], name="replica")
      self.value = tf1.placeholder(dtype, name="value")
      self.ids = tf1.placeholder(tf.int32, [None], name="ids")
      self.handle = LIB.tensor_bow_replica_var_handle(
          self.replica, dtype=dtype, shape=SHAPE, **self.attrs)
      self.ref = LIB.tensor_bow_replica_variable(
          self.replica, dtype=dtype, shape=SHAPE, **self.attrs)
      self.set = LIB.tensor_bow_set_replicas(self.value, self.ids,
                                             **self.attrs)
      self.set_stacked = LIB.tensor_bow_set_replicas(
          self.value, self.ids, stacked=True, **self.attrs)
      self.read = tf.raw_ops.ReadVariableOp(resource=self.handle, dtype=dtype)
      self.ref_read = tf.identity(self.ref)
      self.mean = LIB.tensor_bow_replica_mean(self.replica, dtype=dtype,
                                              shape=SHAPE, **self.attrs)
      self.pick = LIB.tensor_bow_replica_mean(
          self.replica, dtype=dtype, shape=SHAPE, mean=False, **self.attrs)
      self.stack = LIB.tensor_bow_stack_replicas(dtype=dtype, shape=SHAPE,
                                                 **self.attrs)
      if not dtype.is_floating:
        return
      self.delta = tf1.placeholder(dtype, SHAPE, name="delta")
      self.resource_step = tf.raw_ops.ResourceApplyGradientDescent(
          var=self.handle, alpha=tf.constant(0.5, dtype), delta=self.delta)
      self.ref_step = tf.raw_ops.ApplyGradientDescent(
          var=self.ref, alpha=tf.constant(0.5, dtype), delta=self.delta)

  def seed(self, values):
    self.sess.run(self.set_stacked, {self.value: np.stack(values),
                                     self.ids: np.arange(len(values))})


def _values(dtype=np.float32, seed=0):
  rng = np.random.RandomState(seed)
  return [rng.randn(*SHAPE).astype(dtype) for _ in range(L)]


def test_each_replica_index_resolves_to_its_own_copy():
  rep = Replicas()
  values = _values()
  rep.seed(values)
  for r in range(L):
    np.testing.assert_array_equal(rep.sess.run(rep.read, {rep.replica: r}),
                                  values[r])
    np.testing.assert_array_equal(
        rep.sess.run(rep.ref_read, {rep.replica: r}), values[r])


@pytest.mark.parametrize("kind", ["resource", "ref"])
def test_an_optimizer_step_trains_only_the_fed_replica(kind):
  rep = Replicas()
  values = _values()
  rep.seed(values)
  delta = np.full(SHAPE, 2.0, np.float32)
  step = rep.resource_step if kind == "resource" else rep.ref_step
  rep.sess.run(step, {rep.replica: 2, rep.delta: delta})
  expected = [v.copy() for v in values]
  expected[2] = values[2] - 0.5 * delta
  np.testing.assert_allclose(rep.sess.run(rep.stack), np.stack(expected))


def test_mean_pick_and_stack_equal_numpy():
  rep = Replicas(tf.float64)
  values = _values(np.float64, seed=1)
  rep.seed(values)
  np.testing.assert_allclose(rep.sess.run(rep.mean, {rep.replica: 0}),
                             np.mean(values, axis=0), rtol=1e-12)
  np.testing.assert_array_equal(rep.sess.run(rep.pick, {rep.replica: 3}),
                                values[3])
  np.testing.assert_array_equal(rep.sess.run(rep.stack), np.stack(values))


def test_mean_of_integers_is_the_source_replicas_value():
  rep = Replicas(tf.int64)
  values = [np.full(SHAPE, r, np.int64) for r in range(L)]
  rep.seed(values)
  np.testing.assert_array_equal(rep.sess.run(rep.mean, {rep.replica: 1}),
                                values[1])


def test_set_copies_the_value_into_the_listed_replicas_only():
  rep = Replicas()
  values = _values()
  rep.seed(values)
  new = np.ones(SHAPE, np.float32)
  rep.sess.run(rep.set, {rep.value: new, rep.ids: [1, 3]})
  expected = [values[0], new, values[2], new]
  np.testing.assert_array_equal(rep.sess.run(rep.stack), np.stack(expected))
  # Copies, not one shared buffer: training one leaves the other alone.
  rep.sess.run(rep.resource_step, {rep.replica: 1, rep.delta: new})
  np.testing.assert_array_equal(rep.sess.run(rep.read, {rep.replica: 3}),
                                new)


def test_replicas_of_two_variables_are_apart():
  rep = Replicas()
  with rep.graph.as_default():
    other = LIB.tensor_bow_stack_replicas(dtype=tf.float32, shape=SHAPE,
                                          var_name="w", num_replicas=L)
    set_other = LIB.tensor_bow_set_replicas(rep.value, rep.ids,
                                            var_name="w", num_replicas=L)
  values = _values()
  rep.seed(values)
  rep.sess.run(set_other, {rep.value: np.zeros(SHAPE, np.float32),
                           rep.ids: np.arange(L)})
  np.testing.assert_array_equal(rep.sess.run(rep.stack), np.stack(values))
  np.testing.assert_array_equal(rep.sess.run(other),
                                np.zeros((L,) + SHAPE, np.float32))


@pytest.mark.parametrize("replica", [-1, L])
def test_replica_out_of_range_is_an_error(replica):
  rep = Replicas()
  rep.seed(_values())
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"replica {replica} is not in \[0, {L}\)"):
    rep.sess.run(rep.read, {rep.replica: replica})


def test_a_replica_never_set_cannot_be_read():
  rep = Replicas()
  with pytest.raises(tf.errors.FailedPreconditionError,
                     match="replica 0 of 'v' was never set"):
    rep.sess.run(rep.stack)


def test_a_failed_set_changes_no_replica():
  rep = Replicas()
  values = _values()
  rep.seed(values)
  # The second id is out of range: the first replica must keep its value.
  with pytest.raises(tf.errors.InvalidArgumentError, match="not in"):
    rep.sess.run(rep.set, {rep.value: np.zeros(SHAPE, np.float32),
                           rep.ids: [0, L]})
  with pytest.raises(tf.errors.InvalidArgumentError, match="one row per"):
    rep.sess.run(rep.set_stacked, {rep.value: np.zeros((1,) + SHAPE,
                                                        np.float32),
                                   rep.ids: [0, 1]})
  np.testing.assert_array_equal(rep.sess.run(rep.stack), np.stack(values))


def test_a_replica_of_another_dtype_is_refused():
  rep = Replicas()
  rep.seed(_values())
  with rep.graph.as_default():
    wrong = LIB.tensor_bow_stack_replicas(dtype=tf.float64, shape=SHAPE,
                                          var_name="v", num_replicas=L)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="has dtype float, not double"):
    rep.sess.run(wrong)


def test_handles_reach_every_replica_in_order():
  rep = Replicas()
  values = _values()
  rep.seed(values)
  with rep.graph.as_default():
    handles = LIB.tensor_bow_replica_handles(dtype=tf.float32, shape=SHAPE,
                                             var_name="v", num_replicas=L)
    reads = [tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32)
             for h in handles]
  got = rep.sess.run(reads)
  for r in range(L):
    np.testing.assert_array_equal(got[r], values[r])
