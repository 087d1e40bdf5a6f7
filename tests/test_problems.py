"""prover_cli/tasks/problems.py: the one place that says which problems a run trains on, holds out and evaluates."""

import json

import pytest

from prover_cli.tasks import problems as P
from prover_cli.config import load_config
from prover_cli.tasks.datasets import prepare_data
from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import load_jsonl_strict


def write(path, splits):
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q{i}", "split": s}) + "\n"
                            for i, s in enumerate(splits)))
    return path


def test_a_missing_split_is_one_error_whoever_asks(tmp_path):
    path = write(tmp_path / "problems.jsonl", ["valid", "test"])
    config = load_config(None, ["data.task=toy", f"data.problems={path}", "generate.split=dev",
                                "eval.split=nope", f"run.dir={tmp_path / 'run'}"])
    asks = {
        "data.train_split": lambda: P.train_problems(config),
        "generate.split": lambda: P.read_problems(path, split="dev", task_name="toy", split_key="generate.split"),
        "eval.split": lambda: P.eval_problems(config, malformed=[]),
    }
    for key, ask in asks.items():
        with pytest.raises(InputError, match=rf"problems.jsonl: no problems with split '\w+' \({key}\); "
                                             r"splits present: test, valid$"):
            ask()
    held_out = load_config(None, ["data.task=toy", f"data.problems={path}", "data.valid_split=dev"])
    with pytest.raises(InputError, match=r"no problems with split 'dev' \(data.valid_split, for the held-out "
                                         r"evaluation every run.eval_every = 0\); splits present: test, valid$"):
        P.heldout_problems(held_out)


def test_generated_problems_are_what_prepare_data_writes_and_splits_never_overlap(tmp_path):
    config = load_config(None, ["data.task=countdown", "task.countdown.problems=40", "run.seed=4",
                                f"run.dir={tmp_path}"])
    generated, source, was_generated = P.run_problems(config)
    assert was_generated and "run.seed = 4" in source
    prepare_data(config)
    assert load_jsonl_strict(config.problems_path) == generated
    assert P.run_problems(config) == (generated, str(config.problems_path), False)  # the file, once written
    train, heldout = P.train_problems(config), P.heldout_problems(config)
    assert train and heldout and not {p["id"] for p in train} & {p["id"] for p in heldout}


def test_a_named_file_that_does_not_exist_is_never_replaced_by_generated_problems(tmp_path):
    config = load_config(None, ["data.task=countdown", f"data.problems={tmp_path / 'none.jsonl'}"])
    with pytest.raises(InputError, match="none.jsonl: problems file not found"):
        P.train_problems(config)


def test_all_malformed_lines_of_the_split_say_so_rather_than_that_the_split_is_missing(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"id": "a", "split": "test"}) + "\n")  # toy needs `prompt`
    malformed = []
    assert P.read_problems(path, split="test", malformed=malformed, task_name="toy") == []
    assert malformed == [{"line": 1, "reason": "problem 'a': lacks `prompt`, needed by data.task = 'toy'"}]


def test_each_task_says_what_makes_two_of_its_rows_one_problem():
    """The content keys each task declares, byte for byte as they were in one function before (the
    held-out set's fingerprint, `eval/heldout_sha256`, is made of them); the first task (registry
    order) that recognises a row decides."""
    lean = {"id": "a", "formal_statement": "theorem a  (x : ℕ) :\n x = x := by", "header": "import Mathlib\n"}
    assert P.content_key(lean) == "lean|import Mathlib theorem _ (x : ℕ) : x = x := by"
    assert P.content_key({"id": "c", "numbers": [3, 1, 2], "target": 6}) == 'countdown|[["1", "2", "3"], "6"]'
    assert P.content_key({"id": "t", "prompt": " Continue  with 1 "}) == "toy|Continue with 1"
    assert P.content_key({"id": "z", "question": "?"}) == "id|z"
    assert P.content_key({**lean, "numbers": [1], "target": 1, "prompt": "p"}) == P.content_key(lean)  # lean first
    assert P.content_key({"numbers": [1], "target": 1, "prompt": "p"}).startswith("countdown|")


def test_a_registered_task_brings_its_own_content_key(monkeypatch):
    from prover_cli import tasks

    class Riddles:
        name = "riddles-content-key"
        problem_fields = {"riddle": (str, True)}
        reward_range = None

        def content_key(self, problem):
            return "riddles|" + problem["riddle"].lower() if isinstance(problem.get("riddle"), str) else None

        def build_prompt(self, problem, tokenizer, family):
            return problem["riddle"]

        def rewards(self, problems, completions, config, reporter=None):
            return [0.0 for _ in problems]

    monkeypatch.setitem(tasks._REGISTRY, Riddles.name, Riddles)
    assert P.content_key({"id": "r", "riddle": "What Walks"}) == "riddles|what walks"
    assert tasks.row_task({"id": "r", "riddle": "x"}) == Riddles.name
    assert tasks.row_task({"id": "r", "numbers": [1], "target": 1}) == "countdown"
