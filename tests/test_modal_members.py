"""Warm ES members on Modal: a warm member replays only new iterations, a cold one starts from
the newest snapshot (`es.snapshot_every`), and the plan keeps members warm through the gap."""

import pytest

from prover_cli.config import config_from_dict, load_config
from prover_cli.on_modal import functions, plan
from prover_cli.on_modal.plan import MAX_SCALEDOWN_WINDOW_S, es_gap_s, es_member_scaledown_window_s

pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


def test_scaledown_window_outlasts_the_gap_between_iterations(tmp_path):
    for path in ("configs/kimina-es.toml", "configs/demo.toml"):
        config = load_config(path)
        window = es_member_scaledown_window_s(config)
        assert window > es_gap_s(config) and 2 <= window <= MAX_SCALEDOWN_WINDOW_S
        assert plan.resources(config)["es_member"].scaledown_window_s == window
        assert functions.options("es_member", config)["scaledown_window"] == window
    slow = load_config("configs/kimina-es.toml", ["modal.est_verify_s_per_proof=200"])
    assert es_member_scaledown_window_s(slow) == MAX_SCALEDOWN_WINDOW_S  # Modal's ceiling, not more


@pytest.fixture
def es_run(tmp_path):
    """A finished 5-iteration tiny ES run with a snapshot every 2 iterations (2 and 4)."""
    from prover_cli.data import prepare_data
    from prover_cli.es.train import train_es

    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu", "dtype": "float32"},
        "data": {"task": "countdown", "preset": "countdown", "countdown_problems": 8,
                 "problems": str(tmp_path / "problems.jsonl")},
        "generate": {"n": 1, "max_tokens": 4, "batch_size": 8},
        "es": {"population": 2, "iterations": 5, "problems_per_iteration": 2, "sigma": 0.01,
               "learning_rate": 0.01, "snapshot_every": 2},
        "run": {"dir": str(tmp_path / "run")},
    })
    prepare_data(config)
    train_es(config)
    return config


@pytest.mark.slow
def test_a_cold_member_replays_only_from_the_last_snapshot_and_a_warm_one_only_new_iterations(es_run, monkeypatch):
    from prover_cli.es import member as member_module

    applied = []
    real_apply = member_module.apply_rewards

    def counting_apply(weights, rewards, run_seed, iteration, es):
        applied.append(iteration)
        return real_apply(weights, rewards, run_seed, iteration, es)

    monkeypatch.setattr(member_module, "apply_rewards", counting_apply)
    cold = member_module.MemberEvaluator(es_run)
    cold.catch_up(6)   # theta_5: snapshot at 4, then iteration 5 only
    assert applied == [5] and cold.applied == 5
    cold.catch_up(6)   # warm, nothing new
    assert applied == [5]

    applied.clear()
    cold_at_4 = member_module.MemberEvaluator(es_run)
    cold_at_4.catch_up(4)  # theta_3: the snapshot at 2 (the one at 4 is too new), then iteration 3
    assert applied == [3]
    cold_at_4.catch_up(6)  # warm: iterations 4 and 5 only, never from the start again
    assert applied == [3, 4, 5] and cold_at_4.weights.fingerprint() == cold.weights.fingerprint()
