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

    real = grpo.resumable_trainer_class

    def with_die():
        trainer_class = real()

        class Dying(trainer_class):
            def __init__(self, *args, callbacks=(), **kwargs):
                super().__init__(*args, callbacks=[*callbacks, Die()], **kwargs)

        return Dying

    monkeypatch.setattr(grpo, "resumable_trainer_class", with_die)
    return lambda: monkeypatch.setattr(grpo, "resumable_trainer_class", real)


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_weights_as_an_uninterrupted_one(tmp_path, cache_dir, monkeypatch):
    """Kill after step 4 (checkpoint at 3), resume, end bit-identical to a straight 5-step run.

    4 train problems at 2 prompts a step make 2 steps an epoch: the checkpoint sits mid epoch 2, so
    the resume must skip the batch step 3 consumed and draw epoch 2's prompt order, not epoch 1's."""
    from safetensors.torch import load_file

    from prover_cli.tasks import toy

    # A graded reward that varies within almost every group, so every step has a gradient and a
    # step trained on other prompts or samples than the straight run's shows in the weights.
    monkeypatch.setattr(toy, "score", lambda completion: (len(completion) % 5) / 4)
    problems = tmp_path / "problems.jsonl"
    train = [p for p in toy.generate_problems(64, seed=0) if p["split"] == "train"][:4]
    problems.write_text("".join(json.dumps(p) + "\n" for p in train))
    settings = ("data.task=toy", f"data.problems={problems}", "grpo.steps=5", "grpo.save_every=3")

    straight = grpo.train_grpo(demo_config(tmp_path / "straight", cache_dir, *settings))

    cut = tmp_path / "cut"
    restore = interrupt_after_logging_step(monkeypatch, 4)
    with pytest.raises(Interrupted):
        grpo.train_grpo(demo_config(cut, cache_dir, *settings))
    restore()
    assert [m["iteration"] for m in read_metrics(cut)] == [1, 2, 3, 4]
    assert sorted(p.name for p in (cut / "checkpoints").glob("checkpoint-*")) == ["checkpoint-3"]
    with (cut / "metrics.jsonl").open("a") as handle:
        handle.write('{"iteration": 5, "torn')  # a kill mid-write

    logs = []
    reporter = types.SimpleNamespace(log=logs.append, task=grpo.NULL_REPORTER.task)
    resumed = grpo.train_grpo(demo_config(cut, cache_dir, *settings), resume=True, reporter=reporter)

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
    grpo.train_grpo(demo_config(tmp_path / "run", cache_dir, "grpo.steps=3", "grpo.save_every=1"))
    checkpoints = tmp_path / "run" / "checkpoints"
    # save_total_limit = 2; the Trainer also checkpoints the last step, so a run can be extended.
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    saved = {p.name for p in (checkpoints / "checkpoint-3").iterdir()}
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json"} <= saved
    assert not any(name.endswith(".bin") and name != "training_args.bin" for name in saved)


@pytest.mark.slow
def test_save_every_zero_writes_no_checkpoint_and_resume_starts_over(tmp_path, cache_dir):
    run = tmp_path / "run"
    grpo.train_grpo(demo_config(run, cache_dir, "grpo.steps=1", "grpo.save_every=0"))
    assert not list(run.glob("checkpoints/checkpoint-*"))
    logs = []
    reporter = types.SimpleNamespace(log=logs.append, task=grpo.NULL_REPORTER.task)
    result = grpo.train_grpo(demo_config(run, cache_dir, "grpo.steps=1", "grpo.save_every=0"), resume=True,
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
    assert again.exit_code == 1 and again.stdout == ""
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
        grpo.train_grpo(config)
    assert "--resume" in error.value.hint and "run.dir" in error.value.hint


def test_resume_refuses_a_run_dir_of_another_trainer(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"iteration": 1, "method": "es"}) + "\n{\"torn")
    with pytest.raises(InputError, match="holds metrics of method es, not of GRPO"):
        grpo.start_or_resume(load_config(DEMO, [f"run.dir={tmp_path}"]), resume=True)
    assert "iteration" in (tmp_path / "metrics.jsonl").read_text()  # ES metrics untouched


