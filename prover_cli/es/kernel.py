"""A fused CPU kernel for es/noise.py: noise, perturb and update in one pass, with the same bits.

The eager torch path (es/noise.py) runs each integer step of the hash as its own kernel over
int64 temporaries: about ten passes over memory per element. Here one small C function per job
computes the hash, the Irwin-Hall sum, the fp32 multiply and the add per element, reading the
fp32 master once and writing the live weight once. It keeps exactly the bits of
`noise.reference_noise` and of the documented update:

- the hash is unsigned 64-bit C arithmetic (wraps mod 2^64, logical shifts): exact everywhere;
- eps = fp32(S - 131070) * SCALE, then eps * c, then + base: one IEEE operation each, rounded
  to nearest; compiled with -ffp-contract=off (no fused multiply-add) and without -ffast-math
  (no reassociation), so -O3 vectorisation changes how many lanes run, never a result;
- fp32 -> bfloat16 / float16 casts round to nearest even with torch's NaN patterns (integer
  code; the CPU's IEEE half conversion where it has one).

The library is compiled with the system C compiler at first use (~1 s), cached per source, flags
and CPU under ~/.cache/prover-cli/kernels (PROVER_KERNEL_CACHE overrides), and checked against
the pure-Python reference and the eager path before it is trusted. Without a compiler, or if a
check fails, `available()` is False and callers use the eager path (same bits, slower).
PROVER_ES_KERNEL=eager turns the kernel off.

Threads: ctypes releases the GIL, so fixed chunks of CHUNK elements run on a thread pool of
`torch.get_num_threads()` workers. Results are elementwise, so the thread count changes nothing;
the update's squared norm (a metric) is summed per chunk in chunk order, so it does not either.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

CHUNK = 1 << 18  # elements per job: 1 MiB of fp32, ~0.2 ms of work, amortising the call and the pool
_DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}

SOURCE = r"""
#include <stdint.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define MIX1 0xBF58476D1CE4E5B9ULL
#define MIX2 0x94D049BB133111EBULL
#define BLOCK 512

/* eps from the Weyl counter x = key + (index + 1) * GOLDEN of a flat element: SplitMix64,
   Irwin-Hall(4), one fp32 multiply. Loops keep x as an induction variable (x += GOLDEN), which
   the vectoriser steps without the multiply. */
static inline float eps_of(uint64_t x, float scale) {
    x = (x ^ (x >> 30)) * MIX1;
    x = (x ^ (x >> 27)) * MIX2;
    x ^= x >> 31;
    uint64_t pairs = ((x >> 16) & 0x0000FFFF0000FFFFULL) + (x & 0x0000FFFF0000FFFFULL);
    int32_t s = (int32_t)((pairs >> 32) + (pairs & 0xFFFFFFFFULL)) - 131070;
    return (float)s * scale;  /* |s| < 2^24: exact conversion, then one rounded multiply */
}

/* torch's float -> bfloat16: round to nearest even, every NaN -> 0x7FC0 */
static inline uint64_t weyl(uint64_t key, int64_t index) { return key + ((uint64_t)index + 1) * GOLDEN; }

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t r = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return ((u & 0x7FFFFFFFu) > 0x7F800000u) ? (uint16_t)0x7FC0 : r;
}

/* IEEE float -> binary16, round to nearest even (what torch's Half conversion gives), NaN ->
   sign | 0x7E00 as torch writes it. With hardware half conversion (F16C / AVX512-FP16) the cast
   is the IEEE one and vectorises; otherwise integer code. */
#if defined(__FLT16_MAX__) && (defined(__F16C__) || defined(__AVX512FP16__))
static inline uint16_t to_f16(float f) {
    _Float16 h = (_Float16)f;
    uint16_t r;
    memcpy(&r, &h, 2);
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t nan = (uint16_t)(((u >> 16) & 0x8000u) | 0x7E00u);
    return ((u & 0x7FFFFFFFu) > 0x7F800000u) ? nan : r;
}
#else
static inline uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);          /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);         /* >= 65520: inf */
    if (a >= 0x38800000u) {                                          /* normal half */
        uint32_t r = a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u;
        return (uint16_t)(sign | (r >> 13));
    }
    if (a <= 0x33000000u) return (uint16_t)sign;                     /* <= 2^-25: to zero */
    uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;           /* subnormal half */
    uint32_t shift = 126u - e, q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}
