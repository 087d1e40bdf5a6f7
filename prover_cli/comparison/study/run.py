"""`prover study run`: tune (when the study has a tuning phase), freeze, then train every run not
finished with this code and config.
"""

from __future__ import annotations

from typing import Any

from prover_cli.comparison.study.design import Study
from prover_cli.comparison.study.problem_sets import check_problems
from prover_cli.comparison.study.registration import check_registration, prepare_test_set, read_record
from prover_cli.comparison.study.runs import planned_runs, train_missing
from prover_cli.comparison.study.tuning import tune_study
from prover_cli.progress import NULL_REPORTER, Reporter

def run_study(study: Study, *, backend: str = "local", reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """The tuning phase when there is one (its choice frozen), then every test run not finished with
    this code and config; the rest reused. Everything `plan` checks is refused before anything is written."""
    check_problems(study)
    check_registration(study, read_record(study))
    tuned: dict[str, Any] = {}
    if study.tune is not None:
        tuned = tune_study(study, backend=backend, reporter=reporter)
    runs = planned_runs(study)
    fingerprint = prepare_test_set(study, runs, reporter)
    todo = train_missing(study, runs, backend, reporter, fingerprint, "test")
    rows = [[r["arm"], r["size"] or "all", r["seed"], str(r["dir"]), "trained" if r in todo else "reused"] for r in runs]
    return {"ok": True, "study": study.name, "dir": str(study.dir), "trained": len(todo), "reused": len(runs) - len(todo),
            "test_set": fingerprint, **({"tune": {k: tuned[k] for k in ("trained", "reused", "chosen")}} if tuned else {}),
            "tables": [*tuned.get("tables", []),
                       {"title": f"study {study.name}: {len(todo)} trained, {len(runs) - len(todo)} reused",
                        "columns": ["arm", "train size", "seed", "run dir", "this time"], "rows": rows}]}
