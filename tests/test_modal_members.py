"""Warm ES members on Modal: a warm member replays only new iterations, a cold one starts from
the newest snapshot (`es.snapshot_every`), and the plan keeps members warm through the gap."""

import pytest

from prover_cli.config import config_from_dict, load_config
from prover_cli.on_modal import functions, plan
from prover_cli.on_modal.plan import (MAX_SCALEDOWN_WINDOW_S, cold_member_replay, es_gap_bound_s, es_gap_s,
                                     es_member_scaledown_window_s, verify_batch_timeout_s)

pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


def test_scaledown_window_outlasts_the_longest_legitimate_gap(tmp_path):
    """Sized from the verification bound (a batch may run to its Sandbox's timeout), not from the
    estimated proof time: before, kimina-es got 300 s while a batch may legitimately take 1760 s."""
    for path in ("configs/kimina-es.toml", "configs/demo.toml"):
        config = load_config(path)
        window = es_member_scaledown_window_s(config)
        assert window >= es_gap_bound_s(config) > es_gap_s(config) and 2 <= window <= MAX_SCALEDOWN_WINDOW_S
        assert plan.resources(config)["es_member"].scaledown_window_s == window
        assert functions.options("es_member", config)["scaledown_window"] == window
    kimina = load_config("configs/kimina-es.toml")
    assert verify_batch_timeout_s(kimina) == 1760 and es_member_scaledown_window_s(kimina) >= 1760
    # the estimate does not move it: only the bound does
    fast = load_config("configs/kimina-es.toml", ["modal.est_verify_s_per_proof=0.1"])
    assert es_member_scaledown_window_s(fast) == es_member_scaledown_window_s(kimina)
    slow = load_config("configs/kimina-es.toml", ["verify.timeout_s=300"])
    assert es_member_scaledown_window_s(slow) == MAX_SCALEDOWN_WINDOW_S  # Modal's ceiling, not more
    notes = plan.plan(slow, command="train_es", backend="modal")["tables"][-1]["rows"]
    assert any(kind == "warning" and "may go cold" in text for kind, text in notes)


def test_kimina_es_ships_snapshots_so_a_cold_member_replays_a_bounded_number_of_iterations():
    config = load_config("configs/kimina-es.toml")
    assert config.es.snapshot_every == 10
    assert cold_member_replay(config) == (10, 10 * config.modal.est_replay_s_per_iteration)
    without = load_config("configs/kimina-es.toml", ["es.snapshot_every=0"])
    assert cold_member_replay(without) == (99, 99 * config.modal.est_replay_s_per_iteration)  # the whole ledger
    notes = dict((k, v) for k, v in plan.plan(config, command="train_es", backend="modal")["tables"][-1]["rows"]
                 if k != "warning")
    assert "replays at most 10 iterations (es.snapshot_every = 10)" in notes["cold member"]


@pytest.fixture
def es_run(tmp_path):
    """A finished 5-iteration tiny ES run with a snapshot every 2 iterations (2 and 4)."""
    from prover_cli.tasks.datasets import prepare_data
    from prover_cli.es.train import train_es

    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path / "cache"), "device": "cpu", "dtype": "float32"},
        "task": {"countdown": {"problems": 8}}, "data": {"task": "countdown", "preset": "countdown",
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
