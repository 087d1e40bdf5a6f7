"""GRPO glue: a tiny CPU run trains and logs the shared metrics, the reward is our task's, in one
batch, every [grpo] key lands on TRL's GRPOConfig with our explicit values, and an interrupted
run resumes from its checkpoint to the same weights as an uninterrupted one."""

import dataclasses
import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import PATIENCE_S
from prover_cli.grpo import resume as grpo_resume
from prover_cli.grpo import train as grpo_train
from prover_cli.grpo import trl_glue
from prover_cli.cli import app
from prover_cli.config import GRPOConfig as GRPOSection
from prover_cli.config import load_config
from prover_cli.errors import ConfigError, InputError
from prover_cli.training.metrics import REQUIRED_KEYS
from prover_cli.tasks.problems import train_problems

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "tests" / "configs" / "tiny.toml"  # the tests' own tiny config

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

    monkeypatch.setattr(countdown, "completion_reward", parity_score)
    config = demo_config(tmp_path / "run", cache_dir, "grpo.per_device_train_batch_size=8",
                         "grpo.num_generations=4", "grpo.learning_rate=0.01")
    result = grpo_train.train_grpo(config)

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
    from prover_cli.policy.tiny_model import tiny_model_dir

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


# --------------------------------------------------------------------------------------------
# Resuming
# --------------------------------------------------------------------------------------------

class Interrupted(Exception):
    pass


