"""The fused GPU path (Triton) of es/noise/full.py: noise, perturb and update in one pass, same bits.

On CUDA the eager torch path (es/noise/full.py) runs each integer step of the hash as its own kernel
over int64 temporaries: about ten passes over memory per element. Here one Triton program per
BLOCK elements computes the hash, the Irwin-Hall sum, the fp32 multiply and the add in
registers, reading the fp32 master once and writing the live weight once (fused_cpu.py is the same
idea on CPU). It keeps exactly the bits of `es/noise/definition.py reference_noise` and of the eager
ops:

- the hash is tl.uint64 arithmetic: multiplies wrap mod 2^64, and `>>` on an unsigned type is a
  logical shift (on a signed one it would be arithmetic: torch's int64 path masks it back). The
  constants above 2^63 are typed uint64 by Triton; the key arrives as a signed int64 and is
  bitcast, so its type never depends on its value;
- eps = fp32(S - 131070) * SCALE, then eps * c, then + base: one IEEE operation each, rounded to
  nearest. Every launch passes enable_fp_fusion=False: with fusion on, LLVM and ptxas may turn
  the multiply-add into one FMA (one rounding instead of two: different bits);
- fp32 -> bfloat16 is integer code (round to nearest even, every NaN -> 0x7FC0, as torch on
  CPU writes it), exact everywhere (Triton's interpreter rounds bf16 ties upward, and GPUs
  before sm_80 have no bf16 conversion instruction); fp32 -> float16 is the hardware's round-to-nearest-even conversion, NaN ->
  sign | 0x7E00 (torch's CPU pattern). So NaN payloads match the fused CPU path, not necessarily a
  CUDA eager cast; NaN weights are outside the contract and the self-check does not test them;
- the update accumulates all terms in fp32, in term order, from +0.0, in registers (every
  seed's noise generated on the fly), then adds once to the master: one read and one write of
  the master per update instead of one pass per term.

Trust, but check: `available(device)` compiles the kernels on that device and compares them
with the pure-Python reference and the eager ops (low and 2^40 indices, several blocks, special
values, coefficients near 1 so an FMA would show, subnormals so a flush-to-zero would show).
Without triton, off CUDA, with PROVER_ES_KERNEL=eager, or on any failure it is False, status()
says why, callers use the eager path (same bits, slower), and the operations here refuse to
run on that device (ValueError). Triton is optional and imported
only here, at first use. With TRITON_INTERPRET=1 set before the first use, Triton's interpreter
runs the same kernels on CPU tensors with numpy: that is how the tests check the arithmetic on
a machine without a GPU (it checks the kernel source and Triton's typing, not a GPU compiler).
The tests also compile the kernels ahead of time for sm_80 and sm_90 (no GPU needed) and read
the PTX and SASS: mul.rn/add.rn and no FMA, no flush-to-zero, only logical 64-bit shifts.

Restoring the live weights (cast(master)) needs no kernel here: torch's copy_ on CUDA is one
pass and rounds finite values to nearest even as well.

Launches cover at most LAUNCH elements (in-kernel offsets stay small int32; the flat index is
int64, so tensors past 2^31 elements work); values do not depend on LAUNCH or BLOCK.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any, Sequence

from prover_cli.es.noise import definition
from prover_cli.es.noise.definition import SCALE

BLOCK = 1024  # elements per Triton program: 4 warps, 8 elements per thread
LAUNCH = 1 << 26  # elements per launch (65536 programs); bounds the grid and the int32 offsets
# Every launch: enable_fp_fusion=False keeps eps * c and + base two rounded operations (PTX
# mul.rn / add.rn, ptxas --fmad=false); Triton's default (on through 3.9) lets them become an FMA.
LAUNCH_OPTIONS = {"num_warps": 4, "enable_fp_fusion": False}

_lock = threading.RLock()  # re-entrant: the self-check runs the operations while loading
_status: dict[str, str] = {}  # device -> "ok" or why the fused path is off there
_kernels: dict[str, Any] | None = None  # name -> triton kernel, once built


def _kernel(name: str) -> Any:
    """A built kernel: only called once `available` said the fused path is on."""
    assert _kernels is not None, "the Triton kernels are not built"
    return _kernels[name]
_build_error: str | None = None
_interpreted = False  # the kernels were built under TRITON_INTERPRET=1 (they then take CPU tensors)
_checking: set[str] = set()  # devices whose self-check is running (it may use the operations there)

# Bound by _build(): module globals, so the kernels resolve them on every Triton version
# (older versions do not resolve closure variables inside a kernel).
triton: Any = None
tl: Any = None
_eps: Any = None
_half_bits: Any = None


# ---------------------------------------------------------------------------------------------
# The kernels (defined at first use, so importing this module never imports triton)
# ---------------------------------------------------------------------------------------------

def _build() -> dict[str, Any]:
    """Import triton and define the kernels; raises ImportError without triton."""
    global triton, tl, _eps, _half_bits
    import triton
    import triton.language as tl

    @triton.jit
    def _eps(index, key, scale):
        """eps of int64 flat indices of the stream `key` (a signed int64 scalar)."""
        x = key.to(tl.int64).to(tl.uint64, bitcast=True) + (index + 1).to(tl.uint64) * 0x9E3779B97F4A7C15
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
        x = (x ^ (x >> 27)) * 0x94D049BB133111EB
        x = x ^ (x >> 31)
        # the four 16-bit fields summed two at a time (SWAR): fields 0+1 and 2+3 in 32-bit halves
        pairs = ((x >> 16) & 0x0000FFFF0000FFFF) + (x & 0x0000FFFF0000FFFF)
        s = ((pairs >> 32) + (pairs & 0xFFFFFFFF)).to(tl.int32) - 131070
        return s.to(tl.float32) * scale  # |s| < 2^24: exact conversion, then one rounded multiply

    @triton.jit
    def _half_bits(y, OUT_KIND: tl.constexpr):
        """fp32 -> the int16 bit pattern of bfloat16 (OUT_KIND 1) or float16 (2), nearest even."""
        u = y.to(tl.uint32, bitcast=True)
        if OUT_KIND == 1:
            r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
            r = tl.where((u & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, r)
        else:
            r = y.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.uint32)
            r = tl.where((u & 0x7FFFFFFF) > 0x7F800000, ((u >> 16) & 0x8000) | 0x7E00, r)
        return r.to(tl.uint16).to(tl.int16, bitcast=True)

    @triton.jit(do_not_specialize=["base", "key"])
    def noise_kernel(out_ptr, n, base, key, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, _eps(base.to(tl.int64) + offs, key, scale), mask=offs < n)

    @triton.jit(do_not_specialize=["base", "key"])
    def perturb_kernel(master_ptr, out_ptr, n, base, key, scale, coef, OUT_KIND: tl.constexpr,
                       BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        delta = _eps(base.to(tl.int64) + offs, key, scale) * coef
        y = tl.load(master_ptr + offs, mask=mask) + delta
        if OUT_KIND == 0:
            tl.store(out_ptr + offs, y, mask=mask)
        else:
            tl.store(out_ptr + offs, _half_bits(y, OUT_KIND), mask=mask)

    @triton.jit(do_not_specialize=["base", "n_terms"])
    def update_kernel(master_ptr, keys_ptr, coefs_ptr, n_terms, squares_ptr, n, base, scale,
                      BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        index = base.to(tl.int64) + offs
        acc = tl.zeros([BLOCK], dtype=tl.float32)  # +0.0, as the eager torch.zeros
        for k in range(n_terms):
            acc = acc + _eps(index, tl.load(keys_ptr + k), scale) * tl.load(coefs_ptr + k)
        tl.store(master_ptr + offs, tl.load(master_ptr + offs, mask=mask) + acc, mask=mask)
        a = tl.where(mask, acc, 0.0).to(tl.float64)
        tl.store(squares_ptr + pid, tl.sum(a * a, axis=0))  # a metric: one partial per program

    return {"noise": noise_kernel, "perturb": perturb_kernel, "update": update_kernel}


def _launch(kernel: Any, n: int, *args: Any, **constexprs: Any) -> None:
    """Run `kernel` over n elements (n <= LAUNCH) without FMA contraction."""
    grid = (triton.cdiv(n, BLOCK),)
    with warnings.catch_warnings():
        if _interpreted:  # numpy warns when fp32 -> fp16 overflows to inf, as defined
            warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)
        kernel[grid](*args, BLOCK=BLOCK, **LAUNCH_OPTIONS, **constexprs)


# ---------------------------------------------------------------------------------------------
# Availability: per device, after a self-check there
# ---------------------------------------------------------------------------------------------

def _device_name(device: Any) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


def _load(name: str) -> str:
    """Why the fused path is off on device `name`, or "ok" after a passed self-check."""
    global _kernels, _build_error, _interpreted
    import torch

    if os.environ.get("PROVER_ES_KERNEL", "").lower() == "eager":
        return "off (PROVER_ES_KERNEL=eager)"
    if _kernels is None and _build_error is None:
        try:
            _kernels = _build()
            _interpreted = type(_kernels["noise"]).__name__ == "InterpretedFunction"
        except ImportError as exc:
            _build_error = f"off (triton is not installed: {exc})"
        except Exception as exc:  # noqa: BLE001 - a Triton that cannot define them is not used
            _build_error = f"off (defining the Triton kernels failed: {type(exc).__name__}: {exc})"
            warnings.warn(f"prover ES fused GPU path unavailable, using the eager path (same bits, slower): {exc}")
    if _build_error:
        return _build_error
    device = torch.device(name)
    if device.type == "cpu" and not _interpreted:
        return "off (CPU tensors need TRITON_INTERPRET=1; the fused CPU path is es/fused_cpu.py)"
    if device.type not in ("cpu", "cuda"):
        return f"off (no Triton kernel for {device.type} devices)"
    if device.type == "cuda" and not torch.cuda.is_available():
        return "off (CUDA is not available)"
    _checking.add(name)
    try:
        problem = _self_check(device)
    except Exception as exc:  # noqa: BLE001 - any failure of the check means: do not trust the compiled code
        problem = f"{type(exc).__name__}: {exc}"
    finally:
        _checking.discard(name)
    if problem:
        warnings.warn(f"prover ES fused GPU path disagrees with the reference on {name} ({problem}); "
                      "using the eager path (same bits, slower)")
        return f"off (self-check failed: {problem})"
    return "ok (interpreter)" if _interpreted else "ok"


def available(device: Any = "cuda") -> bool:
    """True when the Triton kernels compiled on `device` and passed their self-check there."""
    name = _device_name(device)
    with _lock:
        if name not in _status:
            _status[name] = _load(name)
    return _status[name].startswith("ok")


def status(device: Any = "cuda") -> str:
    """Why the fused GPU path is off on `device`, or "ok" (checking the device first if needed)."""
    available(device)
    return _status[_device_name(device)]


def _check(tensor: Any, what: str, dtypes: tuple[Any, ...]) -> None:
    name = _device_name(tensor.device)
    if name not in _checking and not available(name):  # fail closed: never run unchecked compiled code
        raise ValueError(f"{what}: the ES fused GPU path is off on {name}: {_status[name]}")
    device_ok = tensor.device.type == "cuda" or (_interpreted and tensor.device.type == "cpu")
    if not device_ok or tensor.dtype not in dtypes or not tensor.is_contiguous():
        names = "/".join(str(d).removeprefix("torch.") for d in dtypes)
        where = "CUDA (or CPU under TRITON_INTERPRET=1)" if _interpreted else "CUDA"
        raise ValueError(f"{what}: the ES fused GPU path takes contiguous {names} {where} tensors, got "
                         f"{tensor.dtype} {tuple(tensor.shape)} on {tensor.device}"
                         f"{'' if tensor.is_contiguous() else ' (not contiguous)'}")


def _signed(key: int) -> int:
    """A 64-bit key as the signed int64 the kernels take (stream_key already gives one)."""
    key &= (1 << 64) - 1
    return key - (1 << 64) if key >> 63 else key


def _on(device: Any):
    """Launch on the tensor's GPU (Triton uses the current device), a no-op on CPU."""
    import contextlib

    import torch

    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