#endif

void prover_noise(uint64_t key, int64_t start, int64_t n, float scale, float *out) {
    uint64_t x = weyl(key, start);
    for (int64_t i = 0; i < n; i++, x += GOLDEN) out[i] = eps_of(x, scale);
}

/* out[i] = cast(base[i] + eps[i] * coef); out_dtype 0 fp32, 1 bf16, 2 fp16 */
void prover_perturb(uint64_t key, int64_t start, int64_t n, float scale, float coef,
                    const float *base, void *out, int out_dtype) {
    uint64_t x = weyl(key, start);
    if (out_dtype == 0) {
        float *o = (float *)out;
        for (int64_t i = 0; i < n; i++, x += GOLDEN) {
            float delta = eps_of(x, scale) * coef;
            o[i] = base[i] + delta;
        }
    } else if (out_dtype == 1) {
        uint16_t *o = (uint16_t *)out;
        for (int64_t i = 0; i < n; i++, x += GOLDEN) {
            float delta = eps_of(x, scale) * coef;
            o[i] = to_bf16(base[i] + delta);
        }
    } else {
        uint16_t *o = (uint16_t *)out;
        for (int64_t i = 0; i < n; i++, x += GOLDEN) {
            float delta = eps_of(x, scale) * coef;
            o[i] = to_f16(base[i] + delta);
        }
    }
}

/* out[i] = cast(src[i]) for the live weights (restore); dtype codes as above */
void prover_cast(int64_t n, const float *src, void *out, int out_dtype) {
    uint16_t *o = (uint16_t *)out;
    if (out_dtype == 0) memcpy(out, src, (size_t)n * 4);
    else if (out_dtype == 1) for (int64_t i = 0; i < n; i++) o[i] = to_bf16(src[i]);
    else for (int64_t i = 0; i < n; i++) o[i] = to_f16(src[i]);
}

/* The fused update of one chunk: acc = sum_k eps_k * c_k in term order, from +0, in fp32;
   master += acc (fp32). Every term's noise is generated on the fly, block by block, so the
   chunk is read and written once. Returns sum(acc^2) in double (a metric). */
double prover_update(const uint64_t *keys, const float *coefs, int64_t terms, int64_t start, int64_t n,
                     float scale, float *master) {
    float acc[BLOCK];
    double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t m = (n - b < BLOCK) ? n - b : BLOCK;
        for (int64_t i = 0; i < m; i++) acc[i] = 0.0f;
        for (int64_t k = 0; k < terms; k++) {
            uint64_t x = weyl(keys[k], start + b);
            float c = coefs[k];
            for (int64_t i = 0; i < m; i++, x += GOLDEN) {
                float term = eps_of(x, scale) * c;
                acc[i] = acc[i] + term;
            }
        }
        for (int64_t i = 0; i < m; i++) {
            master[b + i] = master[b + i] + acc[i];
            double a = (double)acc[i];
            partial[i & 7] += a * a;
        }
    }
    return ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}
"""

# -ffp-contract=off: never fuse a*b+c into an FMA (whose single rounding changes bits).
# -fno-fast-math is the default; spelled out because a reassociated sum would change bits too.
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-fno-strict-aliasing",
          "-fPIC", "-shared", "-std=c99"]

_lock = threading.Lock()  # guards loading
_pool_lock = threading.Lock()  # guards the pool (the self-check runs jobs while loading)
_lib: Any = None
_status: str | None = None  # why the kernel is off, or "ok"
_pool: ThreadPoolExecutor | None = None
_pool_threads: tuple[int, int] = (0, 0)  # (threads, pid) the pool was made for


def _cpu_identity() -> str:
    """What -march=native compiled for: a shared home directory may serve several CPUs."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "model name", "Features", "CPU part")):
                flags += line
                if line.startswith(("flags", "Features")):
                    break
    except OSError:
        pass
    return f"{platform.machine()}|{platform.processor()}|{flags}"


def _cache_dir() -> Path:
    return Path(os.environ.get("PROVER_KERNEL_CACHE") or Path.home() / ".cache" / "prover-cli" / "kernels")


