"""JSONL in and out, written so that a killed run loses nothing and resumes cleanly.

- `read_jsonl` yields (line_number, object-or-error) and never stops at a bad line: the caller
  reports it by line number and goes on.
- `ResumableWriter` appends one record per line and flushes each, so a `kill -9` loses at most
  the line being written. On reopen it drops a torn last line (no trailing newline) before
  appending, and `done_ids` tells which records already exist, so a rerun skips them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from prover_cli.errors import InputError


class BadLine:
    """A line that could not be read as a JSON object; `reason` says why."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"BadLine({self.reason!r})"


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
    path = Path(path)
    try:
        handle = path.open("r", encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a JSONL file") from None
    with handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield line_no, BadLine(f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            if not isinstance(obj, dict):
                yield line_no, BadLine(f"expected a JSON object, got {type(obj).__name__}")
                continue
            yield line_no, obj


def fields_first(record: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    """`record` with the `first` keys leading (so files read well), then the rest as they came."""
    ordered = {key: record[key] for key in first if key in record}
    ordered.update((key, value) for key, value in record.items() if key not in ordered)
    return ordered


def load_jsonl_strict(path: str | Path) -> list[dict[str, Any]]:
    """All records of a file we wrote ourselves; the first bad line is an error naming it."""
    records = []
    for line_no, obj in read_jsonl(path):
        if isinstance(obj, BadLine):
            raise InputError(f"{path}:{line_no}: {obj.reason}")
        records.append(obj)
    return records


class ResumableWriter:
    """Append-only JSONL writer with resume. Use as a context manager."""

    def __init__(self, path: str | Path, key: str = "id", fsync: bool = False):
        self.path = Path(path)
        self.key = key
        self.fsync = fsync
        self.done_ids: set[str] = set()
        self.records: list[dict[str, Any]] = []
        self._handle = None

    def __enter__(self) -> "ResumableWriter":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            self._drop_torn_tail()
            for line_no, obj in read_jsonl(self.path):
                if isinstance(obj, BadLine):
                    raise InputError(f"{self.path}:{line_no}: existing output is corrupt ({obj.reason}); "
                                     "move it away or pass another --out")
                self.records.append(obj)
                if self.key in obj:
                    self.done_ids.add(str(obj[self.key]))
        self._handle = self.path.open("a", encoding="utf-8")
        return self

    def _drop_torn_tail(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1  # keep every complete line
            with self.path.open("r+b") as handle:
                handle.truncate(cut)

    def write(self, record: dict[str, Any]) -> None:
        assert self._handle is not None, "use ResumableWriter as a context manager"
        self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())
        self.records.append(record)
        if self.key in record:
            self.done_ids.add(str(record[self.key]))

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def write_jsonl_atomic(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Write a whole file at once: temp file + rename, so readers never see half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
