"""Starting the workers of a job on this machine and watching them:
`tensorbow-run --workers W` (main.py), like `horovodrun` and `kungfu-run`.

Each worker is a child process with its own `TF_CONFIG` (a cluster of
free ports on 127.0.0.1) and its share of the cores for TensorFlow's
thread pools. Their output lines reach this process's stdout prefixed
with the worker's index. The job ends when every worker has exited, or as
soon as one fails: the others are then stopped, and its status returned.
With `--min-workers M`, the others go on while M have not failed, and
with `--host-discovery CMD` the job grows: while CMD lists more hosts of
this machine than workers run, it starts more, each asking the job to
take it in (`--join`), as Horovod's `--host-discovery-script` does.
"""
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from tensorbow import preemption
from tensorbow.scaleout import cluster as tb_cluster

# Seconds a stopped worker has to exit after SIGTERM before SIGKILL.
_GRACE = 5.0
# Seconds the others get to finish saving once a worker exits preempted.
_PREEMPTED_GRACE = 120.0


def free_addresses(count):
  """`count` distinct "127.0.0.1:port" addresses free now."""
  sockets = []
  try:
    for _ in range(count):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind(("127.0.0.1", 0))
      sockets.append(s)
    return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
  finally:
    for s in sockets:
      s.close()


