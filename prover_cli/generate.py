"""generate: `generate.n` samples per problem, written incrementally as `prover verify` input.

    prover generate --config configs/demo.toml --out runs/demo/samples.jsonl

Each line of samples.jsonl (docs/formats.md) is one sample: `id` = `<problem_id>/<sample_idx>`,
`problem_id`, the problem's own fields (`formal_statement` and `header` for Lean; `numbers` and
`target` for countdown; `split`...), `completion`, `finish_reason`, token counts, `seed` and
`model`. For Lean, `completion` is text whose last ```lean4 block is the candidate proof
(`prover_cli.policy.prompts.answer_completion`): chat models' text as is, continuation prompts
(DeepSeek-Prover-V1.5 style, plain) wrapped as prompt code + completion in one block.

Determinism and resume: a problem's samples are seeded from (generate.seed, problem id) alone
(the samplers take one seed per prompt), so they depend on the model, the prompt and that seed
only, not on which other problems shared a batch, in what order, or whether the run was
interrupted. A rerun skips the
problems whose n samples all exist; a problem cut short is sampled again with its seed and only
its missing samples are written, so the file ends up identical to an uninterrupted run (on the
same device and software). Samples already in the file from another seed or model are an error
rather than a silent mix. Problems go to the sampler `generate.batch_size` at a time: vLLM
batches them (one seeded request each); transformers, with one torch generator, samples the n
samples of a problem together but the problems of a chunk one after another.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli import streams
from prover_cli.demo import base_is_built
from prover_cli.errors import BackendError, InputError
from prover_cli.fsio.jsonl import ResumableWriter, fields_first, log_malformed, with_malformed
from prover_cli.policy import rollout, samplers  # `samplers.load_sampler` looked up per call: tests swap it
from prover_cli.policy.built_models import BUILT_NAMES
from prover_cli.policy.prompts import answer_completion, resolve_family
from prover_cli.policy.samplers import sampling_params
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import get_task
from prover_cli.tasks.datasets import SOLUTION_FIELDS
from prover_cli.tasks.problems import check_fields, read_problems

if TYPE_CHECKING:
    from prover_cli.config import Config


# Fields a sample record sets itself; a problem's own fields are copied around them.
SAMPLE_FIELDS = ("id", "problem_id", "sample_idx", "completion", "raw_completion", "finish_reason",
                 "prompt_tokens", "completion_tokens", "seed", "model", "family")


def generate_file(config: Config, *, problems_path: str | Path | None = None, out_path: str | Path | None = None,
                  model: str | None = None, reporter: Reporter = NULL_REPORTER, sampler: Any = None) -> dict[str, Any]:
    """Sample `generate.n` completions for each problem (of `generate.split`, if set).

    `sampler`: an already loaded sampler to reuse (a Modal container keeps its vLLM engine warm
    across calls); by default one is loaded for `model` / `model.name`."""
    path = Path(problems_path) if problems_path else config.problems_path
    malformed: list[dict[str, Any]] = []  # bad lines are reported and skipped; the run then exits 1
    problems = read_problems(path, split=config.generate.split or None, malformed=malformed,
                             task_name=config.data.task, split_key="generate.split")
    log_malformed(reporter, path, malformed)
    if malformed and not problems:  # nothing usable: a wrong file or data.task, not a few bad lines
        first = malformed[0]
        raise InputError(f"{path}: no usable problem: all {len(malformed)} line(s) are malformed, e.g. line "
                         f"{first['line']}: {first['reason']}",
                         hint="prepare the problems for this task, or set data.task to match them")
    out = Path(out_path) if out_path else config.run_dir / "samples.jsonl"
    result = generate_samples(config, problems, out, n=config.generate.n, model=model, reporter=reporter,
                              problems_label=str(path), sampler=sampler)
    return with_malformed(result, path, malformed)


def generate_samples(config: Config, problems: list[dict[str, Any]], out: Path, *, n: int, model: str | None = None,
                     model_label: str | None = None, family_name: str | None = None,
                     reporter: Reporter = NULL_REPORTER, problems_label: str = "problems",
                     sampler: Any = None) -> dict[str, Any]:
    """The work of `generate` (also used by `eval`): n samples per problem into `out`, resumable.

    `model` is what the sampler loads (default `model.name`); `model_label` names it in the
    records and the resume check (eval passes the ledger, not the rebuilt directory);
    `family_name` is the name the prompt family is resolved from (a rebuilt directory's path
    says nothing about the base model's family).
    """
    task_name = config.data.task
    task = get_task(task_name)
    check_fields(problems, task_name, problems_label)
    if task_name == "lean":  # the prompt, the candidate and verify all see the same header
        problems = [{**p, "header": p.get("header") or config.verify.header} for p in problems]
    model_label = model_label or model or config.model.name
    family = resolve_family(family_name or model or config.model.name, config.model.family, reporter=reporter,
                            task=task_name)

    with ResumableWriter(out) as writer:
        existing = _existing_samples(writer.records)
        todo = [p for p in problems if any(f"{p['id']}/{j}" not in writer.done_ids for j in range(n))]
        skipped = sum(1 for p in problems for j in range(n) if f"{p['id']}/{j}" in writer.done_ids)
        for problem in problems:
            _check_resume(existing.get(problem["id"]), problem, config.generate.seed, model_label, out)

        completion_tokens = 0
        counts = {"written": 0, "length": 0}
        start_time = time.monotonic()
        sampling_s = 0.0
        if todo:
            if sampler is None:
                check_hub_reachable(model or config.model.name, config.model.revision)
                if model is None:
                    if not base_is_built(config):   # said before the wait, not after it
                        reporter.log(f"building the base model {config.model.name} (first run only; then cached in "
                                     f"{config.model.cache_dir}/)")
            sampler = sampler or samplers.load_sampler(config.model, config.generate, model_path=model)
            sampling_start = time.monotonic()  # tokens/s measures sampling, not loading the model
            batch_size = config.generate.batch_size
            with reporter.task("generate", total=len(todo) * n, unit="samples") as progress:
                for start in range(0, len(todo), batch_size):
                    chunk = todo[start:start + batch_size]
                    seeds = [streams.generate_problem_seed(config.generate.seed, problem["id"]) for problem in chunk]
                    outputs = rollout.sample(sampler, task, chunk, sampling_params(config.generate, n=n), family, seeds=seeds)
                    completion_tokens += _write_samples(writer, chunk, outputs, seeds, n, task_name,
                                                        family, model_label, counts)
                    sampling_s = time.monotonic() - sampling_start
                    progress.advance(len(chunk) * n,
                                     tokens_per_s=f"{completion_tokens / max(sampling_s, 1e-9):,.0f}")
        wall_s = time.monotonic() - start_time
        written, length_cut = counts["written"], counts["length"]

    return {
        "ok": True,
        "out": str(out),
        "problems": len(problems),
        "samples_per_problem": n,
        "samples_written": written,
        "samples_skipped": skipped,
        "finished_by_length": length_cut,
        "completion_tokens": completion_tokens,
        "tokens_per_s": round(completion_tokens / sampling_s, 1) if written and sampling_s > 0 else 0.0,
        "wall_s": round(wall_s, 2),
        "model": model_label,
        "family": family,
    }


# How long the hub probe may take before the hub counts as unreachable (seconds).
HUB_PROBE_S = 5.0


def check_hub_reachable(name: str, revision: str = "main", probe_s: float = HUB_PROBE_S) -> None:
    """Before a model is fetched from the Hugging Face hub: a BackendError within seconds, naming
    the model and the hub, when it is not in the local hub cache and the hub cannot be reached
    (HF_HUB_OFFLINE set, or no connection to HF_ENDPOINT within `probe_s`). Otherwise
    huggingface_hub retries for about 100 s before its own error. A built name (`tiny`,
    `tiny-countdown`), a local path or a cached model is not checked: it loads without the hub."""
    import os

    if name in BUILT_NAMES or Path(name).exists() or _in_hub_cache(name, revision):
        return
    hint = ("connect this machine to the hub (or set HF_ENDPOINT to a mirror), or set model.name to a local model "
            "directory; `tiny` and `tiny-countdown` are built offline")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise BackendError(f"model {name!r} (revision {revision}) is not in the local Hugging Face cache and "
                           "HF_HUB_OFFLINE is set: nothing can be downloaded", hint=hint)
    endpoint = os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co"
    problem = _unreachable(endpoint, probe_s)
    if problem:
        raise BackendError(f"model {name!r} must be downloaded from {endpoint}, which cannot be reached from this "
                           f"machine ({problem}); it is not in the local Hugging Face cache", hint=hint)


def _in_hub_cache(name: str, revision: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json", revision=revision), str)
    except Exception:   # not a repo id the hub would take: transformers names the problem itself
        return True


def _unreachable(endpoint: str, probe_s: float) -> str | None:
    """Why a TCP connection to `endpoint`'s host cannot be made within `probe_s` seconds (name
    resolution included), or None when it can."""
    import socket
    import threading
    from urllib.parse import urlsplit

    parts = urlsplit(endpoint)
    host = parts.hostname or endpoint
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError:
        return f"{endpoint!r} has no valid port"
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=probe_s).close()
            outcome.append(None)
        except OSError as exc:
            outcome.append(f"{host}:{port}: {exc.strerror or exc}")

    probe = threading.Thread(target=connect, name="hub-probe", daemon=True)   # name resolution has no timeout
    probe.start()
    probe.join(probe_s)
    return outcome[0] if outcome else f"{host}:{port}: no answer within {probe_s:g} s"


def _write_samples(writer: ResumableWriter, chunk: list[dict[str, Any]], outputs: list[list[Any]],
                   seeds: list[int], n: int, task_name: str, family: str, model_label: str,
                   counts: dict[str, int]) -> int:
    """Write the samples of a chunk of problems that are not in the file yet; returns new tokens."""
    new_tokens = 0
    for problem, samples, seed in zip(chunk, outputs, seeds, strict=True):
        for j, sample in enumerate(samples):
            sample_id = f"{problem['id']}/{j}"
            if sample_id in writer.done_ids:
                continue
            completion = sample.text
            record = _problem_fields(problem)
            record.update(id=sample_id, problem_id=problem["id"], sample_idx=j)
            if task_name == "lean":
                completion = answer_completion(problem, sample.text, family)
                if completion != sample.text:
                    record["raw_completion"] = sample.text
            record.update(completion=completion, finish_reason=sample.finish_reason,
                          prompt_tokens=sample.prompt_tokens, completion_tokens=sample.completion_tokens,
                          seed=seed, model=model_label, family=family)
            writer.write(_ordered(record))
            counts["written"] += 1
            counts["length"] += sample.finish_reason == "length"
            new_tokens += sample.completion_tokens
    return new_tokens


def _problem_fields(problem: dict[str, Any]) -> dict[str, Any]:
    """The problem's own fields (statement, header, numbers, split...), so eval can score a sample alone."""
    return {key: value for key, value in problem.items() if key not in SAMPLE_FIELDS and key not in SOLUTION_FIELDS}


