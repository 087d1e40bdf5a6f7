"""es/noise/full.py: the same bits everywhere, one stream per tensor, and the documented statistics."""

import hashlib
import math
import subprocess
import sys
import textwrap

import pytest
import torch

from prover_cli.es.noise import definition as noise_definition, full as noise
from prover_cli.es.noise.full import SCALE, VARIANCE_S, fp32, perturbed, reference_noise, stream_key, updated


def digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def test_torch_noise_equals_the_pure_python_integer_reference():
    key = stream_key(12345, "model.layers.0.mlp.up_proj.weight")
    values = noise.noise(key, 1000, 3000)
    assert values.dtype == torch.float32
    assert [float(v) for v in values] == [reference_noise(key, i) for i in range(1000, 3000)]


def test_chunking_does_not_change_values(monkeypatch):
    base = torch.zeros(10_007)
    key = stream_key(3, "w")
    whole = perturbed(base, key, fp32(0.5))
    monkeypatch.setattr(noise_definition, "CPU_CHUNK", 1000)  # 11 chunks, the last one partial
    assert torch.equal(perturbed(base, key, fp32(0.5)), whole)
    assert torch.equal(updated(base, [(key, fp32(0.5))])[0], whole)


COMPUTE = textwrap.dedent("""
    import hashlib, torch
    from prover_cli.es.noise.full import noise, stream_key, perturbed, updated, fp32

    def compute():
        x = torch.cat([noise(stream_key(s, n), 0, 300_000) for s in (1, 2**62) for n in ("a", "b.weight")])
        base = torch.linspace(-1, 1, 300_000)
        terms = [(stream_key(s, "w"), fp32(c)) for s, c in ((5, 1e-3), (6, -2.5e-4), (7, 3e-5))]
        y = torch.cat([x, perturbed(base, stream_key(9, "w"), fp32(1e-3)), updated(base, terms)[0]])
        return hashlib.sha256(y.view(torch.uint8).numpy().tobytes()).hexdigest()
""")


def test_same_bits_in_two_processes_at_1_or_2_threads_and_in_this_one():
    script = COMPUTE + "import sys\ntorch.set_num_threads(int(sys.argv[1]))\nprint(compute())\n"
    hashes = [subprocess.run([sys.executable, "-c", script, str(threads)], capture_output=True, text=True,
                             check=True).stdout.strip() for threads in (1, 2)]
    namespace: dict = {}
    exec(COMPUTE, namespace)
    hashes.append(namespace["compute"]())
    assert len(hashes[0]) == 64 and hashes[0] == hashes[1] == hashes[2]


def test_same_values_on_two_calls():
    key = stream_key(7, "x")
    assert digest(noise.noise(key, 0, 50_000)) == digest(noise.noise(key, 0, 50_000))


def test_every_tensor_and_every_seed_has_its_own_stream():
    a = noise.noise(stream_key(1, "layers.0.weight"), 0, 100_000)
    b = noise.noise(stream_key(1, "layers.1.weight"), 0, 100_000)  # same shape, other name
    c = noise.noise(stream_key(2, "layers.0.weight"), 0, 100_000)  # same name, other seed
    for x, y in ((a, b), (a, c), (b, c)):
        assert not torch.equal(x, y)
        correlation = float((x * y).mean())  # unit variance: mean of products is the correlation
        assert abs(correlation) < 0.02  # 6 standard errors of an independent pair (1/sqrt(1e5))


def irwin_hall4_tail(z: float) -> float:
    """P(|eps| > z) for the continuous Irwin-Hall(4) standardised (valid for z >= sqrt(3))."""
    x = 2 + z * (1 / 3) ** 0.5  # X = sum of 4 U(0,1): mean 2, variance 1/3
    return 2 * (4 - x) ** 4 / 24


def test_mean_variance_and_tails_match_the_documented_statistics():
    x = torch.cat([noise.noise(stream_key(s, "stats"), 0, 1 << 20) for s in range(4)]).double()
    n = x.numel()
    assert abs(float(x.mean())) < 5 / n ** 0.5  # 5 standard errors
    assert abs(float(x.var()) - 1) < 5 * (2 / n) ** 0.5
    kurtosis = float((x ** 4).mean() / x.var() ** 2)
    assert abs(kurtosis - 2.7) < 0.02  # Irwin-Hall(4): 3 - 6/(5*4); a Gaussian would give 3
    assert float(x.abs().max()) <= 131070 * SCALE < 3.4641
    for z, documented in ((2.0, 0.0425), (3.0, 0.00043)):
        expected = irwin_hall4_tail(z)
        assert abs(expected - documented) / documented < 0.01
        observed = float((x.abs() > z).double().mean())
        assert abs(observed - expected) < 5 * (expected / n) ** 0.5
    # the variance is exact by construction, up to rounding SCALE to fp32
    assert SCALE == fp32(1 / math.sqrt(VARIANCE_S)) and abs(VARIANCE_S * SCALE ** 2 - 1) < 1e-7


def test_antithetic_perturbations_are_exact_mirrors():
    base = torch.zeros(1000)
    key, sigma = stream_key(4, "w"), fp32(1e-3)
    assert torch.equal(perturbed(base, key, sigma), -perturbed(base, key, -sigma))


def test_fp32_rounds_to_the_nearest_float32():
    assert fp32(0.1) == float(torch.tensor(0.1, dtype=torch.float32))
    assert fp32(fp32(0.1)) == fp32(0.1) and fp32(0.5) == 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to compare CPU and GPU bits")
def test_cuda_noise_and_update_equal_cpu_bit_for_bit():
    key = stream_key(11, "w")
    base = torch.linspace(-1, 1, 1 << 20, dtype=torch.bfloat16)
    terms = [(stream_key(s, "w"), fp32(1e-3 * s)) for s in range(1, 6)]
    assert torch.equal(noise.noise(key, 0, 1 << 20, "cuda").cpu(), noise.noise(key, 0, 1 << 20))
    assert torch.equal(updated(base.cuda(), terms)[0].cpu(), updated(base, terms)[0])
    assert torch.equal(perturbed(base.cuda(), key, fp32(1e-3)).cpu(), perturbed(base, key, fp32(1e-3)))


class _FakeCudaTensor:
    """Just what the dispatch reads: no CUDA is needed to construct a cuda torch.device."""

    def __init__(self, dtype=torch.float32, contiguous=True):
        self.device, self.dtype, self._contiguous = torch.device("cuda", 0), dtype, contiguous

    def is_contiguous(self):
        return self._contiguous


def test_cuda_tensors_take_the_fused_gpu_path_only_after_it_passed_its_check(monkeypatch):
    monkeypatch.setattr(noise, "_fused_gpu_ready", lambda device: True)
    master = _FakeCudaTensor()
    assert noise._fused(master) == "gpu"
    assert noise._fused(master, _FakeCudaTensor(torch.bfloat16)) == "gpu"
    assert noise._fused(master, _FakeCudaTensor(torch.float64)) is None  # not a live dtype the fused path writes
    assert noise._fused(master, _FakeCudaTensor(contiguous=False)) is None
    assert noise._fused(_FakeCudaTensor(torch.bfloat16)) is None  # a bf16 master (version-1 ledgers): eager
    assert noise._fused(master, torch.empty(3)) is None  # live on another device than the master
    monkeypatch.setattr(noise, "_fused_gpu_ready", lambda device: False)  # no triton, or a failed self-check
    assert noise._fused(master) is None
