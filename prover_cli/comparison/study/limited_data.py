"""The limited-data axis: the held-out rate by training-set size x budget (mean over seeds), with the
distinct training problems by content, as a table and a figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prover_cli.comparison.compare import evaluation_budgets
from prover_cli.comparison.study.design import METRICS, Study
from prover_cli.comparison.study.tables import format_number
from prover_cli.tasks.problems import content_key, train_problems


def limited_data(study: Study, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    """The limited-data axis: each arm's held-out rate (mean over seeds) at every budget all its runs
    were evaluated at, per training-set size, with the distinct training problems that size is."""
    if len(study.train_sizes) < 2:
        return {"title": "", "columns": [], "rows": [], "points": []}
    budgets = sorted({b for run in loaded.values() for b in _eval_budgets(run)})
    points, rows = [], []
    for arm in study.arms:
        for size in study.train_sizes:
            runs = [loaded[(arm, size, s)] for s in study.seeds]
            distinct = sum(len({content_key(p) for p in train_problems(r["study_run"]["config"])}) for r in runs) / len(runs)
            for metric, key in METRICS.items():
                cells = []
                for budget in budgets:
                    values = [next((e[key] for e in r["records"] if key in e and e["samples/total"] == budget), None)
                              for r in runs]
                    present = [v for v in values if v is not None]
                    value = None if len(present) < len(values) else sum(present) / len(present)
                    cells.append(format_number(value))
                    if value is not None:
                        points.append({"arm": arm, "size": size, "distinct_training_problems": distinct,
                                       "metric": metric, "samples": budget, "rate": value})
                rows.append([arm, size or "all", f"{distinct:,.0f}", metric, *cells])
    return {"title": "limited data: held-out rate (mean over seeds) by training-set size x budget; distinct training "
                     "problems by content", "columns": ["arm", "train size", "distinct problems", "metric",
                                                        *[f"{b:,.0f} samples" for b in budgets]],
            "rows": rows, "points": points}


def _eval_budgets(run: dict[str, Any]) -> list[float]:
    return evaluation_budgets(run, METRICS["greedy"])


def plot_limited_data(study: Study, loaded: dict[tuple[str, int, int], Any], out: Path) -> str:
    import matplotlib.pyplot as plt

    points = limited_data(study, loaded)["points"]
    figure, panels = plt.subplots(1, len(METRICS), figsize=(6.5 * len(METRICS), 4.6), squeeze=False, layout="constrained")
    budgets = sorted({p["samples"] for p in points if p["samples"] > 0})
    for panel, metric in zip(panels[0], METRICS):
        for index, arm in enumerate(study.arms):
            for j, budget in enumerate(budgets):
                chosen = sorted((p for p in points if p["arm"] == arm and p["metric"] == metric and p["samples"] == budget),
                                key=lambda p: p["distinct_training_problems"])
                if chosen:
                    panel.plot([p["distinct_training_problems"] for p in chosen], [p["rate"] for p in chosen],
                               marker="o", color=f"C{index % 10}", alpha=0.3 + 0.7 * (j + 1) / len(budgets),
                               linestyle="--" if study.arms[arm].null else "-",
                               label=f"{arm} @ {budget:,.0f} samples" if j in (0, len(budgets) - 1) else None)
        panel.set_xscale("log")
        panel.set_xlabel("distinct training problems (by content)")
        panel.set_ylabel(f"held-out {metric} rate, mean over seeds")
        panel.set_title(f"{metric}: held-out rate vs training problems, one line per arm and budget", fontsize=9)
        panel.grid(alpha=0.3)
        panel.legend(fontsize=7)
    figure.savefig(out / "limited_data.png", dpi=100)
    plt.close(figure)
    return "limited_data.png"
