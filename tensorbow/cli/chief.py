"""What only a cluster's chief writes when scripts run under
`tensorbow-run`: the patches that hold the other workers' writes back.

Every worker runs the same script, so each would write the same
checkpoint files and summaries into the same folders. On a worker other
than the chief (worker 0), while the script runs:

- `Saver.save` runs only the save op, which the TensorBowSession turns
  into a save of this worker's replica state (session.py); no checkpoint
  state file and no meta graph are written, and the checkpoint's path is
  returned as TensorFlow's save returns it, and the `Saver`'s retention
  (`max_to_keep`) deletes this worker's state of the checkpoints it drops;
- `FileWriter`s write nothing and make no event file.

The session's log line says so for checkpoints, one here for summaries.
"""
import logging

import numpy as np
import tensorflow as tf

from tensorbow import checkpoint
from tensorbow import compat

_logger = logging.getLogger("tensorbow")


def patches(job):
  """[(object, attribute, original, replacement)] for `job` (a
  cluster.Cluster or None): none unless this worker is not the chief."""
  if job is None or job.is_chief:
    return []
  checkpoint.follow_saver_retention()
  saver = tf.compat.v1.train.Saver
  writer = tf.compat.v1.summary.FileWriter
  said = []

  def save(self, sess, save_path, global_step=None, *args, **kwargs):
    del args, kwargs
    if global_step is not None:
      if not isinstance(global_step, (int, np.integer)):
        global_step = int(sess.run(global_step))
      save_path = f"{save_path}-{global_step}"
    sess.run(self.saver_def.save_tensor_name,
             {self.saver_def.filename_tensor_name: save_path})
    # The chief deletes its checkpoints past max_to_keep; this worker's
    # state beside them follows the same retention.
    compat.save_retention(
        self, save_path,
        lambda prefix: checkpoint.remove_state(prefix, job.index))
    return save_path

  def file_writer(self, logdir, graph=None, max_queue=10, flush_secs=120,
                  graph_def=None, filename_suffix=None, session=None):
    del max_queue, flush_secs, filename_suffix, session
    if not said:
      said.append(logdir)
      _logger.warning("TensorBow: worker %d leaves summaries to the chief "
                      "(worker 0)", job.index)
    compat.silent_file_writer_init(self, logdir, graph, graph_def)

  return [(saver, "save", saver.save, save),
          (writer, "__init__", writer.__init__, file_writer)]
