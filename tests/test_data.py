"""prepare-data: real miniF2F, Lean Workbook layouts, reasons for every dropped row, dedupe, splits."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.tasks.datasets import detect_preset, normalise_lean, prepare_data, read_source, seeded_split
from prover_cli.errors import ConfigError, InputError
from prover_cli.fsio.jsonl import load_jsonl_strict
from prover_cli.policy.prompts import DEEPSEEK_HEADER
from prover_cli.verify.text.statement import candidate_from_record, check_statement

FIXTURES = Path(__file__).resolve().parent / "fixtures"
runner = CliRunner()


VERIFY_REJECTS = "verify would reject it"


def reasons(result):
    """dropped_by_reason with verify's own messages folded into one key (their wording is verify's)."""
    folded = {}
    for reason, count in result["dropped_by_reason"].items():
        key = VERIFY_REJECTS if reason.startswith(VERIFY_REJECTS) else reason
        folded[key] = folded.get(key, 0) + count
    return folded


def make_config(tmp_path, **data):
    return config_from_dict({"data": data, "run": {"dir": str(tmp_path / "run")}})


def assert_verifiable(problems):
    """The contract: verify's own statement check accepts every kept row, and a proof assembles."""
    assert problems
    for p in problems:
        assert check_statement(p["formal_statement"], p["header"]) == p["formal_statement"].split()[1]
        candidate = candidate_from_record({"id": p["id"], "formal_statement": p["formal_statement"],
                                           "header": p["header"], "proof": "  trivial"}, DEEPSEEK_HEADER)
        assert candidate.body.startswith(p["formal_statement"])
        assert "sorry" not in p["header"] and "sorry" not in p["formal_statement"]
        assert not p["header"].rstrip().endswith("-/")  # a header never ends in a doc comment


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


# -- miniF2F ----------------------------------------------------------------------------------

def test_minif2f_gives_488_problems_244_per_split_with_headers_intact(tmp_path, shared):
    MINIF2F = shared("data", "minif2f", "minif2f.jsonl")
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(MINIF2F), out_path=out)
    assert result["preset"] == "deepseek"
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
    assert_verifiable(problems)


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
    assert reasons(result) == {
        "duplicate id": 1,                                   # second tactic row of lean_workbook_101
        "duplicate statement": 1,                            # 90002 restates 10087 under another name
        "missing formal_statement": 1,
        VERIFY_REJECTS: 1,                                   # does not end in `:=` / `:= by`
    }
    assert result["dropped_first_rows"]["duplicate id"] == ["3"]
    problems = {p["id"]: p for p in load_jsonl_strict(out)}
    assert list(problems) == ["lean_workbook_10087", "lean_workbook_101", "lean_workbook_10166",
                              "lean_workbook_plus_90001", "lean_workbook_10135"]
    for p in problems.values():
        assert p["formal_statement"].endswith(":= by\n") and "sorry" not in p["formal_statement"]
        assert p["header"] == DEEPSEEK_HEADER  # the family's own evaluation header, not verify.header
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


def test_local_dataset_directory_reads_its_files(tmp_path):
    folder = tmp_path / "wkbk"
    folder.mkdir()
    shutil.copy(workbook_parquet(tmp_path), folder / "train.parquet")
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path), source=str(folder), out_path=out)
    assert result["preset"] == "lean-workbook" and result["kept"] == 5
    assert result["dropped_first_rows"]["duplicate id"] == ["train.parquet:3"]  # row numbers name the file


# -- the layouts researchers bring (fixtures: tests/fixtures/README.md) ------------------------

def prepare(tmp_path, source, **data):
    out = tmp_path / "problems.jsonl"
    result = prepare_data(make_config(tmp_path, **data), source=str(source), out_path=out)
    return result, {p["id"]: p for p in load_jsonl_strict(out)}


def test_proofnet_term_mode_statements_are_kept_and_verifiable(tmp_path):
    result, problems = prepare(tmp_path, FIXTURES / "deepseek_proofnet.jsonl")
    assert result["preset"] == "deepseek" and (result["kept"], result["dropped"]) == (3, 1)
    assert result["dropped_by_reason"] == {"the statement is a `def`, not a `theorem` (verify checks theorems only)": 1}
    # ProofNet repeats exercise numbers across books: another problem under a seen name gets a new id
    assert result["renamed"] == 1 and problems["exercise_1_13a-2"]["formal_statement"].startswith(
        "theorem exercise_1_13a {G : Type*} [Group G]")
    p = problems["exercise_1_13a"]
    assert p["formal_statement"].endswith("f a = f b :=\n")  # term mode stays term mode
    assert p["header"].startswith("import Mathlib\n\nopen Complex") and p["split"] == "valid"
    assert p["informal_prefix"].startswith("/-- Suppose") and "holomorphic" in p["informal_statement"]
    assert_verifiable(list(problems.values()))


