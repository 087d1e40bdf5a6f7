"""`prover study tune`: k settings x m seeds per method on the dev split, the best mean dev result chosen
per method and frozen into the registration before any test run; every setting's dev result.
"""

from __future__ import annotations

import json
from typing import Any

from prover_cli.comparison.compare import final_at, run_budget
from prover_cli.comparison.run_reader import load_run
from prover_cli.comparison.stats import mean_interval
from prover_cli.comparison.study.design import CHOSEN_JSON, METRICS, Study
from prover_cli.comparison.study.problem_sets import (
    check_problems, check_test_set_fresh, dev_set, test_set, write_problems)
from prover_cli.comparison.study.registration import check_registration, lock_registration, read_record
from prover_cli.comparison.study.run_configs import run_config
from prover_cli.comparison.study.runs import planned_tune_runs, train_missing
from prover_cli.comparison.study.study_file import frozen_choice
from prover_cli.comparison.study.tables import format_number
from prover_cli.errors import InputError, UsageError
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.progress import NULL_REPORTER, Reporter


def tune_results(study: Study, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every tuned setting's dev result (final evaluation of `tune.metric`, per seed, mean and t interval)
    and the choice: per method, the best mean (the first listed on a tie)."""
    assert study.tune is not None
    key = METRICS[study.tune.metric]
    results: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        loaded = load_run(run["dir"])
        final = final_at(loaded, key, run_budget(loaded))
        entry = results.setdefault(run["method"], [])
        while len(entry) <= run["setting"]:
            index = len(entry)
            entry.append({"setting": index, "set": study.tune.settings[run["method"]][index], "per_seed": {}})
        entry[run["setting"]]["per_seed"][str(run["seed"])] = None if final is None else final[key]
        entry[run["setting"]]["samples"] = run["samples"]
    chosen = {}
    for method, entries in results.items():
        for setting in entries:
            values = [v for v in setting["per_seed"].values() if v is not None]
            mean, low, high = mean_interval(values) if values else (None, None, None)
            setting.update(mean=mean, lo=low, hi=high)
        ranked = [e for e in entries if e["mean"] is not None]
        if not ranked:
            raise InputError(f"tune.{method}: no tuning run has a {study.tune.metric} evaluation on the dev split")
        chosen[method] = max(ranked, key=lambda e: (e["mean"], -e["setting"]))["setting"]
    return {"metric": study.tune.metric, "seeds": study.tune.seeds, "results": results, "chosen": chosen}


def tune_study(study: Study, *, backend: str = "local", reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """The tuning phase: train what is missing on the dev split, choose, freeze the choice (tune/chosen.json,
    and study.json's registration) before any test-set run."""
    if study.tune is None:
        raise UsageError(f"{study.path}: no [tune] table: nothing to tune", hint="docs/study.md: the tuning phase")
    check_problems(study)
    record = read_record(study)
    check_registration(study, record)
    runs = planned_tune_runs(study)
    write_problems(study, reporter)
    check_problems(study)   # problems from a file are checked once written, before any training
    dev = dev_set(study)
    test = test_set(run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.seeds[0]))
    if dev["heldout_sha256"] == test["heldout_sha256"]:
        raise InputError(f"{study.dir / 'tune' / 'problems.jsonl'}: the dev split is the test set")
    check_test_set_fresh(study, test)
    lock_registration(study, test, record)
    todo = train_missing(study, runs, backend, reporter, dev, "tune")
    results = tune_results(study, runs)
    frozen = frozen_choice(study)
    if frozen is None:
        write_text_atomic(study.dir / "tune" / CHOSEN_JSON, json.dumps({**results, "dev_set": dev}, indent=2,
                                                                      sort_keys=True) + "\n")
    elif frozen != results["chosen"]:
        raise InputError(f"{study.dir / 'tune' / CHOSEN_JSON}: frozen choice {frozen} but the tuning runs now choose "
                         f"{results['chosen']}: they were trained again by other code",
                         hint="the choice stays frozen: start a new study.dir to tune again")
    study.chosen = frozen_choice(study)
    lock_registration(study, test, read_record(study))
    return {"ok": True, "study": study.name, "trained": len(todo), "reused": len(runs) - len(todo), "dev_set": dev,
            "chosen": {m: study.tune.settings[m][i] for m, i in (study.chosen or {}).items()},
            "tune": results, "tables": [tune_table(study, results)]}


def tune_table(study: Study, results: dict[str, Any]) -> dict[str, Any]:
    assert study.tune is not None
    rows = []
    for method, entries in results["results"].items():
        for e in entries:
            seeds = ", ".join("-" if v is None else f"{v:.3f}" for v in e["per_seed"].values())
            band = f" ({format_number(e['lo'])}..{format_number(e['hi'])})" if e.get("lo") is not None else ""
            rows.append([method, e["setting"], " ".join(e["set"]) or "(base config)", f"{e.get('samples', 0):,}", seeds,
                         f"{format_number(e['mean'])}{band}", "CHOSEN" if results["chosen"].get(method) == e["setting"] else ""])
    k = max(len(v) for v in study.tune.settings.values())
    return {"title": f"tuning on the dev split ({study.tune.dev_problems} training problems held out; "
                     f"{k} settings x {len(study.tune.seeds)} seeds per method, equal budgets; "
                     f"{study.tune.metric} rate at the final evaluation): every setting",
            "columns": ["method", "k", "setting", "samples", f"dev {study.tune.metric} per seed",
                        "mean (95% t interval)", "choice"], "rows": rows}
