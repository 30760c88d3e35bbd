"""The reference models (models/*.py) and their training loop (training.py).

Each model trains a few steps on synthetic data under tf.compat.v1.Session
and under TensorBowSession(replicas=2), and its loss must fall; ResNet-32's
size and batch norm are checked; `models.training.train` and a model
script's command line (with replicas="auto" and with local SGD) are run in
process and `python -m models.lenet` as a script, and their JSON-lines logs
read back; the main job's (examples/demo.py) medians, fixed runs, per-seed
lines and runs in processes of their own are checked. The training sets are
one step's worth of rows, so every step sees the same examples (in a new
order) and a few steps suffice to show learning.
"""
import functools
import glob
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tensorbow as tb
from examples import demo
from models import data as tb_data
from models import lenet
from models import script
from models import training

from children import CHECKOUT, child_env

# End-to-end: the fast tier (-m "not slow") leaves these out.
pytestmark = pytest.mark.slow


REPLICAS = 2

# name: (image shape, rows per replica, learning rate, steps). Rates are
# lower than the scripts' defaults: the synthetic images are bright
# everywhere, so gradients are larger than on MNIST-like data.
CASES = {
    "logistic_regression": ((28, 28, 1), 8, 0.01, 8),
    "lenet": ((28, 28, 1), 8, 0.001, 8),
    "mlp": ((28, 28, 1), 8, 0.01, 8),
    # Few steps: on 2 cores ResNet-32 is slow, and TensorBow's first
    # training run copies its learning part once per stream group.
    "resnet32": ((32, 32, 3), 8, 0.02, 5),
}


def load_model(name):
  return importlib.import_module(f"models.{name}")


@functools.lru_cache(maxsize=None)
def built(name):
  """(graph, model namespace, init op) of a model, built once per name.

  Both sessions of a test train the same graph (each from its own
  initialisation): building ResNet-32 takes seconds.
  """
  image_shape, _, learning_rate, _ = CASES[name]
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    model = load_model(name).build(image_shape, 10, learning_rate)
    init = tf.compat.v1.global_variables_initializer()
  return graph, model, init


def trainable_parameters(graph):
  with graph.as_default():
    return sum(int(np.prod(v.shape))
               for v in tf.compat.v1.trainable_variables())


