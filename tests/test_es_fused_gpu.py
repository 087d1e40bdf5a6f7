"""es/fused_gpu.py: the Triton kernels keep the bits of the reference and of the eager ops.

No GPU here: the arithmetic is checked by Triton's interpreter (TRITON_INTERPRET=1 runs the same
kernel source on CPU tensors with numpy, in a subprocess so the setting cannot leak), and the
compiled path by an ahead-of-time compile for sm_80/sm_90 (PTX and SASS, no GPU needed) that
must contain no fused multiply-add and no arithmetic shift. Neither is a GPU result: on a GPU,
`available("cuda")` runs the same self-check on the device before the kernel is used.

Triton is optional (not a project dependency): the tests that need it skip without it, e.g.
    PYTHONPATH=/tmp/tritonlib .venv/bin/python -m pytest -q tests/test_es_fused_gpu.py
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import PATIENCE_S
from prover_cli.es import fused_gpu
from prover_cli.es.noise import full as definition

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str, tmp_path: Path, interpret: bool) -> str:
    """Run `code` in a fresh interpreter (with triton importable); fail with its stderr."""
    triton = pytest.importorskip("triton")
    paths = [str(ROOT), str(Path(triton.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p),
           "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"), "PROVER_ES_KERNEL": ""}
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result.stdout


PRELUDE = """
import random
import torch
from prover_cli.es import fused_gpu as g
from prover_cli.es.noise import full as d
from prover_cli.es.noise.full import fp32, stream_key

assert g.available("cpu"), g.status("cpu")
assert g.status("cpu") == "ok (interpreter)"

