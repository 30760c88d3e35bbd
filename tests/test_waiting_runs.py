"""No training run waits holding the session (session_lock.py).

The class of defect: a training run that holds the session's lock (or its
wave, or the runtime) while one of its ops blocks inside TensorFlow on
state only another thread's run provides — a token queue a queue runner
fills, `SyncReplicasOptimizer`'s accumulators, another thread's training
runs — deadlocks that run. Each scenario (waiting_runs_scripts.py) runs
in a child process killed after TIMEOUT seconds, so a hang fails the test
and leaves nothing behind; its values are compared with
`tf.compat.v1.Session`'s, or with TensorBow's own without the wait.

And its sequel: a session closed, or a process exiting, while one of its
runs is blocked. The blocked run is cancelled with TensorFlow's
CancelledError, as TensorFlow's close cancels it; its wave's thread,
which may end only once the interpreter exits, must neither abort the
process ("terminate called without an active exception") nor hang it:
every child must exit with status 0 and never print that.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from children import child_env
import waiting_runs_scripts as scripts

# Each scenario is a child process of its own (end to end, seconds each):
# the slow tier's.
pytestmark = pytest.mark.slow

TIMEOUT = 60
_SCRIPT = scripts.__file__


def _run(tf_mode, scenario, replicas):
  """The scenario's {"values": ...} or {"error": ..., "message": ...}."""
  try:
    done = subprocess.run(
        [sys.executable, _SCRIPT, tf_mode, scenario, str(replicas)],
        capture_output=True, text=True, timeout=TIMEOUT, env=child_env(),
        check=False)
  except subprocess.TimeoutExpired:
    pytest.fail(f"{scenario} at L = {replicas} did not finish within "
                f"{TIMEOUT} s: a run waits holding the session")
  assert done.returncode == 0, done.stderr[-3000:]
  assert "terminate called" not in done.stderr, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def _values(tf_mode, scenario, replicas):
  result = _run(tf_mode, scenario, replicas)
  assert "values" in result, result
  return np.array(result["values"], np.float64)


def test_sync_replicas_trains_as_tensorflow_at_one_replica(tf_mode):
  expected = _values(tf_mode, "sync_replicas", 0)
  got = _values(tf_mode, "sync_replicas", 1)
  # Per run: the loss, the global step (exactly) and w after it.
  np.testing.assert_array_equal(got[:, 1], expected[:, 1])
  np.testing.assert_allclose(got, expected, rtol=1e-6)
  assert len(got) == scripts.STEPS


def test_sync_replicas_snippet_of_the_issue_returns(tf_mode):
  # The chief's queue runner is still waiting on the accumulator when the
  # MonitoredSession closes, and its process ends right after. One
  # initial token: the chief's apply races the worker's next run in
  # TensorFlow too, so only the first run's loss is fixed (the global
  # step and w read after it are not, in TensorFlow either).
  expected = _values(tf_mode, "sync_replicas_issue", 0)
  np.testing.assert_allclose(_values(tf_mode, "sync_replicas_issue", 1)[:, 0],
                             expected[:, 0], rtol=1e-6)


@pytest.mark.parametrize("replicas", [2, 4])
def test_sync_replicas_is_refused_by_name_at_several_replicas(tf_mode,
                                                              replicas):
  result = _run(tf_mode, "sync_replicas", replicas)
  assert result.get("error") == "UnimplementedError", result
  assert "AccumulatorTakeGradient" in result["message"]
  assert "SyncReplicasOptimizer" in result["message"]
  assert f"with {replicas} replicas" in result["message"]


@pytest.mark.parametrize("replicas", [1, 4])
def test_token_queue_gates_training_runs(tf_mode, replicas):
  # A token changes nothing a run computes: the values are those of the
  # same runs taking none (TensorFlow's at L = 1).
  expected = _values(tf_mode, "ungated", 0 if replicas == 1 else replicas)
  np.testing.assert_allclose(_values(tf_mode, "token_queue", replicas),
                             expected, rtol=1e-5)


@pytest.mark.parametrize("replicas", [1, 4])
def test_four_threads_train_one_session(tf_mode, replicas):
  # Every run trains on the same batch, so any order of the serialised
  # runs ends where one thread taking them all in turn ends.
  expected = _values(tf_mode, "one_thread", 0 if replicas == 1 else replicas)
  got = _values(tf_mode, "four_threads", replicas)
  assert got[0] == 4 * scripts.STEPS == expected[0]
  np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize("replicas", [1, 4])
def test_closing_cancels_a_blocked_training_run(tf_mode, replicas):
  # As TensorFlow's close: the blocked run raises CancelledError at once,
  # is not counted, and the session refuses runs after.
  expected = _run(tf_mode, "closed_while_waiting", 0)["values"]
  error, seconds, counted, after = _run(tf_mode, "closed_while_waiting",
                                        replicas)["values"]
  assert (error, after) == (expected[0], expected[3]) == (
      "CancelledError", "Attempted to use a closed Session.")
  assert seconds < scripts.BOUND
  assert counted == 0


@pytest.mark.parametrize("replicas", [1, 4])
def test_process_exits_with_a_blocked_training_run(tf_mode, replicas):
  # _run checks the exit status and that nothing called terminate.
  assert _run(tf_mode, "exit_while_waiting", replicas)["values"] == [True]
