"""The fused CPU path of es/noise/full.py: noise, perturb and update in one C pass, with the same bits.

The eager torch path (es/noise/full.py) runs each integer step of the hash as its own torch op over
int64 temporaries: about ten passes over memory per element. Here one small C function per job
computes the hash, the Irwin-Hall sum, the fp32 multiply and the add per element, reading the
fp32 master once and writing the live weight once. It keeps exactly the bits of
`es/noise/definition.py reference_noise` and of the documented update:

- the hash is unsigned 64-bit C arithmetic (wraps mod 2^64, logical shifts): exact everywhere;
- eps = fp32(S - 131070) * SCALE, then eps * c, then + base: one IEEE operation each, rounded
  to nearest; compiled with -ffp-contract=off (no fused multiply-add) and without -ffast-math
  (no reassociation), so vectorisation changes how many lanes run, never a result;
- fp32 -> bfloat16 / float16 casts round to nearest even with torch's NaN patterns (integer
  code; the CPU's IEEE half conversion where it has one).

Where the CPU has AVX-512 (F, DQ, BW, VL) the loops are written with intrinsics, 16 elements per
step: the two 64-bit multiplies of the hash are the floor (vpmullq), so everything around them
is kept to as few instructions as the definition allows (the four 16-bit fields are summed by
one multiply-add of signed words after flipping their top bits; casts to bf16 use the CPU's
round-to-nearest-even conversion unless a vector holds a NaN or a subnormal, which its
conversion treats differently from torch). Elsewhere the portable C loops run, which the
compiler vectorises as it can. Both are checked against the reference at load.

The library is compiled with the system C compiler at first use (~1 s), cached per source, flags
and CPU under ~/.cache/prover-cli/kernels (PROVER_KERNEL_CACHE overrides; both names kept
from before the rename, so existing caches and settings still apply), and checked against
the pure-Python reference and the eager path before it is trusted. Without a compiler, or if a
check fails, `available()` is False and callers use the eager path (same bits, slower).
PROVER_ES_KERNEL=eager turns the fused path off.

Threads: ctypes releases the GIL. A whole model is one call per thread: its tensors are laid end
to end and cut into `torch.get_num_threads()` runs of about equal length (segments), so many
small tensors cost no Python round trips. Results are elementwise, so the cut changes nothing.
The update's squared norm (a metric) is summed per fixed chunk of CHUNK elements of each tensor,
in chunk order, so it does not depend on the thread count either.
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

from prover_cli.errors import MachineError
from prover_cli.es.noise import definition
from prover_cli.es.noise.definition import SCALE
from prover_cli.fsio.jsonl import write_text_atomic

# elements per noise job and per update chunk (the unit the update's squared norm is summed in)
CHUNK = 1 << 18
_DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}
STREAM_BYTES = 16 << 20  # see _streams; PROVER_ES_STREAM_BYTES overrides

SOURCE = r"""
#include <stdint.h>
#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL
#define MIX1 0xBF58476D1CE4E5B9ULL
#define MIX2 0x94D049BB133111EBULL
#define BLOCK 512
/* elements ahead (4 KiB of fp32) to ask the master of: the hardware prefetcher alone left
   perturb ~15 % short of its in-cache speed (measured; benchmarks/bench_es.py) */
#define PREFETCH 1024

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

/* torch's float -> bfloat16: round to nearest even, every NaN -> 0x7FC0 (torch's scalar pattern) */
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

/* ---- AVX-512: 16 elements per step, the same operations lane by lane ---------------------- */
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define PROVER_AVX512 1

typedef struct { __m512i a, b; } counters16;  /* Weyl counters of 16 consecutive elements */

static inline counters16 v_counters(uint64_t x0) {
    /* lane j: x0 + j * GOLDEN, the offsets folded to constants at compile time */
    const __m512i lanes = _mm512_setr_epi64(0, (long long)GOLDEN, (long long)(2 * GOLDEN), (long long)(3 * GOLDEN),
                                            (long long)(4 * GOLDEN), (long long)(5 * GOLDEN), (long long)(6 * GOLDEN),
                                            (long long)(7 * GOLDEN));
    counters16 c;
    c.a = _mm512_add_epi64(_mm512_set1_epi64((long long)x0), lanes);
    c.b = _mm512_add_epi64(c.a, _mm512_set1_epi64((long long)(8 * GOLDEN)));
    return c;
}

