"""JSONL helpers: bad lines are reported by number, torn tails are dropped on resume."""

import json
import os

import pytest

from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import BadLine, ResumableWriter, load_jsonl_strict, read_jsonl, write_jsonl_atomic


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


def test_a_bad_utf8_byte_costs_one_line_and_names_it(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "caf\xe9"}\n{"id": "b"}\n')
    rows = list(read_jsonl(path))
    assert [n for n, _ in rows] == [1, 2, 3]
    assert rows[0][1] == {"id": "a"} and rows[2][1] == {"id": "b"}
    assert isinstance(rows[1][1], BadLine) and rows[1][1].reason == "not valid UTF-8 (byte 0xe9 at column 12)"


def test_a_bom_is_not_a_lost_record(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "first"}\r\n{"id": "second"}\r\n')
    assert list(read_jsonl(path)) == [(1, {"id": "first"}), (2, {"id": "second"})]


def test_an_overlong_line_is_reported_without_loading_it(tmp_path):
    import tracemalloc

    path = tmp_path / "big.jsonl"
    big_bytes = 20 * 1024 * 1024
    with path.open("wb") as handle:
        handle.write(b'{"id": "a"}\n{"id": "huge", "x": "')
        for _ in range(big_bytes // (1024 * 1024)):
            handle.write(b"y" * (1024 * 1024))
        handle.write(b'"}\n{"id": "b"}\n')
    tracemalloc.start()
    rows = list(read_jsonl(path, max_line_bytes=64 * 1024))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [n for n, _ in rows] == [1, 2, 3] and rows[2][1] == {"id": "b"}
    assert isinstance(rows[1][1], BadLine) and "longer than io.max_line_bytes = 65,536" in rows[1][1].reason
    assert peak < 4 * 1024 * 1024  # the 20 MiB line was never held whole


def test_line_of_exactly_the_limit_is_read(tmp_path):
    path = tmp_path / "edge.jsonl"
    record = b'{"id": "' + b"z" * 1000 + b'"}'
    path.write_bytes(record + b"\n" + record)  # the last line has no newline
    rows = list(read_jsonl(path, max_line_bytes=len(record)))
    assert [type(obj) for _, obj in rows] == [dict, dict]
    rows = list(read_jsonl(path, max_line_bytes=len(record) - 1))
    assert [type(obj) for _, obj in rows] == [BadLine, BadLine]


def test_configure_sets_the_limit_of_every_reader(tmp_path):
    from prover_cli.fsio import jsonl

    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "' + "x" * 2000 + '"}\n', encoding="utf-8")
    try:
        jsonl.configure(max_line_bytes=1024)
        assert isinstance(next(read_jsonl(path))[1], BadLine)
    finally:
        jsonl.configure(max_line_bytes=jsonl.DEFAULT_MAX_LINE_BYTES)
    assert next(read_jsonl(path))[1]["id"].startswith("x")


def test_deeply_nested_json_is_a_bad_line_not_a_crash(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "\n" + '{"id": "ok"}\n', encoding="utf-8")
    rows = list(read_jsonl(path))
    assert isinstance(rows[0][1], BadLine) and rows[1][1] == {"id": "ok"}


