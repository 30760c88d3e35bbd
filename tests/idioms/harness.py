"""The shared harness of the TF1 idiom corpus (issue #42).

An idiom is a function that builds a small TF1 training graph in the
default graph (fresh, graph seed set) and returns a `Case`: what each run
fetches and feeds. A theme module registers its idioms on a `Corpus` and
takes its tests from `Corpus.tests()`:

    CORPUS = harness.Corpus()

    @CORPUS.idiom
    def gradient_descent():
      loss = harness.mlp_loss()
      train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
      return harness.Case([loss, train])

    test_one_replica, test_reference_kernels, test_four_replicas = (
        CORPUS.tests())

The tiers (DESIGN.md, "What a user gets"):
* fast: at L = 1 with the default (fast) kernels, every fetched value after
  each run and every global variable at the end equal
  `tf.compat.v1.Session`'s on an identical graph with the same feeds;
* slow: the same with `TENSORBOW_FAST_KERNELS=0`, and at L = 4 the central
  model equals a per-replica reference of SMA (DESIGN.md, "Synchronous
  model averaging") that `tf.compat.v1.Session` computes: each replica's
  run on its shard from the replica's own state, then SMA's central
  update.
"""
import dataclasses
import typing

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from idioms import races

SEED = 42
BATCH = 8  # rows of a batch feed: 2 per replica at L = 4
REPLICAS = 4
MU = 0.9  # SMA's default central momentum

# Tolerances where TensorFlow and TensorBow may round differently: a fast
# kernel fuses or reorders float operations (DESIGN.md, "L = 1 is plain
# training": L = 1 equals TF "to float tolerance"); the L = 4 reference
# rounds its SMA in NumPy.
RTOL, ATOL = 1e-6, 1e-7
L4_RTOL, L4_ATOL = 1e-5, 1e-6

TIERS = ("fast", "exact", "l4", "script")


@dataclasses.dataclass
class Defect:
  """A failure an idiom shows today: xfail(strict) where it applies.

  `modes`: the TF1 modes it shows in (None: both); `tiers`: the tiers of
  TIERS it shows in (None: all)."""
  reason: str
  modes: typing.Optional[tuple] = None
  tiers: typing.Optional[tuple] = None

  def mark(self, tier):
    if self.tiers is not None and tier not in self.tiers:
      return None
    condition = (True if self.modes is None else
                 f"config.getoption('--tf-mode') in {tuple(self.modes)!r}")
    return pytest.mark.xfail(condition, reason=self.reason, strict=True)


@dataclasses.dataclass
class Case:
  """What an idiom's runs do.

  fetches: what every run fetches, or a function of the run index.
  feed: a feed_dict for every run, or a function of the run index.
  runs: how many runs.
  plain: the indices of runs that are plain runs (DESIGN.md, "Two kinds
    of run").
  model: the names of the model variables for the L = 4 reference (default:
    the trainable variables).
  single: name parts of other variables a training run writes from values
    that do not depend on a batch feed: one copy (DESIGN.md, "State"), which
    TensorBow takes from replica 0; the others are per replica, the
    central value their mean.
  step: for a run whose train op does more after the optimizer's step (a
    moving average, a weight clip): what fetches (loss, step) alone; at
    L = 4 the rest sees each replica's whole update, SMA's correction
    included.
  """
  fetches: typing.Any
  feed: typing.Any = None
  runs: int = 3
  plain: tuple = ()
  model: typing.Optional[tuple] = None
  single: tuple = ()
  step: typing.Any = None

  def fetches_at(self, i):
    return self.fetches(i) if callable(self.fetches) else self.fetches

  def feed_at(self, i):
    feed = self.feed(i) if callable(self.feed) else self.feed
    return dict(feed or {})