static inline counters16 v_next(counters16 c) {
    const __m512i step = _mm512_set1_epi64((long long)(16 * GOLDEN));
    c.a = _mm512_add_epi64(c.a, step);
    c.b = _mm512_add_epi64(c.b, step);
    return c;
}

/* SplitMix64's finalizer; the last xor also flips bit 15 of each 16-bit field (see v_sum) */
static inline __m512i v_mix(__m512i x) {
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 30)), _mm512_set1_epi64((long long)MIX1));
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), _mm512_set1_epi64((long long)MIX2));
    return _mm512_ternarylogic_epi64(x, _mm512_srli_epi64(x, 31), _mm512_set1_epi64((long long)0x8000800080008000ULL), 0x96);
}

/* S - 131070 per element. A field u with bit 15 flipped, read as a signed 16-bit word, is
   u - 32768 exactly; madd of the words by 1 sums two fields per 32-bit lane: u0 + u1 - 65536.
   Adding 1 per lane and the two lanes of each element gives u0 + u1 + u2 + u3 - 131070. */
static inline __m512i v_centered_sum(counters16 c) {
    const __m512i ones = _mm512_set1_epi16(1), one = _mm512_set1_epi32(1);
    __m512i a = v_mix(c.a), b = v_mix(c.b);
#ifdef __AVX512VNNI__
    a = _mm512_dpwssd_epi32(one, a, ones);
    b = _mm512_dpwssd_epi32(one, b, ones);
#else
    a = _mm512_add_epi32(_mm512_madd_epi16(a, ones), one);
    b = _mm512_add_epi32(_mm512_madd_epi16(b, ones), one);
#endif
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
}

static inline __m512 v_eps(counters16 c, __m512 scale) {
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v_centered_sum(c)), scale);  /* exact conversion, one rounding */
}

/* torch's float -> bfloat16 (round to nearest even, NaN -> 0x7FC0) on 16 lanes: integer code */
static inline __m256i v_to_bf16_int(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0)));
}

/* The CPU's bf16 conversion rounds to nearest even like torch, but treats subnormal inputs as
   zero and keeps NaN payloads: a vector holding either takes the integer code instead. */
static inline __m256i v_to_bf16(__m512 v) {
#ifdef __AVX512BF16__
    if (!_mm512_fpclass_ps_mask(v, 0x01 | 0x20 | 0x80))  /* no QNaN, no denormal, no SNaN */
        return (__m256i)_mm512_cvtneps_pbh(v);
#endif
    return v_to_bf16_int(v);
}

/* IEEE float -> binary16 round to nearest even; NaN -> sign | 0x7E00 as torch writes it */
static inline __m256i v_to_f16(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    __m512i quiet = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)), _mm512_set1_epi32(0x7E00));
    return _mm256_mask_mov_epi16(h, nan, _mm512_cvtepi32_epi16(quiet));
}

static inline __m256i v_to_half(__m512 v, int out_dtype) { return out_dtype == 1 ? v_to_bf16(v) : v_to_f16(v); }

static inline void v_store(void *out, int64_t i, int out_dtype, __m512 v) {
    if (out_dtype == 0) _mm512_storeu_ps((float *)out + i, v);
    else _mm256_storeu_si256((__m256i *)((uint16_t *)out + i), v_to_half(v, out_dtype));
}

/* Non-temporal stores write whole lines to memory without first reading them into the cache
   (that read is a third of perturb's traffic). Aligned addresses only; see `aligned_head`. */
static inline void v_stream(void *out, int64_t i, int out_dtype, __m512 v) {
    if (out_dtype == 0) _mm512_stream_ps((float *)out + i, v);
    else _mm256_stream_si256((__m256i *)((uint16_t *)out + i), v_to_half(v, out_dtype));
}
#endif

static inline void store_one(void *out, int64_t i, int out_dtype, float v) {
    if (out_dtype == 0) ((float *)out)[i] = v;
    else if (out_dtype == 1) ((uint16_t *)out)[i] = to_bf16(v);
    else ((uint16_t *)out)[i] = to_f16(v);
}

/* Elements before the first one whose store address is aligned for a streamed vector (64 bytes
   for 16 fp32, 32 for 16 halves); n when the address cannot become aligned. */