def interrupt_after_logging_step(monkeypatch, step):
    """Make the next train_grpo die right after step `step` wrote its metrics line, as a kill would.

    The callback is added after ours, so our line for `step` is already on disk when it raises."""
    from transformers import TrainerCallback

    class Die(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.global_step == step:
                raise Interrupted(step)

    real = grpo_train.resumable_trainer_class  # as train_grpo calls it

    def with_die():
        trainer_class = real()

        class Dying(trainer_class):
            def __init__(self, *args, callbacks=(), **kwargs):
                super().__init__(*args, callbacks=[*callbacks, Die()], **kwargs)

        return Dying

    monkeypatch.setattr(grpo_train, "resumable_trainer_class", with_die)
    return lambda: monkeypatch.setattr(grpo_train, "resumable_trainer_class", real)


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_weights_as_an_uninterrupted_one(tmp_path, cache_dir, monkeypatch):
    """Kill after step 4 (checkpoint at 3), resume, end bit-identical to a straight 5-step run.

    4 train problems at 2 prompts a step make 2 steps an epoch: the checkpoint sits mid epoch 2, so
    the resume must skip the batch step 3 consumed and draw epoch 2's prompt order, not epoch 1's."""
    from safetensors.torch import load_file

    from prover_cli.tasks import toy

    # A graded reward that varies within almost every group, so every step has a gradient and a
    # step trained on other prompts or samples than the straight run's shows in the weights.
    monkeypatch.setattr(toy, "completion_reward", lambda completion: (len(completion) % 5) / 4)
    problems = tmp_path / "problems.jsonl"
    train = [p for p in toy.generate_problems(64, seed=0) if p["split"] == "train"][:4]
    problems.write_text("".join(json.dumps(p) + "\n" for p in train))
    settings = ("data.task=toy", f"data.problems={problems}", "grpo.steps=5", "grpo.save_every=3")

    straight = grpo_train.train_grpo(demo_config(tmp_path / "straight", cache_dir, *settings))

    cut = tmp_path / "cut"
    restore = interrupt_after_logging_step(monkeypatch, 4)
    with pytest.raises(Interrupted):
        grpo_train.train_grpo(demo_config(cut, cache_dir, *settings))
    restore()
    assert [m["iteration"] for m in read_metrics(cut)] == [1, 2, 3, 4]
    assert sorted(p.name for p in (cut / "checkpoints").glob("checkpoint-*")) == ["checkpoint-3"]
    with (cut / "metrics.jsonl").open("a") as handle:
        handle.write('{"iteration": 5, "torn')  # a kill mid-write

    logs = []
    reporter = types.SimpleNamespace(log=logs.append, task=grpo_train.NULL_REPORTER.task)
    resumed = grpo_train.train_grpo(demo_config(cut, cache_dir, *settings), resume=True, reporter=reporter)

    assert any("resuming from" in line and "checkpoint-3" in line for line in logs)
    before = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    after = load_file(cut / "final" / "model.safetensors")
    base = load_file(_tiny_dir(cache_dir) / "model.safetensors")
    assert not before["lm_head.weight"].equal(base["lm_head.weight"])  # training did move the weights
    assert before.keys() == after.keys()
    assert all(before[name].equal(after[name]) for name in before), "resumed weights differ"

    ours, theirs = read_metrics(cut), read_metrics(tmp_path / "straight")
    assert [m["iteration"] for m in ours] == [1, 2, 3, 4, 5]  # contiguous: step 4 redone once, torn line gone
    assert [m["reward/mean"] for m in ours] == [m["reward/mean"] for m in theirs]
    assert [m["grpo/loss"] for m in ours] == [m["grpo/loss"] for m in theirs]
    assert [m["samples/total"] for m in ours] == [4, 8, 12, 16, 20]  # counting on from the kept line
    elapsed = [m["time/elapsed_s"] for m in ours]
    assert elapsed == sorted(elapsed) and elapsed[3] > elapsed[2]
    assert resumed["steps"] == straight["steps"] == 5 and resumed["resumed_from"] == 3
    assert resumed["samples"] == straight["samples"] == 20
    assert [row[0] for row in resumed["tables"][0]["rows"]] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_checkpoints_hold_what_an_exact_resume_needs(tmp_path, cache_dir):
    grpo_train.train_grpo(demo_config(tmp_path / "run", cache_dir, "grpo.steps=3", "grpo.save_every=1"))
    checkpoints = tmp_path / "run" / "checkpoints"
    # save_total_limit = 2; the Trainer also checkpoints the last step, so a run can be extended.
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    saved = {p.name for p in (checkpoints / "checkpoint-3").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= saved
    assert not any(name.endswith(".bin") and name != "training_args.bin" for name in saved)


@pytest.mark.slow
def test_save_every_zero_writes_no_checkpoint_and_resume_starts_over(tmp_path, cache_dir):
    run = tmp_path / "run"
    grpo_train.train_grpo(demo_config(run, cache_dir, "grpo.steps=1", "grpo.save_every=0"))
    assert not list(run.glob("checkpoints/checkpoint-*"))
    logs = []
    reporter = types.SimpleNamespace(log=logs.append, task=grpo_train.NULL_REPORTER.task)
    result = grpo_train.train_grpo(demo_config(run, cache_dir, "grpo.steps=1", "grpo.save_every=0"), resume=True,
                             reporter=reporter)
    assert any("no checkpoint to resume from; starting from the base model" in line for line in logs)
    assert [m["iteration"] for m in read_metrics(run)] == [1]  # the old line was dropped, not duplicated
    assert result["resumed_from"] == 0 and result["steps"] == 1


@pytest.mark.slow
def test_cli_refuses_to_overwrite_a_run_and_resume_extends_it(tmp_path, cache_dir):
    run = tmp_path / "cli-run"
    base = ["train", "grpo", "--config", str(DEMO), "--set", f"run.dir={run}", "--set", f"model.cache_dir={cache_dir}",
            "--set", "grpo.max_completion_length=8", "--set", "grpo.save_every=1", "--json"]
    first = CliRunner().invoke(app, [*base, "--set", "grpo.steps=1"])
    assert first.exit_code == 0, first.stderr
    metrics_before = (run / "metrics.jsonl").read_text()

    again = CliRunner().invoke(app, [*base, "--set", "grpo.steps=2"])
    assert again.exit_code == 1 and json.loads(again.stdout)["ok"] is False  # --json: the failure as JSON
    assert str(run / "metrics.jsonl") in again.stderr and "--resume" in again.stderr
    assert (run / "metrics.jsonl").read_text() == metrics_before  # nothing touched

    resumed = CliRunner().invoke(app, [*base, "--set", "grpo.steps=2", "--resume"])
    assert resumed.exit_code == 0, resumed.stderr
    payload = json.loads(resumed.stdout)
    assert payload["resumed_from"] == 1 and payload["steps"] == 2 and payload["samples"] == 8
    assert [m["iteration"] for m in read_metrics(run)] == [1, 2]
    assert read_metrics(run)[0] == json.loads(metrics_before)  # the kept line is the original one


def test_existing_checkpoints_alone_are_refused_without_resume(tmp_path):
    config = load_config(DEMO, [f"run.dir={tmp_path}"])
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "checkpoints"))) as error:
        grpo_train.train_grpo(config)
    assert "--resume" in error.value.hint and "run.dir" in error.value.hint


def test_resume_refuses_a_run_dir_of_another_trainer(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "method": "es"}) + "\n{\"torn")
    with pytest.raises(InputError, match="holds metrics of method es, not of GRPO"):
        grpo_resume.start_or_resume(load_config(DEMO, [f"run.dir={tmp_path}"]), resume=True)
    assert "iteration" in (tmp_path / "metrics.jsonl").read_text()  # ES metrics untouched