# ---------------------------------------------------------------------------------------------
# The operations (each as es/noise/full.py defines it)
# ---------------------------------------------------------------------------------------------

def noise(key: int, start: int, stop: int, device: Any = "cuda"):
    """fp32 eps of flat elements start..stop-1 of stream `key` on `device` (as noise.noise)."""
    import torch

    if not 0 <= start <= stop:
        raise ValueError(f"noise: need 0 <= start <= stop, got start={start} stop={stop}")
    out = torch.empty(stop - start, dtype=torch.float32, device=device)
    _check(out, "noise output", (torch.float32,))
    with _on(out.device):
        for s in range(0, out.numel(), LAUNCH):
            n = min(LAUNCH, out.numel() - s)
            _launch(_kernel("noise"), n, out[s:s + n], n, start + s, _signed(key), SCALE)
    return out


_OUT_KINDS = {"torch.float32": 0, "torch.bfloat16": 1, "torch.float16": 2}


def perturb_into(master: Any, key: int, scale32: float, out: Any) -> None:
    """out := cast(master + fp32(eps(key) * scale32)) elementwise; master fp32, out fp32/bf16/fp16."""
    import torch

    _check(master, "perturb master", (torch.float32,))
    _check(out, "perturb output", (torch.float32, torch.bfloat16, torch.float16))
    if out.numel() != master.numel() or out.device != master.device:
        raise ValueError(f"perturb output: {out.numel()} elements on {out.device}, master: "
                         f"{master.numel()} elements on {master.device}")

    kind = _OUT_KINDS[str(out.dtype)]
    src = master.reshape(-1)
    dst = out.reshape(-1) if kind == 0 else out.reshape(-1).view(torch.int16)  # half types as bits
    with _on(master.device):
        for s in range(0, src.numel(), LAUNCH):
            n = min(LAUNCH, src.numel() - s)
            _launch(_kernel("perturb"), n, src[s:s + n], dst[s:s + n], n, s, _signed(key), SCALE,
                    float(scale32), OUT_KIND=kind)