@dataclasses.dataclass
class Idiom:
  name: str
  build: typing.Callable
  # Bit-equal at L = 1 with TensorFlow's kernels (the fast kernels fuse and
  # reorder float operations, so that tier compares to RTOL/ATOL).
  exact: bool = True
  seeded: bool = True  # the graph seed set; unseeded: shapes compared only
  defects: tuple = ()
  l4: typing.Optional[str] = None  # why the L = 4 reference does not apply

  def param(self, tier):
    marks = [m for m in (d.mark(tier) for d in self.defects) if m]
    if tier == "l4" and self.l4:
      marks.append(pytest.mark.skip(reason=self.l4))
    return pytest.param(self, id=self.name, marks=marks)


class Corpus(object):
  """The idioms of one theme module."""

  def __init__(self):
    self.idioms = []

  def idiom(self, build=None, **options):
    """Registers `build` as an idiom (decorator, with or without options
    of `Idiom`)."""
    def register(fn):
      self.idioms.append(Idiom(fn.__name__, fn, **options))
      return fn
    return register(build) if build is not None else register

  def named(self, name):
    """The idiom registered as `name`."""
    return next(idiom for idiom in self.idioms if idiom.name == name)

  def params(self, tier):
    return [idiom.param(tier) for idiom in self.idioms]

  def tests(self):
    """The module's tests: (L = 1 fast kernels, L = 1 TensorFlow's
    kernels, L = 4 against the SMA reference)."""
    @pytest.mark.parametrize("idiom", self.params("fast"))
    def test_one_replica(idiom):
      assert_one_replica_equals_tf(idiom, exact=False)

    @pytest.mark.slow
    @pytest.mark.parametrize("idiom", self.params("exact"))
    def test_reference_kernels(idiom, monkeypatch):
      monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
      assert_one_replica_equals_tf(idiom, exact=idiom.exact)

    @pytest.mark.slow
    @pytest.mark.parametrize("idiom", self.params("l4"))
    def test_four_replicas(idiom):
      assert_replicas_match_reference(idiom)

    return test_one_replica, test_reference_kernels, test_four_replicas


# Data and a tiny model the idioms share.


def data(i, shape, seed=0, dtype=np.float32):
  """A deterministic array for run `i`."""
  rng = np.random.RandomState(1000 * seed + i)
  return rng.randn(*shape).astype(dtype)


def regression_inputs(name_x="x", name_y="y"):
  """Placeholders x [None, 4] and y [None, 1], and a feed of BATCH rows for
  run i."""
  x = tf.compat.v1.placeholder(tf.float32, [None, 4], name=name_x)
  y = tf.compat.v1.placeholder(tf.float32, [None, 1], name=name_y)
  return x, y, lambda i: {x: data(i, (BATCH, 4)), y: data(i, (BATCH, 1), 1)}


def dense(h, units, name, activation=None, **kwargs):
  """A dense layer of `get_variable`s under variable scope `name`."""
  with tf.compat.v1.variable_scope(name):
    w = tf.compat.v1.get_variable(
        "w", [h.shape[-1], units],
        initializer=tf.compat.v1.glorot_uniform_initializer(seed=SEED),
        **kwargs)
    b = tf.compat.v1.get_variable(
        "b", [units], initializer=tf.compat.v1.constant_initializer(0.1))
    out = tf.matmul(h, w) + b
  return activation(out) if activation else out


def looped(h, width):
  """`h` ([rows, width]) through a tf.while_loop applying a weight
  "loop_w" and tanh twice."""
  w_loop = tf.compat.v1.get_variable(
      "loop_w", [width, width],
      initializer=tf.compat.v1.glorot_uniform_initializer(seed=SEED))
  _, out = tf.while_loop(
      lambda i, h: i < 2, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w_loop))),
      [tf.constant(0), h])
  return out


