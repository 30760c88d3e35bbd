"""A differential generator of TF1 idioms (issue #61).

A seed draws a random composition of building blocks (a model part, a
loss, a metric, counters, an optimizer and its gradient transform, the
way the batch is fed, a hyper-parameter fed in some runs) and writes it
as the source of a TF1 script: a `build()` that makes the graph in the
default graph, and what each run fetches and feeds. The same source is
executed for the checks and printed, whole, as the standalone script
that reproduces a failing seed (`Composition.script()`).

The checks, on the corpus' harness (tests/idioms/harness.py):
* `check_one_replica`: at L = 1 every fetched value and every variable
  after each run equal `tf.compat.v1.Session`'s (DESIGN.md, "L = 1 is
  plain training"): to RTOL with the fast kernels, bit-equal with
  `TENSORBOW_FAST_KERNELS=0`;
* `check_four_replicas`: at L = 4 (DESIGN.md, "What leaves the
  replicas"), the first wave's fetched values and the writes that are
  not the model's equal TensorFlow's on the whole batch (those computed
  from no random op); counters of rows and steps, over every wave, equal
  TensorFlow's and the rows fed; and for compositions without random
  ops, metrics or counters, the central model after every wave equals
  the harness's SMA reference (DESIGN.md, "Synchronous model
  averaging").
Both run under `bounded`, so that a hang fails a seed instead of the
suite.
"""
import dataclasses
import os
import textwrap
import threading

import numpy as np
import tensorflow as tf

from idioms import harness

BATCH = harness.BATCH
RUNS = 4
CLASSES = 3
TIMEOUT = 120  # seconds a composition's check may take before it "hangs"

# Each block and its choices, in the order a seed draws them.
BLOCKS = {
    "model": ("dense", "conv", "embedding"),
    "cond": (False, True),  # tf.cond on a placeholder_with_default flag
    # tf.nn.dropout with an op seed, its rate fixed or a default that the
    # evaluation run feeds 0 (the TF1 idiom of keep_prob fed 1).
    "dropout": (None, "fixed", "fed_rate"),
    "loss": ("mean", "sum", "weighted", "two_summed"),
    "metric": (None, "mean", "accuracy"),
    "rows_counter": (None, "int32", "int64", "float32"),
    "steps_counter": (None, "int32", "int64", "float32"),
    "grouping": ("group", "dependencies_before", "dependencies_after"),
    "optimizer": ("GradientDescent", "Momentum", "Adam", "Adagrad",
                  "RMSProp"),
    "var_list": (False, True),
    "clip": (False, True),  # clip_by_global_norm via compute/apply
    "global_step": (False, True),
    "feed": ("none_batch", "shapeless", "fixed"),
    "hyper": (None, "learning_rate", "loss_scale"),
    "extra_fetches": (False, True),  # a count of correct rows, logits
    "plain_run": (False, True),  # an evaluation run between training runs
}

OPTIMIZERS = {
    "GradientDescent": "GradientDescentOptimizer({lr})",
    "Momentum": "MomentumOptimizer({lr}, 0.9)",
    "Adam": "AdamOptimizer({lr})",
    "Adagrad": "AdagradOptimizer({lr})",
    "RMSProp": "RMSPropOptimizer({lr})",
}
RATES = {"GradientDescent": 0.2, "Momentum": 0.1, "Adam": 0.05,
         "Adagrad": 0.2, "RMSProp": 0.02}


def choose(seed):
  """The blocks seed `seed` draws: {block: choice}."""
  rng = np.random.RandomState(seed)
  choices = {block: options[rng.randint(len(options))]
             for block, options in BLOCKS.items()}
  choices["hyper_runs"] = tuple(int(i) for i in np.flatnonzero(
      rng.rand(RUNS) < 0.5))
  choices["plain_at"] = 2 if choices["plain_run"] else None
  # A third of the compositions hold no random op, metric or counter, so
  # that the SMA reference applies to them (drawn last: the other draws
  # stay what they were).
  if rng.rand() < 1 / 3:
    choices.update(dropout=None, metric=None, rows_counter=None,
                   steps_counter=None)
  return choices


def plain_runs(choices):
  at = choices["plain_at"]
  return () if at is None else (at,)