def test_torn_tail_longer_than_a_chunk_is_dropped(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id": "1"}\n{"id": "2", "blob": "' + b"q" * (3 * 1024 * 1024))  # killed mid-line
    with ResumableWriter(path) as writer:
        assert writer.done_ids == {"1"}
        writer.write({"id": "2"})
    assert [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()] == ["1", "2"]


def test_failed_write_names_the_file_and_keeps_what_was_written(tmp_path, monkeypatch):
    import errno

    from prover_cli.errors import MachineError

    path = tmp_path / "out.jsonl"
    with ResumableWriter(path) as writer:
        writer.write({"id": "1"})

        def full(*args):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(writer._handle, "write", full)
        with pytest.raises(MachineError) as err:
            writer.write({"id": "2"})
        monkeypatch.undo()
    assert str(err.value) == f"{path}: cannot write: No space left on device [ENOSPC]"
    assert err.value.hint and "rerun" in err.value.hint
    assert load_jsonl_strict(path) == [{"id": "1"}]


def _problem_line(pid: str) -> bytes:
    from test_verify_statement import STATEMENT

    return (json.dumps({"id": pid, "formal_statement": STATEMENT, "proof": "  linarith", "split": "test"},
                       ensure_ascii=False) + "\n").encode()


def test_verify_reports_an_undecodable_line_and_checks_the_rest(tmp_path):
    from typer.testing import CliRunner

    from conftest import fake_repl_command, kernel_stand_in_sets
    from prover_cli.cli import app

    proofs = tmp_path / "samples.jsonl"
    proofs.write_bytes(b"\xef\xbb\xbf" + _problem_line("a") + b'{"id": "b\xff"}\n' + _problem_line("c"))
    out = tmp_path / "verdicts.jsonl"
    result = CliRunner().invoke(app, ["verify", str(proofs), "--out", str(out), "--set",
                                      f"verify.repl_command={json.dumps(fake_repl_command())}",
                                      "--set", "verify.memory_limit_gb=0", *kernel_stand_in_sets(), "--json"])
    assert result.exit_code == 1  # malformed lines fail the run, after the rest is done
    summary = json.loads(result.stdout)
    assert summary["malformed"] == [{"line": 2, "reason": "not valid UTF-8 (byte 0xff at column 10)"}]
    assert sorted(r["id"] for r in load_jsonl_strict(out)) == ["a", "c"]  # the BOM cost no record
    assert f"{proofs}:2: not valid UTF-8" in result.stderr


@pytest.mark.slow
def test_generate_reports_an_undecodable_problem_line_and_samples_the_rest(tmp_path):
    from typer.testing import CliRunner

    from prover_cli.cli import app

    problems = tmp_path / "problems.jsonl"
    problems.write_bytes(_problem_line("p1") + b"\x80garbage\n" + _problem_line("p2"))
    out = tmp_path / "samples.jsonl"
    result = CliRunner().invoke(app, ["generate", "--problems", str(problems), "--out", str(out),
                                      "--set", "model.name=tiny", "--set", f"model.cache_dir={tmp_path / 'cache'}",
                                      "--set", "model.device=cpu", "--set", "generate.n=1",
                                      "--set", "generate.max_tokens=2", "--json"])
    assert result.exit_code == 1, result.stderr
    summary = json.loads(result.stdout)
    assert summary["malformed"] == [{"line": 2, "reason": "not valid UTF-8 (byte 0x80 at column 1)"}]
    assert sorted(r["problem_id"] for r in load_jsonl_strict(out)) == ["p1", "p2"]


def test_read_utf8_names_the_line_of_a_bad_byte(tmp_path):
    from prover_cli.fsio.jsonl import read_utf8

    path = tmp_path / "rows.json"
    path.write_bytes(b'\xef\xbb\xbf[\n{"id": "a"},\n{"id": "\xc3("}\n]\n')
    with pytest.raises(InputError) as err:
        read_utf8(path)
    assert str(err.value) == f"{path}:3: not valid UTF-8 (byte 0xc3 at column 9)"
    path.write_bytes(b'\xef\xbb\xbf[{"id": "a"}]')
    assert read_utf8(path) == '[{"id": "a"}]'


def write_slowly(fifo, data: bytes, step: int):
    """A started thread that writes `data` into `fifo`, `step` bytes at a time, unbuffered."""
    import threading

    def write():
        with open(fifo, "wb", buffering=0) as handle:
            for start in range(0, len(data), step):
                handle.write(data[start:start + step])

    writer = threading.Thread(target=write)
    writer.start()
    return writer


def test_a_jsonl_read_from_a_pipe_gives_what_the_same_file_gives(tmp_path):
    """Pipes and FIFOs are read through `_StreamLines` (reads a signal can always stop): the same
    records, bad lines and line numbers as the regular file, with the writer sending a few bytes
    at a time and a line over io.max_line_bytes among them."""

    from prover_cli.fsio.jsonl import read_jsonl

    data = (b'{"a": 1}\n\n' + b'{"long": "' + b"x" * 300 + b'"}\n' + b"not json\n" + b'{"b": 2}').replace(b"\n\n", b"\n \n")
    regular = tmp_path / "p.jsonl"
    regular.write_bytes(data)
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)

    writer = write_slowly(fifo, data, 7)
    from_pipe = list(read_jsonl(fifo, max_line_bytes=100))
    writer.join()
    from_file = list(read_jsonl(regular, max_line_bytes=100))
    assert [(n, repr(r)) for n, r in from_pipe] == [(n, repr(r)) for n, r in from_file]
    assert [n for n, _ in from_file] == [1, 3, 4, 5]   # the blank line counted, the long one reported


def test_read_whole_reads_a_fifo_as_the_file_through_stoppable_reads(tmp_path, monkeypatch):
    """`read_whole` (ledgers, TOML configs, read_utf8): a FIFO gives the bytes the regular file
    gives, read through `_StreamLines` (poll-bounded: a stop signal always ends the wait; a
    `replay-seeds` blocked on a FIFO missed its SIGHUP about one run in 25 with `Path.read_bytes`);
    a regular file is read as before, and a missing file raises FileNotFoundError as before."""

    from prover_cli.fsio import jsonl

    data = b'{"format": "x", "rows": [' + b", ".join(b"%d" % i for i in range(5000)) + b"]}\n\xef\xbb\xbftail"
    regular, fifo = tmp_path / "ledger.json", tmp_path / "ledger.fifo"
    regular.write_bytes(data)
    os.mkfifo(fifo)
    streams = []
    real = jsonl._StreamLines
    monkeypatch.setattr(jsonl, "_StreamLines", lambda handle: streams.append(handle) or real(handle))

    writer = write_slowly(fifo, data, 4099)
    assert jsonl.read_whole(fifo) == data
    writer.join()
    assert len(streams) == 1
    assert jsonl.read_whole(regular) == data and len(streams) == 1
    with pytest.raises(FileNotFoundError):
        jsonl.read_whole(tmp_path / "missing.json")
    with pytest.raises(IsADirectoryError):
        jsonl.read_whole(tmp_path)
