"""`prover report`'s figure (report.png): held-out curves with their bands per arm on the iteration,
samples, tokens and time axes, the training reward last, and ES's signal share where it was recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prover_cli.comparison.arms import EVAL_RATE, GREEDY_RATE, SIGNAL_SHARE, curve, group_arms, spread_of
from prover_cli.es.signal import NOISE_BELOW, WINDOW
from prover_cli.training.metrics import training_records


def time_unit(seconds: float) -> tuple[str, float]:
    """(unit, seconds per unit) that fits a span: s below 2 minutes, min below 2 hours, else h."""
    if seconds < 120:
        return "s", 1.0
    if seconds < 2 * 3600:
        return "min", 60.0
    return "h", 3600.0


def plot_runs(runs: list[dict[str, Any]], path: Path) -> None:
    """Write `build_figure(runs)` as a PNG (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = build_figure(runs)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _training_curve(arm: dict[str, Any]) -> list[dict[str, Any]]:
    """Training reward per iteration every run of the arm reached: mean and interval over seeds."""
    per_run = [{r["iteration"]: r for r in training_records(run["records"])} for run in arm["runs"]]
    points = []
    for iteration in sorted(set.intersection(*(set(p) for p in per_run))):
        records = [p[iteration] for p in per_run]
        point = spread_of([r["reward/mean"] for r in records])
        point.update({"iteration": iteration,
                      "samples": sum(r["samples/total"] for r in records) / len(records),
                      "tokens": sum(r.get("tokens/total", 0) for r in records) / len(records),
                      "elapsed_s": sum(r["time/elapsed_s"] for r in records) / len(records)})
        points.append(point)
    return points


def _x_columns(arms: list[dict[str, Any]], unit: str, thousands: bool, tokens_thousands: bool = False) -> list[tuple[str, str, str]]:
    """(x key, x label, title word) per column: samples first (the budget the comparison is made on), then
    training completion tokens, then wall-clock time. No iterations axis: an ES iteration and a GRPO step
    are different units (their samples each are in the training diagnostic's table)."""
    return [("samples", "samples (thousands)" if thousands else "samples", "samples"),
            ("tokens", "training tokens (thousands)" if tokens_thousands else "training tokens", "tokens"),
            ("elapsed_s", f"wall-clock ({unit})", "wall-clock")]


def build_figure(runs: list[dict[str, Any]]):
    """Training reward, held-out sampled and greedy verified rate (rows; and the ES signal share), each vs
    samples, training tokens, and wall-clock time (columns).

    One curve per arm (the mean over its seeds), one color per arm in every panel and one legend for the
    figure; held-out curves with their 95% band (a bar for a single point) and the base as a star at 0.
    Every panel of a column spans the same x range, from 0 to the column's largest value, so a curve
    with only the base's point sits on the same axis as the others. Laid out by matplotlib's
    constrained layout: the title, the legend and the panel titles never overlap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    arms = group_arms(runs)
    for index, arm in enumerate(arms):
        arm["color"] = f"C{index % 10}"
    unit, per_unit = time_unit(max(run["records"][-1]["time/elapsed_s"] for run in runs))
    per_sample = 1000.0 if max(run["records"][-1]["samples/total"] for run in runs) >= 10_000 else 1.0
    per_token = 1000.0 if max(run["records"][-1].get("tokens/total", 0) for run in runs) >= 10_000 else 1.0
    scale = {"samples": per_sample, "tokens": per_token, "elapsed_s": per_unit}
    columns = _x_columns(arms, unit, thousands=per_sample > 1, tokens_thousands=per_token > 1)
    signal_runs = [run for run in runs if any(SIGNAL_SHARE in r for r in run["records"])]
    # the held-out rates first (the comparison), the training reward after them (a diagnostic), as
    # the report's tables are ordered
    rows = ((EVAL_RATE, "held-out verified rate, sampled"), (GREEDY_RATE, "held-out verified rate, greedy"),
            ("reward/mean", "training reward (mean)"))
    nrows = len(rows) + bool(signal_runs)
    fig, axes = plt.subplots(nrows, 3, figsize=(15, 4 * nrows), layout="constrained", squeeze=False)
    x_max = [0.0, 0.0, 0.0]
    banded = starred = False
    for row, (key, what) in zip(axes, rows):
        bases, drawn = [], False
        for arm in arms:
            points = _training_curve(arm) if key == "reward/mean" else curve(arm, key)
            if not points:
                continue
            drawn = True
            bases += [p for p in points if p["iteration"] == 0]
            ys = [p["mean"] for p in points]
            with_band = key != "reward/mean" and all(p["lo"] is not None for p in points)
            for column, (axis, (x_key, _, _)) in enumerate(zip(row, columns)):
                x = [p[x_key] / scale[x_key] for p in points]
                x_max[column] = max(x_max[column], *x)
                axis.plot(x, ys, marker=".", color=arm["color"], label=arm["display"])
                if with_band and len(points) > 1:  # held-out: the band
                    axis.fill_between(x, [p["lo"] for p in points], [p["hi"] for p in points],
                                      color=arm["color"], alpha=0.2, linewidth=0)
                elif with_band:  # one point (the base alone): its interval as a bar
                    axis.errorbar(x, ys, yerr=[[ys[0] - points[0]["lo"]], [points[0]["hi"] - ys[0]]],
                                  color=arm["color"], capsize=4, linestyle="none")
            banded = banded or with_band
        if bases:  # the shared starting point of every held-out curve
            starred = True
            for axis in row:
                axis.plot([0], [sum(p["mean"] for p in bases) / len(bases)], marker="*", markersize=12,
                          color="black", linestyle="none", label="base (iteration 0)")
        for axis, (_, xlabel, word) in zip(row, columns):
            axis.set(title=f"{what} vs {word}", xlabel=xlabel, ylabel=what)
            axis.set_ylim(bottom=0, top=min(1.0, axis.get_ylim()[1]) if key != "reward/mean" else None)  # rates: <= 1
            axis.grid(alpha=0.3)
            if not drawn:
                axis.text(0.5, 0.5, "no held-out evaluation\n(run.eval_every = 0)", ha="center", va="center",
                          transform=axis.transAxes, color="gray")
    if signal_runs:  # ES only: its middle column is ES iterations
        plot_signal(axes[len(rows)], signal_runs, arms, columns, scale, x_max)
    for row in axes:
        for column, axis in enumerate(row):
            span = x_max[column] if x_max[column] > 0 else 1.0  # the base at 0 shows whole, bar and star
            axis.set_xlim(-0.02 * span, 1.03 * span)
    handles: list[Any] = [Line2D([], [], color=arm["color"], marker=".", label=arm["display"]) for arm in arms]
    if starred:
        handles.append(Line2D([], [], color="black", marker="*", markersize=12, linestyle="none",
                              label="base (iteration 0)"))
    if banded:
        handles.append(Patch(color="gray", alpha=0.2, label="95% interval"))
    if signal_runs:
        handles.append(Line2D([], [], color="gray", linestyle="--", linewidth=1,
                              label=f"signal share below {NOISE_BELOW}: mostly noise"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), frameon=False)
    models = sorted({run["model"] for run in runs})
    fig.suptitle(f"{runs[0]['task']} with {', '.join(models)}: " + " vs ".join(arm["label"] for arm in arms))
    return fig


def plot_signal(row: Any, runs: list[dict[str, Any]], arms: list[dict[str, Any]], columns: list[tuple[str, str, str]],
                scale: dict[str, float], x_max: list[float]) -> None:
    """ES signal share (pooled over the last iterations): per arm, the mean over its runs at every iteration
    they all reached, with its 95% band over seeds, in the arm's color, on the columns' axes."""
    with_signal = {id(run) for run in runs}
    for arm in arms:
        arm_runs = [run for run in arm["runs"] if id(run) in with_signal]
        if not arm_runs:
            continue
        per_run = [{r["iteration"]: r for r in run["records"] if SIGNAL_SHARE in r} for run in arm_runs]
        points = []
        for iteration in sorted(set.intersection(*(set(p) for p in per_run))):
            records = [p[iteration] for p in per_run]
            point = spread_of([r[SIGNAL_SHARE] for r in records])
            point.update({"samples": sum(r["samples/total"] for r in records) / len(records),
                          "tokens": sum(r.get("tokens/total", 0) for r in records) / len(records),
                          "elapsed_s": sum(r["time/elapsed_s"] for r in records) / len(records)})
            points.append(point)
        if not points:
            continue
        for column, (axis, (x_key, _, _)) in enumerate(zip(row, columns)):
            x = [p[x_key] / scale[x_key] for p in points]
            x_max[column] = max(x_max[column], *x)
            axis.plot(x, [p["mean"] for p in points], marker=".", color=arm["color"], label=arm["display"])
            if len(arm_runs) > 1 and all(p["lo"] is not None for p in points):
                axis.fill_between(x, [max(-1.0, p["lo"]) for p in points], [min(1.0, p["hi"]) for p in points],
                                  color=arm["color"], alpha=0.2, linewidth=0)
    for axis, (_, xlabel, word) in zip(row, columns):
        axis.axhline(NOISE_BELOW, color="gray", linestyle="--", linewidth=1, label=f"below {NOISE_BELOW}: mostly noise")
        axis.set(title=f"ES signal share vs {word}", xlabel=xlabel,
                 ylabel=f"signal share (last {WINDOW} iterations), mean over seeds", ylim=(-1.05, 1.05))
        axis.grid(alpha=0.3)
