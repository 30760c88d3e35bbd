"""Random ops in the copies: one stream per replica (DESIGN.md, "Random
streams").

A TF1 random op (`RandomUniform`, ...) keeps its Philox generator in its
kernel, one per node: copied once per stream group, it would give each
group's copy the same stream, and which replica draws which part of it
would depend on which group ran its task. In the copies it becomes the
matching op of `tf.random.Generator` (`StatefulUniform`, ...), which
draws from a state variable, with one state per replica (a replicated
int64[3] variable: the 128-bit counter, then the key). Those ops advance
the counter as TensorFlow's kernel does (256 per value drawn), so
replica 0, whose state starts at TensorFlow's own (key `seed`, counter
`seed2 << 64`), draws exactly TensorFlow's stream; replica r > 0 starts at
a key and counter derived from the op's seeds and r. Each replica's
stream then depends only on what it drew in earlier waves, never on the
group that runs it.
"""
import hashlib
import logging

import numpy as np
import tensorflow as tf

from tensorbow import op_nodes
from tensorbow.rewrite import analysis

# TF1 random op -> the op drawing the same values from a state variable.
STATEFUL = {
    "RandomUniform": "StatefulUniform",
    "RandomStandardNormal": "StatefulStandardNormalV2",
    "TruncatedNormal": "StatefulTruncatedNormal",
    "RandomUniformInt": "StatefulUniformInt",
}
# Random ops with no such equivalent: each copy keeps its own stream.
UNCOVERED = frozenset([
    "RandomShuffle", "Multinomial", "RandomGamma", "RandomPoisson",
    "RandomPoissonV2", "ParameterizedTruncatedNormal", "RandomCrop"])
PHILOX = 1  # tf.random.Algorithm.PHILOX
_logged = set()


def state_values(op, first_replica, num_replicas, rng=None):
  """int64 [num_replicas, 3]: each replica's starting state for random op
  `op`, replica r being replica `first_replica + r` of the whole run (a
  cluster's). Unseeded ops (seed = seed2 = 0) draw from `rng` (a NumPy
  Generator; default one seeded by the OS), as TensorFlow's kernel then
  does."""
  seed, seed2 = op.get_attr("seed"), op.get_attr("seed2")
  states = np.zeros([num_replicas, 3], np.uint64)
  for r in range(num_replicas):
    replica = first_replica + r
    if seed == 0 and seed2 == 0:
      rng = rng or np.random.default_rng()
      counter_high, key = rng.integers(0, 2**64, 2, dtype=np.uint64)
    elif replica == 0:
      counter_high, key = np.uint64(seed2 % 2**64), np.uint64(seed % 2**64)
    else:
      digest = hashlib.blake2b(f"{seed},{seed2},{replica}".encode(),
                               digest_size=16).digest()
      counter_high, key = np.frombuffer(digest, np.uint64)
    states[r] = [0, counter_high, key]
  return states.view(np.int64)


def stream_nodes(node, op, handle_input, algorithm_input, replicated):
  """The NodeDefs replacing random op NodeDef `node` (a copy of `op`,
  inputs resolved) in a group's copy: the handle of the task's replica's
  state, one of `replicated`'s copies (`handle_input` names its replica
  index, in `op`'s frame), and the stateful op, named as `node`."""
  handle = op_nodes.node_def(
      "TensorBowReplicaVarHandle", node.name + ">tensorbow_stream",
      device=node.device, replica=handle_input, var_name=replicated.name,
      dtype=tf.int64, shape=[3], num_replicas=replicated.num_replicas)
  out = tf.compat.v1.NodeDef(name=node.name, op=STATEFUL[op.type],
                             device=node.device)
  data = [i for i in node.input if not i.startswith("^")]
  control = [i for i in node.input if i.startswith("^")]
  out.input.extend([handle.name + ":0", algorithm_input] + data + control)
  out.attr["shape_dtype"].type = node.attr["T"].type
  out.attr["dtype"].type = node.attr[
      "Tout" if op.type == "RandomUniformInt" else "dtype"].type
  return handle, out


def while_frames(op, memo):
  """((frame name, parallel iterations), ...) of the TF1 while loops op
  `op` runs in, outermost first, as TensorFlow's executor finds its frame
  from its inputs' (an imported graph has no control flow contexts).
  `memo` keeps what was found, by op name."""
  stack = [op]
  while stack:
    current = stack[-1]
    if current.name in memo:
      stack.pop()
      continue
    # A NextIteration's edge into a Merge is the loop's only back edge.
    inputs = [t.op for t in current.inputs
              if t.op.type not in ("NextIteration", "RefNextIteration")]
    inputs += list(current.control_inputs)
    pending = [i for i in inputs if i.name not in memo]
    if pending:
      stack.extend(pending)
      continue
    stack.pop()
    if current.type in ("Enter", "RefEnter"):
      frames = memo[inputs[0].name] + ((
          current.get_attr("frame_name").decode(),
          current.get_attr("parallel_iterations")),)
    elif current.type in ("Exit", "RefExit"):
      frames = memo[inputs[0].name][:-1]
    else:
      frames = max((memo[i.name] for i in inputs), key=len, default=())
    memo[current.name] = frames
  return memo[op.name]


def enter_nodes(name, tensor_input, dtype, frames, device):
  """NodeDefs bringing `tensor_input` into while `frames` (while_frames),
  the last named `name`; [] for none."""
  nodes = []
  for i, frame in enumerate(frames):
    node = tf.compat.v1.NodeDef(
        name=name if i == len(frames) - 1 else f"{name}>{i}", op="Enter",
        device=device)
    node.input.append(nodes[-1].name + ":0" if nodes else tensor_input)
    node.attr["T"].type = dtype.as_datatype_enum
    node.attr["frame_name"].s = frame[0].encode()
    node.attr["is_constant"].b = True
    node.attr["parallel_iterations"].i = frame[1]
    nodes.append(node)
  return nodes


def warn_uncovered(ops):
  """Logs once per op those of `ops` whose random draws stay one stream
  per stream group's copy: their replicas may repeat each other's draws,
  and in which order depends on timing."""
  for op in ops:
    inside = sorted((analysis.called_op_types(op) &
                     (UNCOVERED | set(STATEFUL))))
    if op.type in UNCOVERED:
      what = f"op '{op.name}' ({op.type})"
    elif inside:
      what = (f"op '{op.name}' ({op.type}) runs random ops in a function "
              f"({', '.join(inside)})")
    else:
      continue
    if op.name in _logged:
      continue
    _logged.add(op.name)
    logging.warning(
        "TensorBow: %s: each stream group's copy draws its own stream of "
        "it, so replicas may repeat each other's draws and runs with "
        "several replicas are not reproducible (DESIGN.md, \"Random "
        "streams\")", what)
