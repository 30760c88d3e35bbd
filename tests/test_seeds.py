"""benchmarks/seeds.py at toy sizes: what each experiment computes from its
runs (medians, counts, the sweeps' settings) and that its JSON, Markdown
and PNG hold them. The accuracies themselves are not asserted."""
import json
import math
import os

import pytest

from benchmarks import seeds
from benchmarks import tuned_tta

FASHION_MNIST = pytest.mark.skipif(
    not os.path.isdir("/usr/share/datasets/fashion-mnist"),
    reason="needs Debian's dataset-fashion-mnist (scripts/setup.sh installs "
    "it as root)")


def test_sweeps_move_one_parameter_at_a_time_from_the_defaults():
  args = seeds.parse_args(["sweeps", "--batch_size", "16"])
  settings = seeds.sweep_settings(args)
  assert settings[0] == (None, None)
  assert settings[1:] == [
      ("mega_batch", 3), ("mega_batch", 48), ("batch_size", 8),
      ("batch_size", 32), ("beta", 1.0), ("beta", 8.0), ("theta", 0.01),
      ("theta", 1.0), ("delta", 0.0), ("delta", 0.3), ("momentum", 0.0),
      ("momentum", 0.5)]


def test_a_miss_counts_as_infinitely_slow():
  rows = [dict(reached=True, wall_time=3.0), dict(reached=False,
                                                  wall_time=1.0),
          dict(reached=True, wall_time=5.0)]
  assert tuned_tta.median_time(rows) == 5.0
  assert math.isinf(tuned_tta.median_time(rows[1:2]))


@FASHION_MNIST
@pytest.mark.slow
def test_adaptive_against_the_others_with_a_slowed_replica(tmp_path):
  result = seeds.main(["adaptive", "--out", str(tmp_path), "--train_size",
                       "640", "--algorithms", "adaptive,ssgd", "--seeds",
                       "0,1", "--target", "0.0", "--mega_batch", "1",
                       "--max_epochs", "1", "--slow", "1:1/row"],
                      set_mode=False)
  rows = result["rows"]
  assert [(r["algorithm"], r["seed"]) for r in rows] == [
      ("adaptive", 0), ("adaptive", 1), ("ssgd", 0), ("ssgd", 1)]
  for s in result["summary"]:
    runs = [r for r in rows if r["algorithm"] == s["algorithm"]]
    assert s["median_time"] == pytest.approx(
        (runs[0]["wall_time"] + runs[1]["wall_time"]) / 2)
    assert s["reached"] == 2
  # The target is met at the first evaluation, after one run of 128 rows:
  # a mega-batch of 8 batches of 16, of which the slowed replica 1 took
  # fewer than replica 0.
  (first,) = rows[0]["history"]
  assert first["batch_sizes"] == [16, 16]
  assert sum(first["updates"]) == 8
  assert first["updates"][0] > first["updates"][1]
  assert rows[2]["history"] == []
  table = (tmp_path / "adaptive.md").read_text()
  assert f"{result['summary'][0]['median_time']:.1f}" in table
  assert (tmp_path / "adaptive.png").stat().st_size > 0
  saved = json.loads((tmp_path / "adaptive.json").read_text())
  assert saved["summary"] == result["summary"]


@FASHION_MNIST
@pytest.mark.slow
def test_gadei_table_and_batch_sizes(tmp_path):
  result = seeds.main(["gadei", "--out", str(tmp_path), "--train_size",
                       "256", "--intervals", "1,2", "--seeds", "0",
                       "--epochs", "1", "--gadei_replicas", "2"],
                      set_mode=False)
  assert [r["interval"] for r in result["table1"]] == [1, 2]
  assert [r["batch_size"] for r in result["figure3"]] == [
      1, 2, 4, 8, 16, 32, 64, 128]
  # Every run saw the same samples: one epoch.
  assert all(r["epochs"] == pytest.approx(1.0)
             for r in result["table1"] + result["figure3"])
  table = (tmp_path / "gadei.md").read_text()
  for r in result["table1"] + result["figure3"]:
    assert f"{r['test_accuracy']:.4f}" in table
  assert (tmp_path / "gadei.png").stat().st_size > 0


def test_lenet_reads_the_tuned_tta_results(tmp_path):
  summary = [dict(name="tf b32 lr 0.005", reached=3, runs=3,
                  median_time=294.0, median_epochs=3.5),
             dict(name="tensorbow easgd L=2 b16 lr 0.01", reached=2, runs=3,
                  median_time=math.inf, median_epochs=6.0)]
  path = tmp_path / "tuned_tta.json"
  path.write_text(json.dumps(dict(summary=summary, ratio=None)))
  result = seeds.main(["lenet", "--out", str(tmp_path), "--tuned_tta",
                       f"v1={path}"], set_mode=False)
  assert result["modes"]["v1"]["summary"] == summary
  table = (tmp_path / "lenet.md").read_text()
  assert "| tf b32 lr 0.005 | 3/3 | 294.0 | 3.50 |" in table
  assert "| tensorbow easgd L=2 b16 lr 0.01 | 2/3 | missed | 6.00 |" in table
