"""JSONL in and out, written so that a killed run loses nothing and resumes cleanly.

- `read_jsonl` yields (line_number, object-or-BadLine) and never stops at a bad line: the caller
  reports it by line number and goes on. Every line is decoded on its own, so one invalid
  UTF-8 byte costs one line, not the file; a UTF-8 byte order mark is skipped; a line longer
  than `io.max_line_bytes` is reported and skipped without being held in memory.
- `ResumableWriter` appends one record per line and flushes each, so a `kill -9` loses at most
  the line being written. On reopen it drops a torn last line (no trailing newline) before
  appending, and `done_ids` tells which records already exist, so a rerun skips them.
- A failed write (disk full, permissions...) is a `MachineError` naming the file and the
  operation; what was written before it stays valid, so the rerun resumes.
- `write_text_atomic` (a file) and `write_dir_atomic` (a directory) are the only atomic writers
  of the package outside verify/: temp name, fsync, rename, fsync of the directory (below).
- Strict JSON both ways. A number JSON cannot carry is not read: `1e999999` (Python would read
  it as inf and write it back as `Infinity`, which is not JSON), `NaN`, `Infinity`, or an
  integer too long for Python to convert make their line a BadLine, so the line is reported and
  skipped rather than changed. Everything written goes through `dumps`, which refuses NaN and
  infinities (`allow_nan=False`): no writer here emits a line another JSON reader rejects.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import select
import stat
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

from prover_cli.errors import InputError, MachineError
from prover_cli.fsio.lock import claim_identity
from prover_cli.progress import Reporter

# The longest line a reader holds in memory; `io.max_line_bytes` in the config sets it (the cli
# calls `configure`). A proof is a few KiB; a 50 MB line is a broken file, not a record.
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
_limits = {"max_line_bytes": DEFAULT_MAX_LINE_BYTES}
_SKIP_CHUNK_BYTES = 1024 * 1024  # how an over-long line is skipped: in pieces of this size


def configure(*, max_line_bytes: int) -> None:
    """Set the line-length limit of every reader in this process (from `io.max_line_bytes`)."""
    _limits["max_line_bytes"] = int(max_line_bytes)


class NonFiniteNumber(Exception):
    """A number in a JSON text that no finite float holds (`literal`: as written in the text)."""

    def __init__(self, literal: str):
        super().__init__(literal)
        self.literal = literal

    @property
    def reason(self) -> str:
        if self.literal.lstrip("-") in ("NaN", "Infinity"):
            return f"not a finite number: `{self.literal}` is not JSON"
        return (f"not a finite number: `{self.literal}` is beyond a 64-bit float (it would read as "
                "infinity); the line is refused rather than its value changed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(text)
    return value


def _no_constant(text: str) -> Any:
    raise NonFiniteNumber(text)  # NaN, Infinity, -Infinity: Python's extensions, not JSON


def loads(text: str) -> Any:
    """`json.loads` restricted to JSON: NonFiniteNumber for a number no finite float holds.

    Other failures are json's own: JSONDecodeError, RecursionError, and ValueError for an
    integer longer than Python converts (sys.get_int_max_str_digits())."""
    return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)


def dumps(value: Any) -> str:
    """One JSON line's text (no newline): UTF-8 kept as is, and ValueError rather than `NaN` or
    `Infinity`, which are not JSON."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def finite_or_null(value: Any) -> Any:
    """`value` with every float that is not finite (NaN, inf) as None: what JSON can hold of it,
    for outputs that report a number (metrics, `--json`) rather than read one back as input."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def non_finite_in(value: Any) -> str | None:
    """Where `value` (a row a library decoded: Parquet, a JSON document) holds a float that is
    not finite, as `field.sub[2] = inf`; None when it holds none."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"{where or 'the value'} = {item}"
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}" if where else str(key), sub) for key, sub in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{i}]", sub) for i, sub in reversed(list(enumerate(item))))
    return None


