"""The study's problems: the one problems file every run reads, the test set (held out, drawn once from
`study.test_seed`) and its fingerprint, the dev split tuning scores on, and the checks that keep them apart.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prover_cli.comparison.study.design import Study
from prover_cli.comparison.study.run_configs import run_config, tune_config, tuned_overrides
from prover_cli.config import Config, load_config
from prover_cli.errors import ConfigError, InputError
from prover_cli.fsio.jsonl import load_jsonl_strict, write_jsonl_atomic
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.streams import study_dev_split_rng
from prover_cli.tasks.datasets import prepare_data
from prover_cli.tasks.problems import (
    HeldOutSet, content_key, generated_problems, heldout_problems, in_split, select_heldout)
from prover_cli.training.metrics import METRICS_FILE


def design_problems(study: Study) -> tuple[list[dict[str, Any]] | None, str]:
    """The problems the study's file will hold: the file when written, else (a task that generates its
    problems) generated in memory from `study.test_seed`; None when neither (checked at `run`)."""
    path = study.dir / "problems.jsonl"
    if path.is_file():
        return load_jsonl_strict(path), str(path)
    arm = next(iter(study.arms.values()))
    config = run_config(study, arm, study.train_sizes[0], study.test_seed)
    generated = generated_problems(config)
    label = f"{config.data.task} problems generated from study.test_seed = {study.test_seed} (as `run` will write them)"
    return generated, label


def check_problems(study: Study) -> dict[str, Any]:
    """Before anything is written: every training size fits the training split, the test set holds
    `study.min_test_problems` distinct problems and none of them is a training problem, and the dev
    split leaves training problems. Errors name the study file and the key."""
    problems, source = design_problems(study)
    if problems is None:
        return {"checked": False, "why": "the problems file is written at `run` (its task does not generate them)"}
    arm = next(iter(study.arms.values()))
    config = run_config(study, arm, study.train_sizes[0], study.test_seed)
    train = in_split(problems, config.data.train_split, source, "data.train_split")
    valid = in_split(problems, config.data.valid_split, source, "data.valid_split")
    trained = {content_key(p) for p in train}
    overlap = sum(content_key(p) in trained for p in valid)
    for size in study.train_sizes:
        if size > len(train):
            raise ConfigError(f"{study.path}: study.train_sizes: {size:,} but the training split of {source} has "
                              f"{len(train):,} problems", hint=f"every size <= {len(train):,} (0 = all of them)")
    held = _heldout_of(problems, config, source)
    test_contents = {content_key(p) for p in held}
    if study.min_test_problems and len(test_contents) < study.min_test_problems:
        raise ConfigError(f"{study.path}: study.min_test_problems: the test set has {len(test_contents)} distinct "
                          f"problems, fewer than {study.min_test_problems}",
                          hint="generate more problems (task.countdown.problems) or hold out more")
    out = {"checked": True, "source": source, "train_rows": len(train), "test_problems": len(held),
           "test_rows_dropped_as_training": overlap, "distinct_training_problems": len(trained)}
    if study.tune is not None:
        dev = _dev_contents(study, train, test_contents)
        if len(dev) < study.tune.dev_problems:
            raise ConfigError(f"{study.path}: tune.dev_problems: {study.tune.dev_problems} but the training split has "
                              f"{len(trained - test_contents)} distinct problems to carve them from")
        left = len(trained - test_contents - set(dev))
        if study.tune.train_size > sum(content_key(p) not in dev for p in train):
            raise ConfigError(f"{study.path}: tune.train_size: {study.tune.train_size:,} but the training split less "
                              f"the dev split has {sum(content_key(p) not in dev for p in train):,} rows")
        out.update(dev_problems=len(dev), distinct_training_problems_when_tuning=left)
    return out


def _heldout_of(problems: list[dict[str, Any]], config: Config, source: str) -> HeldOutSet:
    return select_heldout(problems, train_split=config.data.train_split, valid_split=config.data.valid_split,
                          count=config.run.eval_problems, seed=config.run.eval_problems_seed, source=source)


def _dev_contents(study: Study, train: list[dict[str, Any]], test_contents: set[str]) -> list[str]:
    """The dev split: `tune.dev_problems` distinct training problems (by content) drawn from
    study.test_seed, none of them a test problem."""
    assert study.tune is not None
    contents = sorted({content_key(p) for p in train} - test_contents)
    rng = study_dev_split_rng(study.test_seed)
    return sorted(rng.sample(contents, min(study.tune.dev_problems, len(contents))))


def test_set(config: Config) -> dict[str, Any]:
    """The held-out problems a run is scored on, fingerprinted by content (every field but the split);
    `heldout_sha256` is the fingerprint every run records in its held-out lines (eval/problems_sha256)."""
    problems = heldout_problems(config)
    rows = sorted(json.dumps({k: v for k, v in p.items() if k != "split"}, sort_keys=True) for p in problems)
    contents = {json.dumps({k: v for k, v in p.items() if k not in ("split", "id", "name")}, sort_keys=True)
                for p in problems}
    return {"problems": len(problems), "distinct_by_content": len(contents),
            "sha256": hashlib.sha256("\n".join(rows).encode("utf-8")).hexdigest(), "heldout_sha256": problems.sha256}


def write_problems(study: Study, reporter: Reporter = NULL_REPORTER) -> None:
    """The study's one problems file (from `study.test_seed`) and, with [tune], the tuning problems file."""
    problems_path = study.dir / "problems.jsonl"
    if not problems_path.exists():
        arm = next(iter(study.arms.values()))
        config = load_config(arm.config, [*arm.overrides, *tuned_overrides(study, arm.method),
                                          f"run.seed={study.test_seed}",
                                          f"data.problems={json.dumps(str(problems_path))}",
                                          f"run.dir={json.dumps(str(study.dir))}"])
        prepare_data(config, reporter=reporter)
        reporter.log(f"{problems_path}: the study's one problems file (run.seed = {study.test_seed})")
    if study.tune is not None and not (study.dir / "tune" / "problems.jsonl").exists():
        _write_tune_problems(study, reporter)


