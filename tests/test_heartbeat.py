"""Heartbeats between workers (scaleout/heartbeat.py): in one process, two
workers' heartbeats on free ports of 127.0.0.1, and what a reducer makes
of them. The jobs that kill or stop a worker are in test_workers.py."""
import socket
import time

import pytest

from tensorbow.cli import launch
from tensorbow.scaleout import cluster as tb_cluster
from tensorbow.scaleout import heartbeat as tb_heartbeat

pytestmark = pytest.mark.mode_independent

INTERVAL = 0.05


def _wait_for(condition, seconds=5.0):
  deadline = time.monotonic() + seconds
  while not condition():
    if time.monotonic() > deadline:
      return False
    time.sleep(0.01)
  return True


def _pair(listening=lambda address: True):
  addresses = launch.free_addresses(2)
  beats = [tb_heartbeat.Heartbeat(tb_cluster.Cluster(addresses, k),
                                  interval=INTERVAL, listening=listening)
           for k in range(2)]
  for b in beats:
    b.start()
    b.expect()
  return addresses, beats


def test_workers_that_beat_are_heard_within_an_interval_or_two():
  _, beats = _pair()
  try:
    time.sleep(10 * INTERVAL)
    for k, b in enumerate(beats):
      silent = b.silent()
      assert list(silent) == [1 - k]
      assert silent[1 - k] < 4 * INTERVAL, silent
  finally:
    for b in beats:
      b.close()


def test_a_worker_that_stops_beating_grows_silent_and_is_probed():
  probed = []

  def listening(address):
    probed.append(address)
    return True  # still listening: stopped, not gone

  addresses, beats = _pair(listening)
  try:
    assert _wait_for(lambda: beats[0].silent()[1] < 4 * INTERVAL)
    beats[1].close()
    stopped = time.monotonic()
    assert _wait_for(
        lambda: beats[0].silent()[1] > tb_heartbeat.PROBE_AFTER + 0.2)
    silent = beats[0].silent()[1]
    assert silent <= time.monotonic() - stopped + 2 * INTERVAL
    assert silent != float("inf")
    assert addresses[1] in probed
  finally:
    beats[0].close()


def test_a_worker_whose_port_refuses_is_gone_at_the_first_probe():
  _, beats = _pair(lambda address: False)
  try:
    beats[1].close()
    closed = time.monotonic()
    assert _wait_for(lambda: beats[0].silent()[1] == float("inf"))
    assert time.monotonic() - closed < tb_heartbeat.PROBE_AFTER + 1.0
  finally:
    beats[0].close()


def test_a_killed_worker_is_gone_when_its_probe_falls_due_not_a_beat_later():
  # Beats 0.8 s apart: a worker last heard just after a beat would be
  # probed at the second beat after, 1.6 s on, if probes waited for beats.
  addresses = launch.free_addresses(2)
  lone = tb_heartbeat.Heartbeat(tb_cluster.Cluster(addresses, 0),
                                interval=0.8, listening=lambda a: False)
  beats = []
  lone.watch(lambda silent: beats.append(time.monotonic()))
  lone.start()
  host, port = addresses[0].split(":")
  beat = tb_heartbeat.tag(addresses) + b" 1"
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
    try:
      sender.sendto(beat, (host, int(port)))
      lone.expect()
      assert _wait_for(lambda: len(beats) >= 2)  # just after a beat
      sender.sendto(beat, (host, int(port)))
      last = time.monotonic()
      assert _wait_for(lambda: lone.silent()[1] == float("inf"))
      gone = time.monotonic()
      assert gone - last < tb_heartbeat.PROBE_AFTER + 0.3, gone - last
      assert gone - last > tb_heartbeat.PROBE_AFTER - 0.05, gone - last
    finally:
      lone.close()


def _lone(addresses, listening):
  """Worker 0's heartbeat, started, with no worker 1 beating."""
  lone = tb_heartbeat.Heartbeat(tb_cluster.Cluster(addresses, 0),
                                interval=INTERVAL, listening=listening)
  lone.start()
  return lone


def test_a_worker_never_heard_is_probed_and_told_of_not_lost(caplog,
                                                            monkeypatch):
  # Its heartbeats may not get through (UDP blocked between hosts): only
  # a refused port, or the cluster timeout, loses it.
  monkeypatch.setattr(tb_heartbeat, "NEVER_HEARD", 0.3)
  probed = []
  lone = _lone(launch.free_addresses(2), lambda a: probed.append(a) or True)
  try:
    assert lone.silent() == {}  # not expected yet: no clock runs
    lone.expect()
    assert _wait_for(lambda: probed)
    time.sleep(0.2)
    assert lone.silent() == {1: 0.0}
    assert "no heartbeat from worker 1" in caplog.text
    assert caplog.text.count("no heartbeat from worker 1") == 1
  finally:
    lone.close()


def test_datagrams_of_another_job_or_not_heartbeats_are_ignored(caplog,
                                                               monkeypatch):
  monkeypatch.setattr(tb_heartbeat, "NEVER_HEARD", 0.5)
  addresses = launch.free_addresses(2)
  lone = _lone(addresses, lambda address: True)
  lone.expect()
  host, port = addresses[0].split(":")
  sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
  other = ",".join(launch.free_addresses(2)).encode()
  try:
    for _ in range(60):
      for junk in (b"hello 1", b"tensorbow-heartbeat " + other + b" 1",
                   b"tensorbow-heartbeat " +
                   ",".join(addresses).encode() + b" 0"):
        sender.sendto(junk, (host, int(port)))
      time.sleep(0.01)
    # Still never heard from worker 1.
    assert _wait_for(lambda: "no heartbeat from worker 1" in caplog.text)
  finally:
    sender.close()
    lone.close()


def test_watchers_see_every_beat_until_stopped():
  _, beats = _pair()
  seen = []
  try:
    stop = beats[0].watch(seen.append)
    assert _wait_for(lambda: len(seen) >= 3)
    stop()
    time.sleep(2 * INTERVAL)
    count = len(seen)
    time.sleep(4 * INTERVAL)
    assert len(seen) == count
    assert all(list(s) == [1] for s in seen)
  finally:
    for b in beats:
      b.close()


def test_a_port_taken_leaves_the_probe_alone(caplog):
  addresses = launch.free_addresses(2)
  host, port = addresses[0].split(":")
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
    taken.bind(("", int(port)))
    lone = _lone(addresses, lambda address: False)
  try:
    lone.expect()
    assert "cannot take UDP port" in caplog.text
    assert _wait_for(lambda: lone.silent()[1] == float("inf"))
  finally:
    lone.close()


def test_a_heartbeat_carries_a_proposal_to_the_others():
  _, beats = _pair()
  try:
    beats[1].propose("hello 1")
    assert _wait_for(lambda: beats[0].proposals() == {1: "hello 1"})
    assert beats[1].proposals() == {}  # worker 0 proposed nothing
    beats[1].propose("hello again")
    assert _wait_for(lambda: beats[0].proposals() == {1: "hello again"})
    assert beats[0].silent()[1] < 4 * INTERVAL  # still a heartbeat
  finally:
    for b in beats:
      b.close()
