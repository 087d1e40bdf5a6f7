"""`prover study plan`: every run with its state and cost on the backend, the registered comparisons, and
the power from a pilot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prover_cli.comparison.study.design import Study
from prover_cli.comparison.study.power import pilot_power, power_table
from prover_cli.comparison.study.problem_sets import check_problems
from prover_cli.comparison.study.registration import check_registration, read_record
from prover_cli.comparison.study.runs import planned_runs, planned_tune_runs
from prover_cli.on_modal.plan import plan as train_plan
from prover_cli.progress import NULL_REPORTER, Reporter


def plan_study(study: Study, *, backend: str = "local", pilot: Sequence[str | Path] = (),
               reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Every run (tuning first) with its state and cost, the totals, the checks `run` would refuse on
    (done here, before anything is written), and (with a pilot) the power of each primary comparison."""
    problems = check_problems(study)
    record = read_record(study)
    check_registration(study, record)
    tune_runs, runs = planned_tune_runs(study), planned_runs(study)
    rows, listed, total_samples, total_usd = [], [], 0, 0.0
    for run in (*tune_runs, *runs):
        cost = train_plan(run["config"], command=f"train_{run['method']}", backend=backend)
        usd = cost.get("est_usd_total")
        total_samples += run["samples"]
        total_usd += usd or 0.0
        listed.append({"arm": run["arm"], "method": run["method"], "train_size": run["size"], "seed": run["seed"],
                       "dir": str(run["dir"]), "state": run["state"], "why": run["why"], "samples": run["samples"],
                       "phase": "tune" if "setting" in run else "test",
                       "heldout_evaluations": cost.get("heldout_evaluations"), **({"est_usd": usd} if usd is not None else {})})
        rows.append([run["arm"], run["size"] or "all", run["seed"], str(run["dir"]), run["state"], f"{run['samples']:,}",
                     *([f"{usd:.2f}"] if backend == "modal" else [cost.get("heldout_evaluations", 0)])])
    todo = [r for r in listed if r["state"] != "finished"]
    columns = ["arm", "train size", "seed", "run dir", "state", "training samples",
               "est USD" if backend == "modal" else "held-out evaluations"]
    tuning = (f"{len(tune_runs)} tuning runs ({len(study.tune.settings)} methods x "   # type: ignore[union-attr]
              f"{max(len(v) for v in study.tune.settings.values())} settings x {len(study.tune.seeds)} seeds) + "  # type: ignore[union-attr]
              if tune_runs else "")
    tables = [{"title": f"study {study.name}: {tuning}{len(runs)} test runs ({len(study.arms)} arms x "
                        f"{len(study.train_sizes)} sizes x {len(study.seeds)} seeds), {len(todo)} to run, on {backend}",
               "columns": columns, "rows": rows},
              comparisons_table(study)]
    result: dict[str, Any] = {"ok": True, "study": study.name, "study_file": str(study.path), "dir": str(study.dir),
                              "backend": backend, "runs_total": len(runs), "tune_runs_total": len(tune_runs),
                              "runs_to_run": len(todo), "samples_total": total_samples, "runs": listed,
                              "problems": problems, "registration": "locked" if record else "written at the first run",
                              "unregistered_arms": unregistered_arms(study)}
    if result["unregistered_arms"]:
        result["note"] = (f"arms in no registered comparison: {', '.join(result['unregistered_arms'])} (exploratory "
                          "only; a pair that cannot be compared is listed as such, never a reason to drop another)")
    if backend == "modal":
        result["est_usd_total"] = round(total_usd, 2)
        result["est_usd_to_run"] = round(sum(r.get("est_usd", 0.0) for r in todo), 2)
    if pilot:
        power = pilot_power(study, pilot)
        result["power"] = power
        tables.append(power_table(power, f"power from the pilot {', '.join(map(str, pilot))}"))
    else:
        result["power_note"] = ("no pilot given: pass --pilot <finished study dir or ES and GRPO run dirs> for the "
                                "seeds and test problems each primary margin needs")
    if problems.get("checked"):
        tables.insert(1, {"title": "problems (checked before anything is written)", "columns": ["what", "value"],
                          "rows": [[key.replace("_", " "), f"{value:,}" if isinstance(value, int) else value]
                                   for key, value in problems.items() if key != "checked"]})
    result["tables"] = tables
    return result


def unregistered_arms(study: Study) -> list[str]:
    used = {side for c in (*study.primary, *study.secondary) for side in (c.a, c.b)}
    return [name for name in study.arms if name not in used]


def comparisons_table(study: Study) -> dict[str, Any]:
    rows = [[c.role + (f" (anchor: {c.anchor})" if c.anchor else ""), c.name,
             c.test + (f", margin {c.margin:g}" if c.margin else ""), c.alpha, c.power]
            for c in (*study.primary, *study.secondary)]
    return {"title": f"pre-registered comparisons (primary: Holm over {len(study.primary)})",
            "columns": ["role", "comparison", "test", "alpha", "power"], "rows": rows}
