"""Which hosts a job may run on, asked of a command as it runs
(`tensorbow-run --host-discovery CMD`, as Horovod's
`--host-discovery-script`).

The command prints one line per worker the job may have, each the host
to run it on. While it lists more hosts of this machine than the job has
workers running, the launcher starts one more, which asks the job to
take it in (launch.py); a host of another machine is named once, with
the command that joins it from there: the launcher starts no process
elsewhere.
"""
import shlex
import socket
import subprocess
import time

EVERY = 1.0  # seconds between two runs of the command
BACKOFF = 5.0  # seconds after starting a worker before starting another
_LOCAL = ("127.0.0.1", "localhost", "::1", "[::1]")


class Discovery(object):
  """Runs `command` (a shell command line) at most every `every` seconds.

  Args:
    command: the discovery command.
    every: seconds between runs.
    clock: seconds, monotonic.
  """

  def __init__(self, command, every=EVERY, clock=time.monotonic):
    self.command = command
    self._every = every
    self._clock = clock
    self._next = clock()
    self._hosts = []

  def hosts(self):
    """The hosts the command listed when last run (run again if due); a
    run that fails keeps the last list."""
    now = self._clock()
    if now >= self._next:
      self._next = now + self._every
      try:
        done = subprocess.run(self.command, shell=True, capture_output=True,
                              text=True, timeout=10, check=True)
      except (subprocess.SubprocessError, OSError):
        return list(self._hosts)
      self._hosts = [line.strip() for line in done.stdout.splitlines()
                     if line.strip()]
    return list(self._hosts)

  def grower(self, start, children, max_workers, out, lock):
    """What the launcher calls while it waits: `start()`s one more worker
    when the hosts listed of this machine outnumber `children` (Popen
    objects) still running, at most `max_workers`, then waits BACKOFF."""
    state = {"after": 0.0, "told": set()}
    here = set(_LOCAL) | {socket.gethostname()}

    def grow():
      now = self._clock()
      # A worker that finished means the job is ending: none joins it.
      if now < state["after"] or any(c.poll() == 0 for c in children):
        return
      hosts = self.hosts()
      running = sum(c.poll() is None for c in children)
      for host in hosts:
        if host not in here and host not in state["told"]:
          state["told"].add(host)
          with lock:
            print(f"tensorbow-run: {self.command} lists {host}, not this "
                  "machine: start a worker there with tensorbow-run --join "
                  "(the addresses above) and the same options",
                  file=out, flush=True)
      local = sum(host in here for host in hosts)
      if local > running and (max_workers is None or running < max_workers):
        with lock:
          print(f"tensorbow-run: {shlex.quote(self.command)} lists {local} "
                f"workers of this machine, {running} run: worker "
                f"{len(children)} starts and asks to join", file=out,
                flush=True)
        start()
        state["after"] = now + BACKOFF

    return grow
