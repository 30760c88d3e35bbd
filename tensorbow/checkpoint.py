"""TensorBow's own state beside a user's `Saver` checkpoint.

A `tf.compat.v1.train.Saver` checkpoint holds the central model and the
replicas' mean slots, which plain TensorFlow restores. To resume exactly,
a TensorBowSession also needs what only it has: every replica's variables
and slots and SMA's buffers (z_prev, the next central model, the
corrections). When a plain run saves a checkpoint, the session writes them
to `<checkpoint prefix>.tensorbow.npz` (each worker of a cluster its own,
`<prefix>.tensorbow-worker<k>.npz`); when a plain run restores one, it
loads them back if they were saved by a session of the same configuration.
When the `Saver` deletes a checkpoint past its `max_to_keep`, the state
beside it goes too (`follow_saver_retention`).
"""
import glob
import logging
import os

import numpy as np
import tensorflow as tf

from tensorbow import compat

SUFFIX = ".tensorbow.npz"
_SAVE_OPS = frozenset(["SaveV2", "Save", "SaveSlices"])
_RESTORE_OPS = frozenset(["RestoreV2", "Restore", "RestoreSlice"])
_CONFIG = "__config__"
_WAVES = "__waves__"  # training runs completed when it was saved

logger = logging.getLogger("tensorbow")


def saver_call(ops, feed_dict, graph):
  """("save" | "restore", checkpoint prefix) of a plain run, or None.

  A `Saver` feeds its filename tensor (a string scalar) with the prefix;
  a run whose closure `ops` saves or restores and that feeds exactly one
  string scalar is taken for one.
  """
  types = {op.type for op in ops}
  kind = ("save" if types & _SAVE_OPS else
          "restore" if types & _RESTORE_OPS else None)
  if kind is None:
    return None
  paths = []
  for key, value in feed_dict.items():
    try:
      tensor = graph.as_graph_element(key, allow_tensor=True,
                                      allow_operation=False)
    except (TypeError, ValueError, KeyError):
      continue
    if tensor.dtype == tf.string and tensor.shape.rank == 0:
      paths.append(value)
  if len(paths) != 1:
    return None
  path = paths[0]
  path = path.decode() if isinstance(path, bytes) else str(np.asarray(path))
  return kind, path


def state_path(prefix, worker=None):
  """Where the replica state of checkpoint `prefix` goes: that of worker
  `worker` of a cluster, or of the one process."""
  if worker is None:
    return prefix + SUFFIX
  return f"{prefix}.tensorbow-worker{worker}.npz"


def save(prefix, config, arrays, worker=None, waves=0):
  """Writes `arrays` ({key: ndarray}), `config` and the count of training
  runs `waves` beside `prefix`."""
  path = state_path(prefix, worker)
  tmp = path + ".tmp"
  # As TensorFlow's save makes the prefix's directory: on a cluster the
  # chief's may not have made it yet when another worker writes here.
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(tmp, "wb") as f:
    np.savez(f, **{_CONFIG: np.asarray(_described(config)),
                   _WAVES: np.asarray(waves, np.int64)}, **arrays)
  os.replace(tmp, path)


def pop_waves(loaded, default):
  """The count of training runs saved in `loaded` (what `load` returned),
  taken out of it; `default` if there is none."""
  if loaded is None or _WAVES not in loaded:
    return default
  return int(loaded.pop(_WAVES))


def load(prefix, config, worker=None):
  """{key: ndarray} saved beside `prefix` by a session with `config`, or
  None (with a log line saying why) if there is none or it differs."""
  path = state_path(prefix, worker)
  if not os.path.exists(path):
    logger.info("TensorBow: no %s; replicas re-seeded from the restored "
                "central model", path)
    return None
  with np.load(path) as data:
    saved = str(data[_CONFIG])
    if saved != _described(config):
      logger.warning(
          "TensorBow: %s was saved with %s, this session is %s; replicas "
          "re-seeded from the restored central model", path, saved,
          _described(config))
      return None
    return {k: data[k] for k in data.files if k != _CONFIG}


def remove_state(prefix, worker=None, every_worker=False):
  """Deletes the replica state beside checkpoint `prefix`: that of worker
  `worker` (or of the one process), or with `every_worker` every file of
  it, the one process's and each worker's."""
  paths = [state_path(prefix, worker)]
  if every_worker:
    paths += glob.glob(glob.escape(prefix) + ".tensorbow-worker*.npz")
  for path in paths:
    try:
      os.remove(path)
    except FileNotFoundError:
      pass


def _remove_every_state(prefix):
  remove_state(prefix, every_worker=True)


def follow_saver_retention():
  """From now on, a checkpoint a `Saver` deletes (past `max_to_keep`; not
  one kept by `keep_checkpoint_every_n_hours`) loses its replica state
  too."""
  compat.on_checkpoint_removal(_remove_every_state)


def _described(config):
  return repr(sorted(config.items()))
