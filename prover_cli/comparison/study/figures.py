"""The study's figures: held-out curves on the samples, tokens and accelerator-seconds axes, with the
paired difference of each registered comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prover_cli.comparison.compare import evaluation_budgets, per_problem
from prover_cli.comparison.stats import mean_interval, paired_difference
from prover_cli.comparison.study.design import AXES, BASE, Comparison, METRICS, Study
from prover_cli.comparison.study.limited_data import plot_limited_data
from prover_cli.comparison.study.paired import evaluations_at, pair_of


def _curve(runs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """`key` at each sample budget every run has it at: mean and 95% t band over seeds, with the mean
    tokens and accelerator-seconds there (the other axes)."""
    per_run = [{r["samples/total"]: r for r in run["records"] if key in r} for run in runs]
    points = []
    for budget in sorted(set.intersection(*(set(p) for p in per_run))):
        records = [p[budget] for p in per_run]
        mean, low, high = mean_interval([r[key] for r in records])
        points.append({"samples/total": budget, "mean": mean, "lo": low, "hi": high,
                       "tokens/total": sum(r.get("tokens/total", 0) for r in records) / len(records),
                       "time/elapsed_s": sum(r.get("time/elapsed_s", 0.0) for r in records) / len(records)})
    return points


def difference_curve(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], Any]) -> list[dict[str, Any]]:
    """The paired difference a - b at every budget both sides were evaluated at in every seed (each
    side's evaluation by the one rule, compare.final_at): mean over seeds and 95% t band."""
    key = METRICS[c.metric]
    pairs = [pair_of(study, c, loaded, s) for s in study.seeds]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs or c.b == BASE:
        return []
    budgets = sorted(set.intersection(*(set(evaluation_budgets(x, key)) & set(evaluation_budgets(y, key))
                                        for x, y in pairs)))
    points = []
    for budget in budgets:
        values = []
        for x, y in pairs:
            fa, fb = evaluations_at(c, x, y, key, budget)
            pa, pb = per_problem(fa, key), per_problem(fb, key)
            if pa is None or pb is None:
                return []
            diffs = paired_difference(pa, pb)
            values.append(sum(diffs) / len(diffs))
        mean, low, high = mean_interval(values)
        points.append({"samples/total": budget, "mean": mean, "lo": low, "hi": high})
    return points


def plot_study(study: Study, loaded: dict[tuple[str, int, int], Any], primary: list[dict[str, Any]],
               secondary: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """`curves_samples.png` (with the paired-difference panels), `curves_tokens.png`, `curves_seconds.png`
    and, with several training sizes, `limited_data.png`; returns the layout (points per curve, panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layout: dict[str, Any] = {"files": [], "curves": {}, "difference_panels": {}, "min_points": None}
    drawn = [Comparison(e["a"], e["a_size"], e["b"], e["b_size"], e["metric"], e["test"], e["margin"])
             for e in (*primary, *secondary) if e["b"] != BASE and e.get("anchor") != "base"]
    for axis_name, (x_key, x_label) in AXES.items():
        with_diff = axis_name == "samples"
        figure, panels = plt.subplots(2 if with_diff else 1, len(METRICS), figsize=(6.5 * len(METRICS),
                                      9 if with_diff else 4.6), squeeze=False, layout="constrained")
        name = f"curves_{axis_name}.png"
        counts: dict[str, int] = {}
        for panel, (metric, key) in zip(panels[0], METRICS.items()):
            bases = []
            for index, arm in enumerate(study.arms.values()):
                for size_index, size in enumerate(study.train_sizes):
                    runs = [loaded[(arm.name, size, s)] for s in study.seeds]
                    points = _curve(runs, key)
                    bases += [p["mean"] for p in points if p["samples/total"] == 0]
                    trained = [p for p in points if p["samples/total"] > 0]
                    label = f"{arm.name}, n={size or 'all'}"
                    counts[f"{label} ({metric})"] = len(trained)
                    xs = [p[x_key] for p in points]
                    style = "--" if arm.null else ["-", ":", "-."][size_index % 3]
                    line, = panel.plot(xs, [p["mean"] for p in points], style, marker="o", markersize=3,
                                       color=f"C{index % 10}", label=label + (" (null)" if arm.null else ""))
                    if not arm.null:
                        panel.fill_between(xs, [p["lo"] if p["lo"] is not None else p["mean"] for p in points],
                                           [p["hi"] if p["hi"] is not None else p["mean"] for p in points],
                                           alpha=0.12, color=line.get_color(), linewidth=0)
            if bases:
                panel.plot([0], [sum(bases) / len(bases)], marker="*", markersize=14, color="black",
                           linestyle="none", label="base (before training)")
            panel.set_title(f"held-out {metric} rate vs {x_label}", fontsize=9)
            panel.set_xlabel(x_label)
            panel.set_ylabel(f"{metric} rate, mean of {len(study.seeds)} seeds (95% t band)")
            panel.set_ylim(bottom=0)
            panel.grid(alpha=0.3)
            panel.legend(fontsize=7)
        if with_diff:
            for panel, metric in zip(panels[1], METRICS):
                names = []
                for index, c in enumerate(d for d in drawn if d.metric == metric):
                    points = difference_curve(study, c, loaded)
                    if not points:
                        continue
                    xs = [p["samples/total"] for p in points]
                    line, = panel.plot(xs, [p["mean"] for p in points], marker="o", markersize=3, color=f"C{index % 10}",
                                       label=c.name)
                    panel.fill_between(xs, [p["lo"] if p["lo"] is not None else p["mean"] for p in points],
                                       [p["hi"] if p["hi"] is not None else p["mean"] for p in points],
                                       alpha=0.15, color=line.get_color(), linewidth=0)
                    if c.test == "non-inferiority":
                        panel.axhline(-c.margin, color=line.get_color(), linestyle=":", linewidth=1,
                                      label=f"-margin {c.margin:g} ({c.a} - {c.b})")
                    names.append(c.name)
                panel.axhline(0, color="black", linewidth=0.8)
                panel.set_title(f"paired difference a - b, {metric} (same problems, same seed; 95% t band over seeds)",
                                fontsize=9)
                panel.set_xlabel(x_label)
                panel.set_ylabel(f"a - b, held-out {metric} rate")
                panel.grid(alpha=0.3)
                if names:
                    panel.legend(fontsize=7)
                layout["difference_panels"][metric] = names
        figure.suptitle(f"study {study.name}: one test set for every arm, size and seed; base and null arms drawn")
        figure.savefig(out / name, dpi=100)
        plt.close(figure)
        layout["files"].append(name)
        layout["curves"][name] = counts
    layout["min_points"] = min(layout["curves"]["curves_samples.png"].values(), default=0)
    if len(study.train_sizes) > 1:
        layout["files"].append(plot_limited_data(study, loaded, out))
    return layout
