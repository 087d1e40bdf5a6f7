"""prover_cli/tasks: a task is one file plus one registry line, and one from outside the package
needs only its file and `data.task_module`: config choices, problem fields, generated problems and
the ledger's reward range all ask the registry."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli import tasks
from prover_cli.cli import app
from prover_cli.config import load_config
from prover_cli.errors import ConfigError, InputError

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.toml"

# A task written as a user would, in a directory outside the package: problems generated from
# run.seed, a graded reward in [0, 1] (the fraction of lowercase letters), one option of its own.
OUTSIDE_TASK = '''
import random

from prover_cli.tasks import Option, options_for, register_task


@register_task("letters")
class LettersTask:
    name = "letters"
    problem_fields = {"word": (str, True)}
    reward_range = (0.0, 1.0)
    options = {"length": Option(3, "Letters per word.", min=1, max=8)}

    def problems_from_seed(self, config, count):
        rng, length = random.Random(f"letters:{config.run.seed}"), options_for(config, self.name)["length"]
        return [{"id": f"letters_{i:03d}", "word": "".join(rng.choice("abcdef") for _ in range(length)),
                 "split": "valid" if i % 5 == 0 else "train"} for i in range(count or 20)]

    def build_prompt(self, problem, tokenizer, family):
        return f"Spell: {problem['word']}"

    def rewards(self, problems, completions, config, reporter=None):
        SCORED.append([p["id"] for p in problems])
        return [score(c) for c in completions]


SCORED = []  # the problem ids of each rewards call, for the test to read


def score(completion):
    characters = [c for c in completion if not c.isspace()]
    return sum(c.islower() for c in characters) / len(characters) if characters else 0.0
'''


@pytest.fixture
def registry():
    """The registry as before afterwards: names a test registered are dropped (built-in tasks it
    imported stay registered, as their modules stay imported)."""
    before = set(tasks._REGISTRY)
    yield tasks
    for name in set(tasks._REGISTRY) - before - set(tasks.BUILTIN):
        del tasks._REGISTRY[name]


@pytest.fixture
def outside_task(tmp_path, monkeypatch, registry):
    """The directory holding `outside_letters.py`, on sys.path; sys.modules as before afterwards."""
    home = tmp_path / "elsewhere"
    home.mkdir()
    (home / "outside_letters.py").write_text(OUTSIDE_TASK, encoding="utf-8")
    monkeypatch.syspath_prepend(str(home))
    yield home
    sys.modules.pop("outside_letters", None)


# -- the registry alone -------------------------------------------------------------------------

def test_loading_a_config_imports_only_the_task_it_names():
    code = ("import sys; from prover_cli.config import load_config; c = load_config(None, ['data.task=countdown']); "
            "print(sorted(m for m in sys.modules if m.startswith('prover_cli.tasks')), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["['prover_cli.tasks',", "'prover_cli.tasks.countdown']", "False"]  # to read its options


def test_a_task_from_outside_the_package_declares_its_own_options(outside_task):
    from prover_cli.tasks.problems import generated_problems

    config = load_config(None, ["data.task=letters", "data.task_module=outside_letters", "task.letters.length=5"])
    assert config.task == {"letters": {"length": 5}}
    assert {len(p["word"]) for p in generated_problems(config, count=4) or []} == {5}
    assert "[task.letters]\nlength = 5\n" in config.to_toml()
    with pytest.raises(ConfigError, match=r"^--set task.letters.length=9: must be <= 8$"):
        load_config(None, ["data.task=letters", "data.task_module=outside_letters", "task.letters.length=9"])


@pytest.mark.parametrize("attributes, why", [
    ({"options": {"n": 3}}, "options must map each name to an Option"),
    ({"options": {"n": tasks.Option([1], "a list")}}, "options must map each name to an Option"),
    ({"renamed": {"data.old": "missing"}}, "renamed must map old config keys to its own options"),
])
def test_a_task_with_malformed_options_is_refused_when_it_registers(registry, attributes, why):
    factory = type("Odd", (), {"problem_fields": {"x": (str, True)}, "reward_range": None, **attributes})
    with pytest.raises(TypeError, match=why):
        tasks.register_task("odd-options")(factory)


def test_an_unknown_task_names_the_key_and_the_known_tasks():
    with pytest.raises(ConfigError, match=r"--set data.task=chess: must be one of 'lean', 'countdown', 'toy'"):
        load_config(None, ["data.task=chess"])


def test_a_task_module_that_cannot_be_imported_or_registers_another_name_is_refused(outside_task):
    with pytest.raises(ConfigError, match=r"--set data.task_module=no_such_module_here: cannot import it"):
        load_config(None, ["data.task=letters", "data.task_module=no_such_module_here"])
    with pytest.raises(ConfigError, match="outside_letters registers none of that name"):
        load_config(None, ["data.task=chess", "data.task_module=outside_letters"])


@pytest.mark.parametrize("attributes, why", [
    ({"reward_range": (0.0, 1.0)}, "problem_fields must map"),
    ({"problem_fields": {"x": (float, True)}, "reward_range": None}, "problem_fields must map"),
    ({"problem_fields": {"x": (str, "yes")}, "reward_range": None}, "problem_fields must map"),
    ({"problem_fields": {}}, "reward_range must be"),
    ({"problem_fields": {}, "reward_range": (1.0, 0.0)}, "reward_range must be"),
])
def test_a_malformed_task_fails_when_it_registers(registry, attributes, why):
    with pytest.raises(TypeError, match=why):
        tasks.register_task("bad")(type("Bad", (), attributes))
    assert "bad" not in tasks.task_names()


def test_a_module_cannot_take_the_name_of_a_builtin_or_another_modules_task(outside_task):
    load_config(None, ["data.task=letters", "data.task_module=outside_letters"])
    impostor = type("Impostor", (), {"problem_fields": {}, "reward_range": None, "__module__": "somewhere_else"})
    for name in ("countdown", "letters"):
        with pytest.raises(TypeError, match=f"task '{name}' is already"):
            tasks.register_task(name)(impostor)
    assert tasks.get_task("countdown").__class__.__module__ == "prover_cli.tasks.countdown"


def test_builtin_tasks_answer_fields_generation_and_reward_range_through_the_registry():
    config = load_config(None, ["data.task=countdown", "task.countdown.problems=8"])
    assert tasks.problem_defect({"numbers": [1, 2], "target": 3}, "countdown") is None
    assert tasks.problem_defect({"numbers": [1, True], "target": 3}, "countdown") == \
        "`numbers` is list, expected a non-empty list of integers (data.task = 'countdown')"
    assert "prompt_style" in tasks.problem_defect({"numbers": [1], "target": 1, "prompt_style": "long"}, "countdown")
    assert tasks.problem_defect({"prompt": "x"}, "lean") == "lacks `formal_statement`, needed by data.task = 'lean'"
    assert len(tasks.problem_generator("countdown")(config, 0)) == 8
    assert tasks.problem_generator("lean") is None and not tasks.generates_problems("lean")
    assert [tasks.reward_range(name) for name in ("lean", "countdown", "toy")] == [(0.0, 1.0)] * 3
    assert tasks.reward_range("never-registered") is None  # a ledger of a task this process lacks: finite only


def test_the_ledger_holds_rewards_to_the_task_range(tmp_path, registry):
    from prover_cli.es.ledger import make_header, make_record, read_ledger, write_ledger

    @tasks.register_task("wide")
    class Wide:
        name, problem_fields, reward_range = "wide", {}, (0.0, 4.0)

    config = load_config(None, ["model.name=tiny", "data.task=wide", "es.population=2"])
    header = make_header(config.es, model=config.model, generate=config.generate, run_seed=config.run.seed,
                         task=config.data.task, base_sha256="ab" * 32, dtype="float32", problems_sha256="cd" * 32)
    write_ledger(tmp_path / "wide.json", header, [make_record(1, ["3.5", "0"], "ab" * 8, False)])
    assert read_ledger(tmp_path / "wide.json")[1][0]["rewards"] == [3.5, 0.0]
    write_ledger(tmp_path / "wider.json", header, [make_record(1, ["4.5", "0"], "ab" * 8, False)])
    with pytest.raises(InputError, match=r"reward 4.5 outside \[0, 4\], the reward range of task 'wide'"):
        read_ledger(tmp_path / "wider.json")


# -- a task from outside the package, through the CLI --------------------------------------------

def outside_overrides(run_dir: Path, cache_dir: Path) -> list[str]:
    settings = ["model.name=tiny", f"model.cache_dir={json.dumps(str(cache_dir))}", "model.device=cpu",
                "data.task=letters", "data.task_module=outside_letters", "generate.temperature=0.0", "generate.n=1",
                "generate.max_tokens=6", "es.population=2", "es.iterations=2", "es.problems_per_iteration=2",
                "run.eval_every=2", f"run.dir={json.dumps(str(run_dir))}"]
    return [part for setting in settings for part in ("--set", setting)]


@pytest.fixture
def one_thread():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_task_from_outside_the_package_runs_prepare_data_generate_and_train_es(outside_task, tmp_path,
                                                                                 tmp_path_factory, one_thread):
    run_dir = tmp_path / "run"
    overrides = outside_overrides(run_dir, tmp_path_factory.getbasetemp() / "tiny-model-cache")
    prepared = runner.invoke(app, ["prepare-data", "--config", str(TINY), *overrides, "--set", "data.preset=auto",
                                   "--json"])
    assert prepared.exit_code == 0, prepared.stderr
    problems = [json.loads(line) for line in (run_dir / "problems.jsonl").read_text().splitlines()]
    assert len(problems) == 20 and problems[0]["id"] == "letters_000" and json.loads(prepared.stdout)["kept"] == 20

    samples_path = tmp_path / "samples.jsonl"
    generated = runner.invoke(app, ["generate", "--config", str(TINY), *overrides, "--out", str(samples_path), "--json"])
    assert generated.exit_code == 0, generated.stderr
    samples = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert sorted(s["problem_id"] for s in samples) == sorted(p["id"] for p in problems)  # generate.n = 1
    assert all(isinstance(s["completion"], str) for s in samples)

    trained = runner.invoke(app, ["train", "es", "--config", str(TINY), *overrides, "--json"])
    assert trained.exit_code == 0, trained.stderr
    ledger = json.loads((run_dir / "ledger.json").read_text())
    assert ledger["task"] == "letters" and len(ledger["iterations"]) == 2
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained_rows = [m for m in metrics if m.get("iteration", 0) >= 1 and "reward/mean" in m]
    assert [m["iteration"] for m in trained_rows] == [1, 2]
    assert all(0.0 <= m["reward/mean"] <= 1.0 for m in trained_rows)
    heldout = [m for m in metrics if "eval/reward_mean" in m]
    assert [m["iteration"] for m in heldout] == [0, 2] and all(m["eval/problems"] == 4 for m in heldout)

    import outside_letters  # every reward was the outside module's: 2 iterations x 2 members x 2 problems,
    # and the held-out evaluations of the base and iteration 2, sampled and greedy, on the 4 `valid` problems
    scored = sum(outside_letters.SCORED, [])
    train_ids = {p["id"] for p in problems if p["split"] == "train"}
    assert len([i for i in scored if i in train_ids]) == 8


def test_a_problem_without_the_outside_task_fields_is_refused_by_generate(outside_task, tmp_path):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p1", "prompt": "no word here", "split": "train"}) + "\n")
    result = runner.invoke(app, ["generate", "--set", "data.task=letters", "--set", "data.task_module=outside_letters",
                                 "--set", "model.name=tiny", "--problems", str(problems),
                                 "--out", str(tmp_path / "s.jsonl")])
    assert result.exit_code == 1, result.output
    assert "problems.jsonl:1: problem 'p1': lacks `word`, needed by data.task = 'letters'" in result.stderr


def test_prover_as_a_command_finds_the_outside_task_on_pythonpath(outside_task, tmp_path):
    prover = Path(sys.executable).with_name("prover")  # the console script; else the same entry through -m
    command = [str(prover)] if prover.exists() else [sys.executable, "-m", "prover_cli"]
    env = {**os.environ, "PYTHONPATH": str(outside_task)}
    result = subprocess.run([*command, "prepare-data", "--set", "data.task=letters",
                             "--set", "data.task_module=outside_letters",
                             "--out", str(tmp_path / "p.jsonl"), "--limit", "3", "--json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "p.jsonl").read_text().splitlines()] == \
        ["letters_000", "letters_001", "letters_002"]


def test_a_task_option_is_recorded_where_the_config_is_compared(tmp_path):
    """The run's config.toml holds `[task.<name>]`; a GRPO resume refuses another value of an
    option, and `prover report` keeps runs that differ in one in arms of their own."""
    import tomllib

    from prover_cli.comparison.arms import arm_identity, group_arms
    from prover_cli.grpo.resume import check_resume_config

    run, other = load_config(TINY), load_config(TINY, ["task.countdown.problems=65"])
    stored = tmp_path / "config.toml"
    stored.write_text(run.to_toml(), encoding="utf-8")
    check_resume_config(load_config(TINY), stored)  # the same options: resumes
    with pytest.raises(ConfigError, match=r"cannot resume, the config differs from the run's: task.countdown: "
                                          r"run \{'problems': 64, .*\} != config \{'problems': 65, "):
        check_resume_config(other, stored)
    runs = [{"method": "es", "null": False, "name": f"r{i}",
             "identity": arm_identity(tomllib.loads(config.to_toml()), "es")} for i, config in enumerate((run, other))]
    assert [arm["label"] for arm in group_arms(runs)] == ["es (task.countdown.problems=64)",
                                                         "es (task.countdown.problems=65)"]
