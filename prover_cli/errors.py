"""Typed errors. The library raises these; `cli.py` prints each as one `Error:` line and exits
1 (a `ConfigError`, a usage error, exits 2).

Every error carries where it came from (file, line, key) so the user can fix the input without
reading a traceback.
"""

from __future__ import annotations

import os
import re


class ProverError(Exception):
    """Base class: a failure the user can act on. `hint` names the next thing to try."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class ConfigError(ProverError):
    """A config file or `--set` override is invalid: names the file, the key and what is allowed."""

    hint = "see docs/config.md for every key, its type and default"


class UsageError(ProverError):
    """The command was asked for something it refuses without an explicit option (exit 2, kind `usage`):
    names what and the option that allows it (`prover report --allow-unequal-budgets`)."""


class InputError(ProverError):
    """An input file (JSONL, ledger, dataset) is missing or malformed: names the file and line."""


class BackendError(ProverError):
    """A backend (Modal, vLLM, a Lean REPL) is unavailable or misconfigured."""

    hint = "run `prover doctor` to see what this machine has"


class ReplayMismatchError(ProverError):
    """Replaying a seed ledger produced weights whose fingerprint differs from the record."""


class MachineError(ProverError):
    """The machine refused an operation (disk full, permission, read-only, I/O error): names the path and the operation.

    Not a bug to report: every writer appends whole records or replaces files atomically, so
    once the cause is fixed, rerunning the same command resumes where it stopped."""

    # errno -> what to do about it
    HINTS = {
        "ENOSPC": "free some disk space, then rerun the same command: it resumes",
        "EDQUOT": "free some space in your quota, then rerun the same command: it resumes",
        "EACCES": "check the permissions of that path, or write somewhere else (another --out or run.dir)",
        "EPERM": "check the permissions of that path, or write somewhere else (another --out or run.dir)",
        "EROFS": "that file system is read-only: write somewhere else (another --out or run.dir)",
        "EIO": "the disk or network file system reported an I/O error; check it, then rerun the same command",
        "EMFILE": "too many open files: raise `ulimit -n`, or lower verify.workers",
        "ENFILE": "the system is out of file handles: close other programs, then rerun",
        "ENOMEM": "the machine is out of memory: lower verify.workers or generate.batch_size",
        "EFBIG": "a file grew past the file system's limit: write somewhere else",
        "ESTALE": "the network file system lost that file; remount it, then rerun the same command",
    }

    def __init__(self, message: str, *, hint: str | None = None, errno_name: str = ""):
        super().__init__(message, hint=hint)
        self.errno_name = errno_name

    @classmethod
    def from_os_error(cls, exc: OSError, path: object = None, operation: str = "access") -> "MachineError":
        """`path: cannot <operation>: <strerror> [ENOSPC]` from an OSError and what we were doing."""
        import errno as _errno

        name = _errno.errorcode.get(exc.errno or 0, "")
        where = path if path is not None else (exc.filename or "(unknown path)")
        reason = exc.strerror or str(exc) or type(exc).__name__
        tag = f" [{name}]" if name else ""
        return cls(f"{where}: cannot {operation}: {reason}{tag}", hint=cls.HINTS.get(name), errno_name=name)


# OSError numbers that are the machine's doing rather than the input's or ours.
MACHINE_ERRNO_NAMES = frozenset(MachineError.HINTS) | {"ENOLCK", "EBUSY", "ETXTBSY", "ENODEV"}


def is_machine_fault(exc: BaseException) -> bool:
    """Whether `exc` is an OSError the machine raised (disk full, permissions, I/O...)."""
    import errno as _errno

    return isinstance(exc, OSError) and _errno.errorcode.get(exc.errno or 0, "") in MACHINE_ERRNO_NAMES


# Words of the failing source line -> the operation named in the message, first match wins.
_OPERATIONS = (("fsync", "sync"), ("flush", "write"), ("write", "write"), ("save", "write"),
               ("replace", "rename"), ("rename", "rename"), ("mkdir", "create directory"),
               ("truncate", "truncate"), ("unlink", "remove"), ("rmtree", "remove"), ("copy", "copy"),
               ("open", "open"), ("read", "read"), ("stat", "stat"), ("exists", "stat"))


def machine_error_from(exc: OSError) -> MachineError:
    """A MachineError for an OSError nobody wrapped: the path and operation read off the traceback.

    The path is the exception's own filename when it has one (open, rename, mkdir), else the
    name of a file object in the innermost frame that holds one (a failed `handle.write`); the
    operation is the first known verb on the failing source line."""
    import io
    import traceback

    frames = list(traceback.walk_tb(exc.__traceback__))
    path: object = exc.filename
    if exc.filename2:
        path = f"{exc.filename} -> {exc.filename2}"
    if path is None:
        for frame, _ in reversed(frames):
            handles = [v for v in frame.f_locals.values()
                       if isinstance(v, io.IOBase) and isinstance(getattr(v, "name", None), str)]
            if handles:
                path = getattr(handles[0], "name")
                break
    operation = "access"
    for summary in reversed(traceback.extract_tb(exc.__traceback__)):
        line = (summary.line or "").lower()
        if line.startswith("with ") and exc.filename is None:
            operation = "write"  # `with open(...)` exiting: close() flushed what was buffered
            break
        found = next((op for word, op in _OPERATIONS if word in line), None)
        if found:
            operation = found
            break
    return MachineError.from_os_error(exc, path, operation)


# How libraries that write with their own I/O say the machine refused a write: safetensors (Rust)
# wraps the OS error ("I/O error: No space left on device (os error 28)"); torch's zip writer
# (torch.save, Trainer checkpoints) loses the errno ("file write failed", "unexpected pos N vs M").
_OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)")
_TORCH_WRITE_FAILURES = ("file write failed", "PytorchStreamWriter failed", "unexpected pos ")
# Locals that name the file or directory a library was writing (safetensors `filename`, torch
# `f`, transformers `save_directory`): the innermost one is the path the message names.
_PATH_LOCALS = ("filename", "f", "file", "path", "save_directory", "output_dir")


def write_fault_from(exc: BaseException) -> "MachineError | None":
    """A MachineError when `exc` is the machine refusing a write (disk full, quota, file too
    large, read-only, I/O error), whoever raised it: an OSError with such an errno, safetensors'
    SafetensorError, torch's zip-writer RuntimeError. None for anything else (a bug to report).

    Names the path (the exception's, else the innermost file being written in the traceback),
    the operation and the errno; torch does not keep the errno, so it is inferred from the file
    system (no space left: ENOSPC; the file at the process's file-size limit: EFBIG; else EIO)."""
    import errno as _errno

    if isinstance(exc, OSError):
        return machine_error_from(exc) if is_machine_fault(exc) else None
    text = str(exc)
    found = _OS_ERROR_IN_TEXT.search(text)
    operation = "read" if "deserializ" in text else "write"
    if type(exc).__name__ == "SafetensorError" and found:
        number = int(found.group(1) or found.group(2))
        if _errno.errorcode.get(number, "") not in MACHINE_ERRNO_NAMES:
            return None
        error = OSError(number, os.strerror(number))
    elif isinstance(exc, RuntimeError) and any(marker in text for marker in _TORCH_WRITE_FAILURES):
        path = _path_in_traceback(exc)
        number = _inferred_write_errno(path)
        error = OSError(number, os.strerror(number))
    else:
        return None
    return MachineError.from_os_error(error, _path_in_traceback(exc) or "(unknown path)", operation)


def _path_in_traceback(exc: BaseException) -> str | None:
    import traceback

    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        for name in _PATH_LOCALS:
            value = frame.f_locals.get(name)
            if isinstance(value, (str, os.PathLike)) and str(value):
                return os.fspath(value)
    return None


def _inferred_write_errno(path: str | None) -> int:
    import errno as _errno
    import resource

    if path is not None:
        directory = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        try:
            stats = os.statvfs(directory)
            if stats.f_bavail * stats.f_frsize < (1 << 20):
                return _errno.ENOSPC
        except OSError:
            pass
    if resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY:
        return _errno.EFBIG  # this process may not write files past a size (`ulimit -f`)
    return _errno.EIO


def _file_in_traceback(exc: BaseException) -> str | None:
    """The name of a file object open in the innermost frame that holds one (what was being read)."""
    import io
    import traceback

    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        for value in frame.f_locals.values():
            if isinstance(value, io.IOBase) and isinstance(getattr(value, "name", None), str):
                return getattr(value, "name")
    return None


def decode_error_from(exc: UnicodeDecodeError) -> InputError:
    """An InputError naming the file (and line, when known) of a bad byte nobody caught.

    The readers of user input decode line by line and report bad lines themselves; this is the
    safety net for any other text read (`path.read_text()`), so the message still names a file."""
    import os

    path = _file_in_traceback(exc)
    data = exc.object if isinstance(exc.object, (bytes, bytearray)) else b""
    byte = f"byte 0x{data[exc.start]:02x}" if exc.start < len(data) else "a byte"
    where = f"at offset {exc.start}"
    try:
        whole = path is not None and os.path.getsize(path) == len(data)
    except OSError:
        whole = False
    if whole:  # the whole file was decoded at once: the offset is a position in the file
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        return InputError(f"{path}:{line}: not valid UTF-8 ({byte} at column {column})")
    return InputError(f"{path or '(a file)'}: not valid UTF-8 ({byte} {where} of a block read)")