@dataclasses.dataclass
class Composition:
  """One seed's composition: its choices and the source of its graph."""
  seed: int
  choices: dict
  source: str  # defines build() -> (train fetches, plain fetches, feed)

  @property
  def name(self):
    return f"seed{self.seed}"

  @property
  def plain(self):
    return plain_runs(self.choices)

  @property
  def random(self):
    return self.choices["dropout"] is not None

  @property
  def training_runs(self):
    return [i for i in range(RUNS) if i not in self.plain]

  def case(self):
    """Builds the graph in the default graph; returns a harness.Case."""
    namespace = {"tf": tf, "np": np}
    exec(compile(self.source, f"<{self.name}>", "exec"), namespace)  # pylint: disable=exec-used
    fetches, plain_fetches, feed = namespace["build"]()
    plain = self.plain
    return harness.Case(
        lambda i: plain_fetches if i in plain else fetches, feed, runs=RUNS,
        plain=plain)

  def idiom(self, exact=True):
    return harness.Idiom(self.name, self.case, exact=exact)

  def reference(self):
    """The same composition with its batch declared `[None, ...]`: the
    SMA reference splits only such feeds (harness.batch_feeds), and the
    contract splits the others as the data flow says (DESIGN.md, "Batch
    feeds are split")."""
    choices = dict(self.choices, feed="none_batch")
    return Composition(self.seed, choices, source(choices))

  def script(self):
    """A standalone script that runs the composition with
    `tf.compat.v1.Session` and `TensorBowSession` at L = 1 and 4 and
    prints where they differ."""
    return SCRIPT.format(seed=self.seed, choices=self.choices,
                         source=self.source, runs=RUNS, plain=self.plain,
                         graph_seed=harness.SEED)


def generate(seed):
  choices = choose(seed)
  return Composition(seed, choices, source(choices))


# The source of a composition.

_HELPERS = '''\
def dense(h, n_in, units, name, activation=None):
  with tf.compat.v1.variable_scope(name):
    w = tf.compat.v1.get_variable(
        "w", [n_in, units],
        initializer=tf.compat.v1.glorot_uniform_initializer(seed=42))
    b = tf.compat.v1.get_variable(
        "b", [units], initializer=tf.compat.v1.constant_initializer(0.1))
  out = tf.matmul(h, w) + b
  return activation(out) if activation else out
'''


def _placeholder(kind, dtype, row_shape, name):
  if kind == "shapeless":
    return f'tf.compat.v1.placeholder({dtype}, name="{name}")'
  first = "None" if kind == "none_batch" else str(BATCH)
  shape = ", ".join([first] + [str(d) for d in row_shape])
  return f'tf.compat.v1.placeholder({dtype}, [{shape}], name="{name}")'


