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

The state is scoped to the `Saver` (`Scope`, read from the run's save or
restore ops): a save keeps the state of the variables the Saver saves,
under the names it saves them by, and a restore loads the state of the
variables it restores alone, so a Saver over one layer leaves the other
layers' replicas, slots and algorithm buffers as they were. The count of
waves (the algorithm's phase) comes back only with a restore of every
model variable.
"""
import collections
import glob
import logging
import os

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow.rewrite import analysis

SUFFIX = ".tensorbow.npz"
# Per op type of a Saver: (input of the names in the checkpoint, input of
# their slices or None, first input of the saved tensors or None: a
# restore, whose outputs are the restored tensors in the names' order).
_SAVE_OPS = {"SaveV2": (1, 2, 3), "Save": (1, None, 2),
             "SaveSlices": (1, 2, 3)}
_RESTORE_OPS = {"RestoreV2": (1, 2, None), "Restore": (1, None, None),
                "RestoreSlice": (1, 2, None)}
_CONFIG = "__config__"
_WAVES = "__waves__"  # training runs completed when it was saved

logger = logging.getLogger("tensorbow")


def saves(ops):
  """Whether a run of closure `ops` writes a checkpoint (a `Saver`'s
  save, whatever it is fed)."""
  return any(op.type in _SAVE_OPS for op in ops)


def saver_call(ops, feed_dict, graph):
  """("save" | "restore", checkpoint prefix) of a plain run, or None.

  A `Saver` feeds its filename tensor (a string scalar) with the prefix;
  a run whose closure `ops` saves or restores and that feeds exactly one
  string scalar is taken for one. The prefix is a `Prefix`, scoped to the
  variables the run saves or restores when its ops tell them.

  Args:
    ops: the run's closure, ops of the execution graph.
    feed_dict: {feed key: value} of the run.
    graph: the user's `tf.Graph` (its model variables).
  """
  kind = ("save" if saves(ops) else
          "restore" if any(op.type in _RESTORE_OPS for op in ops) else None)
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
  return kind, Prefix(path, Scope.of_run(kind, ops, graph))


class Prefix(str):
  """A checkpoint prefix, and `scope`: the `Scope` of the Saver's run that
  saves or restores it (None: every variable's state, as a bare str)."""

  def __new__(cls, path, scope=None):
    prefix = super().__new__(cls, path)
    prefix.scope = scope
    return prefix


class Scope(collections.namedtuple("Scope", ["variables", "every_model"])):
  """The variables a Saver's run saves or restores.

  Attributes:
    variables: {name in the checkpoint: variable op name}; a slice of a
      partitioned variable is named `<name>@<slice spec>`.
    every_model: whether they include every model variable of the graph
      (a restore of them restores the count of waves too).
  """

  @classmethod
  def of_run(cls, kind, ops, graph):
    """The Scope of a "save" or "restore" run of closure `ops` in user
    graph `graph`, or None if a name or variable cannot be told."""
    variables, members = {}, set(ops)
    for op in ops:
      inputs = (_SAVE_OPS if kind == "save" else _RESTORE_OPS).get(op.type)
      if inputs is None:
        continue
      names = _saved_names(op, *inputs[:2])
      tensors = (op.inputs[inputs[2]:] if kind == "save" else
                 [_assigned(t, members) for t in op.outputs])
      if names is None or len(names) != len(tensors):
        return None
      for name, tensor in zip(names, tensors):
        var = _variable_behind(tensor)
        if var is not None:
          variables[name] = var.name
    models = analysis.model_variables(
        graph, analysis.trainable_variable_ops(graph))
    return cls(variables, models <= set(variables.values()))

  def saved(self, arrays):
    """{key in the file: value} of a replica state `arrays` ({key: value}
    keyed by variable op name): the scope's, under their names in the
    checkpoint."""
    names = {var: name for name, var in self.variables.items()}
    return _renamed(arrays, names)

  def restored(self, loaded):
    """{key: value} of the scope's variables' state in `loaded` (what
    `load` read, keyed by names in the checkpoint), keyed by variable op
    name; the count of waves only if the scope is every model's."""
    state = _renamed(loaded, self.variables)
    if self.every_model and _WAVES in loaded:
      state[_WAVES] = loaded[_WAVES]
    return state


def _saved_names(op, names_input, slices_input):
  """The checkpoint names `op` saves or restores, a slice's with its spec
  (`<name>@<spec>`); None if they are not constants."""
  def constant(index):
    source = op.inputs[index].op
    if source.type != "Const":
      return None
    values = np.atleast_1d(tf.make_ndarray(source.get_attr("value")))
    return [v.decode() if isinstance(v, bytes) else str(v) for v in values]

  names = constant(names_input)
  slices = (constant(slices_input) if slices_input is not None else
            [""] * len(names or []))
  if names is None or slices is None or len(slices) != len(names):
    return None
  return [f"{n}@{s}" if s else n for n, s in zip(names, slices)]


def _assigned(tensor, ops):
  """The variable (ref or handle) that a restored `tensor` is assigned to
  by a write among `ops`, or None."""
  for consumer in tensor.consumers():
    if consumer not in ops:
      continue
    if consumer.type in analysis.PASS_THROUGH:
      found = _assigned(consumer.outputs[0], ops)
      if found is not None:
        return found
    elif consumer.type in ("Assign", "AssignVariableOp"):
      return consumer.inputs[0]
  return None


def _variable_behind(tensor):
  """The variable op whose value (ref, handle or read) `tensor` is."""
  if tensor is None:
    return None
  op = tensor.op
  while op.type in analysis.PASS_THROUGH and op.inputs:
    op = op.inputs[0].op
  if op.type == "ReadVariableOp":
    return analysis.variable_of(op.inputs[0])
  return analysis.variable_of(tensor)


def _renamed(arrays, names):
  """The entries of `arrays` that are the state of a variable in `names`
  ({old name: new name}), `<old>/<part>` renamed `<new>/<part>`.

  A key is the state of the longest variable name it extends that has
  replicas in `arrays` (`<name>/replica_0`): "w/Momentum/replica_0" is
  the slot's, "w/sma/central_prev" the variable's.
  """
  owners = {k[:-len("/replica_0")] for k in arrays
            if k.endswith("/replica_0")}
  renamed = {}
  for key, value in arrays.items():
    owner = _owner(key, owners)
    if owner in names:
      renamed[names[owner] + key[len(owner):]] = value
  return renamed


def _owner(key, names):
  """The longest of `names` of which `key` is `<name>/...`, or None."""
  parts = key.split("/")
  for end in range(len(parts) - 1, 0, -1):
    name = "/".join(parts[:end])
    if name in names:
      return name
  return None


def state_path(prefix, worker=None):
  """Where the replica state of checkpoint `prefix` goes: that of worker
  `worker` of a cluster, or of the one process."""
  if worker is None:
    return prefix + SUFFIX
  return f"{prefix}.tensorbow-worker{worker}.npz"


def save(prefix, config, arrays, worker=None, waves=0):
  """Writes `arrays` ({key: ndarray}), `config` and the count of training
  runs `waves` beside `prefix`: with a `Prefix` scoped to its Saver, the
  arrays of the Saver's variables alone, under the Saver's names."""
  scope = getattr(prefix, "scope", None)
  if scope is not None:
    arrays = scope.saved(arrays)
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
  None (with a log line saying why) if there is none or it differs; with
  a `Prefix` scoped to its Saver, the state of the variables it restores
  alone (`Scope.restored`)."""
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
    loaded = {k: data[k] for k in data.files if k != _CONFIG}
  scope = getattr(prefix, "scope", None)
  return loaded if scope is None else scope.restored(loaded)


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
