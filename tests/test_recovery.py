"""A worker's training runs through changes of its job's membership
(scaleout/recovery.py): the one loop that decides what the survivors of
a lost worker, and a joiner before it is taken in, do. The workers are a
fake here; jobs of real processes that lose or take in workers are in
test_elastic.py and test_joining.py."""
import pytest
import tensorflow as tf

from tensorbow import scaleout
from tensorbow.scaleout import recovery


class _Workers(object):
  """A fake `scaleout.Workers` that logs what the loop asks of it."""

  def __init__(self, log, joining_until=0, enough=True):
    self._log, self._until, self._enough = log, joining_until, enough

  def catching_up(self, wave):
    self._log.append(("catching_up", wave))
    return wave < self._until

  def reform(self, change):
    self._log.append(("reform", change.wave, change.lost))
    if not self._enough:
      raise tf.errors.UnavailableError(None, None, "too few remain")
    return {"wave": change.wave, "left": list(change.lost)}


def _loop(log, losses, **workers):
  """(the recovery loop over a fake, train_once raising a change for each
  wave in `losses` before it trains)."""
  losses = list(losses)

  def train_once():
    log.append(("train",))
    if losses:
      wave = losses.pop(0)
      raise scaleout.MembershipChanged(wave, [1], f"lost at {wave}")
    return "trained"

  loop = recovery.Recovery(_Workers(log, **workers),
                           lambda change: log.append(("record", change)))
  return loop, train_once


def test_a_wave_that_lost_a_worker_reforms_records_resets_then_runs_again():
  log = []
  loop, train_once = _loop(log, [5, 5])
  got = loop.train(5, train_once, lambda: "caught up",
                   lambda: log.append(("reset",)))
  assert got == "trained"
  change = [("reform", 5, (1,)), ("record", {"wave": 5, "left": [1]}),
            ("reset",)]
  assert log == [("catching_up", 5), ("train",)] + change + [
      ("train",)] + change + [("train",)]


def test_a_joiners_run_before_it_is_taken_in_only_catches_up():
  log = []
  loop, train_once = _loop(log, [], joining_until=3)
  assert loop.train(2, train_once, lambda: "caught up", None) == "caught up"
  assert loop.train(3, train_once, lambda: "caught up", None) == "trained"
  assert log == [("catching_up", 2), ("catching_up", 3), ("train",)]


def test_too_few_survivors_fail_the_run_with_nothing_reset():
  log = []
  loop, train_once = _loop(log, [4], enough=False)
  with pytest.raises(tf.errors.UnavailableError, match="too few"):
    loop.train(4, train_once, None, lambda: log.append(("reset",)))
  assert log == [("catching_up", 4), ("train",), ("reform", 4, (1,))]


def test_any_other_error_goes_through_untouched():
  log = []
  loop = recovery.Recovery(_Workers(log), log.append)

  def fails():
    raise tf.errors.InvalidArgumentError(None, None, "bad feed")

  with pytest.raises(tf.errors.InvalidArgumentError, match="bad feed"):
    loop.train(1, fails, None, None)
  assert log == [("catching_up", 1)]
