"""The noise's definition: the same bits on CPU, on any GPU, at any thread count.

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

Applying it exactly: `perturbed` and `updated` use one elementwise torch op per step (multiply, then
add: never `add(alpha=)`, `addcmul` or anything that may fuse into an FMA, never a reduction), in
fp32, and cast to the weight dtype once (round-to-nearest-even on CPU and CUDA alike). Large
tensors are processed in chunks of flat indices, which changes nothing in the values.

This module is the definition: the constants, `reference_noise` (pure Python) and the eager torch
ops (`noise_eager`, `perturbed`, `updated`, on any device). The fused paths (es/fused_cpu.py on
CPU, es/fused_gpu.py on CUDA) check themselves against it before they are used, and es/noise/full.py
picks a fused path or these ops; this module imports neither, so the three form no circle.
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
