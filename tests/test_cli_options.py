"""The session options of `tensorbow-run` (tensorbow/cli/options.py): one
`SessionOptions` with every `TensorBowSession` option, a flag for each,
and the worker's command line that parses back to the same object."""
import inspect
import os
import re
import textwrap

import pytest
import tensorflow as tf

import tensorbow
from tensorbow import options as tb_options
from tensorbow.cli import main
from tensorbow.cli import options as cli_options

# TensorBowSession's parameters that are not the command's to set: the
# script gives them to each session it makes.
NOT_FLAGS = {
    "self",
    "target",  # a remote master: the stand-in keeps TensorFlow's session
    "graph",  # the script's graph
    "config",  # the script's ConfigProto
}
SESSION_PARAMETERS = {
    name: p for name, p in inspect.signature(
        tensorbow.TensorBowSession.__init__).parameters.items()
    if name not in NOT_FLAGS}
# Every option away from its default: these, and each option after them,
# whose flag is made from its row, by its type (_away).
_AWAY = dict(
    replicas=4, algorithm="ssgd", alpha=0.3, central_momentum=0.5,
    nonfinite="raise", cluster_timeout=5.0, heartbeat_timeout=2.5,
    devices=("/cpu:0", "/cpu:1"), prefetch=False,
    # Written at a first training run, which these tests do not make.
    timeline="/nowhere/timeline.json", logdir="/nowhere/logs",
    progress=30.0, min_workers=2, membership_log="/nowhere/m.json",
    join=("127.0.0.1:2001", "127.0.0.1:2002"), max_workers=3,
    elastic_timeout=30.0)


def _away(option):
  """A value of `option`'s type other than its default."""
  kind = (type(option.default) if option.default is not None else
          option.kind or str)
  if kind is bool:
    return not option.default
  return kind((option.default or kind()) + kind("1"))


EVERY_OPTION = cli_options.SessionOptions(**{
    o.name: _AWAY[o.name] if o.name in _AWAY else _away(o)
    for o in tb_options.OPTIONS})


def _parse(argv):
  return cli_options.from_args(main.parser().parse_args(argv + ["s.py"]))


def test_the_options_are_the_sessions_with_its_defaults():
  assert list(cli_options.SessionOptions._fields) == list(SESSION_PARAMETERS)
  defaults = cli_options.SessionOptions()
  for name, parameter in SESSION_PARAMETERS.items():
    assert getattr(defaults, name) == parameter.default, name
  assert _parse([]) == defaults
  assert defaults.session_kwargs() == {
      name: p.default for name, p in SESSION_PARAMETERS.items()}


def _session_init(self, target="", graph=None, config=None, **options):
  """What `TensorBowSession.__init__` takes, its options aside."""


def test_the_table_the_options_and_the_flags_agree():
  """`OPTIONS` is the one declaration: the session's signature, the
  options' defaults and the command's are its."""
  table = [(o.name, repr(o.default)) for o in tb_options.OPTIONS]
  assert cli_options.SessionOptions is tb_options.SessionOptions
  assert [(name, repr(value)) for name, value in
          cli_options.SessionOptions()._asdict().items()] == table
  parsed = main.parser().parse_args(["s.py"])
  assert [(name, repr(getattr(parsed, name))) for name, _ in table] == table
  assert tb_options.session_signature(_session_init) == inspect.signature(
      tensorbow.TensorBowSession.__init__)
  assert [(p.name, p.kind, repr(p.default)) for p in
          tb_options.session_signature().parameters.values()] == [
              (name, inspect.Parameter.KEYWORD_ONLY, default)
              for name, default in table]


def test_the_sessions_docstring_points_to_the_table():
  """The options' meanings are the table's, in `SessionOptions`' docstring:
  the session's names them as `OPTIONS`' rows, each explained once."""
  doc = inspect.cleandoc(tensorbow.TensorBowSession.__doc__)
  args = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
  assert "**options: keyword only, the options of `tensorbow.options." \
      "OPTIONS`" in " ".join(args.split())
  listed = textwrap.dedent(tb_options.SessionOptions.__doc__.split(
      "\n  Options:\n", 1)[1]).strip()
  assert listed == tb_options.describe()
  for option in tb_options.OPTIONS:
    assert f"\n{option.name}={option.default!r}: " in "\n" + listed
    assert " ".join(option.meaning.split()) in " ".join(listed.split())


def _help_entries(text):
  """{first flag: its help on one line} of an argparse help `text`."""
  entries, flag = {}, None
  for line in text.splitlines():
    if line.startswith("  -"):
      flag = line.split()[0].rstrip(",")
      entries[flag] = line
    elif flag is not None and line.startswith("   "):
      entries[flag] += line
    else:
      flag = None
  return {flag: " ".join(line.split()) for flag, line in entries.items()}


