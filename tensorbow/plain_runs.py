"""Plain runs: a run that trains nothing goes, by name, to the TensorFlow
session over the execution graph, and so behaves exactly as TensorFlow on
the central model (DESIGN.md, "What a user gets").

Around it: the input pipelines' elements pulled ahead are served to it in
order (prefetch.py), the user-named slots it reads are brought up to date
first, the variables it wrote are re-seeded into the replicas after it
(waves.Trainer), and a Saver's save or restore also saves or restores the
replicas' state beside the checkpoint (checkpoint.py).
"""
import tensorflow as tf

from tensorbow import checkpoint
from tensorbow import routing
from tensorbow.rewrite import analysis


class PlainRuns(object):
  """Runs a session's plain runs.

  Args:
    session: the `tf.compat.v1.Session` on the execution graph.
    execution: the session's `execution.ExecutionGraph` (names user
      errors).
    user_graph: the user's `tf.Graph`.
    inputs: the session's `prefetch.Prefetcher`.
    preemption: the session's `preemption.Preemption`, told of Savers.
    leaves_save: () -> whether this process leaves a checkpoint's
      writing to another (preemption.Agreement's).
  """

  def __init__(self, session, execution, user_graph, inputs, preemption,
               leaves_save):
    self._session = session
    self._exec = execution
    self._user_graph = user_graph
    self._inputs = inputs
    self._preemption = preemption
    self._leaves_save = leaves_save
    checkpoint.follow_saver_retention()

  def run(self, trainer, route, fed_values, options, run_metadata):
    """Runs `route` fed `fed_values` (in the order of route.fed) as
    `tf.compat.v1.Session.run` does, around the setting's `trainer`.

    Returns:
      The values of `route.handler.fetches()`, in their order.

    Raises:
      As `tf.compat.v1.Session.run`, an op's error named as the user's.
    """
    handler = route.handler
    saver = checkpoint.saver_call(route.closure.ops,
                                  dict(zip(route.fed, fed_values)),
                                  self._user_graph)
    self._preemption.saw(saver, route, fed_values)
    if (saver is not None and saver[0] == "save" and
        [t.dtype for t in handler.fetches()] == [tf.string] and
        self._leaves_save()):
      # Another process writes the checkpoint; this one keeps its
      # replicas' state beside it, and returns what the save returns: its
      # path.
      trainer.after_saver(*saver)
      return [saver[1].encode()]
    values = self._run(trainer, route, fed_values, options, run_metadata)
    if saver is not None:
      trainer.after_saver(*saver)
    return values[:len(handler.fetches())]

  def _feeds(self, route, fed_values):
    """(feeds by tensor name, the elements served): what the run is fed,
    with the elements pulled ahead that are its pipelines' next."""
    feeds = {t.name: v for t, v in zip(route.fed, fed_values)}
    try:
      # Elements pulled ahead are the pipeline's next: fed to a run that
      # takes from it (prefetch.py).
      served = self._inputs.serve(route.closure)
    except tf.errors.OpError as e:
      raise self._exec.user_error(e) from None
    feeds.update((n, v) for n, v in served.items() if n not in feeds)
    return feeds, served

  def _run(self, trainer, route, fed_values, options, run_metadata):
    """The TensorFlow run itself: the replicas of what it wrote are
    re-seeded after it, however it ends."""
    written, ops = route.closure.written, route.closure.ops
    feeds, served = self._feeds(route, fed_values)
    trainer.refresh(route.closure.reads)
    # Not under the lock: a run that blocks inside TensorFlow (a dequeue)
    # must not block the session's other runs, as with TensorFlow.
    try:
      values = self._session.run(routing.names(route.handler), feeds,
                                 options, run_metadata)
    except (TypeError, ValueError):
      self._inputs.give_back(served)
      raise  # refused before anything ran
    except tf.errors.OpError as e:
      # Failed while executing: the writes that did not wait for the
      # failed op may have run.
      if isinstance(e.op, tf.Operation):
        written = analysis.written_variables(ops, failed_op=e.op)
      trainer.reseed(written)
      raise self._exec.user_error(e) from None
    except BaseException:
      # Interrupted, maybe after some writes.
      trainer.reseed(written)
      raise
    trainer.reseed(written)
    return values

  def detached_callable(self, route, owner):
    """TensorFlow's own callable for `route`, a plain run fed nothing that
    needs nothing of TensorBow's around it (routing.Router.detached): a
    function of no arguments that returns its results as `owner`'s (the
    session)."""
    handler = route.handler
    call = self._session.make_callable(routing.names(handler))
    count = len(handler.fetches())

    def run():
      try:
        values = call()
      except tf.errors.OpError as e:
        raise self._exec.user_error(e) from None
      return handler.build_results(owner, values[:count])

    return run