def fake_checkpoint(run_dir, step, *, whole=True):
    path = run_dir / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if whole:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_latest_checkpoint_skips_one_torn_by_a_kill(tmp_path):
    assert grpo_resume.latest_checkpoint(tmp_path / "checkpoints") is None
    fake_checkpoint(tmp_path, 9)
    fake_checkpoint(tmp_path, 10)
    fake_checkpoint(tmp_path, 20, whole=False)  # killed before trainer_state.json was written
    (tmp_path / "checkpoints" / "checkpoint-30").mkdir()
    (tmp_path / "checkpoints" / "checkpoint-30" / "trainer_state.json").write_text('{"global_st')
    (tmp_path / "checkpoints" / "checkpoint-x").mkdir()
    assert grpo_resume.latest_checkpoint(tmp_path / "checkpoints") == tmp_path / "checkpoints" / "checkpoint-10"


def test_resume_refuses_a_config_that_changes_the_trajectory(tmp_path):
    from prover_cli.training.metrics import write_resolved_config

    write_resolved_config(load_config(DEMO, [f"run.dir={tmp_path}"]))
    fake_checkpoint(tmp_path, 1)
    changed = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.learning_rate=0.5", "run.seed=3",
                                 "model.dtype=bfloat16"])
    with pytest.raises(ConfigError, match="cannot resume") as error:
        grpo_resume.start_or_resume(changed, resume=True)
    message = str(error.value)
    for key in ("grpo.learning_rate: run 0.0001 != config 0.5", "run.seed: run 0 != config 3", "model.dtype"):
        assert key in message
    assert str(tmp_path / "config.toml") in message

    # How far to train, how often to save and the model cache may change on resume.
    allowed = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.steps=9", "grpo.save_every=4", "model.cache_dir=elsewhere"])
    assert grpo_resume.start_or_resume(allowed, resume=True) == tmp_path / "checkpoints" / "checkpoint-1"


def test_resume_refuses_a_checkpoint_past_the_configured_steps(tmp_path):
    config = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.steps=2"])
    fake_checkpoint(tmp_path, 3)
    with pytest.raises(ConfigError, match=r"checkpoint-3: the checkpoint is at step 3, past grpo.steps = 2"):
        grpo_resume.start_or_resume(config, resume=True)


def test_cli_passes_resume_to_the_library_and_to_modal(monkeypatch):
    from prover_cli import backends

    calls = []
    monkeypatch.setattr(backends, "resolve_function", lambda name: lambda config, **kwargs: calls.append(("local", kwargs))
                        or {"ok": True})
    monkeypatch.setattr(backends, "MODAL_RUNNER", lambda name, config, kwargs: calls.append((name, kwargs))
                        or {"ok": True})
    runner = CliRunner()
    assert runner.invoke(app, ["train", "grpo", "--resume", "--json"]).exit_code == 0
    assert runner.invoke(app, ["train", "grpo", "--json"]).exit_code == 0
    assert runner.invoke(app, ["train", "grpo", "--resume", "--backend", "modal", "--json"]).exit_code == 0
    assert calls[0][1]["resume"] is True and calls[1][1]["resume"] is False
    assert calls[2] == ("train_grpo", {"resume": True, "detach": False})


@pytest.mark.slow
def test_toy_task_learns_signal_without_patching(tmp_path, cache_dir):
    """The toy reward (digit fraction) is graded, so a random model already gives GRPO a gradient."""
    from safetensors.torch import load_file

    config = demo_config(tmp_path / "run", cache_dir, "data.task=toy", "grpo.per_device_train_batch_size=8",
                         "grpo.num_generations=4", "grpo.steps=1")
    grpo_train.train_grpo(config)
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
        grpo_train.train_grpo(config)
        finals.append(load_file(tmp_path / name / "final" / "model.safetensors"))
    assert all(finals[0][key].equal(finals[1][key]) for key in finals[0])
    assert read_metrics(tmp_path / "a")[1]["reward/mean"] == read_metrics(tmp_path / "b")[1]["reward/mean"]


@pytest.mark.slow
def test_beta_loads_the_reference_model_by_path(tmp_path, cache_dir):
    config = demo_config(tmp_path / "run", cache_dir, "grpo.steps=1", "grpo.beta=0.04")
    grpo_train.train_grpo(config)
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
    stats = grpo_train.StepRewards()
    columns = ["id", "formal_statement", "header", "split"]
    reward = grpo_train.make_reward_function(get_task("lean"), config, stats, columns)

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

OURS_TO_TRL = {"steps": "max_steps", "save_every": "save_steps"}  # every other [grpo] key has TRL's name
NOT_TRL_KEYS = {"fp32_master", "shuffle_rewards"}  # ours alone: how load_policy loads the model, the null control