def _write_tune_problems(study: Study, reporter: Reporter) -> None:
    """`<dir>/tune/problems.jsonl`: the study's problems without the test set's rows, a dev split of
    `tune.dev_problems` training problems (by content) relabelled as the held-out split, the rest training."""
    problems = load_jsonl_strict(study.dir / "problems.jsonl")
    config = run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.test_seed)
    train_split, valid_split = config.data.train_split, config.data.valid_split
    test_contents = {content_key(p) for p in problems if p.get("split") == valid_split}
    train = [p for p in problems if p.get("split") == train_split]
    dev = set(_dev_contents(study, train, test_contents))
    rows = []
    for p in problems:
        content = content_key(p)
        if p.get("split") == valid_split or content in test_contents:
            continue   # the test set is not in the tuning file at all
        if content in dev:
            rows.append({**p, "split": valid_split})
        else:
            rows.append(p)
    write_jsonl_atomic(study.dir / "tune" / "problems.jsonl", rows)
    reporter.log(f"{study.dir / 'tune' / 'problems.jsonl'}: the tuning problems, {len(dev)} dev problems carved out "
                 f"of training as {valid_split!r}, the test set left out")


def dev_set(study: Study) -> dict[str, Any]:
    return test_set(tune_config(study, next(iter(study.tune.settings)), 0, study.tune.seeds[0]))  # type: ignore[union-attr]


def check_test_set_fresh(study: Study, fingerprint: dict[str, Any]) -> None:
    """Refuse a test set a tuning run was scored on (its recorded eval/problems_sha256), or that shares a
    problem with the dev split: fresh seeds do not make a reused test set fresh."""
    tune_dir = study.dir / "tune"
    for path in sorted((tune_dir / "runs").glob(f"*/k*/seed*/{METRICS_FILE}")) if tune_dir.exists() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                recorded = json.loads(line).get("eval/problems_sha256")
            except (ValueError, AttributeError):
                continue
            if recorded is not None and recorded == fingerprint.get("heldout_sha256"):
                raise InputError(f"{path}: this tuning run was scored on the study's test set (eval/problems_sha256 "
                                 f"{recorded}): a setting chosen on the test set cannot be tested on it",
                                 hint="tune on the dev split ([tune], tune/problems.jsonl), or start a new study.dir")
    tune_file = tune_dir / "problems.jsonl"
    if tune_file.exists() and study.tune is not None:
        config = run_config(study, next(iter(study.arms.values())), study.train_sizes[0], study.test_seed)
        dev = {content_key(p) for p in load_jsonl_strict(tune_file) if p.get("split") == config.data.valid_split}

        shared = dev & {content_key(p) for p in heldout_problems(config)}
        if shared:
            raise InputError(f"{tune_file}: {len(shared)} dev problems are also test problems: the test set was "
                             "used for tuning", hint="start the study in a new study.dir")
