"""A suite's result as a Markdown table and a PNG plot."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top


def _fmt(value, digits=2):
  return "-" if value is None else f"{value:.{digits}f}"


def _percent(fraction):
  return "-" if fraction is None else f"{100 * fraction:.1f} %"


def markdown(suite, result):
  """The result's table(s) in Markdown."""
  lines = []
  if suite == "replicas":
    lines += ["| model | batch | session | L | algorithm | img/s (min-max) "
              "| vs TF |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
      lines.append(
          f"| {r['model']} | {r['batch_size']} | {r['session']} | "
          f"{r['replicas']} | {r['algorithm'] or '-'} | {r['median']:.0f} "
          f"({r['min']:.0f}-{r['max']:.0f}) | {r['vs_tf']:.2f} |")
    lines += ["", "| model | batch | L | sma vs TF | none vs TF | SMA cost "
              "(1 - sma/none) | paired SMA cost (95 % interval) |",
              "|---|---|---|---|---|---|---|"]
    for d in result["derived"]:
      paired = _percent(d.get("sma_cost_paired"))
      if d.get("sma_cost_interval"):
        paired += " ({} to {})".format(*map(_percent,
                                            d["sma_cost_interval"]))
      lines.append(
          f"| {d['model']} | {d['batch_size']} | {d['replicas']} | "
          f"{_fmt(d['sma_vs_tf'])} | {_fmt(d['none_vs_tf'])} | "
          f"{_percent(d['sma_cost'])} | {paired} |")
  elif suite == "auto":
    lines += ["| model | rows per run | session | L | img/s (min-max) | "
              "vs TF |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
      replicas = r["replicas"] if r["session"] == "tensorbow" else "-"
      if replicas == "auto":
        replicas = (f"auto (chose {r['chosen_replicas']} on "
                    f"{r['chosen_stream_groups']} stream groups"
                    f"{', inline' if r.get('chosen_inline') else ''})")
      lines.append(
          f"| {r['model']} | {r['rows_per_run']} | {r['session']} | "
          f"{replicas} | {r['median']:.0f} ({r['min']:.0f}-{r['max']:.0f}) "
          f"| {r['vs_tf']:.2f} |")
    lines += ["", "| model | rows per run | auto's L | best fixed L | auto vs "
              "best fixed L | auto vs TF | best fixed L vs TF |",
              "|---|---|---|---|---|---|---|"]
    for d in result["derived"]:
      inline = ", inline" if d.get("auto_inline") else ""
      chosen = f"{d['auto_replicas']}{inline}"
      lines.append(
          f"| {d['model']} | {d['rows_per_run']} | {chosen} | "
          f"{d['best_fixed_replicas']} | {d['auto_vs_best_fixed']:.2f} | "
          f"{d['auto_vs_tf']:.2f} | {d['best_fixed_vs_tf']:.2f} |")
  elif suite == "batch":
    lines += ["| session | L | batch per replica | img/s (min-max) | "
              "vs TF at the largest batch |", "|---|---|---|---|---|"]
    for r in result["rows"]:
      lines.append(
          f"| {r['session']} | {r['replicas']} | {r['batch_size']} | "
          f"{r['median']:.0f} ({r['min']:.0f}-{r['max']:.0f}) | "
          f"{r['vs_tf_largest_batch']:.2f} |")
  elif suite == "tta":
    lines += ["| session | L | batch | reached | test accuracy | epochs | "
              "wall time (s) |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
      lines.append(
          f"| {r['session']} | {r['replicas']} | {r['batch_size']} | "
          f"{'yes' if r['reached'] else 'no'} | {r['test_accuracy']:.4f} | "
          f"{r['epochs']:.2f} | {r['wall_time']:.1f} |")
    lines += ["", f"TensorBow best / TF best wall time: "
              f"{_fmt(result['ratio'])}"]
  elif suite == "overhead":
    lines += ["| session | L | us per task (min-max) | vs TF Session.run | "
              "C++ task median (us) | C++ task vs TF |",
              "|---|---|---|---|---|---|"]
    for r in result["rows"]:
      lines.append(
          f"| {r['session']} | {r['replicas']} | {r['median']:.1f} "
          f"({r['min']:.1f}-{r['max']:.1f}) | {r['vs_tf']:.2f} | "
          f"{_fmt(r.get('cpp_task_median_us'), 1)} | "
          f"{_fmt(r.get('cpp_task_vs_tf'))} |")
  return "\n".join(lines) + "\n"


def plot(suite, result, path):
  """Writes the result's plot to `path` (PNG)."""
  if suite == "replicas":
    keys = sorted({(r["model"], r["batch_size"]) for r in result["rows"]},
                  key=lambda k: (result["models"].index(k[0]), k[1]))
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.5),
                             squeeze=False)
    for ax, (model, batch_size) in zip(axes[0], keys):
      rows = [r for r in result["rows"]
              if (r["model"], r["batch_size"]) == (model, batch_size)]
      tf_row = rows[0]
      ax.axhline(tf_row["median"], color="gray", linestyle="--", label="TF")
      for algorithm in result["algorithms"]:
        points = [(r["replicas"], r["median"]) for r in rows
                  if r["algorithm"] == algorithm]
        ax.plot(*zip(*points), marker="o", label=f"TensorBow {algorithm}")
      ax.set_title(f"{model}, batch {batch_size}")
      ax.set_xlabel("replicas L")
      ax.set_ylabel("images/s")
      ax.legend(fontsize=7)
  elif suite == "batch":
    fig, ax = plt.subplots(figsize=(5, 3.5))
    series = {}
    for r in result["rows"]:
      label = ("TF" if r["session"] == "tf" else
               f"TensorBow L={r['replicas']}")
      series.setdefault(label, []).append((r["batch_size"], r["median"]))
    for label, points in series.items():
      ax.plot(*zip(*points), marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size per replica")
    ax.set_ylabel("images/s")
    ax.set_title(result["model"])
    ax.legend(fontsize=7)
  elif suite == "tta":
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [(f"TF b{r['batch_size']}" if r["session"] == "tf" else
               f"TB {r['replicas']}x{r['batch_size']}")
              for r in result["rows"]]
    colors = ["tab:gray" if r["session"] == "tf" else "tab:blue"
              for r in result["rows"]]
    bars = ax.bar(labels, [r["wall_time"] for r in result["rows"]],
                  color=colors)
    for bar, r in zip(bars, result["rows"]):
      if not r["reached"]:
        bar.set_hatch("//")
    ax.set_ylabel(f"seconds to {result['target']:.0%} (hatched: missed)")
    ax.tick_params(axis="x", rotation=60, labelsize=7)
  elif suite == "overhead":
    fig, ax = plt.subplots(figsize=(5, 3.5))
    labels = [("TF run" if r["session"] == "tf" else f"L={r['replicas']}")
              for r in result["rows"]]
    ax.bar(labels, [r["median"] for r in result["rows"]],
           label="per task, from Python")
    ax.plot(labels, [r.get("cpp_task_median_us", float("nan"))
                     for r in result["rows"]], "ko", label="C++ task")
    ax.set_ylabel("microseconds")
    ax.legend(fontsize=7)
  elif suite == "auto":
    models = result["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.5),
                             squeeze=False)
    for ax, model in zip(axes[0], models):
      series = {}
      for r in result["rows"]:
        if r["model"] == model and r["session"] == "tensorbow":
          label = ("auto" if r["replicas"] == "auto" else
                   f"L={r['replicas']}")
          series.setdefault(label, []).append((r["rows_per_run"],
                                               r["vs_tf"]))
      ax.axhline(1.0, color="gray", linestyle="--", label="TF")
      for label, points in series.items():
        ax.plot(*zip(*points), marker="o", label=label,
                linewidth=2.5 if label == "auto" else 1)
      ax.set_xscale("log", base=2)
      ax.set_xlabel("rows per run")
      ax.set_ylabel("images/s vs TF at the same batch")
      ax.set_title(model)
      ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
