"""The benchmark suites (benchmarks/suite), run at toy sizes.

Throughput numbers themselves are not asserted (the machine is shared and
noisy); what is checked is what the suites compute from them: ratios,
medians, the cost of SMA, the best runs of time-to-accuracy, and that the
JSON, Markdown and PNG outputs hold them.
"""
import concurrent.futures
import json
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import element_run
from benchmarks import pairs
from benchmarks import real_scripts
from benchmarks import sma_op_time
from benchmarks.suite import __main__ as bench_main
from benchmarks.suite import harness
from benchmarks.suite import report



def test_summary_is_median_min_max():
  assert harness.summary([3.0, 1.0, 2.0, 10.0]) == {
      "median": 2.5, "min": 1.0, "max": 10.0, "repeats": 4}


def test_unknown_model_is_named():
  with pytest.raises(ValueError, match="unknown model 'vgg'"):
    harness.load_model("vgg")


def _run(tmp_path, *argv):
  result = bench_main.main(list(argv) + ["--out", str(tmp_path)])
  suite = argv[0]
  with open(os.path.join(tmp_path, suite + ".json")) as f:
    assert json.load(f)["rows"] == json.loads(json.dumps(result["rows"]))
  with open(os.path.join(tmp_path, suite + ".png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  with open(os.path.join(tmp_path, suite + ".md")) as f:
    table = f.read()
  return result, table


@pytest.mark.slow
def test_replicas_suite_ratios_and_sma_cost(tmp_path):
  result, table = _run(tmp_path, "replicas", "--models",
                       "logistic_regression", "--batch_sizes", "4",
                       "--replicas", "1,2", "--repeats", "2", "--seconds",
                       "0.05")
  rows = result["rows"]
  assert [(r["session"], r["replicas"], r["algorithm"]) for r in rows] == [
      ("tf", 1, None), ("tensorbow", 1, "sma"), ("tensorbow", 2, "sma"),
      ("tensorbow", 1, "none"), ("tensorbow", 2, "none")]
  for r in rows:
    assert r["repeats"] == 2 and 0 < r["min"] <= r["median"] <= r["max"]
    assert r["vs_tf"] == pytest.approx(r["median"] / rows[0]["median"])
  sma2, none2 = rows[2], rows[4]
  derived = {d["replicas"]: d for d in result["derived"]}
  assert derived[2]["sma_cost"] == pytest.approx(
      1 - sma2["median"] / none2["median"])
  assert derived[2]["sma_vs_tf"] == pytest.approx(sma2["vs_tf"])
  ratios = [s / n for s, n in zip(sma2["samples"], none2["samples"])]
  assert derived[2]["sma_cost_paired"] == pytest.approx(
      1 - (ratios[0] + ratios[1]) / 2)
  assert derived[2]["sma_cost_interval"] is None  # 2 repeats are too few.
  # One table row per configuration, one per derived row, two headers each.
  assert table.count("\n| logistic_regression |") == len(rows) + 2


@pytest.mark.slow
def test_auto_suite_against_fixed_l_and_tf(tmp_path):
  result, table = _run(tmp_path, "auto", "--models", "logistic_regression",
                       "--batch_sizes", "4,6", "--replicas", "1,2,4",
                       "--repeats", "2", "--seconds", "0.05")
  rows = result["rows"]
  # Fixed L only where it divides the rows of a run; auto last.
  assert [(r["rows_per_run"], r["session"], r["replicas"], r["batch_size"])
          for r in rows] == [
              (4, "tf", 1, 4), (4, "tensorbow", 1, 4),
              (4, "tensorbow", 2, 2), (4, "tensorbow", 4, 1),
              (4, "tensorbow", "auto", 4),
              (6, "tf", 1, 6), (6, "tensorbow", 1, 6),
              (6, "tensorbow", 2, 3), (6, "tensorbow", "auto", 6)]
  for d, (auto, fixed, tf_row) in zip(
      result["derived"], [(rows[4], rows[1:4], rows[0]),
                          (rows[8], rows[6:8], rows[5])]):
    best = max(fixed, key=lambda r: r["median"])
    assert d["best_fixed_replicas"] == best["replicas"]
    assert d["auto_vs_best_fixed"] == pytest.approx(
        auto["median"] / best["median"])
    assert d["auto_vs_tf"] == pytest.approx(auto["median"] / tf_row["median"])
    assert 1 <= d["auto_replicas"] <= d["rows_per_run"]
    assert d["auto_replicas"] == auto["chosen_replicas"]
    assert d["tuning_runs"] >= 7  # at least one measured setting
  assert table.count("\n| logistic_regression |") == len(rows) + 2


def test_interleave_reverses_every_other_repeat():

  class Fake(object):

    def __init__(self, name):
      self.name, self.samples = name, []

    def measure(self, seconds):
      order.append(self.name)
      self.samples.append(seconds)

    def record(self):
      return self.name

  order = []
  configs = [Fake("a"), Fake("b"), Fake("c")]
  assert harness.interleave(configs, 3, 1.0) == ["a", "b", "c"]
  assert order == list("abccbaabc")


def test_median_interval_from_order_statistics():
  # n = 20: P(Binomial(20, 1/2) <= 5) = 0.0207, <= 6: 0.0577, so the 95 %
  # interval runs from the 6th smallest to the 6th largest sample.
  assert harness.median_interval(list(range(20, 0, -1))) == (6, 15)
  # n = 6: only the full range reaches 95 % (1 - 2 / 64); n = 5 cannot.
  assert harness.median_interval([3, 1, 2, 6, 5, 4]) == (1, 6)
  assert harness.median_interval([1, 2, 3, 4, 5]) is None
  assert harness.median_interval(list(range(20)), confidence=0.99) == (3, 16)


def test_paired_ratio_takes_ratios_repeat_by_repeat():

  class Samples(object):

    def __init__(self, name, samples):
      self.name, self.samples = name, samples

  # Drift moves both alike: the samples span 100x, every pair's ratio is 0.9.
  sma = Samples("sma", [90.0, 45.0, 180.0, 9.0, 900.0, 90.0])
  none = Samples("none", [100.0, 50.0, 200.0, 10.0, 1000.0, 100.0])
  paired = harness.paired_ratio(sma, none)
  assert paired["median"] == pytest.approx(0.9)
  assert paired["interval"] == pytest.approx((0.9, 0.9))
  assert paired["repeats"] == 6
  # A slow spell that starts between the third pair's two samples: the
  # medians' ratio is 54 / 80, the pairs' median still 0.9.
  slow_sma = Samples("sma", [90.0, 90.0, 54.0, 54.0, 54.0, 54.0])
  slow_none = Samples("none", [100.0, 100.0, 100.0, 60.0, 60.0, 60.0])
  paired = harness.paired_ratio(slow_sma, slow_none)
  assert paired["median"] == pytest.approx(0.9)
  assert paired["interval"] == pytest.approx((0.54, 0.9))
  with pytest.raises(ValueError, match="sma has 6 samples, none 5"):
    harness.paired_ratio(sma, Samples("none", none.samples[:5]))


@pytest.mark.slow
def test_batch_suite_compares_with_the_largest_tf_batch(tmp_path):
  result, _ = _run(tmp_path, "batch", "--model", "logistic_regression",
                   "--batch_sizes", "4,16", "--replicas", "2", "--repeats",
                   "1", "--seconds", "0.05")
  rows = result["rows"]
  assert [(r["session"], r["batch_size"]) for r in rows] == [
      ("tf", 4), ("tf", 16), ("tensorbow", 4), ("tensorbow", 16)]
  for r in rows:
    assert r["vs_tf_largest_batch"] == pytest.approx(
        r["median"] / rows[1]["median"])


def test_overhead_suite_per_task_costs(tmp_path):
  result, _ = _run(tmp_path, "overhead", "--replicas", "1,4", "--repeats",
                   "2", "--seconds", "0.05")
  tf_row, one, four = result["rows"]
  assert tf_row["session"] == "tf" and tf_row["vs_tf"] == 1.0
  assert "cpp_task_median_us" not in tf_row
  for r in (one, four):
    assert r["median"] > 0 and r["cpp_task_median_us"] > 0
    assert r["vs_tf"] == pytest.approx(r["median"] / tf_row["median"])
    # A task's C++ part is inside the per-task time measured from Python.
    assert r["cpp_task_median_us"] < r["max"] * r["replicas"]


@pytest.mark.skipif(
    not os.path.isdir("/usr/share/datasets/fashion-mnist"),
    reason="needs Debian's dataset-fashion-mnist (scripts/setup.sh installs "
    "it as root)")
@pytest.mark.slow
def test_tta_suite_finds_the_best_run_of_each(tmp_path):
  # A target every run meets at its first evaluation, on 256 images.
  result, table = _run(tmp_path, "tta", "--target", "0.0",
                       "--tf_batch_sizes", "16,32", "--tensorbow_batch_sizes",
                       "4", "--tensorbow_replicas", "2", "--max_epochs", "1",
                       "--train_size", "256")
  rows = result["rows"]
  assert [(r["session"], r["batch_size"], r["replicas"]) for r in rows] == [
      ("tf", 16, 1), ("tf", 32, 1), ("tensorbow", 4, 2)]
  assert all(r["reached"] and 0.0 <= r["test_accuracy"] <= 1.0
             for r in rows)
  best_tf = min(rows[:2], key=lambda r: r["wall_time"])
  assert result["best_tf"]["batch_size"] == best_tf["batch_size"]
  assert result["ratio"] == pytest.approx(
      rows[2]["wall_time"] / best_tf["wall_time"])
  assert f"{result['ratio']:.2f}" in table


@pytest.mark.skipif(
    not os.path.isdir("/usr/share/datasets/fashion-mnist"),
    reason="needs Debian's dataset-fashion-mnist (scripts/setup.sh installs "
    "it as root)")
@pytest.mark.slow
def test_tta_merge_keeps_earlier_rows_and_runs_only_new_configurations(
    tmp_path):
  first_dir, merged_dir = tmp_path / "first", tmp_path / "merged"
  settings = ["--target", "0.0", "--max_epochs", "1", "--train_size", "256"]
  first, _ = _run(first_dir, "tta", "--tf_batch_sizes", "32",
                  "--tensorbow_batch_sizes", "4", "--tensorbow_replicas", "2",
                  *settings)
  previous = str(first_dir / "tta.json")
  merged, table = _run(merged_dir, "tta", "--tf_batch_sizes", "16,32",
                       "--tensorbow_batch_sizes", "4",
                       "--tensorbow_replicas", "2", "--merge", previous,
                       *settings)
  rows = merged["rows"]
  assert [(r["session"], r["batch_size"], r["replicas"]) for r in rows] == [
      ("tf", 16, 1), ("tf", 32, 1), ("tensorbow", 4, 2)]
  # Rows of the earlier run are kept as they were, not measured again.
  assert rows[1] == first["rows"][0] and rows[2] == first["rows"][1]
  assert merged["merged_commands"] == [first["command"]]
  best_tf = min(rows[:2], key=lambda r: r["wall_time"])
  assert merged["ratio"] == pytest.approx(
      rows[2]["wall_time"] / best_tf["wall_time"])
  assert f"{merged['ratio']:.2f}" in table
  with pytest.raises(ValueError, match=r"other settings.*'max_epochs': "
                     r"\(1, 2\)"):
    bench_main.main(["tta", "--merge", previous, "--target", "0.0",
                     "--max_epochs", "2", "--train_size", "256",
                     "--out", str(tmp_path / "bad")])
  assert not (tmp_path / "bad").exists()


def test_markdown_of_replicas_formats_missing_ratios():
  result = {"rows": [], "derived": [dict(
      model="m", batch_size=4, replicas=2, sma_vs_tf=1.5, none_vs_tf=None,
      sma_cost=None)]}
  assert "| m | 4 | 2 | 1.50 | - | - |" in report.markdown("replicas",
                                                          result)
  cost = dict(result["derived"][0], none_vs_tf=2.0, sma_cost=0.25)
  assert "| m | 4 | 2 | 1.50 | 2.00 | 25.0 % | - |" in report.markdown(
      "replicas", {"rows": [], "derived": [cost]})
  cost.update(sma_cost_paired=0.02, sma_cost_interval=[-0.01, 0.035])
  assert ("| m | 4 | 2 | 1.50 | 2.00 | 25.0 % | 2.0 % (-1.0 % to 3.5 %) |"
          in report.markdown("replicas", {"rows": [], "derived": [cost]}))


def test_sma_op_time_counts_the_apply_ops_of_both_algorithms():
  assert sma_op_time.is_apply("TensorBowResourceApplySmaMomentumWithCentral")
  assert sma_op_time.is_apply("ResourceApplyGradientDescent")
  assert not sma_op_time.is_apply("MatMul")
  for algorithm in ("sma", "none"):
    config = harness.Throughput("logistic_regression", "tensorbow", 4, 2,
                                algorithm)
    waves = sma_op_time.traced_waves(config, 2)
    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    metadata = tf.compat.v1.RunMetadata()
    config.session.run(config.net.train_op, config.feed, options=options,
                       run_metadata=metadata)
    config.close()
    assert len(waves) == 2
    # Replica 0's apply op is traced. At batch 4 it may take under the
    # trace's microsecond, so its time is only bounded by all ops'.
    assert any(sma_op_time.is_apply(op_type)
               for _, op_type, _ in harness.op_times(metadata)), algorithm
    for wall, all_ops, apply_ops in waves:
      assert 0 <= apply_ops < all_ops and wall > 0


def test_sma_op_time_pairs_its_rounds(tmp_path):
  out = tmp_path / "sma_op_time.json"
  result = sma_op_time.main([
      "--model", "logistic_regression", "--replicas", "2", "--batch_size",
      "4", "--repeats", "6", "--waves", "2", "--warmup", "1", "--json",
      str(out)])
  with open(out) as f:
    assert json.load(f)["sma_work"] == json.loads(
        json.dumps(result["sma_work"]))
  sma, none = result["rounds_ms"]["sma"], result["rounds_ms"]["none"]
  assert len(sma) == len(none) == 6
  # Each round's values, (wall, all ops, apply ops), paired with none's.
  work = sorted((s[2] - n[2]) / n[1] for s, n in zip(sma, none))
  assert result["sma_work"]["median"] == pytest.approx(
      (work[2] + work[3]) / 2)
  assert result["sma_work"]["interval"] == pytest.approx((work[0], work[5]))
  walls = sorted(s[0] / n[0] - 1 for s, n in zip(sma, none))
  assert result["wall_difference"]["median"] == pytest.approx(
      (walls[2] + walls[3]) / 2)
  alls = sorted(s[1] / n[1] - 1 for s, n in zip(sma, none))
  assert result["all_ops_difference"]["median"] == pytest.approx(
      (alls[2] + alls[3]) / 2)
  applies = sorted(n[2] for n in none)
  assert result["median_ms"]["none"]["apply_ops"] == pytest.approx(
      (applies[2] + applies[3]) / 2)


def test_tuned_tta_grids_and_medians():
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  args = tuned_tta.parse_args([])
  tf_grid, tb_grid = tuned_tta.grids(args)
  assert len(tf_grid) == 4 * 4 and len(tb_grid) == 3 * 3 * 5 * 4
  config = dict(session="tensorbow", replicas=4, algorithm="asgd",
                batch_size=8, learning_rate=0.01)
  runs = [dict(config, reached=True, wall_time=10.0, epochs=2.0,
               log_path="a"),
          dict(config, reached=False, wall_time=5.0, epochs=9.0,
               log_path="b"),
          dict(config, reached=True, wall_time=20.0, epochs=3.0,
               log_path="c")]
  (summary,) = tuned_tta.summarize(runs)
  # A run that missed the target counts as infinitely slow.
  assert summary["median_time"] == 20.0 and summary["reached"] == 2
  assert summary["median_epochs"] == 3.0 and summary["median_log"] == "c"


def test_tuned_tta_screens_a_list_of_configurations_with_their_params():
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  args = tuned_tta.parse_args([
      "--tensorbow_grid",
      "local_sgd:1:32:0.01:period=5:outer_learning_rate=0.5,none:1:32:0.005"])
  _, tb_grid = tuned_tta.grids(args)
  assert [(c["algorithm"], c["replicas"], c["batch_size"], c["learning_rate"],
           c["params"]) for c in tb_grid] == [
               ("local_sgd", 1, 32, 0.01,
                {"period": 5, "outer_learning_rate": 0.5}),
               ("none", 1, 32, 0.005, {})]
  chosen = tuned_tta.algorithm(tb_grid[0])
  assert (chosen.name, chosen.period, chosen.outer_learning_rate) == (
      "local_sgd", 5, 0.5)
  assert tuned_tta.algorithm(tb_grid[1]) == "none"
  # Screened, scored, then the finals: each finalist keeps its params.
  history = [[dict(tb_grid[1], accuracy=0.9), dict(tb_grid[0], accuracy=0.8)]]
  assert tuned_tta.finalists(history, 1) == [tb_grid[1]]
  assert tuned_tta.finalists(history, 2) == [tb_grid[1], tb_grid[0]]


def test_tuned_tta_times_lower_targets_from_the_finals_logs(tmp_path):
  """--lower_targets: each final run's first evaluation at or above each
  lower accuracy, read from its log; medians over seeds, a run that never
  got there counting as infinitely slow."""
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  paths = []
  for k, accuracies in enumerate([(0.5, 0.9, 0.91), (0.895, 0.905, 0.91),
                                  (0.7, 0.8, 0.85)]):
    path = tmp_path / f"run{k}.jsonl"
    path.write_text("".join(
        json.dumps(dict(epoch=0.25 * (i + 1), wall_time=10.0 * (i + 1) + k,
                        test_accuracy=a)) + "\n"
        for i, a in enumerate(accuracies)))
    paths.append(str(path))
  lower = [tuned_tta.reached_in_log(p, [0.9, 0.91]) for p in paths]
  assert lower == [{"0.9": [20.0, 0.5], "0.91": [30.0, 0.75]},
                   {"0.9": [21.0, 0.5], "0.91": [31.0, 0.75]},
                   {"0.9": None, "0.91": None}]
  config = dict(session="tf", replicas=1, algorithm=None, batch_size=32,
                learning_rate=0.005)
  runs = [dict(config, reached=True, wall_time=30.0 + k, epochs=0.75,
               log_path=p, lower={"0.9": low["0.9"]})
          for k, (p, low) in enumerate(zip(paths, lower))]
  (summary,) = tuned_tta.summarize(runs)
  assert summary["lower"] == {"0.9": [21.0, 0.5]}
  runs[0]["lower"]["0.9"] = None
  (summary,) = tuned_tta.summarize(runs)
  assert summary["lower"] == {"0.9": [math.inf, math.inf]}
  row = tuned_tta._row(summary)  # pylint: disable=protected-access
  assert row.endswith("| missed |")
  head, rule = tuned_tta._table_head(["0.9"])  # pylint: disable=protected-access
  assert head.endswith("| to 0.9: s / epochs |")
  assert head.count("|") == rule.count("|") == row.count("|")


def test_tuned_tta_finals_read_no_log_without_lower_targets(monkeypatch):
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tuned_tta, "train", lambda *a, **k: dict(
      stop_reason="target_accuracy", epochs=1.0, wall_time=2.0,
      test_accuracy=0.9, log_path="/nonexistent/run.jsonl"))
  config = dict(session="tf", replicas=1, algorithm=None, batch_size=32,
                learning_rate=0.005)
  (row,) = tuned_tta.finals("lenet", [config], [0], 0.9, 1, None,
                            lambda _: None)
  assert row["lower"] == {} and row["wall_time"] == 2.0
  with pytest.raises(FileNotFoundError):
    tuned_tta.finals("lenet", [config], [0], 0.9, 1, None, lambda _: None,
                     [0.8])


def test_tuned_tta_resumes_a_run_made_before_a_setting_was_added(
    monkeypatch, tmp_path):
  """A run saved without a setting added since (lower_targets) resumes
  when that setting is left at its default, and is refused otherwise."""
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tuned_tta.tb_data, "load_dataset", lambda name: None)
  argv = ["--out", str(tmp_path), "--resume", "--screen_only"]
  args = tuned_tta.parse_args(argv)
  saved = {k: getattr(args, k) for k in tuned_tta._SETTINGS  # pylint: disable=protected-access
           if k != "lower_targets"}
  (tmp_path / "tuned_tta.json").write_text(json.dumps(dict(
      saved, commands=[], screening_tf=[], screening_tensorbow=[])))
  assert tuned_tta.main(argv)["screening_tf"] == []
  with pytest.raises(SystemExit, match=r"'lower_targets': \(\[\], \[0.9\]\)"):
    tuned_tta.main(argv + ["--lower_targets", "0.9"])


