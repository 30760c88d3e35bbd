"""`tensorbow-run`: runs an unmodified TF1 script on `TensorBowSession`.

    tensorbow-run [--replicas N|auto] [--algorithm NAME] [--alpha A]
                  [--central_momentum M] [--nonfinite propagate|raise|skip]
                  [--cluster-timeout SECONDS] [--devices DEVICE,...]
                  [--prefetch | --no-prefetch]
                  [--min-workers M [--max-workers X] [--membership-log F]]
                  [--workers W [--threads T] [--host-discovery CMD] |
                   --hosts HOST:PORT,... --worker-index K |
                   --join HOST:PORT,...]
                  script.py [script args...]

The session options are read once into one `options.SessionOptions`,
checked as the session will check them (a combination it would refuse
exits with status 2, as a bad flag does), and given to the patch
(patches.py) that replaces TensorFlow's session classes while the script
runs.

With `--workers W` it starts W workers of one cluster on this machine
(launch.py), each running this command without `--workers`, its session
options written back from that one object (`options.argv`): free
ports on 127.0.0.1, each worker's `TF_CONFIG` and intra-op threads
(cores / W, or T), output lines prefixed with the worker's index; it
returns the first non-zero exit status after stopping the others. With
`--hosts` it runs, in this process, worker K of the cluster of those
addresses (one per machine). With `--join` it asks the running job whose
workers started at those addresses (as `--hosts` gave them, or as
`--workers` prints them) to take this process in; `--host-discovery`
does that for the hosts of this machine a command lists (discovery.py).

The script runs in this process (`runpy.run_path`, as `__main__`, with
`sys.argv` set to `[script.py, args...]` and the script's folder first on
`sys.path`, as `python script.py` would). When it ends, however it ends,
the patch is undone and a line on stderr (report.py) names the sessions
the script made, by the class it made each through, and the training runs
each ran, with a warning if none trained; a script that failed is said to
have failed, with its exit status.

`python -m tensorbow.run` (tensorbow/run.py) runs `main` as the
`tensorbow-run` command does.
"""
import argparse
import contextlib
import logging
import os
import runpy
import signal
import sys

from tensorbow.scaleout import cluster as tb_cluster
from tensorbow import allocator
from tensorbow import observe
from tensorbow import preemption
from tensorbow.cli import discovery as tb_discovery
from tensorbow.cli import launch
from tensorbow.cli import options as cli_options
from tensorbow.cli import patches
from tensorbow.cli import report as cli_report

# What each worker of `--workers` runs: the module entry point.
_MODULE = "tensorbow.run"


def _hosts(text):
  hosts = [h.strip() for h in text.split(",") if h.strip()]
  if len(hosts) < 2:
    raise argparse.ArgumentTypeError(
        f"a cluster needs two or more workers, got {hosts}")
  try:
    tb_cluster.Cluster(hosts, 0)
  except ValueError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return hosts


def parser():
  """The `tensorbow-run` argument parser."""
  result = argparse.ArgumentParser(
      prog="tensorbow-run",
      description="Run an unmodified TF1 script with tf.compat.v1.Session "
      "replaced by tensorbow.TensorBowSession (sessions with a remote target "
      "stay plain TensorFlow sessions).")
  cli_options.add_flags(result)
  workers = result.add_argument_group("workers")
  workers.add_argument("--workers", type=cli_options.count, default=1,
                       help="start this many workers of one cluster on this "
                       "machine (default: 1, this process alone)")
  workers.add_argument("--threads", type=cli_options.count, default=None,
                       help="with --workers: intra-op threads per worker "
                       "(default: cores / workers)")
  workers.add_argument("--hosts", type=_hosts, default=None,
                       help="HOST:PORT,...: the workers of a cluster on "
                       "several machines; this process is --worker-index")
  workers.add_argument("--worker-index", type=int, default=None,
                       help="with --hosts: this process's worker")
  workers.add_argument("--host-discovery", default=None, metavar="CMD",
                       help="with --workers and --min-workers: a command "
                       "printing one host a line, a worker each; while it "
                       "lists more of this machine than run, one more is "
                       "started and joins the job (at most --max-workers)")
  result.add_argument("script", help="the TF1 Python script to run")
  result.add_argument("script_args", nargs=argparse.REMAINDER,
                      help="arguments passed to the script")
  return result


def main(argv=None):
  """Runs the `tensorbow-run` command line.

  Args:
    argv: the arguments after the program name; None means `sys.argv[1:]`.

  Returns:
    0 once the script has finished; with --workers, the workers' status
    (launch.run_workers).

  Raises:
    SystemExit: on a bad argument or a missing script (status 2), or when
      the script exits. Whatever the script raises propagates.
  """
  command = parser()
  args = command.parse_args(argv)
  options = cli_options.from_args(args)
  if not os.path.isfile(args.script):
    command.error(f"script not found: {args.script}")
  job = _hosts_cluster(command, args)
  if job is not None:
    os.environ["TF_CONFIG"] = tb_cluster.to_environ(job)
  _check_combination(command, args, options)
  if args.workers > 1:
    return _run_workers(args, options)
  return _run_script(args, options)


