"""The outer step at any L, one included (DESIGN.md, "L = 1 is plain
training" and "Local SGD"): local SGD with an outer rate other than 1 or
an outer momentum -- Lookahead's slow weights (period k, rate alpha, no
momentum), an outer step with momentum, DiLoCo's and SNOO's Nesterov
step -- against its NumPy reference at L = 1 and L = 3, on TensorBow's
fast kernels and on TensorFlow's; plain runs reading the central (slow)
weights between exchanges; resumed bit-equal from a checkpoint in the
middle of a period; bit-identical across two runs. And a setting passed
explicitly that has no effect because one replica trains plainly is
named once: in a warning, or under replicas="auto" in the tuner's
decisions; defaults are not.
"""
import logging

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from tensorbow.cli import main
from tensorbow.cli import options as cli_options

import graphs
import references

tf1 = tf.compat.v1
LR, MOMENTUM, WAVES = 0.1, 0.9, 9
BATCHES = graphs.batches(11, WAVES)
OPTIMIZERS = graphs.optimizers(LR, MOMENTUM)
OUTER = {
    "lookahead": dict(period=4, outer_learning_rate=0.5),
    "momentum": dict(period=3, outer_learning_rate=0.6, outer_momentum=0.5),
    "nesterov": dict(period=2, outer_learning_rate=0.7, outer_momentum=0.9,
                     nesterov=True),
}


def _reference(replicas, momentum, outer, batches=BATCHES):
  """Per wave (the central params, the loss fetched) of the reference."""
  given = OUTER[outer]
  return references.local_sgd(
      [graphs.W0, graphs.B0], batches, replicas, LR, momentum,
      given["period"], given["outer_learning_rate"],
      given.get("outer_momentum", 0.0), given.get("nesterov", False), 0)


def _train(model, replicas, outer, batches=BATCHES):
  """(the losses fetched, the central params read by a plain run after
  each training run)."""
  algorithm = tb.algorithms.LocalSGD(**OUTER[outer])
  losses, central = [], []
  with tb.TensorBowSession(graph=model.graph, replicas=replicas,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    for x, y in batches:
      losses.append(sess.run([model.loss, model.train],
                             {model.x: x, model.y: y})[0])
      central.append(sess.run([model.w, model.b]))
  return losses, central


# A case each of L = 1 and L = 3 in the fast tier; the rest in the slow.
_FAST = [(1, "lookahead", "momentum", True, "all"),
         (1, "nesterov", "sgd", False, "0"),
         (3, "nesterov", "momentum", True, "all")]
_CASES = [(r, o, opt, res, fast) for r in (1, 3) for o in sorted(OUTER)
          for opt in sorted(OPTIMIZERS) for res in (True, False)
          for fast in ("all", "0")]


@pytest.mark.parametrize(
    "replicas, outer, optimizer, use_resource, fast",
    _FAST + [pytest.param(*case, marks=pytest.mark.slow)
             for case in _CASES if case not in _FAST])
def test_the_outer_step_trains_as_its_numpy_reference(
    monkeypatch, replicas, outer, optimizer, use_resource, fast):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast)
  make, momentum = OPTIMIZERS[optimizer]
  losses, central = _train(graphs.build(make, use_resource), replicas,
                           outer)
  expected = _reference(replicas, momentum, outer)
  for wave, ((params, loss), got_loss, got) in enumerate(
      zip(expected, losses, central), 1):
    np.testing.assert_allclose(got_loss, loss, rtol=1e-5, err_msg=wave)
    for g, want in zip(got, params):
      np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6,
                                 err_msg=wave)


def test_one_replica_reads_the_slow_weights_until_the_outer_step():
  """Lookahead at L = 1, period 4: the central model a plain run reads is
  the initial one for three runs, then moves by half the replica's
  move."""
  make, _ = OPTIMIZERS["sgd"]
  _, central = _train(graphs.build(make), 1, "lookahead", BATCHES[:4])
  for params in central[:3]:
    np.testing.assert_array_equal(params[0], graphs.W0)
    np.testing.assert_array_equal(params[1], graphs.B0)
  assert not np.array_equal(central[3][0], graphs.W0)


def _saved(use_resource):
  model = graphs.build(OPTIMIZERS["momentum"][0], use_resource)
  with model.graph.as_default():
    saver = tf1.train.Saver()
  return model, saver


def _runs(sess, model, batches):
  values = [sess.run([model.loss, model.train], {model.x: x, model.y: y})[0]
            for x, y in batches]
  return values + [sess.run([model.w, model.b])]


@pytest.mark.parametrize("use_resource", [True, False],
                         ids=["resource", "ref"])
def test_one_replica_resumes_bit_equal_in_the_middle_of_a_period(
    tmp_path, use_resource):
  """Saved after run 5 of outer steps every 3 with Nesterov's momentum
  (two runs into the second period), restored into a new session: the
  replica's own weights, the outer velocity and the run within the period
  come back, and the next 4 runs equal those of the session that went
  on."""
  path = str(tmp_path / "model.ckpt")
  algorithm = tb.algorithms.LocalSGD(period=3, outer_learning_rate=0.7,
                                     outer_momentum=0.9, nesterov=True)
  model, saver = _saved(use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=1,
                           algorithm=algorithm) as sess:
    sess.run(model.init)
    _runs(sess, model, BATCHES[:5])
    saver.save(sess, path)
    went_on = _runs(sess, model, BATCHES[5:])
  model, saver = _saved(use_resource)
  with tb.TensorBowSession(graph=model.graph, replicas=1,
                           algorithm=algorithm) as sess:
    saver.restore(sess, path)
    resumed = _runs(sess, model, BATCHES[5:])
  for got, want in zip(resumed[:-1], went_on[:-1]):
    assert got == want
  for got, want in zip(resumed[-1], went_on[-1]):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("replicas", [1, 3])
