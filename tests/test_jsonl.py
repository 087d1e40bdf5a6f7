"""JSONL helpers: bad lines are reported by number, torn tails are dropped on resume."""

import json

import pytest

from prover_cli.errors import InputError
from prover_cli.jsonl import BadLine, ResumableWriter, load_jsonl_strict, read_jsonl, write_jsonl_atomic


def test_read_reports_bad_lines_and_goes_on(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a"}\nnot json\n\n[1, 2]\n{"id": "b"}\n', encoding="utf-8")
    rows = list(read_jsonl(path))
    assert [n for n, _ in rows] == [1, 2, 4, 5]
    assert isinstance(rows[1][1], BadLine) and "not valid JSON" in rows[1][1].reason
    assert isinstance(rows[2][1], BadLine) and "expected a JSON object, got list" in rows[2][1].reason
    assert rows[3][1] == {"id": "b"}
    with pytest.raises(InputError, match=r"in.jsonl:2: not valid JSON"):
        load_jsonl_strict(path)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(InputError, match="nope.jsonl: file not found"):
        list(read_jsonl(tmp_path / "nope.jsonl"))


def test_resumable_writer_drops_torn_tail_and_skips_done(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "1", "v": 1}\n{"id": "2", "v"', encoding="utf-8")  # killed mid-line
    with ResumableWriter(path) as writer:
        assert writer.done_ids == {"1"}
        writer.write({"id": "2", "v": 2})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["1", "2"]


def test_atomic_write_replaces_whole_file(tmp_path):
    path = tmp_path / "a.jsonl"
    write_jsonl_atomic(path, [{"id": 1}, {"id": 2}])
    write_jsonl_atomic(path, [{"id": 3}])
    assert load_jsonl_strict(path) == [{"id": 3}]
    assert not (tmp_path / "a.jsonl.tmp").exists()
