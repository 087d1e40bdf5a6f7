"""es/batched.py: members generating together, each row with its own member's weights (es.batched_members)."""

import json

import pytest
import torch

from prover_cli.errors import ConfigError
from prover_cli.es.batched import BatchedMembers, chunks
from prover_cli.es.noise.full import fp32
from prover_cli.es.population import LocalPopulation, member_completions, pick_problems
from prover_cli.es.replay import replay_seeds
from prover_cli.es.train import train_es
from prover_cli.es.update import member_noise
from prover_cli.tasks.problems import train_problems
from tests.test_es_train import make_config, raw_config, tensor_hashes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, cache_dir):
    """The tiny model's sampler and weights, as the loop loads them, with sigma large enough that
    members' completions differ from each other (else agreement would be trivial)."""
    config = make_config(tmp_path_factory.mktemp("batched") / "run", cache_dir, population=8, sigma=0.05,
                         problems_per_iteration=6)
    population = LocalPopulation(config)
    population.load_sampler()
    return config, population


def test_chunks_keep_member_order_and_cover_everyone():
    assert chunks(range(7), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunks(range(4), 8) == [[0, 1, 2, 3]]


def test_each_members_stacked_weights_are_the_bits_perturb_writes(loaded):
    config, population = loaded
    weights, model = population.weights, population.sampler.model
    batched = BatchedMembers(population.sampler, weights)
    members = [0, 1, 5]
    scales = []
    for member in members:
        seed, sign = member_noise(config.run.seed, 3, member, config.es.antithetic)
        scales.append((seed, sign * fp32(config.es.sigma)))
    stacked = batched.stacked(scales)
    live = dict(model.named_parameters())
    before = {name: p.detach().clone() for name, p in live.items()}
    for row, (seed, scale) in enumerate(scales):
        weights.perturb(seed, scale)
        try:
            for name in weights.base:
                assert torch.equal(stacked[name][row], live[name].detach()), (row, name)
        finally:
            weights.restore()
    assert any(not torch.equal(stacked[name][0], before[name]) for name in before)  # the noise is there
    assert all(torch.equal(live[name].detach(), before[name]) for name in before)   # stacking wrote no live weight


def test_batched_greedy_completions_equal_one_member_at_a_time(loaded):
    """On the tiny model, 3 iterations x 8 members x 6 problems: every completion the same. Only a
    float tie between two tokens' logits could flip one (es/batched.py); none does on this set."""
    config, population = loaded
    sampler, weights, task = population.sampler, population.weights, population.task
    problems = train_problems(config)
    batched = BatchedMembers(sampler, weights)
    fingerprint = weights.fingerprint()
    distinct = set()
    for iteration in (1, 2, 3):
        batch = pick_problems(problems, config.run.seed, iteration, config.es.problems_per_iteration)
        one = [member_completions(sampler, weights, task, batch, config, iteration, m) for m in range(8)]
        together = [texts for chunk in chunks(range(8), 3)
                    for texts in batched.completions(task, batch, iteration, chunk, es=config.es,
                                                     generate=config.generate, run_seed=config.run.seed,
                                                     family=config.model.family)]
        assert together == one, iteration
        distinct.update(tuple(texts) for texts in one)
    assert len(distinct) > 3  # the members do differ: equal completions are not trivially equal
    assert weights.fingerprint() == fingerprint  # theta untouched
    assert not any("forward" in module.__dict__ for module in sampler.model.modules())  # the model is itself again


def test_a_batched_run_gives_the_one_at_a_time_ledger_weights_and_metrics_and_replays_bit_exactly(tmp_path, cache_dir):
    one = make_config(tmp_path / "one", cache_dir, population=6, iterations=3)
    together = make_config(tmp_path / "together", cache_dir, population=6, iterations=3, batched_members=4)
    train_es(one)
    train_es(together)
    ledger = {name: json.loads((tmp_path / name / "ledger.json").read_text()) for name in ("one", "together")}
    assert ledger["one"] == ledger["together"]
    lines = {name: [{k: v for k, v in json.loads(line).items() if "wall_s" not in k and "elapsed_s" not in k}
                    for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
             for name in ("one", "together")}
    assert lines["one"] == lines["together"] and len(lines["one"]) == 3
    assert any(not line["es/skipped"] and line["es/update_norm"] > 0 for line in lines["one"])  # the weights moved
    assert tensor_hashes(tmp_path / "one" / "final") == tensor_hashes(tmp_path / "together" / "final")
    replay_seeds(together, ledger_path=tmp_path / "together" / "ledger.json", out_dir=tmp_path / "replayed")
    assert tensor_hashes(tmp_path / "replayed") == tensor_hashes(tmp_path / "together" / "final")


def test_batched_members_refuse_sampled_members_and_other_samplers(tmp_path, cache_dir):
    from prover_cli.config import config_from_dict

    with pytest.raises(ConfigError, match="es.batched_members = 4: batched members are greedy only"):
        LocalPopulation(make_config(tmp_path, cache_dir, batched_members=4, member_temperature=0.7))
    raw = raw_config(tmp_path, cache_dir, batched_members=4)
    raw["generate"]["backend"] = "vllm"
    with pytest.raises(ConfigError, match="es.batched_members = 4: .*transformers sampler only"):
        LocalPopulation(config_from_dict(raw))
    LocalPopulation(make_config(tmp_path, cache_dir, batched_members=0, member_temperature=0.7))  # off: anything goes


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_batched_members_with_lora_noise_are_a_config_error_naming_both_keys(tmp_path, cache_dir, backend):
    """es.batched_members builds "full" and "lowrank" members only: with es.noise = "lora" the config
    itself is refused (load time: before any model, on either sampler, on Modal too)."""
    from prover_cli.config import config_from_dict

    raw = raw_config(tmp_path, cache_dir, batched_members=4, noise="lora", rank=2)
    raw["generate"]["backend"] = backend
    with pytest.raises(ConfigError, match=r'es\.batched_members = 4 with es\.noise = "lora"') as refusal:
        config_from_dict(raw)
    assert "es.batched_members = 0" in refusal.value.hint
    raw["es"]["batched_members"] = 0
    assert config_from_dict(raw).es.noise == "lora"  # either key alone is fine
    raw["es"].update(batched_members=4, noise="lowrank")
    assert config_from_dict(raw).es.batched_members == 4


def test_modal_refuses_batched_members_before_any_container():
    """On Modal each member container evaluates its own members: the option would do nothing there."""
    from prover_cli.config import config_from_dict
    from prover_cli.on_modal import functions

    config = config_from_dict({"es": {"batched_members": 4}})
    with pytest.raises(ConfigError, match="es.batched_members = 4: batched members run in the loop's own process"):
        functions.ModalPopulation(config, config.to_dict())


@pytest.mark.parametrize("noise", ["full", "lowrank"])
def test_a_head_tied_to_the_embedding_batches_too(tmp_path, cache_dir, noise):
    """A tied head is one tensor under one name (NamedWeights): the lookup and the head read the same
    member's weight; low-rank keeps it stacked (not factored), since the embedding needs it whole."""
    import shutil

    from safetensors.torch import load_file, save_file

    from prover_cli.policy.built_models import resolve_model_path
    from prover_cli.config import config_from_dict

    tied = tmp_path / "tied"  # the tiny model with its head tied to the embedding, saved once (as transformers does)
    shutil.copytree(resolve_model_path("tiny", str(cache_dir), 0), tied)
    settings = json.loads((tied / "config.json").read_text())
    (tied / "config.json").write_text(json.dumps({**settings, "tie_word_embeddings": True}))
    tensors = load_file(str(tied / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(tied / "model.safetensors"), metadata={"format": "pt"})
    raw = raw_config(tmp_path / "run", cache_dir, population=4, sigma=0.05, problems_per_iteration=4,
                     **({"noise": "lowrank", "rank": 2} if noise == "lowrank" else {}))
    raw["model"]["name"] = str(tied)
    config = config_from_dict(raw)
    population = LocalPopulation(config)
    sampler = population.load_sampler()
    assert sampler.model.lm_head.weight is sampler.model.get_input_embeddings().weight
    batched = BatchedMembers(sampler, population.weights)
    assert batched.linear_weights and "model.embed_tokens.weight" not in batched.linear_weights
    batch = pick_problems(train_problems(config), config.run.seed, 1, 4)
    one = [member_completions(sampler, population.weights, population.task, batch, config, 1, m) for m in range(4)]
    together = batched.completions(population.task, batch, 1, range(4), es=config.es, generate=config.generate,
                                   run_seed=config.run.seed, family=config.model.family)
    assert together == one
