"""The replica state (tensorbow/replicas.py) and the checkpoint file
(tensorbow/checkpoint.py) on their own: a ReplicaState over a small graph
of variables, its runs executed by a plain tf.compat.v1.Session, every
replica's value checked against NumPy."""
import os

import numpy as np
import pytest
import tensorflow as tf

from tensorbow import algorithms
from tensorbow import checkpoint
from tensorbow import replicas as tb_replicas
from tensorbow.rewrite import analysis
from tensorbow.rewrite import builder as tb_builder
from tensorbow.rewrite import replicate
from tensorbow.rewrite import sync

tf1 = tf.compat.v1
L = 3
W0 = np.array([[1.0, -2.0], [0.5, 4.0]], np.float32)
SLOT0 = np.array([3.0, -1.0], np.float32)


class _Setup(object):
  """A model variable `w`, a slot `slot`, a step `step` and a batch
  statistic `mean`, given replicas by a ReplicaState."""

  def __init__(self, use_resource, algorithm, share=False):
    self.graph = graph = tf.Graph()
    with graph.as_default():
      def var(name, value):
        return tf1.get_variable(name, initializer=value,
                                use_resource=use_resource)
      self.w = var("w", W0)
      self.slot = var("slot", SLOT0)
      self.step = var("step", np.float32(7.0))
      self.mean = var("mean", np.float32(0.0))
      self.init = tf1.global_variables_initializer()
    names = [v.op.name for v in (self.w, self.slot, self.step, self.mean)]
    self.info = analysis.TrainingInfo(
        ops=[], apply_ops=[], model_vars={names[0]}, slot_vars={names[1]},
        other_vars={names[2], names[3]}, batch_dependent={names[3]},
        written=set(names))
    self.algorithm = algorithm
    self.builder = tb_builder.Builder(graph, L, 1, share)
    self.state = tb_replicas.ReplicaState(self.builder, algorithm, share)
    replicated = self.state.replicated_by(self.info)
    ops = [graph.get_operation_by_name(n) for n in names
           if n in replicated]
    reseeded = self.state.add_variables(ops, self.info.model_vars)
    self.state.copied(self.info, replicate.Copied(ops, reseeded, [], {}))
    self.names = names
    self.sess = tf1.Session(graph=graph)
    self.sess.run(self.init)

  def sync_op(self, source=0):
    """The training run's synchronisation op (rewrite/sync.py)."""
    return sync.sync_op(self.builder, self.algorithm, self.state, self.info,
                        source)

  def run(self, fetches_feeds):
    if fetches_feeds is not None:
      self.sess.run(*fetches_feeds)

  def replicas(self):
    """{key: value} of every replica's state."""
    tensors = self.state.state_tensors()
    keys = sorted(tensors)
    return dict(zip(keys, self.sess.run([tensors[k] for k in keys])))

  def set_replicas(self, name, values):
    """Sets replica r's copy of variable `name` to values[r]."""
    state = self.replicas()
    state.update({f"{name}/replica_{r}": v for r, v in enumerate(values)})
    self.run(self.state.load_state_run([name], state))


@pytest.fixture(params=[True, False], ids=["resource", "ref"])
def use_resource(request):
  return request.param


def test_seeding_copies_the_central_model_to_every_replica(use_resource):
  s = _Setup(use_resource, algorithms.Independent())
  assert s.state.in_use and s.state.replicates_any([s.names[0]])
  assert s.state.replicated_variables() == sorted(s.names)
  s.run(s.state.seed_run())
  assert s.state.seed_run() is None  # seeded once
  got = s.replicas()
  for r in range(L):
    np.testing.assert_array_equal(got[f"w/replica_{r}"], W0)
    np.testing.assert_array_equal(got[f"slot/replica_{r}"], SLOT0)
    assert got[f"step/replica_{r}"] == 7.0


def test_refresh_takes_the_slots_mean_and_replica_0s_model(use_resource):
  s = _Setup(use_resource, algorithms.Independent())
  s.run(s.state.seed_run())
  slots = [SLOT0 + r for r in range(L)]
  models = [W0 * (r + 2) for r in range(L)]
  s.set_replicas("slot", slots)
  s.set_replicas("w", models)
  s.sess.run(s.state.refresh_op())
  np.testing.assert_allclose(s.sess.run(s.slot), np.mean(slots, axis=0))
  np.testing.assert_array_equal(s.sess.run(s.w), models[0])


