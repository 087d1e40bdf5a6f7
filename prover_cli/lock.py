"""One writer per output: an advisory lock on a run directory or an output file.

    with hold_outputs([config.run_dir]):      # LockedError if another live process writes there
        train_es(config)

Two `prover verify` runs on one `--out`, or two `train es` in one run directory, would mix their
records (contradictory verdicts, two runs in one metrics.jsonl, a shared ledger.json.tmp). So
every command that writes takes an exclusive `fcntl.flock` on `.<name>.lock` beside each of its
outputs before it changes anything; a second process fails at once with the holder's pid and
command, and has written nothing.

Why flock and a lock file beside the target:
- the kernel drops a flock when its process dies (even `kill -9`), so a lock left behind by a
  dead process is simply unlocked: the next run takes it over, no pid guessing, no stale files
  to clean up by hand;
- the file sits beside the target, not inside it, so a run directory's contents stay exactly
  what the trainers check (e.g. "run.dir already holds a GRPO run") and a model directory
  holds only the model;
- the holder writes its pid and command into the file, which is all the second process needs
  for a useful error.

The file is removed on release while still locked; an acquirer that opened the old file checks
that the path still names the inode it locked, and retries if not, so removal never lets two
writers in. Within one process the lock is re-entrant (eval calls generate and verify inside).
Advisory only: it stops prover processes, not other programs. With `--backend modal` the cli
holds it on the launching machine around the remote call (and the pull of its outputs); the
containers writing the Volume take no lock there.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from prover_cli.errors import MachineError, ProverError


class LockedError(ProverError):
    """Another live process holds the lock of an output this command would write."""

    hint = "wait for it to finish (or stop it), or write somewhere else (another --out or run.dir)"


# Paths this process holds: real path of the target -> [depth, fd of the lock file].
_HELD: dict[str, list[int]] = {}
_HELD_GUARD = threading.Lock()


def lock_path(target: str | Path) -> Path:
    """Where the lock of `target` lives: `.<name>.lock` in the same directory."""
    real = Path(os.path.realpath(target))
    return real.parent / f".{real.name}.lock"


def current_command() -> str:
    """This process's command line as a user would type it (`prover verify a.jsonl ...`)."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("prover", "__main__.py", "cli.py"):
        argv[0] = "prover"
    return shlex.join(argv)


@contextmanager
def output_lock(target: str | Path) -> Iterator[dict[str, Any] | None]:
    """Hold the lock of `target` (a file or directory, existing or not) for the `with` body.

    Yields what a dead previous holder left in the lock file (its pid and command), or None."""
    key = str(Path(os.path.realpath(target)))
    with _HELD_GUARD:
        if key in _HELD:  # re-entrant: this process already holds it
            _HELD[key][0] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield None
        finally:
            with _HELD_GUARD:
                _HELD[key][0] -= 1
        return

    path = lock_path(target)
    fd, previous = _acquire(path, target)
    with _HELD_GUARD:
        _HELD[key] = [1, fd]
    try:
        yield previous
    finally:
        with _HELD_GUARD:
            del _HELD[key]
        try:
            os.unlink(path)  # while still locked: see the module docstring
        except OSError:
            pass  # already gone, or a read-only parent: the flock is what matters
        os.close(fd)


@contextmanager
def hold_outputs(targets: Iterable[str | Path]) -> Iterator[list[tuple[Path, dict[str, Any]]]]:
    """Lock every target (deduplicated, in a fixed order) for the `with` body.

    Yields (target, record) for each lock a dead process left behind and this one took over."""
    unique = sorted({os.path.realpath(t) for t in targets})
    taken_over: list[tuple[Path, dict[str, Any]]] = []
    with ExitStack() as stack:
        for target in unique:
            previous = stack.enter_context(output_lock(target))
            if previous:
                taken_over.append((Path(target), previous))
        yield taken_over


def _acquire(path: Path, target: str | Path) -> tuple[int, dict[str, Any] | None]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MachineError.from_os_error(exc, path.parent, "create directory") from None
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise MachineError.from_os_error(exc, path, "open lock file") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd, wait_s=1.0)
            os.close(fd)
            raise LockedError(f"{target}: in use by another prover process: {_describe(holder)}") from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise ProverError(f"{path}: this file system does not support locks ({exc.strerror}); "
                                  "cannot make sure this is the only writer",
                                  hint="write the run to a local disk") from None
            raise MachineError.from_os_error(exc, path, "lock") from None
        if _same_file(fd, path):
            break
        os.close(fd)  # the holder removed the file between our open and our flock: retry
    previous = _read_holder(fd, wait_s=0.0)
    holder = {"pid": os.getpid(), "command": current_command(), "host": socket.gethostname(),
              "started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise MachineError.from_os_error(exc, path, "write lock file") from None
    return fd, previous


def _same_file(fd: int, path: Path) -> bool:
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int, wait_s: float) -> dict[str, Any] | None:
    """The holder's record; it writes it just after locking, so a fresh lock may need a moment."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        try:
            holder = json.loads(data.decode("utf-8"))
            if isinstance(holder, dict):
                return holder
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _describe(holder: dict[str, Any] | None) -> str:
    if not holder:
        return "pid unknown (it has just started)"
    where = f" on {holder['host']}" if holder.get("host") and holder.get("host") != socket.gethostname() else ""
    return (f"pid {holder.get('pid')}{where}, `{holder.get('command')}`, "
            f"started {holder.get('started')}")
