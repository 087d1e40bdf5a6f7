"""prover_cli/tasks/problems.py: the one place that says which problems a run trains on, holds out and evaluates."""

import json

import pytest

from prover_cli.tasks import problems as P
from prover_cli.config import load_config
from prover_cli.tasks.datasets import prepare_data
from prover_cli.errors import InputError
from prover_cli.jsonl import load_jsonl_strict


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
    config = load_config(None, ["data.task=countdown", "data.countdown_problems=40", "run.seed=4",
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
