"""The locked registration (`study.json`): what is registered, its sha256, the refusal of a study file
that differs from it (naming each changed key), and the test set prepared and locked with it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prover_cli.comparison.study.design import MAX_FILE_BYTES, STUDY_JSON, Study
from prover_cli.comparison.study.problem_sets import check_problems, check_test_set_fresh, test_set, write_problems
from prover_cli.comparison.study.run_configs import run_config, samples_of
from prover_cli.errors import InputError, UsageError
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.progress import NULL_REPORTER, Reporter


def registration(study: Study) -> dict[str, Any]:
    """What the study is decided to be before any test-set run; hashed into study.json at the first run."""
    arms = {}
    for arm in study.arms.values():
        # the base config by content, not by path: the same study read from another checkout is the same study
        arms[arm.name] = {"method": arm.method, "null": arm.null,
                          "config_sha256": hashlib.sha256(arm.config.read_bytes()).hexdigest(), "set": arm.overrides,
                          "budgets": {str(size): samples_of(run_config(study, arm, size, study.seeds[0]), arm.method)
                                      for size in study.train_sizes}}
    return {"study": study.name, "dir": str(study.dir), "seeds": study.seeds, "train_sizes": study.train_sizes,
            "test_seed": study.test_seed, "arms": arms, "anchors": study.anchors,
            "allow_unequal_budgets": study.allow_unequal_budgets, "min_test_problems": study.min_test_problems,
            "primary": [c.registered() for c in study.primary],
            "secondary": [c.registered() for c in study.secondary],
            "tune": None if study.tune is None else {**study.tune.registered(), "chosen": study.chosen}}


def registration_sha256(reg: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(reg, sort_keys=True).encode("utf-8")).hexdigest()


def _changes(old: Any, new: Any, where: str = "") -> list[str]:
    """Dotted keys whose values differ between two registrations."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in list(old) + [k for k in new if k not in old]:
            out += _changes(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) \
            and all(isinstance(x, dict) for x in old + new):
        return [c for i, (x, y) in enumerate(zip(old, new)) for c in _changes(x, y, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {json.dumps(old)} -> {json.dumps(new)}"]


def read_record(study: Study) -> dict[str, Any] | None:
    """study.json, checked: None before the first run; an unreadable one is an error naming it."""
    path = study.dir / STUDY_JSON
    if not path.exists():
        return None
    hint = ("study.json is the study's lock, written once at its first run; if it was not edited by hand the "
            "directory was damaged: start the study in a new study.dir")
    if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
        raise InputError(f"{path}: not a study record (not a regular file of at most {MAX_FILE_BYTES:,} bytes)", hint=hint)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc}): truncated or damaged", hint=hint) from None
    if not isinstance(record, dict):
        raise InputError(f"{path}: holds a JSON {type(record).__name__}, not the study's record (an object)", hint=hint)
    for key, kind in (("registration", dict), ("registration_sha256", str), ("test_set", dict)):
        if not isinstance(record.get(key), kind):
            raise InputError(f"{path}: no {key!r} ({kind.__name__}): written by an older prover, before registrations "
                             "were locked, or damaged", hint="start the study in a new study.dir (or remove this one)")
    if registration_sha256(record["registration"]) != record["registration_sha256"]:
        raise InputError(f"{path}: registration_sha256 does not match its registration: edited by hand", hint=hint)
    return record


def check_registration(study: Study, record: dict[str, Any] | None) -> None:
    """Refuse a study file whose registration differs from the one locked at the first run."""
    if record is None:
        return
    locked, now = record["registration"], registration(study)
    if locked.get("tune") and now.get("tune") and locked["tune"].get("chosen") is None:
        now = {**now, "tune": {**now["tune"], "chosen": None}}   # locked before the choice was frozen
    changes = _changes(locked, now)
    if changes:
        shown = "; ".join(changes[:6]) + (f"; and {len(changes) - 6} more" if len(changes) > 6 else "")
        raise UsageError(f"{study.path}: the registration changed since the study's first run ({study.dir / STUDY_JSON}, "
                         f"sha256 {record['registration_sha256'][:12]}): {shown}",
                         hint="a registration is decided before the runs: restore the study file, or ask the new "
                              "question as a new study (a new study.dir); its runs can be trained again there")


def lock_registration(study: Study, fingerprint: dict[str, Any], record: dict[str, Any] | None) -> None:
    """Write (or, when tuning has just chosen, complete) study.json's registration."""
    reg = registration(study)
    if record is not None and record["registration"] == reg and record.get("test_set") == fingerprint:
        return
    write_text_atomic(study.dir / STUDY_JSON, json.dumps(
        {"study": study.name, "study_file": str(study.path), "test_set": fingerprint, "registration": reg,
         "registration_sha256": registration_sha256(reg)}, indent=2, sort_keys=True) + "\n")
    if record is None:
        write_text_atomic(study.dir / "study.toml", study.path.read_text(encoding="utf-8"))


def prepare_test_set(study: Study, runs: list[dict[str, Any]], reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Write the problems files once, check the record (registration, test set), lock it, return the fingerprint."""
    record = read_record(study)
    check_registration(study, record)
    write_problems(study, reporter)
    check_problems(study)   # problems from a file are checked once written, before any training
    fingerprint = test_set(runs[0]["config"])
    if record is not None and record["test_set"] != fingerprint:
        raise InputError(f"{study.dir / 'problems.jsonl'}: the test set changed since the study started "
                         f"({record['test_set'].get('sha256')} -> {fingerprint['sha256']}); its runs are no longer "
                         "comparable", hint="restore the file, or start the study in a new study.dir")
    check_test_set_fresh(study, fingerprint)
    lock_registration(study, fingerprint, record)
    if fingerprint["distinct_by_content"] < fingerprint["problems"]:
        getattr(reporter, "warn", reporter.log)(
            f"{study.dir / 'problems.jsonl'}: the test set has {fingerprint['problems']} held-out rows but "
            f"{fingerprint['distinct_by_content']} distinct problems by content; duplicates narrow every interval")
    return fingerprint
