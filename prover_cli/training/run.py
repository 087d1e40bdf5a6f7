"""The run directory's lifecycle, one for both trainers (`train es`, `train grpo`).

    run = Run.open(config, "es", total=es.iterations, total_key="es.iterations", resume=resume,
                   markers=[ledger_path], refusal="a ledger already exists")
    point = run.resume(find_point)          # the trainer's own: ES reads its ledger, GRPO its checkpoint;
                                            # metrics.jsonl cut to the point
    run.begin()                             # config.toml + code.json written; run.totals: samples/total etc. so far
    if run.base_line_due(heldout): run.write_metrics(base_record(...), tracker)
    ... the trainer's loop, per iteration:
        line = run.line(iteration, sample_rewards, tokens=..., wall_s=...)   # the shared keys, totals advanced
        run.write_metrics({**line, "es/...": ...}, tracker)
    run.save_final(write)                   # or, on a complete run, run.settle_final(holds, write, source)

What it owns, and the rules:
- create or refuse: without --resume, a run directory holding one of the trainer's markers (ES:
  the ledger; GRPO: metrics.jsonl or checkpoints/) is refused, never overwritten; with or
  without it, metrics of another method are refused (a resume would cut them).
- resume: only the trainer knows where it can continue from, so it passes a function returning a
  `ResumePoint` (or None: from the base); the Run cuts metrics.jsonl to that point (lines written
  after it are redone) and says whether the run is complete (the point is at the configured end:
  nothing trains, nothing in the directory changes).
- the base line: the iteration-0 held-out evaluation of the base, written once per run.
- metrics: `line` builds the keys both trainers share (metrics.metrics_line) and carries the
  running totals (`samples/total`, `tokens/total`, `checks/total`, `time/elapsed_s`) across a
  resume; `write_metrics` is the one writer (metrics.append_metrics, then the tracker) and
  `records` the one reader (metrics.read_metrics).
- final/: whole or not at all (model_dir.save_atomically); weights holding NaN or inf are refused
  before anything is written and the old final/ is kept.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from prover_cli.errors import InputError
from prover_cli.policy.model_dir import save_atomically
from prover_cli.training.metrics import (METRICS_FILE, Totals, append_metrics, methods_logged, metrics_line,
                                         read_metrics, truncate_metrics, write_resolved_config)
from prover_cli.progress import NULL_REPORTER, Reporter

if TYPE_CHECKING:
    from prover_cli.config import Config

FINAL_DIR = "final"


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run continues: `done` iterations (ES) or optimizer steps (GRPO) are kept."""

    done: int
    source: Path  # what they were read from (the ledger, the checkpoint): named in messages
    state: Any = None  # the trainer's own (ES: the ledger's records)


class Run:
    """One run directory (`run.dir`) of one trainer; see the module docstring."""

    def __init__(self, config: Config, method: str, *, total: int, total_key: str, resume: bool,
                 reporter: Reporter = NULL_REPORTER):
        self.config, self.method, self.total, self.total_key = config, method, total, total_key
        self.resume_requested, self.reporter = resume, reporter
        self.dir = Path(config.run_dir)
        self.metrics_path = self.dir / METRICS_FILE
        self.final_dir = self.dir / FINAL_DIR
        self.point: ResumePoint | None = None
        self.totals = Totals()  # the running totals of the metrics line: from the last kept line (begin)

    # -- create or refuse ---------------------------------------------------------------------

    @classmethod
    def open(cls, config: Config, method: str, *, total: int, total_key: str, resume: bool,
             markers: Iterable[Path], refusal: str, reporter: Reporter = NULL_REPORTER) -> "Run":
        """The run, or InputError when it would overwrite one: `refusal` says what `markers` hold."""
        run = cls(config, method, total=total, total_key=total_key, resume=resume, reporter=reporter)
        existing = [path for path in markers if path.exists()]
        if existing and not resume:
            raise InputError(f"{existing[0]}: {refusal}",
                             hint="pass --resume to continue it, or set run.dir to a new directory")
        others = methods_logged(run.dir) - {method}
        if others:
            named = ", ".join(sorted(map(str, others)))
            raise InputError(f"{run.metrics_path}: run.dir holds metrics of method {named}, not of {method.upper()}",
                             hint="set run.dir to a new directory")
        return run

    # -- resume ---------------------------------------------------------------------------------

    def resume(self, find_point: Callable[[], ResumePoint | None]) -> ResumePoint | None:
        """The point to continue from (None: from the base; always None without --resume).

        `find_point` checks that the run can continue under this config (the trainer's resume
        check: it raises ConfigError naming what differs). metrics.jsonl is cut to the point,
        unless the run is complete: then nothing is changed."""
        self.point = find_point() if self.resume_requested else None
        if self.point is not None and self.complete:
            self.reporter.log(f"{self.dir}: the run is complete ({self.point.source.name} is at {self.total_key} = "
                              f"{self.total}); nothing to train. Raise {self.total_key} and pass --resume to train "
                              "further.")
        else:
            truncate_metrics(self.dir, self.done)
        return self.point

    @property
    def done(self) -> int:
        """Iterations kept from before this process (0 for a fresh start)."""
        return self.point.done if self.point is not None else 0

    @property
    def complete(self) -> bool:
        return self.point is not None and self.point.done == self.total

    def begin(self) -> Totals:
        """Record the resolved config (and code), unless the run is complete, and set the running
        totals to continue from (the last kept line's)."""

        if not self.complete:
            write_resolved_config(self.config)
        self.totals = Totals.after(self.last_record())
        return self.totals

    # -- metrics: the one writer and the one reader ----------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        return read_metrics(self.dir)

    def last_record(self) -> dict[str, Any]:
        records = self.records()
        return records[-1] if records else {}

    def line(self, iteration: int, rewards: Sequence[float], *, tokens: int, wall_s: float) -> dict[str, Any]:
        """The metrics line of a trained iteration: the keys both trainers share, built by the one
        builder (metrics.metrics_line), with the run's totals advanced by it."""
        return metrics_line(self.method, self.config.data.task, iteration, rewards, tokens=tokens, wall_s=wall_s,
                            totals=self.totals)

    def write_metrics(self, record: dict[str, Any], tracker: Any = None) -> None:
        """Append one line to metrics.jsonl (fsynced) and stream it to the run's trackers."""
        append_metrics(self.dir, record)
        if tracker is not None:
            tracker.log(record)

    def base_line_due(self, heldout: list[dict[str, Any]]) -> bool:
        """Whether the base's iteration-0 evaluation is still to be written: held-out problems are
        set, no iteration has been trained (the weights are the base), and no earlier, killed
        start of this run wrote it (a resume keeps it)."""
        return bool(heldout) and self.done == 0 and not any(r.get("iteration") == 0 for r in self.records())

    # -- final/ -----------------------------------------------------------------------------------

    def save_final(self, write: Callable[[Path], None]) -> None:
        """final/ := what `write(directory)` saves, whole or not at all (model_dir.save_atomically)."""

        save_atomically(self.final_dir, write)

    def settle_final(self, holds: Callable[[Path], bool], write: Callable[[Path], None], source: str) -> None:
        """On a complete run: final/ must hold the run's last weights. Kept untouched when it does;
        rewritten from `source` when a kill before the final save left it missing, or holding the
        previous end of an extended run."""
        if not self.final_dir.is_dir():
            self.save_final(write)
            self.reporter.log(f"{self.final_dir}: was missing; written from {source}")
        elif not holds(self.final_dir):
            self.save_final(write)
            self.reporter.log(f"{self.final_dir}: did not hold the weights of {source} (a kill before the final "
                              "save); rewritten from it")