class BadLine:
    """A line that could not be read as a JSON object; `reason` says why."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return f"BadLine({self.reason!r})"


def read_jsonl(path: str | Path, *, max_line_bytes: int | None = None
               ) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
    """(line number, JSON object or BadLine) for every non-blank line of `path`."""
    path = Path(path)
    limit = max_line_bytes if max_line_bytes is not None else _limits["max_line_bytes"]
    try:
        handle: Any = path.open("rb")  # or _StreamLines over it, below
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a JSONL file") from None
    except OSError as exc:
        raise MachineError.from_os_error(exc, path, "open") from None
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            handle = _StreamLines(handle)   # a pipe, FIFO or terminal: reads a signal can always stop
        line_no = 0
        while True:
            try:
                raw = handle.readline(limit + 1)
            except OSError as exc:
                raise MachineError.from_os_error(exc, path, f"read line {line_no + 1}") from None
            if not raw:
                return
            line_no += 1
            if len(raw) > limit and not (raw.endswith(b"\n") and len(raw) - 1 <= limit):
                total = len(raw) + _skip_rest_of_line(handle)
                yield line_no, BadLine(f"line of {total:,} bytes is longer than io.max_line_bytes = {limit:,}; skipped")
                continue
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            yield from _decode(line_no, raw)


class _StreamLines:
    """`readline(size)` of a binary pipe, FIFO or terminal that a SIGTERM/SIGHUP/Ctrl-C always
    stops. Python runs a signal's handler only between bytecodes: a signal that lands after the
    input is opened but before a blocking `read(2)` begins (a FIFO whose writer just connected:
    seen, about one run in ten) interrupts nothing, and the read then waits for ever with the
    handler never run. So every read here is preceded by a `poll` that returns at least every
    `_POLL_S` seconds, back in Python, where a pending handler runs; `poll` said readable (or hung
    up: end of input), so the `os.read` that follows returns at once. `poll`, not `select`:
    `select` refuses a descriptor numbered 1024 or more (a process with many files open).
    Regular files are read as before."""

    _POLL_S = 0.25

    def __init__(self, handle: Any):
        self._handle = handle   # owns the descriptor (the caller closes it); nothing read through it yet
        self._fd = handle.fileno()
        self._buffer = b""
        self._eof = False
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLIN | select.POLLPRI)   # hang-up and errors are always reported

    def readline(self, size: int) -> bytes:
        """Up to `size` bytes, ending at the first newline if one comes first (as BufferedReader's)."""
        while b"\n" not in self._buffer[:size] and len(self._buffer) < size and not self._eof:
            if self._poller.poll(self._POLL_S * 1000):   # milliseconds
                chunk = os.read(self._fd, 1 << 16)
                self._buffer += chunk
                self._eof = not chunk
        end = self._buffer.find(b"\n", 0, size)
        end = size if end < 0 else end + 1
        line, self._buffer = self._buffer[:end], self._buffer[end:]
        return line


def read_whole(path: str | Path) -> bytes:
    """All of `path`'s bytes, as `Path.read_bytes` gives them, but a pipe, FIFO or terminal is read
    through `_StreamLines`, so that a stop signal always ends the wait (its docstring says why; a
    `prover replay-seeds` blocked on a FIFO was seen to miss its SIGHUP about one run in 25). Raises
    the OSError of the open or read as it is (FileNotFoundError, IsADirectoryError, ...)."""
    with open(path, "rb") as handle:
        if stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return handle.read()
        stream = _StreamLines(handle)
        return b"".join(iter(lambda: stream.readline(1 << 20), b""))


def _skip_rest_of_line(handle: Any) -> int:
    """Read past the end of an over-long line a chunk at a time; returns the bytes skipped."""
    skipped = 0
    while True:
        chunk = handle.readline(_SKIP_CHUNK_BYTES)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def _decode(line_no: int, raw: bytes) -> Iterator[tuple[int, dict[str, Any] | BadLine]]:
    if not raw.strip():
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield line_no, BadLine(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
        return
    try:
        obj = loads(text)
    except NonFiniteNumber as exc:
        yield line_no, BadLine(exc.reason)
        return
    except json.JSONDecodeError as exc:
        yield line_no, BadLine(f"not valid JSON ({exc.msg} at column {exc.colno})")
        return
    except RecursionError:
        yield line_no, BadLine("not valid JSON (nested too deeply)")
        return
    except ValueError as exc:  # an integer longer than Python converts (int_max_str_digits)
        yield line_no, BadLine(f"number too long to read ({exc})")
        return
    if not isinstance(obj, dict):
        yield line_no, BadLine(f"expected a JSON object, got {type(obj).__name__}")
        return
    yield line_no, obj


def read_utf8(path: str | Path) -> str:
    """A whole text file (a .json document, a .lean file) as str; a BOM is skipped, and a byte
    that is not UTF-8 is an InputError naming the file, line and column."""
    path = Path(path)
    try:
        data = read_whole(path)
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except OSError as exc:
        raise MachineError.from_os_error(exc, path, "read") from None
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column})") from None


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
        self._handle: TextIO | None = None
        self._created = False   # this writer made the file (it was not there before)
        self._written = 0

    def __enter__(self) -> "ResumableWriter":
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MachineError.from_os_error(exc, self.path.parent, "create directory") from None
        if self.path.exists():
            self._drop_torn_tail()
            for line_no, obj in read_jsonl(self.path):
                if isinstance(obj, BadLine):
                    raise InputError(f"{self.path}:{line_no}: existing output is corrupt ({obj.reason}); "
                                     "move it away or pass another --out")
                self.records.append(obj)
                if self.key in obj:
                    self.done_ids.add(str(obj[self.key]))
        self._created = not self.path.exists()
        try:
            self._handle = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise MachineError.from_os_error(exc, self.path, "open for appending") from None
        try:
            claim_identity(self.path)  # the output exists now: lock the file itself too (prover_cli/fsio/lock.py)
        except BaseException:
            self._handle.close()
            raise
        return self

    def _drop_torn_tail(self) -> None:
        """Cut a last line without its newline (a write killed midway), scanning back from the end."""
        try:
            with self.path.open("r+b") as handle:
                end = handle.seek(0, os.SEEK_END)
                if end == 0:
                    return
                handle.seek(end - 1)
                if handle.read(1) == b"\n":
                    return
                position = end
                while position > 0:
                    start = max(0, position - _SKIP_CHUNK_BYTES)
                    handle.seek(start)
                    newline = handle.read(position - start).rfind(b"\n")
                    if newline >= 0:
                        handle.truncate(start + newline + 1)  # keep every complete line
                        return
                    position = start
                handle.truncate(0)
        except OSError as exc:
            raise MachineError.from_os_error(exc, self.path, "truncate a torn last line of") from None

    def write(self, record: dict[str, Any]) -> None:
        assert self._handle is not None, "use ResumableWriter as a context manager"
        try:
            self._handle.write(dumps(record) + "\n")  # ValueError (NaN, inf) before any byte is written
            self._handle.flush()
            if self.fsync:
                os.fsync(self._handle.fileno())
        except OSError as exc:
            raise MachineError.from_os_error(exc, self.path, "write") from None
        self._written += 1
        self.records.append(record)
        if self.key in record:
            self.done_ids.add(str(record[self.key]))

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            try:
                handle.close()
            except OSError as error:
                if exc[0] is None:  # a close that fails on its own is news; after a failure it is not
                    raise MachineError.from_os_error(error, self.path, "write") from None
            if exc[0] is not None and self._created and not self._written:
                # failed (or interrupted) before its first record: leave no empty output behind,
                # which would look like a finished run with nothing in it
                _remove_quietly(self.path)


