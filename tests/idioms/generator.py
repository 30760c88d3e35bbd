"""A differential generator of TF1 idioms (issue #61).

A seed draws a random composition of building blocks (a model part and
what wraps it, a loss, a metric, counters, one or two optimizers and a
gradient transform, how the batch arrives: fed, from `tf.data`, a
feedable iterator or a queue; hyper-parameters fed in some runs, a Saver
restoring mid-training, `make_callable`) and a schedule of runs, and
writes them as the source of a TF1 script (tests/idioms/compose.py).
The same source is executed for the checks (tests/idioms/
differential.py) and printed, whole, as the standalone script that
reproduces a failing seed (`Composition.script()`).
"""
import dataclasses
import os
import tempfile

import numpy as np
import tensorflow as tf

from idioms import compose
from idioms import harness

TRAINING_RUNS = 4

# Each block and its choices, in the order a seed draws them; a choice
# listed twice is drawn twice as often.
BLOCKS = {
    "model": ("dense", "conv", "embedding", "partitioned_embedding"),
    "loop": (False, True),  # a tf.while_loop applying a weight twice
    "cond": (False, True),  # tf.cond on a placeholder_with_default flag
    "batch_norm": (None, "training", "is_training"),
    # tf.nn.dropout with an op seed, its rate fixed or a default that the
    # evaluation run feeds 0 (the TF1 idiom of keep_prob fed 1).
    "dropout": (None, "fixed", "fed_rate"),
    "loss": ("mean", "sum", "weighted", "two_summed"),
    "metric": (None, "mean", "accuracy"),
    "metric_in_plain": (False, True),  # its update run in evaluation too
    "rows_counter": (None, "int32", "int64", "float32"),
    "steps_counter": (None, "int32", "int64", "float32"),
    "grouping": ("group", "dependencies_before", "dependencies_after"),
    "optimizer": tuple(compose.OPTIMIZERS),
    # A second optimizer for every layer but the output (wide and deep).
    "optimizer2": (None, None, None) + tuple(compose.OPTIMIZERS),
    "var_list": (False, True),  # one optimizer, the output layer only
    "transform": (None, "clip_global_norm", "clip_by_value", "scale"),
    "global_step": (False, True),
    "feed": ("none_batch", "shapeless", "fixed"),
    "pipeline": (None, None, "dataset", "string_handle", "queue"),
    "hyper": (None, "learning_rate", "loss_scale"),
    "extra_fetches": (False, True),  # a count of correct rows, logits
    "plain_run": (False, True),  # an evaluation run between training runs
    "saver": (None, "whole", "subset"),  # saved, then restored later
    "callable": (False, True),  # training runs by sess.make_callable
}


def choose(seed):
  """The blocks seed `seed` draws: {block: choice}, a choice that plays
  no part in the composition set to None (or False)."""
  rng = np.random.RandomState(seed)
  choices = {block: options[rng.randint(len(options))]
             for block, options in BLOCKS.items()}
  hyper_draws = rng.rand(TRAINING_RUNS + 3) < 0.5
  # A third of the compositions hold no random op, metric, counter,
  # pipeline or Saver, so that the SMA reference applies to them.
  if rng.rand() < 1 / 3:
    choices.update(dropout=None, metric=None, rows_counter=None,
                   steps_counter=None, pipeline=None, saver=None)
  if choices["pipeline"] is not None:
    choices["feed"] = None
  if choices["metric"] is None or not choices["plain_run"]:
    choices["metric_in_plain"] = False
  if choices["optimizer2"] is not None:
    choices["var_list"] = None  # each optimizer applies its part
  if not (choices["rows_counter"] or choices["steps_counter"]):
    choices["grouping"] = None
  schedule = schedule_of(choices)
  choices["hyper_runs"] = tuple(
      int(i) for i in np.flatnonzero(hyper_draws[:len(schedule)]))
  return choices


def schedule_of(choices):
  """The kinds of run, in order: training runs, an evaluation ("plain")
  between them, a Saver's save after the first and restore before the
  last."""
  schedule = ["train"] * TRAINING_RUNS
  if choices["plain_run"]:
    schedule.insert(2, "plain")
  if choices["saver"]:
    schedule.insert(1, "save")
    schedule.insert(len(schedule) - 1, "restore")
  return tuple(schedule)


