"""What every TF1 session offers beside its runs: its graph and GraphDef,
its target and devices, callables, and the context managers that make it
(and its graph) the default, as `tf.compat.v1.Session` does; and the
TensorFlow session it runs on, over an execution graph of its own
(execution.py). `TensorBowSession` (session.py) adds the runs and
TensorBow's own accessors.
"""
from tensorbow import compat
from tensorbow import execution


class SessionBase(compat.SessionInterface):
  """A session over the user's graph whose runs go to a
  `tf.compat.v1.Session` over the execution graph.

  Args:
    target: as for `tf.compat.v1.Session`.
    graph: as for `tf.compat.v1.Session` (None: the default graph).
    config: as for `tf.compat.v1.Session`.
  """

  def __init__(self, target, graph, config):
    self._graph = compat.session_graph(graph)
    # TensorBow's ops go into a graph of the session's own (execution.py).
    self._exec = execution.ExecutionGraph(self._graph)
    self._session = compat.PlainSession(target=target,
                                        graph=self._exec.graph, config=config)
    self._config = compat.session_config(self._session)  # TF's if None
    self._context = None

  @property
  def graph(self):
    return self._graph

  @property
  def graph_def(self):
    return self._graph.as_graph_def(
        add_shapes=self._config.graph_options.infer_shapes)

  @property
  def sess_str(self):
    return self._session.sess_str

  def list_devices(self):
    """As `tf.compat.v1.Session.list_devices`: the TensorFlow session's."""
    return self._session.list_devices()

  def as_default(self):
    """Context manager that makes this the default session."""
    return compat.default_session(self)

  def __enter__(self):
    if self._context is not None:
      raise RuntimeError("Session context managers are not re-entrant. Use "
                         "`Session.as_default()` to enter a session again.")
    self._context = (self.graph.as_default(), self.as_default())
    self._context[0].__enter__()
    return self._context[1].__enter__()

  def __exit__(self, exc_type, exc_value, exc_tb):
    graph_context, session_context = self._context
    self._context = None
    session_context.__exit__(exc_type, exc_value, exc_tb)
    graph_context.__exit__(exc_type, exc_value, exc_tb)
    self.close()

  def make_callable(self, fetches, feed_list=None, accept_options=False):
    """As `tf.compat.v1.Session.make_callable`: a function that runs
    `fetches` by `run`, fed `feed_list`'s values in order."""
    return compat.make_callable(self.run, fetches, feed_list, accept_options)

  def _make_callable_from_options(self, callable_options):
    """As `tf.compat.v1.Session`'s: a callable from a `CallableOptions`."""
    return compat.callable_from_options(self.run, callable_options)
