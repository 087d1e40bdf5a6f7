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
  for a useful error. A lock file locked without such a record (another program's `flock` on
  it, or a record that is missing or unreadable) is reported as held by a process that is not
  prover or left no record, with the pid and command /proc/locks names for it and what to do;
  a record whose pid is not the process /proc/locks names is stale and is not believed.

The file is removed on release while still locked (and only while the path still names the file
we locked); an acquirer that opened the old file checks that the path still names the inode it
locked, and retries if not, so removal never lets two writers in. Within one process the lock is
re-entrant (eval calls generate and verify inside).

What a path-named lock file cannot see, and what else is locked for it:
- the target's identity: the holder also takes an flock on the target itself (its inode, a file
  or a directory) once it exists, so a hard link to the same file under another name, or a lock
  file deleted by hand, does not let a second writer in. Who holds it is read from /proc/locks;
- nesting: an output inside a directory another prover process holds (`prover verify --out
  runs/es/x.jsonl` while `train es` writes runs/es) is refused, and so is a directory that holds
  an output another process writes (checked over the directory's first few levels).
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
from typing import Any, Iterable, Iterator, Literal

from prover_cli.errors import MachineError, ProverError
from prover_cli.signals import signals_deferred


class LockedError(ProverError):
    """Another live process holds the lock of an output this command would write."""

    hint = "wait for it to finish (or stop it), or write somewhere else (another --out or run.dir)"


# Paths this process holds: real path of the target -> [depth, fd of the lock file].
_HELD: dict[str, list[int]] = {}
_HELD_GUARD = threading.Lock()
# Targets' identities this process has flocked: (st_dev, st_ino) -> fd; and which target holds which.
_IDENTITIES: dict[tuple[int, int], int] = {}
_IDENTITY_OF: dict[str, tuple[int, int]] = {}
NESTED_SCAN_DEPTH = 4  # how deep a held directory is searched for outputs another process writes


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
    _check_nesting(Path(key))  # before creating anything (the lock file's directory)
    fd = None
    try:
        # A signal between writing our record and owning its release here would leave the
        # lock file behind: signals that arrive meanwhile are raised once `fd` is set.
        with signals_deferred():
            fd, previous = _acquire(path, target)
            _check_nesting(Path(key))  # and again once locked: a holder that started meanwhile
            with _HELD_GUARD:
                _HELD[key] = [1, fd]
            claim_identity(key)
        yield previous
    finally:
        if fd is not None:
            with _HELD_GUARD:
                _HELD.pop(key, None)
            _release(key, path, fd)


def _release(key: str, path: Path, fd: int) -> None:
    identity = _IDENTITY_OF.pop(key, None)
    if identity is not None:
        os.close(_IDENTITIES.pop(identity))
    if _same_file(fd, path):  # a lock file deleted by hand and made anew is another holder's now
        try:
            os.unlink(path)  # while still locked: see the module docstring
        except OSError:
            pass  # already gone, or a read-only parent: the flock is what matters
    os.close(fd)


def claim_identity(path: str | Path) -> None:
    """Flock the identity (inode) of every target this process holds that is `path` or one of its
    ancestors and exists now, if not done yet: writers call it once they have created their
    output, so a target that did not exist at locking time is covered too. LockedError when
    another process holds that inode (through a hard link, or a lock file deleted by hand)."""
    real = Path(os.path.realpath(path))
    with _HELD_GUARD:
        pending = [key for key in _HELD if key not in _IDENTITY_OF and (real == Path(key) or Path(key) in real.parents)]
    for key in pending:
        try:
            fd = os.open(key, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # not there yet, or not readable: the lock file beside it still holds
        identity = _identity(fd)
        if identity in _IDENTITIES:  # this process holds it already (the same file under two names)
            os.close(fd)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _flock_holder(identity)
            raise LockedError(f"{key}: in use by another process (a prover run writing the same file through a hard "
                              f"link or after its lock file {lock_path(key)} was deleted, or another program "
                              f"locking it): {_details(holder)}", hint=_hint(holder, key)) from None
        except OSError:
            os.close(fd)
            continue  # a file system without flock on this file: the lock file beside it still holds
        _IDENTITIES[identity] = fd
        _IDENTITY_OF[key] = identity


def _identity(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def _flock_holder(identity: tuple[int, int]) -> dict[str, Any] | None:
    """The pid and command line of the process holding an flock on that inode (Linux /proc/locks):
    the exclusive holder first (a shared one is another process only testing the lock)."""
    device, inode = identity
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != wanted:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if pid <= 0 or pid == os.getpid():  # 0: a process in another pid namespace, not nameable here
            continue
        found.append((fields[3] != "WRITE", pid))
    for _, pid in sorted(found)[:1]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            command = shlex.join(arg.decode("utf-8", "replace") for arg in argv)
        except OSError:
            command = "?"
        return {"pid": pid, "command": command}
    return None


def _check_nesting(target: Path) -> None:
    """LockedError when `target` lies inside a directory another process holds, or (a directory)
    holds an output another process writes."""
    for ancestor in target.parents:
        if ancestor.parent == ancestor:
            break
        holder = _held_elsewhere(lock_path(ancestor), ancestor)
        if holder is not False:
            raise LockedError(f"{target}: inside {ancestor}, which {_who(holder)} writes: {_details(holder)}",
                              hint=_hint(holder, ancestor))
    if not target.is_dir():
        return
    base_depth = len(target.parts)
    for directory, subdirs, files in os.walk(target):
        if len(Path(directory).parts) - base_depth >= NESTED_SCAN_DEPTH:
            subdirs.clear()
        subdirs[:] = [name for name in subdirs if not name.startswith(".")]  # .venv, .git, caches
        for name in files:
            if name.startswith(".") and name.endswith(".lock"):
                inner = Path(directory) / name[1:-len(".lock")]
                holder = _held_elsewhere(Path(directory) / name, inner)
                if holder is not False:
                    raise LockedError(f"{target}: holds {inner}, which {_who(holder)} writes: {_details(holder)}",
                                      hint=_hint(holder, inner))


def _held_elsewhere(path: Path, target: Path) -> dict[str, Any] | Literal[False]:
    """False when no other process holds the lock file `path` (of `target`); else who does (`_lock_file_holder`)."""
    if str(target) in _HELD or not path.is_file():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_file_holder(fd, path, wait_s=1.0)
        os.close(fd)
        return holder
    except OSError:
        os.close(fd)
        return False
    os.close(fd)  # closing drops the shared lock: it was only a test
    return False


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
            holder = _lock_file_holder(fd, path, wait_s=1.0)
            os.close(fd)
            raise LockedError(f"{target}: in use by {_who(holder)}: {_details(holder)}",
                              hint=_hint(holder, target)) from None
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
        os.pwrite(fd, (json.dumps(holder, allow_nan=False) + "\n").encode(), 0)
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
    """The holder's record (a pid and a command, as `_acquire` writes it), or None when the file
    holds none; a prover holder writes it just after locking, so a fresh lock may need a moment."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            data = os.pread(fd, 4096, 0)
        except OSError:
            data = b""
        try:
            holder = json.loads(data.decode("utf-8"))
            if _is_record(holder):
                return holder
        except (UnicodeDecodeError, ValueError, RecursionError):  # not JSON (or an over-long integer, or too deep)
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _is_record(holder: Any) -> bool:
    """Whether `holder` is a prover holder's record: at least an integer pid and a command string."""
    return (isinstance(holder, dict) and isinstance(holder.get("pid"), int) and not isinstance(holder["pid"], bool)
            and holder["pid"] > 0 and isinstance(holder.get("command"), str))


def _lock_file_holder(fd: int, path: Path, wait_s: float) -> dict[str, Any]:
    """Who holds the flock on the lock file open as `fd` (at `path`): the prover record in it, when
    /proc/locks agrees (or cannot tell); else {"no_record": path} with the pid and command
    /proc/locks names, if any, and a `stale` record left in the file by a run that ended."""
    record = _read_holder(fd, wait_s)
    try:
        flocker = _flock_holder(_identity(fd))
    except OSError:
        flocker = None
    elsewhere = record is not None and record.get("host") not in (None, socket.gethostname())
    if record is not None and (flocker is None or flocker["pid"] == record["pid"] or elsewhere):
        return record  # (a record from another host names a pid this machine's /proc cannot compare)
    holder: dict[str, Any] = {"no_record": str(path), **(flocker or {})}
    if record is not None:
        holder["stale"] = record
    return holder


def _who(holder: dict[str, Any] | None) -> str:
    """Who holds a lock, in words: a prover run, or a process that left no prover record."""
    if holder and "no_record" in holder:
        return f"a process that is not prover or left no record in its lock file {holder['no_record']}"
    return "another prover process"


def _details(holder: dict[str, Any] | None) -> str:
    """The holder's pid, command and start as far as known; never a field that is not there."""
    if not holder or not holder.get("pid"):
        return "pid unknown (/proc/locks does not name it)"
    where = f" on {holder['host']}" if holder.get("host") and holder.get("host") != socket.gethostname() else ""
    parts = [f"pid {holder['pid']}{where}"]
    if holder.get("command"):
        parts.append(f"`{holder['command']}`")
    if holder.get("started"):
        parts.append(f"started {holder['started']}")
    text = ", ".join(parts)
    stale = holder.get("stale")
    if stale:
        text += f" (the record in the lock file names pid {stale['pid']}, `{stale['command']}`, a run that has ended)"
    return text


def _hint(holder: dict[str, Any] | None, target: str | Path) -> str | None:
    """What to do about a lock not held by a prover run (None: LockedError's own hint)."""
    if holder and "no_record" in holder:
        lock_file = holder["no_record"]
        if holder.get("pid"):
            return (f"pid {holder['pid']} holds the lock of {target} without being a prover run (or before writing "
                    f"its record): stop it or wait for it to release {lock_file}, or write somewhere else "
                    "(another --out or run.dir)")
        return (f"find the process holding {lock_file} (`fuser -v {lock_file}` or `lsof {lock_file}`), stop it or "
                "wait for it, or write somewhere else (another --out or run.dir)")
    return None