def test_two_runs_of_the_outer_step_are_bit_identical(replicas):
  make, _ = OPTIMIZERS["momentum"]
  first = _train(graphs.build(make), replicas, "nesterov")
  second = _train(graphs.build(make), replicas, "nesterov")
  assert first[0] == second[0]
  for a, b in zip(first[1], second[1]):
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)


def test_lookahead_by_name_is_the_outer_step_at_one_replica():
  """`algorithm="lookahead"`: period 5, rate 0.5, no momentum; at L = 1
  it trains as the reference's one replica."""
  assert tb.algorithms.by_name("lookahead") == tb.algorithms.Lookahead(5,
                                                                       0.5)
  model = graphs.build(OPTIMIZERS["momentum"][0])
  with tb.TensorBowSession(graph=model.graph, replicas=1,
                           algorithm="lookahead") as sess:
    sess.run(model.init)
    runs = _runs(sess, model, BATCHES)
  expected = references.local_sgd([graphs.W0, graphs.B0], BATCHES, 1, LR,
                                  MOMENTUM, 5, 0.5, 0.0, False, 0)
  for (_, loss), got in zip(expected, runs[:-1]):
    np.testing.assert_allclose(got, loss, rtol=1e-5)
  for got, want in zip(runs[-1], expected[-1][0]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.mode_independent
def test_tensorbow_run_takes_lookahead_by_name():
  args = main.parser().parse_args(["--algorithm", "lookahead", "train.py"])
  assert cli_options.from_args(args).algorithm == "lookahead"


@pytest.mark.mode_independent
@pytest.mark.parametrize("kwargs,message", [
    (dict(alpha=0.0), "alpha"), (dict(alpha=1.0), "alpha"),
    (dict(k=0), "period")])
def test_lookahead_rejects_arguments_out_of_range(kwargs, message):
  with pytest.raises(ValueError, match=message):
    tb.algorithms.Lookahead(**kwargs)


def _no_effect(caplog):
  return [r.getMessage() for r in caplog.records
          if r.name == "tensorbow" and "no effect" in r.getMessage()]


def _three_runs(caplog, replicas, options):
  model = graphs.build(OPTIMIZERS["sgd"][0])
  with caplog.at_level(logging.WARNING, logger="tensorbow"):
    with tb.TensorBowSession(graph=model.graph, replicas=replicas,
                             **options) as sess:
      sess.run(model.init)
      _runs(sess, model, BATCHES[:3])
  return _no_effect(caplog)


@pytest.mark.parametrize("options, named", [
    (dict(algorithm="easgd"), "algorithm='easgd'"),
    (dict(algorithm="local_sgd"), "algorithm='local_sgd'"),
    (dict(alpha=0.1), "alpha=0.1"),
    (dict(algorithm="sma", central_momentum=0.5), "central_momentum=0.5"),
    (dict(algorithm=tb.algorithms.SMA(alpha=0.2)),
     "algorithm=SMA(alpha=0.2, central_momentum=0.9)")])
def test_an_explicit_setting_without_effect_at_one_replica_warns_once(
    caplog, options, named):
  found = _three_runs(caplog, 1, options)
  assert len(found) == 1, found
  assert named in found[0] and "one replica" in found[0], found


@pytest.mark.parametrize("replicas, options", [
    (1, {}), (1, dict(algorithm="sma")),
    (1, dict(algorithm=tb.algorithms.SMA())),
    (2, dict(algorithm="easgd", alpha=0.1)),
    (1, dict(algorithm=tb.algorithms.LocalSGD(outer_learning_rate=0.5))),
    (1, dict(algorithm="lookahead"))])
def test_defaults_and_settings_with_an_effect_warn_nothing(caplog, replicas,
                                                            options):
  assert not _three_runs(caplog, replicas, options)


@pytest.mark.parametrize("options, named", [
    (dict(algorithm="easgd"), "algorithm='easgd'"), ({}, None)])
def test_under_auto_a_setting_without_effect_is_a_decision_not_a_warning(
    caplog, options, named):
  model = graphs.build(OPTIMIZERS["sgd"][0])
  with caplog.at_level(logging.WARNING, logger="tensorbow"):
    with tb.TensorBowSession(graph=model.graph, replicas="auto",
                             **options) as sess:
      sess.run(model.init)
      _runs(sess, model, BATCHES[:3])
      decisions = sess.tuning_decisions()
  assert not _no_effect(caplog)
  found = [d for d in decisions if "no effect" in d.reason]
  if named is None:
    assert not found, found
    return
  assert len(found) == 1, decisions
  assert named in found[0].reason and "L=1" in found[0].reason
  assert (found[0].run, found[0].replicas, found[0].next[0]) == (1, 1, 1)
