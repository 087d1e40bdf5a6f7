"""Low-rank ES noise (`es.noise = "lowrank"`, `es.rank = r`): each member's perturbation of a matrix is A Bᵀ / √r.

    eps = member_noise(seed, name, master, rank)      # fp32, master's shape: A Bᵀ/√r for a matrix, else full noise
    perturb(weights, seed, scale32, rank)             # live := cast(master + scale32 * eps), as NamedWeights.perturb
    norm = update(weights, terms, rank)               # master += sum_k c_k eps_k, fp32, in term order

EGGROLL (Sarkar et al. 2025, "Evolution Strategies at the Hyperscale", arXiv 2511.16652): a
matrix W [out, in] is perturbed by E = A Bᵀ / √r with A [out, r] and B [in, r] drawn from the
member's seed, so members can share the base product x Wᵀ and add σ (x B) Aᵀ each; the population's
update Σ_k c_k A_k B_kᵀ / √r is full-rank once the population exceeds r.

Where the numbers come from, so a ledger still holds only (seed, reward) and replays bit-exactly on
any device: A and B are the same integer-hash noise as full-rank ES (es/noise/full.py), from streams
keyed by (noise seed, "<tensor name>|lowrank-A") and "|lowrank-B" (never the full-rank stream's
key), unit variance each. E is summed from exact elementwise fp32 operations in a fixed order,
E = fp32(1/√r) * (((A_0 ⊗ B_0) + A_1 ⊗ B_1) + ...), each outer product an elementwise
multiply (no matrix product, whose blocking and FMA use differ between devices), so each element
of E is the same fp32 value everywhere; its variance is 1, as full-rank noise's. Tensors that are not
matrices (biases, norm weights) get the full-rank noise of es/noise/full.py, the same stream key as
`es.noise = "full"`.

`es.noise = "lora"` (a second definition, its own ledger value): the same A Bᵀ / √r, on the weights of
the attention and MLP projections only (`LORA_MODULES`: what vLLM's LoRA layers can carry for Qwen2,
model_executor/models/qwen2.py and lora/utils.py at vllm 0.31.0); every other tensor (embedding,
head, norms, biases) is neither perturbed nor updated. So a member is exactly a LoRA adapter on
the base weights, and vLLM generates the whole population in one engine call (es/vllm_lora.py);
the transformers sampler runs the same definition through `perturb` below.

The update is the definition of `definition.updated` (es/noise/definition.py) with E_k in place of eps_k: a fp32 sum
from +0 over the terms in order, then added to the fp32 master once, and the live weights restored
from it. Nothing here uses a fused path, so CPU and GPU run the same elementwise ops.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from prover_cli.es.noise.full import fp32, noise, stream_key

if TYPE_CHECKING:
    from prover_cli.es.weights import NamedWeights

FACTOR_SUFFIX = ("|lowrank-A", "|lowrank-B")
KINDS = ("lowrank", "lora")  # es.noise values this module defines
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_target(name: str, ndim: int) -> bool:
    """Whether `es.noise = "lora"` perturbs tensor `name` (of `ndim` dimensions): the weight matrix of a
    LORA_MODULES projection."""
    parts = name.split(".")
    return ndim == 2 and len(parts) >= 2 and parts[-1] == "weight" and parts[-2] in LORA_MODULES


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"low-rank noise {kind!r}: known {KINDS}")
    return kind


def rank_scale(rank: int) -> float:
    """fp32(1 / sqrt(rank)): A Bᵀ sums `rank` unit-variance products, this brings it back to variance 1."""
    return fp32(1.0 / math.sqrt(rank))


def factors(noise_seed: int, name: str, shape: Sequence[int], rank: int, device: Any = "cpu") -> tuple[Any, Any]:
    """(A [out, r], B [in, r]) fp32 of matrix `name` [out, in] for one noise seed."""
    out_features, in_features = shape
    a = noise(stream_key(noise_seed, name + FACTOR_SUFFIX[0]), 0, out_features * rank, device)
    b = noise(stream_key(noise_seed, name + FACTOR_SUFFIX[1]), 0, in_features * rank, device)
    return a.view(out_features, rank), b.view(in_features, rank)


def member_noise(noise_seed: int, name: str, master: Any, rank: int, kind: str = "lowrank") -> Any:
    """The fp32 perturbation direction of tensor `name` (master's shape and device) for one noise seed;
    None where `kind` ("lora") leaves the tensor alone."""
    if _kind(kind) == "lora" and not lora_target(name, master.dim()):
        return None
    if master.dim() != 2:
        return noise(stream_key(noise_seed, name), 0, master.numel(), master.device).view(master.shape)
    a, b = factors(noise_seed, name, master.shape, rank, master.device)
    total = a[:, 0:1] * b[:, 0].unsqueeze(0)
    for t in range(1, rank):  # in order: the same fp32 additions on every device
        total.add_(a[:, t:t + 1] * b[:, t].unsqueeze(0))
    return total.mul_(rank_scale(rank))


def perturb(weights: NamedWeights, noise_seed: int, scale32: float, rank: int, kind: str = "lowrank") -> None:
    """The live weights := cast(master + scale32 * eps) with low-rank eps (cast(master) where `kind`
    leaves a tensor alone); the master stays untouched."""
    import torch

    def perturbed(name: str, master: Any) -> Any:
        eps = member_noise(noise_seed, name, master, rank, kind)
        if eps is None:
            return master.to(weights.live_dtypes[name])
        return (master.to(torch.float32) + eps.mul_(scale32)).to(weights.live_dtypes[name])

    with torch.no_grad():
        values = ((name, perturbed(name, master)) for name, master in weights.base.items())
        if weights._live is not None:
            for name, value in values:
                weights._live[name].copy_(value)
        else:
            assert weights._write is not None  # NamedWeights: `live` or `write`
            weights._write(values)


def update(weights: NamedWeights, terms: Sequence[tuple[int, float]], rank: int, kind: str = "lowrank") -> float:
    """master += sum_k c_k * eps_k for terms [(noise seed, fp32 c_k)], in fp32 in term order; the L2 norm of the sum.
    Tensors `kind` leaves alone are not touched (not even by + 0)."""
    import torch

    squared_norm = 0.0
    with torch.no_grad():
        for name, master in weights.base.items():  # sorted names, as NamedWeights.update
            if _kind(kind) == "lora" and not lora_target(name, master.dim()):
                continue
            total = torch.zeros(master.shape, dtype=torch.float32, device=master.device)
            for seed, coefficient in terms:
                total.add_(member_noise(seed, name, master, rank, kind).mul_(coefficient))
            master.copy_(master.to(torch.float32).add(total))
            squared_norm += float(total.double().square().sum())  # a metric only
    weights.restore()
    return math.sqrt(squared_norm)