def perturb_many(items: Sequence[tuple[Any, int, Any]], scale32: float) -> None:
    """`perturb_into` for every (master, key, out), as fused_cpu.perturb_many does on CPU."""
    for master, key, out in items:
        perturb_into(master, key, scale32, out)


def update_master(master: Any, terms: Sequence[tuple[int, float]]) -> float:
    """master += sum_k fp32(eps_k * c_k) (fp32, term order, from +0), in place; returns the squared norm."""
    return update_many([(master, [key for key, _ in terms])], [c for _, c in terms])[0]


def update_many(items: Sequence[tuple[Any, Sequence[int]]], coefs: Sequence[float]) -> list[float]:
    """master += sum_k fp32(eps(keys[k]) * coefs[k]) for every (master, keys); the squared norms.

    As fused_cpu.update_many on CPU: every master's terms share `coefs`. The keys and coefficients
    go to the device once, and the norms come back in one synchronisation.
    """
    import torch

    for master, keys in items:
        _check(master, "update master", (torch.float32,))  # no terms still adds +0 (-0 becomes +0), as defined
        if len(keys) != len(coefs):
            raise ValueError(f"update: {len(keys)} stream keys for {len(coefs)} coefficients")
    if not items:
        return []
    device = items[0][0].device
    if any(master.device != device for master, _ in items):
        raise ValueError("update: all masters of one call must be on one device")
    # one padding column, so an empty term list still passes valid pointers
    keys_all = torch.tensor([[_signed(k) for k in keys] + [0] for _, keys in items], dtype=torch.int64, device=device)
    coefs_dev = torch.tensor(list(coefs) + [0.0], dtype=torch.float32, device=device)
    totals = []
    with _on(device):
        for (master, _), keys_dev in zip(items, keys_all):
            flat = master.reshape(-1)  # a view: contiguous
            total = torch.zeros((), dtype=torch.float64, device=device)
            for s in range(0, flat.numel(), LAUNCH):
                n = min(LAUNCH, flat.numel() - s)
                squares = torch.empty(triton.cdiv(n, BLOCK), dtype=torch.float64, device=device)
                _launch(_kernel("update"), n, flat[s:s + n], keys_dev, coefs_dev, len(coefs), squares, n, s, SCALE)
                total += squares.sum()  # launch order, fixed grid: the same total every run
            totals.append(total)
    return torch.stack(totals).tolist()


