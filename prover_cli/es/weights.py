"""The weights ES moves: an fp32 master of every named tensor, written into a live model on demand.

One class serves every place weights live:
- transformers (and replay): `NamedWeights.from_module(model)` writes straight into the
  parameters (`live`), through the fused CPU path where it applies.
- vLLM: the worker extension (es/vllm_worker.py) builds one over the checkpoint's tensors on the
  GPU, and `write` is the engine's own `model.load_weights`, which fuses q/k/v and gate/up.

The master. ES keeps its own copy of the weights (one extra model in memory) so `restore` is
exact: recomputing theta = (theta + sigma*eps) - sigma*eps in floating point would not give theta
back bit for bit. With `master_dtype = "float32"` (the default) that copy is fp32 whatever the
model's dtype: perturb writes cast(master + sigma*eps) into the bf16/fp16 live weights, restore
writes cast(master), and the update is summed and applied in fp32, so a step smaller than half a
bf16 step still accumulates in the master instead of rounding away (issue 12: with bf16 weights
at sigma 1e-3, lr 5e-4, no RMSNorm weight moved in 4 iterations). Costs 4 bytes per parameter
for the master (2 more than a bf16 copy). `master_dtype = None` keeps the master in the model's
dtype: the rule of version-1 ledgers, which replay still uses for them.

Names are visited in sorted order everywhere, so the fingerprint and the update do not depend
on how a model happens to register its modules.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from prover_cli.errors import InputError
from prover_cli.es.noise.full import perturb_into, perturb_many, restore_many, stream_key, update_many
from prover_cli.fsio.jsonl import write_text_atomic
from prover_cli.policy.model_dir import (dtype_name, holds_weights, refuse_non_finite, save_tokenizer, set_config_dtype,
                                         weights_fingerprint)

Write = Callable[[Iterable[tuple[str, Any]]], None]


class ESWeights(Protocol):
    """What the loop, replay and the update need of a sampler's weights (`sampler.es_weights()`):
    `NamedWeights` (below) with transformers, `VLLMWeights` inside vLLM's workers
    (policy/samplers/vllm_sampler.py)."""

    dtype: str
    master_dtype: str

    def perturb(self, noise_seed: int, scale32: float) -> None: ...
    def restore(self) -> None: ...
    def update(self, terms: list[tuple[int, float]]) -> float: ...
    def fingerprint(self) -> str: ...
    def holds(self, path: str | Path) -> bool: ...
    def save(self, path: str | Path) -> None: ...
    def load(self, path: str | Path) -> None: ...
MASTER_DTYPE = "float32"  # what new runs keep; ledgers record it (docs/ledger.md)


def _master_of(tensor: Any, master_dtype: str | None) -> Any:
    """The master copy of one starting tensor: promoted to fp32 if below it, else cloned."""
    import torch

    if master_dtype is None or not tensor.is_floating_point() or tensor.element_size() >= 4:
        return tensor.detach().clone().contiguous()
    if master_dtype != "float32":
        raise ValueError(f"master_dtype {master_dtype!r}: only \"float32\" (or None: the model's dtype) exists")
    return tensor.detach().to(torch.float32).contiguous()  # bf16/fp16 -> fp32 is exact


class NamedWeights:
    def __init__(self, base: Mapping[str, Any], write: Write | None = None, *, master_dtype: str | None = MASTER_DTYPE,
                 live: dict[str, Any] | None = None):
        """`base`: the starting weights in the model's dtype; `live`: tensors perturb and restore
        write into directly (else `write` receives (name, tensor in the live dtype) pairs)."""
        if write is None and live is None:
            raise ValueError("NamedWeights needs `write` or `live`")
        names = sorted(base)
        self.live_dtypes = {name: base[name].dtype for name in names}
        self.base = {name: _master_of(base[name], master_dtype) for name in names}  # the master
        self._write, self._live = write, live
        # "bfloat16", or e.g. "bfloat16,float32" for a model that keeps some tensors in fp32
        self.dtype = ",".join(sorted({dtype_name(t) for t in self.live_dtypes.values()}))
        self.master_dtype = ",".join(sorted({dtype_name(t.dtype) for t in self.base.values()}))

    @classmethod
    def from_module(cls, model, *, master_dtype: str | None = MASTER_DTYPE) -> "NamedWeights":
        """Over `model.named_parameters()` (tied weights appear once, under their first name)."""
        import torch

        params = dict(model.named_parameters())
        with torch.no_grad():
            return cls({name: p.detach() for name, p in params.items()}, master_dtype=master_dtype,
                       live={name: p.data for name, p in params.items()})

    # -- perturb / restore / update ----------------------------------------------------------
    def perturb(self, noise_seed: int, scale32: float) -> None:
        """Live weights := cast(master + scale32 * eps(noise_seed)); the master stays untouched."""
        import torch

        if self._live is not None:
            with torch.no_grad():
                # every contiguous tensor in one fused call per thread; the rest one by one
                perturb_many([(master, stream_key(noise_seed, name), self._live[name])
                              for name, master in self.base.items() if self._live[name].is_contiguous()], scale32)
                for name, master in self.base.items():
                    if not self._live[name].is_contiguous():
                        self._live[name].copy_(self._perturbed(name, master, noise_seed, scale32))
            return
        assert self._write is not None  # __init__: `live` or `write`
        self._write((name, self._perturbed(name, master, noise_seed, scale32)) for name, master in self.base.items())

    def _perturbed(self, name: str, master: Any, noise_seed: int, scale32: float) -> Any:
        import torch

        out = torch.empty(master.shape, dtype=self.live_dtypes[name], device=master.device)
        perturb_into(master, stream_key(noise_seed, name), scale32, out)
        return out

    def restore(self) -> None:
        """Live weights := cast(master) (round to nearest even)."""
        import torch

        if self._live is not None:
            with torch.no_grad():
                restore_many([(master, self._live[name]) for name, master in self.base.items()
                              if self._live[name].is_contiguous()])
                for name, master in self.base.items():
                    if not self._live[name].is_contiguous():
                        self._live[name].copy_(master)
            return
        assert self._write is not None  # __init__: `live` or `write`
        self._write((name, master.to(self.live_dtypes[name])) for name, master in self.base.items())

    def update(self, terms: Sequence[tuple[int, float]]) -> float:
        """master += sum_k c_k * eps(seed_k) for terms [(noise seed, fp32 c_k)]; returns the L2 norm.

        Each chunk is read and written once with every term's noise generated on the fly (the
        fused CPU path); the sum runs in term order from +0 in fp32, as docs/ledger.md says.
        """
        import torch

        with torch.no_grad():
            names = list(self.base)
            norms = update_many([(self.base[name], [stream_key(seed, name) for seed, _ in terms]) for name in names],
                                [c for _, c in terms])
        squared_norm = 0.0
        for norm in norms:  # tensor (name) order, as before
            squared_norm += norm
        self.restore()
        return math.sqrt(squared_norm)

    def fingerprint(self) -> str:
        return weights_fingerprint(self.base)

    def holds(self, path: str | Path) -> bool:
        """Whether model directory `path` (a run's final/) holds the master bit for bit; False, never
        an error, for a missing, unreadable or foreign one (model_dir.holds_weights)."""
        return holds_weights(Path(path), self.base)

    # -- snapshots: the base as one safetensors file, written atomically ----------------------
    def save(self, path: str | Path) -> None:
        """The master as one safetensors file; NonFiniteWeightsError (nothing written) if it holds NaN or inf."""
        from safetensors.torch import save_file

        path = Path(path)
        refuse_non_finite(self.base.items(), path)
        # format=pt: transformers' from_pretrained refuses safetensors files without it
        write_text_atomic(path, lambda tmp: save_file({n: t.contiguous() for n, t in self.base.items()}, str(tmp),
                                                      metadata={"format": "pt"}))

    def load(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        if sorted(tensors) != list(self.base):
            raise InputError(f"{path}: snapshot tensor names differ from the model's parameter names")
        for name, tensor in self.base.items():
            if tensors[name].dtype != tensor.dtype or tensors[name].shape != tensor.shape:
                raise InputError(f"{path}: tensor {name} is {dtype_name(tensors[name].dtype)} "
                                 f"{list(tensors[name].shape)}, the master is {dtype_name(tensor.dtype)} "
                                 f"{list(tensor.shape)}")
            tensor.copy_(tensors[name])
        self.restore()


def save_model_dir(model: Any, tokenizer: Any, weights: NamedWeights, out_dir: str | Path) -> None:
    """A `from_pretrained` directory holding the ES master (fp32), its config.json saying so.

    Loading it with another dtype (`model.dtype = "bfloat16"`) casts once, as for any checkpoint;
    nothing the master accumulated below bf16 resolution is lost on disk. A tensor holding NaN or
    inf is refused before anything is written (NonFiniteWeightsError).
    """

    out_dir = Path(out_dir)
    # Map each state-dict entry to the master through the parameter it is: tied weights (one
    # tensor under two names) stay one tensor, so save_pretrained still drops the duplicate.
    by_pointer = {live.data_ptr(): weights.base[name] for name, live in (weights._live or {}).items()}
    state = {key: by_pointer.get(tensor.data_ptr(), tensor) for key, tensor in model.state_dict().items()}
    refuse_non_finite(state.items(), out_dir)
    model.save_pretrained(out_dir, state_dict=state)
    set_config_dtype(out_dir / "config.json", weights.master_dtype)
    save_tokenizer(tokenizer, out_dir)  # as loaded: no padding state from sampling
