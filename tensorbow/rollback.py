"""A session's variables as they were before a wave, to put back: what
lets the survivors of a lost worker drop the wave in flight, whatever it
had written, and run it again among themselves (scaleout, elasticity).

`save` copies every initialised variable of the execution graph (the
user's, the algorithm's) and the replicas' copies (kept by TensorBow's
kernels, not as variables) to backup variables beside them, in one
TensorFlow run and without leaving the device; `restore` copies them
back. State outside them is not kept: a `tf.data` iterator or a queue
(the trainer puts a wave's elements back instead), or a TensorFlow
random op's own position (TensorBow's random streams start anew in the
setting made after a change of membership anyway).
"""
import numpy as np
import tensorflow as tf

_KINDS = ("VariableV2", "VarHandleOp")
_SCOPE = "tensorbow_backup"


class Backup(object):
  """The variables of `graph`, run by `session`, kept before each wave."""

  def __init__(self, session, graph):
    self._session = session
    self._graph = graph
    self._version = None  # the graph's version last looked at
    self._variables = {}  # variable op name -> (save op, restore op)
    # Variable ops not initialised when last looked at -> the tensor that
    # says whether they are now (made once: asked before each wave).
    self._unset = {}
    self._replicated = {}  # Replicated's name -> (save op, restore op)
    self._ops = (None, None)  # (save, restore) of all kept
    self._keeps = None  # the names of what they keep
    self.saved = False  # whether there is a wave's start to put back

  def save(self, replicated=()):
    """Keeps the value of every initialised variable and of the replicas'
    copies `replicated` (rewrite.builder.Replicated, ReplicaState's)."""
    if self._graph.version != self._version:
      self._look_for_new()
    if self._unset:
      self._keep_initialised()
    keeps = (tuple(self._variables), tuple(p.name for p in replicated))
    if keeps != self._keeps:
      with self._graph.as_default():
        for part in replicated:
          if part.name not in self._replicated:
            self._replicated[part.name] = _replicated_pair(part)
        pairs = list(self._variables.values()) + [
            self._replicated[p.name] for p in replicated]
      # Callables, not a group: grouping ops marks them (an attribute
      # set by tf.control_dependencies), which TensorFlow refuses to do
      # to an op a session has run, and the ops of a save before are.
      self._ops = (self._session.make_callable([s for s, _ in pairs]),
                   self._session.make_callable([r for _, r in pairs]))
      self._keeps = keeps
      self._version = self._graph.version
    self._ops[0]()
    self.saved = True

  def restore(self):
    """Puts back what the last `save` kept, unless `forget` came since."""
    if self.saved:
      self._ops[1]()
    self.saved = False

  def forget(self):
    """The wave saved for is done: nothing is to be put back."""
    self.saved = False

  def _look_for_new(self):
    """Takes the graph's variable ops not seen yet as not initialised."""
    with self._graph.as_default():
      for op in self._graph.get_operations():
        if (op.type in _KINDS and op.name not in self._variables and
            op.name not in self._unset and
            not op.name.startswith(_SCOPE + "/")):
          self._unset[op.name] = (op, _initialized(op))
    self._version = self._graph.version

  def _keep_initialised(self):
    """Keeps from now on the variables of `_unset` now initialised."""
    names = list(self._unset)
    done = self._session.run([self._unset[n][1] for n in names])
    with self._graph.as_default():
      for name, initialised in zip(names, done):
        if initialised:
          self._variables[name] = _pair(self._unset.pop(name)[0])
    self._version = self._graph.version


def _initialized(op):
  with tf.name_scope(f"{_SCOPE}/"):
    if op.type == "VarHandleOp":
      return tf.raw_ops.VarIsInitializedOp(resource=op.outputs[0])
    return tf.raw_ops.IsVariableInitialized(ref=op.outputs[0])


def _pair(op):
  """(op copying variable `op` to its backup, op copying it back)."""
  dtype = op.get_attr("dtype")
  with tf.name_scope(f"{_SCOPE}/"), tf.compat.v1.colocate_with(op):
    backup = tf.raw_ops.VarHandleOp(
        dtype=dtype, shape=tf.TensorShape(None),
        shared_name=f"{_SCOPE}/{op.name}")
    kept = tf.raw_ops.ReadVariableOp(resource=backup, dtype=dtype)
    if op.type == "VarHandleOp":
      value = tf.raw_ops.ReadVariableOp(resource=op.outputs[0], dtype=dtype)
      back = tf.raw_ops.AssignVariableOp(resource=op.outputs[0], value=kept)
    else:
      value = op.outputs[0]
      back = tf.raw_ops.Assign(ref=op.outputs[0], value=kept,
                               validate_shape=False).op
    # A copy: a read may share the variable's buffer, which a kernel that
    # writes in place (a reference variable's) would change under it.
    save = tf.raw_ops.AssignVariableOp(resource=backup,
                                       value=tf.raw_ops.DeepCopy(x=value))
  return save, back


def _replicated_pair(part):
  """(op copying every replica's copy of `part` to a backup, op copying
  them back)."""
  with tf.name_scope(f"{_SCOPE}/"):
    backup = tf.raw_ops.VarHandleOp(
        dtype=part.dtype, shape=tf.TensorShape(None),
        shared_name=f"{_SCOPE}/{part.name}")
    save = tf.raw_ops.AssignVariableOp(resource=backup, value=part.stacked())
    back = part.set(
        tf.raw_ops.ReadVariableOp(resource=backup, dtype=part.dtype),
        tf.range(part.num_replicas, dtype=tf.int32), stacked=True)
  return save, back


def snapshot(session, replicas, names):
  """Copies of what an atomic wave's commit may write to the replicated
  variables `names` ({key: array}, replicas.ReplicaState's keys): where an
  op after a write may fail, the commit puts them back."""
  tensors = replicas.snapshot_tensors(names)
  keys = sorted(tensors)
  values = session.run([tensors[k] for k in keys])
  return {k: np.array(v, copy=True) for k, v in zip(keys, values)}
