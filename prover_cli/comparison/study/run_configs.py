"""Each run's resolved config and directory: a test run (arm x size x seed, the tuned setting applied)
and a tuning run (method x setting x seed on the dev split), and the training samples it consumes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prover_cli.comparison.study.design import Arm, Study
from prover_cli.config import Config, load_config
from prover_cli.demo import sample_budgets
from prover_cli.errors import ConfigError


def tuned_overrides(study: Study, method: str) -> list[str]:
    """The tuned setting of `method` applied to its arms: the frozen choice, or (before tuning) setting 0,
    which stands in only for planning (budgets, costs): no test-set run starts before the choice."""
    if study.tune is None or method not in study.tune.settings:
        return []
    index = (study.chosen or {}).get(method, 0)
    return list(study.tune.settings[method][index])


def run_config(study: Study, arm: Arm, size: int, seed: int) -> Config:
    """The resolved config of one run: the arm's base config, the study's and arm's overrides, the tuned
    setting of its method, then the keys the study sets (seed, directory, training-set size, the problems file)."""
    return _load(study, arm, [*arm.overrides, *tuned_overrides(study, arm.method)], seed, size,
                 study.dir / "problems.jsonl", run_dir(study, arm.name, size, seed), where=f"arms.{arm.name}")


def _load(study: Study, arm: Arm, overrides: list[str], seed: int, size: int, problems: Path, directory: Path,
          where: str) -> Config:
    """`arm.config` with `overrides`, then the keys the study sets; a config error names the study key `where`."""
    sets = [*overrides, f"run.seed={seed}", f"data.train_size={size}", f"data.problems={json.dumps(str(problems))}",
            f"run.dir={json.dumps(str(directory))}"]
    try:
        return load_config(arm.config, sets)
    except ConfigError as exc:
        raise ConfigError(f"{study.path}: {where}: {exc}", hint=exc.hint) from None


def run_dir(study: Study, arm: str, size: int, seed: int) -> Path:
    return study.dir / "runs" / arm / f"n{size}" / f"seed{seed}"


def tune_arm(study: Study, method: str) -> Arm:
    """The arm a method is tuned as: its first arm that is not a null control."""
    return next(a for a in study.arms.values() if a.method == method and not a.null)


def tune_config(study: Study, method: str, index: int, seed: int) -> Config:
    """One tuning run: the method's arm with setting `index`, on the tuning problems (dev split held out)."""
    assert study.tune is not None
    arm = tune_arm(study, method)
    directory = study.dir / "tune" / "runs" / method / f"k{index}" / f"seed{seed}"
    return _load(study, arm, [*arm.overrides, *study.tune.settings[method][index], *study.tune.overrides], seed,
                 study.tune.train_size, study.dir / "tune" / "problems.jsonl", directory, where=f"tune.{method}[{index}]")


def samples_of(config: Config, method: str) -> int:
    """The run's training budget in samples (what `prover report` compares; held-out not counted)."""
    return sample_budgets(config)[method]


def same_evaluation(config: Config) -> dict[str, Any]:
    """Everything that decides the test set and how it is scored: the same in every arm."""
    return {"data.task": config.data.task, "data.valid_split": config.data.valid_split,
            "data.train_split": config.data.train_split, "run.eval_problems": config.run.eval_problems,
            "run.eval_problems_seed": getattr(config.run, "eval_problems_seed", None),
            "run.eval_n": config.run.eval_n, "run.eval_temperature": config.run.eval_temperature,
            "generate.max_tokens": config.generate.max_tokens, "model.name": config.model.name}
