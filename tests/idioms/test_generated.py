"""Generated TF1 idioms (issue #61): fixed seeds of tests/idioms/
generator.py, each a random composition of building blocks, checked at
L = 1 against `tf.compat.v1.Session` and at L = 4 against the contract
(DESIGN.md, "What leaves the replicas").

The fast tier holds as many seeds as its budget allows; the slow tier
holds more, and the bit-equal check of every seed. A seed TensorBow gets
wrong today is marked with its defect class (xfail, strict): print its
script with `generator.generate(seed).script()`. benchmarks/
sweep_idioms.py runs many more seeds outside CI.
"""
import pytest

from idioms import generator
from idioms.harness import Defect

FAST = (15, 18)
SLOW = (1, 2, 13, 16, 17) + tuple(range(100, 124))


# The generator's first sweep also found, at L = 4, counts 1/L with a
# fixed-size batch feed, batches fed to shapeless or fixed-size labels
# given whole, and fixed-size embedding ids refused: fixed with it
# (rewrite/batch_sizes.py, rewrite/reductions.py); seeds 16, 17, 100, 113,
# 117, 121, 122 and 123 among others show them.
DEFECTS = {}
# At L = 1 with the fast kernels (a copy of the graph runs the training
# runs), a plain run's random op (dropout) does not draw from the stream
# the training runs drew from, as TensorFlow's one op does.
RANDOM_STREAM = Defect(
    "at L = 1 with the fast kernels, a plain run's dropout and the "
    "training runs' draw from two streams, TensorFlow's one op from one "
    "(random stream of plain runs)", tiers=("fast",))
for _seed in (104, 105, 106, 109, 113, 115, 123):
  DEFECTS[_seed] = DEFECTS.get(_seed, ()) + (RANDOM_STREAM,)


def _params(seeds, tier):
  params = []
  for seed in seeds:
    marks = [m for m in (d.mark(tier) for d in DEFECTS.get(seed, ())) if m]
    params.append(pytest.param(seed, id=f"seed{seed}", marks=marks))
  return params


@pytest.mark.parametrize("seed", _params(FAST, "fast"))
def test_one_replica_equals_tensorflow(seed):
  generator.check(generator.generate(seed), "fast")


@pytest.mark.parametrize("seed", _params(FAST, "l4"))
def test_four_replicas_keep_the_contract(seed):
  generator.check(generator.generate(seed), "l4")


@pytest.mark.slow
@pytest.mark.parametrize("seed", _params(FAST + SLOW, "exact"))
def test_one_replica_is_bit_equal_with_tensorflows_kernels(seed,
                                                           monkeypatch):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", "0")
  generator.check(generator.generate(seed), "exact")


@pytest.mark.slow
@pytest.mark.parametrize("seed", _params(SLOW, "fast"))
def test_one_replica_equals_tensorflow_more_seeds(seed):
  generator.check(generator.generate(seed), "fast")


@pytest.mark.slow
@pytest.mark.parametrize("seed", _params(SLOW, "l4"))
def test_four_replicas_keep_the_contract_more_seeds(seed):
  generator.check(generator.generate(seed), "l4")


@pytest.mark.mode_independent
def test_every_block_choice_appears_in_the_fixed_seeds():
  counts = generator.coverage(FAST + SLOW)
  missing = [(block, choice) for block, options in generator.BLOCKS.items()
             for choice in options if not counts.get((block, choice))]
  assert not missing, missing


@pytest.mark.mode_independent
def test_a_seed_prints_a_standalone_script_of_its_own_source():
  composition = generator.generate(FAST[0])
  script = composition.script()
  compile(script, "seed.py", "exec")
  assert composition.source in script
  assert generator.generate(FAST[0]).source == composition.source
