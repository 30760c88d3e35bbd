"""How a run uses input pipelines: the ops a training run takes its batch
from before the wave (its pulls), the iterators a run resets or whose
position it saves, and the ops that read a pulled batch's shape.

The router classifies runs with it (routing.py), the prefetcher hands
elements pulled ahead by it (prefetch.py), and the planner refuses a graph
whose shape op would take an element more (planner.py).
"""
import collections

from tensorbow.rewrite import analysis

# Input ops a training run takes its batch from before the wave: their
# outputs are then fed to the replicas, sharded, as a batch feed is.
PULLED_INPUT_OPS = frozenset([
    "IteratorGetNext", "IteratorGetNextSync",
    "QueueDequeue", "QueueDequeueV2", "QueueDequeueMany",
    "QueueDequeueManyV2", "QueueDequeueUpTo", "QueueDequeueUpToV2",
])
# Ops that start an iterator afresh (its initializer) or set its position
# (a restore of its state): what was pulled from it before no longer
# comes next (prefetch.py). The iterator is input 1 of MakeIterator (after
# the dataset), input 0 of DeserializeIterator.
PIPELINE_RESETS = {"MakeIterator": 1, "DeserializeIterator": 0}
# Ops that read an iterator's position (a Saver's save of it).
PIPELINE_SAVES = frozenset(["SerializeIterator"])


PipelineUses = collections.namedtuple("PipelineUses", [
    "takes",  # {name of an op taking elements: its pipeline}
    "resets",  # pipelines whose position a run resets
    "saves",  # pipelines whose position a run reads (PIPELINE_SAVES)
])


# Ops Grappler turns into constants that wait on their input's op.
_SHAPE_OPS = frozenset(["Shape", "ShapeN", "Size", "Rank"])


# Ops Grappler may remove, handing what waited on them to their input.
_SHAPE_FORWARDING = frozenset([
    "Identity", "RefIdentity", "IdentityN", "Snapshot", "StopGradient",
    "Reshape", "ExpandDims", "Squeeze"])


def shape_reader(ops, names):
  """The first op of `ops` (a closure) reading the shape of a tensor named
  in `names`, directly or through ops that only forward it, where the
  static shape lets Grappler fold it; or None.

  Grappler makes such an op a constant that waits on the op the tensor
  comes from, so a run fed those tensors still runs that op: a pipeline's
  dequeue or get_next would take an element more.
  """
  by_name = {op.name: op for op in ops}
  reached = set()
  stack = [t for n in names if n.rsplit(":", 1)[0] in by_name
           for t in [by_name[n.rsplit(":", 1)[0]].outputs[
               int(n.rsplit(":", 1)[1])]]]
  while stack:
    tensor = stack.pop()
    for c in tensor.consumers():
      if c.name not in by_name or c.name in reached:
        continue
      if c.type in _SHAPE_OPS and _foldable(c, tensor):
        return c
      reached.add(c.name)
      if c.type in _SHAPE_FORWARDING:
        stack.extend(c.outputs)
  return None


def _foldable(op, tensor):
  """Whether Grappler can make shape op `op` of `tensor` a constant: the
  rank known for a Rank, the whole shape for the others (a batch of
  unknown rows keeps its Shape op, which a fed tensor satisfies)."""
  if op.type == "Rank":
    return tensor.shape.rank is not None
  return tensor.shape.is_fully_defined()


def pipeline_uses(ops, fed_names):
  """How a run executing `ops`, fed `fed_names`, uses input pipelines: the
  ops in PULLED_INPUT_OPS that take elements, the iterators it resets
  (PIPELINE_RESETS) and those whose position it saves (PIPELINE_SAVES),
  each pipeline named by its iterator or queue op.

  An op with a fed output does not run, as in `closure`. Enqueues, a
  queue's close or size are no use here: they do not take an element.
  """
  takes, resets, saves = {}, set(), set()
  for op in ops:
    if any(t.name in fed_names for t in op.outputs):
      continue
    if op.type in PULLED_INPUT_OPS and op.inputs:
      takes[op.name] = _source(op.inputs[0]).name
    elif op.type in PIPELINE_RESETS:
      resets.add(_source(op.inputs[PIPELINE_RESETS[op.type]]).name)
    elif op.type in PIPELINE_SAVES:
      saves.add(_source(op.inputs[0]).name)
  return PipelineUses(takes, frozenset(resets), frozenset(saves))


def _source(tensor):
  """The op behind a resource or reference tensor, through identities."""
  op = tensor.op
  while op.type in analysis.PASS_THROUGH and op.inputs:
    op = op.inputs[0].op
  return op
