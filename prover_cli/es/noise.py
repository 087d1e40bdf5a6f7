"""Device-independent noise: the same bits on CPU, on any GPU, at any thread count.

torch's CPU and CUDA generators give different numbers for the same seed (and CUDA's differ
between GPU models), so a ledger of torch seeds only replays on identical hardware. Here the
noise is a pure function computed with exact integer arithmetic, and applied with elementwise
fp32 operations whose IEEE 754 results are the same everywhere.

Construction (NOISE_VERSION 1; docs/ledger.md has the statistics):

1. Stream key: each (noise seed, tensor name) gets its own 64-bit key, the first 8 bytes of
   sha256("prover-noise-v1|<seed>|<name>"). Same-shaped tensors get different noise (a published
   implementation reused one seed for every tensor, so same-shaped layers moved together).
2. Counter hash: element i (flat, row-major) hashes the counter key + (i + 1) * GOLDEN mod 2^64
   with the SplitMix64 finalizer. torch int64 arithmetic wraps mod 2^64 on every device; right
   shifts are arithmetic in torch, so each is masked back to a logical shift.
3. Approximately Gaussian, without transcendental functions (whose last bits differ by device):
   the 64 hash bits are four 16-bit uniform integers; their exact integer sum S is Irwin-Hall(4)
   distributed, and eps = (S - 131070) * SCALE with SCALE = fp32(1 / sqrt(Var S)). |S - 131070| <=
   131070 < 2^24 converts to fp32 exactly, and one fp32 multiply is correctly rounded everywhere.
   Mean 0 exactly (S is symmetric), variance 1 - 4e-8, support |eps| <= 3.4641, excess kurtosis
   -0.3: P(|eps| > 2) = 0.0425 and P(|eps| > 3) = 0.00043 (Gaussian: 0.0455 and 0.0027).

Applying it exactly: `perturbed` and `updated` use one elementwise op per kernel (multiply, then
add: never `add(alpha=)`, `addcmul` or anything that may fuse into an FMA, never a reduction), in
fp32, and cast to the weight dtype once (round-to-nearest-even on CPU and CUDA alike). Large
tensors are processed in chunks of flat indices, which changes nothing in the values.

Three implementations, one definition: the eager torch ops below (`noise_eager`, `perturbed`,
`updated`: the definition, on any device), on CPU the fused C kernel of es/kernel.py, and on
CUDA the fused Triton kernels of es/gpu_kernel.py (each one pass, each checked against
`reference_noise` and the eager ops on its device before it is used). `noise`, `perturb_many`,
`restore_many`, `update_many` (and the one-tensor `perturb_into`, `update_in_place`) pick a
kernel when one applies, the eager ops otherwise.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Sequence

NOISE_NAME = "splitmix64-irwin-hall4"
NOISE_VERSION = 1

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's Weyl increment: 2^64 / golden ratio, odd
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_CENTER = 4 * 0xFFFF // 2  # 131070: the mean of four uniforms on 0..65535
VARIANCE_S = ((1 << 32) - 1) / 3  # Var S = 4 * (65536^2 - 1) / 12
# Elements per chunk. Values do not depend on it. On CPU, 2 MiB of int64 temporaries stay in
# cache (4x faster than 32 MiB chunks); on a GPU, large chunks amortise kernel launches.
CPU_CHUNK, GPU_CHUNK = 1 << 18, 1 << 24


def _chunks(tensor):
    size = tensor.numel()
    step = CPU_CHUNK if tensor.device.type == "cpu" else GPU_CHUNK
    return ((start, min(start + step, size)) for start in range(0, size, step))


def fp32(x: float) -> float:
    """`x` rounded to the nearest fp32 value (as a Python float, so torch converts it exactly)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# fp32(1 / sqrt(Var S)), written out so no libm rounding can change it (a test recomputes it)
SCALE = float.fromhex("0x1.bb67ae0000000p-16")


def _signed(u: int) -> int:
    """A uint64 bit pattern as the int64 torch stores."""
    u &= _MASK64
    return u - (1 << 64) if u >> 63 else u


def stream_key(noise_seed: int, name: str) -> int:
    """The 64-bit key (as int64) of tensor `name`'s noise stream for one noise seed."""
    digest = hashlib.sha256(f"prover-noise-v{NOISE_VERSION}|{noise_seed}|{name}".encode()).digest()
    return _signed(int.from_bytes(digest[:8], "little"))


def noise(key: int, start: int, stop: int, device="cpu"):
    """fp32 noise of flat elements start..stop-1 of the stream `key` (a fused kernel where one applies)."""
    if str(device) == "cpu" and _kernel_ready():
        from prover_cli.es import kernel

        return kernel.noise(key, start, stop)
    if str(device).startswith("cuda") and _gpu_kernel_ready(device):
        from prover_cli.es import gpu_kernel

        return gpu_kernel.noise(key, start, stop, device)
    return noise_eager(key, start, stop, device)


def _kernel_ready() -> bool:
    from prover_cli.es import kernel

    return kernel.available()


def _gpu_kernel_ready(device) -> bool:
    from prover_cli.es import gpu_kernel

    return gpu_kernel.available(device)