static int64_t aligned_head(const void *out, int64_t n, int out_dtype) {
    uintptr_t width = out_dtype == 0 ? 4 : 2, align = 16 * width, address = (uintptr_t)out;
    if (address % width) return n;
    int64_t head = (int64_t)(((align - address % align) % align) / width);
    return head < n ? head : n;
}

/* how many elements a loop step computes: 16 with the AVX-512 code, 1 for the portable loops
   (which the compiler may still vectorise) */
int prover_lanes(void) {
#ifdef PROVER_AVX512
    return 16;
#else
    return 1;
#endif
}

/* Vectors of 16 lanes where the vector unit exists, the scalar code for the rest: the lanes
   compute exactly the scalar operations, so where a loop switches changes no result. */
void prover_noise(uint64_t key, int64_t start, int64_t n, float scale, float *out) {
    int64_t i = 0;
#ifdef PROVER_AVX512
    const __m512 vs = _mm512_set1_ps(scale);
    counters16 c = v_counters(weyl(key, start));
    for (; i + 16 <= n; i += 16, c = v_next(c)) _mm512_storeu_ps(out + i, v_eps(c, vs));
#endif
    uint64_t x = weyl(key, start + i);
    for (; i < n; i++, x += GOLDEN) out[i] = eps_of(x, scale);
}

static void perturb_scalar(uint64_t key, int64_t start, int64_t i, int64_t n, float scale, float coef,
                           const float *base, void *out, int out_dtype) {
    uint64_t x = weyl(key, start + i);
    for (; i < n; i++, x += GOLDEN) {
        float delta = eps_of(x, scale) * coef;
        store_one(out, i, out_dtype, base[i] + delta);
    }
}

/* out[i] = cast(base[i] + eps[i] * coef); out_dtype 0 fp32, 1 bf16, 2 fp16; stream: see v_stream */
void prover_perturb(uint64_t key, int64_t start, int64_t n, float scale, float coef,
                    const float *base, void *out, int out_dtype, int stream) {
    int64_t i = 0;
#ifdef PROVER_AVX512
    const __m512 vs = _mm512_set1_ps(scale), vc = _mm512_set1_ps(coef);
    if (stream) {
        i = aligned_head(out, n, out_dtype);
        perturb_scalar(key, start, 0, i, scale, coef, base, out, out_dtype);
        counters16 c = v_counters(weyl(key, start + i));
        for (; i + 16 <= n; i += 16, c = v_next(c)) {
            _mm_prefetch((const char *)(base + i + PREFETCH), _MM_HINT_T0);
            v_stream(out, i, out_dtype, _mm512_add_ps(_mm512_loadu_ps(base + i), _mm512_mul_ps(v_eps(c, vs), vc)));
        }
        _mm_sfence();  /* streamed stores are weakly ordered: complete them before the caller goes on */
    } else {
        counters16 c = v_counters(weyl(key, start));
        for (; i + 16 <= n; i += 16, c = v_next(c)) {
            _mm_prefetch((const char *)(base + i + PREFETCH), _MM_HINT_T0);
            v_store(out, i, out_dtype, _mm512_add_ps(_mm512_loadu_ps(base + i), _mm512_mul_ps(v_eps(c, vs), vc)));
        }
    }
#else
    (void)stream;
#endif
    perturb_scalar(key, start, i, n, scale, coef, base, out, out_dtype);
}

/* out[i] = cast(src[i]) for the live weights (restore); dtype codes and stream as above */
void prover_cast(int64_t n, const float *src, void *out, int out_dtype, int stream) {
    int64_t i = 0;
#ifdef PROVER_AVX512
    if (stream) {
        int64_t head = aligned_head(out, n, out_dtype);
        for (; i < head; i++) store_one(out, i, out_dtype, src[i]);
        for (; i + 16 <= n; i += 16) {
            _mm_prefetch((const char *)(src + i + PREFETCH), _MM_HINT_T0);
            v_stream(out, i, out_dtype, _mm512_loadu_ps(src + i));
        }
        _mm_sfence();
    }
    if (out_dtype != 0)
        for (; i + 16 <= n; i += 16) v_store(out, i, out_dtype, _mm512_loadu_ps(src + i));
#else
    (void)stream;
#endif
    if (out_dtype == 0) { memcpy((float *)out + i, src + i, (size_t)(n - i) * 4); return; }
    for (; i < n; i++) store_one(out, i, out_dtype, src[i]);
}