def test_goedel_v2_minif2f_header_inside_the_statement_is_split_out(tmp_path):
    rows = load_jsonl_strict(FIXTURES / "goedel_v2_minif2f.jsonl")
    assert "header" not in rows[0] and rows[0]["formal_statement"].startswith("import Mathlib")
    result, problems = prepare(tmp_path, FIXTURES / "goedel_v2_minif2f.jsonl")
    assert result["preset"] == "goedel-v2" and result["kept"] == 2
    p = problems["mathd_algebra_478"]
    assert p["header"] == DEEPSEEK_HEADER
    assert p["formal_statement"].startswith("theorem mathd_algebra_478 (b h v : ℝ)")
    assert p["informal_prefix"] == rows[0]["informal_prefix"]  # the doc comment is not repeated
    # the same code, rebuilt: header + prefix + statement is the row's own statement text
    assert p["header"] + p["informal_prefix"] + p["formal_statement"] == rows[0]["formal_statement"]
    assert_verifiable(list(problems.values()))


def test_mobench_preamble_moves_into_the_trusted_header(tmp_path):
    result, problems = prepare(tmp_path, FIXTURES / "mobench.jsonl")
    assert result["preset"] == "goedel-v2" and result["kept"] == 4
    assert result["dropped_by_reason"] == {"`sorry` in the trusted header": 1}  # def answer : ℕ := sorry
    imo = problems["Imo2006P3"]
    assert imo["header"].endswith("noncomputable abbrev solution : ℝ := 9 * Real.sqrt 2 / 32\n\n")
    assert imo["formal_statement"].startswith("theorem imo2006_p3 :") and imo["formal_statement"].endswith(":= by\n")
    assert "def rationalSolutions" in problems["Imo2008P2b"]["header"]
    pair = problems["SyntheticPair"]
    assert "variable (n : ℕ)" in pair["header"] and "structure Pair where" in pair["header"]
    assert pair["formal_statement"].endswith(":=\n")  # `:=\n  sorry` -> term mode
    assert pair["informal_prefix"].endswith("/-- The sum of a pair is commutative. -/\n")  # doc kept, in the prefix
    assert "```" in problems["Imo2008P2a"]["informal_prefix"]  # fences in the problem text stay where they are
    assert_verifiable(list(problems.values()))


def test_goedel_v1_workbook_with_empty_header(tmp_path):
    result, problems = prepare(tmp_path, FIXTURES / "goedel_v1_workbook.jsonl")
    assert result["preset"] == "deepseek" and result["kept"] == 3
    assert "maxHeartbeats 400000" in problems["lean_workbook_1003"]["header"]  # the row's own header
    assert problems["lean_workbook_plus_10049"]["header"] == DEEPSEEK_HEADER   # none: the family's default
    assert problems["lean_workbook_10026"]["formal_statement"].endswith(":= by\n")
    assert_verifiable(list(problems.values()))


def test_putnambench_directory_answers_reported_or_filled(tmp_path):
    result, problems = prepare(tmp_path, FIXTURES / "putnambench")
    assert result["preset"] == "putnambench" and result["files"] == 2
    assert list(problems) == ["putnam_2008_a1"]
    (reason,) = result["dropped_by_reason"]
    assert reason.startswith("needs an answer") and "data.fill_answers" in reason
    assert result["dropped_first_rows"][reason] == ["putnam_1980_b1.lean:1"]
    p = problems["putnam_2008_a1"]
    assert p["split"] == "test" and p["formal_statement"].endswith("f x y = g x - g y :=\n")
    assert p["informal_prefix"].startswith("/--\nLet $f") and p["header"] == "import Mathlib\n\n"

    filled, problems = prepare(tmp_path, FIXTURES / "putnambench", fill_answers=True)
    assert filled["kept"] == 2 and filled["dropped"] == 0
    answer = problems["putnam_1980_b1"]
    assert "abbrev putnam_1980_b1_solution : Set ℝ := {c : ℝ | c ≥ 1 / 2}\n" in answer["header"]
    assert answer["answer_from_file"] is True and "answer_from_file" not in problems["putnam_2008_a1"]
    assert_verifiable(list(problems.values()))