def write_jsonl_atomic(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Write a whole file at once: temp file + rename, so readers never see half of it."""
    write_text_atomic(path, "".join(dumps(record) + "\n" for record in records))


# -- the two atomic writers: a file and a directory, one durability rule -----------------------------
# Write under a temp name in the same directory (a rename is atomic only within one file system),
# flush and fsync the data, rename it into place, then fsync the directory. Without the data fsync
# a crash after the rename can leave the new name pointing at an empty or cut file (ext4, xfs
# delay allocation); without the directory fsync the rename itself can be lost. Either way a
# resume would read something no writer wrote, so every atomic write here pays both fsyncs.

def write_text_atomic(path: str | Path, data: str | bytes | Callable[[Path], None], *, shared: bool = False) -> None:
    """Replace the file `path` whole with `data`: text (UTF-8), bytes, or a function that writes
    the file it is given (safetensors, a compiler's -o). A kill or a full disk leaves the old file
    or the new one, never a cut one (a resume can always read it); a failure is a MachineError
    naming the path and errno. The one atomic-file writer (durability rule above).

    The temp name is `<name>.tmp`: a run directory has one writer (prover_cli/fsio/lock.py), and a
    killed write's leftover is reused, not piled up. `shared`: several processes may write `path`
    at once (a cache), so each writes a temp name of its own (`<name>.<pid>.tmp`)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MachineError.from_os_error(exc, path.parent, "create directory") from None
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp" if shared else f"{path.name}.tmp")
    try:
        if callable(data):
            data(tmp)
        else:
            with tmp.open("wb") as handle:
                handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        _fsync_file(tmp)
    except OSError as exc:
        _remove_quietly(tmp)
        raise MachineError.from_os_error(exc, tmp, "write") from None
    except BaseException:
        _remove_quietly(tmp)  # a writer function that failed (NaN weights, ^C): no temp file left behind
        raise
    try:
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise MachineError.from_os_error(exc, path, f"move {tmp.name} into place as") from None
    fsync_directory(path.parent)
    claim_identity(path)


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None], *, shared: bool = False) -> Path:
    """Replace the directory `path` whole with what `fill(tmp)` writes into the empty directory
    `tmp` beside it: every file and the directory fsynced, then renamed into place. Any failure
    in `fill` (an exception, a kill) leaves the old `path` as it was and no temp directory from
    this call behind. The one atomic-directory writer (durability rule above). Returns `path`.

    POSIX cannot rename a directory over a non-empty one, so the old one moves aside first
    (`<name>.old`) and is deleted after the new one is in place: a kill between those two
    renames leaves no `path` (the trainers then rebuild it: ES from the ledger, GRPO from its
    checkpoint), never a mix of old and new files. `shared`: a cache several processes may
    build at once (the output of a pure function): each fills a temp directory of its own, and
    a copy already in place is kept, not replaced, since another process may be reading it."""
    import shutil

    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp" if shared else f"{path.name}.tmp")
    old = path.with_name(path.name + ".old")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # left by a killed earlier write
        tmp.mkdir()
    except OSError as exc:
        raise MachineError.from_os_error(exc, tmp, "create directory") from None
    try:
        fill(tmp)
        for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
            _fsync_file(file)
        for directory in sorted((p for p in tmp.rglob("*") if p.is_dir()), reverse=True):
            fsync_directory(directory)
        fsync_directory(tmp)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise MachineError.from_os_error(exc, tmp, "write") from None
        raise
    if shared and path.exists():  # a concurrent build finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
        return path
    try:
        if not shared:
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                path.rename(old)
        tmp.rename(path)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if shared and path.exists():  # lost the race between the check and the rename
            return path
        if old.exists() and not path.exists():
            old.rename(path)  # the old one back in place: a failed write changes nothing
        raise MachineError.from_os_error(exc, path, f"move {tmp.name} into place as") from None
    fsync_directory(path.parent)
    shutil.rmtree(old, ignore_errors=True)
    claim_identity(path)
    return path


def _fsync_file(path: Path) -> None:
    """Flush a written file's data to the disk (opened again: the writer may have been a library)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(directory: str | Path) -> None:
    """Make a rename in `directory` durable (best effort: some file systems refuse a directory fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# -- malformed input lines: reported by number, the rest processed, the command exits 1 -------------

def log_malformed(reporter: Reporter, path: str | Path, malformed: list[dict[str, Any]]) -> None:
    """One `path:line: reason` log line per malformed input line (as each command reads its input)."""
    for item in malformed:
        reporter.log(f"{path}:{item['line']}: {item['reason']}")


def with_malformed(result: dict[str, Any], path: str | Path, malformed: list[dict[str, Any]]) -> dict[str, Any]:
    """`result` marked for the skipped lines of `path`: listed, in a table, and `ok` false (exit 1)."""
    if malformed:
        result.update(ok=False, malformed_lines=len(malformed), malformed=malformed)
        result.setdefault("tables", []).append({"title": f"malformed lines of {Path(path).name} (skipped)",
                                                "columns": ["line", "problem"],
                                                "rows": [[m["line"], m["reason"]] for m in malformed]})
    return result