def source(c):
  """The source of `build()` for choices `c`."""
  lines = []
  add = lines.append
  kind = c["feed"]
  if c["model"] == "dense":
    add(f"x = {_placeholder(kind, 'tf.float32', [4], 'x')}")
    add("h = dense(x, 4, 5, 'hidden', tf.tanh)")
    width, x_data = 5, f"rng.randn({BATCH}, 4).astype(np.float32)"
  elif c["model"] == "conv":
    add(f"x = {_placeholder(kind, 'tf.float32', [4, 4, 1], 'x')}")
    add("with tf.compat.v1.variable_scope('conv'):")
    add("  kernel = tf.compat.v1.get_variable(")
    add("      'w', [3, 3, 1, 2],")
    add("      initializer=tf.compat.v1.glorot_uniform_initializer(seed=42))")
    add("h = tf.nn.relu(tf.nn.conv2d(x, kernel, [1, 1, 1, 1], 'SAME'))")
    add("h = tf.nn.max_pool2d(h, 2, 2, 'VALID')")
    add("h = tf.reshape(h, [-1, 8])")
    width, x_data = 8, f"rng.randn({BATCH}, 4, 4, 1).astype(np.float32)"
  else:
    add(f"x = {_placeholder(kind, 'tf.int32', [3], 'ids')}")
    add("table = tf.compat.v1.get_variable(")
    add("    'embedding', [10, 4],")
    add("    initializer=tf.compat.v1.random_uniform_initializer(seed=42))")
    add("h = tf.reduce_mean(tf.nn.embedding_lookup(table, x), 1)")
    width, x_data = 4, f"rng.randint(0, 10, ({BATCH}, 3)).astype(np.int32)"
  add(f"labels = {_placeholder(kind, 'tf.int64', [], 'labels')}")
  feeds = {"x": x_data,
           "labels": f"rng.randint(0, {CLASSES}, {BATCH}).astype(np.int64)"}
  if c["cond"]:
    add("flag = tf.compat.v1.placeholder_with_default(True, [], name='flag')")
    add("h = tf.cond(flag, lambda: tf.nn.relu(h), lambda: 0.5 * h)")
  if c["dropout"] == "fixed":
    add("h = tf.nn.dropout(h, rate=0.25, seed=7)")
  elif c["dropout"] == "fed_rate":
    add("rate = tf.compat.v1.placeholder_with_default(0.25, [], "
        "name='dropout_rate')")
    add("h = tf.nn.dropout(h, rate=rate, seed=7)")
    feeds["rate"] = f"0.0 if i in {tuple(plain_runs(c))} else None"
  add(f"logits = dense(h, {width}, {CLASSES}, 'out')")
  add("xent = tf.nn.sparse_softmax_cross_entropy_with_logits(")
  add("    labels=labels, logits=logits)")
  loss = {
      "mean": "tf.reduce_mean(xent)",
      "sum": "tf.reduce_sum(xent)",
      "weighted": ("tf.compat.v1.losses.sparse_softmax_cross_entropy(\n"
                   "    labels, logits,\n"
                   "    weights=tf.gather(tf.constant([1.0, 2.0, 0.5]), "
                   "labels))"),
      "two_summed": ("tf.reduce_mean(xent) + 0.01 * tf.add_n(\n"
                     "    [tf.nn.l2_loss(v) for v in "
                     "tf.compat.v1.trainable_variables()])"),
  }[c["loss"]]
  add(f"loss = {loss}")
  rate = RATES[c["optimizer"]]
  lr = str(rate)
  if c["hyper"] == "learning_rate":
    add(f"lr = tf.compat.v1.placeholder_with_default({rate}, [], "
        "name='lr')")
    lr = "lr"
    feeds["lr"] = f"{rate / 2} if i in {c['hyper_runs']} else None"
  elif c["hyper"] == "loss_scale":
    add("scale = tf.compat.v1.placeholder_with_default(1.0, [], "
        "name='scale')")
    add("loss = scale * loss")
    feeds["scale"] = f"0.0 if i in {c['hyper_runs']} else None"
  if c["cond"]:
    feeds["flag"] = "False if i % 2 else None"
  fetches = {"loss": "loss"}
  if c["metric"] == "mean":
    add("_, metric = tf.compat.v1.metrics.mean(xent, name='mean_xent')")
    fetches["metric"] = "metric"
  elif c["metric"] == "accuracy":
    add("_, metric = tf.compat.v1.metrics.accuracy(")
    add("    labels, tf.argmax(logits, 1), name='accuracy')")
    fetches["metric"] = "metric"
  if c["extra_fetches"]:
    add("correct = tf.reduce_sum(tf.cast(")
    add("    tf.equal(tf.argmax(logits, 1), labels), tf.int32))")
    fetches["correct"] = "correct"
    fetches["logits"] = "logits"
    fetches["rows"] = "tf.shape(labels)[0]"
  counters = []
  for counter, amount in (("rows", "tf.shape(x)[0]"), ("steps", "1")):
    dtype = c[f"{counter}_counter"]
    if dtype is None:
      continue
    add(f"{counter} = tf.compat.v1.get_variable(")
    add(f"    '{counter}_{dtype}', [], tf.{dtype}, trainable=False,")
    add("    initializer=tf.compat.v1.zeros_initializer())")
    value = amount if amount == "1" else f"tf.cast({amount}, tf.{dtype})"
    counters.append(f"{counter}.assign_add({value})")
  add(f"optimizer = tf.compat.v1.train.{OPTIMIZERS[c['optimizer']]}"
      .format(lr=lr))
  step_args = []
  if c["global_step"]:
    add("global_step = tf.compat.v1.train.get_or_create_global_step()")
    step_args.append("global_step=global_step")
  var_list = ("tf.compat.v1.trainable_variables('out')" if c["var_list"]
              else None)
  before = counters and c["grouping"] == "dependencies_before"
  indent = ""
  if before:
    add(f"adds = [{', '.join(counters)}]")
    add("with tf.control_dependencies(adds):")
    indent = "  "
  if c["clip"]:
    add(indent + "pairs = optimizer.compute_gradients(loss" +
        (f", var_list={var_list}" if var_list else "") + ")")
    add(indent + "grads, variables = zip(*pairs)")
    add(indent + "grads, _ = tf.clip_by_global_norm(grads, 1.0)")
    add(indent + "step = optimizer.apply_gradients(" +
        ", ".join(["zip(grads, variables)"] + step_args) + ")")
  else:
    args = ["loss"] + ([f"var_list={var_list}"] if var_list else [])
    add(indent + f"step = optimizer.minimize({', '.join(args + step_args)})")
  if not counters or before:
    add("train = step")
  elif c["grouping"] == "group":
    add(f"train = tf.group(step, {', '.join(counters)})")
  else:
    add("with tf.control_dependencies([step]):")
    add(f"  train = tf.group({', '.join(counters)})")
  fetches["train"] = "train"
  add("fetches = {" + ", ".join(f"'{k}': {v}" for k, v in fetches.items())
      + "}")
  add("plain_fetches = {'loss': loss, 'logits': logits}")
  add("")
  add("def feed(i):")
  add("  rng = np.random.RandomState(1000 + i)")
  add("  values = {" + ", ".join(f"{k}: {v}" for k, v in feeds.items())
      + "}")
  add("  return {k: v for k, v in values.items() if v is not None}")
  add("")
  add("return fetches, plain_fetches, feed")
  body = textwrap.indent("\n".join(lines), "  ")
  return (f"# choices: {c!r}\n{_HELPERS}\n\ndef build():\n{body}\n")