def test_every_grpo_key_lands_on_trl_config(tmp_path):
    config = load_config(None, [
        "grpo.steps=7", "grpo.num_generations=3", "grpo.per_device_train_batch_size=6",
        "grpo.gradient_accumulation_steps=2", "grpo.learning_rate=3e-5", "grpo.beta=0.04",
        "grpo.epsilon=0.28", "grpo.loss_type=dr_grpo", "grpo.scale_rewards=none",
        "grpo.max_completion_length=123", "grpo.temperature=0.7", "grpo.use_vllm=true",
        "grpo.vllm_gpu_memory_utilization=0.45", "grpo.save_every=5", "generate.top_p=0.9", "run.seed=17",
    ])
    args = trl_glue.grpo_args(config, output_dir=tmp_path, cuda=False)
    for field in dataclasses.fields(GRPOSection):
        if field.name in NOT_TRL_KEYS:
            continue
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
    assert args.logging_steps == 1 and args.save_strategy == "steps" and args.save_total_limit == 2
    assert args.save_only_model is False and args.ignore_data_skip is False  # optimizer + RNG, exact data skip
    assert args.report_to in ("none", [], ["none"])
    assert args.use_cpu is True and args.bf16 is False
    assert args.remove_unused_columns is False


def test_defaults_we_depend_on_differ_from_trl(tmp_path):
    """Our defaults are explicit even where TRL 1.16 would choose otherwise (loss_type: dapo)."""
    args = trl_glue.grpo_args(load_config(None), output_dir=tmp_path, cuda=False)
    assert args.loss_type == "grpo" and args.scale_rewards == "group" and args.beta == 0.0
    assert args.max_completion_length == 4096 and args.temperature == 1.0
    assert args.save_strategy == "steps" and args.save_steps == 50  # TRL: 500


def test_save_every_zero_saves_nothing(tmp_path):
    args = trl_glue.grpo_args(load_config(None, ["grpo.save_every=0"]), output_dir=tmp_path, cuda=False)
    assert args.save_strategy == "no"


def test_batch_must_hold_whole_groups():
    config = load_config(None, ["grpo.num_generations=3", "grpo.per_device_train_batch_size=4"])
    with pytest.raises(ConfigError, match=r"grpo.per_device_train_batch_size .* = 4: must be a multiple of "
                                          r"grpo.num_generations = 3"):
        trl_glue.check_batch_shape(config)


# --------------------------------------------------------------------------------------------
# Problems and the model directory
# --------------------------------------------------------------------------------------------

def test_missing_lean_problems_is_an_input_error_naming_the_path(tmp_path):
    config = load_config(None, [f"run.dir={tmp_path / 'run'}", "data.task=lean"])
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "run" / "problems.jsonl"))):
        grpo_train.train_grpo(config)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_countdown_problems_are_generated_from_the_run_seed(tmp_path):
    config = load_config(DEMO, [f"run.dir={tmp_path}", "run.seed=5"])
    problems = train_problems(config, save_generated=True)
    assert problems and {p["split"] for p in problems} == {"train"}
    assert problems[0]["id"].startswith("countdown_5_")
    assert (tmp_path / "problems.jsonl").exists()
    assert train_problems(config, save_generated=True) == problems  # read back, not regenerated differently


def test_empty_train_split_is_an_input_error(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"id": "a", "split": "test", "formal_statement": "x"}) + "\n")
    config = load_config(None, [f"data.problems={path}", "data.train_split=train"])
    with pytest.raises(InputError, match="no problems with split 'train'"):
        train_problems(config, save_generated=True)


def test_dataset_has_templated_prompts_and_problem_columns(tmp_path, cache_dir):
    from transformers import AutoTokenizer

    from prover_cli.tasks import get_task

    tokenizer = AutoTokenizer.from_pretrained(_tiny_built(cache_dir))
    problems = [{"id": "c1", "numbers": [1, 2], "target": 3, "split": "train"},
                {"id": "c2", "numbers": [4, 5], "target": 9, "split": "train", "source": "x"}]
    dataset = trl_glue.build_dataset(problems, get_task("countdown"), tokenizer, "auto")
    assert set(dataset.column_names) == {"id", "numbers", "target", "split", "source", "prompt"}
    assert dataset[0]["prompt"].startswith("<|im_start|>user\n") and "[1, 2]" in dataset[0]["prompt"]
    assert dataset[0]["source"] is None and dataset[1]["numbers"] == [4, 5]


def _tiny_built(cache_dir):
    from prover_cli.policy.built_models import resolve_model_path

    return resolve_model_path("tiny", cache_dir, 0)


