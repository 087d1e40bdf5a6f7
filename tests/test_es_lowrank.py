"""es/noise/lowrank.py: low-rank ES noise (es.noise = "lowrank"): its definition, training, resume and replay."""

import json

import pytest
import torch

from prover_cli.errors import ConfigError, InputError
from prover_cli.es.noise import lowrank
from prover_cli.es.ledger import read_ledger
from prover_cli.es.noise.full import fp32, noise, reference_noise, stream_key
from prover_cli.es.replay import replay_seeds
from prover_cli.es.train import train_es
from prover_cli.es.update import apply_rewards
from tests.test_es_train import make_config, raw_config, tensor_hashes


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"


# -- the definition --------------------------------------------------------------------------------

def test_a_matrix_gets_a_rank_r_perturbation_from_its_own_streams_equal_to_the_pure_python_definition():
    master = torch.zeros(40, 30)
    eps = lowrank.member_noise(7, "layer.weight", master, 2)
    assert eps.shape == (40, 30) and eps.dtype == torch.float32
    assert torch.linalg.matrix_rank(eps.double(), rtol=1e-5).item() == 2  # up to the fp32 rounding of each element
    key_a, key_b = (stream_key(7, "layer.weight" + suffix) for suffix in lowrank.FACTOR_SUFFIX)
    assert key_a not in (key_b, stream_key(7, "layer.weight"))
    scale = lowrank.rank_scale(2)
    for i, j in [(0, 0), (3, 17), (39, 29), (20, 5), (11, 28)]:
        # fp32 products and sums of fp32 values, one rounding each, in the order the module adds them
        a = [reference_noise(key_a, i * 2 + t) for t in range(2)]
        b = [reference_noise(key_b, j * 2 + t) for t in range(2)]
        expected = fp32(fp32(fp32(a[0] * b[0]) + fp32(a[1] * b[1])) * scale)
        assert eps[i, j].item() == expected, (i, j)


def test_low_rank_noise_has_unit_variance_and_vectors_keep_the_full_rank_noise():
    eps = lowrank.member_noise(3, "w", torch.zeros(256, 256), 4)
    assert 0.9 < eps.double().var().item() < 1.1 and abs(eps.double().mean().item()) < 0.05
    bias = lowrank.member_noise(3, "b", torch.zeros(64), 4)
    assert torch.equal(bias, noise(stream_key(3, "b"), 0, 64))
    assert not torch.equal(lowrank.member_noise(4, "w", torch.zeros(256, 256), 4), eps)  # another seed, other noise


def test_an_unknown_noise_or_rank_in_a_ledger_header_is_refused():
    class Weights:
        def update(self, terms):
            raise AssertionError("never a full-rank update under another name")

    es = {"antithetic": False, "fitness_shaping": "zscore", "learning_rate": 0.1}
    with pytest.raises(InputError, match="es.noise = 'lowrank2': unknown noise"):
        apply_rewards(Weights(), [0.0, 1.0], 0, 1, {**es, "noise": "lowrank2"})
    with pytest.raises(InputError, match="es.rank = 0"):
        apply_rewards(Weights(), [0.0, 1.0], 0, 1, {**es, "noise": "lowrank", "rank": 0})


def test_low_rank_needs_the_transformers_sampler(tmp_path, cache_dir):
    from prover_cli.config import config_from_dict
    from prover_cli.es.population import LocalPopulation

    raw = raw_config(tmp_path, cache_dir, noise="lowrank", rank=2)
    raw["generate"]["backend"] = "vllm"
    with pytest.raises(ConfigError, match="es.noise = \"lowrank\" runs on the transformers sampler only.*LoRA adapter cannot carry"):
        LocalPopulation(config_from_dict(raw))


# -- training, replay, resume on the tiny model ------------------------------------------------------

@pytest.fixture(scope="module")
def lowrank_run(tmp_path_factory, cache_dir):
    run_dir = tmp_path_factory.mktemp("lowrank") / "run"
    config = make_config(run_dir, cache_dir, noise="lowrank", rank=2, sigma=0.05, snapshot_every=2)
    return config, train_es(config)


