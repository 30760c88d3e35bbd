"""What the copies and the algorithms build with: one session setting's
scope in the execution graph.

A `Builder` names TensorBow's ops (all below one prefix), makes the ops
that recur (seeding, refreshing, checkpoint reads) only once, and offers
an algorithm (algorithms/base.py) what it needs to replace a replica's
optimizer step: constants, state with one copy per replica
(`Replicated`), the replica index a task is fed, and nodes naming a
replica's copy or a device's handle of a variable. The copier
(replicate.py) and the replica state (replicas.py) share it.
"""
import contextlib
import re

import numpy as np
import tensorflow as tf

from tensorbow import compat
from tensorbow import op_nodes
from tensorbow import ops as tb_ops
from tensorbow.rewrite import graph_util

# How TensorFlow's error messages name a node.
_NODE_TAG = re.compile(r"\{\{node ([^}]+)\}\}")


class Replicated(object):
  """A variable with one copy per replica in the resource manager."""

  def __init__(self, name, dtype, shape, num_replicas):
    self.name = name  # the copies' name, before "/replica_<r>"
    self.dtype = dtype  # base dtype
    self.shape = shape
    self.num_replicas = num_replicas

  def attrs(self):
    """The attributes every op on these replicas takes."""
    return dict(var_name=self.name, num_replicas=self.num_replicas)

  def set(self, value, replicas, stacked=False):
    """Op setting the copies of `replicas` (an int32 vector) to `value`."""
    return tb_ops.library().tensor_bow_set_replicas(
        value=value, replicas=replicas, stacked=stacked, **self.attrs())

  def mean(self, source, mean=True):
    """The replicas' mean, or replica `source`'s copy (see ReplicaMean)."""
    return tb_ops.library().tensor_bow_replica_mean(
        source=source, dtype=self.dtype, shape=self.shape, mean=mean,
        **self.attrs())

  def stacked(self):
    """Op reading every replica's copy, stacked on a first axis of L."""
    return tb_ops.library().tensor_bow_stack_replicas(
        dtype=self.dtype, shape=self.shape, **self.attrs())

  def handles(self):
    """Op giving each replica's copy as a resource handle."""
    return tb_ops.library().tensor_bow_replica_handles(
        dtype=self.dtype, shape=self.shape, **self.attrs())


