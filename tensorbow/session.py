"""`TensorBowSession`: the user's entry point (DESIGN.md, "What a user gets").

A drop-in for `tf.compat.v1.Session`. Each `run` is routed: a *plain run*
goes, by name, to an ordinary `tf.compat.v1.Session` over the execution
graph (the user's ops and TensorBow's, execution.py) and so behaves exactly
as TensorFlow on the central model; a *training run* (one whose closure
holds an optimizer's apply op) is planned once per signature (planner.py),
then executed as a wave of learning tasks by the C++ runtime on the same
TensorFlow session: batch feeds are sharded across the replicas, and the
replicas' fetches merged.
"""
import time

from tensorbow import allocator
from tensorbow import autotune
from tensorbow import observe
from tensorbow import options
from tensorbow import plain_runs
from tensorbow import preemption
from tensorbow import routing
from tensorbow import scaleout
from tensorbow import session_base
from tensorbow import session_lock
from tensorbow import setting as tb_setting
from tensorbow import trial_undo
from tensorbow.rewrite import batch_sizes


class TensorBowSession(session_base.SessionBase):
  """Trains several replicas of a TF1 model at once, kept together by SMA.

  Args:
    target: as for `tf.compat.v1.Session`.
    graph: as for `tf.compat.v1.Session` (default: the default graph).
    config: as for `tf.compat.v1.Session`.
    **options: keyword only, the options of `tensorbow.options.OPTIONS`,
      one row each with its default and meaning: the signature shows their
      defaults and `help(tensorbow.options.SessionOptions)` their meanings
      (`tensorbow-run` has a flag for each).

  With `TF_CONFIG` naming two or more workers, this process is one of
  them: it trains `replicas` replicas on its part of every batch, and the
  algorithm keeps the workers' central models one (DESIGN.md, "Two
  levels"). Worker 0's model is taken by all before the first wave.

  Raises:
    ValueError: for an argument out of range, or a TF_CONFIG this session
      cannot train on.
  """

  def __init__(self, target="", graph=None, config=None, **options_):
    chosen = options.SessionOptions(**options_)
    # Checked before the scale-out object uses them (a log file is read).
    chosen.check(scaleout.workers_named())
    # None: this process trains alone.
    self._workers = scaleout.from_environ(
        chosen.cluster_timeout, chosen.heartbeat_timeout,
        preemption.notice().requested, **chosen.elastic())
    alone = self._workers is None
    self._tuning = (autotune.Tuning() if chosen.replicas == options.AUTO
                    else None)
    super().__init__(target, graph, config)
    self._lock = session_lock.SessionLock()
    self._router = routing.Router(self._graph, self._exec, self._lock)
    self._processes = (tb_setting.ALONE if alone else
                       self._workers.processes())
    self._parts = tb_setting.lasting_parts(
        self._session, self._exec, self._graph, chosen, self._processes,
        self._lock, self._check_open, self._tuning and self._tuning.noise)
    self._inputs = self._parts.inputs
    self._undo = trial_undo.make(self._tuning, alone, self._session,
                                 self._exec.graph)
    self._closed = False
    self.counts = {"training_runs": 0}  # completed; outlives the session
    workers, index = self._processes.place()
    self._observer = observe.make(chosen.timeline, chosen.logdir,
                                  chosen.progress, index, workers)
    # None in one process: its membership does not change.
    self._recovery = (None if alone else
                      self._workers.recovery(self._observer.membership))
    agreement = preemption.ALONE if alone else self._workers.agreement()
    self._preemption = preemption.Preemption(agreement)
    self._plain = plain_runs.PlainRuns(self._session, self._exec,
                                       self._graph, self._inputs,
                                       self._preemption,
                                       agreement.leaves_save)
    # Named once, when a setting first trains one replica plainly.
    self._unused = chosen.without_effect_alone(options_)
    self._settings = self._runtime = self._planner = self._trainer = None
    self.retune(1 if self._tuning is not None else chosen.replicas)
    if chosen.retain_memory:  # last: a session that fails changes nothing
      allocator.retain()

  def retune(self, replicas, stream_groups=None, inline=False, anew=False):
    """Trains `replicas` replicas on `stream_groups` (None: the default),
    each task's ops on its own thread if `inline`, from the next training
    run on, seeded from the central model (refreshed from the replicas).

    Only the threads change, and the plans stay, if L and the stream groups
    do not (and not `anew`: after a change of the workers).
    """
    with self._lock:
      if self._settings is not None:
        if tb_setting.unchanged(self._settings, self._runtime, replicas,
                                stream_groups, anew):
          self._runtime.inline = inline
          return
        self._trainer.refresh()
        self._runtime.close()
      (self._settings, self._runtime, self._planner,
       self._trainer) = tb_setting.make(self._parts, replicas,
                                        stream_groups, inline)
      self._unused = tb_setting.name_unused(
          self._parts, self._settings, self._unused,
          self._tuning and self._tuning.tuner)

  # ---- SessionInterface ----------------------------------------------------

  @property
  def execution_graph(self):
    """The `tf.Graph` this session executes: the user's ops and ours."""
    return self._exec.graph

  @property
  def scale_out(self):
    """This process's `scaleout.Workers`: how many processes train
    together (`workers`), which this is (`index`); None: it trains
    alone."""
    return self._workers

  @property
  def replicas(self):
    """L, the current number of replicas."""
    return self._settings.replicas

  @property
  def settings(self):
    """The `options.Settings` the next training run trains with (its
    threads as the runtime runs them)."""
    return self._settings._replace(inline=self._runtime.inline)

  def kernel_choices(self):
    """What timing each substitute against TensorFlow's kernel chose."""
    return self._planner.kernel_choices()

  def plans(self):
    """{training-run signature: planner.Plan}: the plans of the training
    runs planned at the current L, each made once."""
    return dict(self._trainer.plans)

  def tuning_decisions(self):
    """replicas="auto"'s decisions so far (autotune.Decision)."""
    return list(self._tuning.tuner.decisions) if self._tuning else []

  def adaptive_history(self):
    """Adaptive SGD's decisions per mega-batch of this setting so far: a
    dict each of its replicas' batch_sizes and updates in it, the merge
    weights, whether the merge perturbed and the largest drift (L2 norm of
    a replica's change of a variable); [] for other algorithms."""
    return self._trainer.schedule_history()

  def close(self):
    """Closes the session once a wave in flight has finished.

    A wave blocked inside TensorFlow on another run is cancelled first
    (CancelledError), as TensorFlow's close cancels a blocked run.
    Stops the runtime's threads and the pulls from input pipelines and
    closes the TensorFlow session; later runs raise RuntimeError, as
    TensorFlow's do.
    """
    self._closed = True  # no wave starts from now on
    with self._lock.closing(self._session.close):
      self._inputs.stop()
      self._runtime.close()
      self._session.close()  # cancels a pull waiting on an empty queue
      self._inputs.join()
      if self._workers is not None:
        self._workers.close()
      self._observer.close()

  def _check_open(self):
    if self._closed:
      raise RuntimeError("Attempted to use a closed Session.")

  def partial_run_setup(self, fetches, feeds=None):
    """As `tf.compat.v1.Session.partial_run_setup`, for plain runs (fetches
    that take a training step raise tf.errors.UnimplementedError)."""
    self._sync()
    return self._router.partial_run_setup(self._session, fetches, feeds)

  def partial_run(self, handle, fetches, feed_dict=None):
    """As `tf.compat.v1.Session.partial_run` (plain runs only)."""
    self._sync()
    return self._router.partial_run(self._session, self, handle, fetches,
                                    feed_dict)

  def make_callable(self, fetches, feed_list=None, accept_options=False):
    """As `tf.compat.v1.Session.make_callable`; training runs are sharded
    and merged as by `run`."""
    if not feed_list and not accept_options:
      self._check_open()
      self._sync()
      # A plain run that needs nothing of TensorBow's around it gets
      # TensorFlow's own callable (routing.Router.detached).
      route = self._router.detached(fetches)
      if route is not None:
        return self._plain.detached_callable(route, self)
    return super().make_callable(fetches, feed_list, accept_options)

  def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
    """Runs `fetches` as `tf.compat.v1.Session.run` does.

    A training run trains every replica on its shard of the batch feeds, then
    synchronises; fetched values are merged (DESIGN.md, "Fetches are merged").

    Raises:
      tf.errors.InvalidArgumentError: batch feeds of different sizes, or
        fewer rows than replicas (nothing is changed).
      tf.errors.UnimplementedError: a training graph TensorBow cannot train.
      As `tf.compat.v1.Session.run` otherwise.
    """
    self._check_open()
    self._sync()
    route, fed_values = self._router.route(fetches, feed_dict or {})
    if not route.closure.training:
      return self._plain_run(route, fed_values, options, run_metadata)
    result = self._train(route, fed_values, options, run_metadata)
    self.counts["training_runs"] += 1
    return result

  def _train(self, route, fed_values, options, run_metadata):
    """A training run: a wave; in a job of several processes, through
    the changes of its membership (scaleout/recovery.py), a joiner's
    first runs catching up."""
    def wave():
      return self._wave(route, fed_values, options, run_metadata)

    if self._recovery is None:
      return wave()
    return self._recovery.train(
        self._trainer.waves + 1, wave,
        lambda: self._catching_up(route, fed_values, options, run_metadata),
        self._reset)

  def _wave(self, route, fed_values, options, run_metadata):
    """A wave and what follows it; with replicas="auto", timed for the
    auto-tuner, which may change the setting for the next."""
    if self._tuning is not None:
      self._follow(self._tuning.before_wave(route, self._setting()))
    start = time.monotonic()
    trained = self._split(route, fed_values, options, run_metadata)
    if self._tuning is not None:
      self._undo.trained(route, fed_values)
    self._after_wave(trained, start, time.monotonic() - start)
    return trained.results

  def _split(self, route, fed_values, options, run_metadata):
    """The trainer's wave (waves.Trained); one whose batch could not be
    split across the replicas is tried again at L = 1 under
    replicas="auto", else raises (autotune.unsplittable)."""
    while True:
      try:
        # Looked up at each try: the setting may change.
        return self._trainer.train(route, fed_values, options, run_metadata)
      except batch_sizes.UnsplittableBatch as refused:
        self._follow(autotune.unsplittable(self._tuning, refused,
                                           self._setting()))

  def _catching_up(self, route, fed_values, options, run_metadata):
    """A joiner's training run before the job's wave it joins at: counted,
    and run as a plain run of what it fetches (of all of it, if that
    cannot be told from its training step)."""
    self._trainer.skipped()
    evaluated = self._router.evaluation(route, fed_values)
    if evaluated is None:
      return self._plain_run(route, fed_values, options, run_metadata)
    return route.handler.build_results(
        self, self._plain_run(*evaluated, options, run_metadata))

  def _after_wave(self, trained, start, seconds):
    """What follows a wave that `trained` in `seconds` from `start`: the
    observer's record, a preemption's save, the auto-tuner's step."""
    self._observer.wave(
        start, start + seconds, trained.rows, self.replicas, self._runtime,
        trained.sums, self._trainer.replica_distances)
    self._preemption.after_wave(self.counts["training_runs"] + 1,
                                lambda r, v: self._plain_run(r, v, None, None))
    if self._tuning is not None:
      self._follow(self._tuning.after_wave(trained, seconds,
                                           self._setting()))

  def _setting(self):
    """(L, stream groups, inline) now (autotune.Tuning)."""
    return (self.replicas, self._runtime.num_stream_groups,
            self._runtime.inline)

  def _follow(self, setting):
    """Takes `setting` for the next training run, if it is another; back
    at L = 1, a trial that did not pay undone (trial_undo.py)."""
    self._undo.follow(self._setting(), setting, self.retune,
                      lambda r, v: self._trainer.train(r, v, None, None),
                      self._tuning.tuner.settled)

  def _reset(self):
    """After a change of the workers: the setting made anew, training on
    from the last one's replicas and count of waves."""
    with self._lock:
      previous = self._trainer
      self.retune(self.replicas, self._runtime.num_stream_groups,
                  self._runtime.inline, anew=True)
      self._trainer.carry(previous)

  def _sync(self):
    """Brings the execution graph up to the user's graph."""
    if self._exec.user_graph.version != self._exec.version:
      with self._lock:
        self._exec.sync()

  # ---- Plain runs ----------------------------------------------------------

  def _plain_run(self, route, fed_values, options, run_metadata):
    """Runs as tf.compat.v1.Session does, on the execution graph
    (plain_runs.py): the results of `route`'s fetches."""
    if self._tuning is not None:  # it may write what an undo puts back
      self._undo.plain(route)
    return route.handler.build_results(self, self._plain.run(
        self._trainer, route, fed_values, options, run_metadata))

  def scaling_report(self, predicted=None):
    """The scaling model over this setting's training runs so far
    (scaling.Report): T_C and T_O per wave, the central model's bytes, the
    bandwidth GaDei's rule asks of them and the efficiency Lemma 3.1
    predicts for each number of devices or workers in `predicted` (None:
    scaling.PREDICTED)."""
    members = (self._processes.place()[0] *
               len(self._parts.devices or [None]))
    return self._trainer.scaling_report(members, predicted)

  def task_timings(self):
    """Start, end, replica and stream group of every learning task run."""
    return self._runtime.task_timings()

  def clear_task_timings(self):
    """Forgets the task timings recorded so far."""
    self._runtime.clear_task_timings()

  def arena_stats(self):
    """Per stream group, its arena's counters ([] before a training run)."""
    return self._runtime.arena_stats()


# help() and inspect show every option with its default (options.OPTIONS).
TensorBowSession.__init__.__signature__ = options.session_signature(
    TensorBowSession.__init__)