def test_tuned_tta_screens_on_seconds_when_asked(monkeypatch):
  """--rung_seconds: each rung trains on a budget of wall seconds (within
  max_epochs), the best third going on, scored by accuracy then."""
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  calls = []

  def train(model, config, dataset, seed, epochs, target=None,
            seconds=None):
    calls.append((config["learning_rate"], epochs, seconds))
    return dict(test_accuracy=config["learning_rate"], wall_time=1.0)

  monkeypatch.setattr(tuned_tta, "train", train)
  args = tuned_tta.parse_args(["--rung_seconds", "5,10",
                               "--learning_rates", "1,2,3,4,5,6"])
  configs = [dict(session="tf", replicas=1, algorithm=None, batch_size=16,
                  learning_rate=lr) for lr in args.learning_rates]
  history, best = tuned_tta.screen("lenet", configs, args.rung_seconds, 2,
                                   None, lambda _: None, seconds=True,
                                   max_epochs=args.max_epochs)
  assert [c[2] for c in calls] == [5.0] * 6 + [10.0] * 2
  assert {c[1] for c in calls} == {10}
  assert [c["learning_rate"] for c in history[-1]] == [6, 5]
  assert [c["learning_rate"] for c in best] == [6, 5]
  # Without it, the rungs are epochs and no time budget is set.
  calls.clear()
  tuned_tta.screen("lenet", configs[:1], [0.25], 1, None, lambda _: None)
  assert calls == [(1, 0.25, None)]