def bits(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()

# small launches, not a multiple of BLOCK: block edges and launch edges inside every tensor
g.LAUNCH = 2 * g.BLOCK + 300
SPECIAL = [0.0, -0.0, 1e-30, -1e-40, 1e-45, 2.0 ** -24, 2.0 ** -25, 65504.0, 65519.99, 65520.0, 7e4, -7e4,
           3.0e38, -3.0e38, 1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, float("inf"), -float("inf")]

def with_specials(master):
    for at in (0, g.BLOCK - 5, g.LAUNCH - 7):
        master[at:at + len(SPECIAL)] = torch.tensor(SPECIAL)
    return master
"""


# ---------------------------------------------------------------------------------------------
# The arithmetic, under Triton's interpreter
# ---------------------------------------------------------------------------------------------

def test_interpreted_noise_equals_the_pure_python_reference_at_random_indices_and_keys(tmp_path):
    run_python(PRELUDE + """
    rng = random.Random(16)
    # keys of every magnitude: Triton types a scalar by its value, the kernel must not care
    keys = [0, 1, -1, 2 ** 31 - 1, 2 ** 31, -(2 ** 31) - 1, 2 ** 63 - 1, -(2 ** 63), 1 << 40]
    keys += [stream_key(rng.randrange(1 << 63), f"layer.{i}.weight") for i in range(12)]
    starts = [0, 1, 2 ** 31 - 5, 2 ** 32 - 3, 1 << 40, (1 << 50) + 3]
    for key in keys:
        start = rng.choice(starts + [rng.randrange(1 << 44)])
        count = rng.randrange(1, 300)
        got = [float(v) for v in g.noise(key, start, start + count, "cpu")]
        assert got == [d.reference_noise(key, i) for i in range(start, start + count)], (key, start)
    assert g.noise(5, 7, 7, "cpu").numel() == 0
    """, tmp_path, interpret=True)


def test_interpreted_noise_equals_eager_on_whole_tensors_across_block_and_launch_edges(tmp_path):
    run_python(PRELUDE + """
    key = stream_key(5, "model.embed_tokens.weight")
    for start in (0, 100, (1 << 41) - 1000):
        size = 3 * g.LAUNCH + 17
        assert bits(g.noise(key, start, start + size, "cpu")) == bits(d.noise_eager(key, start, start + size))
    """, tmp_path, interpret=True)


def test_interpreted_perturb_equals_eager_for_each_dtype_with_special_values(tmp_path):
    run_python(PRELUDE + """
    generator = torch.Generator().manual_seed(1)
    size = 2 * g.LAUNCH + 77
    master = with_specials(torch.randn(size, generator=generator) * torch.logspace(-6, 4, size))
    key = stream_key(9, "w")
    # near 1 (an FMA would change bits), small, large, subnormal (a flush-to-zero would), zero
    for scale in (fp32(1e-3), fp32(-0.37), fp32(3.0), fp32(-1e-39), 0.0):
        want = d.perturbed(master, key, scale)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            out = torch.empty(size, dtype=dtype)
            g.perturb_into(master, key, scale, out)
            assert bits(out) == bits(want.to(dtype)), (scale, dtype)
    out = torch.empty(size)
    g.perturb_into(master.view(-1, 1), key, fp32(0.37), out.view(1, -1))  # shapes may differ
    assert bits(out) == bits(d.perturbed(master, key, fp32(0.37)))
    outs = [torch.empty(size, dtype=torch.bfloat16), torch.empty(7, dtype=torch.float16)]
    g.perturb_many([(master, key, outs[0]), (master[:7].clone(), key + 1, outs[1])], fp32(-0.37))
    assert bits(outs[0]) == bits(d.perturbed(master, key, fp32(-0.37)).to(torch.bfloat16))
    assert bits(outs[1]) == bits(d.perturbed(master[:7], key + 1, fp32(-0.37)).to(torch.float16))
    """, tmp_path, interpret=True)


def test_interpreted_casts_round_like_torch_on_random_bit_patterns(tmp_path):
    run_python(PRELUDE + """
    # scale 0: out = cast(master + (+-0)), so every fp32 pattern exercises the bf16 / fp16 rounding
    patterns = torch.randint(-(1 << 31), 1 << 31, (1 << 16,), dtype=torch.int64,
                             generator=torch.Generator().manual_seed(2))
    values = torch.cat([torch.tensor(SPECIAL), -torch.tensor(SPECIAL), patterns.to(torch.int32).view(torch.float32)])
    finite = values[~values.isnan()]
    for dtype in (torch.bfloat16, torch.float16):
        out = torch.empty(finite.numel(), dtype=dtype)
        g.perturb_into(finite, 3, 0.0, out)
        assert bits(out) == bits(d.perturbed(finite, 3, 0.0).to(dtype)), dtype
        nan = torch.full((5,), float("nan"))
        out = torch.empty(5, dtype=dtype)
        g.perturb_into(nan, 3, 0.5, out)
        assert out.isnan().all(), dtype
    """, tmp_path, interpret=True)


def test_interpreted_update_equals_eager_for_several_terms(tmp_path):
    run_python(PRELUDE + """
    generator = torch.Generator().manual_seed(3)
    size = 2 * g.LAUNCH + 999
    base = with_specials(torch.randn(size, generator=generator))
    terms = [(stream_key(s, "model.layers.0.mlp.up_proj.weight"), fp32(c))
             for s, c in ((11, 0.37), (12, -0.9), (13, 1.3), (14, -1e-4), (15, 0.05), (16, -0.37))]
    for used in ([], terms[:1], terms):
        fused = base.clone()
        squared_norm = g.update_master(fused, used)
        want, want_norm = d.updated(base, used)
        assert bits(fused) == bits(want), len(used)
        assert abs(squared_norm - want_norm) <= 1e-12 * max(1.0, want_norm), (squared_norm, want_norm)
    assert want_norm > 0
    # term order is part of the definition: the fp32 sum is not associative
    reordered = base.clone()
    g.update_master(reordered, terms[::-1])
    assert bits(reordered) == bits(d.updated(base, terms[::-1])[0])
    assert bits(reordered) != bits(fused)
    # many masters in one call: each with its own keys, all sharing the coefficients
    masters = [base.clone(), torch.randn(5, generator=generator), torch.randn(g.LAUNCH + 1, generator=generator)]
    coefs = [c for _, c in terms]
    keyed = [(m, [stream_key(s, f"t{i}") for s in range(len(coefs))]) for i, m in enumerate(masters)]
    wanted = [d.updated(m, list(zip(keys, coefs))) for m, keys in keyed]
    norms = g.update_many(keyed, coefs)
    for (m, _), (want, want_norm), norm in zip(keyed, wanted, norms):
        assert bits(m) == bits(want) and abs(norm - want_norm) <= 1e-12 * want_norm
    assert g.update_many([], coefs) == []
    """, tmp_path, interpret=True)


def test_interpreted_operations_reject_bad_tensors_with_a_clear_error(tmp_path):
    run_python(PRELUDE + """
    import pytest
    master = torch.zeros(100)
    with pytest.raises(ValueError, match="contiguous float32"):
        g.perturb_into(master.half(), 1, 0.5, torch.empty(100))
    with pytest.raises(ValueError, match="not contiguous"):
        g.perturb_into(torch.zeros(200)[::2], 1, 0.5, torch.empty(100))
    with pytest.raises(ValueError, match="float32/bfloat16/float16"):
        g.perturb_into(master, 1, 0.5, torch.empty(100, dtype=torch.int32))
    with pytest.raises(ValueError, match="100 elements"):
        g.perturb_into(master, 1, 0.5, torch.empty(99))
    with pytest.raises(ValueError, match="update master"):
        g.update_master(master.double(), [(1, 0.5)])
    with pytest.raises(ValueError, match="start <= stop"):
        g.noise(1, 10, 5, "cpu")
    with pytest.raises(ValueError, match="2 stream keys for 1 coefficients"):
        g.update_many([(master, [1, 2])], [0.5])
    """, tmp_path, interpret=True)


# ---------------------------------------------------------------------------------------------
# The compiled path, ahead of time (no GPU): no FMA, no arithmetic shift, no flush-to-zero
# ---------------------------------------------------------------------------------------------

def test_compiled_kernels_have_no_fma_no_arithmetic_shift_and_no_flush_to_zero(tmp_path):
    out = run_python("""
    import os, re, subprocess, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from prover_cli.es import fused_gpu as g

    kernels = g._build()
    perturb = {"master_ptr": "*fp32", "out_ptr": "*i16", "n": "i32", "base": "i64", "key": "i64",
               "scale": "fp32", "coef": "fp32", "OUT_KIND": "constexpr", "BLOCK": "constexpr"}
    variants = [
        ("noise", {"out_ptr": "*fp32", "n": "i32", "base": "i64", "key": "i64", "scale": "fp32",
                   "BLOCK": "constexpr"}, {}),
        ("perturb", {**perturb, "out_ptr": "*fp32"}, {"OUT_KIND": 0}),
        ("perturb", perturb, {"OUT_KIND": 1}),
        ("perturb", perturb, {"OUT_KIND": 2}),
        ("update", {"master_ptr": "*fp32", "keys_ptr": "*i64", "coefs_ptr": "*fp32", "n_terms": "i32",
                    "squares_ptr": "*fp64", "n": "i32", "base": "i64", "scale": "fp32", "BLOCK": "constexpr"}, {}),
    ]
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")

    def build(name, signature, constexprs, capability, options):
        source = ASTSource(kernels[name], signature, {"BLOCK": g.BLOCK, **constexprs})
        return triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)

    for capability in (80, 90):
        for name, signature, constexprs in variants:
            compiled = build(name, signature, constexprs, capability, g.LAUNCH_OPTIONS)
            ptx = compiled.asm["ptx"]
            assert "mul.rn.f32" in ptx, (name, capability)  # .rn: ptxas may not contract it either
            assert not re.search(r"\\bfma\\.[a-z]+\\.f32", ptx), (name, capability)
            assert ".ftz" not in ptx, (name, capability)
            assert "shr.u64" in ptx and "shr.s64" not in ptx, (name, capability)
            with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
                f.write(compiled.asm["cubin"])
            sass = subprocess.run([nvdisasm, f.name], capture_output=True, text=True, check=True).stdout
            assert "FMUL" in sass and not re.search(r"\\bFFMA\\b", sass), (name, capability)
            assert not re.search(r"\\bF(ADD|MUL)\\.FTZ\\b", sass), (name, capability)
        # the control: with Triton's fusion on, the same perturb source does contract into an FMA
        fused = build("perturb", {**perturb, "out_ptr": "*fp32"}, {"OUT_KIND": 0}, capability,
                      {**g.LAUNCH_OPTIONS, "enable_fp_fusion": True})
        assert re.search(r"\\bfma\\.rn\\.f32", fused.asm["ptx"]), capability
    print("compiled", triton.__version__)
    """, tmp_path, interpret=False)
    assert out.startswith("compiled")


# ---------------------------------------------------------------------------------------------
# When the kernel is off, and why
# ---------------------------------------------------------------------------------------------

def test_after_a_failed_self_check_the_operations_refuse_to_run(tmp_path):
    run_python("""
    import warnings, pytest, torch
    from prover_cli.es import fused_gpu as g
    g._self_check = lambda device: "perturb to torch.bfloat16 (simulated)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not g.available("cpu")
    assert any("disagrees with the reference" in str(w.message) for w in caught)
    assert g.status("cpu") == "off (self-check failed: perturb to torch.bfloat16 (simulated))"
    with pytest.raises(ValueError, match="self-check failed"):
        g.perturb_into(torch.zeros(4), 1, 0.5, torch.zeros(4))
    with pytest.raises(ValueError, match="self-check failed"):
        g.noise(1, 0, 4, "cpu")
    """, tmp_path, interpret=True)


def test_outside_the_interpreter_cpu_tensors_are_refused_with_a_reason(tmp_path):
    run_python("""
    import pytest, torch
    from prover_cli.es import fused_gpu as g
    assert not g.available("cpu")
    assert "TRITON_INTERPRET" in g.status("cpu")
    if not torch.cuda.is_available():
        assert not g.available("cuda") and "CUDA is not available" in g.status("cuda")
    with pytest.raises(ValueError, match="off on cpu.*TRITON_INTERPRET"):
        g.perturb_into(torch.zeros(4), 1, 0.5, torch.zeros(4))
    """, tmp_path, interpret=False)


@pytest.fixture
def fresh(monkeypatch):
    """fused_gpu with nothing loaded yet (restored afterwards)."""
    monkeypatch.setattr(fused_gpu, "_status", {})
    monkeypatch.setattr(fused_gpu, "_kernels", None)
    monkeypatch.setattr(fused_gpu, "_build_error", None)
    monkeypatch.setattr(fused_gpu, "_interpreted", False)
    for name in ("triton", "tl", "_eps", "_half_bits"):
        monkeypatch.setattr(fused_gpu, name, getattr(fused_gpu, name))
    return fused_gpu


def test_without_triton_the_kernel_is_off_with_the_reason(fresh, monkeypatch):
    monkeypatch.delenv("PROVER_ES_KERNEL", raising=False)
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ImportError
    monkeypatch.setitem(sys.modules, "triton.language", None)
    assert not fresh.available("cuda") and not fresh.available("cpu")
    assert "triton is not installed" in fresh.status("cuda")
    with pytest.raises(ValueError, match="triton is not installed"):
        fresh.update_master(torch.zeros(3).cuda() if torch.cuda.is_available() else torch.zeros(3), [])


def test_prover_es_kernel_eager_turns_it_off(fresh, monkeypatch):
    monkeypatch.setenv("PROVER_ES_KERNEL", "eager")
    assert not fresh.available("cuda")
    assert fresh.status("cuda") == "off (PROVER_ES_KERNEL=eager)"
    assert fresh._kernels is None  # nothing was even imported


def test_importing_the_module_does_not_import_triton():
    code = "import sys, prover_cli.es.fused_gpu; assert 'triton' not in sys.modules, 'triton imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=PATIENCE_S)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------------------------------------
# The self-check can fail: each kind of wrong kernel is caught (eager stand-ins, no triton)
# ---------------------------------------------------------------------------------------------

def _fma_perturb(master, key, scale32, out):
    """master + eps * scale rounded once (what an FMA computes): off in the last bit at times."""
    eps = definition.noise_eager(key, 0, master.numel(), master.device).double()
    out.copy_((master.double() + eps * scale32).float().view(out.shape))


def _single_rounding_update(master, terms):
    """The update summed in fp64 and rounded once: the order/rounding of the definition lost."""
    total = torch.zeros(master.numel(), dtype=torch.float64)
    for key, coefficient in terms:
        total += definition.noise_eager(key, 0, master.numel()).double() * coefficient
    master.copy_((master.double() + total).float())
    return float(total.square().sum())


def _eager_update(master, terms):
    new, squared_norm = definition.updated(master, terms)
    master.copy_(new)
    return squared_norm


def _eager_perturb(master, key, scale32, out):
    out.copy_(definition.perturbed(master, key, scale32).view(out.shape))


def _noise_off_by_one(key, start, stop, device="cpu"):
    return definition.noise_eager(key, start + 1, stop + 1, device)


def _noise_low_bits_only(key, start, stop, device="cpu"):
    """Right below 2^32 and at 2^40 an int32 index would wrap: emulate that bug."""
    return definition.noise_eager(key, start % (1 << 31), stop - start + start % (1 << 31), device)


@pytest.mark.parametrize("broken, caught", [
    ({"perturb_into": _fma_perturb}, "perturb to torch.float32 with scale 0.37"),
    ({"update_master": _single_rounding_update}, "update with 4 terms"),
    ({"noise": _noise_off_by_one}, "noise at index 0"),
    ({"noise": _noise_low_bits_only}, "noise at index 4294967256"),
])
def test_the_self_check_catches_a_wrong_kernel(monkeypatch, broken, caught):
    correct = {"noise": definition.noise_eager, "perturb_into": _eager_perturb, "update_master": _eager_update}
    for name, function in {**correct, **broken}.items():
        monkeypatch.setattr(fused_gpu, name, function)
    assert fused_gpu._self_check(torch.device("cpu")).startswith(caught)
    for name, function in correct.items():
        monkeypatch.setattr(fused_gpu, name, function)
    assert fused_gpu._self_check(torch.device("cpu")) is None  # the eager ops themselves pass


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_the_kernel_passes_its_self_check_and_matches_eager():
    pytest.importorskip("triton")
    assert fused_gpu.available("cuda"), fused_gpu.status("cuda")
    key = definition.stream_key(1, "w")
    master = torch.randn(3 * fused_gpu.BLOCK + 5, device="cuda")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = torch.empty(master.numel(), dtype=dtype, device="cuda")
        fused_gpu.perturb_into(master, key, definition.fp32(0.37), out)
        assert torch.equal(out.view(torch.uint8), definition.perturbed(master, key, definition.fp32(0.37))
                           .to(dtype).view(torch.uint8))
