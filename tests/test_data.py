"""prepare-data: real miniF2F, Lean Workbook layouts, reasons for every dropped row, dedupe, splits."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.data import detect_preset, prepare_data, read_source, seeded_split
from prover_cli.errors import ConfigError, InputError
from prover_cli.jsonl import load_jsonl_strict

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MINIF2F = SHARED / "data" / "minif2f" / "minif2f.jsonl"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
needs_shared = pytest.mark.skipif(not MINIF2F.exists(), reason="../shared/data is not present")
runner = CliRunner()


def make_config(tmp_path, **data):
    return config_from_dict({"data": data, "run": {"dir": str(tmp_path / "run")}})


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


# -- miniF2F ----------------------------------------------------------------------------------

@needs_shared
def test_minif2f_gives_488_problems_244_per_split_with_headers_intact(tmp_path):
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(MINIF2F), out_path=out)
    assert result["preset"] == "minif2f"
    assert (result["kept"], result["dropped"]) == (488, 0)
    assert result["splits"] == {"test": 244, "valid": 244}

    source = {row["name"]: row for row in load_jsonl_strict(MINIF2F)}
    problems = load_jsonl_strict(out)
    assert [p["id"] for p in problems] == list(source)  # source order kept
    for p in problems:
        row = source[p["id"]]
        assert p["header"] == row["header"]
        assert p["formal_statement"] == row["formal_statement"]
        assert p["split"] == row["split"]
        assert p["informal_prefix"] == row["informal_prefix"]
        assert p["informal_statement"] and "/--" not in p["informal_statement"] and "-/" not in p["informal_statement"]
        assert p["source"] == str(MINIF2F)


# -- Lean Workbook ----------------------------------------------------------------------------

def workbook_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = load_jsonl_strict(FIXTURES / "lean_workbook_rows.jsonl")
    path = tmp_path / "wkbk.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_lean_workbook_parquet_layout(tmp_path):
    config = make_config(tmp_path)
    out = tmp_path / "problems.jsonl"
    result = prepare_data(config, source=str(workbook_parquet(tmp_path)), out_path=out)
    assert result["preset"] == "lean-workbook"
    assert result["rows"] == 9
    assert result["dropped_by_reason"] == {
        "duplicate id": 1,                                   # second tactic row of lean_workbook_101
        "duplicate statement": 1,                            # 90002 restates 10087 under another name
        "missing formal_statement": 1,
        "formal_statement does not end with `:= by`": 1,
    }
    assert result["dropped_first_rows"]["duplicate id"] == ["3"]
    problems = {p["id"]: p for p in load_jsonl_strict(out)}
    assert list(problems) == ["lean_workbook_10087", "lean_workbook_101", "lean_workbook_10166",
                              "lean_workbook_plus_90001", "lean_workbook_10135"]
    for p in problems.values():
        assert p["formal_statement"].endswith(":= by\n") and "sorry" not in p["formal_statement"]
        assert p["header"] == config.verify.header
        assert p["split"] in {"train", "valid"}
        assert p["split"] == seeded_split(p["id"], config.run.seed, config.data.valid_fraction)
    assert problems["lean_workbook_plus_90001"]["status"] == "disproved"
    assert problems["lean_workbook_101"]["informal_statement"].startswith("solution $2^9+1")


def test_lean_workbook_status_filter_reports_what_it_filtered(tmp_path):
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path, status="proved"), source=str(workbook_parquet(tmp_path)),
                          out_path=out)
    assert result["dropped_by_reason"]["status filter (data.status = proved)"] == 1
    assert {p["status"] for p in load_jsonl_strict(out)} == {"proved"}
    unproved = prepare_data(make_config(tmp_path, status="unproved"), source=str(workbook_parquet(tmp_path)),
                            out_path=out)
    assert unproved["kept"] == 1 and [p["id"] for p in load_jsonl_strict(out)] == ["lean_workbook_plus_90001"]


def test_lean_workbook_json_layout_ids_from_theorem_names_and_status_from_proofs(tmp_path):
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(FIXTURES / "lean_workbook.json"), out_path=out)
    assert result["preset"] == "lean-workbook" and result["kept"] == 4
    problems = {p["id"]: p for p in load_jsonl_strict(out)}
    assert set(problems) == {"lean_workbook_1003", "lean_workbook_10026", "lean_workbook_plus_10144",
                             "lean_workbook_plus_10049"}
    assert problems["lean_workbook_1003"]["status"] == "proved"
    assert problems["lean_workbook_10026"]["status"] == "unproved"
    assert problems["lean_workbook_plus_10144"]["subset"] == "lean_workbook_plus"
    assert all("proof" not in p for p in problems.values())
    proved = prepare_data(make_config(tmp_path, status="proved"), source=str(FIXTURES / "lean_workbook.json"),
                          out_path=out)
    assert proved["kept"] == 2


def test_local_dataset_directory_goes_through_datasets(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    folder = tmp_path / "wkbk"
    folder.mkdir()
    shutil.copy(workbook_parquet(tmp_path), folder / "train.parquet")
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(folder), out_path=out)
    assert result["preset"] == "lean-workbook" and result["kept"] == 5
    assert result["dropped_first_rows"]["duplicate id"] == ["train:3"]  # row numbers name the hub split


# -- reasons, dedupe, limit, errors -----------------------------------------------------------

def statement(name, body="(x : ℕ) : x + 0 = x"):
    return f"theorem {name} {body} := by\n"


def test_bad_rows_are_reported_by_reason_and_line(tmp_path):
    source = write_jsonl(tmp_path / "mine.jsonl", [
        {"id": "a", "formal_statement": statement("a")},
        "{not json",
        "[1, 2]",
        {"formal_statement": statement("b")},                       # no id
        {"id": "c", "formal_statement": "theorem c : True := trivial"},
        {"id": "d", "formal_statement": ""},
        {"id": "e f", "formal_statement": statement("e")},
        {"id": "g", "formal_statement": statement("g", "(y : ℤ) : y * 1 = y"), "proof": "simp"},
    ])
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(source), out_path=out)
    assert result["preset"] == "problems"
    assert result["kept"] == 2 and result["dropped"] == 6
    assert result["dropped_first_rows"] == {
        "not valid JSON": ["2"], "not a JSON object": ["3"], "missing id": ["4"],
        "formal_statement does not end with `:= by`": ["5"], "missing formal_statement": ["6"],
        "id contains whitespace": ["7"],
    }
    reasons_table = result["tables"][1]
    assert {row[0] for row in reasons_table["rows"]} == set(result["dropped_by_reason"])
    kept = load_jsonl_strict(out)
    assert [p["id"] for p in kept] == ["a", "g"]
    assert "proof" not in kept[1]  # solutions never travel into problems


def test_nothing_kept_is_an_error_that_lists_the_reasons(tmp_path):
    source = write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "formal_statement": ""}])
    with pytest.raises(InputError, match="no problem kept.*missing formal_statement: 1"):
        prepare_data(make_config(tmp_path), source=str(source), out_path=tmp_path / "p.jsonl")


def test_dedupe_on_whitespace_and_name_normalized_statement(tmp_path):
    rows = [
        {"id": "a", "formal_statement": statement("a")},
        {"id": "b", "formal_statement": "theorem b  (x : ℕ) :\n    x + 0 = x  := by\n"},  # same up to spaces and name
        {"id": "c", "formal_statement": statement("c", "(x : ℕ) : 0 + x = x")},       # different statement
        {"id": "a", "formal_statement": statement("a", "(x : ℕ) : x * 1 = x")},       # same id, new statement
    ]
    source = write_jsonl(tmp_path / "dup.jsonl", rows)
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(source), out_path=out)
    assert [p["id"] for p in load_jsonl_strict(out)] == ["a", "c"]
    assert result["dropped_by_reason"] == {"duplicate statement": 1, "duplicate id": 1}
    no_dedupe = prepare_data(make_config(tmp_path, dedupe=False), source=str(source), out_path=out)
    assert [p["id"] for p in load_jsonl_strict(out)] == ["a", "b", "c"]
    assert no_dedupe["dropped_by_reason"] == {"duplicate id": 1}  # ids stay unique regardless


def test_limit_keeps_the_first_problems_and_counts_the_rest(tmp_path):
    source = write_jsonl(tmp_path / "many.jsonl",
                         [{"id": f"p{i}", "formal_statement": statement(f"p{i}", f"(x : ℕ) : x + {i} = {i} + x")}
                          for i in range(10)])
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(source), out_path=out, limit=3)
    assert [p["id"] for p in load_jsonl_strict(out)] == ["p0", "p1", "p2"]
    assert result["dropped_by_reason"] == {"over the limit": 7}
    from_config = prepare_data(make_config(tmp_path, limit=4), source=str(source), out_path=out)
    assert from_config["kept"] == 4


def test_seeded_split_is_deterministic_and_stable_under_subsets(tmp_path):
    rows = [{"id": f"p{i}", "formal_statement": statement(f"p{i}", f"(x : ℕ) : x + {i} = {i} + x")}
            for i in range(400)]
    source = write_jsonl(tmp_path / "many.jsonl", rows)
    first, second, other_seed = tmp_path / "1.jsonl", tmp_path / "2.jsonl", tmp_path / "3.jsonl"
    prepare_data(make_config(tmp_path), source=str(source), out_path=first)
    prepare_data(make_config(tmp_path), source=str(source), out_path=second)
    assert first.read_bytes() == second.read_bytes()
    splits = {p["id"]: p["split"] for p in load_jsonl_strict(first)}
    assert 0.05 < sum(s == "valid" for s in splits.values()) / len(splits) < 0.15  # valid_fraction = 0.1

    reseeded = config_from_dict({"run": {"dir": str(tmp_path), "seed": 1}})
    prepare_data(reseeded, source=str(source), out_path=other_seed)
    assert {p["id"]: p["split"] for p in load_jsonl_strict(other_seed)} != splits

    reversed_source = write_jsonl(tmp_path / "reversed.jsonl", rows[::-1][:50])
    prepare_data(make_config(tmp_path), source=str(reversed_source), out_path=other_seed)
    assert all(splits[p["id"]] == p["split"] for p in load_jsonl_strict(other_seed))


def test_missing_file_unknown_layout_and_bad_preset_are_errors(tmp_path):
    with pytest.raises(InputError, match="nowhere/missing.jsonl: file not found"):
        prepare_data(make_config(tmp_path), source="nowhere/missing.jsonl", out_path=tmp_path / "p.jsonl")
    odd = write_jsonl(tmp_path / "odd.jsonl", [{"question": "?", "answer": 1}])
    with pytest.raises(InputError, match=r"cannot tell the layout.*\['answer', 'question'\]"):
        prepare_data(make_config(tmp_path), source=str(odd), out_path=tmp_path / "p.jsonl")
    with pytest.raises(ConfigError, match="--preset 'nope'"):
        prepare_data(make_config(tmp_path), source=str(odd), preset="nope")
    with pytest.raises(ConfigError, match="no source"):
        prepare_data(make_config(tmp_path))


def test_shipped_examples_work_offline(tmp_path):
    config = make_config(tmp_path)
    result = prepare_data(config, source="examples")
    problems = load_jsonl_strict(config.problems_path)
    assert result["kept"] == len(problems) >= 8 and result["dropped"] == 0
    assert {"train", "valid", "test"} <= {p["split"] for p in problems}
    for p in problems:
        assert p["formal_statement"].startswith(f"theorem {p['id']} ") and p["formal_statement"].endswith(":= by\n")
        assert p["header"].startswith("import Mathlib") and p["informal_statement"]
    rows, _ = read_source("examples")
    assert detect_preset(rows, "examples") == "problems"


def test_countdown_preset_generates_from_run_seed(tmp_path):
    from prover_cli.tasks.countdown import generate_problems

    config = config_from_dict({"data": {"task": "countdown", "countdown_problems": 30},
                               "run": {"dir": str(tmp_path), "seed": 5}})
    result = prepare_data(config)
    assert result["preset"] == "countdown" and result["kept"] == 30
    assert load_jsonl_strict(config.problems_path) == generate_problems(30, 3, 20, seed=5)
    limited = prepare_data(config, limit=7)
    assert limited["kept"] == 7 and load_jsonl_strict(config.problems_path) == generate_problems(30, 3, 20, seed=5)[:7]


# -- through the CLI --------------------------------------------------------------------------

def test_cli_prepare_data_json_and_error(tmp_path):
    out = tmp_path / "problems.jsonl"
    result = runner.invoke(app, ["prepare-data", str(FIXTURES / "lean_workbook.json"), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["kept"] == 4 and payload["preset"] == "lean-workbook" and "tables" not in payload
    assert len(load_jsonl_strict(out)) == 4

    missing = runner.invoke(app, ["prepare-data", str(tmp_path / "absent.parquet"), "--out", str(out)])
    assert missing.exit_code == 1 and missing.stdout == ""
    assert "Error:" in missing.stderr and "absent.parquet: file not found" in missing.stderr