def test_tuned_tta_resume_refuses_a_run_of_the_other_mode(monkeypatch,
                                                          tmp_path):
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(tuned_tta.tb_data, "load_dataset", lambda name: None)
  argv = ["--out", str(tmp_path), "--resume", "--tf_mode", "graph"]
  args = tuned_tta.parse_args(argv)
  settings = {k: getattr(args, k) for k in tuned_tta._SETTINGS}  # pylint: disable=protected-access
  (tmp_path / "tuned_tta.json").write_text(json.dumps(
      dict(settings, tf_mode="v1", commands=[])))
  with pytest.raises(SystemExit, match=r"\{'tf_mode': \('v1', 'graph'\)\}"):
    tuned_tta.main(argv)


def test_tuned_tta_extra_configurations():
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  from tensorbow import algorithms  # pylint: disable=g-import-not-at-top
  config = tuned_tta.extra_config("easgd:2:16:0.01:period=2:alpha=0.3")
  assert (config["replicas"], config["batch_size"],
          config["learning_rate"]) == (2, 16, 0.01)
  made = tuned_tta.algorithm(config)
  assert isinstance(made, algorithms.EASGD)
  assert (made.period, made.alpha) == (2, 0.3)
  assert (tuned_tta.name(config) ==
          "tensorbow easgd(alpha=0.3,period=2) L=2 b16 lr 0.01")
  # Without parameters the name and the algorithm are the protocol's.
  plain = tuned_tta.extra_config("sma:4:8:0.02")
  assert tuned_tta.algorithm(plain) == "sma"
  assert tuned_tta.name(plain) == "tensorbow sma L=4 b8 lr 0.02"
  with pytest.raises(ValueError, match="ALGORITHM:L:BATCH:LR"):
    tuned_tta.extra_config("easgd:2:16")
  with pytest.raises(ValueError, match="period must be an int >= 1"):
    tuned_tta.extra_config("easgd:2:16:0.01:period=0")
  with pytest.raises(TypeError):
    tuned_tta.extra_config("easgd:2:16:0.01:speed=3")
  with pytest.raises(ValueError, match="algorithm must be one of"):
    tuned_tta.extra_config("easgdd:2:16:0.01:period=2")
  # Values as Python reads them: exponents, ints and floats.
  made = tuned_tta.algorithm(tuned_tta.extra_config(
      "easgd:2:16:1e-2:alpha=2.5e-1:period=3"))
  assert (made.alpha, made.period) == (0.25, 3)