SCRIPT = '''\
"""TensorBow's differential generator, seed {seed}: a TF1 script run with
tf.compat.v1.Session and tensorbow.TensorBowSession at L = 1 and 4.

    python seed{seed}.py [v1|graph]
"""
import sys

import numpy as np
import tensorflow as tf

{source}

RUNS = {runs}
PLAIN = {plain}  # runs that only evaluate


def run(make_session):
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed({graph_seed})
    fetches, plain_fetches, feed = build()
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
    variables = (tf.compat.v1.global_variables() +
                 tf.compat.v1.local_variables())
  runs = []
  with make_session(graph) as sess:
    sess.run(init)
    for i in range(RUNS):
      values = sess.run(plain_fetches if i in PLAIN else fetches, feed(i))
      state = sess.run({{v.name: v.value() for v in variables}})
      runs.append((values, state))
  return runs


def differences(expected, actual):
  for i, ((values, state), (values_tb, state_tb)) in enumerate(
      zip(expected, actual)):
    for group, a, b in (("fetch", values, values_tb),
                        ("variable", state, state_tb)):
      for key in sorted(a):
        if a[key] is None:
          continue
        x, y = np.asarray(a[key]), np.asarray(b[key])
        if x.shape != y.shape or not np.allclose(x, y, 1e-5, 1e-6):
          yield f"run {{i}} {{group}} {{key}}: TF {{x}} TensorBow {{y}}"


if __name__ == "__main__":
  mode = sys.argv[1] if len(sys.argv) > 1 else "v1"
  if mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  import tensorbow as tb
  expected = run(lambda g: tf.compat.v1.Session(graph=g))
  for replicas in (1, 4):
    actual = run(lambda g: tb.TensorBowSession(graph=g, replicas=replicas))
    found = list(differences(expected, actual))
    print(f"L = {{replicas}}: {{len(found)}} differences from TensorFlow")
    # At L = 4 the model differs from TensorFlow's after the first wave by
    # design (SMA); the first wave's values, the counters' and the
    # metrics' counts must not.
    for line in found[:20]:
      print("  " + line)
'''


# Running and checking.


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


