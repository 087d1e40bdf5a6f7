"""Every random stream of a run, by name: the one place that turns seeds into streams.

    rng = streams.es_problems_rng(run_seed, iteration)       # a random.Random for one draw
    seed = streams.es_sampling_seed(run_seed, iteration)     # an int for a sampler or a kernel

A stream is a named source of random choices. Each is a pure function of the config's seeds and
where the choice is made (iteration, member, problem id), the same on every machine and Python
version, so a killed run resumes, `replay-seeds` rebuilds, and two arms of a study see the same
draws. docs/streams.md has the table (stream, derived from, used by, format); this module is its
code, one function per stream, and tests/test_streams.py pins each function's values.

**The one way** (`derive_seed`): sha256 over `"|".join(map(str, (name, *parts)))`, the first 8
bytes big-endian, shifted right to `bits` (63 by default; 31 where the seed goes to a sampler, the
streams that have always been 31 bits). A new stream takes a new name and this way, nothing else.

**Legacy forms.** Four streams came before `derive_seed` and keep their own formulas (below,
marked legacy). Their values are on users' disks: `generate`'s seed is written into every line of
`samples.jsonl` and checked on resume, `prepare-data` wrote each problem's split into
`problems.jsonl` that runs train and evaluate on, GRPO's null-control shuffle decides the
rewards a resumed run must see again, and TRL's seed is the run seed as given. Rewriting them in
the one way would change those values (a resume would refuse its own files, a prepared split
would move), so they stay, named here and pinned by the tests.

**Not streams of a run** (they live where they are consumed; tests/test_streams.py lists each
with its reason): the noise kernels turn a noise seed into noise (es/noise/definition.py); the
transformers sampler turns one sampling seed into per-batch torch seeds; a task's problem
generator turns the seed it is given into problems (tasks/*.py, `countdown:<seed>`); the tiny
and warm-started base models are built from `model.tiny_seed`, a cache key, not from the run.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any, Sequence


def derive_seed(*parts: Any, bits: int = 63) -> int:
    """A seed from its parts via sha256: stable across machines and Python versions."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - bits)


# ---------------------------------------------------------------------------------------------
# Problems: which training and held-out problems a run sees
# ---------------------------------------------------------------------------------------------

def train_problems_rng(run_seed: int) -> random.Random:
    """`data.train_size`'s subset: one permutation of the train split per run seed (sizes nested)."""
    return random.Random(derive_seed("train-problems", run_seed))


def es_problems_rng(run_seed: int, iteration: int) -> random.Random:
    """An ES iteration's batch of training problems, the same for every member (the probe's too)."""
    return random.Random(derive_seed("es-problems", run_seed, iteration))


def heldout_problems_rng(eval_problems_seed: int) -> random.Random:
    """The `run.eval_problems` subset of the test set: from `run.eval_problems_seed`, never `run.seed`,
    so every seed, arm and training-set size is scored on one test set."""
    return random.Random(derive_seed("heldout-problems", eval_problems_seed))


def study_dev_split_rng(test_seed: int) -> random.Random:
    """A study's dev split (`prover study tune`): which training problems tuning is scored on, from
    `study.test_seed`, so every method's tuning runs see the same dev problems."""
    return random.Random(derive_seed("study-dev-split", test_seed))


# ---------------------------------------------------------------------------------------------
# ES: member noise, member sampling, the null control's shuffle
# ---------------------------------------------------------------------------------------------

def es_noise_seed(run_seed: int, iteration: int, pair: int) -> int:
    """Noise seed of member `pair` (with antithetic pairs, members 2k and 2k+1 share pair k)."""
    return derive_seed("es-noise", run_seed, iteration, pair)


def es_sampling_seed(run_seed: int, iteration: int) -> int:
    """Sampling seed shared by every member of an iteration (common random numbers); 31 bits."""
    return derive_seed("es-sampling", run_seed, iteration, bits=31)


def es_shuffle_rng(run_seed: int, iteration: int) -> random.Random:
    """The null control (`es.shuffle_rewards`): the permutation of an iteration's rewards."""
    return random.Random(derive_seed("es-shuffle", run_seed, iteration))


# ---------------------------------------------------------------------------------------------
# Held-out evaluation: one sampling seed every evaluation of a run reuses
# ---------------------------------------------------------------------------------------------

def heldout_sampling_seed(run_seed: int) -> int:
    """Sampled and greedy held-out metrics, at every evaluation of ES and GRPO alike; 31 bits."""
    return derive_seed("heldout-sampling", run_seed, bits=31)


# ---------------------------------------------------------------------------------------------
# Legacy forms: older than derive_seed, values on users' disks (the module docstring says why)
# ---------------------------------------------------------------------------------------------

def generate_problem_seed(base_seed: int, problem_id: str) -> int:
    """`generate`'s sampling seed of one problem from `generate.seed`, written into each samples.jsonl
    line and checked on resume. Legacy: sha256("prover-generate:<base>:<id>"), first 4 bytes, low 31 bits."""
    digest = hashlib.sha256(f"prover-generate:{base_seed}:{problem_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def split_unit(run_seed: int, problem_id: str) -> float:
    """`prepare-data`'s seeded split: a uniform number in [0, 1) per (run seed, id), `valid` below
    `data.valid_fraction`. Legacy: sha256("prover-split:<run.seed>:<id>"), first 8 bytes / 2^64."""
    digest = hashlib.sha256(f"prover-split:{run_seed}:{problem_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def grpo_shuffle_rng(run_seed: int, prompt: str, completions: Sequence[str]) -> random.Random:
    """GRPO's null control (`grpo.shuffle_rewards`): one group's permutation, keyed by its own texts so a
    resumed run permutes the same group the same way. Legacy: sha256 over "grpo-shuffle|<run.seed>",
    the prompt and the completions joined by NUL, first 8 bytes."""
    digest = hashlib.sha256("\x00".join([f"grpo-shuffle|{run_seed}", prompt, *completions]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def grpo_trainer_seed(run_seed: int) -> int:
    """TRL's `seed` and `data_seed` (its global RNGs and its prompt sampler's generator). Legacy: the run
    seed as is, which is why run.seed stays below 2^32 (numpy's seed range)."""
    return run_seed


# The table (docs/streams.md has it in words): name -> function. Tests pin each and check the doc.
STREAMS = {
    "train-problems": train_problems_rng,
    "es-problems": es_problems_rng,
    "heldout-problems": heldout_problems_rng,
    "study-dev-split": study_dev_split_rng,
    "es-noise": es_noise_seed,
    "es-sampling": es_sampling_seed,
    "es-shuffle": es_shuffle_rng,
    "heldout-sampling": heldout_sampling_seed,
    "generate": generate_problem_seed,
    "split": split_unit,
    "grpo-shuffle": grpo_shuffle_rng,
    "grpo-trainer": grpo_trainer_seed,
}