def test_sma_keeps_its_model_its_own(use_resource):
  s = _Setup(use_resource, algorithms.SMA(1.0 / L))
  s.run(s.state.seed_run())
  s.set_replicas("w", [W0 * 5] * L)
  s.sess.run(s.state.refresh_op())
  np.testing.assert_array_equal(s.sess.run(s.w), W0)  # SMA's own update
  assert s.state.algorithm_state("w") is not None
  assert "w/sma/central_prev" in s.replicas()


def test_sync_copies_a_step_and_averages_batch_statistics(use_resource):
  s = _Setup(use_resource, algorithms.Independent())
  s.run(s.state.seed_run())
  s.set_replicas("step", [np.float32(8 + r) for r in range(L)])
  s.set_replicas("mean", [np.float32(r * r) for r in range(L)])
  s.sess.run(s.sync_op(source=1))
  assert s.sess.run(s.step) == 9.0
  np.testing.assert_allclose(s.sess.run(s.mean), np.mean([0, 1, 4]))


def test_reseeding_some_replicas_sets_them_alone(use_resource):
  s = _Setup(use_resource, algorithms.Independent())
  s.run(s.state.seed_run())
  models = [W0 * (r + 2) for r in range(L)]
  s.set_replicas("w", models)
  s.state.reseed_replicas([1])
  s.run(s.state.seed_run())
  got = s.replicas()
  # From the central model, refreshed first: for independent replicas,
  # replica 0's.
  np.testing.assert_array_equal(s.sess.run(s.w), models[0])
  np.testing.assert_array_equal(got["w/replica_0"], models[0])
  np.testing.assert_array_equal(got["w/replica_1"], models[0])
  np.testing.assert_array_equal(got["w/replica_2"], models[2])
  s.sess.run(s.w.assign(W0 * 7))
  s.state.reseed(["w"])
  s.run(s.state.seed_run())
  for r in range(L):
    np.testing.assert_array_equal(s.replicas()[f"w/replica_{r}"], W0 * 7)


def test_a_snapshot_puts_back_the_central_model_and_replicas(use_resource):
  s = _Setup(use_resource, algorithms.SMA(1.0 / L))
  s.run(s.state.seed_run())
  tensors = s.state.snapshot_tensors(["w"])
  keys = sorted(tensors)
  before = dict(zip(keys, s.sess.run([tensors[k] for k in keys])))
  before = {k: np.array(v, copy=True) for k, v in before.items()}
  s.set_replicas("w", [W0 * 9] * L)
  s.sess.run(s.w.assign(W0 * 3))
  s.run(s.state.restore_snapshot_run(["w"], before))
  np.testing.assert_array_equal(s.sess.run(s.w), W0)
  got = s.replicas()
  for key, value in got.items():
    np.testing.assert_array_equal(value, before[key])


def test_shared_variables_have_no_replicas(use_resource):
  s = _Setup(use_resource, algorithms.ASGD(), share=True)
  assert s.state.in_use and s.state.replicated_variables() == []
  assert not s.state.replicates_any(s.names)
  assert s.sync_op() is None and s.state.refresh_op() is None
  assert s.state.seed_run() is None


def test_checkpoint_state_is_read_back_only_with_its_config(tmp_path):
  prefix = os.path.join(tmp_path, "model.ckpt-1")
  config = {"replicas": 2, "algorithm": "sma", "alpha": 0.5,
            "central_momentum": 0.9}
  arrays = {"w/replica_0": W0, "w/replica_1": W0 * 2}
  checkpoint.save(prefix, config, arrays, waves=7)
  got = checkpoint.load(prefix, dict(config))
  # The count of training runs comes back apart from the replicas' state.
  assert checkpoint.pop_waves(got, 0) == 7
  assert checkpoint.pop_waves(got, 3) == 3
  assert sorted(got) == sorted(arrays)
  for k, v in arrays.items():
    np.testing.assert_array_equal(got[k], v)
  assert checkpoint.load(prefix, dict(config, replicas=4)) is None
  assert checkpoint.load(prefix + "0", config) is None