def test_reference_model_dir_is_a_local_path(tmp_path, cache_dir):
    """TRL reloads the reference model from `config._name_or_path`: never a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = _tiny_built(cache_dir)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert trl_glue.ensure_local_base(model, tokenizer, tmp_path / "base") == path  # already local
    assert not (tmp_path / "base").exists()

    model.name_or_path = model.config._name_or_path = "some-org/remote-model"  # as if loaded from the hub
    saved = trl_glue.ensure_local_base(model, tokenizer, tmp_path / "base")
    assert saved == str(tmp_path / "base") == model.config._name_or_path == model.name_or_path
    reloaded = AutoModelForCausalLM.from_pretrained(saved)
    assert reloaded.lm_head.weight.equal(model.lm_head.weight)


# --------------------------------------------------------------------------------------------
# fp32 master weights with a bfloat16 model
# --------------------------------------------------------------------------------------------

def changed_fraction(base, after, name):
    import torch

    return (after[name].float() != base[name].to(torch.bfloat16).float()).float().mean().item()


@pytest.mark.slow
def test_bf16_model_trains_fp32_master_weights_where_bf16_weights_round_small_steps_away(tmp_path, cache_dir,
                                                                                        monkeypatch):
    """lr 1e-5 for 4 steps: with fp32 master weights every tensor moves, RMSNorm included; trained
    in bfloat16 directly, about 1 weight in 8 moves and no norm weight does (the issue's figures)."""
    from safetensors.torch import load_file

    from prover_cli.tasks import countdown

    monkeypatch.setattr(countdown, "completion_reward", lambda completion, problem: float(len(completion) % 2))
    settings = ("model.dtype=bfloat16", "grpo.learning_rate=1e-5", "grpo.steps=4", "grpo.save_every=0",
                "grpo.per_device_train_batch_size=8", "grpo.num_generations=4",
                "run.eval_every=4", "run.eval_problems=2")  # held-out once, at the end, under bf16 autocast
    moved = {}
    for master in ("true", "false"):
        run = tmp_path / f"master-{master}"
        grpo_train.train_grpo(demo_config(run, cache_dir, *settings, f"grpo.fp32_master={master}"))
        base = load_file(_tiny_dir(cache_dir) / "model.safetensors")  # built by the first run
        after = load_file(run / "final" / "model.safetensors")
        dtype = json.loads((run / "final" / "config.json").read_text())["dtype"]
        assert [m["eval/samples"] for m in read_metrics(run) if "eval/samples" in m] == [2, 2]  # base, then step 4
        moved[master] = ({name: changed_fraction(base, after, name) for name in base}, dtype,
                         {t.dtype for t in after.values()})

    fractions, dtype, dtypes = moved["true"]
    assert dtype == "float32" and {str(d) for d in dtypes} == {"torch.float32"}  # final/ holds the master
    norms = [name for name in fractions if "norm" in name]
    assert len(norms) == 5 and all(fractions[name] > 0.95 for name in norms)
    # Every element of every tensor moves, except embedding rows of tokens no batch contained.
    assert all(fraction > 0.95 for name, fraction in fractions.items() if name != "model.embed_tokens.weight")
    assert fractions["model.embed_tokens.weight"] > 0.1

    fractions, dtype, dtypes = moved["false"]
    assert dtype == "bfloat16" and {str(d) for d in dtypes} == {"torch.bfloat16"}
    assert all(fractions[name] == 0.0 for name in norms)  # a 1e-5 step is far below a bf16 ulp at 1.0
    sizes = {name: tensor.numel() for name, tensor in base.items()}
    overall = sum(fractions[n] * sizes[n] for n in base) / sum(sizes.values())
    assert 0.0 < overall < 0.3


def test_load_policy_upcasts_a_bf16_model_and_keeps_bf16_compute(tmp_path, cache_dir):
    import torch

    config = demo_config(tmp_path / "run", cache_dir, "model.dtype=bfloat16")
    model, _, device, compute = trl_glue.load_policy(config)
    assert {p.dtype for p in model.parameters()} == {torch.float32} and compute == torch.bfloat16
    args = trl_glue.grpo_args(config, output_dir=tmp_path, cuda=False, compute_dtype=compute)
    assert args.bf16 is True and args.fp16 is False  # the Trainer's autocast computes in bf16

    off = demo_config(tmp_path / "run", cache_dir, "model.dtype=bfloat16", "grpo.fp32_master=false")
    model, _, _, compute = trl_glue.load_policy(off)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16} == {compute}
    fp32 = demo_config(tmp_path / "run", cache_dir)  # demo: float32, nothing to upcast, no autocast
    model, _, _, compute = trl_glue.load_policy(fp32)
    assert compute == torch.float32
    assert trl_glue.grpo_args(fp32, output_dir=tmp_path, cuda=False, compute_dtype=compute).bf16 is False


# --------------------------------------------------------------------------------------------
# A finished run: --resume says so and changes nothing
# --------------------------------------------------------------------------------------------

