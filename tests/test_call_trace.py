"""Which of TensorBow's modules one steady-state training run in one
process goes through (benchmarks/call_trace.py's trace, as a test).

Issue 65 asks that such a run enter the facade, the wave module, the
hooks and the runtime face in that order and come back to no package
module it has left. Both hold and are checked here: the trainer trains
its wave in one call under the session's lock; the hooks run the wave's
steps between their points (hooks.Joined.run) and the runtime runs an
atomic wave's compute, between and commit in one call; the feeds are cut
in one call before the wave and its fetches merged in one after; and one
process asks nothing of the scale-out object after the wave.
The bounds below are today's, so that a change that adds modules, or
entries back into them, to a run is seen.
"""
import pytest

from benchmarks import call_trace

# Today's trace at L = 2, SMA: the most any TF1 mode or kernel setting
# gives. Lower them when a change lowers the trace.
_MODULES = 15
_RETURNS = 0


@pytest.fixture(scope="module")
def traced():
  entered, calls = call_trace.trace(replicas=2, warm=3)
  return call_trace.summary(entered, calls, call_trace.root()), entered


def _first(order, module):
  return order.index(f"tensorbow/{module}")


def test_a_run_enters_the_facade_the_wave_the_hooks_then_the_runtime(traced):
  _, order = traced
  assert order[0] == "tensorbow/session.py"
  assert (_first(order, "waves.py") < _first(order, "wave.py") <
          _first(order, "hooks.py") < _first(order, "runtime/__init__.py"))


def test_a_run_enters_no_more_modules_nor_comes_back_more_often(traced):
  result, _ = traced
  assert len(result["modules"]) <= _MODULES, result["modules"]
  assert result["returns"] <= _RETURNS, result["order"]


def test_the_trace_counts_an_entry_back():
  result = call_trace.summary(
      ["tensorbow/session.py", "tensorbow/wave.py", "tensorbow/session.py"],
      3, call_trace.root())
  assert result["modules"] == ["tensorbow/session.py", "tensorbow/wave.py"]
  assert result["returns"] == 1 and result["calls"] == 3


def test_one_process_has_no_distributed_hook_in_its_wave(traced):
  """One process's job (hooks.ALONE) adds no hook and no sum: from the
  wave module's first entry to its last, no module of tensorbow/scaleout
  is entered."""
  _, order = traced
  wave = [i for i, m in enumerate(order) if m == "tensorbow/wave.py"]
  inside = order[wave[0]:wave[-1] + 1]
  assert not [m for m in inside if m.startswith("tensorbow/scaleout/")], (
      inside)
