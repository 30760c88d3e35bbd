"""`TensorBowSessionCreator`: TensorBow sessions for `MonitoredSession`.

`tf.compat.v1.train.MonitoredSession` takes its session from a
`session_creator`; TensorFlow's `ChiefSessionCreator` makes it through a
`SessionManager`, which initialises or restores the model on a plain
`tf.compat.v1.Session`. The creator here does the same on a
`TensorBowSession`, so hooks, checkpoints and recovery work as they do
with TensorFlow's while the training runs train the replicas.
`TensorBowSessionManager` is that `SessionManager`: `tensorbow-run` also
puts a subclass of it where `Supervisor` finds TensorFlow's (cli/patches.py).
"""
import time

import tensorflow as tf

from tensorbow import options as tb_options
from tensorbow import session as tb_session

_train = tf.compat.v1.train


class TensorBowSessionCreator(_train.ChiefSessionCreator):
  """`ChiefSessionCreator` whose sessions are `TensorBowSession`s.

  Args:
    scaffold, master, config, checkpoint_dir, checkpoint_filename_with_path:
      as for `tf.compat.v1.train.ChiefSessionCreator`.
    **options: passed to `TensorBowSession` (`replicas`, `algorithm`,
      `alpha`, `central_momentum`, `nonfinite`, `cluster_timeout`,
      `heartbeat_timeout`, `devices`, `prefetch`).

  Raises:
    TypeError: for an option `TensorBowSession` does not take.
    ValueError: for an option out of range (both before any session is
      made).
  """

  def __init__(self, scaffold=None, master="", config=None,
               checkpoint_dir=None, checkpoint_filename_with_path=None,
               **options):
    tb_options.check_session_options(**options)
    super().__init__(scaffold=scaffold, master=master, config=config,
                     checkpoint_dir=checkpoint_dir,
                     checkpoint_filename_with_path=(
                         checkpoint_filename_with_path))
    self._options = options

  def _get_session_manager(self):
    if self._session_manager is None:
      self._session_manager = TensorBowSessionManager(
          self._options,
          local_init_op=self._scaffold.local_init_op,
          local_init_feed_dict=self._scaffold.local_init_feed_dict,
          ready_op=self._scaffold.ready_op,
          ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
          graph=tf.compat.v1.get_default_graph())
    return self._session_manager


class TensorBowSessionManager(_train.SessionManager):
  """A `SessionManager` whose `prepare_session` and `recover_session` make
  `TensorBowSession`s.

  TensorFlow's makes those sessions in `_restore_checkpoint` (the one
  place); this one makes them with `make_session` there and restores as
  TensorFlow's does. (`wait_for_session`, which waits for another process
  to make the model ready, keeps TensorFlow's session.)

  Args:
    options: `TensorBowSession`'s keyword options, as a dict.
    **kwargs: as for `tf.compat.v1.train.SessionManager`.
  """

  def __init__(self, options, **kwargs):
    super().__init__(**kwargs)
    self._options = options

  def make_session(self, master, graph, config):
    """The session `prepare_session` and `recover_session` start from.

    Args:
      master, graph, config: as for `tf.compat.v1.Session`.

    Returns:
      A `TensorBowSession` with this manager's options.
    """
    return tb_session.TensorBowSession(master, graph, config, **self._options)

  def _restore_checkpoint(self, master, saver=None, checkpoint_dir=None,
                          checkpoint_filename_with_path=None,
                          wait_for_checkpoint=False, max_wait_secs=7200,
                          config=None):
    if checkpoint_dir and checkpoint_filename_with_path:
      raise ValueError("Can not provide both checkpoint_dir and "
                       "checkpoint_filename_with_path.")
    self._target = master
    sess = self.make_session(master, self._graph, config)
    if not saver or not (checkpoint_dir or checkpoint_filename_with_path):
      return sess, False
    if checkpoint_filename_with_path:
      _restore(sess, saver, checkpoint_filename_with_path)
      return sess, True
    waited = 0
    state = tf.train.get_checkpoint_state(checkpoint_dir)
    while not state or not state.model_checkpoint_path:
      if not wait_for_checkpoint or waited >= max_wait_secs:
        return sess, False
      time.sleep(self._recovery_wait_secs)
      waited += self._recovery_wait_secs
      state = tf.train.get_checkpoint_state(checkpoint_dir)
    _restore(sess, saver, state.model_checkpoint_path)
    saver.recover_last_checkpoints(state.all_model_checkpoint_paths)
    return sess, True


def _restore(sess, saver, path):
  # As TensorFlow's: SavedModel initialisers first, then the checkpoint.
  initializers = tf.compat.v1.get_collection("saved_model_initializers")
  if initializers:
    sess.run(initializers)
  saver.restore(sess, path)
