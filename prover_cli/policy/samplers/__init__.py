"""Samplers: one signature for transformers (CPU/GPU, embedded default) and vLLM (GPU extra).

    sampler = load_sampler(config.model, config.generate)   # the [model] and [generate] sections
    outputs = sampler.generate(prompts, SamplingParams(n=4, temperature=1.0, top_p=0.95,
                                                       max_tokens=256, seed=0))
    outputs[i][j].text                      # j-th sample of prompt i

Both are imported inside `load_sampler`, so `prover --help` never touches torch or vLLM.
Samplers register through `register_sampler`, the same seam tasks use.

Modules (tests/test_package_indexes.py keeps this list complete):

- transformers_sampler.py   CPU/GPU default; ES perturbs its weights in place
- vllm_sampler.py           GPU extra; ES works through the worker extension (es/vllm_worker.py)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from prover_cli.errors import ConfigError

if TYPE_CHECKING:
    from prover_cli.config import GenerateConfig, ModelConfig


@dataclass(frozen=True)
class SamplingParams:
    n: int
    temperature: float
    top_p: float
    max_tokens: int
    seed: int


@dataclass
class Sample:
    text: str
    finish_reason: str  # "stop" (end of sequence) or "length" (hit max_tokens)
    prompt_tokens: int
    # Generated tokens without the stop token, on every backend: transformers' sampler cuts at it,
    # vLLM's token_ids include it (vllm_sampler.completion_token_count drops it). A sample cut by
    # max_tokens counts all of them. Budgets and metrics count alike (metrics.completion_tokens
    # re-encodes the text, which holds no special token).
    completion_tokens: int


class Sampler(Protocol):
    tokenizer: Any

    def generate(self, prompts: Sequence[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Sample]]:
        """`params.n` samples per prompt. Without `seeds` the call is seeded by `params.seed`;
        with one seed per prompt, each prompt's samples depend on its own seed only."""


_REGISTRY: dict[str, Callable[..., Sampler]] = {}
_BUILTIN = {
    "transformers": "prover_cli.policy.samplers.transformers_sampler",
    "vllm": "prover_cli.policy.samplers.vllm_sampler",
}


def register_sampler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorator(factory: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = factory
        return factory

    return decorator


def load_sampler(model_config: ModelConfig, generate_config: GenerateConfig, model_path: str | None = None, **kwargs: Any) -> Sampler:
    """The sampler named by `generate.backend`, loaded with `model_path` or `model.name`. It reads
    the [model] and [generate] sections only; a registered factory takes the same arguments."""
    name = generate_config.backend
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise ConfigError(f"generate.backend = {name!r}: unknown sampler; known: {', '.join(_BUILTIN)}")
    return _REGISTRY[name](model_config, generate_config, model_path=model_path, **kwargs)


def sampling_params(generate_config: GenerateConfig, n: int | None = None, seed: int | None = None) -> SamplingParams:
    """The [generate] section's sampling settings, with `n` and `seed` overridden when given."""
    g = generate_config
    return SamplingParams(
        n=g.n if n is None else n,
        temperature=g.temperature,
        top_p=g.top_p,
        max_tokens=g.max_tokens,
        seed=g.seed if seed is None else seed,
    )
