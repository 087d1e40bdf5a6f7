"""es/train.py + es/replay.py on the tiny model: learning, bit-exact replay and resume, the CLI."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from conftest import wait_until
from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.errors import ConfigError, InputError, ReplayMismatchError
from prover_cli.es.ledger import decode_rewards, encode_rewards, read_ledger
from prover_cli.es.replay import replay_seeds
from prover_cli.es.population import pick_problems
from prover_cli.es.train import train_es
from prover_cli.es.update import member_noise, shape_fitness, update_terms
from prover_cli.es.noise.full import fp32
from prover_cli.tasks.problems import heldout_problems, train_problems as load_problems
from prover_cli.tasks.toy import ToyTask

pytestmark = pytest.mark.slow
runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared by every module of the session


def raw_config(run_dir, cache_dir, **es):
    return {
        "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
        "data": {"task": "toy"},
        # greedy decoding, as in the paper: rewards differ only because the weights do
        "generate": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "n": 1},
        "es": {"population": 4, "sigma": 0.01, "learning_rate": 0.01, "iterations": 4,
               "problems_per_iteration": 4, **es},
        "run": {"dir": str(run_dir), "seed": 1},
    }


def make_config(run_dir, cache_dir, **es):
    return config_from_dict(raw_config(run_dir, cache_dir, **es))


def tensor_hashes(model_dir: Path) -> dict[str, str]:
    hashes = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            for name in handle.keys():
                tensor = handle.get_tensor(name).contiguous()
                hashes[name] = hashlib.sha256(tensor.view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
    assert hashes, f"no tensors in {model_dir}"
    return hashes


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache_dir):
    run_dir = tmp_path_factory.mktemp("es") / "run"
    config = make_config(run_dir, cache_dir, snapshot_every=2)
    return config, train_es(config)


# -- the pure parts: seeds, problems, fitness, update coefficients ------------------------------

def test_antithetic_members_share_noise_with_opposite_signs_and_iterations_differ():
    plus, minus = member_noise(0, 3, 4, True), member_noise(0, 3, 5, True)
    assert plus[0] == minus[0] and (plus[1], minus[1]) == (1, -1)
    assert member_noise(0, 3, 6, True)[0] != plus[0] and member_noise(0, 4, 4, True)[0] != plus[0]
    assert member_noise(0, 3, 5, False) == (member_noise(0, 3, 5, False)[0], 1)
    assert member_noise(1, 3, 4, True)[0] != plus[0]  # the run seed matters


def test_fitness_shaping_zscore_ranks_with_ties_and_all_equal():
    z = shape_fitness([0.0, 0.5, 1.0, 0.5], "zscore")
    assert abs(sum(z)) < 1e-12 and abs(sum(v * v for v in z) / 4 - 1) < 1e-12
    # ranks 1, 2.5, 2.5, 0 (the tie shares its average rank), scaled to [-0.5, 0.5]
    assert shape_fitness([0.2, 0.9, 0.9, 0.1], "centered_rank") == pytest.approx([-1 / 6, 1 / 3, 1 / 3, -0.5])
    assert shape_fitness([0.3] * 4, "zscore") is None and shape_fitness([1.0] * 4, "centered_rank") is None


def test_update_terms_fold_each_antithetic_pair_into_one_coefficient():
    fitness = [1.0, -1.0, 0.5, 0.5]
    terms = update_terms(fitness, run_seed=0, iteration=1, antithetic=True, learning_rate=0.1)
    assert [seed for seed, _ in terms] == [member_noise(0, 1, 0, True)[0], member_noise(0, 1, 2, True)[0]]
    assert [c for _, c in terms] == [fp32(0.1 * 2.0 / 4), 0.0]  # alpha * (f+ - f-) / N
    plain = update_terms(fitness, run_seed=0, iteration=1, antithetic=False, learning_rate=0.1)
    assert [c for _, c in plain] == [fp32(0.1 * f / 4) for f in fitness]


def test_problems_come_from_the_file_or_are_generated_and_lean_needs_prepare_data(tmp_path, cache_dir):
    config = make_config(tmp_path / "run", cache_dir)
    problems = load_problems(config)
    assert problems and all(p["split"] == "train" for p in problems)
    picked = pick_problems(problems, 1, 7, 4)
    assert picked == pick_problems(problems, 1, 7, 4) != pick_problems(problems, 1, 8, 4)

    lean = config_from_dict({"data": {"task": "lean"}, "run": {"dir": str(tmp_path / "lean")}})
    with pytest.raises(InputError, match="prepare-data") as error:
        load_problems(lean)
    assert "problems.jsonl" in str(error.value)

    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt": "x", "split": "valid"}) + "\n")
    only_valid = config_from_dict({"data": {"task": "toy", "problems": str(path)}})
    with pytest.raises(InputError, match="no problems with split 'train' \\(data.train_split\\); splits present: valid"):
        load_problems(only_valid)


# -- training and replay ------------------------------------------------------------------------

def test_training_writes_ledger_metrics_and_a_final_model_that_moved(trained):
    config, result = trained
    run_dir = config.run_dir
    assert result["ok"] and result["iterations"] == 4 and result["resumed_from"] == 0
    header, records = read_ledger(run_dir / "ledger.json")
    assert [r["i"] for r in records] == [1, 2, 3, 4] and header["base_model"]["tiny_seed"] == 0
    assert [bool(r.get("snap")) for r in records] == [False, True, False, True]
    assert all((run_dir / "snapshots" / f"{r['snap']}.safetensors").exists() for r in records if "snap" in r)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2, 3, 4]  # no held-out evaluation: no base line either
    assert all(m["method"] == "es" and m["samples"] == 16 and "es/update_norm" in m for m in metrics)
    assert metrics[-1]["samples/total"] == 64
    assert (run_dir / "config.toml").exists()
    assert any(not r.get("skip") for r in records)
    assert result["fingerprint"] == records[-1]["fp"] != header["base_model"]["sha256"][:16]


def test_replay_rebuilds_final_tensor_for_tensor_and_checks_every_iteration(trained, tmp_path):
    config, _ = trained
    out = tmp_path / "replayed"
    result = replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=out)
    assert result["ok"] and result["iterations"] == 4
    assert tensor_hashes(out) == tensor_hashes(config.run_dir / "final")
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    assert result["started_from"] == "snapshot at iteration 4"

    _, records = read_ledger(config.run_dir / "ledger.json")
    partial = replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=tmp_path / "upto", upto=3)
    assert partial["fingerprint"] == records[2]["fp"] and partial["started_from"] == "snapshot at iteration 2"


def test_replay_without_snapshots_starts_from_the_base_and_gives_the_same_bits(trained, tmp_path):
    config, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(config.run_dir, copy, ignore=shutil.ignore_patterns("snapshots"))
    result = replay_seeds(config, ledger_path=copy / "ledger.json", out_dir=tmp_path / "out")
    assert result["started_from"] == "base model"
    assert tensor_hashes(tmp_path / "out") == tensor_hashes(config.run_dir / "final")


def test_a_tampered_reward_is_named_by_its_iteration(trained, tmp_path):
    config, _ = trained
    ledger = json.loads((config.run_dir / "ledger.json").read_text())
    record = ledger["iterations"][2]  # [fingerprint, rewards as numerators over 1000, ...]
    numerators = decode_rewards(record[1], 4)
    numerators[0] += 250  # +0.25
    record[1] = encode_rewards(numerators)
    tampered = tmp_path / "ledger.json"
    tampered.write_text(json.dumps(ledger))
    with pytest.raises(ReplayMismatchError, match="iteration 3") as error:
        replay_seeds(config, ledger_path=tampered, out_dir=tmp_path / "out")
    assert "diverges first at iteration 3" in str(error.value) and not (tmp_path / "out").exists()


def test_a_snapshot_that_disagrees_with_its_record_stops_replay(trained, tmp_path):
    config, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(config.run_dir, copy)
    ledger = json.loads((copy / "ledger.json").read_text())
    ledger["iterations"][3][0] = "0" * 16  # iteration 4's fingerprint; it names an intact snapshot
    (copy / "ledger.json").write_text(json.dumps(ledger))
    with pytest.raises(ReplayMismatchError, match="iteration 4: snapshot fingerprint"):
        replay_seeds(config, ledger_path=copy / "ledger.json", out_dir=tmp_path / "out")


def test_a_different_base_model_is_refused_before_replaying(trained, tmp_path):
    config, _ = trained
    ledger = json.loads((config.run_dir / "ledger.json").read_text())
    ledger["base_model"]["tiny_seed"] = 1  # another tiny model: other weights
    (tmp_path / "ledger.json").write_text(json.dumps(ledger))
    with pytest.raises(ReplayMismatchError, match="iteration 0: base model"):
        replay_seeds(config, ledger_path=tmp_path / "ledger.json", out_dir=tmp_path / "out")


def test_bf16_weights_train_and_replay_bit_exactly(tmp_path, cache_dir):
    raw = raw_config(tmp_path / "run", cache_dir, iterations=2)
    raw["model"]["dtype"] = "bfloat16"
    config = config_from_dict(raw)
    train_es(config)
    header, records = read_ledger(config.run_dir / "ledger.json")
    assert header["dtype"] == "bfloat16" and records[-1]["fp"] != header["base_model"]["sha256"][:16]
    replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=tmp_path / "out")
    assert tensor_hashes(tmp_path / "out") == tensor_hashes(config.run_dir / "final")


def test_all_equal_rewards_skip_the_update_and_are_recorded(tmp_path, cache_dir, monkeypatch):
    monkeypatch.setattr(ToyTask, "rewards", lambda self, problems, completions, config=None, reporter=None:
                        [0.5] * len(completions))
    config = make_config(tmp_path / "run", cache_dir, iterations=2)
    train_es(config)
    header, records = read_ledger(config.run_dir / "ledger.json")
    assert [r.get("skip") for r in records] == [1, 1] and records[0]["rewards"] == [0.5] * 4
    assert records[-1]["fp"] == header["base_model"]["sha256"][:16]  # the weights never moved
    metrics = [json.loads(line) for line in (config.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(m["es/skipped"], m["es/update_norm"]) for m in metrics] == [(True, 0.0), (True, 0.0)]


def test_es_raises_the_toy_reward_within_seconds(tmp_path, cache_dir):
    from prover_cli.policy.samplers import SamplingParams, load_sampler
    from prover_cli.tasks import get_task

    config = make_config(tmp_path / "run", cache_dir, population=8, iterations=10, problems_per_iteration=8)
    started = time.monotonic()
    train_es(config)
    elapsed_s = time.monotonic() - started
    task, problems = get_task("toy"), load_problems(config)[:32]
    prompts = [task.build_prompt(p, None, "plain") for p in problems]

    def greedy_reward(model_path):
        outputs = load_sampler(config.model, config.generate, model_path=model_path).generate(prompts, SamplingParams(1, 0.0, 1.0, 8, 0))
        return sum(task.rewards(problems, [o[0].text for o in outputs])) / len(problems)

    before, after = greedy_reward(None), greedy_reward(str(config.run_dir / "final"))
    print(f"toy reward {before:.3f} -> {after:.3f} in {elapsed_s:.1f} s")  # shown with -s
    assert after > before + 0.2


def test_an_existing_ledger_needs_resume_and_resume_needs_the_same_settings(trained, tmp_path, cache_dir):
    config, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(config.run_dir, copy)
    with pytest.raises(InputError, match="a ledger already exists"):
        train_es(make_config(copy, cache_dir, snapshot_every=2))
    with pytest.raises(ConfigError, match="es.sigma: ledger 0.01 != now 0.02"):
        train_es(make_config(copy, cache_dir, snapshot_every=2, sigma=0.02), resume=True)
    with pytest.raises(ConfigError, match="more than es.iterations = 3"):
        train_es(make_config(copy, cache_dir, snapshot_every=2, iterations=3), resume=True)
    # extending a finished run continues it from the ledger
    extended = train_es(make_config(copy, cache_dir, snapshot_every=2, iterations=5), resume=True)
    assert extended["resumed_from"] == 4 and extended["iterations"] == 5


# -- the null control and the member evaluation ----------------------------------------------------

def test_shuffled_rewards_update_along_a_seeded_permutation_of_the_true_rewards():
    from prover_cli.es.update import apply_rewards, shuffled

    rewards = [0.0, 0.25, 0.5, 0.75, 1.0, 0.125]
    permuted = [shuffled(rewards, 3, i) for i in range(1, 6)]
    assert all(sorted(p) == sorted(rewards) for p in permuted) and permuted[0] == shuffled(rewards, 3, 1)
    assert any(p != rewards for p in permuted) and len({tuple(p) for p in permuted}) > 1  # per iteration

    class Recorder:
        def update(self, terms):
            self.terms = terms
            return 1.0

    es = {"fitness_shaping": "zscore", "antithetic": True, "learning_rate": 0.1}
    plain, null, by_hand = Recorder(), Recorder(), Recorder()
    apply_rewards(plain, rewards, 3, 2, es)
    apply_rewards(null, rewards, 3, 2, {**es, "shuffle_rewards": True})
    apply_rewards(by_hand, shuffled(rewards, 3, 2), 3, 2, es)
    assert null.terms == by_hand.terms != plain.terms


def test_null_control_ledger_keeps_the_true_rewards_and_replays_bit_exactly(trained, tmp_path, cache_dir):
    plain_config, _ = trained
    config = make_config(tmp_path / "null", cache_dir, snapshot_every=2, shuffle_rewards=True)
    train_es(config)
    header, records = read_ledger(config.run_dir / "ledger.json")
    plain_header, plain_records = read_ledger(plain_config.run_dir / "ledger.json")
    assert header["es"]["shuffle_rewards"] is True and plain_header["es"]["shuffle_rewards"] is False
    # Iteration 1 starts from the same base with the same members: the same (true) rewards, another step.
    assert records[0]["rewards"] == plain_records[0]["rewards"] and len(set(records[0]["rewards"])) > 1
    assert records[0]["fp"] != plain_records[0]["fp"]
    out = tmp_path / "replayed"
    replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=out)
    assert tensor_hashes(out) == tensor_hashes(config.run_dir / "final")
    # Ledgers written before the key existed read as not shuffled: they still resume.
    from prover_cli.es.ledger import header_differences

    older = json.loads(json.dumps(plain_header))
    del older["es"]["shuffle_rewards"]
    assert header_differences(older, plain_header) == []
    assert header_differences(older, header) == ["es.shuffle_rewards: ledger False != now True"]


def test_members_are_scored_at_the_member_temperature_recorded_in_the_ledger(tmp_path, cache_dir):
    from prover_cli.es.population import member_completions
    from prover_cli.policy.samplers import Sample

    class Spy:
        tokenizer = None

        def generate(self, prompts, params):
            self.params = params
            return [[Sample("x", "stop", 1, 1)] * params.n for _ in prompts]

    class Weights:
        def perturb(self, seed, scale):
            pass

        def restore(self):
            pass

    task = ToyTask()
    task.build_prompt = lambda problem, tokenizer, family: "p"
    for temperature, expected in ((None, 0.0), (0.7, 0.7)):
        extra = {} if temperature is None else {"member_temperature": temperature}
        config = make_config(tmp_path / "run", cache_dir, **extra)
        spy = Spy()
        member_completions(spy, Weights(), task, [{"id": "a"}], config, 1, 0)
        assert spy.params.temperature == expected and spy.params.top_p == config.generate.top_p

    config = make_config(tmp_path / "sampled", cache_dir, member_temperature=0.7, iterations=1)
    train_es(config)
    header, _ = read_ledger(config.run_dir / "ledger.json")
    assert header["sampling"]["temperature"] == 0.7
    with pytest.raises(ConfigError, match="sampling.temperature: ledger 0.7 != now 0.0"):
        train_es(make_config(tmp_path / "sampled", cache_dir, iterations=2), resume=True)
    with pytest.raises(ConfigError, match=r"es.samples_per_problem = 2.*es.member_temperature = 0"):
        make_config(tmp_path / "x", cache_dir, samples_per_problem=2)
    make_config(tmp_path / "x", cache_dir, samples_per_problem=2, member_temperature=1.0)  # sampled: fine


def test_kill_9_during_training_then_resume_ends_bit_identical_to_an_uninterrupted_run(tmp_path, cache_dir):
    def write_config(name):
        raw = raw_config(tmp_path / name, cache_dir, iterations=20, snapshot_every=3)
        lines = []
        for section, values in raw.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
        path = tmp_path / f"{name}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    def train(config_path, *extra):
        return subprocess.run([sys.executable, "-m", "prover_cli", "train", "es", "--config", str(config_path), *extra],
                              capture_output=True, text=True, cwd=REPO)

    full = train(write_config("full"))
    assert full.returncode == 0, full.stderr

    killed_config = write_config("killed")
    process = subprocess.Popen([sys.executable, "-m", "prover_cli", "train", "es", "--config", str(killed_config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    ledger = tmp_path / "killed" / "ledger.json"
    wait_until(lambda: ledger.exists() and len(json.loads(ledger.read_text())["iterations"]) >= 2, process,
               "2 iterations in the ledger")
    assert process.poll() is None, "training finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    _, done = read_ledger(ledger)  # the ledger a kill -9 leaves is valid
    assert 2 <= len(done) < 20 and not (tmp_path / "killed" / "final").exists()

    resumed = train(killed_config, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert tensor_hashes(tmp_path / "killed" / "final") == tensor_hashes(tmp_path / "full" / "final")
    assert read_ledger(ledger)[1] == read_ledger(tmp_path / "full" / "ledger.json")[1]
    metrics = [json.loads(line) for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == list(range(1, 21))


# -- held-out evaluation of the center and tracking -------------------------------------------------

def test_heldout_eval_scores_the_center_and_leaves_training_unchanged(trained, tmp_path, cache_dir):
    """eval_every 3 over 4 iterations: eval/* on iterations 3 and 4 (the last); the iteration-4 numbers
    are those of final/ evaluated on its own; ledger and weights equal a run without evaluation;
    TensorBoard gets the metrics.jsonl values."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from prover_cli.training.heldout import EVAL_KEYS, evaluate_heldout
    from prover_cli.policy.samplers import load_sampler

    plain_config, _ = trained
    raw = raw_config(tmp_path / "run", cache_dir, snapshot_every=2)
    raw["run"].update({"eval_every": 3, "eval_problems": 6, "report_to": "tensorboard"})
    config = config_from_dict(raw)
    train_es(config)

    assert tensor_hashes(config.run_dir / "final") == tensor_hashes(plain_config.run_dir / "final")
    assert read_ledger(config.run_dir / "ledger.json")[1] == read_ledger(plain_config.run_dir / "ledger.json")[1]
    base, *metrics = [json.loads(line) for line in (config.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [sorted(k for k in m if k.startswith("eval/")) for m in [base, *metrics]] == \
        [sorted(EVAL_KEYS), [], [], sorted(EVAL_KEYS), sorted(EVAL_KEYS)]
    assert base["iteration"] == 0 and base["method"] == "es" and "reward/mean" not in base
    of_base = evaluate_heldout(load_sampler(config.model, config.generate), config, heldout_problems(config))  # the base model, anew
    for key in ("eval/verified_rate", "eval/greedy_verified_rate", "eval/by_problem", "eval/samples"):
        assert base[key] == of_base[key], key
    problems = heldout_problems(config)
    assert len(problems) == 6 and {p["split"] for p in problems} == {"valid"}
    assert problems == heldout_problems(config)  # a fixed subset
    final = evaluate_heldout(load_sampler(config.model, config.generate, model_path=str(config.run_dir / "final")), config, problems)
    for key in ("eval/reward_mean", "eval/verified_rate", "eval/samples", "eval/problems"):
        assert metrics[-1][key] == final[key], key

    events = EventAccumulator(str(config.run_dir / "tensorboard")).Reload()
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars("reward/mean")] == \
        [(m["iteration"], m["reward/mean"]) for m in metrics]
    assert [e.step for e in events.Scalars("eval/reward_mean")] == [0, 3, 4]
    assert [e.step for e in events.Scalars("eval/greedy_verified_rate")] == [0, 3, 4]
    assert [e.value for e in events.Scalars("es/skipped")] == [float(m["es/skipped"]) for m in metrics]


# -- the CLI --------------------------------------------------------------------------------------

def test_cli_train_es_and_replay_seeds(tmp_path, cache_dir):
    overrides = ["--set", "model.name=tiny", "--set", f"model.cache_dir={json.dumps(str(cache_dir))}",
                 "--set", "model.device=cpu", "--set", "data.task=toy", "--set", "generate.temperature=0.0", "--set", "generate.n=1",
                 "--set", "generate.max_tokens=6", "--set", "es.population=2", "--set", "es.iterations=2",
                 "--set", "es.problems_per_iteration=2", "--set", f"run.dir={json.dumps(str(tmp_path / 'run'))}"]
    trained = runner.invoke(app, ["train", "es", *overrides, "--json"])
    assert trained.exit_code == 0, trained.stderr
    result = json.loads(trained.stdout)
    assert result["iterations"] == 2 and result["ledger"].endswith("ledger.json")

    ledger = tmp_path / "run" / "ledger.json"
    replayed = runner.invoke(app, ["replay-seeds", str(ledger), "--out", str(tmp_path / "out"), *overrides])
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stdout == "" and "replay-seeds" in replayed.stderr and "fingerprint" in replayed.stderr
    assert tensor_hashes(tmp_path / "out") == tensor_hashes(tmp_path / "run" / "final")

    data = json.loads(ledger.read_text())
    data["iterations"][1][0] = "0" * 16  # iteration 2's fingerprint
    ledger.write_text(json.dumps(data))
    failed = runner.invoke(app, ["replay-seeds", str(ledger), "--out", str(tmp_path / "out2"), *overrides])
    assert failed.exit_code == 1 and failed.stdout == ""
    assert "Error:" in failed.stderr and "iteration 2" in failed.stderr

    again = runner.invoke(app, ["train", "es", *overrides])
    assert again.exit_code == 1 and "--resume" in again.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device to replay on GPU and compare")
def test_replay_on_cuda_gives_the_cpu_bits(trained, tmp_path):
    config, _ = trained
    for device in ("cpu", "cuda"):
        replay_seeds(config, ledger_path=config.run_dir / "ledger.json", out_dir=tmp_path / device, device=device)
    final = tensor_hashes(config.run_dir / "final")
    assert tensor_hashes(tmp_path / "cuda") == tensor_hashes(tmp_path / "cpu") == final
