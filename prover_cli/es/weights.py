"""The weights ES moves: a base copy of every named tensor, written into a live model on demand.

One class serves every place weights live, through a `write` callback that receives
(name, tensor) pairs:
- transformers (and replay): `NamedWeights.from_module(model)`; `write` copies into parameters.
- vLLM: the worker extension (es/vllm_worker.py) builds one over the checkpoint's tensors on the
  GPU, and `write` is the engine's own `model.load_weights`, which fuses q/k/v and gate/up.

Keeping a base copy (one extra model in memory) makes `restore` exact: recomputing
theta = (theta + sigma*eps) - sigma*eps in floating point would not give theta back bit for bit.
Names are visited in sorted order everywhere, so the fingerprint and the update do not depend
on how a model happens to register its modules.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from prover_cli.errors import InputError
from prover_cli.es.noise import perturbed, stream_key, updated

Write = Callable[[Iterable[tuple[str, Any]]], None]


def fingerprint(tensors: dict[str, Any]) -> str:
    """sha256 (hex) over name, dtype, shape and raw bytes of each tensor, in name order.

    The bytes are read on the CPU, so the same weights give the same fingerprint on any device.
    """
    import torch

    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        digest.update(f"{name}|{str(tensor.dtype).removeprefix('torch.')}|{list(tensor.shape)}|".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class NamedWeights:
    def __init__(self, base: dict[str, Any], write: Write):
        self.base = {name: base[name] for name in sorted(base)}
        self._write = write
        # "bfloat16", or e.g. "bfloat16,float32" for a model that keeps some tensors in fp32
        self.dtype = ",".join(sorted({str(t.dtype).removeprefix("torch.") for t in self.base.values()}))

    @classmethod
    def from_module(cls, model) -> "NamedWeights":
        """Over `model.named_parameters()` (tied weights appear once, under their first name)."""
        import torch

        params = dict(model.named_parameters())

        def write(items: Iterable[tuple[str, Any]]) -> None:
            with torch.no_grad():
                for name, tensor in items:
                    params[name].copy_(tensor)

        with torch.no_grad():
            return cls({name: p.detach().clone() for name, p in params.items()}, write)

    def perturb(self, noise_seed: int, scale32: float) -> None:
        """Live weights := base + scale32 * eps(noise_seed); the base stays untouched."""
        self._write((name, perturbed(t, stream_key(noise_seed, name), scale32)) for name, t in self.base.items())

    def restore(self) -> None:
        self._write(self.base.items())

    def update(self, terms: Sequence[tuple[int, float]]) -> float:
        """base += sum_k c_k * eps(seed_k) for terms [(noise seed, fp32 c_k)]; returns the L2 norm."""
        squared_norm = 0.0
        for name, tensor in self.base.items():
            new, squared = updated(tensor, [(stream_key(seed, name), c) for seed, c in terms])
            tensor.copy_(new)
            squared_norm += squared
        self.restore()
        return math.sqrt(squared_norm)

    def fingerprint(self) -> str:
        return fingerprint(self.base)

    # -- snapshots: the base as one safetensors file, written atomically ----------------------
    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        # format=pt: transformers' from_pretrained refuses safetensors files without it
        save_file({n: t.contiguous() for n, t in self.base.items()}, str(tmp), metadata={"format": "pt"})
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def load(self, path: str | Path) -> None:
        from safetensors.torch import load_file

        tensors = load_file(str(path))
        if sorted(tensors) != list(self.base):
            raise InputError(f"{path}: snapshot tensor names differ from the model's parameter names")
        for name, tensor in self.base.items():
            tensor.copy_(tensors[name])
        self.restore()