/* The fused update of one chunk: acc = sum_k eps_k * c_k in term order, from +0, in fp32;
   master += acc (fp32). Every term's noise is generated on the fly, block by block, so the
   chunk is read and written once. Returns sum(acc^2) in double (a metric), summed per lane
   i mod 8 in index order on both paths. */
#define VBLOCK 64  /* elements whose sums stay in four vector registers across every term */
double prover_update(const uint64_t *keys, const float *coefs, int64_t terms, int64_t start, int64_t n,
                     float scale, float *master) {
    double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t b = 0;
#ifdef PROVER_AVX512
    const __m512 vs = _mm512_set1_ps(scale);
    __m512d lanes = _mm512_setzero_pd();
    for (; b + VBLOCK <= n; b += VBLOCK) {
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
        for (int64_t k = 0; k < terms; k++) {
            const __m512 vc = _mm512_set1_ps(coefs[k]);
            counters16 c = v_counters(weyl(keys[k], start + b));
            acc0 = _mm512_add_ps(acc0, _mm512_mul_ps(v_eps(c, vs), vc)); c = v_next(c);
            acc1 = _mm512_add_ps(acc1, _mm512_mul_ps(v_eps(c, vs), vc)); c = v_next(c);
            acc2 = _mm512_add_ps(acc2, _mm512_mul_ps(v_eps(c, vs), vc)); c = v_next(c);
            acc3 = _mm512_add_ps(acc3, _mm512_mul_ps(v_eps(c, vs), vc));
        }
        __m512 accs[4] = {acc0, acc1, acc2, acc3};
        for (int j = 0; j < 4; j++) {
            float *m = master + b + 16 * j;
            _mm512_storeu_ps(m, _mm512_add_ps(_mm512_loadu_ps(m), accs[j]));
            __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(accs[j]));
            __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(accs[j]), 1)));
            lanes = _mm512_add_pd(lanes, _mm512_mul_pd(lo, lo));  /* elements i = 0..7 mod 16 */
            lanes = _mm512_add_pd(lanes, _mm512_mul_pd(hi, hi));  /* then 8..15: lane = i mod 8 */
        }
    }
    _mm512_storeu_pd(partial, lanes);
#endif
    float acc[BLOCK];
    for (; b < n; b += BLOCK) {
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
            partial[(b + i) & 7] += a * a;
        }
    }
    return ((partial[0] + partial[1]) + (partial[2] + partial[3])) + ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

/* -- many tensors in one call: each thread gets one list of segments ------------------------
   A segment is a run of n elements of one tensor, beginning at flat index `start` of it; src
   and dst point at that first element. One call per thread for the whole model keeps Python
   (and its GIL) out of the loop. */
typedef struct {
    float *src;            /* the fp32 master: read by perturb and cast, updated in place by update */
    void *dst;             /* the live weights: written by perturb and cast */
    const uint64_t *keys;  /* update: the stream key of each term for this tensor */
    uint64_t key;          /* perturb: the tensor's stream key */
    int64_t start, n, dtype;
} prover_segment;

void prover_perturb_segments(const prover_segment *seg, int64_t count, float scale, float coef, int stream) {
    for (int64_t j = 0; j < count; j++)
        prover_perturb(seg[j].key, seg[j].start, seg[j].n, scale, coef, seg[j].src, seg[j].dst, (int)seg[j].dtype,
                       stream);
}

void prover_cast_segments(const prover_segment *seg, int64_t count, int stream) {
    for (int64_t j = 0; j < count; j++) prover_cast(seg[j].n, seg[j].src, seg[j].dst, (int)seg[j].dtype, stream);
}

