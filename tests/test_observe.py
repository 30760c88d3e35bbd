"""What a user can look at (tensorbow/observe.py): the timeline, the
TensorBoard scalars and the progress line of a session's training runs,
checked against the runtime's task timings and SMA's NumPy reference. The
timeline of two workers is in the slow tier (test_workers.py)."""
import glob
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tensorbow
from tensorbow import observe

import graphs
import references

LR = 0.1
RNG = np.random.RandomState(5)
XS = RNG.randn(5, 8, 3).astype(np.float32)
YS = RNG.randn(5, 8, 1).astype(np.float32)


def _train(tmp_path, monkeypatch, **options):
  """Five SMA waves of least squares at L = 2, observed; (the session's
  task timings, the stderr it printed)."""
  # Every wave's scalars and distances, not every 1 s's and 10 s's.
  monkeypatch.setattr(observe, "DISTANCE_EVERY", 0.0)
  monkeypatch.setattr(observe, "SCALARS_EVERY", 0.0)
  model = graphs.build(
      lambda: tf.compat.v1.train.GradientDescentOptimizer(LR),
      use_resource=False)
  x, y = model.x, model.y
  with tensorbow.TensorBowSession(graph=model.graph, replicas=2,
                                  **options) as sess:
    sess.run(model.init)
    for xb, yb in zip(XS, YS):
      sess.run(model.train, {x: xb, y: yb})
    sess.run(model.loss, {x: XS[0], y: YS[0]})  # a plain run: no wave
    return sess.task_timings()


def test_the_timeline_is_a_trace_whose_waves_hold_their_tasks(
    tmp_path, monkeypatch):
  path = tmp_path / "timeline.json"
  timings = _train(tmp_path, monkeypatch, timeline=str(path))
  events = json.loads(path.read_text())
  for event in events:
    assert {"ph", "ts", "dur", "pid", "tid"} <= set(event), event
  tracks = {e["tid"]: e["args"]["name"] for e in events
            if e["ph"] == "M" and e["name"] == "thread_name"}
  groups = sorted({t[2] for t in timings})
  assert tracks == {**{g: f"stream group {g}" for g in groups},
                    observe.WAVES_TRACK: "waves",
                    observe.WORKERS_TRACK: "workers"}
  waves = [e for e in events
           if e["tid"] == observe.WAVES_TRACK and e["ph"] == "X"]
  assert [e["name"] for e in waves] == [f"wave {k}" for k in range(1, 6)]
  assert all(e["ph"] == "X" and e["args"]["replicas"] == 2 and
             e["args"]["rows"] == 8 for e in waves)
  tasks = [e for e in events if e["tid"] in groups and e["ph"] == "X"]
  # One event per task the runtime timed, at its times and place.
  assert len(tasks) == len(timings)
  assert sorted((e["tid"], e["dur"]) for e in tasks) == sorted(
      (t[2], int((t[6] - t[5]) * 1e6)) for t in timings)
  names = {f"replica {r} {p}" for r in range(2)
           for p in ("compute", "commit")}
  assert {e["name"] for e in tasks} <= names | {"synchronisation"}
  assert {e["name"] for e in tasks} >= names
  # Each task lies within its wave, by the wall clock of both.
  for task in tasks:
    wave = waves[task["args"]["wave"] - 1]
    assert wave["ts"] - 2 <= task["ts"], (wave, task)
    assert task["ts"] + task["dur"] <= wave["ts"] + wave["dur"] + 2, (
        wave, task)
  assert abs(waves[0]["ts"] / 1e6 - os.path.getmtime(path)) < 60


@pytest.mark.parametrize("fast_kernels", ["all", "0"])
def test_tensorboard_holds_the_scalars_and_smas_distances(tmp_path,
                                                          monkeypatch,
                                                          fast_kernels):
  monkeypatch.setenv("TENSORBOW_FAST_KERNELS", fast_kernels)
  _train(tmp_path, monkeypatch, logdir=str(tmp_path / "logs"))
  files = glob.glob(str(tmp_path / "logs" / "events.out.tfevents.*"))
  assert len(files) == 1
  scalars = {}
  for event in tf.compat.v1.train.summary_iterator(files[0]):
    for value in event.summary.value:
      scalars.setdefault(value.tag, {})[event.step] = value.simple_value
  steps = list(range(1, 6))
  for tag in ("wave_ms", "images_per_second", "replicas", "workers"):
    assert sorted(scalars[tag]) == steps, tag
  assert set(scalars["replicas"].values()) == {2.0}
  assert set(scalars["workers"].values()) == {1.0}
  for k in steps:
    np.testing.assert_allclose(
        scalars["images_per_second"][k] * scalars["wave_ms"][k] / 1e3, 8,
        rtol=1e-3)
  for k in steps:
    # The reference's replicas are those after its last wave.
    central, _, models, _ = references.sma(
        [graphs.W0, graphs.B0], list(zip(XS[:k], YS[:k])), 2, 0.5, 0.9, LR)[-1]
    for r in range(2):
      distance = np.sqrt(sum(np.sum((m - c) ** 2)
                             for m, c in zip(models[r], central)))
      assert distance > 1e-3
      np.testing.assert_allclose(scalars[f"replica_distance/{r}"][k],
                                 distance, rtol=1e-4)


def test_progress_lines_say_the_wave_the_rate_and_l(tmp_path, monkeypatch,
                                                   capsys):
  _train(tmp_path, monkeypatch, progress=1e-9)
  lines = [line for line in capsys.readouterr().err.splitlines()
           if line.startswith("TensorBow: worker")]
  assert [line.split(", wave ")[1].split(",")[0] for line in lines] == [
      str(k) for k in range(1, 6)]
  assert all(line.startswith("TensorBow: worker 0 of 1, wave ") and
             line.endswith(", L=2") and "images/s over the last" in line
             for line in lines), lines