def trace(idiom, make_session):
  """Per run: (fetched values, {variable: value} after the run), of every
  global and local variable."""
  graph, case, init = harness.build(idiom)
  variables = (harness.global_variables(graph) +
               graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES))
  runs = []
  with make_session(graph) as sess:
    sess.run(init)
    for i in range(case.runs):
      fetched = sess.run(case.fetches_at(i), case.feed_at(i))
      values = sess.run([v.value() for v in variables])
      runs.append((fetched, dict(zip([v.name for v in variables], values))))
  return runs


# The fast kernels' rounding, grown over a composition's steps through
# optimizers that divide by a root of the squared gradients (Adagrad,
# RMSProp): looser than the corpus' harness.RTOL for one idiom.
RTOL, ATOL = 1e-5, 1e-6


def check_one_replica(composition, exact):
  """At L = 1 every fetch and every variable after each run equal
  TensorFlow's: bit-equal (`exact`) or to RTOL."""
  idiom = composition.idiom()
  expected = trace(idiom, harness.tf_session)
  actual = trace(idiom, harness.tb_session(1))
  for i, ((fetched, state), (fetched_tb, state_tb)) in enumerate(
      zip(expected, actual)):
    for key in fetched:
      harness.assert_same(fetched_tb[key], fetched[key],
                          f"run {i}, fetch {key}", exact, RTOL, ATOL)
    assert sorted(state_tb) == sorted(state)
    for name, value in state.items():
      harness.assert_same(state_tb[name], value, f"run {i}, {name}", exact,
                          RTOL, ATOL)


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


def check_four_replicas(composition, replicas=harness.REPLICAS):
  """The contract at L = `replicas` (DESIGN.md, "What leaves the
  replicas"): the first wave's fetches and non-model writes are the whole
  batch's, counts count every row, and without random ops, metrics or
  counters the central model follows the SMA reference."""
  idiom = composition.idiom()
  expected = trace(idiom, harness.tf_session)
  actual = trace(idiom, harness.tb_session(replicas))
  graph, _, _ = harness.build(idiom)
  trainable = set(v.name for v in graph.get_collection(
      tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES))
  # The first wave: every replica starts from the central model.
  (fetched, state), (fetched_tb, state_tb) = expected[0], actual[0]
  first_is_training = 0 not in composition.plain
  for key, value in fetched.items():
    if value is None:
      assert fetched_tb[key] is None, key
    elif not composition.random or key == "rows" or not first_is_training:
      _assert_l4(fetched_tb[key], value, f"first wave, fetch {key}")
  if not composition.random:
    for name, value in state.items():
      if not _is_model_or_optimizers(name, trainable):
        _assert_l4(state_tb[name], value, f"first wave, {name}")
  # Counts over every wave, against TensorFlow's and the rows fed.
  final, final_tb = expected[-1][1], actual[-1][1]
  counts = [n for n in final if _is_count(n)]
  for name in counts:
    _assert_l4(final_tb[name], final[name], f"count {name}")
  for name in counts:
    if name.startswith("rows_"):
      rows = BATCH * len(composition.training_runs)
      assert final_tb[name] == rows, (name, final_tb[name], rows)
  c = composition.choices
  if (not composition.random and c["metric"] is None and
      c["rows_counter"] is None and c["steps_counter"] is None):
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
  for name, value in expected_vars.items():
    np.testing.assert_allclose(state_tb[name], value, rtol=harness.L4_RTOL,
                               atol=harness.L4_ATOL, err_msg=name)


def check(composition, tier):
  """Runs the check of `tier` ("fast", "exact", "l4") bounded in time."""
  if tier == "l4":
    return bounded(lambda: check_four_replicas(composition))
  exact = tier == "exact"
  if exact:
    assert os.environ.get("TENSORBOW_FAST_KERNELS") == "0", (
        "the exact tier needs TENSORBOW_FAST_KERNELS=0")
  return bounded(lambda: check_one_replica(composition, exact))


def coverage(seeds):
  """How many of `seeds`' compositions hold each choice of each block:
  {(block, choice): count}."""
  counts = {}
  for seed in seeds:
    for block, choice in choose(seed).items():
      if block in BLOCKS:
        counts[(block, choice)] = counts.get((block, choice), 0) + 1
  return counts

