"""The line `tensorbow-run` prints when a script ends
(tensorbow/cli/report.py): the sessions the script made by kind, the
training runs each ran, and whether the script failed."""
import pytest

from tensorbow import preemption
from tensorbow.cli import report as cli_report

# Builds no graph and opens no session: the TF1 mode cannot change it.
pytestmark = pytest.mark.mode_independent


def _report(sessions, status=0):
  """A report of `sessions`, [(kind, training runs or None for a plain
  TensorFlow session)]."""
  report = cli_report.Report()
  report.sessions = [(kind, None if runs is None else
                      {"training_runs": runs}) for kind, runs in sessions]
  report.status = status
  return str(report)


def test_the_report_names_each_session_by_kind_with_its_runs():
  assert _report([("tf.compat.v1.Session", 4)]) == (
      "tensorbow-run: the script made 1 TensorBowSession, which ran 4 "
      "training runs: 1 through tf.compat.v1.Session (4 training runs)")
  assert _report([("tf.compat.v1.Session", 4),
                  ("tensorbow.TensorBowSession", 1),
                  ("tf.compat.v1.Session", 0),
                  ("tf.compat.v1.Session", None)]) == (
      "tensorbow-run: the script made 3 TensorBowSessions, which ran 5 "
      "training runs: 2 through tf.compat.v1.Session (4, 0 training runs); "
      "1 through tensorbow.TensorBowSession (1 training run); and 1 plain "
      "TensorFlow session (a remote target, or "
      "SessionManager.wait_for_session): 1 through tf.compat.v1.Session")
  assert _report([("tf.compat.v1.train.SessionManager", 2)]).endswith(
      "1 through tf.compat.v1.train.SessionManager, Supervisor's (2 "
      "training runs)")


def test_a_script_that_trained_nothing_is_warned_of():
  assert _report([]) == (
      "tensorbow-run: the script made no TensorBowSession; warning: "
      "whatever it trained ran on plain TensorFlow")
  assert _report([("tf.compat.v1.Session", 0)]).endswith(
      "(0 training runs); warning: no training run: whatever it trained "
      "ran on plain TensorFlow")


def test_a_script_that_failed_says_so_and_not_plain_tensorflow():
  text = _report([("tf.compat.v1.Session", 0)], status=1)
  assert text == (
      "tensorbow-run: the script failed with exit status 1; it made 1 "
      "TensorBowSession, which ran 0 training runs: 1 through "
      "tf.compat.v1.Session (0 training runs)")
  assert _report([], status=3) == (
      "tensorbow-run: the script failed with exit status 3; it made no "
      "TensorBowSession")
  assert _report([("tf.compat.v1.Session", 2)],
                 status=preemption.EXIT_CODE).startswith(
                     "tensorbow-run: the script was stopped by SIGTERM at a "
                     f"wave (exit status {preemption.EXIT_CODE}); it made 1")


@pytest.mark.parametrize("error, status", [
    (None, 0), (SystemExit(), 0), (SystemExit(0), 0), (SystemExit(3), 3),
    (SystemExit("a message"), 1), (ValueError("x"), 1),
    (KeyboardInterrupt(), 130)])
def test_the_exit_status_is_pythons(error, status):
  assert cli_report.exit_status(error) == status
