"""es/fused_cpu.py: the fused CPU path keeps the bits of the reference and of the eager ops."""

import os
import platform
import random
import subprocess
import sys
import textwrap

import pytest
import torch

from prover_cli.es import fused_cpu
from prover_cli.es.noise import full as definition
from prover_cli.es.noise.full import fp32, noise_eager, perturbed, reference_noise, stream_key, updated


def bits(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.fixture(autouse=True)
def fused_cpu_loaded():
    # gcc is present here and in CI: the fused path must be the one under test, not the fallback
    assert fused_cpu.available(), fused_cpu.status()


def test_fused_noise_equals_the_pure_python_reference_at_random_indices():
    rng = random.Random(16)
    for _ in range(40):
        key = stream_key(rng.randrange(1 << 63), f"layer.{rng.randrange(100)}.weight")
        start = rng.choice([0, rng.randrange(1 << 20), rng.randrange(1 << 44)])
        count = rng.randrange(1, 200)
        got = fused_cpu.noise(key, start, start + count)
        assert [float(v) for v in got] == [reference_noise(key, i) for i in range(start, start + count)]


def test_fused_equals_eager_on_whole_tensors_across_chunk_edges():
    key = stream_key(5, "model.embed_tokens.weight")
    size = 3 * fused_cpu.CHUNK + 17
    assert bits(fused_cpu.noise(key, 0, size)) == bits(noise_eager(key, 0, size))
    assert bits(definition.noise(key, 100, size)) == bits(noise_eager(key, 100, size))  # the dispatching API


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_perturb_and_cast_equal_the_eager_definition(dtype):
    generator = torch.Generator().manual_seed(1)
    master = torch.randn(2 * fused_cpu.CHUNK + 3, generator=generator) * torch.logspace(-6, 4, 2 * fused_cpu.CHUNK + 3)
    key = stream_key(9, "w")
    for scale in (fp32(1e-3), fp32(-0.37), fp32(3.0)):
        out = torch.empty(master.numel(), dtype=dtype)
        fused_cpu.perturb_into(master, key, scale, out)
        assert bits(out) == bits(perturbed(master, key, scale).to(dtype))
    fused_cpu.cast_into(master, out)
    assert bits(out) == bits(master.to(dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_casts_round_like_torch_on_special_and_random_bit_patterns(dtype):
    patterns = torch.randint(-(1 << 31), 1 << 31, (1 << 20,), dtype=torch.int64, generator=torch.Generator().manual_seed(2))
    values = patterns.to(torch.int32).view(torch.float32)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 65504.0, 65519.99, 65520.0, 2.0 ** -24,
                            2.0 ** -25, 1.5 * 2.0 ** -25, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1e-45, 3.4e38,
                            1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11])
    values = torch.cat([special, -special, values])
    values = values[~values.isnan()]  # NaN payloads are not weights; the pattern is checked below
    out = torch.empty(values.numel(), dtype=dtype)
    fused_cpu.cast_into(values, out)
    assert bits(out) == bits(values.to(dtype))
    nan = torch.tensor([float("nan")])
    out = torch.empty(1, dtype=dtype)
    fused_cpu.cast_into(nan, out)
    assert out.isnan().all()


def _has_cpu_flags(*flags: str) -> bool:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return False
    present = set(text.split("flags", 1)[1].split("\n", 1)[0].split()) if "flags" in text else set()
    return all(flag in present for flag in flags)


# Each build the fused CPU path can take: the portable C loops (no AVX-512, no F16C: integer half casts),
# AVX-512 without VNNI and BF16 (madd of words, integer bf16 casts), and this CPU's own (native).
BUILDS = {
    "x86-64": ("-march=x86-64", ()),
    "skylake-avx512": ("-march=skylake-avx512", ("avx512f", "avx512dq", "avx512bw", "avx512vl")),
}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="builds for x86-64 instruction sets")
@pytest.mark.parametrize("build", sorted(BUILDS))
def test_every_build_of_the_fused_cpu_path_keeps_the_bits(build, monkeypatch, tmp_path):
    march, needs = BUILDS[build]
    if not _has_cpu_flags(*needs):
        pytest.skip(f"this CPU lacks {needs}")
    flags = [march if f == "-march=native" else f for f in fused_cpu.CFLAGS]
    monkeypatch.setattr(fused_cpu, "CFLAGS", flags)
    monkeypatch.setenv("PROVER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(fused_cpu, "_lib", None)
    monkeypatch.setattr(fused_cpu, "_status", None)
    assert fused_cpu.available(), fused_cpu.status()  # its own self-check passed
    assert fused_cpu._lib.prover_lanes() == (1 if build == "x86-64" else 16)
    for dtype in (torch.bfloat16, torch.float16):
        test_casts_round_like_torch_on_special_and_random_bit_patterns(dtype)
    check_many_tensors()
    test_fused_update_equals_the_eager_sum_in_term_order()


def test_the_native_build_uses_the_vector_code_where_the_cpu_has_avx512():
    vector = _has_cpu_flags("avx512f", "avx512dq", "avx512bw", "avx512vl")
    assert fused_cpu._lib.prover_lanes() == (16 if vector else 1)
    assert ("AVX-512" in fused_cpu.status()) == vector


SIZES = [0, 1, 15, 16, 17, 63, 64, 65, 1000, fused_cpu.CHUNK - 1, fused_cpu.CHUNK + 33, 3 * 4096 + 5]


def _many(dtype, offset=0):
    generator = torch.Generator().manual_seed(11)
    masters = [torch.randn(size, generator=generator) * 2 for size in SIZES]
    masters[4][:6] = torch.tensor([0.0, -0.0, 1e-40, -3e-39, float("inf"), 3.3e38])  # a subnormal takes the slow cast
    # outputs that start `offset` elements into their storage: off the vector alignment
    outs = [torch.empty(size + offset, dtype=dtype)[offset:] for size in SIZES]
    keys = [stream_key(7, f"layer.{i}.weight") for i in range(len(SIZES))]
    return masters, outs, keys


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_many_tensors_of_every_size_equal_the_eager_definition_at_any_thread_count(threads):
    check_many_tensors(threads)


def check_many_tensors(threads=2):
    """One call for a whole model: the cut into per-thread runs and the store kind change no bit."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for stream in (None, False, True):
                for offset in (0, 1):
                    masters, outs, keys = _many(dtype, offset)
                    scale = fp32(-0.37)
                    fused_cpu.perturb_many(list(zip(masters, keys, outs)), scale, stream=stream)
                    for master, key, out in zip(masters, keys, outs):
                        assert bits(out) == bits(perturbed(master, key, scale).to(dtype)), (dtype, stream, master.numel())
                    fused_cpu.cast_many(list(zip(masters, outs)), stream=stream)
                    for master, out in zip(masters, outs):
                        assert bits(out) == bits(master.to(dtype)), (dtype, stream, master.numel())
    finally:
        torch.set_num_threads(previous)


def test_the_update_of_many_tensors_and_its_norms_do_not_depend_on_the_thread_count():
    masters, _, _ = _many(torch.float32)
    coefs = [fp32(c) for c in (3e-3, -1e-3, 0.37)]
    keys = [[stream_key(seed, f"t{i}") for seed in (1, 2, 3)] for i in range(len(masters))]
    results = {}
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            copies = [m.clone() for m in masters]
            norms = fused_cpu.update_many(list(zip(copies, keys)), coefs)
            results[threads] = ([bits(c) for c in copies], norms)
    finally:
        torch.set_num_threads(previous)
    assert results[1] == results[2] == results[3]
    for master, key_list, got, norm in zip(masters, keys, results[1][0], results[1][1]):
        expected, squared = updated(master, list(zip(key_list, coefs)))
        assert got == bits(expected)
        assert norm == pytest.approx(squared, rel=1e-12)


def test_the_split_into_runs_covers_every_element_once_in_order():
    sizes = [0, 5, 64, 1000, 1, 0, 77777]
    for parts in (1, 2, 3, 7, 64):
        runs = fused_cpu._balanced(sizes, parts)
        assert 1 <= len(runs) <= parts
        flat = [(index, start + k) for run in runs for index, start, count in run for k in range(count)]
        assert flat == [(index, k) for index, size in enumerate(sizes) for k in range(size)]
        lengths = [sum(count for _, _, count in run) for run in runs]
        assert max(lengths) - min(lengths) <= 64 * 2 or len(runs) == 1  # about equal
        assert all(sum(lengths[:r + 1]) % 64 == 0 for r in range(len(runs) - 1))  # cuts on vector steps


def test_fused_update_equals_the_eager_sum_in_term_order():
    generator = torch.Generator().manual_seed(3)
    master = torch.randn(fused_cpu.CHUNK + 999, generator=generator)
    terms = [(stream_key(s, "w"), fp32(c)) for s, c in ((1, 3e-3), (2, -1e-3), (3, 5e-4), (4, 0.25), (5, 0.0))]
    expected, squared = updated(master, terms)
    fused = master.clone()
    got = fused_cpu.update_master(fused, terms)
    assert bits(fused) == bits(expected)
    assert got == pytest.approx(squared, rel=1e-12)  # a metric: summation order may differ
    zeros = torch.tensor([-0.0, 0.0, 1.0])
    fused_cpu.update_master(zeros, [])
    assert bits(zeros) == bits(updated(torch.tensor([-0.0, 0.0, 1.0]), [])[0])  # master + (+0): -0 becomes +0
    # the order of terms is part of the definition: reversing it changes some bits
    reversed_ = master.clone()
    fused_cpu.update_master(reversed_, terms[::-1])
    assert bits(reversed_) != bits(expected)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="forces FMA with the x86 flag -mfma")
def test_a_library_compiled_with_fma_contraction_fails_its_self_check(monkeypatch, tmp_path):
    """The self-check is what makes the compiled library trusted: one that fuses multiply-add is refused."""
    flags = [f for f in fused_cpu.CFLAGS if f != "-ffp-contract=off"] + ["-ffp-contract=fast", "-mfma"]
    monkeypatch.setattr(fused_cpu, "CFLAGS", flags)
    monkeypatch.setenv("PROVER_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(fused_cpu, "_lib", None)
    monkeypatch.setattr(fused_cpu, "_status", None)
    with pytest.warns(UserWarning, match="disagrees with the reference"):
        assert not fused_cpu.available()
    assert "self-check failed" in fused_cpu.status()
    # and the public API then falls back to the eager path, with the same bits
    key = stream_key(1, "w")
    assert bits(definition.noise(key, 0, 5000)) == bits(noise_eager(key, 0, 5000))


COMPUTE = textwrap.dedent("""
    import hashlib, sys, torch
    from prover_cli.es import fused_cpu
    from prover_cli.es.noise.full import fp32, noise, perturb_into, stream_key, update_in_place
    torch.set_num_threads(int(sys.argv[1]))
    base = torch.linspace(-1, 1, 400_000)
    parts = [noise(stream_key(s, n), 0, 300_000) for s in (1, 2**62) for n in ("a", "b.weight")]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = torch.empty(base.numel(), dtype=dtype)
        perturb_into(base, stream_key(9, "w"), fp32(1e-3), out)
        parts.append(out.view(torch.uint8))
    master = base.clone()
    norm = update_in_place(master, [(stream_key(s, "w"), fp32(c)) for s, c in ((5, 1e-3), (6, -2.5e-4), (7, 3e-5))])
    parts.append(master)
    digest = hashlib.sha256(b"".join(p.contiguous().view(torch.uint8).numpy().tobytes() for p in parts))
    print(fused_cpu.available(), digest.hexdigest(), repr(norm))
""")


def test_fused_and_eager_give_the_same_bits_in_two_processes_at_1_and_2_threads():
    def run(threads, mode):
        env = {**os.environ, "PROVER_ES_KERNEL": mode}
        out = subprocess.run([sys.executable, "-c", COMPUTE, str(threads)], capture_output=True, text=True,
                             check=True, env=env).stdout.split()
        return out

    fused1, fused2 = run(1, "fused"), run(2, "fused")
    eager1, eager2 = run(1, "eager"), run(2, "eager")
    assert fused1[0] == fused2[0] == "True" and eager1[0] == eager2[0] == "False"
    assert len(fused1[1]) == 64 and fused1[1] == fused2[1] == eager1[1] == eager2[1]
    assert fused1[2] == fused2[2]  # the fused norm does not depend on the thread count either
    assert float(fused1[2]) == pytest.approx(float(eager1[2]), rel=1e-12)


def test_the_compiled_library_is_cached_per_source_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVER_KERNEL_CACHE", str(tmp_path))
    compiler = fused_cpu.shutil.which("gcc") or fused_cpu.shutil.which("cc")
    first = fused_cpu._compile(compiler)
    stamp = first.stat().st_mtime_ns
    assert fused_cpu._compile(compiler) == first and first.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporaries left behind
    monkeypatch.setattr(fused_cpu, "SOURCE", fused_cpu.SOURCE + "\n/* changed */\n")
    assert fused_cpu._compile(compiler) != first  # another source: another library


def test_streamed_stores_start_at_the_size_threshold_and_a_bad_override_is_named(monkeypatch):
    monkeypatch.delenv("PROVER_ES_STREAM_BYTES", raising=False)
    assert not fused_cpu._streams(fused_cpu.STREAM_BYTES - 1) and fused_cpu._streams(fused_cpu.STREAM_BYTES)
    monkeypatch.setenv("PROVER_ES_STREAM_BYTES", "0")
    assert fused_cpu._streams(1)
    monkeypatch.setenv("PROVER_ES_STREAM_BYTES", "16M")
    with pytest.raises(ValueError, match="PROVER_ES_STREAM_BYTES='16M'"):
        fused_cpu._streams(1)
