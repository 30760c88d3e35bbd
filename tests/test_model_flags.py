"""The model scripts' command line (models/flags.py): every algorithm the
session takes and replicas="auto" parse into the `Config` whose session
trains with them; a value out of range is an argparse error naming it."""
import importlib
import pkgutil

import pytest
import tensorflow as tf

import tensorbow as tb
from models import config as run_config
from models import flags
from tensorbow import options as tb_options


def session_of(config):
  """The session `config` makes (models.config.build_session), on a graph
  of one variable."""
  graph = tf.Graph()
  with graph.as_default():
    tf.compat.v1.get_variable("w", [2])
  return run_config.build_session(config.session, config.replicas,
                                  config.algorithm, graph)


def _algorithms_defined():
  """The names of the algorithms tensorbow/algorithms/ defines: each
  named `Algorithm` subclass, in the module that defines it."""
  names = set()
  for info in pkgutil.iter_modules(tb.algorithms.__path__):
    module = importlib.import_module(f"tensorbow.algorithms.{info.name}")
    names.update(
        value.name for value in vars(module).values()
        if isinstance(value, type) and
        issubclass(value, tb.algorithms.Algorithm) and
        value.__module__ == module.__name__ and value.name)
  return names


def test_the_cli_takes_every_algorithm_the_session_takes():
  # Every algorithm defined is registered (algorithms.by_name), so a new
  # one is its module, its registry line and its test.
  assert run_config.ALGORITHMS == tb_options.ALGORITHMS
  assert set(run_config.ALGORITHMS) == _algorithms_defined()
  assert {"sma", "easgd", "asgd", "ssgd", "adaptive", "local_sgd",
          "none"} <= _algorithms_defined()


@pytest.mark.parametrize("name", tb_options.ALGORITHMS)
def test_each_algorithm_reaches_the_session(name):
  config = flags.parse(["--algorithm", name, "--replicas", "3"])
  assert config.algorithm == name and config.replicas == 3
  with session_of(config) as sess:
    assert isinstance(sess, tb.TensorBowSession)
    assert sess.settings.algorithm.name == name
    assert sess.replicas == 3


def test_replicas_auto_reaches_the_session():
  config = flags.parse(["--replicas=auto", "--batch_size=16"])
  assert config.replicas == "auto"
  # A step feeds batch_size rows in all, shared by the replicas.
  assert run_config.rows_per_step(config.session, config.replicas,
                                  config.batch_size) == 16
  with session_of(config) as sess:
    assert sess.replicas == 1  # where the tuner starts
    assert sess.tuning_decisions() == []
    assert sess.settings.algorithm.name == "sma"


def test_the_tf_session_ignores_the_tensorbow_flags():
  config = flags.parse(["--session", "tf", "--replicas", "4",
                        "--algorithm", "ssgd"])
  with session_of(config) as sess:
    assert type(sess) is tf.compat.v1.Session
  assert run_config.rows_per_step("tf", 4, config.batch_size) == 32


def test_every_flag_sets_its_field():
  argv = ["--session=tf", "--replicas=5", "--algorithm=easgd",
          "--batch_size=7", "--learning_rate=0.5", "--epochs=3",
          "--max_steps=9", "--target_accuracy=0.75", "--data=mnist",
          "--data_dir=/d", "--log_dir=/l", "--seed=4", "--train_size=100",
          "--test_size=50", "--evals_per_epoch=2", "--max_seconds=1.5"]
  assert flags.parse(argv) == run_config.Config(
      session="tf", replicas=5, algorithm="easgd", batch_size=7,
      learning_rate=0.5, epochs=3, max_steps=9, target_accuracy=0.75,
      data="mnist", data_dir="/d", log_dir="/l", seed=4, train_size=100,
      test_size=50, evals_per_epoch=2, max_seconds=1.5)


def test_a_scripts_defaults_override_the_configs():
  config = flags.parse([], learning_rate=0.1, data="cifar10")
  assert config == run_config.Config(learning_rate=0.1, data="cifar10")
  assert flags.parse(["--data=synthetic"], data="cifar10").data == "synthetic"
  with pytest.raises(ValueError, match=r"no such flags: \['learning_rat'\]"):
    flags.parse([], learning_rat=0.1)


@pytest.mark.parametrize("argv, message", [
    (["--replicas", "0"],
     "argument --replicas: replicas must be an int >= 1 or 'auto', got 0"),
    (["--replicas", "two"],
     "argument --replicas: replicas must be an int >= 1 or 'auto', got "
     "'two'"),
    (["--replicas", "Auto"], "got 'Auto'"),
    (["--algorithm", "sgd"],
     "argument --algorithm: invalid choice: 'sgd' (choose from " +
     ", ".join(repr(n) for n in tb_options.ALGORITHMS) + ")"),
    (["--algorithm", "independent"], "invalid choice: 'independent'"),
    (["--session", "torch"], "argument --session: invalid choice: 'torch'"),
    (["--batch_size", "0"],
     "argument --batch_size: must be an int >= 1, got '0'"),
    (["--epochs", "-1"], "argument --epochs: must be an int >= 0, got '-1'"),
    (["--target_accuracy", "1.5"],
     "argument --target_accuracy: must be in [0, 1], got '1.5'"),
    (["--max_seconds", "nan"],
     "argument --max_seconds: must be a number >= 0.0, got 'nan'"),
    (["lenet"], "unrecognized arguments: lenet"),
])
def test_a_bad_value_is_an_argparse_error(capsys, argv, message):
  with pytest.raises(SystemExit) as exit_info:
    flags.parse(argv, prog="python -m models.lenet")
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert "usage: python -m models.lenet" in err
  assert message in err, err


def test_help_lists_every_algorithm_and_auto(capsys):
  with pytest.raises(SystemExit) as exit_info:
    flags.parse(["--help"], prog="python -m models.mlp",
                description="The MLP.", batch_size=16)
  assert exit_info.value.code == 0
  out = " ".join(capsys.readouterr().out.split())
  assert "{" + ",".join(tb_options.ALGORITHMS) + "}" in out
  assert "--replicas {L,auto}" in out
  assert "The MLP." in out
  assert "batch_size * replicas rows (default: 16)" in out
