"""A pipe or FIFO is read the same with more than 1,024 descriptors open (issue #38): the reads that
a signal can always stop wait in `poll`, which takes any descriptor; `select` refused one numbered
1024 or more with "filedescriptor out of range" (an unexpected ValueError)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from prover_cli.fsio.jsonl import BadLine, read_jsonl

WANT = 1100   # descriptors held open, so that every new one is numbered above 1023


@pytest.fixture
def many_fds():
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = WANT + 64
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"the hard limit on open files here is {hard}, below the {need} this test needs (ulimit -Hn)")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    held = []
    try:
        while len(held) < WANT:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield held
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_pipe_with_a_descriptor_above_1023_is_read_line_by_line(many_fds, tmp_path):
    read_end, write_end = os.pipe()
    assert read_end >= 1024 and max(many_fds) >= 1024
    rows = [{"id": f"p{i}", "x": i} for i in range(3)]
    payload = "".join(json.dumps(row) + "\n" for row in rows) + "not json\n"

    def feed():
        with os.fdopen(write_end, "w", encoding="utf-8") as handle:   # in pieces: the reader waits in between
            for line in payload.splitlines(keepends=True):
                handle.write(line)
                handle.flush()

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        got = list(read_jsonl(f"/dev/fd/{read_end}"))   # opened again: a descriptor above 1023 too
    finally:
        writer.join()
        os.close(read_end)
    assert [obj for _, obj in got[:3]] == rows
    assert got[3][0] == 4 and isinstance(got[3][1], BadLine)


def test_a_fifo_opened_above_1023_is_read(many_fds, tmp_path):
    fifo = tmp_path / "input.jsonl"
    os.mkfifo(fifo)

    def feed():
        with fifo.open("w", encoding="utf-8") as handle:
            handle.write('{"id": "a"}\n{"id": "b"}\n')

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        got = [obj["id"] for _, obj in read_jsonl(fifo)]
    finally:
        writer.join()
    assert got == ["a", "b"]
