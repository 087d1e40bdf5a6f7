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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from prover_cli.errors import ConfigError
from prover_cli.es.ledger import (LEDGER_FILE, bytes_per_iteration, header_differences, make_header,
                                  make_record, read_ledger, reward_text, sha256_file, write_ledger)
from prover_cli.es.population import LocalPopulation, pick_problems
from prover_cli.es.replay import rebuild
from prover_cli.es.signal import iteration_variances, noise_warning, pooled_share, progress_field
from prover_cli.es.update import apply_rewards
from prover_cli.training.heldout import base_record, eval_due, evaluate_base
from prover_cli.fsio.jsonl import fsync_directory
from prover_cli.training.metrics import completion_tokens
from prover_cli.policy.model_dir import holds_weights
from prover_cli.tasks.problems import heldout_problems, train_problems
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.training.run import ResumePoint, Run
from prover_cli.training.tracking import open_tracker


# ---------------------------------------------------------------------------------------------
# Seeds, problems and members: es/population.py. Each iteration picks its problems from
# (run seed, iteration); every member samples them with theta + sign * sigma * eps_n at the
# iteration's one sampling seed, and all samples are scored in one batch (prover_cli/policy/rollout.py).
# Where the members run is the population's business (LocalPopulation: here, one after another;
# on_modal/functions.py ModalPopulation: GPU containers); the loop only reads what it returns.
# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# The loop: evaluate -> update -> metrics -> ledger (committed last, so a kill redoes at most
# the interrupted iteration; resume drops metrics lines the ledger does not have)
# Normalise and update are es/update.py's apply_rewards (z-scores or centered ranks of the
# rounded rewards, then theta += alpha/N * sum_n f_n eps_n), which replay runs on the ledger too
# ---------------------------------------------------------------------------------------------

def train_es(config: Any, *, resume: bool = False, reporter: Reporter = NULL_REPORTER,
             population: Any = None) -> dict[str, Any]:
    """`population`: where the members and the held-out evaluation run (es/population.py,
    LocalPopulation: here, the default); closed when the run ends or fails."""
    population = population if population is not None else LocalPopulation(config)
    with contextlib.closing(population):
        return _train(config, population, resume, reporter)


