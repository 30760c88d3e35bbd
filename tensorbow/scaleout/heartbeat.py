"""Heartbeats between the workers of a cluster: how a worker learns in
seconds that another died or stopped answering, beside the waves rather
than inside them (a slow wave is not a failure).

Each worker process sends a small UDP datagram every `INTERVAL` seconds
to every other worker, at the host and port number of that worker's
TensorFlow server (UDP and TCP ports are apart, so the number names both),
and notes when it last heard from each. A worker silent for a second is
probed over TCP: a port that refuses connections means the process is
gone, known at once. A worker still listening (stopped, hung, cut off)
is lost once it has been silent for a session's `heartbeat_timeout`.
A worker never heard at all (UDP blocked between hosts) is only probed,
with a warning: better slow detection than losing a live worker.

A process that would join the job (membership.py) sends its request to
the workers' heartbeat ports, tagged with the job's addresses; a worker
keeps each request until it answers it, and answers it again whenever it
comes again (a datagram may be lost).

The heartbeats run on a Python thread, so a worker whose own Python holds
the interpreter lock for longer than the timeout would look lost to the
others; TensorFlow's runs and TensorBow's waves release it.
"""
import logging
import socket
import threading
import time

INTERVAL = 0.25  # seconds between a worker's heartbeats
PROBE_AFTER = 1.0  # seconds of silence before a worker's port is probed
NEVER_HEARD = 10.0  # seconds without a first heartbeat before a warning
_MAGIC = b"tensorbow-heartbeat"
JOIN = b"join"  # in place of a worker's index: a request to join
ANSWER = _MAGIC + b" answer|"  # how an answer to a request starts


def tag(workers):
  """What every datagram of the job of `workers` ("host:port"s) starts
  with."""
  return _MAGIC + b" " + ",".join(workers).encode()


