"""`prover train es`: Evolution Strategies whose whole state is the base model plus a seed ledger.

    prover train es --config configs/demo.toml            # run.dir/{ledger.json,metrics.jsonl,final/}
    prover train es --config configs/demo.toml --resume   # continue; ends bit-identical to a full run
    prover replay-seeds runs/demo/ledger.json --out DIR   # rebuild final/ from the base + ledger

One iteration (Qiu et al. 2025, "Evolution Strategies at Scale", Algorithm 1):

    for each member n = 1..N:  theta_n = theta + sigma * eps_n;  R_n = mean reward of its samples
    f = zscore(R)  (or centered ranks); if every R_n is equal, skip the update and record it
    theta <- theta + alpha * (1/N) * sum_n f_n * eps_n

eps is unit-variance noise and is NOT scaled by sigma in the update: as in the paper, the step
alpha (es.learning_rate) absorbs the 1/sigma of the gradient estimate.

Where we depart from the paper, and why:
- Noise is a counter-based integer hash mapped to an Irwin-Hall(4) variate, not torch.randn
  (es/noise/full.py): bit-identical on every device and thread count, so a ledger replays anywhere.
  ES needs zero-mean, unit-variance, independent noise, not Gaussian noise. Every tensor has its
  own stream, keyed by (seed, tensor name).
- Antithetic pairs (es.antithetic, default on): members 2k and 2k+1 use +eps_k and -eps_k, which
  lowers the variance of the estimate and halves the noise the update regenerates.
- ES keeps an fp32 master of the weights (es/weights.py): members are cast(master + sigma*eps)
  in the model's dtype, and the update is accumulated in fp32 over members in a fixed order and
  added to the fp32 master, so with bf16/fp16 models small steps add up instead of rounding away.
- All members of an iteration share one sampling seed (common random numbers): their rewards
  differ by their weights, not by sampling luck. Members are scored at `es.member_temperature`,
  by default 0 (greedy), the paper's choice; > 0 samples them (docs/ledger.md: the evidence).
- `es.shuffle_rewards` (a null control, not a method): the members' rewards are permuted by a
  seeded permutation before shaping, so the update is noise with the real rewards' spread. The
  ledger keeps the true rewards; the header says they were shuffled and replay does the same.
- Member rewards are rounded to 3 decimals before normalising: the ledger stores them exactly
  (integer numerators over 1000), and training uses exactly what replay will read.
- Options, off by default: `es.noise = "lowrank"` perturbs each matrix by A B^T / sqrt(es.rank)
  from the member's seed (EGGROLL, es/noise/lowrank.py; recorded in the ledger), and
  `es.batched_members = k` generates k members in one batched call (es/batched.py; the population
  evaluates them, so the loop below is the same).

Every iteration also estimates how much of its update is signal rather than sampling noise
(`es/signal_share`, es/signal.py) from the sample rewards it already has, and warns when the last
few iterations were mostly noise; `prover train es --probe` (es/probe.py) measures it before training.

Who does what: each iteration picks its problems from (run seed, iteration) and the population
(es/population.py: here, or Modal's GPU containers) samples them with every member's weights at
the iteration's one sampling seed and scores them in one batch; es/update.py's `apply_rewards`
normalises the rounded rewards and updates theta, as replay does from the ledger; the run's
directory, metrics line and final/ are prover_cli/training/run.py's, the signal diagnostic
es/signal.py's `SignalMonitor`, the held-out schedule training/heldout.py's `HeldOutSchedule`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli.errors import ConfigError
from prover_cli.es.ledger import (LEDGER_FILE, bytes_per_iteration, header_differences, make_header,
                                  make_record, read_ledger, reward_text, sha256_file, write_ledger)
from prover_cli.es.population import LocalPopulation, pick_problems
from prover_cli.es.replay import rebuild
from prover_cli.es.signal import SignalMonitor
from prover_cli.es.update import apply_rewards
from prover_cli.es.weights import ESWeights
from prover_cli.fsio.jsonl import fsync_directory
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks.problems import train_problems
from prover_cli.training.heldout import HeldOutSchedule, evaluate_base
from prover_cli.training.metrics import completion_tokens
from prover_cli.training.run import ResumePoint, Run
from prover_cli.training.tracking import open_tracker

if TYPE_CHECKING:
    from prover_cli.config import Config, ESConfig


def train_es(config: Config, *, resume: bool = False, reporter: Reporter = NULL_REPORTER,
             population: LocalPopulation | None = None) -> dict[str, Any]:
    """`population`: where the members and the held-out evaluation run (es/population.py,
    LocalPopulation: here, the default; on_modal/functions.py ModalPopulation: GPU containers);
    closed when the run ends or fails."""
    population = population if population is not None else LocalPopulation(config)
    with contextlib.closing(population):
        return _train(config, population, resume, reporter)


def _train(config: Config, population: LocalPopulation, resume: bool, reporter: Reporter) -> dict[str, Any]:
    # Setup: the run directory, the problems, theta (the sampler's weights: the update moves them in
    # place), the ledger's header, and the point a --resume continues from (theta rebuilt to it).
    es, ledger_path = config.es, config.run_dir / LEDGER_FILE
    run = Run.open(config, "es", total=es.iterations, total_key="es.iterations", resume=resume,
                   markers=[ledger_path], refusal="a ledger already exists", reporter=reporter)
    problems = train_problems(config)
    config.check_problems_per_iteration(len(problems))  # before the model loads: names the key and the split size
    sampler = population.load_sampler()
    weights = sampler.es_weights()
    header = _header(config, weights, problems)
    point = run.resume(lambda: _resume(ledger_path, header, weights, reporter))
    records: list[dict[str, Any]] = point.state if point is not None else []
    if not run.complete:  # a complete run changes nothing in its directory
        write_ledger(ledger_path, header, records)
    run.begin()  # the metrics line's running totals continue from the last kept line
    signal = SignalMonitor(es, run.records())
    heldout = HeldOutSchedule(config, es.iterations)

    # The loop: evaluate the members -> update -> metrics -> ledger (committed last, so a kill redoes
    # at most the interrupted iteration; a resume drops the metrics lines the ledger does not have).
    with reporter.task("train es", total=es.iterations, unit="it") as bar, \
            open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=run.done) as tracker:
        heldout.write_base_line(run, lambda problems: evaluate_base(  # the weights are the base now
            sampler, config, problems, header["base_model"]["sha256"], task=population.task, reporter=reporter), tracker)
        bar.advance(run.done)
        for iteration in range(run.done + 1, es.iterations + 1):
            started = time.monotonic()
            batch = pick_problems(problems, config.run.seed, iteration, es.problems_per_iteration)
            member_rewards, sample_rewards, completions = population.evaluate(iteration, batch, reporter)
            texts = [reward_text(r) for r in member_rewards]  # what the ledger stores, and the update reads
            norm, skipped = apply_rewards(weights, [float(t) for t in texts], config.run.seed, iteration, header["es"])
            record = make_record(iteration, texts, weights.fingerprint(), skipped, _snapshot(weights, run.dir, iteration, es))
            line = es_line(run, signal, iteration, sample_rewards, completions, sampler.tokenizer,
                           wall_s=time.monotonic() - started, norm=norm, skipped=skipped)
            line.update(heldout.keys(iteration,  # theta_iteration: the ledger holds `record` only after this line
                                     lambda problems: population.heldout(iteration, record, problems, reporter)))
            run.write_metrics(line, tracker)
            records.append(record)
            write_ledger(ledger_path, header, records)
            signal.warn(iteration, reporter)
            bar.advance(1, reward=f"{line['reward/mean']:.3f}", skipped=skipped, signal=signal.progress())

    # Final: final/ holds theta; on a complete run it already does, unless a kill came before the last save.
    if run.complete:
        run.settle_final(weights.holds, sampler.save_pretrained, source=ledger_path.name)
    else:
        run.save_final(sampler.save_pretrained)
    return {
        "ok": True,
        "iterations": len(records),
        "resumed_from": run.done,
        "reward/mean_last": run.last_record().get("reward/mean"),
        **signal.summary(),
        "ledger": str(ledger_path),
        "ledger_bytes_per_iteration": round(bytes_per_iteration(header, records), 1),
        "final": str(run.final_dir),
        "fingerprint": weights.fingerprint()[:16],
    }


def es_line(run: Run, signal: SignalMonitor, iteration: int, sample_rewards: list[float], completions: list[str],
            tokenizer: Any, *, wall_s: float, norm: float, skipped: bool) -> dict[str, Any]:
    """One iteration's metrics line: the keys GRPO's lines have too, from the run's one builder
    (`Run.line`; the budget is every member's samples and their tokens), then ES's own `es/*` keys."""
    line = run.line(iteration, sample_rewards, tokens=completion_tokens(tokenizer, completions), wall_s=wall_s)
    return {**line, "es/update_norm": norm, "es/skipped": skipped, **signal.observe(sample_rewards)}


def _header(config: Config, weights: ESWeights, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """The ledger's header: everything a replay needs to rebuild theta from the base, and a resume checks."""
    problems_sha256 = hashlib.sha256(json.dumps(problems, sort_keys=True).encode()).hexdigest()
    return make_header(config.es, model=config.model, generate=config.generate, run_seed=config.run.seed,
                       task=config.data.task, base_sha256=weights.fingerprint(), dtype=weights.dtype,
                       master_dtype=weights.master_dtype, problems_sha256=problems_sha256)


def _resume(ledger_path: Path, header: dict[str, Any], weights: ESWeights, reporter: Reporter) -> ResumePoint | None:
    """ES resumes by its ledger: the stored header must match this config's and the ledger must not
    be longer than es.iterations; then the weights are rebuilt from it (checking every
    fingerprint). The point's state is the ledger's records; None when there is no ledger yet."""
    if not ledger_path.exists():
        return None
    stored, records = read_ledger(ledger_path)
    differences = header_differences(stored, header)
    if differences:
        raise ConfigError(f"{ledger_path}: cannot resume, the config differs from the ledger: "
                          + "; ".join(differences), hint="restore those config values, or start a new run.dir")
    if len(records) > header["es"]["iterations"]:
        raise ConfigError(f"{ledger_path}: the ledger has {len(records)} iterations, more than es.iterations = "
                          f"{header['es']['iterations']}",
                          hint="raise es.iterations, or use `prover replay-seeds --upto`")
    rebuild(weights, stored, records, ledger_path=ledger_path, reporter=reporter)
    return ResumePoint(len(records), ledger_path, state=records)


def _snapshot(weights: ESWeights, run_dir: Path, iteration: int, es: ESConfig) -> str | None:
    """Every `es.snapshot_every` iterations, the weights as snapshots/<sha256 of the file>.safetensors;
    returns that sha256 (None on the other iterations)."""
    if not (es.snapshot_every and iteration % es.snapshot_every == 0):
        return None
    incoming = run_dir / "snapshots" / "incoming.safetensors"
    weights.save(incoming)
    digest = sha256_file(incoming)
    incoming.replace(incoming.with_name(f"{digest}.safetensors"))  # the same bytes under their own name
    fsync_directory(incoming.parent)  # the rename is durable before the ledger names the snapshot
    return digest