def batch_norm_variables(size):
  """Batch norm's variables of `size` units in the current variable scope:
  (gamma, beta, moving mean, moving variance), the last two not
  trainable."""
  gamma = tf.compat.v1.get_variable("gamma", [size],
                                    initializer=tf.ones_initializer())
  beta = tf.compat.v1.get_variable("beta", [size],
                                   initializer=tf.zeros_initializer())
  moving_mean = tf.compat.v1.get_variable(
      "moving_mean", [size], initializer=tf.zeros_initializer(),
      trainable=False)
  moving_var = tf.compat.v1.get_variable(
      "moving_variance", [size], initializer=tf.ones_initializer(),
      trainable=False)
  return gamma, beta, moving_mean, moving_var


def mlp(x, name="mlp", hidden=3, **kwargs):
  h = dense(x, hidden, f"{name}/hidden", tf.tanh, **kwargs)
  return dense(h, 1, f"{name}/out")


def mlp_loss(name="mlp", **kwargs):
  """The squared error of a 4-3-1 tanh network on regression inputs;
  returns (loss, feed)."""
  x, y, feed = regression_inputs()
  return tf.reduce_mean(tf.square(mlp(x, name, **kwargs) - y)), feed


def minimize(optimizer, **kwargs):
  """A Case training the MLP with `optimizer`, fetching (loss, train)."""
  loss, feed = mlp_loss()
  return Case([loss, optimizer.minimize(loss, **kwargs)], feed)


class UserOptimizer(tf.compat.v1.train.Optimizer):
  """SGD, with momentum if `momentum` is set, written the way TF1 users
  write an optimizer: slots made in `_create_slots`, the rate converted in
  `_prepare`, and the step written by `how` ("assign": `var.assign(var -
  step)`; "assign_sub": `var.assign_sub(step)`)."""

  def __init__(self, rate, how, momentum=None, name="UserOptimizer"):
    super().__init__(False, name)
    self._rate, self._how, self._momentum = rate, how, momentum
    self._rate_t = None

  def _create_slots(self, var_list):
    if self._momentum is not None:
      for v in var_list:
        self._zeros_slot(v, "velocity", self._name)

  def _prepare(self):
    self._rate_t = tf.convert_to_tensor(self._rate, name="rate")

  def _step(self, var, grad):
    rate = tf.cast(self._rate_t, var.dtype.base_dtype)
    if self._momentum is not None:
      velocity = self.get_slot(var, "velocity")
      grad = velocity.assign(self._momentum * velocity + grad)
    if self._how == "assign":
      return var.assign(var - rate * grad)
    return var.assign_sub(rate * grad)

  def _apply_dense(self, grad, var):
    return self._step(var, grad)

  def _resource_apply_dense(self, grad, handle):
    return self._step(handle, grad)


# Running and comparing.


def build(idiom):
  """A fresh graph holding the idiom; returns (graph, case, init)."""
  graph = tf.Graph()
  with graph.as_default():
    if idiom.seeded:
      tf.compat.v1.set_random_seed(SEED)
    case = idiom.build()
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
  return graph, case, init


def global_variables(graph):
  return graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)


def train(idiom, make_session):
  """Runs the idiom in the session `make_session(graph)` makes; returns
  (the fetched values of every run, {variable name: value} at the end)."""
  graph, case, init = build(idiom)
  with make_session(graph) as sess:
    sess.run(init)
    fetched = [sess.run(case.fetches_at(i), case.feed_at(i))
               for i in range(case.runs)]
    variables = global_variables(graph)
    values = sess.run([v.value() for v in variables])
  return fetched, dict(zip([v.name for v in variables], values))


def tf_session(graph):
  """The reference: `tf.compat.v1.Session`, refusing a run whose result it
  does not determine (races.py)."""
  return races.CheckedSession(graph=graph)


def tb_session(replicas):
  return lambda graph: tb.TensorBowSession(graph=graph, replicas=replicas)