_ORDER = ("id", "problem_id", "sample_idx", "formal_statement", "header", "completion", "finish_reason",
          "prompt_tokens", "completion_tokens")


def _ordered(record: dict[str, Any]) -> dict[str, Any]:
    return fields_first(record, _ORDER)


def _existing_samples(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One existing sample per problem id (the first), to check a resume is consistent."""
    first: dict[str, dict[str, Any]] = {}
    for record in records:
        pid = record.get("problem_id")
        if isinstance(pid, str) and pid not in first:
            first[pid] = record
    return first


def _check_resume(previous: dict[str, Any] | None, problem: dict[str, Any], base_seed: int, model_label: str,
                  out: Path) -> None:
    if previous is None:
        return
    expected_seed = streams.generate_problem_seed(base_seed, problem["id"])
    if previous.get("seed") != expected_seed or previous.get("model") != model_label:
        raise InputError(
            f"{out}: samples of {problem['id']!r} were generated with model {previous.get('model')!r} and seed "
            f"{previous.get('seed')!r}, but this run uses model {model_label!r} and seed {expected_seed} "
            "(from generate.seed); resuming would mix them",
            hint="pass another --out, or move the old file away")
    if "formal_statement" in problem and previous.get("formal_statement") != problem["formal_statement"]:
        raise InputError(f"{out}: samples of {problem['id']!r} are for a different formal_statement than the "
                         "problems file now has; pass another --out")