def test_tuned_tta_reports_the_extra_configurations_apart():
  from benchmarks import tuned_tta  # pylint: disable=g-import-not-at-top
  tf_best = dict(name="tf b16 lr 0.005", session="tf", reached=3, runs=3,
                 median_time=80.0, median_epochs=3.25)
  tb_best = dict(tf_best, name="tensorbow easgd L=2 b16 lr 0.01",
                 session="tensorbow", median_time=72.0)
  extra = dict(tb_best, name="tensorbow easgd(period=2) L=2 b16 lr 0.01",
               reached=1, median_time=float("inf"), median_epochs=10.0)
  result = dict(target=0.9, model="lenet", rungs=[0.25], tf_mode="v1",
                summary=[tf_best, tb_best],
                ratio=tuned_tta._ratio(tb_best, tf_best),  # pylint: disable=protected-access
                summary_extra=[extra],
                ratio_extra=tuned_tta._ratio(extra, tf_best))  # pylint: disable=protected-access
  table = tuned_tta.markdown(result)
  protocol, beyond = table.split("Beyond the protocol")
  assert "lenet, v1 mode; screening rungs [0.25] epochs" in protocol
  assert "| tensorbow easgd L=2 b16 lr 0.01 | 3/3 | 72.0 | 3.25 |" in protocol
  assert "TensorBow best / TensorFlow best (median time): 0.90" in protocol
  assert "easgd(period=2)" not in protocol
  assert ("| tensorbow easgd(period=2) L=2 b16 lr 0.01 | 1/3 | missed | "
          "10.00 |") in beyond
  # A missed target has no ratio.
  assert "Its best / TensorFlow best (median time): n/a" in beyond