def test_nothing_asked_for_writes_nothing(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  _train(tmp_path, monkeypatch)
  assert not os.listdir(tmp_path)
  assert "TensorBow: worker" not in capsys.readouterr().err


def test_a_session_that_never_trains_writes_no_timeline(tmp_path):
  path = tmp_path / "timeline.json"
  with tensorbow.TensorBowSession(graph=tf.Graph(), timeline=str(path),
                                  logdir=str(tmp_path / "logs")):
    pass
  assert not path.exists() and not (tmp_path / "logs").exists()


def test_an_unclosed_timeline_still_reads_and_merges(tmp_path):
  recorders = [observe.Recorder(str(tmp_path / "t.json"), None, None, k, 2)
               for k in range(2)]
  for k, recorder in enumerate(recorders):
    runtime = _Runtime([(1, 0, 0, 4, 0, 10.0 + k, 10.5 + k)])
    recorder.wave(10.0 + k, 11.0 + k, 4, 1, runtime, [(10.6, 10.9, "w1")],
                  None)
  recorders[0].close()  # worker 1 "died": its array is left open
  paths = [observe.worker_path(str(tmp_path / "t.json"), k, 2)
           for k in range(2)]
  assert paths[1].endswith("t.worker1.json")
  observe.merge(paths, str(tmp_path / "t.json"))
  merged = json.loads((tmp_path / "t.json").read_text())
  assert {e["pid"] for e in merged} == {0, 1}
  sums = [e for e in merged if e["name"] == "sum over the workers"]
  assert [e["tid"] for e in sums] == [observe.WORKERS_TRACK] * 2
  assert [e["dur"] for e in sums] == [pytest.approx(3e5)] * 2


class _Runtime(object):
  def __init__(self, timings):
    self.timings = timings

  def task_timings(self, last):
    return self.timings[-last:]


def test_only_new_task_timings_are_traced():
  recorder = observe.Recorder(None, None, None)
  runtime = _Runtime([(1, 0, 0, 4, 0, 0.0, 1.0)])
  assert recorder._new_timings(runtime) == runtime.timings
  runtime.timings += [(2, r, 0, 4, 0, 2.0, 3.0) for r in range(100)]
  assert recorder._new_timings(runtime) == runtime.timings[1:]
  assert recorder._new_timings(runtime) == []
  other = _Runtime([(1, 0, 0, 4, 0, 5.0, 6.0)])  # a new setting's runtime
  assert recorder._new_timings(other) == other.timings


def test_options_are_checked():
  for bad in (dict(timeline=""), dict(logdir=3), dict(progress=0),
              dict(progress=True), dict(progress=float("inf"))):
    with pytest.raises(ValueError, match=next(iter(bad))):
      tensorbow.TensorBowSession(graph=tf.Graph(), **bad)


def test_recorder_writes_progress_to_the_stream_it_is_given():
  out = io.StringIO()
  recorder = observe.Recorder(None, None, 5.0, out=out)
  recorder.wave(0.0, 1.0, 10, 3, _Runtime([]), [], None)
  assert out.getvalue() == ""
  recorder._said = -10.0
  recorder.wave(1.0, 2.0, 10, 3, _Runtime([]), [], None)
  assert out.getvalue().startswith("TensorBow: worker 0 of 1, wave 2, ")


def test_scalars_between_writes_are_averaged_and_the_rest_written_at_close(
    tmp_path):
  now = [100.0]
  recorder = observe.Recorder(None, str(tmp_path), None,
                              clock=lambda: now[0], wall=lambda: 5e8)
  # Waves of 0.1, 0.2, 0.3 s of 10 rows, written 1 s after the first
  # wave; then one of 0.5 s, written at close.
  for start, seconds in ((100.0, 0.1), (100.5, 0.2), (101.0, 0.3),
                         (101.5, 0.5)):
    recorder.wave(start, start + seconds, 10, 2, _Runtime([]), [], None)
  recorder.close()
  (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
  written = [(e.step, {v.tag: v.simple_value for v in e.summary.value})
             for e in tf.compat.v1.train.summary_iterator(path)
             if e.summary.value]
  assert [step for step, _ in written] == [3, 4]
  np.testing.assert_allclose(written[0][1]["wave_ms"], 200.0, rtol=1e-6)
  np.testing.assert_allclose(written[0][1]["images_per_second"], 50.0,
                             rtol=1e-6)
  np.testing.assert_allclose(written[1][1]["wave_ms"], 500.0, rtol=1e-6)
  assert written[1][1]["replicas"] == 2 and written[1][1]["workers"] == 1


def test_distances_are_asked_only_when_due(tmp_path):
  """The replicas' distances cost a run of their own: the recorder asks
  for them once every DISTANCE_EVERY seconds, and never without a
  logdir."""
  now, asked = [100.0], []

  def distances():
    asked.append(now[0])
    return [0.5, 0.25]

  recorder = observe.Recorder(None, str(tmp_path), None,
                              clock=lambda: now[0], wall=lambda: 5e8)
  every = observe.DISTANCE_EVERY
  # From the recorder's start: none before `every`, one at it, once.
  for now[0] in (100.0, 100.0 + every / 2, 100.0 + every, 100.0 + every,
                 100.0 + 2 * every):
    recorder.wave(now[0], now[0] + 0.1, 10, 2, _Runtime([]), [], distances)
  recorder.close()
  assert asked == [100.0 + every, 100.0 + 2 * every]
  quiet = observe.Recorder(None, None, None, clock=lambda: now[0])
  quiet.wave(0.0, 0.1, 10, 2, _Runtime([]), [], distances)
  assert len(asked) == 2  # without a logdir, never
