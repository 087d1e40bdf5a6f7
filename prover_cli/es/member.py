"""ES members, and the held-out evaluation, away from the training loop (Modal GPU workers).

A worker keeps theta between calls: on each call it reads the ledger the loop has committed,
applies only the iterations it has not applied yet (checking each fingerprint, as replay does),
then perturbs, samples and restores with the same code the local loop runs
(`population.member_completions`). So a worker that joins late, or restarts, catches up from the
newest snapshot in the ledger (`es.snapshot_every`; the base model if none) and the ledger's
later iterations alone.

`heldout_at(config, iteration, record)` evaluates theta_iteration in a fresh process the same way:
the ledger's earlier iterations plus `record`, the loop's record of `iteration` that the ledger
file does not hold yet (it is written after the iteration's metrics line), then the library's
held-out evaluation (heldout.py) on the rebuilt weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prover_cli.errors import ReplayMismatchError
from prover_cli.es.ledger import LEDGER_FILE, read_ledger, record_rewards
from prover_cli.es.replay import _load_latest_snapshot
from prover_cli.es.population import load_es_sampler, member_completions
from prover_cli.es.update import apply_rewards
from prover_cli.progress import NULL_REPORTER
from prover_cli.tasks import get_task
from prover_cli.tasks.problems import heldout_problems
from prover_cli.training.heldout import evaluate_heldout

if TYPE_CHECKING:
    from prover_cli.config import Config


class MemberEvaluator:
    def __init__(self, config: Config):
        self.config = config
        self.task = get_task(config.data.task)
        self.sampler = load_es_sampler(config)
        self.weights = self.sampler.es_weights()
        self.applied = 0  # iterations of the ledger already in self.weights
        self.base_sha256 = self.weights.fingerprint()

    def catch_up(self, iteration: int, pending: dict[str, Any] | None = None) -> None:
        """Bring the weights to theta_{iteration-1}: the state every member of `iteration` perturbs.

        `pending`: the loop's record of iteration - 1, not in the ledger file yet; its fingerprint
        is checked like every other, so the weights are the loop's or this raises."""
        ledger_path = self.config.run_dir / LEDGER_FILE
        header, records = read_ledger(ledger_path)
        if pending is not None:
            if pending.get("i") != iteration - 1 or len(records) < iteration - 2:
                raise ReplayMismatchError(f"{ledger_path}: a pending record of iteration {pending.get('i')} "
                                          f"asked for with iteration {iteration} and {len(records)} in the ledger")
            records = records[:iteration - 2] + [pending]
        if header["base_model"]["sha256"] != self.base_sha256:
            raise ReplayMismatchError(f"{ledger_path}: this worker's base weights differ from the ledger's base model")
        if len(records) < iteration - 1:
            raise ReplayMismatchError(f"{ledger_path}: iteration {iteration} asked for, but the ledger has only "
                                      f"{len(records)} iterations (was the runs volume committed?)")
        if self.applied == 0:  # a cold worker: start from the newest intact snapshot, not the base
            self.applied = _load_latest_snapshot(self.weights, records[:iteration - 1], ledger_path)
        for record in records[self.applied:iteration - 1]:
            apply_rewards(self.weights, record_rewards(record), header["run_seed"], record["i"], header["es"])
            got = self.weights.fingerprint()[:len(record["fp"])]
            if got != record["fp"]:
                raise ReplayMismatchError(f"{ledger_path}: iteration {record['i']}: worker weights fingerprint "
                                          f"{got} != ledger {record['fp']}")
            self.applied = record["i"]

    def completions(self, *, iteration: int, member: int, problems: list[dict[str, Any]]) -> list[str]:
        if self.applied > iteration - 1:
            raise ReplayMismatchError(f"iteration {iteration} asked for after iteration {self.applied} was applied")
        self.catch_up(iteration)
        return member_completions(self.sampler, self.weights, self.task, problems, self.config, iteration, member)


def heldout_at(config: Config, iteration: int, record: dict[str, Any], *, reporter: Any = None) -> dict[str, Any]:
    """`evaluate_heldout` of theta_iteration, rebuilt here from the base (or the newest snapshot),
    the ledger and `record` (the loop's record of `iteration`): the same problems, sampling and
    numbers as the loop's own evaluation of its live weights (es/train.py)."""
    evaluator = MemberEvaluator(config)
    evaluator.catch_up(iteration + 1, pending=record)
    return evaluate_heldout(evaluator.sampler, config, heldout_problems(config), task=evaluator.task,
                            reporter=reporter or NULL_REPORTER)