@pytest.mark.parametrize("session", ["tf", "tensorbow"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_model_learns(name, session):
  image_shape, batch_size, _, steps = CASES[name]
  graph, model, init = built(name)
  rows = training.rows_per_step(session, REPLICAS, batch_size)
  dataset = tb_data.load_dataset("synthetic", image_shape=image_shape,
                                 train_size=rows, test_size=32)
  batches = tb_data.batches(dataset.train_images, dataset.train_labels,
                            rows, seed=1)
  sess = training.build_session(session, REPLICAS, "sma", graph)
  assert isinstance(sess, tb.TensorBowSession if session == "tensorbow"
                    else tf.compat.v1.Session)
  with sess:
    sess.run(init)
    losses = []
    for _ in range(steps):
      _, x, y = next(batches)
      # A fed scalar (training) next to the batch feeds: under TensorBow it
      # must reach every replica as a scalar (ResNet-32's tf.cond needs one).
      _, loss = sess.run([model.train_op, model.loss],
                         {model.x: x, model.y: y, model.training: True})
      assert np.shape(loss) == ()
      losses.append(float(loss))
    accuracy = training.evaluate(sess, model, dataset.test_images,
                                 dataset.test_labels)
    moving = [v for v in graph.get_collection(
        tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
              if v.op.name.endswith("moving_mean")]
    moving_means = sess.run(moving)
  assert np.all(np.isfinite(losses)), losses
  assert np.mean(losses[-3:]) < losses[0], losses
  assert 0.0 <= accuracy <= 1.0
  if name == "resnet32":
    # conv1 + 2 per block + nothing for option-A shortcuts.
    assert len(moving) == 1 + 2 * 3 * 5
    # The UPDATE_OPS ran with the train op (from zeros, their start).
    assert all(np.any(m != 0.0) for m in moving_means)


def test_lenet_trains_with_64_replicas():
  """The replica pool at L = 64, batch 4 per replica: 256 rows a wave on 2
  stream groups, one copy of the learning part each."""
  replicas, batch_size, steps = 64, 4, 8
  image_shape, _, learning_rate, _ = CASES["lenet"]
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    model = load_model("lenet").build(image_shape, 10, learning_rate * 8)
    init = tf.compat.v1.global_variables_initializer()
  rows = replicas * batch_size
  dataset = tb_data.load_dataset("synthetic", image_shape=image_shape,
                                 train_size=rows, test_size=32)
  batches = tb_data.batches(dataset.train_images, dataset.train_labels,
                            rows, seed=1)
  with tb.TensorBowSession(graph=graph, replicas=replicas) as sess:
    sess.run(init)
    losses = []
    for _ in range(steps):
      _, x, y = next(batches)
      losses.append(float(sess.run([model.train_op, model.loss],
                                   {model.x: x, model.y: y})[1]))
    tasks = [t for t in sess.task_timings() if t.replica >= 0]
    copies = [op for op in sess.execution_graph.get_operations()
              if op.type == "TensorBowReplicaVarHandle"]
  assert np.all(np.isfinite(losses)), losses
  assert np.mean(losses[-3:]) < losses[0], losses
  assert sorted(set(t.replica for t in tasks)) == list(range(replicas))
  # 8 variables and their 8 momentum slots, once per stream group.
  assert len(copies) <= 16 * 2, len(copies)


def test_resnet32_size():
  graph, model, _ = built("resnet32")
  assert 450_000 <= trainable_parameters(graph) <= 480_000
  convs = [op for op in graph.get_operations() if op.type == "Conv2D"
           and not op.name.startswith(("gradients", "tensorbow"))]
  assert len(convs) == 31  # + the fc layer: 32 layers.
  assert model.logits.shape.as_list() == [None, 10]


def test_resnet32_projection_shortcuts():
  graph = tf.Graph()
  with graph.as_default():
    load_model("resnet32").build((32, 32, 3), 10, 0.1, shortcut="B",
                                 blocks_per_stage=1)
    # ResNet-8, for speed: the stage changes get 1x1 projections + BN.
    names = [v.op.name for v in tf.compat.v1.trainable_variables()]
  assert "stage2/block1/projection/kernel" in names
  assert "stage3/block1/projection/bn/gamma" in names
  with pytest.raises(ValueError, match="shortcut"):
    with tf.Graph().as_default():
      load_model("resnet32").build((32, 32, 3), 10, 0.1, shortcut="C")


def _logistic_regression():
  """(logistic regression in a graph of its own, 320 + 64 synthetic
  images)."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.set_random_seed(0)
    model = load_model("logistic_regression").build((28, 28, 1), 10, 0.01)
  return model, tb_data.load_dataset("synthetic", train_size=320,
                                     test_size=64)


def test_train_stops_and_logs(tmp_path):
  model, dataset = _logistic_regression()
  config = training.Config(session="tensorbow", replicas=REPLICAS,
                           batch_size=8, epochs=3, max_steps=25,
                           target_accuracy=None, log_dir=str(tmp_path))
  result = training.train(model, dataset, config, "logistic_regression",
                          verbose=False)
  # 320 rows / 16 a step: 20 steps an epoch; max_steps stops first.
  assert result["steps"] == 25
  assert result["stop_reason"] == "max_steps"
  assert result["epochs"] == pytest.approx(1.25)
  records = [json.loads(line) for line in open(result["log_path"])]
  assert [r["step"] for r in records] == [20, 25, 25]
  assert records[-1]["event"] == "final"
  assert records[-1]["test_accuracy"] == result["test_accuracy"]
  assert all(r["images_seen"] == 16 * r["step"] for r in records)
  assert glob.glob(os.path.join(result["tensorboard_dir"], "events.out.*"))
  assert result["final_replicas"] == REPLICAS
  # Training time alone: within the wall time, which adds evaluations.
  assert 0 < result["images_seen"] / result["images_per_sec"] <= (
      result["wall_time"])

  # A target already met at the first evaluation (a quarter epoch) stops it.
  config = config._replace(session="tf", target_accuracy=0.0, max_steps=None)
  result = training.train(model, dataset, config, "logistic_regression",
                          verbose=False)
  assert result["stop_reason"] == "target_accuracy"
  assert result["steps"] == 40 // 4  # 320 / 8 = 40 steps an epoch.
  assert result["final_replicas"] == 1


def test_train_evaluates_as_often_as_asked_and_takes_auto(tmp_path):
  """evals_per_epoch sets the evaluations; replicas="auto" feeds
  batch_size rows a step in all, as the main job's auto run does."""
  model, dataset = _logistic_regression()
  config = training.Config(session="tensorbow", replicas="auto",
                           batch_size=16, epochs=2, evals_per_epoch=8,
                           log_dir=str(tmp_path))
  result = training.train(model, dataset, config, "logistic_regression",
                          verbose=False)
  assert result["steps"] == 40  # 320 / 16 rows: 20 steps an epoch
  records = [json.loads(line) for line in open(result["log_path"])]
  # 20 steps / 8: every second step, then the final record.
  assert [r["step"] for r in records[:-1]] == list(range(2, 41, 2))
  assert all(r["images_seen"] == 16 * r["step"] for r in records)
  assert records[0]["replicas"] == "auto"
  assert result["final_replicas"] in range(1, 17)  # what auto chose


def test_train_stops_after_max_seconds(tmp_path):
  model, dataset = _logistic_regression()
  # 200 epochs (8000 steps) take seconds: the time limit comes first.
  config = training.Config(session="tf", batch_size=8, epochs=200,
                           max_seconds=0.5, log_dir=str(tmp_path))
  result = training.train(model, dataset, config, "logistic_regression",
                          verbose=False)
  assert result["stop_reason"] == "max_seconds"
  assert result["wall_time"] >= 0.5 and result["steps"] > 40
  records = [json.loads(line) for line in open(result["log_path"])]
  assert records[-1]["step"] == result["steps"]


def run_script(tmp_path, *argv):
  """`python -m models.logistic_regression --data=synthetic ARGV...`, in
  process: (training.train's dict, the records of its log)."""
  module = load_model("logistic_regression")
  result = script.main(
      ["--data=synthetic", f"--log_dir={tmp_path}", *argv], module.build,
      module.MODEL_NAME, module.SYNTHETIC_IMAGE_SHAPE, module.DEFAULTS)
  return result, [json.loads(line) for line in open(result["log_path"])]


def test_the_script_trains_with_replicas_auto(tmp_path):
  result, records = run_script(
      tmp_path, "--replicas=auto", "--batch_size=16", "--train_size=320",
      "--test_size=64", "--epochs=1", "--evals_per_epoch=2")
  # batch_size rows a step in all: 320 / 16 = 20 steps.
  assert result["stop_reason"] == "epochs" and result["steps"] == 20
  assert [r["step"] for r in records] == [10, 20, 20]
  for record in records:
    assert record["replicas"] == "auto" and record["algorithm"] == "sma"
    assert record["images_seen"] == 16 * record["step"]
  assert result["final_replicas"] in range(1, 17)  # what auto chose
  assert np.isfinite(records[-1]["train_loss"])


def test_the_script_trains_with_local_sgd(tmp_path):
  """Local SGD's central model moves only at an exchange, every 8 runs
  (LocalSGD's default period): after 7 it is still the zero model, whose
  accuracy is the share of label 0 (argmax of equal logits); the 8th
  moves it."""
  result, records = run_script(
      tmp_path, "--algorithm=local_sgd", "--replicas=2", "--batch_size=8",
      "--train_size=224", "--test_size=64", "--max_steps=8",
      "--evals_per_epoch=2")
  # 224 rows / 16 a step: 14 steps an epoch, evaluated every 7.
  assert result["stop_reason"] == "max_steps" and result["steps"] == 8
  assert [r["step"] for r in records] == [7, 8, 8]
  assert {(r["algorithm"], r["replicas"]) for r in records} == {
      ("local_sgd", 2)}
  test_labels = tb_data.load_dataset("synthetic", train_size=224,
                                     test_size=64).test_labels
  zero_model = float(np.mean(test_labels == 0))
  assert records[0]["test_accuracy"] == pytest.approx(zero_model)
  assert records[1]["test_accuracy"] != pytest.approx(zero_model)


def test_lenet_script(tmp_path):
  # The subprocess imports the same TensorBow as this test (installed or
  # source tree), and `models` from this checkout (the wheel has none).
  completed = subprocess.run(
      [sys.executable, "-m", "models.lenet",
       "--data=synthetic", "--train_size=256", "--test_size=128",
       "--epochs=1", "--session=tensorbow", "--replicas=2", "--batch_size=8",
       f"--log_dir={tmp_path}"],
      capture_output=True, text=True, timeout=120, env=child_env(CHECKOUT),
      check=False)
  assert completed.returncode == 0, completed.stderr[-3000:]
  logs = glob.glob(os.path.join(str(tmp_path), "*.jsonl"))
  assert len(logs) == 1, os.listdir(str(tmp_path))
  records = [json.loads(line) for line in open(logs[0])]
  assert records
  for record in records:
    assert set(training.LOG_KEYS) <= set(record)
    assert 0.0 <= record["test_accuracy"] <= 1.0
    assert record["session"] == "tensorbow"
    assert record["replicas"] == 2 and record["batch_size"] == 8
    assert record["model"] == "lenet"
  # 256 rows / 16 a step = 16 steps: one evaluation, then the final line.
  assert records[-1]["stop_reason"] == "epochs"
  assert records[-1]["step"] == 16 and records[-1]["epoch"] == 1.0


def test_the_main_jobs_medians_count_a_miss_unless_every_seed_reached():
  def result(wall, reached=True):
    return {"wall_time": wall, "epochs": wall / 10, "test_accuracy": 0.9,
            "images_per_sec": 1000.0 / wall, "final_replicas": 1,
            "stop_reason": "target_accuracy" if reached else "epochs",
            "log_path": f"seed_{wall}.jsonl"}

  summary = demo.medians([result(10.0), result(40.0), result(12.0)])
  assert summary["wall_time"] == 12.0  # the median, not the mean (20.67)
  assert summary["epochs"] == 1.2
  assert summary["images_per_sec"] == pytest.approx(1000.0 / 12.0)
  assert summary["stop_reason"] == "target_accuracy"
  assert summary["log_path"] == "seed_10.0.jsonl"  # the first seed's
  missed = demo.medians([result(10.0), result(11.0, reached=False),
                         result(12.0)])
  assert missed["wall_time"] == 11.0
  assert missed["stop_reason"] == "not every seed reached the target"


def test_the_main_jobs_fixed_runs_split_tensorflows_32_rows():
  runs = dict(demo.fixed_runs([1, 2, 4]))
  assert [(r["replicas"], r["batch_size"]) for r in runs.values()] == [
      (1, 32), (2, 16), (4, 8)]
  assert {(r["session"], r["algorithm"], r["learning_rate"])
          for r in runs.values()} == {("tensorbow", "sma", 0.005)}
  reached = {"wall_time": 100.0, "stop_reason": "target_accuracy",
             "epochs": 3.0}
  slower = dict(reached, wall_time=119.0)
  with pytest.raises(ValueError, match="divide"):
    demo.fixed_runs([2, 3])
  said = demo.verdict("L = 2", slower, reached, 0.9, first="L = 1")
  assert said == "L = 2: 1.19x L = 1's time to 0.9: L = 1 wins, 1.19x as fast"
  assert demo.verdict("L = 2", reached, slower, 0.9, first="L = 1") == (
      "L = 2: 0.84x L = 1's time to 0.9: L = 2 wins, 1.19x as fast")


def _where(config, dataset):
  """A stand-in for the demo's training, run by `demo.train_alone`: what
  process it ran in and what reached it."""
  if config.seed < 0:
    raise ValueError(f"seed {config.seed}")
  return {"pid": os.getpid(), "config": config,
          "labels": dataset.train_labels.tolist()}


def test_the_main_job_trains_each_run_in_a_process_of_its_own():
  config = training.Config(session="tf", batch_size=8, seed=3)
  dataset = tb_data.load_dataset("synthetic", train_size=16, test_size=8)
  first = demo.train_alone(config, dataset, train=_where)
  second = demo.train_alone(config, dataset, train=_where)
  assert first["pid"] != os.getpid()
  assert second["pid"] not in (first["pid"], os.getpid())
  assert first["config"] == config
  assert first["labels"] == dataset.train_labels.tolist()
  with pytest.raises(ValueError, match="seed -1"):
    demo.train_alone(config._replace(seed=-1), dataset, train=_where)


def test_the_main_jobs_own_process_trains_lenet_as_in_process(tmp_path):
  dataset = tb_data.load_dataset("synthetic", image_shape=(28, 28, 1),
                                 train_size=64, test_size=32)
  config = training.Config(session="tf", batch_size=32, epochs=1,
                           evals_per_epoch=1, log_dir=str(tmp_path))
  alone = demo.train_alone(config, dataset)
  here = training.run(lenet.build, lenet.MODEL_NAME,
                      lenet.SYNTHETIC_IMAGE_SHAPE, config, dataset)
  assert (alone["steps"], alone["images_seen"], alone["stop_reason"]) == (
      here["steps"], here["images_seen"], here["stop_reason"]) == (
          2, 64, "epochs")
  assert alone["log_path"] != here["log_path"]
  assert os.path.exists(alone["log_path"])


def test_the_main_job_prints_each_seeds_figures(capsys):
  def result(wall, epochs):
    return {"wall_time": wall, "epochs": epochs, "images_per_sec": 1900.4,
            "test_accuracy": 0.90124}

  demo.print_seeds({"TensorFlow": [result(167.24, 3.74), result(152.3, 3.6)],
                    "auto": [result(164.2, 3.74), result(146.56, 3.49)]})
  assert capsys.readouterr().out.splitlines() == [
      "", "seed by seed (0, 1, ...): wall s; epochs; images/s; accuracy",
      "TensorFlow: 167.2 152.3; 3.74 3.60; 1900 1900; 0.9012 0.9012",
      "auto: 164.2 146.6; 3.74 3.49; 1900 1900; 0.9012 0.9012"]