def test_help_shows_the_sessions_defaults(capsys):
  with pytest.raises(SystemExit):
    main.main(["--help"])
  entries = _help_entries(capsys.readouterr().out)
  for option in tb_options.OPTIONS:
    if option.default is None:
      continue  # what no value means is said in words
    [flag] = {f"--{option.name}", "--" + option.name.replace("_", "-")} & (
        set(entries))
    if isinstance(option.default, bool):
      shown = ("--" if option.default else "--no-") + flag[2:]
    elif isinstance(option.default, float):
      shown = f"{option.default:g}"  # 60.0 as 60
    else:
      shown = str(option.default)
    assert f"(default: {shown}" in entries[flag], entries[flag]


def test_an_unknown_option_is_named_as_python_names_it():
  with pytest.raises(TypeError, match=r"^TensorBowSession\(\) got an "
                     r"unexpected keyword argument 'replica'$"):
    tb_options.SessionOptions(replica=2)
  with pytest.raises(TypeError, match=r"^TensorBowSession\(\) got an "
                     r"unexpected keyword argument 'replica'$"):
    tb_options.check_session_options(replica=2)
  with pytest.raises(TypeError, match=r"^check_options\(\) got an "
                     r"unexpected keyword argument 'replica'$"):
    tb_options.check_options(replica=2)


def test_help_lists_a_flag_for_every_session_option(capsys):
  """A new TensorBowSession option without a flag fails here."""
  with pytest.raises(SystemExit) as exit_info:
    main.main(["--help"])
  assert exit_info.value.code == 0
  text = capsys.readouterr().out
  missing = [
      name for name in SESSION_PARAMETERS
      if not any(re.search(rf"(?<![\w-])--{flag}(?![\w-])", text)
                 for flag in (name, name.replace("_", "-")))]
  assert not missing, text
  for flag in ("--devices", "--prefetch", "--no-prefetch",
               "--cluster-timeout", "--heartbeat-timeout", "--timeline",
               "--logdir", "--progress"):
    assert flag in text


def test_every_option_parses_back_from_its_flags():
  changed = [f for f in cli_options.SessionOptions._fields
             if getattr(EVERY_OPTION, f) == getattr(
                 cli_options.SessionOptions(), f)]
  assert not changed  # so that each flag is written and read back
  assert _parse(cli_options.argv(EVERY_OPTION)) == EVERY_OPTION
  assert cli_options.argv(EVERY_OPTION) == [
      "--replicas", "4", "--algorithm", "ssgd", "--alpha", "0.3",
      "--central_momentum", "0.5", "--nonfinite", "raise",
      "--cluster-timeout", "5.0", "--heartbeat-timeout", "2.5",
      "--min-workers", "2", "--membership-log", "/nowhere/m.json",
      "--max-workers", "3", "--elastic-timeout", "30.0",
      "--join", "127.0.0.1:2001,127.0.0.1:2002",
      "--devices", "/cpu:0,/cpu:1", "--no-prefetch",
      "--timeline", "/nowhere/timeline.json", "--logdir", "/nowhere/logs",
      "--progress", "30.0"] + [
          text for o in tb_options.OPTIONS if o.name not in _AWAY
          for text in cli_options.flag_argv(o.name, getattr(EVERY_OPTION,
                                                            o.name))]
  for options in (cli_options.SessionOptions(),
                  cli_options.SessionOptions(replicas="auto", alpha=0.1),
                  cli_options.SessionOptions(alpha=1.0 / 3.0,
                                             cluster_timeout=0.1)):
    assert _parse(cli_options.argv(options)) == options


def test_a_workers_command_parses_back_to_the_same_options():
  command = main.worker_command(EVERY_OPTION, "train.py",
                                ["--data", "x.npz", "--replicas", "9"])
  assert command[1:3] == ["-m", "tensorbow.run"]
  args = main.parser().parse_args(command[3:])
  assert cli_options.from_args(args) == EVERY_OPTION
  # The script's own arguments stay the script's.
  assert args.script == "train.py"
  assert args.script_args == ["--data", "x.npz", "--replicas", "9"]
  assert args.workers == 1 and args.hosts is None