def test_real_scripts_reports_tensorflow_against_itself_with_aa():
  """--aa: TensorFlow runs again last in each repeat; the row gives its
  median over the first's, the range of each repeat's second run over its
  first, and the range of its accuracy and loss."""
  sessions = real_scripts.sessions_for(["1"], aa=True)
  assert list(sessions) == ["tf", "1", real_scripts.AA]
  assert sessions[real_scripts.AA]("s.py") == [sys.executable, "s.py"]
  assert sessions["1"]("s.py")[-3:] == ["--replicas", "1", "s.py"]
  assert list(real_scripts.sessions_for(["1"], aa=False)) == ["tf", "1"]
  head, rule = real_scripts.header(["1"], aa=True)
  results = {"tf": [(10.0, 0.80, 0.5, None), (12.0, 0.82, 0.4, None),
                    (11.0, 0.81, 0.6, None)],
             "1": [(11.0, 0.81, 0.5, None)] * 3,
             real_scripts.AA: [(13.0, 0.79, 0.5, None),
                               (10.0, 0.83, 0.3, None),
                               (12.0, 0.80, 0.5, None)]}
  line = real_scripts.row("s.py", results, ["1"])
  cells = [c.strip() for c in line.strip("|").split("|")]
  assert len(cells) == len(head.strip("|").split("|")) == rule.count("---")
  # Each repeat's A/A: 13 / 10, 10 / 12, 12 / 11.
  assert cells[:6] == ["s.py", "11.0", "11.0", "1.00", "1.09", "0.83-1.30"]
  assert cells[6] == "0.8100 / 0.8100 / 0.8000 (tf 0.7900-0.8300)"
  assert cells[7] == "0.5000 / 0.5000 / 0.5000 (tf 0.3000-0.6000)"
  # Without it, no A/A column and no range.
  del results[real_scripts.AA]
  cells = real_scripts.row("s.py", results, ["1"]).strip("|").split("|")
  assert len(cells) == 7 and cells[4].strip() == "0.8100 / 0.8100"