def test_a_directory_reads_every_file_and_names_mixed_layouts(tmp_path):
    folder = tmp_path / "datasets"
    folder.mkdir()
    shutil.copy(FIXTURES / "deepseek_proofnet.jsonl", folder / "proofnet.jsonl")
    shutil.copy(FIXTURES / "goedel_v1_workbook.jsonl", folder / "workbook.jsonl")
    few_shot = json.loads((FIXTURES / "deepseek_proofnet.jsonl").read_text(encoding="utf-8").splitlines()[0])
    write_jsonl(folder / "proofnet_few_shot.jsonl", [{**few_shot, "formal_proof": "  sorry"}])
    result, problems = prepare(tmp_path, folder)
    assert result["files"] == 3 and result["kept"] == 6  # every file read, not one of them
    assert result["dropped_first_rows"]["duplicate id"] == ["proofnet_few_shot.jsonl:1"]  # the same problem again
    assert all("formal_proof" not in p for p in problems.values())

    shutil.copy(FIXTURES / "lean_workbook.json", folder / "lean_workbook.json")
    with pytest.raises(InputError, match=r"different layouts \(deepseek: proofnet.jsonl, proofnet_few_shot.jsonl, "
                                         r"workbook.jsonl; lean-workbook: lean_workbook.json\)"):
        prepare(tmp_path, folder)
    forced = prepare_data(make_config(tmp_path), source=str(folder), preset="lean-workbook",
                          out_path=tmp_path / "forced.jsonl")
    assert forced["preset"] == "lean-workbook" and forced["files"] == 4
    shutil.copy(FIXTURES / "putnambench" / "putnam_2008_a1.lean", folder / "putnam_2008_a1.lean")
    with pytest.raises(InputError, match=r"\.lean files \(putnam_2008_a1.lean\) are read only with the putnambench"):
        prepare_data(make_config(tmp_path), source=str(folder), preset="deepseek", out_path=tmp_path / "x.jsonl")


def test_hub_dataset_reads_every_data_file(tmp_path, monkeypatch):
    import huggingface_hub

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    shutil.copy(FIXTURES / "lean_workbook.json", snapshot / "lean_workbook.json")
    shutil.copy(workbook_parquet(tmp_path), snapshot / "wkbk_1009.parquet")
    calls = []

    def fake_snapshot_download(**kwargs):
        calls.append(kwargs)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    result, problems = prepare(tmp_path, "internlm/Lean-Workbook")
    assert calls[0]["repo_id"] == "internlm/Lean-Workbook" and calls[0]["repo_type"] == "dataset"
    assert result["files"] == 2 and result["source"] == "internlm/Lean-Workbook"
    assert {"lean_workbook_1003", "lean_workbook_10087"} <= set(problems)  # rows of both files


@pytest.mark.parametrize("statement,header,want", [
    ("theorem t : 1 = 1 := by sorry", "", ("theorem t : 1 = 1 := by\n", DEEPSEEK_HEADER)),
    ("theorem t : 1 = 1 := by\n  sorry\n", "", ("theorem t : 1 = 1 := by\n", DEEPSEEK_HEADER)),
    ("theorem t : 1 = 1 :=\nsorry", "import Mathlib\n", ("theorem t : 1 = 1 :=\n", "import Mathlib\n")),
    ("import Mathlib\nopen Nat\n\ntheorem t : 1 = 1 := by", "", ("theorem t : 1 = 1 := by\n", "import Mathlib\nopen Nat\n\n")),
    ("lemma t (x : ℕ) : x = x := by", "import Mathlib", ("lemma t (x : ℕ) : x = x := by\n", "import Mathlib\n")),
])
def test_normalise_lean(statement, header, want):
    got = normalise_lean(statement, header, "", DEEPSEEK_HEADER)
    assert (got["formal_statement"], got["header"]) == want