def _compile(compiler: str) -> Path:
    """Build (or find) the cached library; atomic, so concurrent processes may race safely."""
    tag = hashlib.sha256("\0".join([SOURCE, *CFLAGS, compiler, _cpu_identity()]).encode()).hexdigest()[:20]
    cache = _cache_dir()
    target = cache / f"es_kernel_{tag}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        source = Path(tmp) / "es_kernel.c"
        source.write_text(SOURCE)
        built = Path(tmp) / "es_kernel.so"
        result = subprocess.run([compiler, *CFLAGS, "-o", str(built), str(source)], capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")
        os.replace(built, target)
    return target


def _load() -> None:
    global _lib, _status
    if os.environ.get("PROVER_ES_KERNEL", "").lower() == "eager":
        _status = "off (PROVER_ES_KERNEL=eager)"
        return
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or shutil.which("clang")
    if not compiler:
        _status = "off (no C compiler found)"
        return
    try:
        lib = ctypes.CDLL(str(_compile(compiler)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _status = f"off ({exc})"
        warnings.warn(f"prover ES kernel unavailable, using the eager path (same bits, slower): {exc}")
        return
    u64, i64, f32, ptr = ctypes.c_uint64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.prover_noise.argtypes = [u64, i64, i64, f32, ptr]
    lib.prover_noise.restype = None
    lib.prover_perturb.argtypes = [u64, i64, i64, f32, f32, ptr, ptr, ctypes.c_int]
    lib.prover_perturb.restype = None
    lib.prover_cast.argtypes = [i64, ptr, ptr, ctypes.c_int]
    lib.prover_cast.restype = None
    lib.prover_update.argtypes = [ptr, ptr, i64, i64, i64, f32, ptr]
    lib.prover_update.restype = ctypes.c_double
    _lib = lib
    try:
        problem = _self_check()
    except Exception as exc:  # noqa: BLE001 - any failure of the check means: do not trust the kernel
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        _lib = None
        _status = f"off (self-check failed: {problem})"
        warnings.warn(f"prover ES kernel disagrees with the reference ({problem}); using the eager path")
        return
    _status = "ok"


def available() -> bool:
    """True when the compiled kernel is loaded and passed its self-check."""
    with _lock:
        if _status is None:
            _load()
    return _lib is not None


def status() -> str:
    available()
    return _status or "unknown"


def _run(jobs: Sequence[Any]) -> list[Any]:
    """Run zero-argument callables on the pool (in order of results), inline when one thread."""
    global _pool, _pool_threads
    import torch

    threads = max(1, torch.get_num_threads())
    if threads == 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    with _pool_lock:
        # a forked child inherits the pool object but not its threads: start a fresh one there
        if _pool is None or _pool_threads != (threads, os.getpid()):
            if _pool is not None and _pool_threads[1] == os.getpid():
                _pool.shutdown(wait=False)
            _pool, _pool_threads = ThreadPoolExecutor(threads, thread_name_prefix="prover-es"), (threads, os.getpid())
        pool = _pool
    return list(pool.map(lambda job: job(), jobs))


def _u64(key: int) -> int:
    return key & ((1 << 64) - 1)


def _check_cpu_fp32(tensor: Any, what: str) -> None:
    import torch

    if tensor.device.type != "cpu" or tensor.dtype != torch.float32 or not tensor.is_contiguous():
        raise ValueError(f"{what}: the ES kernel takes contiguous fp32 CPU tensors, got {tensor.dtype} on {tensor.device}")


# -- the operations (each as es/noise.py defines it) ------------------------------------------

def noise(key: int, start: int, stop: int):
    """fp32 eps of flat elements start..stop-1 of stream `key` (as noise.noise)."""
    import torch

    from prover_cli.es.noise import SCALE

    out = torch.empty(stop - start, dtype=torch.float32)
    base = out.data_ptr()
    _run([lambda s=s: _lib.prover_noise(_u64(key), start + s, min(CHUNK, stop - start - s), SCALE, base + 4 * s)
          for s in range(0, stop - start, CHUNK)])
    return out


def perturb_into(master: Any, key: int, scale32: float, out: Any) -> None:
    """out := cast(master + eps(key) * scale32) elementwise; master fp32, out fp32/bf16/fp16."""
    from prover_cli.es.noise import SCALE

    _check_cpu_fp32(master, "perturb master")
    code = _out_code(out, master)
    n, src, dst, width = master.numel(), master.data_ptr(), out.data_ptr(), out.element_size()
    _run([lambda s=s: _lib.prover_perturb(_u64(key), s, min(CHUNK, n - s), SCALE, scale32, src + 4 * s,
                                          dst + width * s, code)
          for s in range(0, n, CHUNK)])


def cast_into(master: Any, out: Any) -> None:
    """out := cast(master) elementwise (restore), round to nearest even."""
    _check_cpu_fp32(master, "restore master")
    code = _out_code(out, master)
    n, src, dst, width = master.numel(), master.data_ptr(), out.data_ptr(), out.element_size()
    _run([lambda s=s: _lib.prover_cast(min(CHUNK, n - s), src + 4 * s, dst + width * s, code)
          for s in range(0, n, CHUNK)])


def update_master(master: Any, terms: Sequence[tuple[int, float]]) -> float:
    """master += sum_k eps_k * c_k (fp32, term order, from +0), in place; returns the squared norm."""
    from prover_cli.es.noise import SCALE

    _check_cpu_fp32(master, "update master")  # no terms still adds +0 (turning -0 into +0), as defined
    keys = (ctypes.c_uint64 * len(terms))(*[_u64(k) for k, _ in terms])
    coefs = (ctypes.c_float * len(terms))(*[c for _, c in terms])
    n, base = master.numel(), master.data_ptr()
    keys_ptr, coefs_ptr = ctypes.addressof(keys), ctypes.addressof(coefs)
    squares = _run([lambda s=s: _lib.prover_update(keys_ptr, coefs_ptr, len(terms), s, min(CHUNK, n - s), SCALE,
                                                   base + 4 * s)
                    for s in range(0, n, CHUNK)])
    return float(sum(squares))  # chunk order: the same total at any thread count


def _out_code(out: Any, master: Any) -> int:
    code = _DTYPE_CODES.get(str(out.dtype).removeprefix("torch."))
    if code is None or out.device.type != "cpu" or not out.is_contiguous() or out.numel() != master.numel():
        raise ValueError(f"ES kernel output must be a contiguous CPU float32/bfloat16/float16 tensor of "
                         f"{master.numel()} elements, got {out.dtype} {tuple(out.shape)} on {out.device}")
    return code


# -- trust, but check: the compiled code against the definition, at load ----------------------

def _self_check() -> str | None:
    """A description of the first disagreement with the reference / eager path, or None."""
    import torch

    from prover_cli.es import noise as definition

    key = definition.stream_key(20260101, "self-check")
    for start in (0, (1 << 40) - 7):  # low and very high flat indices
        got = noise(key, start, start + 64)
        want = [definition.reference_noise(key, i) for i in range(start, start + 64)]
        if [float(v) for v in got] != want:
            return f"noise at index {start}"
    generator = torch.Generator().manual_seed(0)
    size = CHUNK + 1000  # two chunks, the second partial
    base = torch.randn(size, generator=generator) * 3
    base[:8] = torch.tensor([0.0, -0.0, 1e-30, -1e-40, 65504.0, 7e4, 3.0e38, 1.0])  # zeros, tiny, large
    # Coefficients near 1 make the rounding of eps * c visible in the sum: an FMA (one rounding
    # for both) changes about 1 in 10 results here, so a contracting compiler cannot pass.
    scale = definition.fp32(0.37)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = torch.empty(size, dtype=dtype)
        perturb_into(base, key, scale, out)
        if not torch.equal(out.view(torch.uint8), definition.perturbed(base, key, scale).to(dtype)
                           .view(torch.uint8)):
            return f"perturb to {dtype}"
        cast_into(base, out)
        if not torch.equal(out.view(torch.uint8), base.to(dtype).view(torch.uint8)):
            return f"cast to {dtype}"
    terms = [(definition.stream_key(s, "self-check"), definition.fp32(c)) for s, c in ((1, 0.3), (2, -0.1), (3, 0.05))]
    fused = base.clone()
    update_master(fused, terms)
    if not torch.equal(fused.view(torch.uint8), definition.updated(base, terms)[0].view(torch.uint8)):
        return "update"
    return None
