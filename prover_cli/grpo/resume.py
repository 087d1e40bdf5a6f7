"""GRPO's resume: the run directory opened or refused, the newest whole checkpoint to continue from,
the checkpoint's files and the config checked against the run's (prover_cli/training/run.py does the rest).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from prover_cli.config import tomllib  # tomli on Python 3.10
from prover_cli.errors import ConfigError, InputError
from prover_cli.policy.model_dir import check_safetensors
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.training.run import ResumePoint, Run

if TYPE_CHECKING:
    from prover_cli.config import Config

METHOD = "grpo"
CHECKPOINTS_DIR = "checkpoints"  # TRL's output_dir: checkpoint-<step>/ folders
KEEP_CHECKPOINTS = 2  # the newest may be torn by a kill mid-save; the one before it is whole



# --------------------------------------------------------------------------------------------
# Resuming: GRPO continues from the newest whole checkpoint (prover_cli/training/run.py does the rest)
# --------------------------------------------------------------------------------------------

# Config keys a resume may change: how far to train, how often to save, where `tiny` is cached.
# Every other key of these sections shapes the trajectory, so a resume must not change it.
RESUME_CHECKED_SECTIONS = ("grpo", "model", "data", "task")  # task: `[task.<name>]`, one value per table
RESUME_CHECKED_KEYS = ("run.seed", "generate.top_p")
RESUME_MAY_CHANGE = ("grpo.steps", "grpo.save_every", "model.cache_dir")


def open_run(config: Config, resume: bool, reporter: Reporter = NULL_REPORTER) -> Run:
    """The GRPO run directory (prover_cli/training/run.py): without --resume, metrics.jsonl or checkpoints/
    already there are refused rather than overwritten."""

    return Run.open(config, METHOD, total=config.grpo.steps, total_key="grpo.steps", resume=resume,
                    markers=[config.run_dir / "metrics.jsonl", config.run_dir / CHECKPOINTS_DIR],
                    refusal="run.dir already holds a GRPO run", reporter=reporter)


def start_or_resume(config: Config, resume: bool, reporter: Reporter = NULL_REPORTER) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start; metrics.jsonl cut to match."""
    point = open_run(config, resume, reporter).resume(lambda: checkpoint_point(config, reporter))
    return point.source if point is not None else None


def checkpoint_point(config: Config, reporter: Reporter = NULL_REPORTER) -> ResumePoint | None:
    """GRPO's resume point: the newest whole checkpoint, once the config and the checkpoint's
    files are checked; None (from the base model) when there is none."""

    checkpoints = config.run_dir / CHECKPOINTS_DIR
    checkpoint = latest_checkpoint(checkpoints)
    if checkpoint is None:
        reporter.log(f"{checkpoints}: no checkpoint to resume from; starting from the base model")
        return None
    check_resume_config(config, config.run_dir / "config.toml")
    check_checkpoint(checkpoint)
    step = checkpoint_step(checkpoint)
    if step > config.grpo.steps:
        raise ConfigError(f"{checkpoint}: the checkpoint is at step {step}, past grpo.steps = {config.grpo.steps}",
                          hint="raise grpo.steps, or start a new run.dir")
    if step < config.grpo.steps:
        reporter.log(f"resuming from {checkpoint} (step {step} of {config.grpo.steps})")
    return ResumePoint(step, checkpoint)


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def latest_checkpoint(checkpoints: Path) -> Path | None:
    """The newest `checkpoint-<step>` the Trainer finished writing.

    The Trainer writes `trainer_state.json` last, after weights, optimizer and RNG states; a
    kill during a save leaves a folder without it (or with a torn one), which is skipped."""
    if not checkpoints.is_dir():
        return None
    found = sorted((p for p in checkpoints.glob("checkpoint-*") if p.name.rsplit("-", 1)[1].isdigit()),
                   key=checkpoint_step, reverse=True)
    for path in found:
        try:
            json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        return path
    return None


def check_checkpoint(checkpoint: Path) -> None:
    """InputError naming a file of the checkpoint to resume from that the Trainer could not read
    (a hand-damaged or cut one; a kill mid-save leaves no trainer_state.json and is skipped)."""
    import zipfile

    for path in sorted(checkpoint.iterdir()):
        if path.suffix == ".safetensors":
            check_safetensors(path)
        elif path.suffix in (".pt", ".pth", ".bin"):  # torch.save files are zip archives
            try:
                with zipfile.ZipFile(path):
                    pass
            except (zipfile.BadZipFile, OSError) as exc:
                raise InputError(f"{path}: not a readable torch.save file ({exc})",
                                 hint=f"move {checkpoint.name} away to resume from the checkpoint before it") from None


def check_resume_config(config: Config, stored_path: Path) -> None:
    """ConfigError naming every key whose value differs from the run's `config.toml`."""

    if not stored_path.exists():
        return  # nothing recorded to compare with (written at every start, so only if deleted)
    try:
        stored = tomllib.loads(stored_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{stored_path}: not valid TOML: {exc}") from None
    current = tomllib.loads(config.to_toml())  # the same serialisation on both sides
    keys = [f"{section}.{key}" for section in RESUME_CHECKED_SECTIONS for key in current.get(section, {})]
    differences = []
    for dotted in [*keys, *RESUME_CHECKED_KEYS]:
        section, key = dotted.split(".", 1)
        if dotted in RESUME_MAY_CHANGE or key not in stored.get(section, {}):
            continue  # keys the stored config predates are not compared
        if stored[section][key] != current[section][key]:
            differences.append(f"{dotted}: run {stored[section][key]!r} != config {current[section][key]!r}")
    if differences:
        raise ConfigError(f"{stored_path}: cannot resume, the config differs from the run's: " + "; ".join(differences),
                          hint="restore those values, or start a new run.dir")
