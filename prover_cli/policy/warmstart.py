"""A tiny base policy with some countdown skill: the tiny model, warm-started on solved problems.

    model.name = "tiny-countdown"    # in any config: built offline on first use, then cached

A random tiny model solves no countdown problem, so ES sees equal rewards and GRPO zero
advantages: nothing to compare. `tiny-countdown` is the tiny random model (`model.tiny_seed`)
after a short supervised fine-tune on generated countdown problems and their solutions, stopped
early on purpose: it has learned the answer format and to copy the numbers, but picks the right
operations only part of the time, so its held-out verified rate is strictly between 0 and 1 and
both trainers have something to improve. Measured on the demo's 103 held-out problems
(configs/demo.toml, run.seed 0): verified rate 0.233 greedy, 0.167 at temperature 0.7 (the demo's
setting, 4 samples each), 0.100 at 1.0; most misses pick the wrong operations, and at higher
temperature more of them miscopy a number.

The build is a pure function of its inputs, all of which are in the cache key (`warmstart_key`):
the tiny model's version and seed, this module's version and `WARMSTART` settings, and the torch
version. It runs on one CPU thread, so the same inputs give bit-identical weights whatever the
machine's core count. Training data:
- problems from `countdown.generate_problems` on their own stream (`WARMSTART["data_seed"]`
  offset by the tiny seed), filtered to the `train` split, which is decided by a problem's
  content: no held-out (`valid`) countdown problem of any seed is ever trained on;
- the target of each is `<answer> EXPR </answer>` with the solver's canonical EXPR
  (`countdown.solve`), followed by the end-of-turn token; the loss covers only those tokens.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prover_cli.fsio.jsonl import write_dir_atomic
from prover_cli.policy.tiny_model import TINY_VERSION, build_tiny_model, tiny_model_dir
from prover_cli.tasks import get_task
from prover_cli.tasks.countdown import NAME as COUNTDOWN, check_answer, generate_problems, solve

WARMSTART_NAME = "tiny-countdown"  # prover_cli/policy/built_models.py resolves this model.name to build_warmstart

WARMSTART_VERSION = 2  # bump when the recipe changes in a way WARMSTART does not show
WARMSTART: dict[str, Any] = {
    "task": COUNTDOWN,
    # the problems it learns from; a config using this base should ask the same (configs/demo.toml)
    "countdown_numbers": 3,       # task.countdown.numbers
    "countdown_max_number": 9,    # task.countdown.max_number: one-digit numbers, one token each
    "countdown_prompt": "short",  # task.countdown.prompt: the 185-token TinyZero prompt is too long
                                  # for a 2-layer model to learn to read in seconds
    "problems": 2048,             # generated; about 90% of them are `train`
    "data_seed": 1_000_003,       # its own stream, apart from the problems of a run with a small run.seed
    "steps": 300,                 # stopped early on purpose: some skill, far from all
    "batch_size": 32,
    "learning_rate": 3e-3,        # AdamW, peak: the tiny model needs large steps to learn in seconds
}


def warmstart_key(tiny_seed: int, settings: dict[str, Any] | None = None) -> str:
    """16 hex characters of sha256 over every input of the build (the cache key)."""
    import torch

    inputs = {"version": WARMSTART_VERSION, "tiny_version": TINY_VERSION, "tiny_seed": tiny_seed,
              "settings": settings or WARMSTART, "torch": torch.__version__}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def warmstart_dir(cache_dir: str | Path, tiny_seed: int = 0, settings: dict[str, Any] | None = None) -> Path:
    return Path(cache_dir) / f"{WARMSTART_NAME}-seed{tiny_seed}-{warmstart_key(tiny_seed, settings)}"


# ---------------------------------------------------------------------------------------------
# Data: (prompt, completion) pairs of solved `train` problems
# ---------------------------------------------------------------------------------------------

def training_pairs(tokenizer: Any, tiny_seed: int, settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(chat-templated prompt, completion) of every generated `train` problem, in order."""
    task = get_task(settings["task"])
    problems = generate_problems(settings["problems"], settings["countdown_numbers"],
                                 settings["countdown_max_number"], seed=settings["data_seed"] + tiny_seed,
                                 prompt=settings["countdown_prompt"])
    pairs = []
    for problem in problems:
        if problem["split"] != "train":
            continue
        expression = solve(problem["numbers"], problem["target"])
        if expression is None or not check_answer(expression, problem["numbers"], problem["target"]):
            raise RuntimeError(f"countdown.solve failed on {problem['id']}: generated problems are solvable")
        completion = f"<answer> {expression} </answer>{tokenizer.eos_token}"
        pairs.append((task.build_prompt(problem, tokenizer, "plain"), completion))
    return pairs


