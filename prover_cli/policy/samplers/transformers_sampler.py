"""Sampling with `transformers.generate`: the embedded default, on CPU or GPU.

Seeding: each batch reseeds torch's generator from (params.seed, batch index), so the same
prompts, batch size and seed give the same samples on the same device, whatever ran before.
The model stays accessible as `sampler.model` so ES can perturb its weights in place:
`sampler.es_weights()` (perturb / restore / update, prover_cli/es/weights.py) and
`sampler.save_pretrained(dir)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from prover_cli.errors import BackendError, InputError
from prover_cli.es.weights import NamedWeights, save_model_dir
from prover_cli.policy.built_models import resolve_model_path
from prover_cli.policy.model_dir import check_loaded_model, check_model_dir, save_tokenizer
from prover_cli.policy.samplers import Sample, SamplingParams, register_sampler

if TYPE_CHECKING:
    from prover_cli.config import GenerateConfig, ModelConfig


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise BackendError("model.device = \"cuda\" but torch sees no CUDA device")
    return requested


def resolve_dtype(requested: str, device: str):
    import torch

    if requested == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[requested]


def load_model_and_tokenizer(model_config: ModelConfig, model_path: str | None = None,
                             device: str | None = None) -> tuple[Any, Any, str]:
    """Load (model, tokenizer, device) from a path, a hub id, or `tiny`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path or resolve_model_path(model_config.name, model_config.cache_dir, model_config.tiny_seed)
    local = Path(path).is_dir()
    if local:
        check_model_dir(path)  # a corrupt, empty or missing file is named here, not deep in transformers
    revision = None if Path(path).exists() else model_config.revision
    device = device or resolve_device(model_config.device)
    dtype = resolve_dtype(model_config.dtype, device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
        loaded: Any = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=dtype,
                                                           output_loading_info=True)
        model, loading_info = loaded
    except OSError as exc:
        raise BackendError(f"cannot load model {path!r}: {exc}",
                           hint="check model.name, or use model.name = \"tiny\" for an offline test model") from None
    except Exception as exc:  # a file check_model_dir passed that transformers still refuses: name the model
        if not local:
            raise BackendError(f"cannot load model {path!r}: {type(exc).__name__}: {exc}") from None
        raise InputError(f"{path}: cannot load this model directory ({type(exc).__name__}: {exc})",
                         hint="compare it with a directory `save_pretrained` wrote: config.json, the weights, "
                              "the tokenizer files") from None
    check_loaded_model(model, path, loading_info)  # no tensor missing, unexpected or NaN: named here, not mid-sampling
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device)
    model.eval()
    return model, tokenizer, device


@register_sampler("transformers")
class TransformersSampler:
    def __init__(self, model_config: ModelConfig, generate_config: GenerateConfig, model_path: str | None = None, model=None,
                 tokenizer=None):
        """`model_config`, `generate_config`: the [model] and [generate] sections; `model`,
        `tokenizer`: one loaded already (GRPO's policy), else loaded from `model_path` or model.name."""
        if model is None:
            model, tokenizer, device = load_model_and_tokenizer(model_config, model_path)
        else:
            device = str(next(model.parameters()).device)
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = generate_config.batch_size
        self._es_weights: NamedWeights | None = None

    def generate(self, prompts: Sequence[str], params: SamplingParams,
                 seeds: Sequence[int] | None = None) -> list[list[Sample]]:
        """Samples per prompt. With `seeds` (one per prompt), prompt i's samples depend on
        seeds[i] only, not on its batch: torch has one generator, so each prompt is then its own
        batch (vLLM batches them with per-request seeds)."""
        if seeds is not None:
            if len(seeds) != len(prompts):
                raise ValueError("one seed per prompt")
            return [self._generate_batches([prompt], params, seed)[0] for prompt, seed in zip(prompts, seeds)]
        return self._generate_batches(prompts, params, params.seed)

    def _generate_batches(self, prompts: Sequence[str], params: SamplingParams, seed: int) -> list[list[Sample]]:
        import torch

        results: list[list[Sample]] = []
        eos_ids = self._eos_ids()
        for batch_index, start in enumerate(range(0, len(prompts), self.batch_size)):
            batch = list(prompts[start:start + self.batch_size])
            encoded = self.tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            prompt_width = encoded["input_ids"].shape[1]
            prompt_lengths = encoded["attention_mask"].sum(dim=1).tolist()
            torch.manual_seed(_batch_seed(seed, batch_index))
            sampling = params.temperature > 0
            with torch.no_grad():
                output = self.model.generate(
                    **encoded,
                    do_sample=sampling,
                    temperature=params.temperature if sampling else None,
                    top_p=params.top_p if sampling else None,
                    top_k=0 if sampling else None,
                    max_new_tokens=params.max_tokens,
                    num_return_sequences=params.n,
                    pad_token_id=self.tokenizer.pad_token_id,
                    eos_token_id=eos_ids,
                )
            for i in range(len(batch)):
                samples = []
                for j in range(params.n):
                    tokens = output[i * params.n + j, prompt_width:].tolist()
                    finish = "length"
                    for cut, token in enumerate(tokens):
                        if token in eos_ids:
                            tokens, finish = tokens[:cut], "stop"
                            break
                    samples.append(Sample(
                        text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                        finish_reason=finish,
                        prompt_tokens=int(prompt_lengths[i]),
                        completion_tokens=len(tokens),
                    ))
                results.append(samples)
        return results

    # -- ES: the weights are perturbed in place between `generate` calls ------------------------
    def es_weights(self) -> NamedWeights:
        """The model's parameters as NamedWeights: an fp32 master, written into the live model."""
        if self._es_weights is None:
            self._es_weights = NamedWeights.from_module(self.model)
        return self._es_weights

    def save_pretrained(self, out_dir: str | Path) -> None:
        """The current weights as a `from_pretrained`-loadable directory (safetensors).

        Under ES that is the master (fp32 for a bf16/fp16 model; config.json says so), not the
        live weights, which are the master rounded to the model's dtype.
        """
        if self._es_weights is not None:
            save_model_dir(self.model, self.tokenizer, self._es_weights, out_dir)
            return
        self.model.save_pretrained(out_dir)
        save_tokenizer(self.tokenizer, out_dir)

    def _eos_ids(self) -> list[int]:
        ids = self.model.generation_config.eos_token_id
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids


def _batch_seed(seed: int, batch_index: int) -> int:
    return (seed * 1_000_003 + batch_index) % (2**63 - 1)