@dataclasses.dataclass
class Composition:
  """One seed's composition: its choices, its runs and its source."""
  seed: int
  choices: dict
  source: str  # defines SCHEDULE, PLAIN and build() (compose.py)

  @property
  def name(self):
    return f"seed{self.seed}"

  @property
  def schedule(self):
    return schedule_of(self.choices)

  @property
  def plain(self):
    return tuple(i for i, k in enumerate(self.schedule) if k == "plain")

  @property
  def random(self):
    """Whether a training run draws random values."""
    return self.choices["dropout"] is not None

  @property
  def mixes_rows(self):
    """Whether a training run's values mix its rows (batch statistics):
    each replica's differ from the whole batch's."""
    return self.choices["batch_norm"] is not None

  @property
  def follows_sma(self):
    """Whether the harness's SMA reference applies: fed batches, no
    random op, metric, counter or restore."""
    c = self.choices
    return (not self.random and c["metric"] is None and
            c["rows_counter"] is None and c["steps_counter"] is None and
            c["pipeline"] is None and c["saver"] is None)

  def program(self):
    """Builds the graph in the default graph; returns build()'s dict."""
    namespace = {"tf": tf, "np": np, "os": os, "tempfile": tempfile}
    exec(compile(self.source, f"<{self.name}>", "exec"), namespace)  # pylint: disable=exec-used
    return namespace["build"]()

  def case(self):
    """The composition as a harness.Case, for the SMA reference (fed
    batches only)."""
    program = self.program()
    plain = self.plain
    return harness.Case(
        lambda i: (program["plain_fetches"] if i in plain else
                   program["fetches"]),
        lambda i: program["feed"](i, {}), runs=len(self.schedule),
        plain=plain)

  def idiom(self):
    return harness.Idiom(self.name, self.case)

  def reference(self):
    """The same composition with its batch declared `[None, ...]`: the
    SMA reference splits only such feeds (harness.batch_feeds), and the
    contract splits the others as the data flow says (DESIGN.md, "Batch
    feeds are split")."""
    choices = dict(self.choices, feed="none_batch")
    return Composition(self.seed, choices,
                       compose.source(choices, self.schedule))

  def script(self):
    """A standalone script that runs the composition with
    `tf.compat.v1.Session` and `TensorBowSession` at L = 1 and 4 and
    prints where they differ."""
    return SCRIPT.format(seed=self.seed, source=self.source,
                         graph_seed=harness.SEED)


def generate(seed):
  choices = choose(seed)
  return Composition(seed, choices,
                     compose.source(choices, schedule_of(choices)))


# Blocks whose choices are held as another block's: a second optimizer
# holds an optimizer.
HELD_AS = {"optimizer2": "optimizer"}


def held(choices):
  """The (block, choice) pairs a composition holds: those of BLOCKS that
  play a part in it, a block of HELD_AS counted as the block it names."""
  pairs = set()
  for block, choice in choices.items():
    block = HELD_AS.get(block, block)
    if block in BLOCKS and choice in BLOCKS[block]:
      pairs.add((block, choice))
  return pairs


def required():
  """Every (block, choice) a composition can hold."""
  return set((block, choice) for block, options in BLOCKS.items()
             if block not in HELD_AS for choice in options)


def coverage(seeds):
  """How many of `seeds`' compositions hold each choice of each block:
  {(block, choice): count}."""
  counts = {}
  for seed in seeds:
    for pair in held(choose(seed)):
      counts[pair] = counts.get(pair, 0) + 1
  return counts


SCRIPT = '''\
"""TensorBow's differential generator, seed {seed}: a TF1 script run with
tf.compat.v1.Session and tensorbow.TensorBowSession at L = 1 and 4.

    python seed{seed}.py [v1|graph]
"""
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

{source}

def trace(make_session):
  """Per run of SCHEDULE: (what it fetched, every variable after it)."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed({graph_seed})
    program = build()
    init = tf.group(tf.compat.v1.global_variables_initializer(),
                    tf.compat.v1.local_variables_initializer())
    variables = (tf.compat.v1.global_variables() +
                 tf.compat.v1.local_variables())
  runs = []
  with make_session(graph) as sess:
    sess.run(init)
    ctx = program["prepare"](sess)
    for i, kind in enumerate(SCHEDULE):
      values = program["run"](sess, kind, i, ctx)
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
          yield (f"run {{i}} ({{SCHEDULE[i]}}) {{group}} {{key}}: "
                 f"TF {{x}} TensorBow {{y}}")


if __name__ == "__main__":
  mode = sys.argv[1] if len(sys.argv) > 1 else "v1"
  if mode == "v1":
    tf.compat.v1.disable_v2_behavior()
  else:
    tf.compat.v1.disable_eager_execution()
  import tensorbow as tb
  expected = trace(lambda g: tf.compat.v1.Session(graph=g))
  for replicas in (1, 4):
    actual = trace(lambda g: tb.TensorBowSession(graph=g, replicas=replicas))
    found = list(differences(expected, actual))
    print(f"L = {{replicas}}: {{len(found)}} differences from TensorFlow")
    # At L = 4 the model differs from TensorFlow's after the first wave by
    # design (SMA); the first wave's values, the counters' and the
    # metrics' counts must not.
    for line in found[:20]:
      print("  " + line)
'''


def cover(seeds, times=5, cost=None):
  """A few of `seeds` (in their order of preference) whose compositions
  together hold every choice of every block at least `times` times, as
  far as `seeds` hold it: greedily, the seed adding most of what is
  still missing first, per its `cost` ({seed: seconds}) if given."""
  held_by = {seed: held(choose(seed)) for seed in seeds}
  missing = {pair: times for pair in required()}
  chosen = []
  while True:
    gain = {seed: sum(1 for pair in pairs if missing.get(pair, 0) > 0) /
                  (cost[seed] if cost else 1)
            for seed, pairs in held_by.items() if seed not in chosen}
    best = max(gain, key=lambda s: (gain[s], -seeds.index(s)), default=None)
    if best is None or gain[best] == 0:
      return chosen
    chosen.append(best)
    for pair in held_by[best]:
      if pair in missing:
        missing[pair] -= 1