def fake_checkpoint(run_dir, step, *, whole=True):
    path = run_dir / "checkpoints" / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if whole:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_latest_checkpoint_skips_one_torn_by_a_kill(tmp_path):
    assert grpo.latest_checkpoint(tmp_path / "checkpoints") is None
    fake_checkpoint(tmp_path, 9)
    fake_checkpoint(tmp_path, 10)
    fake_checkpoint(tmp_path, 20, whole=False)  # killed before trainer_state.json was written
    (tmp_path / "checkpoints" / "checkpoint-30").mkdir()
    (tmp_path / "checkpoints" / "checkpoint-30" / "trainer_state.json").write_text('{"global_st')
    (tmp_path / "checkpoints" / "checkpoint-x").mkdir()
    assert grpo.latest_checkpoint(tmp_path / "checkpoints") == tmp_path / "checkpoints" / "checkpoint-10"


def test_resume_refuses_a_config_that_changes_the_trajectory(tmp_path):
    from prover_cli.metrics import write_resolved_config

    write_resolved_config(load_config(DEMO, [f"run.dir={tmp_path}"]))
    fake_checkpoint(tmp_path, 1)
    changed = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.learning_rate=0.5", "run.seed=3",
                                 "model.dtype=bfloat16"])
    with pytest.raises(ConfigError, match="cannot resume") as error:
        grpo.start_or_resume(changed, resume=True)
    message = str(error.value)
    for key in ("grpo.learning_rate: run 0.0001 != config 0.5", "run.seed: run 0 != config 3", "model.dtype"):
        assert key in message
    assert str(tmp_path / "config.toml") in message

    # How far to train, how often to save and the model cache may change on resume.
    allowed = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.steps=9", "grpo.save_every=4", "model.cache_dir=elsewhere"])
    assert grpo.start_or_resume(allowed, resume=True) == tmp_path / "checkpoints" / "checkpoint-1"


def test_resume_refuses_a_checkpoint_past_the_configured_steps(tmp_path):
    config = load_config(DEMO, [f"run.dir={tmp_path}", "grpo.steps=2"])
    fake_checkpoint(tmp_path, 3)
    with pytest.raises(ConfigError, match=r"checkpoint-3: the checkpoint is at step 3, past grpo.steps = 2"):
        grpo.start_or_resume(config, resume=True)


def test_cli_passes_resume_to_the_library_and_to_modal(monkeypatch):
    from prover_cli import backends

    calls = []
    monkeypatch.setattr(backends, "resolve", lambda name: lambda config, **kwargs: calls.append(("local", kwargs))
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

OURS_TO_TRL = {"steps": "max_steps", "save_every": "save_steps"}  # every other [grpo] key has TRL's name


def test_every_grpo_key_lands_on_trl_config(tmp_path):
    config = load_config(None, [
        "grpo.steps=7", "grpo.num_generations=3", "grpo.per_device_train_batch_size=6",
        "grpo.gradient_accumulation_steps=2", "grpo.learning_rate=3e-5", "grpo.beta=0.04",
        "grpo.epsilon=0.28", "grpo.loss_type=dr_grpo", "grpo.scale_rewards=none",
        "grpo.max_completion_length=123", "grpo.temperature=0.7", "grpo.use_vllm=true",
        "grpo.vllm_gpu_memory_utilization=0.45", "grpo.save_every=5", "generate.top_p=0.9", "run.seed=17",
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
    assert args.logging_steps == 1 and args.save_strategy == "steps" and args.save_total_limit == 2
    assert args.save_only_model is False and args.ignore_data_skip is False  # optimizer + RNG, exact data skip
    assert args.report_to in ("none", [], ["none"])
    assert args.use_cpu is True and args.bf16 is False
    assert args.remove_unused_columns is False


def test_defaults_we_depend_on_differ_from_trl(tmp_path):
    """Our defaults are explicit even where TRL 1.16 would choose otherwise (loss_type: dapo)."""
    args = grpo.grpo_args(load_config(None), output_dir=tmp_path, cuda=False)
    assert args.loss_type == "grpo" and args.scale_rewards == "group" and args.beta == 0.0
    assert args.max_completion_length == 4096 and args.temperature == 1.0
    assert args.save_strategy == "steps" and args.save_steps == 50  # TRL: 500


def test_save_every_zero_saves_nothing(tmp_path):
    args = grpo.grpo_args(load_config(None, ["grpo.save_every=0"]), output_dir=tmp_path, cuda=False)
    assert args.save_strategy == "no"


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