def _hosts_cluster(command, args):
  """The cluster of --hosts, this process its worker --worker-index, or
  None without --hosts: the TF_CONFIG this process runs with.

  Raises:
    SystemExit: --hosts with --workers, a bad --worker-index, or one
      without --hosts (status 2, as a bad flag).
  """
  if args.hosts is None:
    if args.worker_index is not None:
      command.error("--worker-index needs --hosts")
    return None
  if args.workers != 1:
    command.error("give --workers or --hosts, not both")
  try:
    return tb_cluster.Cluster(args.hosts, args.worker_index)
  except ValueError as e:
    command.error(f"--worker-index: {e}")


def _check_combination(command, args, options):
  """Refuses flags that do not go together, and session options the
  session would refuse for this many workers, before anything starts.

  Raises:
    SystemExit: such a combination (status 2, as a bad flag).
  """
  if options.join is not None and (args.hosts or args.workers != 1):
    command.error("--join starts a worker outside the job: give it without "
                  "--workers or --hosts")
  if args.host_discovery is not None and (args.workers == 1 or
                                          options.min_workers is None):
    command.error("--host-discovery needs --workers and --min-workers")
  try:
    options.check(len(args.hosts) if args.hosts else args.workers)
  except ValueError as e:
    command.error(str(e))


def _run_workers(args, options):
  """Runs the script as --workers workers of one cluster on this machine
  (launch.run_workers), then merges their timelines; their status."""
  status = launch.run_workers(
      worker_command(options, args.script, args.script_args),
      args.workers, args.threads, min_workers=options.min_workers,
      joiner=lambda job: worker_command(
          options._replace(join=tuple(job)), args.script,
          args.script_args),
      discovery=(None if args.host_discovery is None else
                 tb_discovery.Discovery(args.host_discovery)),
      max_workers=options.max_workers,
      patient=bool(options.elastic_timeout))
  if options.timeline is not None:
    _merge_timelines(options.timeline, args.workers)
  return status


def _run_script(args, options):
  """Runs the script in this process, as `python script.py` would, with
  TensorFlow's sessions patched, then undoes all that and reports the
  sessions it made on stderr, however it ended; 0 once it finished.

  Raises:
    SystemExit: the script exited. Whatever the script raises propagates.
  """
  print(f"tensorbow-run: {args.script} runs with TensorBowSession, "
        f"{options.replicas} replicas (algorithm {options.algorithm})",
        file=sys.stderr, flush=True)
  saved_argv, saved_path = sys.argv, list(sys.path)
  sys.argv = [args.script] + list(args.script_args)
  sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
  report = cli_report.Report()
  # SIGTERM saves at a wave and exits preemption.EXIT_CODE (preemption.py).
  previous = signal.getsignal(signal.SIGTERM)
  preemption.install()
  if options.retain_memory:  # before the script builds its graph
    allocator.retain()
  try:
    with patches.patch_session(options, report), \
        _tuner_log(options.replicas == "auto"):
      runpy.run_path(args.script, run_name="__main__")
  except BaseException as e:  # re-raised: the report only notes it
    report.status = cli_report.exit_status(e)
    raise
  else:
    report.status = 0
  finally:
    sys.argv = saved_argv
    sys.path[:] = saved_path
    signal.signal(signal.SIGTERM, previous)
    print(report, file=sys.stderr, flush=True)
  return 0


def _merge_timelines(path, workers):
  """Joins the workers' timelines (those written) into one at `path`."""
  written = [p for p in (observe.worker_path(path, k, workers)
                         for k in range(workers)) if os.path.isfile(p)]
  if written:
    observe.merge(written, path)
    print(f"tensorbow-run: timeline of {len(written)} workers: {path}",
          file=sys.stderr, flush=True)


def worker_command(options, script, script_args):
  """The argv of one worker of `tensorbow-run --workers`: this command
  with `options` (a `SessionOptions`), without --workers."""
  return ([sys.executable, "-m", _MODULE] + cli_options.argv(options) +
          [script] + list(script_args))


@contextlib.contextmanager
def _tuner_log(shown):
  """Shows the auto-tuner's decisions (INFO on the "tensorbow" logger) on
  stderr while the script runs, if `shown`."""
  if not shown:
    yield
    return
  logger = logging.getLogger("tensorbow")
  handler = logging.StreamHandler(sys.stderr)
  handler.setFormatter(logging.Formatter("tensorbow-run: %(message)s"))
  handler.setLevel(logging.INFO)
  level = logger.level
  logger.addHandler(handler)
  if logger.getEffectiveLevel() > logging.INFO:
    logger.setLevel(logging.INFO)
  try:
    yield
  finally:
    logger.removeHandler(handler)
    logger.setLevel(level)
