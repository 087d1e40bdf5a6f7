"""`prover study report`: the pre-registered comparisons first (primary Holm-corrected, then secondary,
with their anchors and verdicts), power, tuning, limited data, then exploratory; the report directory
(tables, figures, per-seed CSV and JSONL) written whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from prover_cli.comparison.compare import run_budget
from prover_cli.comparison.run_reader import load_run
from prover_cli.comparison.stats import holm, mean_interval
from prover_cli.comparison.study.design import BASE, CHOSEN_JSON, Comparison, METRICS, STUDY_JSON, Study
from prover_cli.comparison.study.figures import plot_study
from prover_cli.comparison.study.limited_data import limited_data
from prover_cli.comparison.study.paired import compare
from prover_cli.comparison.study.power import power_table, study_power
from prover_cli.comparison.study.registration import check_registration, prepare_test_set, read_record
from prover_cli.comparison.study.runs import planned_runs, planned_tune_runs
from prover_cli.comparison.study.tables import comparison_table, format_number, to_csv, to_markdown
from prover_cli.comparison.study.tuning import tune_results, tune_table
from prover_cli.errors import InputError, UsageError
from prover_cli.progress import NULL_REPORTER, Reporter


def exploratory(study: Study) -> list[Comparison]:
    """What was not pre-registered: at each size every pair of arms that are not null controls, each arm
    against its own method's null arms, and each arm's data-size contrasts (a null control against
    another method's arm or null compares nothing anyone asked)."""
    registered = {(c.a, c.a_size, c.b, c.b_size, c.metric) for c in (*study.primary, *study.secondary)}
    names = list(study.arms)
    arms = study.arms
    out = []
    for metric in METRICS:
        for size in study.train_sizes:
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    if (arms[a].null or arms[b].null) and (arms[a].method != arms[b].method or arms[a].null == arms[b].null):
                        continue
                    first, second = (b, a) if arms[a].null else (a, b)   # the null control is always b
                    out.append(Comparison(first, size, second, size, metric, role="exploratory"))
        for arm in names:  # the limited-data contrast: the same seed with fewer training problems
            for i, small in enumerate(study.train_sizes):
                for large in study.train_sizes[i + 1:]:
                    out.append(Comparison(arm, small, arm, large, metric, role="exploratory"))
    return [c for c in out if (c.a, c.a_size, c.b, c.b_size, c.metric) not in registered]


def _exploratory_entry(study: Study, c: Comparison, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    """An exploratory comparison, or, when its pair cannot be compared (unequal budgets, no evaluation
    there), an entry that says so: never a reason to drop the registered ones."""
    try:
        return compare(study, c, loaded)
    except (UsageError, InputError) as exc:
        return {"name": c.name, "role": "exploratory", "metric": c.metric, "test": c.test, "margin": 0.0,
                "alpha": c.alpha, "anchor": "", "a": c.a, "a_size": c.a_size, "b": c.b, "b_size": c.b_size,
                "seeds": [], "per_seed": [], "mean": None, "lo": None, "hi": None, "p": None, "budget": None,
                "not_comparable": str(exc)}


def report_study(study: Study, *, reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """The pre-registered comparisons first (Holm over the primary ones), the anchors, the power for the
    margins, the tuning phase, the limited-data table, then everything else as exploratory; tables,
    plots, per-seed CSV and JSONL into `<dir>/report/`, written whole or not at all."""
    record = read_record(study)
    if record is None:
        raise InputError(f"study {study.name}: {study.dir / STUDY_JSON} not found: the study has not run",
                         hint=f"run `prover study run {study.path}` first")
    check_registration(study, record)
    if study.tune is not None and study.chosen is None:
        raise InputError(f"study {study.name}: the tuning phase has not chosen (no {study.dir / 'tune' / CHOSEN_JSON})",
                         hint=f"run `prover study run {study.path}` first")
    runs = planned_runs(study)
    unfinished = [r for r in runs if r["state"] != "finished"]
    if unfinished:
        first = unfinished[0]
        raise InputError(f"study {study.name}: {len(unfinished)} of {len(runs)} runs are not finished with this code "
                         f"and config (e.g. {first['dir']}: {first['why']})",
                         hint=f"run `prover study run {study.path}` first")
    fingerprint = prepare_test_set(study, runs, reporter)
    loaded = {(r["arm"], r["size"], r["seed"]): {**load_run(r["dir"]), "study_run": r} for r in runs}
    primary = [compare(study, c, loaded) for c in study.primary]
    secondary = [compare(study, c, loaded) for c in study.secondary]
    for entry, adjusted in zip(primary, holm([e["p"] for e in primary])):
        entry["p_holm"] = adjusted
        entry["verdict"] = _verdict(entry, adjusted, _comparator_anchor(study, entry, secondary, loaded))
    for entry in secondary:
        entry["verdict"] = _verdict(entry, entry["p"], None)
    extra = [_exploratory_entry(study, c, loaded) for c in exploratory(study)]
    power = [study_power(c, e, len(study.primary)) for c, e in zip(study.primary, primary)]
    tuned = tune_results(study, planned_tune_runs(study)) if study.tune is not None else None
    per_seed_rows = _per_seed_rows(runs, loaded, [*primary, *secondary, *extra])
    data_axis = limited_data(study, loaded)
    tables = [comparison_table(f"PRIMARY (pre-registered; Holm over {len(primary)}): {study.name}", primary,
                               holm_column=True),
              power_table(power, "power for the pre-registered margins, from this study as a pilot")]
    anchors = [e for e in secondary if e["anchor"]]
    others = [e for e in secondary if not e["anchor"]]
    if anchors:
        tables.append(comparison_table("ANCHORS (pre-registered secondary: each method against its base and its null "
                                       "arm; did it learn at all?)", anchors))
    if others:
        tables.append(comparison_table("secondary (pre-registered, not corrected for multiplicity)", others))
    if tuned is not None:
        tables.append(tune_table(study, tuned))
    if data_axis["rows"]:
        tables.append(data_axis)
    tables.append(comparison_table("EXPLORATORY (not pre-registered: p uncorrected, a lead for a new study, "
                                   "not a finding)", extra))
    tables.append(arms_table(study, loaded))
    strip = lambda entries: [{k: v for k, v in e.items() if k != "per_seed"} for e in entries]  # noqa: E731
    summary = {"study": study.name, "test_set": fingerprint, "registration_sha256": record["registration_sha256"],
               "primary": strip(primary), "secondary": strip(secondary), "exploratory": strip(extra), "power": power,
               "tune": tuned, "limited_data": data_axis}
    out = study.dir / "report"
    layout, plots = _write_report_dir(out, study, loaded, primary, secondary, per_seed_rows, summary, tables)
    return {"ok": True, "study": study.name, "headline": primary[0]["verdict"], "primary": strip(primary),
            "secondary": strip(secondary), "exploratory": strip(extra), "power": power, "test_set": fingerprint,
            "tune": tuned, "out": str(out), "plots": [str(out / p) for p in plots], "layout": layout,
            "per_seed_csv": str(out / "per_seed.csv"), "per_seed_jsonl": str(out / "per_seed.jsonl"), "tables": tables}


def _write_report_dir(out: Path, study: Study, loaded: dict[tuple[str, int, int], Any], primary: list[dict[str, Any]],
                      secondary: list[dict[str, Any]], per_seed_rows: list[dict[str, Any]], summary: dict[str, Any],
                      tables: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Every report file into a fresh temporary directory beside `out`, then renamed into place: a kill
    leaves the previous report whole (or none), never a mix of two."""
    import tempfile

    for leftover in out.parent.glob(f".{out.name}.*"):   # what a killed report left: never read
        shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)   # mkdtemp's 0700 would outlive the rename: a report is for reading
    try:
        (staging / "per_seed.jsonl").write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in per_seed_rows),
                                                encoding="utf-8")
        (staging / "per_seed.csv").write_text(to_csv(per_seed_rows), encoding="utf-8")
        layout = plot_study(study, loaded, primary, secondary, staging)
        summary["figures"] = layout
        (staging / "study_report.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        (staging / "tables.md").write_text("\n".join(to_markdown(t) for t in tables), encoding="utf-8")
        for path in staging.iterdir():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return layout, sorted(p for p in layout["files"])


def _comparator_anchor(study: Study, entry: dict[str, Any], secondary: list[dict[str, Any]],
                       loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any] | None:
    """For a non-inferiority primary a - b: b - base on the same metric (registered, else computed)."""
    if entry["test"] != "non-inferiority" or entry["b"] == BASE:
        return None
    found = next((e for e in secondary if e["anchor"] == "base" and e["a"] == entry["b"]
                  and e["a_size"] == entry["b_size"] and e["metric"] == entry["metric"]), None)
    return found or compare(study, Comparison(entry["b"], entry["b_size"], BASE, entry["b_size"], entry["metric"],
                                              role="secondary", anchor="base"), loaded)


def _verdict(entry: dict[str, Any], adjusted: float | None, anchor: dict[str, Any] | None) -> str:
    if adjusted is None:
        return f"{entry['name']}: no test (fewer than 2 seeds, or no spread between seeds)"
    shown = adjusted < entry["alpha"]
    p_text = f"{'Holm ' if entry['role'] == 'primary' else ''}p = {adjusted:.3g}, alpha {entry['alpha']:g}"
    if entry["test"] == "non-inferiority":
        beat = anchor is not None and anchor.get("lo") is not None and anchor["lo"] > 0
        if not beat:
            told = "-" if anchor is None or anchor.get("mean") is None else (
                f"{anchor['mean']:+.3f} ({format_number(anchor['lo'], True)}..{format_number(anchor['hi'], True)})")
            return (f"{entry['name']}: NO VERDICT: the comparator {entry['b']} did not beat its base "
                    f"({entry['b']} - base {told}), so non-inferiority to it says nothing ({p_text})")
        what = (f"non-inferior within {entry['margin']:g}" if shown else
                f"non-inferiority within {entry['margin']:g} NOT shown")
        assert anchor is not None   # `beat`
        what += f"; the comparator beat its base by {anchor['mean']:+.3f}"
    else:
        what = (f"differ, {'a' if entry['mean'] > 0 else 'b'} ahead" if shown else "no difference shown")
    return f"{entry['name']}: {what} ({p_text})"


def _per_seed_rows(runs: list[dict[str, Any]], loaded: dict[tuple[str, int, int], Any],
                   entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        records = loaded[(run["arm"], run["size"], run["seed"])]["records"]
        row = {"kind": "run", "arm": run["arm"], "method": run["method"], "train_size": run["size"],
               "seed": run["seed"], "dir": str(run["dir"]),
               "samples": run_budget(loaded[(run["arm"], run["size"], run["seed"])])}
        for metric, key in METRICS.items():
            evals = [r for r in records if key in r]
            row[f"base_{metric}"] = evals[0][key] if evals and evals[0]["iteration"] == 0 else None
            row[f"final_{metric}"] = evals[-1][key] if evals else None
        rows.append(row)
    for entry in entries:
        for p in entry["per_seed"]:
            rows.append({"kind": "difference", **{k: v for k, v in p.items() if k != "problem_differences"}})
    return rows


def arms_table(study: Study, loaded: dict[tuple[str, int, int], Any]) -> dict[str, Any]:
    rows = []
    for arm in study.arms:
        for size in study.train_sizes:
            cells = []
            for key in METRICS.values():
                finals = [[r for r in loaded[(arm, size, s)]["records"] if key in r][-1][key] for s in study.seeds]
                mean, low, high = mean_interval(finals)
                cells.append(f"{mean:.3f} ({format_number(low)}..{format_number(high)})")
            rows.append([arm, size or "all", len(study.seeds), *cells])
    return {"title": "held-out final, mean over seeds (95% t interval): every arm and training-set size",
            "columns": ["arm", "train size", "seeds", "sampled", "greedy"], "rows": rows}
