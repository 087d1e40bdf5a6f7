"""The plan's per-GPU memory (prover_cli/on_modal/gpu_memory.py) and what issue #40 asked the plan to price.

No GPU: the model is arithmetic from the model's shape and vLLM's rules (read from vLLM's source:
`gpu_memory_utilization` a fraction of TOTAL memory, the startup check against free memory, the KV
cache the budget's rest). The figures asserted are the model's own, not measurements.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import ConfigError
from prover_cli.on_modal import gpu_memory
from prover_cli.on_modal import plan as modal_plan

REPO = Path(__file__).resolve().parents[1]
KIMINA_ES = REPO / "configs" / "kimina-es.toml"
KIMINA_GRPO = REPO / "configs" / "kimina-grpo.toml"
runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


@pytest.fixture(autouse=True)
def no_calibration(tmp_path, monkeypatch):
    from prover_cli.on_modal.calibration import DIR_ENV

    monkeypatch.setenv(DIR_ENV, str(tmp_path / "calibration"))


def es(*sets):
    return load_config(KIMINA_ES, list(sets))


# -- the model's shape ---------------------------------------------------------------------------

def test_kiminas_shape_gives_the_sizes_the_docs_state():
    facts = gpu_memory.KNOWN_MODELS["AI-MO/Kimina-Prover-Preview-Distill-1.5B"]
    # Qwen2.5-1.5B: 28 layers of q/k/v (with biases), o, gate/up/down, two norms; a 151,936 x 1,536 embedding
    layer = (1536 * 1536 + 1536) + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536
    assert facts.params == 28 * layer + 2 * 151936 * 1536 + 1536 == 1_777_088_000   # the head counted untied
    from dataclasses import replace

    assert replace(facts, tied=True).params == 1_543_714_304                          # "1.54 B" tied
    assert facts.kv_bytes_per_token() == 28 * 2 * 2 * 128 * 2 == 28672                 # 28 KiB per token
    assert facts.largest_tensor == 151936 * 1536


def test_a_local_checkpoints_config_json_gives_the_shape(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
        "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
        "max_position_embeddings": 4096}), encoding="utf-8")
    config = load_config(None, [f"model.name={tmp_path}"])
    facts = gpu_memory.model_facts(config)
    assert facts.params == 1_543_714_304 and facts.tied is True and facts.max_position == 4096
    assert facts.source == str(tmp_path / "config.json")
    assert gpu_memory.model_facts(load_config(None, ["model.name=someone/unknown"])) is None


# -- vLLM's rules, as the model applies them -------------------------------------------------------

def test_the_budget_is_a_fraction_of_total_memory_and_the_rest_is_held_beside_it():
    config = es()
    [loop, member] = gpu_memory.es_gpus(config, gpu_memory.model_facts(config), pipelined=True)
    total = gpu_memory.GPU_MEMORY_GIB["H100"]
    held = dict((what, gib) for what, gib, _ in member.items)
    assert held["vLLM budget (1 engine)"] == pytest.approx(0.70 * total)
    assert held["fp32 masters"] == pytest.approx(1_777_088_000 * 4 / 2 ** 30)
    assert held["transients"] == pytest.approx(151936 * 1536 * 6 / 2 ** 30)           # the largest tensor, not the checkpoint
    assert held["CUDA contexts"] == pytest.approx(2 * 0.5)                             # the engine's process and ours
    assert member.used_gib == pytest.approx(sum(held.values())) and member.problem() is None
    # the KV cache is the budget's rest (weights, activation peak, CUDA graphs out): 215 sequences of
    # 512 + 8,192 tokens at 28 KiB a token
    kv = 0.70 * total - 1_777_088_000 * 2 / 2 ** 30 - 1.5 - 0.5
    assert member.kv_per_engine_gib == pytest.approx(kv)
    assert member.kv_sequences == int(kv // (8704 * 28672 / 2 ** 30)) == 215
    assert loop.to_json()["held"] == member.to_json()["held"]


def test_four_engines_at_0_60_do_not_fit_an_h100_and_the_plan_refuses_naming_the_file_and_keys(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text(KIMINA_ES.read_text(encoding="utf-8").replace("es_member_gpus = 4", "es_member_gpus = 1")
                    .replace("es_members_per_gpu = 1", "es_members_per_gpu = 4")
                    .replace("gpu_memory_utilization = 0.70", "gpu_memory_utilization = 0.60"), encoding="utf-8")
    config = load_config(path)
    [_, member] = gpu_memory.es_gpus(config, gpu_memory.model_facts(config), pipelined=True)
    assert member.used_gib > member.total_gib          # 47.5 + 4 x (6.6 + 1.3 + 0.5) + 0.5: about 82 GiB of 79
    result = runner.invoke(app, ["train", "es", "--config", str(path), "--backend", "modal", "--dry-run"])
    assert result.exit_code == 2 and "unexpected" not in result.stderr
    text = " ".join(result.stderr.split())
    for said in (f"{path}: this config does not fit the GPU's memory", "modal.es_members_per_gpu = 4",
                 "generate.gpu_memory_utilization = 0.6", f"({path})", "fp32 masters", "one engine per GPU"):
        assert said in text, said


def test_an_engine_whose_share_cannot_hold_one_sequence_is_refused():
    """vLLM refuses an engine whose KV cache cannot hold one sequence of its max_model_len."""
    config = es("generate.gpu_memory_utilization=0.06")   # 4.7 GiB: not even the weights and the activation peak
    with pytest.raises(ConfigError, match="less than one sequence needs .*vLLM refuses to start such an engine"):
        modal_plan.plan(config, command="train_es", backend="modal")


def test_an_unknown_model_is_not_checked_and_the_plan_says_so():
    p = modal_plan.plan(es("model.name=someone/unknown"), command="train_es", backend="modal")
    assert p["gpu_memory"] == {"fits": False, "checked": False, "model": None, "gpus": []}
    warnings = [text for kind, text in p["tables"][-1]["rows"] if kind == "warning"]
    assert any("memory per GPU not checked" in w for w in warnings)
    summary = {row[0]: row for row in p["tables"][0]["rows"]}
    assert summary["memory per GPU"][1] == "not checked"


def test_measured_memory_replaces_the_estimates(tmp_path):
    from prover_cli.on_modal import calibration

    config = es()
    path = calibration.write(tmp_path / "c.json", config, {
        "es_init_gib": calibration.figure(9.0, 1, "test: made up"),
        "engine_overhead_gib": calibration.figure(2.5, 1, "test: made up")}, "2026-12-07T00:00:00Z",
        by="scripts/gpu_first_contact.py")
    p = modal_plan.plan(es(f"modal.calibration={path}"), command="train_es", backend="modal")
    held = p["gpu_memory"]["gpus"][0]["held"]
    assert held["fp32 masters and transients"] == 9.0 and "fp32 masters" not in held
    assert held["CUDA contexts"] == 2.5 + 0.5
    assert p["figures"]["es_init_gib"] == {"value": 9.0, "source": "measured (gpu_first_contact, 2026-12-07, n = 1)"}
    # a measurement that says it does not fit is refused as the estimate would be
    calibration.write(path, config, {"es_init_gib": calibration.figure(20.0, 1, "test: made up")}, "2026-12-07T00:00:00Z",
                      by="scripts/gpu_first_contact.py")
    with pytest.raises(ConfigError, match="does not fit the GPU's memory"):
        modal_plan.plan(es(f"modal.calibration={path}"), command="train_es", backend="modal")


# -- what the plan prices now -------------------------------------------------------------------

def test_the_resident_slowdown_is_priced_at_0_25_and_0_75_where_it_enters():
    two = es("modal.es_members_per_gpu=2")          # 2 engines of 0.35 each fit an H100 (gpu_memory.py)
    p = modal_plan.plan(two, command="train_es", backend="modal")
    at = p["est_usd_at_resident_slowdown"]
    assert p["resident_slowdown"] == {"value": 0.25, "source": "default (assumption)", "enters": True}
    assert at["0.25"]["usd_per_iteration"] == pytest.approx(p["est_usd_per_iteration"], abs=1e-4)
    assert at["0.75"]["usd_per_iteration"] > at["0.25"]["usd_per_iteration"]
    assert at["0.75"]["usd_total"] > at["0.25"]["usd_total"] and at["0.75"]["wall_s_per_iteration"] > p["est_wall_s_per_iteration"]
    summary = {row[0]: row for row in p["tables"][0]["rows"]}
    assert "ASSUMED" not in summary["USD per iteration at resident slowdown 0.75"][2]   # its source is said instead
    assert "default (assumption)" in summary["USD per iteration at resident slowdown 0.75"][2]


def test_the_heldout_evaluation_is_priced_by_rounds_of_its_engines_kv_budget():
    config = es()
    p = modal_plan.plan(config, command="train_es", backend="modal")
    held = next(text for kind, text in p["tables"][-1]["rows"] if kind == "held-out evaluation")
    assert "256 sampled in 2 round(s) + 64 greedy in 1 round(s), 215 sequences at a time" in held
    # a smaller budget, more rounds, a dearer evaluation
    small = modal_plan.plan(es("generate.gpu_memory_utilization=0.3"), command="train_es", backend="modal")
    small_held = next(text for kind, text in small["tables"][-1]["rows"] if kind == "held-out evaluation")
    assert "256 sampled in 4 round(s)" in small_held    # 79 sequences at a time
    assert small["est_usd_per_heldout_evaluation"] > p["est_usd_per_heldout_evaluation"]


def test_grpos_step_is_priced_with_its_forward_and_backward_pass():
    config = load_config(KIMINA_GRPO)
    work = modal_plan._work_per_iteration(config, "train_grpo")
    flops = 6 * 1_777_088_000 * 240 * (512 + 8192)
    assert work.train_s == pytest.approx(flops / (989e12 * gpu_memory.GRPO_MFU))
    assert work.rounds == 4                     # 240 completions, 79 at a time in 0.3 of an H100
    p = modal_plan.plan(config, command="train_grpo", backend="modal")
    t = modal_plan._timings(config, "train_grpo", work)
    assert p["est_wall_s_per_step"] == round(t.generation_s + work.train_s + t.verify_waves * t.batch_s, 1)
    notes = dict((kind, text) for kind, text in p["tables"][-1]["rows"] if kind != "warning")
    assert "MFU ASSUMED" in notes["optimizer step"] and "the backward pass" not in notes["not counted"]
    # an unknown model: a stated fraction of the generation
    unknown = modal_plan._work_per_iteration(load_config(KIMINA_GRPO, ["model.name=someone/unknown"]), "train_grpo")
    assert unknown.train_s == pytest.approx(gpu_memory.GRPO_BACKWARD_FALLBACK * 8192 / 100)
    assert "ASSUMED" in unknown.train_note


# -- the dry run's first lines (#38) ----------------------------------------------------------------

def test_the_dry_runs_first_lines_are_the_total_the_usd_per_iteration_and_the_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_CONFIG_PATH"):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal", "--dry-run"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0
    p = modal_plan.plan(es(), command="train_es", backend="modal")
    head = result.stderr.splitlines()[:12]
    assert f"{p['est_usd_total']:.2f} USD in all, {p['est_usd_per_iteration']:.2f} USD per iteration" in head[0]
    text = "\n".join(head)
    for said in ("USD per iteration at resident slowdown 0.25", "USD per iteration at resident slowdown 0.75",
                 "memory per GPU", "Modal credentials", "not found"):
        assert said in text, said
    as_json = json.loads(runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--backend", "modal",
                                             "--dry-run", "--json"]).stdout)
    assert as_json["est_usd_total"] == p["est_usd_total"] and as_json["est_usd_per_iteration"] == p["est_usd_per_iteration"]
    assert as_json["modal_credentials"] is False and as_json["gpu_memory"]["fits"] is True
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-x")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-x")
    found = modal_plan.plan(es(), command="train_es", backend="modal")
    assert found["modal_credentials"] is True
    assert {row[0]: row for row in found["tables"][0]["rows"]}["Modal credentials"][1] == "found"


def test_the_dry_run_imports_no_modal():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom prover_cli.cli import app\n"
            f"r = CliRunner().invoke(app, ['train', 'es', '--config', {str(KIMINA_ES)!r}, '--backend', 'modal', "
            "'--dry-run', '--json'])\nassert r.exit_code == 0, r.output\nassert 'modal' not in sys.modules\n"
            "assert 'torch' not in sys.modules and 'vllm' not in sys.modules\n")
    env = {**os.environ, "PROVER_CALIBRATION_DIR": "/nonexistent-prover-calibration"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, env=env, timeout=120)


def test_the_local_plan_says_all_for_heldout_samples_it_cannot_count():
    result = runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--dry-run", "--json",
                                 "--set", "run.eval_problems=0"])
    assert result.exit_code == 0
    p = json.loads(result.stdout)
    assert p["heldout_evaluations"] == 11 and p["heldout_samples_total"] == "all"
    counted = json.loads(runner.invoke(app, ["train", "es", "--config", str(KIMINA_ES), "--dry-run", "--json"]).stdout)
    assert counted["heldout_samples_total"] == 11 * 320


def test_a_run_that_does_not_fit_its_gpu_refuses_to_start(monkeypatch):
    """Not only the dry run: remote.run_remote refuses before the app runs (nothing billed)."""
    from prover_cli.on_modal import remote

    monkeypatch.setattr(remote, "to_wire", lambda *a: pytest.fail("the run went on to its call"))
    config = es("modal.es_member_gpus=1", "modal.es_members_per_gpu=4", "generate.gpu_memory_utilization=0.60")
    with pytest.raises(ConfigError, match="does not fit the GPU's memory"):
        remote.run_remote("train_es", config, {})
    assert modal_plan.gpu_memory_problem(es(), "train_es") is None
    assert modal_plan.gpu_memory_problem(config, "generate") is None
