"""GRPO glue: a tiny CPU run trains and logs the shared metrics, the reward is our task's, in one
batch, and every [grpo] key lands on TRL's GRPOConfig with our explicit values."""

import dataclasses
import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli import grpo
from prover_cli.cli import app
from prover_cli.config import GRPOConfig as GRPOSection
from prover_cli.config import load_config
from prover_cli.errors import ConfigError, InputError
from prover_cli.metrics import REQUIRED_KEYS

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "configs" / "demo.toml"

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One tiny model for the whole module (building it takes seconds)."""
    return tmp_path_factory.mktemp("tiny-cache")


def demo_config(run_dir, cache_dir, *overrides):
    return load_config(DEMO, [f"run.dir={run_dir}", f"model.cache_dir={cache_dir}",
                              "grpo.max_completion_length=8", *overrides])


def read_metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------------------------
# A real tiny run
# --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_tiny_grpo_run_changes_weights_and_logs_rewards(tmp_path, cache_dir, monkeypatch):
    from safetensors.torch import load_file

    from prover_cli.tasks import countdown

    # A random model never solves countdown: every group's rewards are equal, the GRPO advantage
    # is exactly 0 and so is the gradient. To see the weights move we keep the countdown task,
    # dataset and prompts, but score the parity of the completion's length, which varies.
    scored = []

    def parity_score(completion, problem):
        assert "numbers" in problem and "target" in problem  # problem columns reach the reward
        scored.append(float(len(completion) % 2))
        return scored[-1]

    monkeypatch.setattr(countdown, "score", parity_score)
    config = demo_config(tmp_path / "run", cache_dir, "grpo.per_device_train_batch_size=8",
                         "grpo.num_generations=4", "grpo.learning_rate=0.01")
    result = grpo.train_grpo(config)

    run = tmp_path / "run"
    before = load_file(_tiny_dir(cache_dir) / "model.safetensors")
    after = load_file(run / "final" / "model.safetensors")
    assert before.keys() == after.keys()
    moved = [name for name in before if not before[name].equal(after[name])]
    assert "lm_head.weight" in moved and len(moved) > len(before) // 2
    assert (run / "final" / "tokenizer.json").exists() and (run / "config.toml").exists()

    metrics = read_metrics(run)
    assert [m["iteration"] for m in metrics] == [1, 2]
    for m in metrics:
        assert set(REQUIRED_KEYS) <= set(m)
        assert m["method"] == "grpo" and m["task"] == "countdown"
        assert m["samples"] == 8  # 2 prompts x 4 completions per step
    assert [m["samples/total"] for m in metrics] == [8, 16]
    # The logged rewards are exactly the ones the reward function returned, step by step.
    assert len(scored) == 16
    for m, step in zip(metrics, (scored[:8], scored[8:])):
        assert m["verify/verified"] == sum(step)
        assert m["reward/mean"] == pytest.approx(sum(step) / 8)
        assert m["reward/max"] == max(step)
        assert m["grpo/grad_norm"] > 0
    assert metrics[1]["time/elapsed_s"] >= metrics[0]["time/elapsed_s"] > 0
    assert result["ok"] and result["steps"] == 2 and result["verified"] == sum(scored)
    assert result["tables"][0]["rows"][0][0] == 1


def _tiny_dir(cache_dir):
    from prover_cli.tiny_model import tiny_model_dir

    return tiny_model_dir(cache_dir, 0)


@pytest.mark.slow
def test_cli_train_grpo_json(tmp_path, cache_dir):
    run = tmp_path / "cli-run"
    result = CliRunner().invoke(app, ["train", "grpo", "--config", str(DEMO), "--set", f"run.dir={run}",
                                      "--set", f"model.cache_dir={cache_dir}",
                                      "--set", "grpo.max_completion_length=8", "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)  # stdout carries only the result
    assert payload["ok"] is True and payload["steps"] == 2 and payload["samples"] == 8
    assert "tables" not in payload
    assert Path(payload["final"], "model.safetensors").exists()
    assert [m["iteration"] for m in read_metrics(run)] == [1, 2]
    assert "Error:" not in result.stderr


@pytest.mark.slow
def test_rerun_starts_metrics_again(tmp_path, cache_dir):
    config = demo_config(tmp_path / "run", cache_dir, "grpo.steps=1")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"iteration": 7}) + "\n")
    grpo.train_grpo(config)
    assert [m["iteration"] for m in read_metrics(tmp_path / "run")] == [1]


@pytest.mark.slow
def test_toy_task_learns_signal_without_patching(tmp_path, cache_dir):
    """The toy reward (digit fraction) is graded, so a random model already gives GRPO a gradient."""
    from safetensors.torch import load_file

    config = demo_config(tmp_path / "run", cache_dir, "data.task=toy", "grpo.per_device_train_batch_size=8",
                         "grpo.num_generations=4", "grpo.steps=1")
    grpo.train_grpo(config)
    (metrics,) = read_metrics(tmp_path / "run")
    assert metrics["task"] == "toy" and 0 < metrics["reward/mean"] < 1 and metrics["grpo/grad_norm"] > 0
    before = load_file(_tiny_dir(cache_dir) / "model.safetensors")
    after = load_file(tmp_path / "run" / "final" / "model.safetensors")
    assert not before["lm_head.weight"].equal(after["lm_head.weight"])


@pytest.mark.slow
def test_same_seed_same_weights(tmp_path, cache_dir):
    """Determinism: run.seed fixes sampling, data order and so the trained weights."""
    from safetensors.torch import load_file

    finals = []
    for name in ("a", "b"):
        config = demo_config(tmp_path / name, cache_dir, "data.task=toy", "grpo.steps=2")
        grpo.train_grpo(config)
        finals.append(load_file(tmp_path / name / "final" / "model.safetensors"))
    assert all(finals[0][key].equal(finals[1][key]) for key in finals[0])
    assert read_metrics(tmp_path / "a")[1]["reward/mean"] == read_metrics(tmp_path / "b")[1]["reward/mean"]


@pytest.mark.slow
def test_beta_loads_the_reference_model_by_path(tmp_path, cache_dir):
    config = demo_config(tmp_path / "run", cache_dir, "grpo.steps=1", "grpo.beta=0.04")
    grpo.train_grpo(config)
    (metrics,) = read_metrics(tmp_path / "run")
    assert "grpo/kl" in metrics  # TRL computed a KL term against the reloaded reference
    assert not (tmp_path / "run" / "base").exists()  # `tiny` is already a local directory


# --------------------------------------------------------------------------------------------
# Reward: 1.0 only for `verified`, one batch per call
# --------------------------------------------------------------------------------------------

@pytest.fixture
def recording_verify(monkeypatch):
    """Replace `prover_cli.verify.verify_records` with a fake that records calls and feeds verdicts."""
    try:
        module = importlib.import_module("prover_cli.verify")
    except ModuleNotFoundError:  # the verify engine lives in another module; the glue needs only this name
        module = types.ModuleType("prover_cli.verify")
        monkeypatch.setitem(sys.modules, "prover_cli.verify", module)
    calls = []
    verdicts = []

    def fake_verify_records(records, verify_config, reporter=None, keep_warm=False):
        calls.append(list(records))
        return [{"id": r["id"], "verdict": v} for r, v in zip(records, verdicts, strict=True)]

    monkeypatch.setattr(module, "verify_records", fake_verify_records, raising=False)
    return calls, verdicts


def test_reward_is_one_only_for_verified_and_verifies_one_batch(recording_verify):
    from prover_cli.tasks import get_task

    calls, verdicts = recording_verify
    verdicts += ["verified", "rejected", "timeout", "error", "verified", "sorry"]
    config = load_config(None)
    stats = grpo.StepRewards()
    columns = ["id", "formal_statement", "header", "split"]
    reward = grpo.make_reward_function(get_task("lean"), config, stats, columns)

    # TRL's call: prompts and completions plus each dataset column, repeated per generation.
    problems = [("p1", "theorem p1 : 1 = 1 := by\n", None), ("p2", "theorem p2 : 2 = 2 := by\n", "import Mathlib\n"),
                ("p3", "theorem p3 : 3 = 3 := by\n", None)]
    rows = [p for p in problems for _ in range(2)]
    completions = [f"  tactic_{i}" for i in range(6)]
    rewards = reward(prompts=["prompt"] * 6, completions=completions, completion_ids=[[1]] * 6,
                     id=[r[0] for r in rows], formal_statement=[r[1] for r in rows], header=[r[2] for r in rows],
                     split=["train"] * 6, trainer_state=None, log_extra=None, log_metric=None)

    assert rewards == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert len(calls) == 1 and len(calls[0]) == 6  # the whole batch in one engine call
    assert [r["completion"] for r in calls[0]] == completions
    assert [r["formal_statement"] for r in calls[0]] == [r[1] for r in rows]
    assert calls[0][2]["header"] == "import Mathlib\n"
    assert calls[0][0]["header"] == config.verify.header  # no header: the configured one
    assert stats.take() == rewards and stats.rewards == []
    assert reward.__name__ == "lean_reward"


# --------------------------------------------------------------------------------------------
# GRPOConfig mapping and validation
# --------------------------------------------------------------------------------------------

OURS_TO_TRL = {"steps": "max_steps"}  # every other [grpo] key has TRL's name


def test_every_grpo_key_lands_on_trl_config(tmp_path):
    config = load_config(None, [
        "grpo.steps=7", "grpo.num_generations=3", "grpo.per_device_train_batch_size=6",
        "grpo.gradient_accumulation_steps=2", "grpo.learning_rate=3e-5", "grpo.beta=0.04",
        "grpo.epsilon=0.28", "grpo.loss_type=dr_grpo", "grpo.scale_rewards=none",
        "grpo.max_completion_length=123", "grpo.temperature=0.7", "grpo.use_vllm=true",
        "grpo.vllm_gpu_memory_utilization=0.45", "generate.top_p=0.9", "run.seed=17",
    ])
    args = grpo.grpo_args(config, output_dir=tmp_path, cuda=False)
    for field in dataclasses.fields(GRPOSection):
        ours = getattr(config.grpo, field.name)
        assert getattr(args, OURS_TO_TRL.get(field.name, field.name)) == ours, field.name
    # Values we depend on, set explicitly rather than inherited from TRL's defaults.
    assert args.vllm_mode == "colocate"
    assert args.top_p == 0.9 and args.top_k == 0
    assert args.seed == 17 and args.data_seed == 17
    assert args.num_iterations == 1 and args.steps_per_generation == 2
    assert args.generation_batch_size == 12
    assert args.epsilon_high == 0.28
    assert args.lr_scheduler_type == "constant"
    assert args.logging_steps == 1 and args.save_strategy == "no"
    assert args.report_to in ("none", [], ["none"])
    assert args.use_cpu is True and args.bf16 is False
    assert args.remove_unused_columns is False


def test_defaults_we_depend_on_differ_from_trl(tmp_path):
    """Our defaults are explicit even where TRL 1.16 would choose otherwise (loss_type: dapo)."""
    args = grpo.grpo_args(load_config(None), output_dir=tmp_path, cuda=False)
    assert args.loss_type == "grpo" and args.scale_rewards == "group" and args.beta == 0.0
    assert args.max_completion_length == 4096 and args.temperature == 1.0


def test_batch_must_hold_whole_groups():
    config = load_config(None, ["grpo.num_generations=3", "grpo.per_device_train_batch_size=4"])
    with pytest.raises(ConfigError, match=r"grpo.per_device_train_batch_size .* = 4: must be a multiple of "
                                          r"grpo.num_generations = 3"):
        grpo.check_batch_shape(config)


# --------------------------------------------------------------------------------------------
# Problems and the model directory
# --------------------------------------------------------------------------------------------

def test_missing_lean_problems_is_an_input_error_naming_the_path(tmp_path):
    config = load_config(None, [f"run.dir={tmp_path / 'run'}", "data.task=lean"])
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "run" / "problems.jsonl"))):
        grpo.train_grpo(config)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_countdown_problems_are_generated_from_the_run_seed(tmp_path):
    config = load_config(DEMO, [f"run.dir={tmp_path}", "run.seed=5"])
    problems = grpo.load_train_problems(config)
    assert problems and {p["split"] for p in problems} == {"train"}
    assert problems[0]["id"].startswith("countdown_5_")
    assert (tmp_path / "problems.jsonl").exists()
    assert grpo.load_train_problems(config) == problems  # read back, not regenerated differently


def test_empty_train_split_is_an_input_error(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"id": "a", "split": "test", "formal_statement": "x"}) + "\n")
    config = load_config(None, [f"data.problems={path}", "data.train_split=train"])
    with pytest.raises(InputError, match="no problems with split 'train'"):
        grpo.load_train_problems(config)


def test_dataset_has_templated_prompts_and_problem_columns(tmp_path, cache_dir):
    from transformers import AutoTokenizer

    from prover_cli.tasks import get_task

    tokenizer = AutoTokenizer.from_pretrained(_tiny_built(cache_dir))
    problems = [{"id": "c1", "numbers": [1, 2], "target": 3, "split": "train"},
                {"id": "c2", "numbers": [4, 5], "target": 9, "split": "train", "source": "x"}]
    dataset = grpo.build_dataset(problems, get_task("countdown"), tokenizer, "auto")
    assert set(dataset.column_names) == {"id", "numbers", "target", "split", "source", "prompt"}
    assert dataset[0]["prompt"].startswith("<|im_start|>user\n") and "[1, 2]" in dataset[0]["prompt"]
    assert dataset[0]["source"] is None and dataset[1]["numbers"] == [4, 5]


def _tiny_built(cache_dir):
    from prover_cli.tiny_model import resolve_model_path

    return resolve_model_path("tiny", cache_dir, 0)


def test_reference_model_dir_is_a_local_path(tmp_path, cache_dir):
    """TRL reloads the reference model from `config._name_or_path`: never a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _tiny_built(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert grpo.ensure_local_base(model, tokenizer, tmp_path / "base") == path  # already local
    assert not (tmp_path / "base").exists()

    model.name_or_path = model.config._name_or_path = "some-org/remote-model"  # as if loaded from the hub
    saved = grpo.ensure_local_base(model, tokenizer, tmp_path / "base")
    assert saved == str(tmp_path / "base") == model.config._name_or_path == model.name_or_path
    reloaded = AutoModelForCausalLM.from_pretrained(saved)
    assert reloaded.lm_head.weight.equal(model.lm_head.weight)