def encode_pairs(tokenizer: Any, pairs: list[tuple[str, str]]):
    """(input_ids, labels) lists; labels are -100 on the prompt so only the completion is learned."""
    inputs, labels = [], []
    for prompt, completion in pairs:
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c = tokenizer(completion, add_special_tokens=False)["input_ids"]
        inputs.append(p + c)
        labels.append([-100] * len(p) + c)
    return inputs, labels


# ---------------------------------------------------------------------------------------------
# Training: AdamW on shuffled batches, the step decayed linearly to 0, one thread, seeded
# ---------------------------------------------------------------------------------------------

def warm_start(model: Any, tokenizer: Any, pairs: list[tuple[str, str]], settings: dict[str, Any],
               seed: int) -> list[float]:
    """Fine-tune `model` in place on `pairs`; returns the loss of each step."""
    import random

    import torch

    inputs, labels = encode_pairs(tokenizer, pairs)
    rng = random.Random(f"warmstart-batches:{seed}")
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings["learning_rate"], weight_decay=0.0)
    pad = tokenizer.pad_token_id
    order: list[int] = []
    losses = []
    # linear decay to 0: the last steps settle what was learned (a constant step leaves it noisy)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / settings["steps"])
    model.train()
    for _ in range(settings["steps"]):
        if len(order) < settings["batch_size"]:  # a fresh seeded permutation per epoch
            epoch = list(range(len(inputs)))
            rng.shuffle(epoch)
            order.extend(epoch)
        batch, order = order[:settings["batch_size"]], order[settings["batch_size"]:]
        width = max(len(inputs[i]) for i in batch)
        # right padding: positions 0..n-1 as at generation time (left padding shifts them by the mask)
        ids = torch.tensor([inputs[i] + [pad] * (width - len(inputs[i])) for i in batch])
        mask = torch.tensor([[1] * len(inputs[i]) + [0] * (width - len(inputs[i])) for i in batch])
        target = torch.tensor([labels[i] + [-100] * (width - len(labels[i])) for i in batch])
        loss = model(input_ids=ids, attention_mask=mask, labels=target).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def build_warmstart(out_dir: str | Path, cache_dir: str | Path, tiny_seed: int = 0,
                    settings: dict[str, Any] | None = None) -> Path:
    """Build (or reuse) the warm-started model directory and return its path."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = settings or WARMSTART
    out = Path(out_dir)
    marker = out / "prover_warmstart.json"
    if marker.exists():
        return out
    base = build_tiny_model(tiny_model_dir(cache_dir, tiny_seed), tiny_seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    pairs = training_pairs(tokenizer, tiny_seed, settings)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # one thread: the same float reductions, so the same bits, everywhere
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(tiny_seed)
            losses = warm_start(model, tokenizer, pairs, settings, seed=tiny_seed)
    finally:
        torch.set_num_threads(threads)
    record = {"version": WARMSTART_VERSION, "tiny_seed": tiny_seed, "settings": settings,
              "key": warmstart_key(tiny_seed, settings), "train_pairs": len(pairs),
              "loss_first": losses[0], "loss_last": losses[-1]}

    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "prover_warmstart.json").write_text(json.dumps(record, sort_keys=True) + "\n")

    return write_dir_atomic(out, fill, shared=True)  # a cache: a concurrent build that finished first is kept