@pytest.mark.parametrize("statement,header,reason", [
    ("theorem t : 1 = 1 := by simp", "", VERIFY_REJECTS),           # a proof inside the statement
    ("example : 1 = 1 := by", "", "the statement is a `example`, not a `theorem`"),
    ("-- nothing here\n", "", "no `theorem` or `lemma`"),
    ("theorem t : (sorry : Prop) := by", "", "`sorry` in the trusted formal_statement"),
    ("open Nat\nimport Mathlib\ntheorem t : 1 = 1 := by", "", "`import` after other code"),
    ("import Mathlib\ntheorem t : 1 = 1 := by", "import Aesop\nset_option maxHeartbeats 0\n",
     "imports in both the statement and the header"),
])
def test_normalise_lean_reports_what_verify_could_not_accept(statement, header, reason):
    got = normalise_lean(statement, header, "", DEEPSEEK_HEADER)
    assert got.reason.startswith(reason)


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
    first_rows = {(VERIFY_REJECTS if k.startswith(VERIFY_REJECTS) else k): v
                  for k, v in result["dropped_first_rows"].items()}
    assert first_rows == {
        "not valid JSON": ["2"], "not a JSON object": ["3"], "missing id": ["4"],
        VERIFY_REJECTS: ["5"], "missing formal_statement": ["6"],
        "id contains whitespace": ["7"],
    }
    reasons_table = result["tables"][1]  # every reason is in the table
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
    assert_verifiable(problems)


def test_countdown_preset_generates_from_run_seed(tmp_path):
    from prover_cli.tasks.countdown import generate_problems

    config = config_from_dict({"data": {"task": "countdown"}, "task": {"countdown": {"problems": 30}},
                               "run": {"dir": str(tmp_path), "seed": 5}})
    result = prepare_data(config)
    assert result["preset"] == "countdown" and result["kept"] == 30
    assert load_jsonl_strict(config.problems_path) == generate_problems(30, 3, 20, seed=5)
    limited = prepare_data(config, limit=7)
    assert limited["kept"] == 7 and load_jsonl_strict(config.problems_path) == generate_problems(30, 3, 20, seed=5)[:7]


def test_a_preset_naming_a_task_generates_its_problems_with_that_tasks_table(tmp_path):
    from prover_cli.tasks.countdown import generate_problems
    from prover_cli.tasks.toy import generate_problems as toy_problems

    # data.task is lean: the preset picks the generator, [task.countdown] still shapes its problems
    config = config_from_dict({"task": {"countdown": {"problems": 12, "max_number": 9}},
                               "run": {"dir": str(tmp_path), "seed": 3}})
    assert prepare_data(config, preset="countdown")["kept"] == 12
    assert load_jsonl_strict(config.problems_path) == generate_problems(12, 3, 9, seed=3)
    result = prepare_data(config, preset="toy", limit=5)
    assert (result["preset"], result["kept"]) == ("toy", 5)
    assert load_jsonl_strict(config.problems_path) == toy_problems(5, seed=3)
    with pytest.raises(ConfigError, match=r"--preset 'lean': must be one of .*a task that generates its problems"):
        prepare_data(config, preset="lean")


def test_our_own_rows_are_checked_by_the_task_they_are_shaped_for(tmp_path):
    source = write_jsonl(tmp_path / "mine.jsonl", [
        {"id": "c1", "numbers": [1, 2, 3], "target": 6, "split": "train"},
        {"id": "c2", "numbers": "1 2 3", "target": 6},                    # countdown's shape, a wrong type
        {"id": "c3", "numbers": [1, 2], "target": 3, "prompt_style": "long"},  # countdown's own check
        {"id": "t1", "prompt": "Continue with digits only: 1 2 3"},
        {"id": "t2", "prompt": 7},
        {"id": "x1", "question": "no task has this shape"},
    ])
    result = prepare_data(make_config(tmp_path), source=str(source), out_path=tmp_path / "out.jsonl")
    assert result["preset"] == "problems" and result["kept"] == 2
    assert result["dropped_first_rows"] == {
        "bad countdown row: `numbers` is str, expected a non-empty list of integers (data.task = 'countdown')": ["2"],
        "bad countdown row: `prompt_style` 'long' is not one of tinyzero, short": ["3"],
        "bad toy row: `prompt` is int, expected a string (data.task = 'toy')": ["5"],
        "missing formal_statement": ["6"]}
    assert [p["id"] for p in load_jsonl_strict(tmp_path / "out.jsonl")] == ["c1", "t1"]


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


def test_cli_prepare_data_a_putnambench_directory(tmp_path):
    out = tmp_path / "putnam.jsonl"
    result = runner.invoke(app, ["prepare-data", str(FIXTURES / "putnambench"), "--out", str(out), "--json",
                                 "--set", "data.fill_answers=true"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert (payload["preset"], payload["files"], payload["kept"]) == ("putnambench", 2, 2)
    human = runner.invoke(app, ["prepare-data", str(FIXTURES / "putnambench"), "--out", str(out)])
    assert human.exit_code == 0 and "needs an answer" in human.stderr and "putnam_1980_b1.lean:1" in human.stderr
