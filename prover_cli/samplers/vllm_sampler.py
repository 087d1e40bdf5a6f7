"""Sampling with vLLM (GPU extra, `pip install 'prover-cli[gpu]'`). Imported only when chosen.

Not exercised in CI (no GPU, vLLM not installed); the code path is the real one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from prover_cli.errors import BackendError
from prover_cli.samplers import Sample, SamplingParams, register_sampler


@register_sampler("vllm")
class VLLMSampler:
    def __init__(self, config: Any, model_path: str | None = None, worker_extension_cls: str | None = None):
        try:
            import vllm
        except ImportError:
            raise BackendError("generate.backend = \"vllm\" but vLLM is not installed",
                               hint="pip install 'prover-cli[gpu]' on a CUDA machine, or use generate.backend = \"transformers\"") from None
        from prover_cli.tiny_model import resolve_model_path

        path = model_path or resolve_model_path(config.model.name, config.model.cache_dir, config.model.tiny_seed)
        kwargs: dict[str, Any] = dict(
            model=path,
            revision=None if Path(path).exists() else config.model.revision,
            dtype="auto" if config.model.dtype == "auto" else config.model.dtype,
            seed=config.generate.seed,
            gpu_memory_utilization=config.generate.gpu_memory_utilization,
        )
        if config.generate.max_model_len:
            kwargs["max_model_len"] = config.generate.max_model_len
        if worker_extension_cls:
            # ES perturbs weights inside the engine through this extension (collective_rpc).
            kwargs["worker_extension_cls"] = worker_extension_cls
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Sample]]:
        sampling = self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p if params.temperature > 0 else 1.0,
            max_tokens=params.max_tokens,
            seed=params.seed,
        )
        outputs = self.llm.generate(list(prompts), sampling, use_tqdm=False)
        return [
            [
                Sample(
                    text=choice.text,
                    finish_reason="length" if choice.finish_reason == "length" else "stop",
                    prompt_tokens=len(request.prompt_token_ids or []),
                    completion_tokens=len(choice.token_ids),
                )
                for choice in request.outputs
            ]
            for request in outputs
        ]
