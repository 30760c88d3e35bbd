"""Plots test accuracy from TensorBow / TensorFlow training logs.

    python -m models.plot LOG... -o FILE.png [--title T]

Each LOG is a JSON-lines training log as the training scripts write it: one
JSON object per line with at least "epoch", "wall_time" (seconds since the
start) and "test_accuracy" (null on lines without an evaluation), and
usually "session" ("tf" or "tensorbow"), "replicas", "batch_size",
"algorithm" and "model", which name the line in the legend. The figure has
two panels, test accuracy against wall time and against epoch, one line per
log; it is drawn with Matplotlib's Agg backend, so no display is needed.
"""
import argparse
import collections
import json
import os
import sys

# One plotted line: the points of a log that have a test accuracy.
Series = collections.namedtuple("Series", ["wall_time", "epoch",
                                           "test_accuracy"])

_REQUIRED = ("epoch", "wall_time", "test_accuracy")


class LogError(ValueError):
  """A training log that cannot be plotted; the message names the file."""


def read_log(path):
  """Reads one JSON-lines training log.

  Args:
    path: the log's file name.

  Returns:
    (records, series): every line's object (blank lines left out), and the
    `Series` of the lines whose "test_accuracy" is not null.

  Raises:
    FileNotFoundError: `path` does not exist.
    LogError: a line is not a JSON object, lacks "epoch", "wall_time" or
      "test_accuracy", has one that is not a number, or no line has a
      test accuracy.
  """
  if not os.path.isfile(path):
    raise FileNotFoundError(f"no such log file: {path}")
  records = []
  series = Series([], [], [])
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        record = json.loads(line)
      except json.JSONDecodeError as e:
        raise LogError(f"{path}:{number}: not JSON ({e.msg})") from None
      if not isinstance(record, dict):
        raise LogError(f"{path}:{number}: expected a JSON object, got "
                       f"{type(record).__name__}")
      missing = [k for k in _REQUIRED if k not in record]
      if missing:
        raise LogError(f"{path}:{number}: missing key(s) "
                       f"{', '.join(missing)}")
      records.append(record)
      if record["test_accuracy"] is None:
        continue
      try:
        point = (float(record["wall_time"]), float(record["epoch"]),
                 float(record["test_accuracy"]))
      except (TypeError, ValueError):
        raise LogError(f"{path}:{number}: wall_time, epoch and test_accuracy "
                       "must be numbers") from None
      series.wall_time.append(point[0])
      series.epoch.append(record["epoch"])
      series.test_accuracy.append(point[2])
  if not series.test_accuracy:
    raise LogError(f"{path}: no line with a test_accuracy to plot "
                   f"({len(records)} line(s) read)")
  return records, series


def label(records, path):
  """The legend label of a log, from its own fields.

  Args:
    records: the log's line objects (the first one with the fields is used).
    path: the log's file name, the fallback label.

  Returns:
    "tensorbow L=<replicas> b=<batch_size> <algorithm>" for a TensorBow run,
    "tf b=<batch_size>" for a TensorFlow one, else the file's base name.
  """
  for record in records:
    session = record.get("session")
    batch = record.get("batch_size")
    if session == "tf" and batch is not None:
      return f"tf b={batch}"
    if (session == "tensorbow" and batch is not None and
        record.get("replicas") is not None and record.get("algorithm")):
      return (f"tensorbow L={record['replicas']} b={batch} "
              f"{record['algorithm']}")
  return os.path.basename(path)


def plot_logs(paths, output, title=None):
  """Draws test accuracy against wall time and epoch, one line per log.

  Args:
    paths: the JSON-lines logs.
    output: the image file to write (its extension picks the format).
    title: the figure's title; None means the logs' model name when they
      share one.

  Returns:
    An ordered dict from legend label to the `Series` plotted for that log.
    Labels are unique: a repeated one gets the log's file name appended.

  Raises:
    FileNotFoundError: a log does not exist.
    LogError: a log has a malformed line or nothing to plot.
    ValueError: `paths` is empty.
  """
  # pylint: disable=g-import-not-at-top
  from matplotlib import figure
  from matplotlib import ticker
  from matplotlib.backends import backend_agg

  if not paths:
    raise ValueError("plot_logs needs at least one log")
  plotted = collections.OrderedDict()
  models = set()
  for path in paths:
    records, series = read_log(path)
    name = base = label(records, path)
    if name in plotted:
      name = f"{base} ({os.path.basename(path)})"
    n = 2
    while name in plotted:
      name, n = f"{base} ({os.path.basename(path)} #{n})", n + 1
    plotted[name] = series
    models.update(str(r["model"]) for r in records if r.get("model"))
  if title is None and len(models) == 1:
    title = models.pop()

  fig = figure.Figure(figsize=(11, 4.2))
  backend_agg.FigureCanvasAgg(fig)
  by_time, by_epoch = fig.subplots(1, 2, sharey=True)
  for name, series in plotted.items():
    by_time.plot(series.wall_time, series.test_accuracy, marker="o",
                 markersize=3, label=name)
    by_epoch.plot(series.epoch, series.test_accuracy, marker="o",
                  markersize=3, label=name)
  by_time.set_xlabel("wall time (s)")
  by_epoch.set_xlabel("epoch")
  by_epoch.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  by_time.set_ylabel("test accuracy")
  for axes in (by_time, by_epoch):
    axes.grid(True, alpha=0.3)
  by_epoch.legend(loc="lower right", fontsize="small")
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(output, dpi=100)
  return plotted


def main(argv=None):
  """Runs the `python -m models.plot` command line.

  Args:
    argv: the arguments after the program name; None means `sys.argv[1:]`.

  Returns:
    0 when the figure is written.

  Raises:
    SystemExit: status 2 on a bad argument or a log that is missing,
      malformed or has nothing to plot (the message names the file).
  """
  parser = argparse.ArgumentParser(
      prog="python -m models.plot",
      description="Plot test accuracy against wall time and against epoch "
      "from JSON-lines training logs, one line per log.")
  parser.add_argument("logs", nargs="+", metavar="LOG",
                      help="JSON-lines training log")
  parser.add_argument("-o", "--output", required=True, metavar="FILE.png",
                      help="image file to write")
  parser.add_argument("--title", default=None,
                      help="figure title (default: the logs' model)")
  args = parser.parse_args(argv)
  try:
    plotted = plot_logs(args.logs, args.output, args.title)
  except (OSError, LogError) as e:
    parser.exit(2, f"{parser.prog}: error: {e}\n")
  print(f"wrote {args.output}: {', '.join(plotted)}", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