# ---------------------------------------------------------------------------------------------
# Trust, but check: the compiled kernels against the definition, on the device, at load
# ---------------------------------------------------------------------------------------------

def _bits(tensor: Any) -> Any:
    import torch

    return tensor.contiguous().view(-1).view(torch.uint8)


def _self_check(device: Any) -> str | None:
    """A description of the first disagreement with the reference / eager path, or None."""
    import torch

    key = definition.stream_key(20260101, "gpu-self-check")
    for start in (0, (1 << 32) - 40, (1 << 40) - 7):  # low, across 2^32, very high flat indices
        got = noise(key, start, start + 80, device).cpu()
        if [float(v) for v in got] != [definition.reference_noise(key, i) for i in range(start, start + 80)]:
            return f"noise at index {start}"
    generator = torch.Generator().manual_seed(0)
    size = 3 * BLOCK + 77  # several programs, the last partial
    base = torch.randn(size, generator=generator) * 3
    special = [0.0, -0.0, 1e-30, -1e-40, 65504.0, 7e4, -7e4, 3.0e38, -3.0e38, 1.0, float("inf"), 1e-45]
    base[:len(special)] = torch.tensor(special)
    base[BLOCK - 3:BLOCK + len(special) - 3] = torch.tensor(special)  # across a block edge
    base = base.to(device)
    # Coefficients near 1 make the rounding of eps * c visible in the sum: an FMA (one rounding
    # for both) changes about 1 in 10 results here. A subnormal coefficient makes a
    # flush-to-zero visible (eps * 1e-39 is subnormal; torch's CUDA ops keep subnormals).
    for scale in (definition.fp32(0.37), definition.fp32(-1e-39)):
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            out = torch.empty(size, dtype=dtype, device=device)
            perturb_into(base, key, scale, out)
            want = definition.perturbed(base, key, scale).to(dtype)
            if not torch.equal(_bits(out), _bits(want)):
                return f"perturb to {dtype} with scale {scale}"
    terms = [(definition.stream_key(s, "gpu-self-check"), definition.fp32(c))
             for s, c in ((1, 0.37), (2, -0.9), (3, 0.05), (4, 1.3))]
    for used in (terms, terms[:1], []):
        fused = base.clone()
        squared_norm = update_master(fused, used)
        want, want_norm = definition.updated(base, used)
        if not torch.equal(_bits(fused), _bits(want)):
            return f"update with {len(used)} terms"
        if abs(squared_norm - want_norm) > 1e-9 * max(1.0, want_norm):
            return f"update squared norm {squared_norm} != {want_norm}"
    return None
