"""`python -m models.plot` (models/plot.py) on small JSON-lines logs."""
import json
import os
import struct
import subprocess
import sys

import pytest

from models import plot

from children import CHECKOUT, child_env

# JSON logs in, PNGs out, here and in a child process that imports no
# TensorFlow: the TF1 mode cannot change them (conftest.py).
pytestmark = pytest.mark.mode_independent

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def log_lines(session, replicas, batch_size, algorithm, accuracies, speed):
  """One line per step; test_accuracy is null except at the end of an epoch
  (accuracies[e] for epoch e + 1)."""
  lines = []
  step = 0
  for epoch, accuracy in enumerate(accuracies, 1):
    for k in range(3):
      step += 1
      lines.append({
          "epoch": epoch, "step": step, "wall_time": step / speed,
          "images_seen": step * batch_size, "train_loss": 2.0 / step,
          "test_accuracy": accuracy if k == 2 else None,
          "images_per_sec": speed * batch_size, "session": session,
          "replicas": replicas, "batch_size": batch_size,
          "algorithm": algorithm, "model": "lenet"})
  return lines


def write_log(path, lines, raw_tail=""):
  with open(path, "w") as f:
    for line in lines:
      f.write(json.dumps(line) + "\n")
    f.write(raw_tail)
  return str(path)


@pytest.fixture
def logs(tmp_path):
  tb_lines = log_lines("tensorbow", 4, 4, "sma", [0.61, 0.72, 0.80], 8.0)
  tf_lines = log_lines("tf", 1, 16, "none", [0.55, 0.70], 5.0)
  return (write_log(tmp_path / "tb.jsonl", tb_lines, "\n"),
          write_log(tmp_path / "tf.jsonl", tf_lines), tb_lines, tf_lines)


def expected_series(lines):
  kept = [l for l in lines if l["test_accuracy"] is not None]
  return ([l["wall_time"] for l in kept], [l["epoch"] for l in kept],
          [l["test_accuracy"] for l in kept])


def png_size(path):
  with open(path, "rb") as f:
    head = f.read(24)
  assert head[:8] == PNG_MAGIC
  assert head[12:16] == b"IHDR"
  return struct.unpack(">II", head[16:24])


def test_main_writes_a_png(tmp_path, logs):
  out = str(tmp_path / "accuracy.png")
  assert plot.main([logs[0], logs[1], "-o", out, "--title", "LeNet"]) == 0
  assert png_size(out) == (1100, 420)
  assert 5_000 < os.path.getsize(out) < 2_000_000


def test_plotted_series_are_the_logs_values(tmp_path, logs):
  tb_path, tf_path, tb_lines, tf_lines = logs
  plotted = plot.plot_logs([tb_path, tf_path], str(tmp_path / "a.png"))
  assert list(plotted) == ["tensorbow L=4 b=4 sma", "tf b=16"]
  assert tuple(plotted["tensorbow L=4 b=4 sma"]) == expected_series(tb_lines)
  assert tuple(plotted["tf b=16"]) == expected_series(tf_lines)
  assert plotted["tf b=16"].test_accuracy == [0.55, 0.70]
  assert plotted["tf b=16"].epoch == [1, 2]
  assert plotted["tf b=16"].wall_time == [0.6, 1.2]


def test_labels_fall_back_to_file_name_and_stay_unique(tmp_path, logs):
  bare = [{"epoch": 1, "wall_time": 2.5, "test_accuracy": 0.4},
          {"epoch": 2, "wall_time": 5.0, "test_accuracy": 0.5}]
  bare_path = write_log(tmp_path / "run7.jsonl", bare)
  again = write_log(tmp_path / "tb_again.jsonl",
                    log_lines("tensorbow", 4, 4, "sma", [0.5], 8.0))
  plotted = plot.plot_logs([logs[0], bare_path, again],
                           str(tmp_path / "b.png"))
  assert list(plotted) == ["tensorbow L=4 b=4 sma", "run7.jsonl",
                           "tensorbow L=4 b=4 sma (tb_again.jsonl)"]
  assert tuple(plotted["run7.jsonl"]) == ([2.5, 5.0], [1, 2], [0.4, 0.5])


@pytest.mark.slow
def test_runs_as_a_module_without_a_display(tmp_path, logs):
  out = tmp_path / "module.png"
  result = subprocess.run(
      [sys.executable, "-m", "models.plot", logs[0], logs[1], "-o",
       str(out)],
      env=child_env(CHECKOUT, unset=("DISPLAY",), MPLBACKEND="TkAgg"),
      cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert png_size(out) == (1100, 420)
  assert "tensorbow L=4 b=4 sma, tf b=16" in result.stderr


def check_exit_2(capsys, argv, message):
  with pytest.raises(SystemExit) as exit_info:
    plot.main(argv)
  assert exit_info.value.code == 2
  assert message in capsys.readouterr().err


def test_missing_log_exits_2_naming_it(tmp_path, capsys, logs):
  missing = str(tmp_path / "nope.jsonl")
  out = tmp_path / "c.png"
  check_exit_2(capsys, [logs[0], missing, "-o", str(out)],
               f"no such log file: {missing}")
  assert not out.exists()
  with pytest.raises(FileNotFoundError, match="nope.jsonl"):
    plot.plot_logs([missing], str(out))


@pytest.mark.parametrize("content,message", [
    ("", "no line with a test_accuracy to plot (0 line(s) read)"),
    ('{"epoch": 1, "wall_time": 1.0, "test_accuracy": null}\n\n',
     "no line with a test_accuracy to plot (1 line(s) read)"),
    ('{"epoch": 1, "wall_time": 1.0, "test_accuracy": 0.5}\n{"epoch": 2,',
     ":2: not JSON"),
    ('[1, 2]\n', ":1: expected a JSON object, got list"),
    ('{"epoch": 1, "test_accuracy": 0.5}\n', ":1: missing key(s) wall_time"),
    ('{"epoch": 1, "wall_time": "soon", "test_accuracy": 0.5}\n',
     ":1: wall_time, epoch and test_accuracy must be numbers"),
])
def test_unusable_log_is_named(tmp_path, capsys, content, message):
  path = tmp_path / "bad.jsonl"
  path.write_text(content)
  check_exit_2(capsys, [str(path), "-o", str(tmp_path / "d.png")],
               f"{path}{message}" if message.startswith(":")
               else f"{path}: {message}")
  with pytest.raises(plot.LogError):
    plot.plot_logs([str(path)], str(tmp_path / "d.png"))


def test_output_is_required(capsys, logs):
  check_exit_2(capsys, [logs[0]], "the following arguments are required: "
               "-o/--output")