def _train(config: Any, population: Any, resume: bool, reporter: Reporter) -> dict[str, Any]:
    es = config.es
    ledger_path = config.run_dir / LEDGER_FILE
    run = Run.open(config, "es", total=es.iterations, total_key="es.iterations", resume=resume,
                   markers=[ledger_path], refusal="a ledger already exists", reporter=reporter)
    task = population.task
    problems = train_problems(config)
    config.check_problems_per_iteration(len(problems))  # before the model loads: names the key and the split size
    sampler = population.load_sampler()  # its weights are theta: the update below moves them in place
    weights = sampler.es_weights()
    problems_sha256 = hashlib.sha256(json.dumps(problems, sort_keys=True).encode()).hexdigest()
    header = make_header(es, model=config.model, generate=config.generate, run_seed=config.run.seed,
                         task=config.data.task, base_sha256=weights.fingerprint(), dtype=weights.dtype,
                         master_dtype=weights.master_dtype, problems_sha256=problems_sha256)
    point = run.resume(lambda: _resume(ledger_path, header, weights, reporter))
    records: list[dict[str, Any]] = point.state if point is not None else []
    if not run.complete:  # a complete run changes nothing in its directory
        write_ledger(ledger_path, header, records)
    counters = run.begin()
    samples_total, elapsed_s = counters["samples/total"], counters["time/elapsed_s"]
    tokens_total, checks_total = counters["tokens/total"], counters["checks/total"]
    # (es/signal_var, es/noise_var) of every line so far (None where undefined): pooled over the last few
    signal_parts = [(r["es/signal_var"], r["es/noise_var"]) if "es/noise_var" in r else None for r in run.records()]
    warning = None
    resumed_from = run.done
    heldout = heldout_problems(config) if config.run.eval_every else []  # fixed for the whole run

    with reporter.task("train es", total=es.iterations, unit="it") as bar, \
            open_tracker(config.run, hyperparameters=config.to_dict(), resumed_from=resumed_from) as tracker:
        if run.base_line_due(heldout):  # the weights are the base now
            run.write_metrics(base_record("es", config.data.task,
                                          evaluate_base(sampler, config, heldout, header["base_model"]["sha256"],
                                                        task=task, reporter=reporter)), tracker)
        bar.advance(resumed_from)
        for iteration in range(resumed_from + 1, es.iterations + 1):
            started = time.monotonic()
            batch = pick_problems(problems, config.run.seed, iteration, es.problems_per_iteration)
            member_rewards, sample_rewards, completions = population.evaluate(iteration, batch, reporter)
            texts = [reward_text(r) for r in member_rewards]
            signal_parts.append(iteration_variances(sample_rewards, es.population, es.antithetic))
            norm, skipped = apply_rewards(weights, [float(t) for t in texts], config.run.seed, iteration,
                                          header["es"])
            fingerprint = weights.fingerprint()
            snapshot = None
            if es.snapshot_every and iteration % es.snapshot_every == 0:
                snapshot = _save_snapshot(weights, run.dir)
            wall_s = time.monotonic() - started
            samples_total += len(sample_rewards)
            tokens = completion_tokens(sampler.tokenizer, completions)  # every member's samples: the budget
            tokens_total += tokens
            checks_total += len(sample_rewards)  # one task check per scored sample
            elapsed_s += wall_s
            mean_reward = sum(sample_rewards) / len(sample_rewards)
            metrics = {
                "iteration": iteration, "method": "es", "task": config.data.task,
                "reward/mean": mean_reward, "reward/max": max(sample_rewards),
                "verify/verified": sum(r == 1.0 for r in sample_rewards),
                "samples": len(sample_rewards), "samples/total": samples_total,
                "tokens": tokens, "tokens/total": tokens_total,
                "checks": len(sample_rewards), "checks/total": checks_total,
                "time/wall_s": wall_s, "time/elapsed_s": elapsed_s,
                "es/update_norm": norm, "es/skipped": skipped,
            }
            share = pooled_share(signal_parts)
            if signal_parts[-1] is not None:
                metrics.update({"es/signal_var": signal_parts[-1][0], "es/noise_var": signal_parts[-1][1]})
            if share is not None:
                metrics["es/signal_share"] = share
            record = make_record(iteration, texts, fingerprint, skipped, snapshot)
            if eval_due(config, iteration, es.iterations):  # theta_iteration: the ledger holds `record` only
                metrics.update(population.heldout(iteration, record, heldout, reporter))  # after this line
            run.write_metrics(metrics, tracker)
            records.append(record)
            write_ledger(ledger_path, header, records)
            alert = noise_warning(signal_parts, es)
            if alert and not warning:  # said once each time it starts; the progress line flags it throughout
                reporter.log(f"Warning (iteration {iteration}): {alert}")
            warning = alert
            # the last 5 iterations' share ± its error, then the whole run's: the window's sign is noise
            # near 0 (es/signal.py: progress_field); the run's is the figure to set beside the probe's
            bar.advance(1, reward=f"{mean_reward:.3f}", skipped=skipped, signal=progress_field(signal_parts, warning))

    if run.complete:  # final/ already holds these weights, unless a kill came before the last save
        run.settle_final(lambda d: holds_weights(d, weights.base), sampler.save_pretrained, source=ledger_path.name)
    else:
        run.save_final(sampler.save_pretrained)
    last = run.last_record()
    summary_warning = noise_warning(signal_parts, es, minimum=1)  # however short the run
    return {
        "ok": True,
        "iterations": len(records),
        "resumed_from": resumed_from,
        "reward/mean_last": last.get("reward/mean"),
        "signal_share": pooled_share(signal_parts),
        **({"warning": summary_warning} if summary_warning else {}),
        "ledger": str(ledger_path),
        "ledger_bytes_per_iteration": round(bytes_per_iteration(header, records), 1),
        "final": str(run.final_dir),
        "fingerprint": weights.fingerprint()[:16],
    }


def _resume(ledger_path: Path, header: dict[str, Any], weights: Any, reporter: Reporter) -> ResumePoint | None:
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


def _save_snapshot(weights: Any, run_dir: Path) -> str:
    """Write the weights as snapshots/<sha256 of the file>.safetensors; returns that sha256."""
    incoming = run_dir / "snapshots" / "incoming.safetensors"
    weights.save(incoming)
    digest = sha256_file(incoming)
    incoming.replace(incoming.with_name(f"{digest}.safetensors"))  # the same bytes under their own name
    fsync_directory(incoming.parent)  # the rename is durable before the ledger names the snapshot
    return digest
