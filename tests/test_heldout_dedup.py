"""One test set (issue #31, items 5 and 6): held-out rows deduplicated by content and never a training
problem, the record of what was dropped, a subset that does not move with `run.seed`, and the
training-set size (`data.train_size`) that changes what a run trains on and nothing else."""

import json

import pytest

from prover_cli.tasks import problems as P
from prover_cli.config import load_config
from prover_cli.errors import InputError
from prover_cli.training.heldout import EVAL_KEYS, evaluate_heldout
from test_heldout import FakeSampler, FakeTask


def write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def config_for(path, *overrides):
    return load_config(None, ["data.task=countdown", f"data.problems={path}", f"run.dir={path.parent / 'run'}",
                              *overrides])


def countdown(pid, numbers, target, split):
    return {"id": pid, "numbers": numbers, "target": target, "split": split, "prompt": pid}  # prompt: for FakeTask


def test_a_problem_held_out_twice_counts_once_and_the_record_says_so(tmp_path):
    path = write(tmp_path / "problems.jsonl", [
        countdown("t0", [1, 2, 3], 6, "train"),
        countdown("v0", [4, 5, 6], 15, "valid"),
        countdown("v1", [6, 4, 5], 15, "valid"),  # the same puzzle, its numbers listed in another order
        countdown("v2", [4, 5, 6], 14, "valid"),  # the same numbers, another target: another problem
        countdown("v3", [4, 5, 6], 15, "valid"),  # the first again, under a third id
    ])
    held_out = P.heldout_problems(config_for(path))
    assert [p["id"] for p in held_out] == ["v0", "v2"]  # the first row of each problem, file order kept
    assert (held_out.duplicates_dropped, held_out.train_overlap_dropped) == (2, 0)

    record = evaluate_heldout(FakeSampler(), config_for(path), held_out, task=FakeTask())
    assert set(record) == set(EVAL_KEYS)
    assert record["eval/problems"] == 2 and record["eval/duplicates_dropped"] == 2
    assert record["eval/train_overlap_dropped"] == 0 and record["eval/problems_sha256"] == held_out.sha256
    # A plain list is what it is: nothing was dropped choosing it, and its fingerprint is its content's.
    plain = evaluate_heldout(FakeSampler(), config_for(path), list(held_out), task=FakeTask())
    assert plain["eval/duplicates_dropped"] == 0 and plain["eval/problems_sha256"] == held_out.sha256


def test_a_held_out_row_that_is_a_training_problem_is_not_held_out(tmp_path):
    path = write(tmp_path / "problems.jsonl", [
        countdown("t0", [2, 3, 7], 13, "train"),
        countdown("v0", [7, 2, 3], 13, "valid"),  # the training puzzle again, under a held-out id
        countdown("v1", [2, 3, 7], 42, "valid"),
    ])
    held_out = P.heldout_problems(config_for(path))
    assert [p["id"] for p in held_out] == ["v1"] and held_out.train_overlap_dropped == 1
    only_trained = write(tmp_path / "only.jsonl", [countdown("t0", [2, 3, 7], 13, "train"),
                                                   countdown("v0", [3, 7, 2], 13, "valid")])
    with pytest.raises(InputError, match=r"only.jsonl: every 'valid' problem is also a 'train' problem by content"):
        P.heldout_problems(config_for(only_trained))


def test_lean_statements_are_the_same_problem_up_to_whitespace_and_the_theorem_name():
    header = "import Mathlib\n"
    a = {"id": "a", "header": header, "formal_statement": "theorem a (x : ℕ) : x + 0 = x := by\n"}
    renamed = {"id": "b", "header": header, "formal_statement": "theorem   b (x : ℕ) :\n  x + 0 = x := by\n"}
    other_header = {"id": "c", "header": header + "open Real\n", "formal_statement": a["formal_statement"]}
    other_claim = {"id": "d", "header": header, "formal_statement": "theorem a (x : ℕ) : 0 + x = x := by\n"}
    assert P.content_key(a) == P.content_key(renamed)
    assert len({P.content_key(p) for p in (a, other_header, other_claim)}) == 3  # the header counts


def test_the_demo_holds_out_70_distinct_problems_not_103_rows(tmp_path):
    """The demo's problems are generated from run.seed (a pure function): seed 0 has 103 `valid` rows,
    of 70 distinct puzzles; countdown splits by content, so none is a training puzzle."""
    config = load_config("configs/demo.toml", ["data.problems=", f"run.dir={tmp_path / 'none'}"])
    rows = [p for p in P.run_problems(config)[0] if p["split"] == "valid"]
    held_out = P.heldout_problems(config)
    assert len(rows) == 103 and len(held_out) == 70
    assert (held_out.duplicates_dropped, held_out.train_overlap_dropped) == (33, 0)
    assert len({P.content_key(p) for p in held_out}) == 70


def test_the_held_out_subset_is_one_for_every_run_seed_and_moves_only_with_its_own_seed(tmp_path):
    path = write(tmp_path / "problems.jsonl",
                 [countdown(f"p{i}", [1 + i % 9, 2, 3], 10 + i, "valid" if i % 2 else "train") for i in range(80)])
    subset = P.heldout_problems(config_for(path, "run.eval_problems=8"))
    assert len(subset) == 8
    for seed in (1, 2, 99):
        assert P.heldout_problems(config_for(path, "run.eval_problems=8", f"run.seed={seed}")) == subset
    other = P.heldout_problems(config_for(path, "run.eval_problems=8", "run.eval_problems_seed=3"))
    assert len(other) == 8 and other != subset and other.sha256 != subset.sha256
    # The shipped GPU configs draw their 64 from one fixed seed of their own, the same in both.
    es, grpo = load_config("configs/kimina-es.toml"), load_config("configs/kimina-grpo.toml")
    assert es.run.eval_problems == grpo.run.eval_problems == 64
    assert es.run.eval_problems_seed == grpo.run.eval_problems_seed == 0


def test_training_set_sizes_are_nested_and_leave_the_test_set_alone(tmp_path):
    path = write(tmp_path / "problems.jsonl",
                 [countdown(f"p{i}", [1 + i % 9, 4, 5], 20 + i, "valid" if i % 4 == 0 else "train") for i in range(60)])
    every = P.train_problems(config_for(path))
    assert len(every) == 45 and P.train_problems(config_for(path, "data.train_size=45")) == every
    sizes = {n: P.train_problems(config_for(path, f"data.train_size={n}")) for n in (4, 16)}
    assert [len(sizes[n]) for n in (4, 16)] == [4, 16]
    assert all(p in sizes[16] for p in sizes[4])  # a seed's 4 are among its 16
    assert [every.index(p) for p in sizes[16]] == sorted(every.index(p) for p in sizes[16])  # file order
    assert P.train_problems(config_for(path, "data.train_size=16", "run.seed=1")) != sizes[16]  # a seed draws its own
    for n in (4, 16):
        assert P.heldout_problems(config_for(path, f"data.train_size={n}")) == P.heldout_problems(config_for(path))
    with pytest.raises(InputError, match=r"data.train_size = 46 but the training split has 45 problems"):
        P.train_problems(config_for(path, "data.train_size=46"))