class Builder(object):
  """TensorBow's scope in an execution graph for one setting of L.

  Args:
    graph: the execution graph.
    num_replicas: L.
    num_groups: the runtime's stream groups: the copies of the learning
      part.
    share_variables: the copies train the user's own variables (L = 1, or
      an algorithm whose tasks share the model): one copy at L = 1, and
      none pinned to a device.
    devices: the session's CPU devices, CPU:0 first; with more than one
      copy and as many devices, copy g is pinned to device g.
    placement: a `devices.Placement` of the replicas on the devices the
      session was given (`devices` then names each group's), or None;
      the algorithm keeps state per device.
    first_replica: the index of replica 0 among all of a cluster's
      replicas (worker k of a cluster with L replicas a worker: k * L).
  """

  def __init__(self, graph, num_replicas, num_groups, share_variables=False,
               devices=None, placement=None, first_replica=0):
    self._graph = graph
    self._num_replicas = num_replicas
    self._first_replica = first_replica
    self._shares = share_variables
    self._num_groups = (1 if share_variables and num_replicas == 1 else
                        max(1, num_groups))
    self._placement = placement
    self._devices = (list(devices[:self._num_groups])
                     if devices and not share_variables and
                     len(devices) >= self._num_groups > 1 else None)
    self._prefix = None  # taken when first used
    self._once = {}  # (purpose, key) -> what was built for it
    self._constants = {}
    self._replica = None

  @property
  def graph(self):
    return self._graph

  @property
  def prefix(self):
    """The name scope of TensorBow's ops, below which no op the user adds
    later (imported under its own name) can want their names."""
    if self._prefix is None:
      with self._graph.as_default():
        self._prefix = self._graph.unique_name("tensorbow", mark_as_used=True)
    return self._prefix

  @property
  def shares_variables(self):
    """Whether the copies train the user's own variables."""
    return self._shares

  @property
  def num_groups(self):
    return self._num_groups

  @property
  def num_replicas(self):
    return self._num_replicas

  @property
  def first_replica(self):
    """The index of replica 0 among all of a cluster's replicas."""
    return self._first_replica

  @property
  def placement(self):
    """The `devices.Placement` of the replicas on several devices, each
    keeping its own copy of the central model, or None."""
    return self._placement

  def device(self, group):
    """The device stream group `group`'s copy is pinned to, or None."""
    return self._devices[group] if self._devices else None

  @contextlib.contextmanager
  def building(self):
    """Where TensorBow's ops are made: below the prefix."""
    graph = self._graph
    with graph.as_default(), graph.control_dependencies(None), \
        graph.name_scope(self.prefix + "/"):
      yield

  def once(self, purpose, key, build):
    """What `build()` makes for `purpose` over `key`, made only once.

    Seeding, refreshing and resetting recur with the same variables; making
    their ops once keeps the graph from growing with every plain run.
    """
    if (purpose, key) not in self._once:
      with self.building():
        self._once[(purpose, key)] = build()
    return self._once[(purpose, key)]

  # ---- What an algorithm may use (algorithms/base.py) ---------------------

  def constant(self, value, dtype):
    """A constant of `value` in `dtype` in the execution graph, made once
    per value and dtype."""
    key = (value.tobytes() if isinstance(value, np.ndarray) else value, dtype)
    if key not in self._constants:
      with self.building():
        self._constants[key] = tf.constant(value, dtype=dtype,
                                           name="constant")
    return self._constants[key]

  def replicated(self, name, dtype, shape):
    """State named `name` with one copy per replica."""
    return Replicated(name, dtype, shape, self._num_replicas)

  def variable_replicas(self, var_op):
    """The copies, one per replica, of the user's variable op `var_op`."""
    dtype, shape = graph_util.dtype_and_shape(var_op)
    return self.replicated(f"{self.prefix}/var/{var_op.name}", dtype, shape)

  def all_replicas(self):
    """The int32 vector [0, L): every replica, for ops that take some."""
    return self.constant(np.arange(self._num_replicas, dtype=np.int32),
                         tf.int32)

  @property
  def replica_input(self):
    """The int32 scalar placeholder a task is fed its replica's index by."""
    if self._replica is None:
      with self.building():
        self._replica = tf.compat.v1.placeholder(tf.int32, [],
                                                 name="replica")
    return self._replica

  def input_stand_in(self, tensor, shard=False):
    """The placeholder the copies read in place of `tensor`: an input
    pipeline's output that training runs take before the wave and feed,
    or, with `shard`, a batch feed of fixed size whose shards the
    copies read (its first dimension unknown: rewrite/batch_sizes.py).

    Fed, the pipeline's op would still run: Grappler turns a Shape of a
    tensor of known shape into a constant that waits on the tensor's op,
    and TensorFlow prunes what a fed op waits on, not the op itself. A
    placeholder has nothing to wait on."""
    shape = (tf.TensorShape([None] + tensor.shape.as_list()[1:]) if shard
             else tensor.shape)
    suffix = "_shard" if shard else ""
    return self.once("stand_in", (tensor.name, suffix), lambda: (
        tf.compat.v1.placeholder(tensor.dtype, shape,
                                 name=f"input/{flat(tensor.op.name)}_"
                                 f"{tensor.value_index}{suffix}")))

  def replica_variable_node(self, node, op_type, replicated, aux):
    """The NodeDef of `replicated` resolved to the task's replica in a
    group's copy: `op_type` named and placed as `node`, reading the
    replica index, which `aux(key, tensor)` names as an input."""
    return op_nodes.node_def(
        op_type, node.name, device=node.device,
        replica=aux("__tensorbow__/replica", self.replica_input),
        var_name=replicated.name, dtype=replicated.dtype,
        shape=replicated.shape, num_replicas=replicated.num_replicas)

  def device_handle(self, name, handle, aux):
    """(input, NodeDefs) naming resource `handle` (a VarHandleOp's, outside
    the copies) in a group's copy: as is, or, with the copies pinned to
    devices, through a node `name` that makes it a handle of the group's
    device (TensorBowDeviceVarHandle)."""
    if self._devices is None:
      return aux(f"__tensorbow__/{name}", handle), []
    op = handle.op
    node = op_nodes.node_def(
        "TensorBowDeviceVarHandle", name, container=op.get_attr("container"),
        shared_name=op.get_attr("shared_name") or op.name.encode(),
        dtype=op.get_attr("dtype"), shape=op.get_attr("shape"))
    return name + ":0", [node]

  # ---- Names ---------------------------------------------------------------

  def copy_name(self, group, name, cut=0):
    """The name of stream group `group`'s copy of op `name` (see `flat`)
    among the copies of cut number `cut` (replicate.Copies)."""
    scope = f"group_{group}_{cut}" if cut else f"group_{group}"
    return f"{self.prefix}/{scope}/{flat(name)}"

  def user_name(self, name):
    """The user's name of the op or tensor a group's copy `name` copies."""
    head = f"{self.prefix}/group_"
    if not name.startswith(head):
      return name
    _, _, rest = name[len(head):].partition("/")
    return unflat(rest)

  def user_error(self, error, graph):
    """`error` as TensorFlow's `Session.run` would raise it for the user's
    op: the copies' names made the user's, `op` and `node_def` the user's
    op in `graph`, and the message interpolated with where that op was
    made ("Detected at node ... defined at")."""
    pattern = re.compile(
        re.escape(self.prefix) + r"/group_\d+(?:_\d+)?/([^\s:{}'\"]+)")
    message = pattern.sub(lambda m: unflat(m.group(1)), error.message)
    op = None
    for name in _NODE_TAG.findall(message):
      try:
        op = graph.get_operation_by_name(name)
        break
      except KeyError:
        continue
    return graph_util.error_at(error, op,
                               compat.interpolate_graph(message, graph))


def flat(name):
  """`name` with its scopes flattened, as a copy's op is named.

  Below a group's scope a copy's name has no '/': copies made by later
  runs then never fall inside an earlier copy's name scope, where
  TensorFlow's importer would rename them. The mapping is one to one and
  always gives a name TensorFlow accepts (after a '>' must come a letter,
  a digit or '.'), whatever the user's name: '/' becomes '>.', and the
  user's own '.' and '>' become '..' and '.>'. A '>' followed by a letter
  is left for the nodes TensorBow adds beside a copy
  (`<copy>>tensorbow_<role>`), which no user name can map to.
  """
  out = []
  for char in name:
    if char == "/":
      out.append(">.")
    elif char in ".>":
      out.append("." + char)
    else:
      out.append(char)
  return "".join(out)


def unflat(name):
  """The user's name `flat` made `name` from; a node TensorBow added
  beside a copy reads as `<user name>/tensorbow_<role>`."""
  out = []
  i = 0
  while i < len(name):
    char = name[i]
    following = name[i + 1:i + 2]
    if char == "." and following in (".", ">"):
      out.append(following)
      i += 2
    elif char == ">" and following == ".":
      out.append("/")
      i += 2
    elif char == ">":
      out.append("/")
      i += 1
    else:
      out.append(char)
      i += 1
  return "".join(out)