def assert_same(actual, expected, what, exact, rtol=RTOL, atol=ATOL):
  if expected is None or actual is None:
    assert actual is None and expected is None, what
    return
  if isinstance(expected, bytes) and not exact and exact is not None:
    # A histogram's sums add up many rounded values: looser.
    actual, expected = summary_values(actual), summary_values(expected)
    rtol, atol = 10 * rtol, 10 * atol
  actual, expected = np.asarray(actual), np.asarray(expected)
  assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
  assert actual.dtype == expected.dtype, (what, actual.dtype, expected.dtype)
  if exact is None:  # unseeded random: only the shape is comparable
    return
  if exact or not np.issubdtype(expected.dtype, np.inexact):
    np.testing.assert_array_equal(actual, expected, err_msg=what)
  else:
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol,
                               err_msg=what)


def summary_values(serialized):
  """A serialized Summary's tags and numbers, to compare to a tolerance (a
  fast kernel's rounding changes the bytes)."""
  tags, numbers = [], []
  for value in tf.compat.v1.Summary.FromString(serialized).value:
    tags.append(value.tag)
    numbers.append(value.simple_value)
    if value.HasField("histo"):
      h = value.histo
      numbers += [h.min, h.max, h.num, h.sum, h.sum_squares]
      numbers += list(h.bucket_limit) + list(h.bucket)
  assert tags, "not a Summary"
  return np.array(numbers + [hash(tuple(tags)) % 1000])


def assert_one_replica_equals_tf(idiom, exact):
  """Bit-equal (`exact`) or to RTOL/ATOL; shapes only when unseeded."""
  exact = exact if idiom.seeded else None
  expected_runs, expected_vars = train(idiom, tf_session)
  actual_runs, actual_vars = train(idiom, tb_session(1))
  for i, (actual, expected) in enumerate(zip(actual_runs, expected_runs)):
    flat_actual = tf.nest.flatten(actual)
    flat_expected = tf.nest.flatten(expected)
    assert len(flat_actual) == len(flat_expected)
    for k, (a, e) in enumerate(zip(flat_actual, flat_expected)):
      assert_same(a, e, f"run {i}, fetch {k}", exact)
  assert sorted(actual_vars) == sorted(expected_vars)
  for name, value in expected_vars.items():
    assert_same(actual_vars[name], value, f"variable {name}", exact)


# The L = 4 reference.


def batch_feeds(feed):
  """The feeds DESIGN.md, "Batch feeds are split" shards: placeholders of
  rank >= 1 whose first dimension is unknown."""
  return [t for t in feed
          if t.shape.rank and tf.compat.dimension_value(t.shape[0]) is None]


def shard(feed, replicas):
  """Replica r's feed of each replica: batch feeds split, others whole;
  and each shard's rows."""
  sharded = batch_feeds(feed)
  rows = (len(feed[sharded[0]]) if sharded else replicas)
  sizes = [len(s) for s in np.array_split(np.arange(rows), replicas)]
  splits = {t: np.array_split(feed[t], replicas) for t in sharded}
  return [{t: (splits[t][r] if t in splits else v) for t, v in feed.items()}
          for r in range(replicas)], sizes