class Heartbeat(object):
  """This process's heartbeats with the other workers of `cluster`.

  Args:
    cluster: this worker's `cluster.Cluster`.
    interval: seconds between heartbeats.
    listening: `listening(address)`, whether a server accepts connections
      at "host:port" (the probe).
    clock: seconds, monotonic.
  """

  def __init__(self, cluster, interval=INTERVAL, listening=None,
               clock=time.monotonic):
    self._cluster = cluster
    self._interval = interval
    self._listening = listening or listening_now
    self._clock = clock
    self._lock = threading.Lock()
    self._heard = {}  # worker index -> when last heard (or expected from)
    self._ever = set()  # the workers heard at least once
    self._gone = {}  # worker index -> when its port refused connections
    self._probed = {}  # worker index -> when last probed
    self._told = set()  # the workers warned of as never heard
    self._watchers = []
    self._closed = threading.Event()
    self._socket = None
    self._thread = None
    self._tag = tag(cluster.workers)
    self._proposal = b""  # what this worker's heartbeats carry
    self._proposals = {}  # worker index -> what its last heartbeat carried
    self._requests = {}  # request to join -> (its sender, the answer)

  def start(self):
    """Binds this worker's UDP port and starts beating; without the port
    (taken by another program), says so and only probes."""
    host, _, port = self._cluster.workers[self._cluster.index].rpartition(":")
    sock = socket.socket(family(host), socket.SOCK_DGRAM)
    try:
      sock.bind(("", int(port)))
    except OSError as e:
      sock.close()
      logging.getLogger("tensorbow").warning(
          "TensorBow: worker %d cannot take UDP port %s for heartbeats (%s): "
          "a worker that stops answering is found only by the cluster "
          "timeout", self._cluster.index, port, e)
      sock = None
    else:
      sock.settimeout(self._interval)
    self._socket = sock
    self._thread = threading.Thread(target=self._beat, daemon=True,
                                    name="tensorbow-heartbeat")
    self._thread.start()

  def expect(self):
    """From now on, counts the silence of every other worker not yet
    heard (called once all of them listen)."""
    now = self._clock()
    with self._lock:
      for i in self._cluster.others:
        self._heard.setdefault(i, now)

  def silent(self):
    """{worker index: seconds since last heard} for the workers expected;
    a worker whose port refused connections is silent forever (inf). One
    never heard counts as heard now: its heartbeats may not get through
    (a firewall on UDP), so only the probe and the cluster timeout can
    lose it."""
    now = self._clock()
    with self._lock:
      return {i: float("inf") if i in self._gone else
              now - t if i in self._ever else 0.0
              for i, t in self._heard.items()}

  def propose(self, text):
    """From the next heartbeat on, every heartbeat carries `text` (a
    membership proposal, membership.py) to the other workers."""
    with self._lock:
      self._proposal = text.encode()

  def proposals(self):
    """{worker index: the text its last heartbeat carried}, for the
    workers whose heartbeats carried one."""
    with self._lock:
      return dict(self._proposals)

  def requests(self):
    """The requests to join (their text) heard and not yet answered."""
    with self._lock:
      return sorted(r for r, (_, a) in self._requests.items() if a is None)

  def answer(self, request, text):
    """Sends `text` to the sender of `request` (one of `requests`), and
    again whenever the request comes again."""
    with self._lock:
      sender = self._requests[request][0]
      self._requests[request] = (sender, ANSWER + text.encode())
    self._send_answer(request)

  def _send_answer(self, request):
    with self._lock:
      sender, answer = self._requests[request]
    if answer is not None and self._socket is not None:
      try:
        self._socket.sendto(answer, sender)
      except OSError:
        pass  # it asks again

  def watch(self, watcher):
    """Calls `watcher(silent)` after every heartbeat and every probe, on
    the heartbeat's thread (keep it short); returns a function that stops
    it."""
    with self._lock:
      self._watchers.append(watcher)

    def stop():
      with self._lock:
        if watcher in self._watchers:
          self._watchers.remove(watcher)
    return stop

  def close(self):
    self._closed.set()
    if self._thread is not None:
      self._thread.join()
    if self._socket is not None:
      self._socket.close()

  def _beat(self):
    """Beats every interval; probes, and tells the watchers, at each beat
    and as soon as a worker's probe falls due (not at the next beat: a
    killed worker is lost PROBE_AFTER seconds after it was last heard)."""
    head = self._tag + b" %d" % self._cluster.index
    peers = {i: socket_address(self._cluster.workers[i])
             for i in self._cluster.others}
    next_beat = self._clock()
    while not self._closed.is_set():
      now = self._clock()
      beat = now >= next_beat
      if beat:
        next_beat = now + self._interval
        self._send(head, peers)
      due = self._next_probe()
      if beat or now >= due:
        self._probe(now)
        self._tell_watchers()
        due = self._next_probe()
      self._receive(max(min(next_beat, due) - self._clock(), 0.0))

  def _send(self, head, peers):
    """One heartbeat to each of `peers` ({index: socket address})."""
    with self._lock:
      message = head + (b"|" + self._proposal if self._proposal else b"")
    if self._socket is not None:
      for address in peers.values():
        try:
          self._socket.sendto(message, address)
        except OSError:
          pass  # an unresolved or unreachable peer stays silent

  def _tell_watchers(self):
    silent = self.silent()
    with self._lock:
      watchers = list(self._watchers)
    for watcher in watchers:
      watcher(silent)

  def _next_probe(self):
    """When the next probe falls due (inf: no worker can be probed)."""
    with self._lock:
      return min(self._due().values(), default=float("inf"))

  def _due(self):
    """{worker index: when its port is next probed}, for the workers not
    gone: PROBE_AFTER seconds after it was last heard (or expected from),
    and as long after its last probe. Called holding the lock."""
    return {i: max(t, self._probed.get(i, t)) + PROBE_AFTER
            for i, t in self._heard.items() if i not in self._gone}

  def _receive(self, seconds):
    if self._socket is None:
      self._closed.wait(seconds)
      return
    self._socket.settimeout(max(seconds, 1e-3))
    try:
      data, sender = self._socket.recvfrom(4096)
    except OSError:  # the timeout, mostly
      return
    data, _, proposal = data.partition(b"|")
    job, _, index = data.rpartition(b" ")
    if job == self._tag and index == JOIN and proposal:
      request = proposal.decode(errors="replace")
      with self._lock:  # answered where it was asked from last
        answer = self._requests.get(request, (None, None))[1]
        self._requests[request] = (sender, answer)
      if answer is not None:
        self._send_answer(request)
      return
    if job != self._tag or not index.isdigit():
      return  # another job's, or not a heartbeat
    index = int(index)
    if index in self._cluster.others:
      with self._lock:
        self._heard[index] = self._clock()
        self._ever.add(index)
        if proposal:
          self._proposals[index] = proposal.decode(errors="replace")

  def _probe(self, now):
    """Asks the port of every worker silent (or never heard) for
    PROBE_AFTER seconds, once a second, whether it still accepts
    connections; says once of a worker never heard for NEVER_HEARD s."""
    with self._lock:
      since = {i: now - t for i, t in self._heard.items()
               if i not in self._gone}
      never = {i for i in since if i not in self._ever}
      due = self._due()
    for i, seconds in since.items():
      if i in never and seconds >= NEVER_HEARD and i not in self._told:
        self._told.add(i)
        logging.getLogger("tensorbow").warning(
            "TensorBow: worker %d has had no heartbeat from worker %d (%s) "
            "in %g s: is UDP to its port blocked? A worker that stops "
            "answering is then found only by the cluster timeout",
            self._cluster.index, i, self._cluster.workers[i], NEVER_HEARD)
      if now < due[i]:
        continue
      self._probed[i] = now
      if not self._listening(self._cluster.workers[i]):
        with self._lock:
          self._gone[i] = now


def listening_now(address):
  """Whether a server accepts connections at "host:port", asked briefly."""
  return listening(address, 0.5)


def socket_address(worker):
  """(host, port) of a "host:port" address, for a socket."""
  host, _, port = worker.rpartition(":")
  return host.strip("[]"), int(port)


def family(host):
  """The socket family of `host`: IPv6 if it is written with colons."""
  return socket.AF_INET6 if ":" in host else socket.AF_INET


def listening(address, timeout):
  """Whether a server accepts connections at "host:port"."""
  try:
    with socket.create_connection(socket_address(address), timeout=timeout):
      return True
  except OSError:
    return False