def run_files(run_dir):
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_resume_of_a_finished_run_trains_nothing_and_changes_nothing(tmp_path, cache_dir):
    run = tmp_path / "run"
    settings = ("grpo.steps=2", "grpo.save_every=1")
    grpo_train.train_grpo(demo_config(run, cache_dir, *settings))
    before = run_files(run)

    logs = []
    reporter = types.SimpleNamespace(log=logs.append, task=grpo_train.NULL_REPORTER.task)
    result = grpo_train.train_grpo(demo_config(run, cache_dir, *settings), resume=True, reporter=reporter)
    assert any("the run is complete" in line and "checkpoint-2" in line for line in logs)
    assert result["complete"] is True and result["steps"] == 2 and result["resumed_from"] == 2
    assert run_files(run) == before  # metrics, checkpoints, final/, config.toml: byte for byte

    again = grpo_train.train_grpo(demo_config(run, cache_dir, *settings), resume=True, reporter=reporter)
    assert again["complete"] is True  # and it stays resumable: no step 3 was trained
    assert sorted(p.name for p in (run / "checkpoints").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]

    # A kill during the final save leaves no final/: the finished checkpoint provides it.
    final_before = {k: v for k, v in before.items() if k.startswith("final/")}
    import shutil

    shutil.rmtree(run / "final")
    grpo_train.train_grpo(demo_config(run, cache_dir, *settings), resume=True, reporter=reporter)
    from safetensors.torch import load_file

    assert load_file(run / "final" / "model.safetensors").keys() == load_file(
        run / "checkpoints" / "checkpoint-2" / "model.safetensors").keys()
    assert (run / "final" / "model.safetensors").read_bytes() == final_before["final/model.safetensors"]
    assert not (run / "final" / "optimizer.pt").exists() and (run / "final" / "tokenizer.json").exists()
    assert {k: v for k, v in run_files(run).items() if not k.startswith("final/")} == \
        {k: v for k, v in before.items() if not k.startswith("final/")}


# --------------------------------------------------------------------------------------------
# Held-out evaluation and tracking
# --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_heldout_eval_and_tensorboard_leave_the_trajectory_unchanged(tmp_path, cache_dir):
    """eval/* keys on steps 2 and 3 (eval_every 2, and the last step), the same TensorBoard curves as
    metrics.jsonl, and bit-identical weights to a run without either."""
    from safetensors.torch import load_file
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from prover_cli.training.heldout import EVAL_KEYS
    from prover_cli.tasks.problems import heldout_problems

    settings = ("data.task=toy", "grpo.steps=3", "grpo.save_every=0")
    plain = tmp_path / "plain"
    grpo_train.train_grpo(demo_config(plain, cache_dir, *settings))
    tracked = tmp_path / "tracked"
    config = demo_config(tracked, cache_dir, *settings, "run.eval_every=2", "run.eval_problems=3",
                         "run.report_to=tensorboard")
    grpo_train.train_grpo(config)

    before, after = load_file(plain / "final" / "model.safetensors"), load_file(tracked / "final" / "model.safetensors")
    assert all(before[name].equal(after[name]) for name in before), "evaluation changed the training trajectory"
    plain_metrics, metrics = read_metrics(plain), read_metrics(tracked)
    base, metrics = metrics[0], metrics[1:]  # the base's evaluation, before step 1
    assert base["iteration"] == 0 and base["samples/total"] == 0 and "reward/mean" not in base
    assert [m["reward/mean"] for m in metrics] == [m["reward/mean"] for m in plain_metrics]
    assert [sorted(k for k in m if k.startswith("eval/")) for m in [base, *metrics]] == \
        [sorted(EVAL_KEYS), [], sorted(EVAL_KEYS), sorted(EVAL_KEYS)]
    for m in [base, *metrics[1:]]:
        assert m["eval/problems"] == 3 == len(heldout_problems(config)) and m["eval/samples"] == 3  # eval_n = 1
        assert 0.0 <= m["eval/reward_mean"] <= 1.0 and m["eval/wall_s"] > 0
        assert m["eval/verified_rate_lo"] <= m["eval/verified_rate"] <= m["eval/verified_rate_hi"]
        assert m["eval/greedy_verified_rate_lo"] <= m["eval/greedy_verified_rate"] <= m["eval/greedy_verified_rate_hi"]

    events = EventAccumulator(str(tracked / "tensorboard")).Reload()
    assert {"eval/reward_mean", "eval/greedy_verified_rate", "eval/verified_rate_hi"} <= set(events.Tags()["scalars"])
    assert not any("by_problem" in tag for tag in events.Tags()["scalars"])  # per-problem results stay in the file
    for key in ("reward/mean", "verify/verified"):
        assert [(e.step, pytest.approx(e.value)) for e in events.Scalars(key)] == \
            [(m["iteration"], m[key]) for m in metrics], key
    assert [e.step for e in events.Scalars("samples/total")] == [0, 1, 2, 3]
    assert [e.step for e in events.Scalars("eval/reward_mean")] == [0, 2, 3]
    assert [e.value for e in events.Scalars("eval/greedy_verified_rate")] == \
        [pytest.approx(m["eval/greedy_verified_rate"]) for m in (base, *metrics[1:])]
    assert list((tracked / "tensorboard" / "trl").glob("events.out.tfevents.*"))  # TRL's own curves too


