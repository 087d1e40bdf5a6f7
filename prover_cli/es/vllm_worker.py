"""vLLM worker extension: ES perturbs, restores and updates the weights inside the engine.

    llm = vllm.LLM(path, worker_extension_cls="prover_cli.es.vllm_worker.ESWorkerExtension")
    llm.collective_rpc("es_init", args=(checkpoint_dir, "float32"))  # -> (engine dtype, master dtype)
    llm.collective_rpc("es_perturb", args=(noise_seed, scale32)); llm.reset_prefix_cache()

vLLM mixes this class into its GPU worker, so `self.model_runner.model` is the engine's model and
the engine is never rebuilt between members. The worker keeps the checkpoint's tensors, under
their checkpoint (transformers) names, as the ES base on the GPU; every change goes through the
model's own `load_weights`, which fuses q/k/v and gate/up exactly as when vLLM loaded them. So
the noise is keyed by the same names, computed by the same code (es/noise/full.py), and the weights
are bit-identical to the transformers path and to `prover replay-seeds`.

The ES base holds only the tensors the engine's `load_weights` reports it loaded, and never a
tied alias. With `tie_word_embeddings` vLLM's model *is* its embedding at the head
(`self.lm_head = self.model.embed_tokens`, model_executor/models/qwen2.py), so the engine's
`named_parameters(remove_duplicate=False)` lists one parameter under two names; its
AutoWeightsLoader skips the alias and, since vLLM 0.29, `_check_skipped_aliases` raises at the end
of any one `load_weights` call that skipped an alias without loading its canonical name
(model_executor/models/utils.py; the recorded message: "'lm_head.weight' was skipped because it
is tied to 'model.embed_tokens.weight' in Qwen3ForCausalLM, but 'model.embed_tokens.weight' was
not found in the checkpoint, so the tied weight is uninitialized."). So the aliases are found by
vLLM's own rule (one parameter object, several names: the first name is canonical) and never sent
alone; every other tensor goes through `load_weights` by itself, which says whether the engine
uses that name at all. transformers' `named_parameters()` lists a tied tensor once: a base that
kept the alias would perturb, update and fingerprint a tensor twice, and disagree with the
transformers path and `prover replay-seeds`.

The fp32 master is one more model's worth of GPU memory outside vLLM's budget (4 bytes per
parameter; twice a bf16 model): leave room for it with `generate.gpu_memory_utilization`. With tensor parallelism every worker keeps the full
checkpoint and `load_weights` takes its shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prover_cli.es.noise import lowrank
from prover_cli.es.weights import NamedWeights


class ESWorkerExtension:
    model_runner: Any  # provided by the vLLM worker this class is mixed into
    model_config: Any

    def es_init(self, checkpoint_dir: str, master_dtype: str | None = "float32") -> tuple[str, str]:
        """Load the base weights from the checkpoint onto the worker's device, keep their master
        (fp32 by default) there; returns (engine dtype, master dtype).

        One tensor at a time: each checkpoint tensor is read onto the device in the engine's
        dtype and written through the engine's `load_weights`, then read again and turned into
        its master, and dropped after each step, so the GPU never holds the whole checkpoint
        beside the engine and the masters (the transient is one tensor); on CUDA the allocator's
        cached blocks are returned at the end, so what stays outside vLLM's budget is the masters
        alone. tests/real_vllm/test_es_worker.py checks the base against the transformers path."""

        model = self.model_runner.model
        device = next(model.parameters()).device
        dtype = self.model_config.dtype  # the engine's dtype, which the checkpoint was cast to
        aliases = tied_aliases(model)
        tensors = CheckpointTensors(checkpoint_dir, device, dtype)
        used, self._prover_es_skipped = [], []
        for name in tensors.names:
            if not tensors.is_floating_point(name):
                continue
            if name in aliases:   # e.g. a tied lm_head.weight: alone, vLLM refuses the call
                self._prover_es_skipped.append(name)
                continue
            # One tensor through the engine's own loader: it writes the value the engine already
            # holds, and says whether the engine uses this name at all.
            if model.load_weights([(name, tensors[name])]):
                used.append(name)
            else:
                self._prover_es_skipped.append(name)  # e.g. rotary buffers the engine computes
        orphans = sorted(f"{alias} (tied to {aliases[alias]})" for alias in self._prover_es_skipped
                         if alias in aliases and aliases[alias] not in tensors.names)
        if orphans:   # what vLLM's own check refuses: the tied weight would be uninitialized
            raise ValueError(f"{checkpoint_dir}: tied weights without their canonical tensor: {', '.join(orphans)}")
        if not used:
            raise FileNotFoundError(f"{checkpoint_dir}: no *.safetensors weights to take as the ES base")
        # The engine's tensors are written by its own load_weights (fusing q/k/v, gate/up), in
        # the engine's dtype: cast(master + sigma*eps) at perturb, cast(master) at restore.
        # NamedWeights reads the base name by name from this view: one tensor on the device at a time.
        self._prover_es = NamedWeights(tensors.only(used), write=lambda items: model.load_weights(items),
                                       master_dtype=master_dtype)
        tensors.close()
        if device.type == "cuda":
            import torch

            torch.cuda.empty_cache()   # the transients' blocks back to the device, not kept by the allocator
        return self._prover_es.dtype, self._prover_es.master_dtype

    def es_perturb(self, noise_seed: int, scale32: float) -> None:
        self._prover_es.perturb(noise_seed, scale32)

    def es_restore(self) -> None:
        self._prover_es.restore()

    def es_update(self, terms: list[list]) -> float:
        return self._prover_es.update([(int(seed), float(c)) for seed, c in terms])

    def es_lowrank_perturb(self, noise_seed: int, scale32: float, rank: int, kind: str) -> None:
        """Low-rank noise (es/noise/lowrank.py) written through `load_weights`, one member at a time."""

        lowrank.perturb(self._prover_es, noise_seed, scale32, rank, kind)

    def es_lowrank_update(self, terms: list[list], rank: int, kind: str) -> float:
        """es/noise/lowrank.py's update of the fp32 master, then the engine's weights restored from it: the
        same code and bits as the transformers path and replay (es.noise = "lowrank" or "lora")."""

        return lowrank.update(self._prover_es, [(int(seed), float(c)) for seed, c in terms], int(rank), str(kind))

    def es_skipped(self) -> list[str]:
        """Checkpoint tensors the engine's `load_weights` did not load, so ES leaves them alone."""
        return list(self._prover_es_skipped)

    def es_fingerprint(self) -> str:
        return self._prover_es.fingerprint()

    def es_holds(self, path: str) -> bool:
        """Whether model directory `path` holds this worker's ES master bit for bit (NamedWeights.holds)."""
        return self._prover_es.holds(path)

    def es_save(self, path: str) -> None:
        if getattr(self, "rank", 0) == 0:  # every worker holds the same weights; one file
            self._prover_es.save(path)

    def es_load(self, path: str) -> None:
        self._prover_es.load(path)