def worker_environ(cluster, threads, environ=None):
  """The environment of `cluster`'s worker: TF_CONFIG, and `threads`
  threads for TensorFlow's intra-op pool (None: as inherited)."""
  env = dict(os.environ if environ is None else environ)
  env["TF_CONFIG"] = tb_cluster.to_environ(cluster)
  if threads is not None:
    env["TF_NUM_INTRAOP_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
  return env


def default_threads(workers):
  """Intra-op threads per worker: the cores shared out, at least one."""
  return max(1, (os.cpu_count() or 1) // workers)


def run_workers(command, workers, threads=None, out=None, environ=None,
                min_workers=None, joiner=None, discovery=None,
                max_workers=None, patient=False):
  """Runs `command` (argv) as `workers` workers of one local cluster.

  Args:
    command: each worker's argv.
    workers: W >= 2.
    threads: intra-op threads per worker (None: default_threads).
    out: where the prefixed lines go (default: sys.stdout).
    environ: the workers' base environment (default: this process's).
    min_workers: with it, the others go on while that many have not
      failed (the workers' sessions go on without the lost).
    joiner: `joiner(addresses)`, the argv of a worker that joins the job
      of workers at `addresses`.
    discovery: with `joiner`, a `Discovery`: while it lists more hosts of
      this machine than workers run (at most `max_workers`), one more is
      started.
    patient: with `min_workers`, fewer may go on (they wait for joiners,
      and fail themselves if none comes).

  Returns:
    0 if every worker exited with 0, or with `min_workers` if at least
    that many did; else the first non-zero status seen (a negative
    signal number for a worker killed by a signal), the others having
    been stopped. SIGTERM to the launcher goes to every
    worker, which under `tensorbow-run` saves at one wave and exits
    preemption.EXIT_CODE: that is the status once all did, else 128 +
    the signal.
  """
  out = sys.stdout if out is None else out
  addresses = free_addresses(workers)
  threads = default_threads(workers) if threads is None else threads
  job = _Job(out)
  grow = None
  if discovery is not None:
    env = _joiner_environ(addresses, threads, environ)
    grow = discovery.grower(lambda: job.start(joiner(addresses), env),
                            job.children, max_workers, out, job.lock)
  # Stopped by a signal, the launcher still stops its workers.
  handled = threading.current_thread() is threading.main_thread()
  if handled:
    previous = signal.signal(signal.SIGTERM, _terminated)
  try:
    _start_workers(job, command, addresses, threads, environ)
    status = _wait(job.children, min_workers=min_workers, out=out,
                   lock=job.lock, grow=grow, patient=patient)
  except _Terminated as e:
    status = _terminated_status(job.children, e.args[0])
  finally:
    job.stop()
    if handled:
      signal.signal(signal.SIGTERM, previous)
  return status


class _Job(object):
  """The workers a launcher started, in order (a worker's index is its
  place in `children`), and the threads copying their output lines to
  `out`, one whole line at a time (`lock`), prefixed with that index."""

  def __init__(self, out):
    self.out = out
    self.lock = threading.Lock()
    self.children = []  # subprocess.Popen, as started
    self._readers = []

  def start(self, argv, env):
    """Starts worker `len(children)`, running `argv` in `env` in a process
    group of its own (to stop it whole) that dies with the launcher."""
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             preexec_fn=_die_with_parent)
    reader = threading.Thread(
        target=_copy_lines, args=(child.stdout, f"[{len(self.children)}] ",
                                  self.out, self.lock), daemon=True)
    self.children.append(child)
    reader.start()
    self._readers.append(reader)

  def stop(self):
    """Stops the workers still running (`_stop`), then waits up to _GRACE
    seconds each for their last lines to be copied."""
    _stop(self.children)
    for reader in self._readers:
      reader.join(timeout=_GRACE)


def _joiner_environ(addresses, threads, environ):
  """The environment of a worker started to join the job of workers at
  `addresses`: a worker's, but without TF_CONFIG."""
  env = worker_environ(tb_cluster.Cluster(addresses, 0), threads, environ)
  del env["TF_CONFIG"]  # a joiner's cluster is the job's answer
  return env


def _start_workers(job, command, addresses, threads, environ):
  """Says where the job's workers are, then starts one running `command`
  at each of `addresses`, in order, each with its `TF_CONFIG`."""
  print(f"tensorbow-run: {len(addresses)} workers at {','.join(addresses)}",
        file=job.out, flush=True)
  for k in range(len(addresses)):
    job.start(command, worker_environ(tb_cluster.Cluster(addresses, k),
                                      threads, environ))


def _terminated_status(children, signum):
  """The job's status once the launcher got signal `signum` (SIGTERM):
  the workers are sent it too and get _PREEMPTED_GRACE seconds to save
  at a wave; preemption.EXIT_CODE if all did, else 128 + `signum`."""
  _stop(children, _PREEMPTED_GRACE)
  saved = {c.returncode for c in children} == {preemption.EXIT_CODE}
  return preemption.EXIT_CODE if saved else 128 + signum


class _Terminated(Exception):
  """The launcher was sent SIGTERM (args: the signal)."""


def _terminated(signum, frame):
  del frame
  raise _Terminated(signum)


def _die_with_parent():
  """In a worker before it runs: SIGKILL when the launcher dies, however
  it dies (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
  try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
  except (OSError, AttributeError):
    pass


def _copy_lines(stream, prefix, out, lock):
  for line in iter(stream.readline, b""):
    with lock:
      out.write(prefix + line.decode(errors="replace"))
      out.flush()
  stream.close()


def _wait(children, preempted_grace=_PREEMPTED_GRACE, min_workers=None,
          out=None, lock=None, grow=None, patient=False):
  """The first non-zero exit status among `children`, or 0 once all exit
  with 0. A worker preempted (preemption.EXIT_CODE) saved at a wave the
  others agreed on and are saving at too: they get `preempted_grace`
  seconds to finish before they are stopped. With `min_workers`, a
  worker's failure leaves the others running while that many have not
  failed, and the job succeeds if that many exit with 0. `grow()`, if
  given, may start more children; it is called every tenth of a second.
  If `patient`, fewer than `min_workers` go on while any runs."""
  deadline = None
  told = set()
  while True:
    if grow is not None:
      grow()
    codes = [c.poll() for c in children]
    failed = [c for c in codes if c not in (None, 0)]
    other = [c for c in failed if c != preemption.EXIT_CODE]
    going = sum(c in (None, 0) for c in codes)
    short = min_workers is None or going < (1 if patient else min_workers)
    if other and short:
      return other[0]
    for k, code in enumerate(codes):
      if code not in (None, 0) and min_workers and k not in told:
        told.add(k)
        with lock or contextlib.nullcontext():
          print(f"tensorbow-run: worker {k} exited with status {code}; "
                f"{going} go on (--min-workers {min_workers})",
                file=out or sys.stdout, flush=True)
    # With min_workers, the others may go on without a preempted worker.
    if failed and not other and deadline is None and short:
      deadline = time.monotonic() + preempted_grace
    if None not in codes or (deadline and time.monotonic() > deadline):
      if failed and min_workers and codes.count(0) >= min_workers:
        return 0
      return failed[0] if failed else 0
    time.sleep(0.1)


def _stop(children, grace=_GRACE):
  """Stops the children still running (their process groups): SIGTERM,
  then SIGKILL after `grace` seconds."""
  running = [c for c in children if c.poll() is None]
  for c in running:
    _signal_group(c, signal.SIGTERM)
  deadline = time.monotonic() + grace
  for c in running:
    try:
      c.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
      _signal_group(c, signal.SIGKILL)
      c.wait()


def _signal_group(child, sig):
  try:
    os.killpg(child.pid, sig)
  except ProcessLookupError:
    pass