@pytest.mark.parametrize("argv,options", [
    (["--devices", "/cpu:0, /device:CPU:1"],
     dict(devices=("/cpu:0", "/device:CPU:1"))),
    (["--devices", "/gpu:0"], dict(devices=("/gpu:0",))),
    (["--devices", "3"], dict(devices=("/cpu:0", "/cpu:1", "/cpu:2"))),
    (["--no-prefetch"], dict(prefetch=False)),
    (["--no-prefetch", "--prefetch"], dict(prefetch=True)),
    (["--cluster-timeout", "90"], dict(cluster_timeout=90.0)),
    (["--cluster-timeout", "0.5"], dict(cluster_timeout=0.5)),
    (["--heartbeat-timeout", "1"], dict(heartbeat_timeout=1.0)),
    (["--heartbeat-timeout", "30"], dict(heartbeat_timeout=30.0)),
    (["--timeline", "t.json"], dict(timeline=os.path.abspath("t.json"))),
    (["--logdir", "/l"], dict(logdir="/l")),
    (["--progress", "5"], dict(progress=5.0)),
    (["--min-workers", "3"], dict(min_workers=3)),
    (["--membership-log", "m.json"],
     dict(membership_log=os.path.abspath("m.json"))),
])
def test_the_new_flags_reach_the_options(argv, options):
  assert _parse(argv) == cli_options.SessionOptions(**options)


@pytest.mark.parametrize("argv,message", [
    (["--devices", ""], "--devices: must be a count of CPUs or a "
     "comma-separated list of device names such as /cpu:0,/cpu:1, got ''"),
    (["--devices", "/cpu:0,,/cpu:1"], "--devices: must be a count of CPUs or "
     "a comma-separated list of device names such as /cpu:0,/cpu:1, got "
     "'/cpu:0,,/cpu:1'"),
    (["--devices", "/cpu:0,cpu0"], "--devices: must be a count of CPUs or a "
     "comma-separated list of device names such as /cpu:0,/cpu:1; 'cpu0' is "
     "not a device name"),
    (["--devices", "0"], "--devices: must be a count >= 1 or names, got 0"),
    (["--devices", "/cpu:0,/cpu:1,/cpu:0"],
     "--devices: names /cpu:0 twice in '/cpu:0,/cpu:1,/cpu:0'"),
    (["--cluster-timeout", "0"],
     "--cluster-timeout: must be a number of seconds > 0, got 0"),
    (["--cluster-timeout", "-5"],
     "--cluster-timeout: must be a number of seconds > 0, got -5"),
    (["--cluster-timeout", "soon"],
     "--cluster-timeout: must be a number of seconds > 0, got soon"),
    (["--cluster-timeout", "nan"],
     "--cluster-timeout: must be a number of seconds > 0, got nan"),
    (["--cluster-timeout", "inf"],
     "--cluster-timeout: must be a number of seconds > 0, got inf"),
    (["--heartbeat-timeout", "0.5"],
     "--heartbeat-timeout: must be a number of seconds >= 1, got 0.5"),
    (["--heartbeat-timeout", "inf"],
     "--heartbeat-timeout: must be a number of seconds >= 1, got inf"),
    (["--timeline", ""], "--timeline: must be a path, got ''"),
    (["--min-workers", "0"], "--min-workers: must be an int >= 1, got 0"),
    (["--min-workers", "two"], "--min-workers: must be an int >= 1, got two"),
    (["--progress", "0"], "--progress: must be a number of seconds > 0, got "
     "0"),
    (["--prefetch=no"],
     "--prefetch/--no-prefetch: ignored explicit argument 'no'"),
])
def test_bad_values_of_the_new_flags_exit_2(capsys, argv, message):
  with pytest.raises(SystemExit) as exit_info:
    main.main(argv + ["x.py"])
  assert exit_info.value.code == 2
  assert f"tensorbow-run: error: argument {message}" in (
      capsys.readouterr().err)


def test_check_refuses_what_the_session_would():
  cli_options.SessionOptions(replicas=2, devices=("/cpu:0", "/cpu:1")).check()
  with pytest.raises(ValueError, match="2 devices need at least as many "
                     "replicas, got replicas=1"):
    cli_options.SessionOptions(replicas=1,
                               devices=("/cpu:0", "/cpu:1")).check()
  with pytest.raises(ValueError, match="algorithm 'asgd' cannot keep the "
                     "workers of a cluster together"):
    cli_options.SessionOptions(algorithm="asgd").check(workers=2)


@pytest.mark.parametrize("devices, asked, given", [
    (None, None, None), (("/cpu:0",), None, None),
    (("/cpu:0", "/cpu:1"), None, 2), (("/cpu:0", "/cpu:2"), 1, 3),
    (("/cpu:0", "/cpu:1"), 4, 4), (("/gpu:0",), None, None),
])
def test_a_session_gets_the_cpus_devices_names(devices, asked, given):
  config = (None if asked is None else
            tf.compat.v1.ConfigProto(device_count={"CPU": asked},
                                     log_device_placement=True))
  made = cli_options.SessionOptions(devices=devices).session_config(config)
  if given is None or given == asked:
    assert made is config  # left as the script gave it
  else:
    assert made.device_count["CPU"] == given
    assert made.log_device_placement == (config is not None)
    assert config is None or config.device_count["CPU"] == asked
