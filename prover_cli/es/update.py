"""One ES iteration's update from its member rewards: what training, replay and workers share.

    apply_rewards(weights, rewards, run_seed, iteration, es)   # es: the ledger header's "es" dict

A ledger record holds an iteration's member rewards; this module turns them into the weights'
update exactly as `prover train es` did (es/train.py, the loop), so `prover replay-seeds` and
`--resume` (es/replay.py) and a remote member worker (es/member.py) rebuild the same bits from
the ledger alone. Everything here is a pure function of (run seed, iteration, member, rewards).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence, cast

from prover_cli import streams
from prover_cli.errors import InputError
from prover_cli.es.noise import lowrank
from prover_cli.es.noise.full import fp32

if TYPE_CHECKING:
    from prover_cli.config import ESConfig
    from prover_cli.es.weights import ESWeights, NamedWeights


# ---------------------------------------------------------------------------------------------
# Seeds: every random choice is a pure function of (run seed, iteration, member), by its stream
# in prover_cli/streams.py (`es-noise`, `es-shuffle`)
# ---------------------------------------------------------------------------------------------

def member_noise(run_seed: int, iteration: int, member: int, antithetic: bool) -> tuple[int, int]:
    """(noise seed, sign) of a member: with antithetic pairs, members 2k and 2k+1 share eps_k."""
    pair, sign = (member // 2, 1 - 2 * (member % 2)) if antithetic else (member, 1)
    return streams.es_noise_seed(run_seed, iteration, pair), sign


# ---------------------------------------------------------------------------------------------
# Normalise: fitness shaping on the rounded rewards (pure Python floats: same on every machine)
# ---------------------------------------------------------------------------------------------

def shape_fitness(rewards: Sequence[float], method: str) -> list[float] | None:
    """z-scores or centered ranks in [-0.5, 0.5]; None when all rewards are equal (no signal)."""
    n = len(rewards)
    if max(rewards) == min(rewards):
        return None
    if method == "zscore":
        mean = sum(rewards) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
        return [(r - mean) / std for r in rewards]
    order = sorted(range(n), key=lambda i: rewards[i])
    ranks = [0.0] * n
    start = 0
    while start < n:  # tied rewards share their average rank, so ties push in no direction
        stop = start
        while stop + 1 < n and rewards[order[stop + 1]] == rewards[order[start]]:
            stop += 1
        for position in range(start, stop + 1):
            ranks[order[position]] = (start + stop) / 2
        start = stop + 1
    return [rank / (n - 1) - 0.5 for rank in ranks]


# ---------------------------------------------------------------------------------------------
# Update: theta += alpha/N * sum_n f_n eps_n, as one fp32 coefficient per noise draw
# ---------------------------------------------------------------------------------------------

def update_terms(fitness: Sequence[float], run_seed: int, iteration: int, antithetic: bool,
                 learning_rate: float) -> list[tuple[int, float]]:
    """[(noise seed, fp32 coefficient)] in member order; a pair's coefficient is alpha*(f+ - f-)/N."""
    totals: dict[int, float] = {}
    for member, f in enumerate(fitness):
        seed, sign = member_noise(run_seed, iteration, member, antithetic)
        totals[seed] = totals.get(seed, 0.0) + sign * f
    return [(seed, fp32(learning_rate * total / len(fitness))) for seed, total in totals.items()]


def shuffled(rewards: Sequence[float], run_seed: int, iteration: int) -> list[float]:
    """The null control's rewards: a permutation of the iteration's, drawn from (run seed, iteration)."""
    order = list(range(len(rewards)))
    streams.es_shuffle_rng(run_seed, iteration).shuffle(order)
    return [rewards[i] for i in order]


def apply_rewards(weights: ESWeights, rewards: Sequence[float], run_seed: int, iteration: int,
                  es: dict[str, Any]) -> tuple[float, bool]:
    """One iteration's update from its rewards: (update norm, skipped). Training and replay share it."""
    if es.get("shuffle_rewards"):  # absent from ledgers written before the key existed: false
        rewards = shuffled(rewards, run_seed, iteration)
    fitness = shape_fitness(rewards, es["fitness_shaping"])
    if fitness is None:
        return 0.0, True
    terms = update_terms(fitness, run_seed, iteration, es["antithetic"], es["learning_rate"])
    kind = es.get("noise", "full")  # absent from full-rank ledgers (es/ledger.py)
    if kind in ("lowrank", "lora"):
        rank = es.get("rank")
        if type(rank) is not int or rank < 1:
            raise InputError(f"es.rank = {rank!r}: low-rank noise needs a whole number >= 1")
        if hasattr(weights, "lowrank_update"):  # weights inside a vLLM engine (policy/samplers/vllm_sampler.py)
            return weights.lowrank_update(terms, rank, kind), False
        return lowrank.update(cast("NamedWeights", weights), terms, rank, kind), False  # ours: not vLLM's
    if kind != "full":  # fail closed: never another noise's update under this name
        raise InputError(f"es.noise = {kind!r}: unknown noise; known: \"full\", \"lowrank\", \"lora\"")
    return weights.update(terms), False


def perturb_member(weights: ESWeights, noise_seed: int, scale32: float, es: ESConfig) -> None:
    """theta + scale32 * eps(noise_seed) into the live weights, by `es.noise` (the config's [es] section)."""
    if es.noise in ("lowrank", "lora"):
        if hasattr(weights, "lowrank_perturb"):  # weights inside a vLLM engine (policy/samplers/vllm_sampler.py)
            weights.lowrank_perturb(noise_seed, scale32, es.rank, es.noise)
        else:
            lowrank.perturb(cast("NamedWeights", weights), noise_seed, scale32, es.rank, es.noise)  # ours: not vLLM's
    else:
        weights.perturb(noise_seed, scale32)