@pytest.mark.slow
def test_real_scripts_reads_the_result_and_the_last_tuned_l():
  # The decision lines as tensorbow-run prints them, from the tuner itself:
  # L=1, then 2 (twice as fast), 3 (not faster), back to 2 via a trial of
  # the other threads.
  code = (
      "from tensorbow import autotune\n"
      "from tensorbow.cli import main\n"
      "t = autotune.AutoTuner(warmup=0, measure=1, cores=1, min_seconds=0,\n"
      "                       patience=0)\n"
      "with main._tuner_log(True):\n"
      "  for l, inline, seconds in [(1, False, 0.02), (2, False, 0.01),\n"
      "                             (3, False, 0.01), (2, True, 0.02)]:\n"
      "    t.observe(l, 1, 100, seconds, inline)\n"
      "assert t.settled and t.decisions[-1].next == (2, 1, False)\n"
      "print('RESULT accuracy=0.8125 loss=0.25')\n")
  seconds, accuracy, loss, replicas = real_scripts.run(
      [sys.executable, "-c", code])
  assert seconds > 0 and (accuracy, loss, replicas) == (0.8125, 0.25, 2)
  _, _, _, replicas = real_scripts.run(
      [sys.executable, "-c", "print('RESULT accuracy=1 loss=0')"])
  assert replicas is None


