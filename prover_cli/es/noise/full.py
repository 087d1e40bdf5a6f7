"""Device-independent noise, as ES applies it: the same bits on CPU, on any GPU, at any thread count.

The noise is a pure function of (noise seed, tensor name, flat index), computed with exact
integer arithmetic and applied with elementwise fp32 operations: es/noise/definition.py has the
construction and the definition (its names are re-exported here), docs/ledger.md the statistics.

Three implementations, one definition: the eager torch ops of es/noise/definition.py
(`noise_eager`, `perturbed`, `updated`: the definition, on any device), on CPU the fused C pass
of es/fused_cpu.py, and on CUDA the fused Triton pass of es/fused_gpu.py (each one pass, each
checked against `reference_noise` and the eager ops on its device before it is used). `noise`,
`perturb_many`, `restore_many`, `update_many` (and the one-tensor `perturb_into`,
`update_in_place`) pick a fused path when one applies, the eager ops otherwise.
"""

from __future__ import annotations

from typing import Sequence

from prover_cli.es import fused_cpu, fused_gpu

from prover_cli.es.noise.definition import (NOISE_NAME, NOISE_VERSION, SCALE, VARIANCE_S,  # noqa: F401
                                            fp32, noise_eager, perturbed, reference_noise, stream_key,
                                            updated)


def noise(key: int, start: int, stop: int, device="cpu"):
    """fp32 noise of flat elements start..stop-1 of the stream `key` (a fused path where one applies)."""
    if str(device) == "cpu" and _fused_cpu_ready():
        return fused_cpu.noise(key, start, stop)
    if str(device).startswith("cuda") and _fused_gpu_ready(device):
        return fused_gpu.noise(key, start, stop, device)
    return noise_eager(key, start, stop, device)


def _fused_cpu_ready() -> bool:
    return fused_cpu.available()


def _fused_gpu_ready(device) -> bool:
    return fused_gpu.available(device)


# ---------------------------------------------------------------------------------------------
# In place, as NamedWeights uses them: the fused path where it applies, else the eager ops
# ---------------------------------------------------------------------------------------------

_HALF_OR_FULL = ("float32", "bfloat16", "float16")


def _fused(master, out=None) -> str | None:
    """Which fused path takes this (master, live) pair: "cpu", "gpu", or None (the eager ops)."""
    def ok(tensor, dtypes):
        return str(tensor.dtype).removeprefix("torch.") in dtypes and tensor.is_contiguous()

    if not ok(master, ("float32",)) or (out is not None and (out.device != master.device or not ok(out, _HALF_OR_FULL))):
        return None
    if master.device.type == "cpu":
        return "cpu" if _fused_cpu_ready() else None
    if master.device.type == "cuda":
        return "gpu" if _fused_gpu_ready(master.device) else None
    return None


def _fused_module(kind: str):
    if kind == "cpu":
        return fused_cpu

    return fused_gpu


def perturb_into(master, key: int, scale32: float, out) -> None:
    """out := cast(master + scale32 * eps) to out's dtype (the live weight), master unchanged."""
    perturb_many([(master, key, out)], scale32)


def perturb_many(items: Sequence[tuple], scale32: float) -> None:
    """`perturb_into` for every (master, key, out): the fused ones in one call per thread."""
    kinds = [_fused(master, out) for master, _, out in items]
    for kind in ("cpu", "gpu"):
        batch = [(master, key, out.view(-1)) for (master, key, out), k in zip(items, kinds) if k == kind]
        if batch:
            _fused_module(kind).perturb_many(batch, scale32)
    for (master, key, out), fused in zip(items, kinds):
        if fused is None:
            out.copy_(perturbed(master, key, scale32).view(out.shape))  # copy_ casts: round to nearest even


def restore_many(items: Sequence[tuple]) -> None:
    """out := cast(master) (round to nearest even) for every (master, out).

    The fused CPU path does it in one call per thread; elsewhere torch's copy_ is already one pass.
    """
    fused = [(master, out.view(-1)) for master, out in items if _fused(master, out) == "cpu"]
    if fused:
        fused_cpu.cast_many(fused)
    for master, out in items:
        if _fused(master, out) != "cpu":
            out.copy_(master)


def update_in_place(master, terms: Sequence[tuple[int, float]]) -> float:
    """master := `updated(master, terms)` in place; returns the squared L2 norm of the fp32 sum."""
    return update_many([(master, [key for key, _ in terms])], [c for _, c in terms])[0]


def update_many(items: Sequence[tuple], coefficients: Sequence[float]) -> list[float]:
    """`update_in_place` for every (master, stream keys of its terms), all sharing `coefficients`.

    Returns each master's squared L2 norm of its fp32 sum.
    """
    kinds = [_fused(master) for master, _ in items]
    norms = [0.0] * len(items)
    batches: dict[tuple[str, str], list[int]] = {}  # one fused call per (path, device)
    for index, kind in enumerate(kinds):
        if kind is not None:
            batches.setdefault((kind, str(items[index][0].device)), []).append(index)
    for (kind, _), batch in batches.items():
        results = _fused_module(kind).update_many([(items[i][0].view(-1), items[i][1]) for i in batch], coefficients)
        for index, norm in zip(batch, results):
            norms[index] = norm
    for index, ((master, keys), kind) in enumerate(zip(items, kinds)):
        if kind is None:
            new, norms[index] = updated(master, list(zip(keys, coefficients)))
            master.copy_(new)
    return norms