/* squares[j] := the squared norm of segment j's sum (segments are fixed chunks: see fused_cpu.py) */
void prover_update_segments(const prover_segment *seg, int64_t count, const float *coefs, int64_t terms,
                            float scale, double *squares) {
    for (int64_t j = 0; j < count; j++)
        squares[j] = prover_update(seg[j].keys, coefs, terms, seg[j].start, seg[j].n, scale, seg[j].src);
}
"""

# -ffp-contract=off: never fuse a*b+c into an FMA (whose single rounding changes bits).
# -fno-fast-math is the default; spelled out because a reassociated sum would change bits too.
CFLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-fno-strict-aliasing",
          "-fPIC", "-shared", "-std=c99"]

_lock = threading.Lock()  # guards loading
_pool_lock = threading.Lock()  # guards the pool (the self-check runs jobs while loading)
_lib: Any = None
_status: str | None = None  # why the fused path is off, or "ok"
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
    target = cache / f"es_fused_cpu_{tag}.so"
    if target.exists():
        return target

    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        source = Path(tmp) / "es_fused_cpu.c"
        source.write_text(SOURCE)

        def build(built: Path) -> None:
            result = subprocess.run([compiler, *CFLAGS, "-o", str(built), str(source)], capture_output=True,
                                    text=True, timeout=120)
            if result.returncode != 0:
                raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[:500]}")

        write_text_atomic(target, build, shared=True)  # processes may race to build it: each its own temp name
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
    except (OSError, MachineError, RuntimeError, subprocess.SubprocessError) as exc:  # MachineError: the cache write
        _status = f"off ({exc})"
        warnings.warn(f"prover ES fused CPU path unavailable, using the eager path (same bits, slower): {exc}")
        return
    u64, i64, f32, ptr = ctypes.c_uint64, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.prover_lanes.argtypes = []
    lib.prover_lanes.restype = ctypes.c_int
    lib.prover_noise.argtypes = [u64, i64, i64, f32, ptr]
    lib.prover_noise.restype = None
    lib.prover_perturb_segments.argtypes = [ptr, i64, f32, f32, ctypes.c_int]
    lib.prover_perturb_segments.restype = None
    lib.prover_cast_segments.argtypes = [ptr, i64, ctypes.c_int]
    lib.prover_cast_segments.restype = None
    lib.prover_update_segments.argtypes = [ptr, i64, ptr, i64, f32, ptr]
    lib.prover_update_segments.restype = None
    _lib = lib
    try:
        problem = _self_check()
    except Exception as exc:  # noqa: BLE001 - any failure of the check means: do not trust the library
        problem = f"{type(exc).__name__}: {exc}"
    if problem:
        _lib = None
        _status = f"off (self-check failed: {problem})"
        warnings.warn(f"prover ES fused CPU path disagrees with the reference ({problem}); using the eager path")
        return
    _status = "ok (AVX-512, 16 lanes)" if lib.prover_lanes() == 16 else "ok (portable C loops)"


def available() -> bool:
    """True when the compiled library is loaded and passed its self-check."""
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
        raise ValueError(f"{what}: the ES fused CPU path takes contiguous fp32 CPU tensors, got {tensor.dtype} on {tensor.device}")


# -- the operations (each as es/noise/full.py defines it) ------------------------------------------

class _Segment(ctypes.Structure):
    """prover_segment in SOURCE: n elements of one tensor from flat index `start`."""
    _fields_ = [("src", ctypes.c_void_p), ("dst", ctypes.c_void_p), ("keys", ctypes.c_void_p),
                ("key", ctypes.c_uint64), ("start", ctypes.c_int64), ("n", ctypes.c_int64),
                ("dtype", ctypes.c_int64)]


def _balanced(sizes: Sequence[int], parts: int) -> list[list[tuple[int, int, int]]]:
    """Tensors of `sizes` laid end to end, cut into `parts` runs of about equal length.

    Returns per run its pieces (tensor index, start, count). Cuts fall on multiples of 64
    elements (whole vector steps and cache lines), so each run is one call of one thread.
    """
    total = sum(sizes)
    cuts = [min(total, -(-total * p // parts // 64) * 64) for p in range(1, parts + 1)]
    runs: list[list[tuple[int, int, int]]] = [[] for _ in range(parts)]
    position, run = 0, 0
    for index, size in enumerate(sizes):
        start = 0
        while start < size:
            while cuts[run] <= position:
                run += 1
            take = min(size - start, cuts[run] - position)
            runs[run].append((index, start, take))
            start, position = start + take, position + take
    return [r for r in runs if r]


def _streams(bytes_written: int) -> bool:
    """Whether a call writes with non-temporal stores: when it writes more than the caches hold.

    A whole model's weights do not stay in cache between a perturb and the generation that reads
    them, so reading each line before overwriting it is wasted traffic; a small write may be read
    again from cache, and is better stored normally. Never changes a value.
    """
    raw = os.environ.get("PROVER_ES_STREAM_BYTES", "").strip()
    try:
        threshold = int(raw) if raw else STREAM_BYTES
    except ValueError:
        raise ValueError(f"PROVER_ES_STREAM_BYTES={raw!r}: expected a whole number of bytes") from None
    return bytes_written >= threshold


def _threads() -> int:
    import torch

    return max(1, torch.get_num_threads())


def _segments(pieces: Sequence[tuple[int, int, int]], fill) -> Any:
    array = (_Segment * len(pieces))()
    for slot, (index, start, count) in zip(array, pieces):
        fill(slot, index, start, count)
    return array


def noise(key: int, start: int, stop: int):
    """fp32 eps of flat elements start..stop-1 of stream `key` (as noise.noise)."""
    import torch

    out = torch.empty(stop - start, dtype=torch.float32)
    base = out.data_ptr()
    _run([lambda s=s: _lib.prover_noise(_u64(key), start + s, min(CHUNK, stop - start - s), SCALE, base + 4 * s)
          for s in range(0, stop - start, CHUNK)])
    return out


def perturb_many(items: Sequence[tuple[Any, int, Any]], scale32: float, *, stream: bool | None = None) -> None:
    """out := cast(master + eps(key) * scale32) for every (master, key, out); one call per thread.

    master: contiguous fp32 CPU; out: contiguous fp32/bf16/fp16 CPU of the same numel.
    `stream`: non-temporal stores (None: by size, see `_streams`); the values are the same.
    """

    codes = [_out_code(out, master, "perturb") for master, _, out in items]
    widths = [out.element_size() for _, _, out in items]

    def fill(slot, index, start, count):
        master, key, out = items[index]
        slot.src, slot.dst = master.data_ptr() + 4 * start, out.data_ptr() + widths[index] * start
        slot.key, slot.start, slot.n, slot.dtype = _u64(key), start, count, codes[index]

    runs = [_segments(run, fill) for run in _balanced([m.numel() for m, _, _ in items], _threads())]
    if stream is None:
        stream = _streams(sum(out.numel() * w for (_, _, out), w in zip(items, widths)))
    _run([lambda r=r: _lib.prover_perturb_segments(ctypes.addressof(r), len(r), SCALE, scale32, int(stream)) for r in runs])


def cast_many(items: Sequence[tuple[Any, Any]], *, stream: bool | None = None) -> None:
    """out := cast(master) elementwise (restore), round to nearest even, for every (master, out)."""
    codes = [_out_code(out, master, "restore") for master, out in items]
    widths = [out.element_size() for _, out in items]

    def fill(slot, index, start, count):
        master, out = items[index]
        slot.src, slot.dst = master.data_ptr() + 4 * start, out.data_ptr() + widths[index] * start
        slot.start, slot.n, slot.dtype = start, count, codes[index]

    runs = [_segments(run, fill) for run in _balanced([m.numel() for m, _ in items], _threads())]
    if stream is None:
        stream = _streams(sum(out.numel() * w for (_, out), w in zip(items, widths)))
    _run([lambda r=r: _lib.prover_cast_segments(ctypes.addressof(r), len(r), int(stream)) for r in runs])


def update_many(items: Sequence[tuple[Any, Sequence[int]]], coefs: Sequence[float]) -> list[float]:
    """master += sum_k eps(keys[k]) * coefs[k] (fp32, term order, from +0) for every (master, keys).

    Returns each master's squared norm of the sum, added per CHUNK in chunk order: a thread
    count never changes it.
    """
    import torch

    for master, keys in items:
        _check_cpu_fp32(master, "update master")  # no terms still adds +0 (turning -0 into +0), as defined
        if len(keys) != len(coefs):
            raise ValueError(f"update: {len(keys)} stream keys for {len(coefs)} coefficients")
    key_arrays = [(ctypes.c_uint64 * max(1, len(keys)))(*[_u64(k) for k in keys]) for _, keys in items]
    coef_array = (ctypes.c_float * max(1, len(coefs)))(*coefs)
    chunks = [(index, start, min(CHUNK, master.numel() - start))
              for index, (master, _) in enumerate(items) for start in range(0, master.numel(), CHUNK)]

    def fill(slot, position, _start, _count):
        index, start, count = chunks[position]
        slot.src, slot.keys = items[index][0].data_ptr() + 4 * start, ctypes.addressof(key_arrays[index])
        slot.start, slot.n = start, count

    squares = torch.zeros(len(chunks), dtype=torch.float64)
    jobs, total, parts = [], sum(c for _, _, c in chunks), _threads()
    first, done = 0, 0
    for part in range(1, parts + 1):  # runs of whole chunks, about equal in elements
        last = first
        while last < len(chunks) and (done + chunks[last][2]) * parts <= total * part:
            done, last = done + chunks[last][2], last + 1
        if part == parts:
            last = len(chunks)
        if last > first:
            segments = _segments([(p, 0, 0) for p in range(first, last)], fill)
            jobs.append(lambda s=segments, f=first: _lib.prover_update_segments(
                ctypes.addressof(s), len(s), ctypes.addressof(coef_array), len(coefs), SCALE,
                squares.data_ptr() + 8 * f))
        first = last
    _run(jobs)
    totals = [0.0] * len(items)
    for (index, _, _), value in zip(chunks, squares.tolist()):
        totals[index] += value
    return totals


def perturb_into(master: Any, key: int, scale32: float, out: Any) -> None:
    """out := cast(master + eps(key) * scale32) elementwise; master fp32, out fp32/bf16/fp16."""
    perturb_many([(master, key, out)], scale32)


def cast_into(master: Any, out: Any) -> None:
    """out := cast(master) elementwise (restore), round to nearest even."""
    cast_many([(master, out)])


def update_master(master: Any, terms: Sequence[tuple[int, float]]) -> float:
    """master += sum_k eps_k * c_k (fp32, term order, from +0), in place; returns the squared norm."""
    return update_many([(master, [k for k, _ in terms])], [c for _, c in terms])[0]


def _out_code(out: Any, master: Any, what: str) -> int:
    _check_cpu_fp32(master, f"{what} master")
    code = _DTYPE_CODES.get(str(out.dtype).removeprefix("torch."))
    if code is None or out.device.type != "cpu" or not out.is_contiguous() or out.numel() != master.numel():
        raise ValueError(f"ES fused CPU output must be a contiguous CPU float32/bfloat16/float16 tensor of "
                         f"{master.numel()} elements, got {out.dtype} {tuple(out.shape)} on {out.device}")
    return code


# -- trust, but check: the compiled code against the definition, at load ----------------------

def _self_check() -> str | None:
    """A description of the first disagreement with the reference / eager path, or None."""
    import torch

    key = definition.stream_key(20260101, "self-check")
    for start in (0, (1 << 40) - 7):  # low and very high flat indices
        got = noise(key, start, start + 64)
        want = [definition.reference_noise(key, i) for i in range(start, start + 64)]
        if [float(v) for v in got] != want:
            return f"noise at index {start}"
    generator = torch.Generator().manual_seed(0)
    size = CHUNK + 1000  # two chunks, the second partial
    base = torch.randn(size, generator=generator) * 3
    # zeros, tiny, a subnormal (its vector takes the integer bf16 cast), large, inf. Not NaN: torch
    # itself writes 0x7FC0 (scalar) or 0xFFFF (vectorised) for it, and NaN is no weight anyway.
    base[:9] = torch.tensor([0.0, -0.0, 1e-30, -1e-40, 65504.0, 7e4, 3.0e38, 1.0, float("-inf")])
    # Coefficients near 1 make the rounding of eps * c visible in the sum: an FMA (one rounding
    # for both) changes about 1 in 10 results here, so a contracting compiler cannot pass.
    scale = definition.fp32(0.37)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        want = definition.perturbed(base, key, scale).to(dtype)
        for stream in (False, True):
            for offset in (0, 1):  # an output that starts off the vector alignment: a scalar head
                out = torch.empty(size + offset, dtype=dtype)[offset:]
                perturb_many([(base, key, out)], scale, stream=stream)
                if not torch.equal(out.view(torch.uint8), want.view(torch.uint8)):
                    return f"perturb to {dtype} (stream={stream}, offset={offset})"
                cast_many([(base, out)], stream=stream)
                if not torch.equal(out.view(torch.uint8), base.to(dtype).view(torch.uint8)):
                    return f"cast to {dtype} (stream={stream}, offset={offset})"
    terms = [(definition.stream_key(s, "self-check"), definition.fp32(c)) for s, c in ((1, 0.3), (2, -0.1), (3, 0.05))]
    fused = base.clone()
    update_master(fused, terms)
    if not torch.equal(fused.view(torch.uint8), definition.updated(base, terms)[0].view(torch.uint8)):
        return "update"
    return None