def test_suite_takes_the_tf1_mode():
  assert bench_main.parse_args(["replicas"]).tf_mode == "graph"
  assert bench_main.parse_args(["replicas", "--tf_mode", "v1"]).tf_mode == "v1"
  with pytest.raises(SystemExit):
    bench_main.parse_args(["replicas", "--tf_mode", "eager"])


def test_lenet_bound_trains_each_replica_as_its_own_lenet():
  """One step of the k-replica graph equals k plain LeNet steps, each on
  its replica's rows from its replica's weights."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from benchmarks import lenet_bound  # pylint: disable=g-import-not-at-top
  if not lenet_bound.grouped_conv_gradients():
    pytest.skip("this TensorFlow build has no CPU gradient for grouped "
                "convolutions (oneDNN off), which the k-replica graph uses")
  replicas = 2
  vec = lenet_bound.vectorised(replicas)
  graph, sess = vec["sess"].graph, vec["sess"]
  names = ["conv1/w", "conv1/b", "conv2/w", "conv2/b", "fc1/w", "fc1/b",
           "fc2/w", "fc2/b"]
  variables = {v.op.name: v for v in graph.get_collection(
      tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)}
  values = dict(zip(names, sess.run([variables[n] for n in names])))

  def replica_slice(name, value, r):
    if name.startswith("conv"):
      width = value.shape[-1] // replicas
      return value[..., r * width:(r + 1) * width]
    return value[r, 0] if name.endswith("/b") else value[r]

  # The images (rank 4), then the labels.
  xs, ys = [value for _, value in sorted(
      vec["feed"].items(), key=lambda kv: kv[0].shape.rank, reverse=True)]
  sess.run(vec["train"], vec["feed"])
  after = dict(zip(names, sess.run([variables[n] for n in names])))
  rows = lenet_bound.BATCH
  for r in range(replicas):
    plain = lenet_bound.plain(rows)
    p_graph, p_sess = plain["sess"].graph, plain["sess"]
    by_name = {v.op.name: v for v in p_graph.get_collection(
        tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)}
    with p_graph.as_default():
      p_sess.run([by_name[name].assign(replica_slice(name, values[name], r))
                  for name in names])
    p_x, p_y = sorted(plain["feed"],
                      key=lambda t: t.shape.rank, reverse=True)
    p_sess.run(plain["train"], {p_x: xs[r * rows:(r + 1) * rows],
                                p_y: ys[r * rows:(r + 1) * rows]})
    for name in names:
      expected = p_sess.run(by_name[name])
      got = replica_slice(name, after[name], r)
      assert not np.allclose(got, replica_slice(name, values[name], r))
      np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


# Starts worker processes: slow tier. The mode is the workers' own (v1).
@pytest.mark.slow
@pytest.mark.mode_independent
def test_lost_worker_times_the_survivors_and_checks_they_named_it():
  from benchmarks import lost_worker  # pylint: disable=g-import-not-at-top
  took, named = lost_worker.measure(2, "kill", 2, 3.0)
  assert len(took) == 1 and 0 < took[0] < 10, took
  assert named


def test_pairs_ratios_are_taken_pair_by_pair():
  """benchmarks/pairs.py: the A/B row is each pair's A over its B, not the
  medians' ratio; every measure has its min, median and max."""
  a = [dict.fromkeys(pairs.MEASURES, v) for v in (2.0, 6.0, 3.0)]
  b = [dict.fromkeys(pairs.MEASURES, v) for v in (1.0, 2.0, 6.0)]
  rows = pairs.summary(a, b)
  assert list(rows) == list(pairs.MEASURES)
  assert rows["wall s"]["A"] == (2.0, 3.0, 6.0)
  assert rows["wall s"]["B"] == (1.0, 2.0, 6.0)
  assert rows["peak MiB"]["A/B"] == (0.5, 2.0, 3.0)  # 2/1, 6/2, 3/6
  text = pairs.report(["a"], ["b"], rows, 3)
  assert "A/B wall s        0.5000    2.0000    3.0000" in text