@pytest.mark.slow
def test_a_low_rank_run_moves_the_weights_records_its_noise_and_replays_bit_exactly(lowrank_run, tmp_path, cache_dir):
    config, result = lowrank_run
    header, records = read_ledger(config.run_dir / "ledger.json")
    assert header["es"]["noise"] == "lowrank" and header["es"]["rank"] == 2 and len(records) == 4
    lines = [json.loads(line) for line in (config.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any(not line["es/skipped"] and line["es/update_norm"] > 0 for line in lines)
    replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=tmp_path / "replayed")
    assert tensor_hashes(tmp_path / "replayed") == tensor_hashes(config.run_dir / "final")
    full = make_config(tmp_path / "full", cache_dir, sigma=0.05, snapshot_every=2)
    train_es(full)
    assert "noise" not in read_ledger(full.run_dir / "ledger.json")[0]["es"]  # full-rank ledgers as before
    assert tensor_hashes(full.run_dir / "final") != tensor_hashes(config.run_dir / "final")


@pytest.mark.slow
def test_a_low_rank_run_resumed_ends_bit_identical_and_a_resume_with_other_noise_is_refused(lowrank_run, tmp_path,
                                                                                           cache_dir):
    config, _ = lowrank_run
    first = make_config(tmp_path / "run", cache_dir, noise="lowrank", rank=2, sigma=0.05, snapshot_every=2,
                        iterations=2)
    train_es(first)
    with pytest.raises(ConfigError, match="es.noise: ledger 'lowrank' != now None"):
        train_es(make_config(tmp_path / "run", cache_dir, sigma=0.05, snapshot_every=2), resume=True)
    with pytest.raises(ConfigError, match="es.rank: ledger 2 != now 3"):
        train_es(make_config(tmp_path / "run", cache_dir, noise="lowrank", rank=3, sigma=0.05, snapshot_every=2),
                 resume=True)
    train_es(make_config(tmp_path / "run", cache_dir, noise="lowrank", rank=2, sigma=0.05, snapshot_every=2),
             resume=True)
    ledger = lambda d: json.loads((d / "ledger.json").read_text())["iterations"]  # noqa: E731
    assert ledger(tmp_path / "run") == ledger(config.run_dir)
    assert tensor_hashes(tmp_path / "run" / "final") == tensor_hashes(config.run_dir / "final")


@pytest.mark.slow
def test_batched_low_rank_members_agree_with_one_at_a_time(tmp_path, cache_dir):
    """Stacked low-rank weights are the bits `lowrank.perturb` writes: the same completions, all of
    them. Factored (x Wᵀ + c (x B) Aᵀ, the default) is another float computation: on this fixed set
    (3 iterations x 8 members x 6 problems, tiny model) at least 95% of completions are the same
    (measured: all 144), and the members do differ from each other."""
    from prover_cli.es.batched import BatchedMembers, chunks
    from prover_cli.es.population import LocalPopulation, member_completions, pick_problems
    from prover_cli.tasks.problems import train_problems

    config = make_config(tmp_path / "run", cache_dir, population=8, sigma=0.05, problems_per_iteration=6,
                         noise="lowrank", rank=2)
    population = LocalPopulation(config)
    sampler, weights = population.load_sampler(), population.weights
    stacked, factored = BatchedMembers(sampler, weights), BatchedMembers(sampler, weights)
    stacked.factored = False
    es = config.es
    equal = total = 0
    distinct = set()
    for iteration in (1, 2, 3):
        batch = pick_problems(train_problems(config), config.run.seed, iteration, es.problems_per_iteration)
        one = [member_completions(sampler, weights, population.task, batch, config, iteration, m) for m in range(8)]
        runs = {}
        for name, batched in (("stacked", stacked), ("factored", factored)):
            runs[name] = [texts for chunk in chunks(range(8), 3)
                          for texts in batched.completions(population.task, batch, iteration, chunk, es=es,
                                                           generate=config.generate, run_seed=config.run.seed,
                                                           family=config.model.family)]
        assert runs["stacked"] == one, iteration
        pairs = [(a, b) for x, y in zip(one, runs["factored"]) for a, b in zip(x, y)]
        equal += sum(a == b for a, b in pairs)
        total += len(pairs)
        distinct.update(tuple(texts) for texts in one)
    assert total == 144 and equal >= 0.95 * total, (equal, total)
    assert len(distinct) > 3


@pytest.mark.slow
def test_a_batched_low_rank_run_replays_bit_exactly(tmp_path, cache_dir):
    config = make_config(tmp_path / "run", cache_dir, noise="lowrank", rank=2, sigma=0.05, batched_members=3)
    train_es(config)
    header, records = read_ledger(config.run_dir / "ledger.json")
    assert header["es"]["noise"] == "lowrank" and len(records) == 4
    replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=tmp_path / "replayed")
    assert tensor_hashes(tmp_path / "replayed") == tensor_hashes(config.run_dir / "final")
