"""A new session option is one row of `tensorbow.options.OPTIONS`: the
`tensorbow-run` flag that sets it (cli/options.py) and its meaning in
`SessionOptions`' docstring (which `TensorBowSession`'s points to) are
made from the row, with nothing to add anywhere else.

The proof: tensorbow/options.py's own source with plain rows added to
`OPTIONS`, and nothing else changed, run as the options module the
command line reads."""
import inspect
import re
import types

import pytest

import tensorbow
from tensorbow import options as tb_options
from tensorbow.cli import main
from tensorbow.cli import options as cli_options

# Options no other file names: a --flag/--no-flag pair, a float, an int
# whose default (None) does not tell its type, and text. Their meanings
# hold what str.format and argparse would read as fields.
ROWS = '''
    Option("extra", False, "whether to add extras", None),
    Option("extra_rate", 0.5, "how much extra, as a share (50%) of the "
           "{rate}", None),
    Option("extra_limit", None, "at most this many extras (None: any)", None,
           int),
    Option("extra_name", "bar", "what to call the extras", None),
'''


def _options_with(rows):
  """A module that is tensorbow/options.py with `rows` (source text)
  added at the end of `OPTIONS`."""
  source = inspect.getsource(tb_options)
  head, table = source.split("\nOPTIONS = (\n", 1)
  table, tail = table.split("\n)\n", 1)
  module = types.ModuleType(tb_options.__name__)
  module.__file__ = tb_options.__file__
  exec(compile(f"{head}\nOPTIONS = (\n{table}{rows})\n{tail}",
               tb_options.__file__, "exec"), module.__dict__)
  return module


@pytest.fixture
def edited(monkeypatch):
  """The options module with `ROWS` added, read by the command line."""
  module = _options_with(ROWS)
  assert [o.name for o in module.OPTIONS[-4:]] == [
      "extra", "extra_rate", "extra_limit", "extra_name"]
  monkeypatch.setattr(cli_options, "tb_options", module)
  return module


def _parse(argv):
  return cli_options.from_args(main.parser().parse_args(argv + ["s.py"]))


def test_a_plain_row_needs_no_flag_of_its_own():
  special = [f.field for f in cli_options._SPECIAL]
  assert set(special) <= {o.name for o in tb_options.OPTIONS}
  assert len(set(special)) == len(special)


def test_a_new_row_gets_its_flag_with_its_default(edited):
  parsed = _parse([])
  assert parsed == edited.SessionOptions()
  assert (parsed.extra, parsed.extra_rate, parsed.extra_limit,
          parsed.extra_name) == (False, 0.5, None, "bar")
  assert _parse(["--extra", "--extra-rate", "0.25", "--extra-limit", "3",
                 "--extra-name", "baz"]) == edited.SessionOptions(
                     extra=True, extra_rate=0.25, extra_limit=3,
                     extra_name="baz")
  assert _parse(["--extra", "--no-extra"]).extra is False


def test_a_new_rows_flag_writes_back_what_it_reads(edited):
  chosen = edited.SessionOptions(replicas=3, extra=True, extra_rate=1 / 3,
                                 extra_limit=7, extra_name="baz")
  assert cli_options.argv(chosen)[-7:] == [
      "--extra", "--extra-rate", repr(1 / 3), "--extra-limit", "7",
      "--extra-name", "baz"]
  assert _parse(cli_options.argv(chosen)) == chosen
  assert cli_options.flag_argv("extra", False) == ["--no-extra"]
  assert cli_options.flag_argv("extra_limit", None) == []
  command = main.worker_command(chosen, "train.py", ["--extra"])
  args = main.parser().parse_args(command[3:])
  assert cli_options.from_args(args) == chosen
  assert args.script_args == ["--extra"]  # the script's own


def test_a_new_rows_flag_is_helped_with_its_meaning(edited, capsys):
  with pytest.raises(SystemExit):
    main.main(["--help"])
  text = " ".join(capsys.readouterr().out.split())
  for entry in (
      "--extra, --no-extra whether to add extras (default: --no-extra)",
      "--extra-rate EXTRA_RATE how much extra, as a share (50%) of the "
      "{rate} (default: 0.5)",
      "--extra-limit EXTRA_LIMIT at most this many extras (None: any) ",
      "--extra-name EXTRA_NAME what to call the extras (default: bar)"):
    assert entry in text


@pytest.mark.parametrize("argv,message", [
    (["--extra-rate", "half"], "--extra-rate: must be a number, got half"),
    (["--extra-limit", "2.5"], "--extra-limit: must be an int, got 2.5"),
    (["--extra=yes"], "--extra/--no-extra: ignored explicit argument 'yes'"),
])
def test_a_new_rows_flag_refuses_another_type(edited, capsys, argv,
                                              message):
  with pytest.raises(SystemExit) as exit_info:
    main.main(argv + ["x.py"])
  assert exit_info.value.code == 2
  assert f"tensorbow-run: error: argument {message}" in (
      capsys.readouterr().err)


def test_a_new_rows_meaning_is_in_the_docstring(edited):
  doc = edited.SessionOptions.__doc__
  assert "\n    extra=False: whether to add extras.\n" in doc
  assert ("\n    extra_limit=None: at most this many extras (None: any)."
          "\n") in doc
  assert "`tensorbow.options.OPTIONS`" in tensorbow.TensorBowSession.__doc__
  assert "help(tensorbow.options.SessionOptions)" in " ".join(
      tensorbow.TensorBowSession.__doc__.split())


def test_a_row_of_another_type_asks_for_a_flag_of_its_own(monkeypatch):
  module = _options_with(
      '    Option("extra_sizes", (1, 2), "the sizes of the extras", None),\n')
  monkeypatch.setattr(cli_options, "tb_options", module)
  with pytest.raises(TypeError, match=re.escape(
      "option 'extra_sizes' is a tuple, but a flag made from its row reads "
      "bool, int, float, str: give its flag a row in cli/options.py's "
      "_SPECIAL")):
    main.parser()
