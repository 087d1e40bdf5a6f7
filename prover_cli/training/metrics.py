"""metrics.jsonl: one line per iteration, the same schema for ES and GRPO (`prover report` reads it).

The keys both trainers write are built in one place, `metrics_line` (called through `Run.line`,
prover_cli/training/run.py, which carries the running totals across a resume); each trainer adds
only its own prefix (`es/*`, `grpo/*`) and the held-out `eval/*` keys.

Keys are grouped by prefix on one step axis (`iteration`), as in CleanRL:

| key | meaning |
|---|---|
| `iteration` | 1-based iteration (ES) or optimizer step (GRPO); 0 = the base's held-out evaluation (below) |
| `method` | `es` or `grpo` |
| `task` | `lean`, `countdown`, ... |
| `reward/mean`, `reward/max` | over all samples scored this iteration |
| `verify/verified` | samples with reward 1.0 (Lean: verified proofs) this iteration |
| `samples` | training samples generated and scored this iteration: every completion the update uses (ES: all members' samples, population x problems x samples per problem; GRPO: every completion of the step's groups) |
| `samples/total` | cumulative training samples: the budget `prover report` compares runs at |
| `tokens`, `tokens/total` | completion tokens of those samples, this iteration and cumulative: each scored completion text re-encoded by the policy's tokenizer (no special tokens), the same count for ES and GRPO and for every sampler and backend (it can differ from a sampler's own count by the end token) |
| `checks`, `checks/total` | task checks of those samples, this iteration and cumulative: one per scored completion (Lean: one verify request, whether its text pre-checks refused it or Lean ran) |
| `time/wall_s` | wall seconds of this iteration |
| `time/elapsed_s` | cumulative wall seconds |
| `es/update_norm` | ES only: L2 norm of the update applied (0 when skipped) |
| `es/skipped` | ES only: true when all rewards were equal and no update was made |
| `es/signal_var`, `es/noise_var` | ES only: this iteration's variance of the update's units' true rewards (pair differences with antithetic pairs; can read < 0) and the sampling-noise variance of one unit's reward, unbiased estimates from its sample rewards (prover_cli/es/signal.py, docs/ledger.md); absent with 1 sample per member |
| `es/signal_share` | ES only: the share of signal in the update's rewards, pooled over the last 5 iterations: sum signal_var / sum (signal_var + noise_var); 1 = signal, 0 = noise, below 0.5 mostly noise (the run warns once 5 iterations are pooled); absent while no reward varied |
| `grpo/loss`, `grpo/grad_norm`, `grpo/kl`, ... | GRPO only: TRL's own numbers for the step |
| `eval/verified_rate` | held-out evaluation of the current weights (`run.eval_every`; prover_cli/training/heldout.py), sampled: `run.eval_n` samples per problem at `run.eval_temperature`, verified samples / samples |
| `eval/verified_rate_lo`, `eval/verified_rate_hi` | its 95% interval (Wilson with the design effect of samples sharing a problem; prover_cli/comparison/stats.py) |
| `eval/greedy_verified_rate`, `_lo`, `_hi` | held-out, greedy: one sample per problem at temperature 0; verified problems / problems and its 95% interval (Wilson) |
| `eval/solved_rate`, `eval/reward_mean` | held-out, sampled: problems with a verified sample / problems; mean reward |
| `eval/verified`, `eval/greedy_verified`, `eval/samples`, `eval/problems` | held-out counts |
| `eval/by_problem` | held-out, per problem id: `[verified samples (sampled), verified (greedy, 0/1)]`; `prover report` pairs runs by it (not streamed to trackers) |
| `eval/wall_s` | held-out evaluation seconds (not counted in `time/wall_s` or `time/elapsed_s`) |
| `eval/problems_sha256` | fingerprint of the held-out problems evaluated (after deduplication); `prover report` refuses to pair evaluations whose fingerprints differ |
| `eval/duplicates_dropped`, `eval/train_overlap_dropped` | held-out rows left out: duplicates of another held-out problem by content, and rows equal to a training problem (prover_cli/tasks/problems.py) |

The `eval/*` keys appear only on the lines of the iterations that were evaluated (every
`run.eval_every` and the last one) and on the first line, **iteration 0**: the base model's
evaluation, before any training, written by ES and GRPO alike (the same numbers for runs from
the same base on the same problems: prover_cli/training/heldout.py caches it). That line has
`iteration`, `method`, `task`, `samples` = `samples/total` = 0 (and `tokens`, `checks` and their
totals 0), `time/wall_s` = `time/elapsed_s` = 0 and the `eval/*` keys, and no training keys
(`reward/*`, `verify/verified`). Held-out evaluation samples are never counted in `samples`,
`tokens` or `checks`: they are the same for both methods (same problems, same settings, same
evaluation budgets), so the training budget is what tells two runs apart (`eval/samples` counts
them per evaluation). Every line is also streamed to `run.report_to` (prover_cli/training/tracking.py),
with `iteration` as the step.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from prover_cli import __version__
from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import BadLine, finite_or_null, read_jsonl, write_text_atomic
from prover_cli.fsio.lock import claim_identity

if TYPE_CHECKING:
    from prover_cli.config import Config

METRICS_FILE = "metrics.jsonl"
REQUIRED_KEYS = ("iteration", "method", "task", "reward/mean", "reward/max", "verify/verified",
                 "samples", "samples/total", "time/wall_s", "time/elapsed_s")
BASE_REQUIRED_KEYS = ("iteration", "method", "task", "samples", "samples/total", "time/wall_s", "time/elapsed_s",
                      "eval/verified_rate")  # the iteration-0 line: the base's evaluation, no training


BUDGET_KEYS = ("tokens", "tokens/total", "checks", "checks/total")  # every trainer writes them (append_metrics);
# files written before they existed lack them, so readers (prover report) do not require them


@dataclasses.dataclass
class Totals:
    """A run's running totals (`samples/total`, `tokens/total`, `checks/total`, `time/elapsed_s`),
    carried across a resume: a resumed run continues them from its last kept line."""

    samples: int = 0
    tokens: int = 0
    checks: int = 0
    elapsed_s: float = 0.0

    @classmethod
    def after(cls, record: dict[str, Any]) -> Totals:
        """The totals as `record` (a run's last kept line; {} for none) left them."""
        return cls(samples=record.get("samples/total", 0), tokens=record.get("tokens/total", 0),
                   checks=record.get("checks/total", 0), elapsed_s=record.get("time/elapsed_s", 0.0))


def metrics_line(method: str, task: str, iteration: int, rewards: Sequence[float], *, tokens: int, wall_s: float,
                 totals: Totals) -> dict[str, Any]:
    """One trained iteration's line, the keys every trainer writes (rewards, verified, samples,
    tokens, checks, time), with `totals` advanced by this iteration: the one builder of the line
    ES and GRPO share (through `Run.line`, prover_cli/training/run.py). `rewards`: every sample
    scored this iteration (one task check each); `tokens`: their completion tokens
    (`completion_tokens`). The trainer adds the keys of its own prefix (`es/*`, `grpo/*`) and
    the held-out `eval/*` keys."""
    totals.samples += len(rewards)
    totals.tokens += tokens
    totals.checks += len(rewards)  # one task check per scored sample
    totals.elapsed_s += wall_s
    return {
        "iteration": iteration, "method": method, "task": task,
        "reward/mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "reward/max": max(rewards) if rewards else 0.0,
        "verify/verified": sum(1 for r in rewards if r == 1.0),
        "samples": len(rewards), "samples/total": totals.samples,
        "tokens": tokens, "tokens/total": totals.tokens,
        "checks": len(rewards), "checks/total": totals.checks,
        "time/wall_s": wall_s, "time/elapsed_s": totals.elapsed_s,
    }


def completion_tokens(tokenizer: Any, completions: list[str]) -> int:
    """Completion tokens of scored completion texts, as `tokens` counts them: re-encoded by the policy's
    tokenizer without special tokens, so ES and GRPO (and every sampler and backend) count alike."""
    if not completions:
        return 0
    return sum(len(ids) for ids in tokenizer(list(completions), add_special_tokens=False)["input_ids"])


def required_keys(record: dict[str, Any]) -> tuple[str, ...]:
    """The keys a metrics line must have: iteration 0 is the base's evaluation, the others training."""
    return BASE_REQUIRED_KEYS if record.get("iteration") == 0 else REQUIRED_KEYS


def training_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines of trained iterations (iteration >= 1), without the base's iteration-0 line."""
    return [r for r in records if r.get("iteration", 0) >= 1]


def append_metrics(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Append one iteration's metrics (flushed and fsynced: metrics survive a kill)."""
    budget = BUDGET_KEYS if record.get("iteration", 0) >= 1 else ()  # a trained iteration says what it consumed
    missing = [k for k in (*required_keys(record), *budget) if k not in record]
    if missing:
        raise ValueError(f"metrics record lacks {missing}")  # a bug in the trainer, not user input
    path = Path(run_dir) / METRICS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(finite_or_null(record), sort_keys=True, allow_nan=False)  # a diverged loss: null
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def truncate_metrics(run_dir: str | Path, last_iteration: int) -> None:
    """On resume: drop lines after `last_iteration` (written after the last ledger commit or
    checkpoint) and a torn last line; the kept lines stay byte for byte."""

    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line from a kill
        if isinstance(record, dict) and record.get("iteration", 0) <= last_iteration:
            kept.append(line)
    write_text_atomic(path, "".join(line + "\n" for line in kept))


def read_metrics(run_dir: str | Path, malformed: list[dict[str, Any]] | None = None, *,
                 defect: Callable[[dict[str, Any]], str | None] | None = None,
                 check: Callable[[int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """The records of a run's metrics.jsonl, in file order: the one reader (trainers, report, demo).

    A line that is not a JSON object (a torn last line from a kill), or that `defect` names a
    reason for, is skipped; with a `malformed` list it is also recorded there ({"line",
    "reason"}), for the caller to report. `check(line_number, record)` sees every kept record and
    may raise. Iterations that do not increase mean two runs in one file: always an InputError
    naming the line. A missing file has no records."""

    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return []
    records: list[dict[str, Any]] = []
    for line_no, record in read_jsonl(path):
        if isinstance(record, BadLine):
            reason: str | None = record.reason
        elif not isinstance(record, dict):
            reason = "not a JSON object"
        else:
            reason = defect(record) if defect is not None else None
        if reason is not None or not isinstance(record, dict):
            if malformed is not None:
                malformed.append({"line": line_no, "reason": reason})
            continue
        if records and isinstance(record.get("iteration"), (int, float)) and \
                isinstance(records[-1].get("iteration"), (int, float)) and record["iteration"] <= records[-1]["iteration"]:
            raise InputError(f"{path}:{line_no}: iteration {record['iteration']} after iteration "
                             f"{records[-1]['iteration']}; the file mixes two runs")
        if check is not None:
            check(line_no, record)
        records.append(record)
    return records


def methods_logged(run_dir: str | Path) -> set[Any]:
    """The `method` of every readable metrics line."""
    return {record.get("method") for record in read_metrics(run_dir)}


def write_resolved_config(config: Config) -> Path:
    """Write the resolved config into the run directory when a run starts: whole or not at all
    (temp file, then rename), since a resume compares the config with it."""

    path = Path(config.run.dir) / "config.toml"
    write_text_atomic(path, config.to_toml())
    # Which code made the run, beside its config: `prover study run` reuses a run only when both match.
    write_text_atomic(path.with_name(CODE_FILE), json.dumps(code_version(), sort_keys=True) + "\n")

    claim_identity(path.parent)  # the run dir exists now: lock its identity too (prover_cli/fsio/lock.py)
    return path


CODE_FILE = "code.json"  # {"prover": version, "git_commit": sha or null, "source_sha256": of prover_cli/**/*.py}


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """The code this process runs: the package version, the git commit of the checkout it runs
    from (None outside a git checkout), and a hash of the package's own .py files, which also
    tells apart two dirty trees at one commit. Taken once per process, so every run it starts
    records the same code."""
    import hashlib
    import subprocess

    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for source in sorted(package.rglob("*.py")):
        digest.update(source.relative_to(package).as_posix().encode() + b"\0" + source.read_bytes() + b"\0")
    try:
        done = subprocess.run(["git", "-C", str(package.parent), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        commit = done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"prover": __version__, "git_commit": commit, "source_sha256": digest.hexdigest()}