class CheckpointTensors(Mapping):
    """The checkpoint's tensors by name, each read from its *.safetensors file onto `device` in
    `dtype` when asked for, never all at once (safetensors' `safe_open` reads one tensor)."""

    def __init__(self, checkpoint_dir: str, device: Any, dtype: Any, names: list[str] | None = None,
                 files: dict[str, Any] | None = None):
        from safetensors import safe_open

        self.device, self.dtype = device, dtype
        if files is None:
            files = {}
            for file in sorted(Path(checkpoint_dir).glob("*.safetensors")):
                handle = safe_open(str(file), framework="pt", device="cpu")
                for name in handle.keys():
                    files[name] = handle
        self._files = files
        self.names = sorted(files) if names is None else names

    def only(self, names: list[str]) -> "CheckpointTensors":
        return CheckpointTensors("", self.device, self.dtype, names=sorted(names), files=self._files)

    def is_floating_point(self, name: str) -> bool:
        return self._files[name].get_slice(name).get_dtype() in _FLOAT_DTYPES

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise KeyError(name)
        return self._files[name].get_tensor(name).to(device=self.device, dtype=self.dtype)

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def close(self) -> None:
        self._files = {}


_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}  # safetensors' dtype names


def tied_aliases(model: Any) -> dict[str, str]:
    """{alias: canonical} for parameters the engine's model registers under several names, the
    first name canonical: vLLM's rule for tied weights (`_get_tied_embedding_params`)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        canonical = first.setdefault(id(parameter), name)
        if canonical != name:
            aliases[name] = canonical
    return aliases