def test_report_to_reaches_trl_and_unknown_trackers_are_refused(tmp_path):
    args = trl_glue.grpo_args(load_config(None, ["run.report_to=tensorboard, wandb", f"run.dir={tmp_path / 'r1'}"]),
                          output_dir=tmp_path, cuda=False)
    assert args.report_to == ["tensorboard", "wandb"] and args.run_name == "r1"
    with pytest.raises(ConfigError, match=r"run.report_to = .*unknown tracker 'comet'"):
        load_config(None, ['run.report_to=["tensorboard", "comet"]'])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trackio") is None or importlib.util.find_spec("wandb") is None,
                    reason="trackio and wandb (optional extras) not installed")
def test_cli_grpo_streams_to_trackio_and_wandb_offline_with_clean_json(tmp_path, cache_dir):
    """Our records and TRL's own curves land in ONE trackio run and ONE W&B run; stdout stays JSON."""
    import os
    import subprocess

    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "TRACKIO_PROJECT": "prover",
           "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp_path)}
    run = tmp_path / "run-t"
    done = subprocess.run([sys.executable, "-m", "prover_cli", "train", "grpo", "--config", str(DEMO),
                           "--set", f"run.dir={run}", "--set", f"model.cache_dir={cache_dir}",
                           "--set", "grpo.max_completion_length=8", "--set", "run.report_to=trackio,wandb", "--json"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=PATIENCE_S)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"] == 2  # banners (trackio, W&B offline) went to stderr

    read = subprocess.run([sys.executable, "-c", "import json; from trackio.sqlite_storage import SQLiteStorage; "
                           "print(json.dumps(SQLiteStorage.get_logs('prover', 'run-t')))"],
                          capture_output=True, text=True, env=env, timeout=PATIENCE_S)
    logs = json.loads(read.stdout)
    ours = [(row["step"], row["reward/mean"]) for row in logs if "reward/mean" in row]
    assert ours == [(m["iteration"], m["reward/mean"]) for m in read_metrics(run)]
    assert [row["step"] for row in logs if "train/loss" in row] == [1, 2]  # TRL's, in the same run
    run_id = (run / "wandb-run-id").read_text().strip()
    assert [p.name.rsplit("-", 1)[1] for p in (run / "wandb").glob("offline-run-*")] == [run_id]


# --------------------------------------------------------------------------------------------
# The null control: rewards permuted within each group
# --------------------------------------------------------------------------------------------

def test_shuffle_in_groups_permutes_within_each_group_only_and_is_seeded_by_content():
    prompts = ["a"] * 4 + ["b"] * 4
    completions = [f"c{i}" for i in range(8)]
    rewards = [1.0, 0.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0]
    shuffled = grpo_train.shuffle_in_groups(rewards, prompts, completions, 4, run_seed=0)
    assert sorted(shuffled[:4]) == sorted(rewards[:4]) and sorted(shuffled[4:]) == sorted(rewards[4:])
    assert shuffled == grpo_train.shuffle_in_groups(rewards, prompts, completions, 4, run_seed=0)  # a resume: the same
    seeds = {tuple(grpo_train.shuffle_in_groups(rewards, prompts, completions, 4, run_seed=s)) for s in range(20)}
    assert len(seeds) > 5  # the seed matters, and the permutation is not the identity every time
    with pytest.raises(ValueError, match="not one prompt's group"):
        grpo_train.shuffle_in_groups(rewards, ["a", "b"] * 4, completions, 4, run_seed=0)
    with pytest.raises(ValueError, match="not whole groups"):
        grpo_train.shuffle_in_groups(rewards[:6], prompts[:6], completions[:6], 4, run_seed=0)


def test_null_control_reward_gives_trl_permuted_rewards_and_logs_the_true_ones():
    from prover_cli.tasks import get_task

    task = get_task("countdown")
    config = load_config(None, ["data.task=countdown", "grpo.num_generations=2", "grpo.per_device_train_batch_size=4",
                                "grpo.shuffle_rewards=true"])
    problems = {"numbers": [[1, 2], [1, 2], [3, 4], [3, 4]], "target": [3, 3, 7, 7]}
    completions = ["<answer> 1 + 2 </answer>", "<answer> 2 - 1 </answer>", "<answer> 3 + 4 </answer>", "no"]
    stats = grpo_train.StepRewards()
    reward = grpo_train.make_reward_function(task, config, stats, columns=["numbers", "target"])
    given = reward(["p1", "p1", "p2", "p2"], completions, **problems)
    true = [1.0, 0.0, 1.0, 0.0]
    assert stats.take() == true
    assert given == grpo_train.shuffle_in_groups(true, ["p1", "p1", "p2", "p2"], completions, 2, run_seed=0)
    assert sorted(given[:2]) == [0.0, 1.0] and sorted(given[2:]) == [0.0, 1.0]
    plain = grpo_train.make_reward_function(task, load_config(None, ["data.task=countdown"]), stats, ["numbers", "target"])
    assert plain(["p1", "p1", "p2", "p2"], completions, **problems) == true


# --------------------------------------------------------------------------------------------
# Prompts: GRPO trains on the token ids the samplers sample from
# --------------------------------------------------------------------------------------------

DEEPSEEK_BOS = "<｜begin▁of▁sentence｜>"


def bos_model_dir(path: Path) -> Path:
    """A tiny model whose tokenizer adds a BOS itself, as DeepSeek-Prover's and Goedel-Prover-V1's do
    (LLaMA-style: `tokenizer(text)` starts with BOS; `add_special_tokens=False` does not)."""
    import torch
    from tokenizers import processors
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from prover_cli.policy.tiny_model import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"bos_token": DEEPSEEK_BOS})
    bos_id = tokenizer.convert_tokens_to_ids(DEEPSEEK_BOS)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{DEEPSEEK_BOS} $A", pair=f"{DEEPSEEK_BOS} $A {DEEPSEEK_BOS} $B", special_tokens=[(DEEPSEEK_BOS, bos_id)])
    tokenizer.save_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer("x")["input_ids"][0] == bos_id != tokenizer("x", add_special_tokens=False)["input_ids"][0]
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, bos_token_id=bos_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.mark.slow
def test_grpo_trains_on_the_prompt_ids_the_sampler_uses_with_a_bos_adding_tokenizer(tmp_path):
    from prover_cli.policy.samplers import SamplingParams
    from prover_cli.policy.samplers.transformers_sampler import TransformersSampler, load_model_and_tokenizer
    from prover_cli.tasks import get_task

    config = load_config(DEMO, [f"run.dir={tmp_path / 'run'}", f"model.name={bos_model_dir(tmp_path / 'model')}",
                                "model.family=deepseek-v1.5", "data.task=lean", "grpo.steps=1",
                                "grpo.num_generations=2", "grpo.per_device_train_batch_size=4",
                                "grpo.max_completion_length=4", "grpo.save_every=0"])
    model, tokenizer, _ = load_model_and_tokenizer(config.model)
    bos = tokenizer.bos_token_id
    task = get_task("lean")
    problems = [{"id": f"p{i}", "formal_statement": f"theorem t{i} : {i} + 1 = {i + 1} := by\n", "split": "train"}
                for i in range(2)]

    # What the samplers feed the model (generate, ES, held-out evaluation): one BOS, from the prompt text.
    sampler = TransformersSampler(config.model, config.generate, model=model, tokenizer=tokenizer)
    seen = []
    original = model.generate

    def spy(**kwargs):
        for ids, mask in zip(kwargs["input_ids"], kwargs["attention_mask"]):
            seen.append(ids[mask.bool()].tolist())
        return original(**kwargs)

    model.generate = spy
    prompts = [task.build_prompt(p, tokenizer, config.model.family) for p in problems]
    sampler.generate(prompts, SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=2, seed=0))
    model.generate = original
    assert all(ids[0] == bos != ids[1] for ids in seen)
    assert tokenizer(prompts[0])["input_ids"][:2] == [bos, bos]  # the prompt as-is through TRL: two BOS

    # What GRPO trains on: the prompt ids TRL builds for the step, from trl_glue.build_dataset's prompts.
    dataset = trl_glue.build_dataset(problems, task, tokenizer, config.model.family)
    trained = []
    trainer = trl_glue.resumable_trainer_class()(
        model=model, reward_funcs=lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions],
        args=trl_glue.grpo_args(config, output_dir=tmp_path / "ckpt", cuda=False), train_dataset=dataset,
        processing_class=tokenizer)
    score = trainer._generate_and_score_completions

    def record(inputs):
        output = score(inputs)
        for ids, mask in zip(output["prompt_ids"], output["prompt_mask"]):
            trained.append(ids[mask.bool()].tolist())
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    assert len(trained) == 4 and {tuple(ids) for ids in trained} == {tuple(ids) for ids in seen}
