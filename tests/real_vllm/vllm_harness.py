"""Helpers of the real-vLLM tests (tests/real_vllm; conftest.py says what they run and how)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SITE = HERE / "site"
REPO = HERE.parents[1]
PROBE_EXTENSION = "prover_vllm_probe.ProbeExtension"   # site/prover_vllm_probe.py: ES's extension + read-only probes

HARNESS_ENV = {
    "PROVER_TEST_VLLM_CPU_KEEP_WEIGHTS": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_CI_ENV": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def harness_env() -> dict[str, str]:
    """This process's environment with the harness settings: what a `prover` subprocess gets."""
    env = dict(os.environ, **HARNESS_ENV)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def tiny_config(model_dir: Path, run_dir: Path, *overrides: str, backend: str = "vllm") -> Any:
    """configs/toy.toml (the digit task: a graded reward the random tiny model earns from the
    start) on `model_dir`, with `backend` sampling."""
    from prover_cli.config import load_config

    return load_config(REPO / "configs" / "toy.toml", [
        f"model.name={_quoted(model_dir)}", "model.dtype=float32", "model.device=cpu",
        f"generate.backend={_quoted(backend)}", "generate.max_model_len=256",
        f"run.dir={_quoted(run_dir)}", *overrides])


def _quoted(value: Any) -> str:
    return json.dumps(str(value))


def prompts(count: int = 24) -> list[str]:
    """The toy task's prompts (plain text, no special tokens), seeded."""
    from prover_cli.tasks.toy import generate_problems

    return [p["prompt"] for p in generate_problems(count, seed=0)]


GREEDY_TOKENS = 24


def with_a_stop_token(path: Path) -> Path:
    """One more stop token in the model's generation_config.json: a token its greedy completions
    of `prompts()` emit in some but not all of them (the random model almost never emits its EOS),
    so both backends finish some samples by a stop token and some by length. Both read that file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    completions = []
    with torch.no_grad():
        for prompt in prompts():
            ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
            out = model.generate(ids, do_sample=False, max_new_tokens=GREEDY_TOKENS, eos_token_id=None,
                                 pad_token_id=tokenizer.pad_token_id)
            completions.append(out[0, ids.shape[1]:].tolist())
    special = set(tokenizer.all_special_ids)
    candidates = {t for c in completions for t in c[1:] if t not in special}

    def balance(token: int) -> int:   # completions it stops after >= 1 token, against those it does not stop
        stops = sum(token in c[1:] and c[0] != token for c in completions)
        starts = sum(c[0] == token for c in completions)
        return min(stops, len(completions) - stops - starts)

    stop = max(sorted(candidates), key=balance)
    assert balance(stop) >= 3, "no token of the greedy completions splits them (the tiny model's recipe moved?)"
    config = GenerationConfig.from_pretrained(path)
    config.eos_token_id = [tokenizer.eos_token_id, stop]
    config.save_pretrained(path)
    return path


def start_engine(model_dir: Path, run_dir: Path, extension: str | None = PROBE_EXTENSION) -> Any:
    from prover_cli.policy.samplers.vllm_sampler import VLLMSampler

    config = tiny_config(model_dir, run_dir)
    return VLLMSampler(config.model, config.generate, model_path=str(model_dir), worker_extension_cls=extension)


def stop_engine(sampler: Any) -> None:
    """Ends the engine's processes now (vLLM's LLM.shutdown), not at interpreter exit."""
    import gc

    sampler.llm.llm_engine.engine_core.shutdown()
    del sampler.llm
    gc.collect()


def digest(tensor) -> list:
    import torch

    tensor = tensor.detach().contiguous().cpu()
    return [list(tensor.shape), str(tensor.dtype).removeprefix("torch."),
            hashlib.sha256(tensor.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()]


def as_engine_names(model) -> dict[str, list]:
    """The transformers model's parameters under vLLM's Qwen2 names, q/k/v and gate/up fused as
    vLLM's `load_weights` fuses them (model_executor/models/qwen2.py stacked_params_mapping)."""
    import torch

    params = dict(model.named_parameters())
    out = {}
    for name, tensor in params.items():
        if ".self_attn.k_proj." in name or ".self_attn.v_proj." in name or ".mlp.up_proj." in name:
            continue
        if ".self_attn.q_proj." in name:
            parts = [params[name.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            out[name.replace("q_proj", "qkv_proj")] = digest(torch.cat(parts))
        elif ".mlp.gate_proj." in name:
            out[name.replace("gate_proj", "gate_up_proj")] = digest(torch.cat([tensor, params[name.replace("gate", "up")]]))
        else:
            out[name] = digest(tensor)
    return out


def live(engine) -> dict[str, list]:
    [digests] = engine.llm.collective_rpc("probe_digests")
    return digests