def sma_reference(idiom, replicas=REPLICAS, mu=MU):
  """DESIGN.md's SMA ("Synchronous model averaging") run with
  `tf.compat.v1.Session`: each replica's
  run on its shard from its own state (model variables, slots, every other
  variable), then SMA's update of the model variables (alpha = 1/L); every
  other variable's central value is the replicas' mean, or replica 0's for
  `Case.single` (DESIGN.md, "State"). A plain run runs on the central model,
  whole, and re-seeds the replicas of the variables it wrote (2.6).

  Returns:
    (per run: the fetched float scalars, merged as 2.4 says, or None;
    {variable name: central value} at the end).
  """
  alpha = 1.0 / replicas
  graph, case, init = build(idiom)
  variables = global_variables(graph)
  names = [v.name for v in variables]
  model = set(case.model if case.model is not None else
              [v.name for v in graph.get_collection(
                  tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)])
  merged_runs = []
  with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
    sess.run(init)

    def load(state):
      for v in variables:
        v.load(state[v.name], sess)

    def read():
      return dict(zip(names, sess.run([v.value() for v in variables])))

    central = read()
    previous = dict(central)
    after = None
    states = [dict(central) for _ in range(replicas)]
    for i in range(case.runs):
      fetches, feed = case.fetches_at(i), case.feed_at(i)
      if i in case.plain:
        load(central)
        merged_runs.append(merge([sess.run(fetches, feed)], [1]))
        before, central = central, read()
        # docs/DESIGN.md: a plain run re-seeds the replicas of the
        # variables it wrote (and their SMA momentum restarts).
        for n in names:
          if not np.array_equal(central[n], before[n]):
            previous[n] = central[n]
            for state in states:
              state[n] = central[n]
        continue
      feeds, sizes = shard(feed, replicas)
      outputs, stepped = [], []
      for r in range(replicas):
        if not sizes[r]:
          # A batch with fewer rows than replicas: this one sits the wave
          # out (DESIGN.md, "Batch feeds are split"), its state as it was.
          stepped.append(dict(states[r]))
          continue
        load(states[r])
        outputs.append(sess.run(
            fetches if case.step is None else case.step, feeds[r]))
        stepped.append(read())
      trains = [r for r in range(replicas) if sizes[r]]
      trained = trained_variables(graph, fetches)
      corrections = {}
      for n in names:
        if n in model and n in trained:
          # The correction is part of the replica's update (DESIGN.md,
          # "Synchronous model averaging").
          corrections[n] = [alpha * (states[r][n] - central[n])
                            for r in trains]
          for k, r in enumerate(trains):
            stepped[r][n] = stepped[r][n] - corrections[n][k]
      if case.step is not None:
        # What runs after the step sees the replica's updated weights.
        after = after or AfterStep(graph, case.step, variables)
        for r in trains:
          stepped[r] = after.run(stepped[r], fetches, feeds[r])
      new_central = {}
      for n in names:
        if n in model and n not in trained:
          # Section 3 is per variable: a run that does not train it
          # leaves its central model and replicas as they are.
          new_central[n] = central[n]
        elif n in model:
          new_central[n] = (central[n] + sum(corrections[n])
                            + mu * (central[n] - previous[n]))
        elif any(part in n for part in case.single):
          new_central[n] = stepped[0][n]
          for state in stepped:
            state[n] = stepped[0][n]
        else:
          new_central[n] = np.mean([s[n] for s in stepped], axis=0).astype(
              central[n].dtype)
      previous = {n: (central[n] if n in trained or n not in model
                      else previous[n]) for n in names}
      central, states = new_central, stepped
      merged_runs.append(merge(outputs, [n for n in sizes if n]))
  if after is not None:
    after.session.close()
  return merged_runs, central