def noise_eager(key: int, start: int, stop: int, device="cpu"):
    """`noise` as eager torch int64 ops: the definition on any device (and the GPU path)."""
    import torch

    x = torch.arange(start + 1, stop + 1, dtype=torch.int64, device=device)
    x.mul_(_signed(_GOLDEN)).add_(key)  # Weyl counter; int64 wraps mod 2^64
    x.bitwise_xor_((x >> 30).bitwise_and_((1 << 34) - 1)).mul_(_signed(_MIX1))
    x.bitwise_xor_((x >> 27).bitwise_and_((1 << 37) - 1)).mul_(_signed(_MIX2))
    x.bitwise_xor_((x >> 31).bitwise_and_((1 << 33) - 1))
    # Sum the four 16-bit fields two at a time (SWAR): fields 0+1 and 2+3 land in 32-bit halves.
    pairs = (x >> 16).bitwise_and_(0x0000FFFF0000FFFF).add_(x.bitwise_and_(0x0000FFFF0000FFFF))
    s = (pairs >> 32).add_(pairs.bitwise_and_(0xFFFFFFFF))
    return s.sub_(_CENTER).to(torch.float32).mul_(SCALE)


def reference_noise(key: int, index: int) -> float:
    """The same value in pure Python (arbitrary-precision ints): what every device must match."""
    x = (key + (index + 1) * _GOLDEN) & _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    x ^= x >> 31
    s = sum((x >> shift) & 0xFFFF for shift in (0, 16, 32, 48))
    return fp32(float(s - _CENTER) * SCALE)  # the exact product of two fp32 values, rounded once


def perturbed(base, key: int, scale32: float):
    """base + scale32 * eps, computed in fp32 and cast once to base's dtype."""
    import torch

    flat = base.reshape(-1)
    out = torch.empty_like(flat)
    for start, stop in _chunks(flat):
        delta = noise_eager(key, start, stop, base.device).mul_(scale32)
        out[start:stop] = flat[start:stop].to(torch.float32).add(delta)  # add() casts on assignment
    return out.view(base.shape)


def updated(base, terms: Sequence[tuple[int, float]]):
    """(base + sum_k c_k * eps_k cast to base's dtype, squared L2 norm of the fp32 sum).

    `terms` is [(stream key, fp32 coefficient)] in member order; the sum is accumulated in fp32
    in that order, so contributions below the weight dtype's resolution add up instead of being
    rounded away one by one, and every device adds the same numbers in the same order.
    """
    import torch

    flat = base.reshape(-1)
    out = torch.empty_like(flat)
    squared_norm = 0.0
    for start, stop in _chunks(flat):
        total = torch.zeros(stop - start, dtype=torch.float32, device=base.device)
        for key, coefficient in terms:
            total.add_(noise_eager(key, start, stop, base.device).mul_(coefficient))
        out[start:stop] = flat[start:stop].to(torch.float32).add(total)
        squared_norm += float(total.double().square().sum())  # a metric only: order-free is fine
    return out.view(base.shape), squared_norm


# ---------------------------------------------------------------------------------------------
# In place, as NamedWeights uses them: the fused kernel where it applies, else the eager ops
# ---------------------------------------------------------------------------------------------

_HALF_OR_FULL = ("float32", "bfloat16", "float16")


def _fused(master, out=None) -> str | None:
    """Which fused kernel takes this (master, live) pair: "cpu", "gpu", or None (the eager ops)."""
    def ok(tensor, dtypes):
        return str(tensor.dtype).removeprefix("torch.") in dtypes and tensor.is_contiguous()

    if not ok(master, ("float32",)) or (out is not None and (out.device != master.device or not ok(out, _HALF_OR_FULL))):
        return None
    if master.device.type == "cpu":
        return "cpu" if _kernel_ready() else None
    if master.device.type == "cuda":
        return "gpu" if _gpu_kernel_ready(master.device) else None
    return None


def _kernel_module(kind: str):
    if kind == "cpu":
        from prover_cli.es import kernel

        return kernel
    from prover_cli.es import gpu_kernel

    return gpu_kernel


def perturb_into(master, key: int, scale32: float, out) -> None:
    """out := cast(master + scale32 * eps) to out's dtype (the live weight), master unchanged."""
    perturb_many([(master, key, out)], scale32)


def perturb_many(items: Sequence[tuple], scale32: float) -> None:
    """`perturb_into` for every (master, key, out): the fused ones in one kernel call per thread."""
    kinds = [_fused(master, out) for master, _, out in items]
    for kind in ("cpu", "gpu"):
        batch = [(master, key, out.view(-1)) for (master, key, out), k in zip(items, kinds) if k == kind]
        if batch:
            _kernel_module(kind).perturb_many(batch, scale32)
    for (master, key, out), kind in zip(items, kinds):
        if kind is None:
            out.copy_(perturbed(master, key, scale32).view(out.shape))  # copy_ casts: round to nearest even


def restore_many(items: Sequence[tuple]) -> None:
    """out := cast(master) (round to nearest even) for every (master, out).

    The CPU kernel does it in one call per thread; elsewhere torch's copy_ is already one pass.
    """
    fused = [(master, out.view(-1)) for master, out in items if _fused(master, out) == "cpu"]
    if fused:
        from prover_cli.es import kernel

        kernel.cast_many(fused)
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
    batches: dict[tuple[str, str], list[int]] = {}  # one kernel call per (kernel, device)
    for index, kind in enumerate(kinds):
        if kind is not None:
            batches.setdefault((kind, str(items[index][0].device)), []).append(index)
    for (kind, _), batch in batches.items():
        results = _kernel_module(kind).update_many([(items[i][0].view(-1), items[i][1]) for i in batch], coefficients)
        for index, norm in zip(batch, results):
            norms[index] = norm
    for index, ((master, keys), kind) in enumerate(zip(items, kinds)):
        if kind is None:
            new, norms[index] = updated(master, list(zip(keys, coefficients)))
            master.copy_(new)
    return norms