@pytest.mark.mode_independent
def test_pairs_times_whole_processes_in_turn_and_names_a_failure(tmp_path):
  # Each child writes its letter to `order` as it runs.
  order = tmp_path / "order"
  write = "import sys, time; open(sys.argv[1], 'a').write('{}'); "
  sleeper = [sys.executable, "-c", write.format("B") + "time.sleep(0.3)",
             str(order)]
  quick = [sys.executable, "-c", write.format("A"), str(order)]
  a_runs, b_runs = pairs.run_pairs(quick, sleeper, 2, warmup=1)
  assert order.read_text() == "ABABAB"  # a warm-up each, then two pairs
  assert len(a_runs) == len(b_runs) == 2
  assert all(run["wall s"] >= 0.3 for run in b_runs)
  assert all(run["peak MiB"] > 1 and run["cpu s"] > 0 for run in a_runs)
  failing = [sys.executable, "-c", "import sys; print('bad'); "
             "sys.stderr.write('why'); sys.exit(3)"]
  with pytest.raises(RuntimeError, match=r"exited 3:\nwhy"):
    pairs.measure(failing)


def test_element_run_trains_on_the_elements_the_step_would_take():
  """benchmarks/element_run.py: taking the element in a run of its own,
  or a step ahead, feeds the step what get_next inside it would take, so
  the three ways train the same model from the same start."""
  tf1 = tf.compat.v1
  trained = {}
  with tf.Graph().as_default():
    tf1.set_random_seed(0)
    # Synthetic images: the test needs no data set installed.
    x, y, train = element_run.build(96, "synthetic")
    weight = [v for v in tf1.global_variables() if v.op.name == "w1"][0]
    for name, way in element_run.WAYS.items():
      with tf1.Session() as sess, \
          concurrent.futures.ThreadPoolExecutor(1) as pool:
        sess.run(tf1.global_variables_initializer())
        way(sess, x, y, train, 3, pool)
        trained[name] = sess.run(weight)
  first = trained.pop("in the step")
  assert np.abs(first).sum() > 0
  for name, value in trained.items():
    np.testing.assert_array_equal(value, first, err_msg=name)