class AfterStep(object):
  """Runs what a run does after its optimizer step (`Case.step`) from a
  given state: in a copy of `graph` whose step writes nothing, so that
  the ops after it (a moving average, a weight clip) see the weights the
  reference loads, the replica's whole update."""

  _WRITES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply",
             "Assign", "Scatter", "ResourceScatter")

  def __init__(self, graph, step, variables):
    graph_def = graph.as_graph_def()
    targets = [getattr(f, "op", f).name for f in tf.nest.flatten(step)]
    in_step = set(n.name for n in tf.compat.v1.graph_util.extract_sub_graph(
        graph_def, targets).node)
    for node in graph_def.node:
      if node.name in in_step and node.op.startswith(self._WRITES):
        name = node.name
        controls = [i for i in node.input if i.startswith("^")]
        node.Clear()
        node.name, node.op = name, "NoOp"
        node.input.extend(controls)
    self.graph = tf.Graph()
    with self.graph.as_default():
      tf.compat.v1.import_graph_def(graph_def, name="")
      self._loads, self._reads = {}, {}
      for v in variables:
        handle = self.graph.get_tensor_by_name(v.name)
        value = tf.compat.v1.placeholder(v.dtype.base_dtype)
        if handle.dtype == tf.resource:
          load = tf.raw_ops.AssignVariableOp(resource=handle, value=value)
          read = tf.raw_ops.ReadVariableOp(resource=handle,
                                           dtype=v.dtype.base_dtype)
        else:
          load, read = tf.compat.v1.assign(handle, value), handle
        self._loads[v.name] = (load, value)
        self._reads[v.name] = read
    self.session = tf.compat.v1.Session(graph=self.graph)

  def run(self, state, fetches, feed):
    """The variables after `fetches` (the user's run, by name) ran from
    `state` ({variable name: value}) fed `feed`."""
    for name, (load, value) in self._loads.items():
      self.session.run(load, {value: state[name]})
    names = [getattr(f, "name", f) for f in tf.nest.flatten(fetches)]
    self.session.run(names, {t.name: v for t, v in feed.items()})
    values = self.session.run(self._reads)
    return {n: values[n] for n in state}


def trained_variables(graph, fetches):
  """Names (with ':0', as `Variable.name`) of the variables an optimizer's
  apply op among the ops a run of `fetches` executes updates."""
  targets = [getattr(f, "op", f).name for f in tf.nest.flatten(fetches)]
  sub = tf.compat.v1.graph_util.extract_sub_graph(
      graph.as_graph_def(), targets)
  nodes = {n.name: n for n in graph.as_graph_def().node}
  names = set()
  for node in sub.node:
    dense = node.op.startswith(("Apply", "ResourceApply", "SparseApply",
                                "ResourceSparseApply"))
    if not dense and node.op not in _SPARSE_STEPS:
      continue
    source = node.input[0].split(":")[0]
    while nodes[source].op in ("Identity", "RefIdentity"):
      source = nodes[source].input[0].split(":")[0]
    # A sparse step (GradientDescent's scatter, Adam's assign) or a user
    # optimizer's assign is made in the optimizer's update_<variable>
    # scope.
    if dense or f"update_{source}/" in node.name:
      names.add(source + ":0")
  return names


_SPARSE_STEPS = frozenset([
    "ScatterSub", "ScatterAdd", "ResourceScatterSub", "ResourceScatterAdd",
    "AssignSub", "AssignSubVariableOp",
    # A user's Optimizer subclass may step by assigning the variable whole
    # (DESIGN.md, "Two kinds of run"; issue #63).
    "Assign", "AssignVariableOp"])


def merge(outputs, sizes):
  """Float scalars of the replicas' fetches: the shard-weighted mean; other
  values None (not compared)."""
  flat = [tf.nest.flatten(o) for o in outputs]
  merged = []
  for values in zip(*flat):
    first = values[0]
    if (first is not None and np.ndim(first) == 0
        and np.issubdtype(np.asarray(first).dtype, np.floating)):
      merged.append(np.average(values, weights=sizes))
    else:
      merged.append(None)
  return merged


def assert_replicas_match_reference(idiom, replicas=REPLICAS):
  expected_runs, expected_vars = sma_reference(idiom, replicas)
  actual_runs, actual_vars = train(idiom, tb_session(replicas))
  for i, (actual, expected) in enumerate(zip(actual_runs, expected_runs)):
    for k, (a, e) in enumerate(zip(tf.nest.flatten(actual),
                                   tf.nest.flatten(expected))):
      if e is not None:
        np.testing.assert_allclose(a, e, rtol=L4_RTOL, atol=L4_ATOL,
                                   err_msg=f"run {i}, fetch {k}")
  for name, value in expected_vars.items():
    np.testing.assert_allclose(actual_vars[name], value, rtol=L4_RTOL,
                               atol=L4_ATOL, err_msg=f"variable {name}")
