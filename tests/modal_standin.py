"""Stand-ins for the two Modal objects our code drives directly: a Volume and a Sandbox.

Both follow the modal 1.6 client (modal/volume.py, modal/sandbox/), and are at least as strict:

VolumeStandIn (every Modal test uses it in place of `images.runs_volume` / `models_volume`):
- `reload()` raises RuntimeError with Modal's wording ("there are open files preventing the
  operation: cwd is inside volume", "... cwd of '<cmd>' is inside volume", "... path X is open";
  the first part is the server's message as far as the client shows it, the substring
  `Volume.reload` matches on, the rest the client's own annotation)
  when this process, or any process it started, has its cwd or an open file under the mount:
  the same /proc walk `modal.volume._open_files_error_annotation` makes;
- what one "container" writes is seen by another only after the writer's `commit()` and the
  reader's `reload()` (`with volume.container("name"):` switches the mount to that container's
  view; a new container mounts the latest committed state, as Modal does at container start).
  Stricter than Modal: a reload never commits the caller's pending writes implicitly.
- `batch_upload` / `read_file` act on the committed state, as from your machine.

SandboxStandIn (`sandbox.Sandbox` in tests): `create(**kwargs)` records its arguments and
refuses unknown ones; `exec(*args, workdir=, text=False)` runs the command as a local process
(`python` is this interpreter, `lake env repl` the REPL stand-in, tests/fake_repl.py) with stdin/stdout/stderr
streams shaped like modal's StreamWriter/StreamReader; `poll()`/`terminate()`/the timeout end
every process of the Sandbox; `exec` on a finished Sandbox raises.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, Iterator

import modal

# --------------------------------------------------------------------------------------------
# Volume
# --------------------------------------------------------------------------------------------

OPEN_FILES = "there are open files preventing the operation"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def open_files_annotation(mount: Path) -> str | None:
    """Modal's annotation, for this process and the processes it started (this "container")."""
    mount = Path(os.path.realpath(mount))
    me = os.getpid()
    for pid in _descendants(me):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = " ".join(p.decode() for p in f.read().split(b"\0")).rstrip(" ")
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
            if cwd == mount or mount in cwd.parents:
                return "cwd is inside volume" if pid == me else f"cwd of '{cmdline}' is inside volume"
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = Path(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except OSError:
                    continue
                if mount in target.parents:
                    rel = target.relative_to(mount)
                    return f"path {rel} is open" if pid == me else f"path {rel} is open from '{cmdline}'"
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return None


def _scan(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _digest(files: dict[str, bytes]) -> dict[str, str]:
    return {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}


class VolumeStandIn:
    """One Modal Volume mounted at `mount`, shared by the "containers" of one test."""

    def __init__(self, mount: Path, name: str = "prover-ledgers"):
        self.mount = Path(mount)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.committed: dict[str, bytes] = {}
        self.current = "main"
        self._seen: dict[str, dict[str, str]] = {"main": {}}  # per container: what its mount last synced
        self._views: dict[str, dict[str, bytes]] = {}
        self.commits = 0
        self.reloads = 0
        self.uploaded: list[tuple[Path, str]] = []

    # -- inside a container ------------------------------------------------------------------
    def commit(self) -> None:
        now = _scan(self.mount)
        seen = self._seen[self.current]
        for rel, data in now.items():
            if _digest({rel: data})[rel] != seen.get(rel):
                self.committed[rel] = data
        for rel in set(seen) - set(now):
            self.committed.pop(rel, None)
        self._seen[self.current] = _digest(now)
        self.commits += 1

    def reload(self) -> None:
        annotation = open_files_annotation(self.mount)
        if annotation:
            raise RuntimeError(f"{OPEN_FILES}: {annotation}")
        now = _scan(self.mount)
        seen = self._seen[self.current]
        pending = {rel: data for rel, data in now.items() if _digest({rel: data})[rel] != seen.get(rel)}
        deleted = set(seen) - set(now)
        view = {**self.committed, **pending}
        for rel in deleted:
            view.pop(rel, None)
        self._materialize(view)
        self._seen[self.current] = _digest(self.committed)
        self.reloads += 1

    def _materialize(self, files: dict[str, bytes]) -> None:
        for child in self.mount.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        for rel, data in files.items():
            path = self.mount / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    @contextlib.contextmanager
    def container(self, name: str) -> Iterator[None]:
        """Run the block as container `name`: the mount shows that container's view only."""
        outer = self.current
        self._views[outer] = _scan(self.mount)
        if name not in self._seen:  # a new container mounts the latest committed state
            self._views[name] = dict(self.committed)
            self._seen[name] = _digest(self.committed)
        self._materialize(self._views[name])
        self.current = name
        try:
            yield
        finally:
            self._views[name] = _scan(self.mount)
            self._materialize(self._views[outer])
            self.current = outer

    # -- from your machine -------------------------------------------------------------------
    @contextlib.contextmanager
    def batch_upload(self, force: bool = False):
        uploaded = self.uploaded

        def put_file(local: Any, remote: str) -> None:
            uploaded.append((Path(local), remote))
            self.committed[remote.lstrip("/")] = Path(local).read_bytes()

        def put_directory(local: Any, remote: str) -> None:
            uploaded.append((Path(local), remote))
            for rel, data in _scan(Path(local)).items():
                self.committed[f"{remote.strip('/')}/{rel}"] = data

        yield types.SimpleNamespace(put_file=put_file, put_directory=put_directory)

    def read_file(self, path: str) -> Iterator[bytes]:
        key = path.lstrip("/")
        if key not in self.committed:
            raise modal.exception.NotFoundError(f"No such file: {path}")
        yield self.committed[key]


# --------------------------------------------------------------------------------------------
# Sandbox
# --------------------------------------------------------------------------------------------

_CREATE_PARAMETERS = set(inspect.signature(modal.Sandbox.create).parameters) - {"args", "self"}
_EXEC_PARAMETERS = {"stdout", "stderr", "timeout", "workdir", "env", "secrets", "text", "bufsize", "pty"}


class _Reader:
    """modal.io_streams.StreamReader: iterating yields chunks as they arrive, until EOF."""

    def __init__(self, pipe: Any):
        self._pipe = pipe

    def __iter__(self) -> Iterator[bytes]:
        fd = self._pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            yield chunk

    def read(self) -> bytes:
        return b"".join(self)

    def close(self) -> None:
        pass


class _Writer:
    """modal.io_streams.StreamWriter: `write` buffers, `drain` sends, `write_eof` closes."""

    def __init__(self, pipe: Any, on_drain: Any = None):
        self._pipe, self._buffer, self._on_drain = pipe, b"", on_drain

    def write(self, data: bytes | str) -> None:
        self._buffer += data.encode() if isinstance(data, str) else bytes(data)

    def drain(self) -> None:
        data, self._buffer = self._buffer, b""
        if self._on_drain is not None:
            self._on_drain(data)  # may end the Sandbox: then this write fails, as on Modal
        self._pipe.write(data)
        self._pipe.flush()

    def write_eof(self) -> None:
        self._pipe.close()


class _Process:
    def __init__(self, popen: subprocess.Popen, on_drain: Any = None):
        self._popen = popen
        self.stdin = _Writer(popen.stdin, on_drain)
        self.stdout, self.stderr = _Reader(popen.stdout), _Reader(popen.stderr)

    def poll(self) -> int | None:
        code = self._popen.poll()
        return None if code is None else (128 - code if code < 0 else code)  # a shell's 128 + N

    def wait(self) -> int:
        self._popen.wait()
        return self.poll()

    @property
    def returncode(self) -> int | None:
        return self.poll()


class SandboxStandIn:
    """`modal.Sandbox` for tests: each `exec` is a local process; the Sandbox ends them all."""

    created: list["SandboxStandIn"] = []      # every Sandbox of the test, in order
    command_map: dict[tuple[str, ...], list[str]] = {}   # in-image argv -> local argv
    sent: list[bytes] = []                    # every request written to any REPL, in order
    die_on: bytes | None = None               # chaos: a request containing this ends its Sandbox...
    deaths_left = 0                           # ...this many times (then Sandboxes live)
    barrier: threading.Barrier | None = None  # create() waits here: proves Sandboxes start concurrently

    def __init__(self, kwargs: dict[str, Any]):
        self.kwargs = kwargs
        self.processes: list[_Process] = []
        self.pgids: list[int] = []
        self.returncode: int | None = None
        self.execs = 0
        self._timer = threading.Timer(kwargs.get("timeout") or 300, self._end, args=(-1,))
        self._timer.daemon = True
        self._timer.start()

    @classmethod
    def reset(cls, command_map: dict[tuple[str, ...], list[str]]) -> None:
        cls.created, cls.command_map, cls.sent = [], dict(command_map), []
        cls.die_on, cls.deaths_left, cls.barrier = None, 0, None

    @classmethod
    def create(cls, *args: str, **kwargs: Any) -> "SandboxStandIn":
        unknown = set(kwargs) - _CREATE_PARAMETERS
        if unknown:
            raise TypeError(f"Sandbox.create() got unexpected keyword arguments {sorted(unknown)}")
        if args:
            raise AssertionError("the stand-in runs REPLs through exec(), not as the entrypoint")
        if cls.barrier is not None:
            cls.barrier.wait()
        box = cls(kwargs)
        cls.created.append(box)
        return box

    def _on_drain(self, data: bytes) -> None:
        type(self).sent.append(data)
        cls = type(self)
        if cls.die_on is not None and cls.die_on in data and cls.deaths_left > 0:
            cls.deaths_left -= 1
            self._end(137)  # as if the OOM killer or Modal's timeout ended the whole Sandbox

    def exec(self, *args: str, **kwargs: Any) -> _Process:
        unknown = set(kwargs) - _EXEC_PARAMETERS
        if unknown:
            raise TypeError(f"Sandbox.exec() got unexpected keyword arguments {sorted(unknown)}")
        if self.returncode is not None:
            raise modal.exception.SandboxTerminatedError("Sandbox has already terminated")
        argv = list(args)
        if argv[:1] == ["python"] and "-c" in argv:  # our REPL wrapper: map the command it execs
            start = argv.index("-c") + 3  # -c SCRIPT LIMIT, then the command
            tail = tuple(argv[start:])
            argv = [sys.executable] + argv[1:start] + self.command_map.get(tail, list(tail))
        workdir = kwargs.get("workdir")
        cwd = None if workdir is None or not os.path.isdir(workdir) else workdir  # the image's dir is not here
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 cwd=cwd, start_new_session=True)
        process = _Process(popen, self._on_drain)
        self.processes.append(process)
        self.pgids.append(popen.pid)
        self.execs += 1
        return process

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, raise_on_termination: bool = True) -> None:
        while self.returncode is None:
            time.sleep(0.01)

    def terminate(self) -> None:
        self._end(-1 if self.returncode is None else self.returncode)

    def _end(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
        self._timer.cancel()
        everyone = [pid for root in self.pgids for pid in _descendants(root)]  # setsid's children too
        for pid in everyone:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(Exception):
                process._popen.wait(timeout=5)


def sandboxes_running(monkeypatch, fake_repl) -> Iterator[type[SandboxStandIn]]:
    """For a fixture (`yield from`): Lean verification goes to Sandbox stand-ins that run
    `fake_repl` for the image's REPL command; every Sandbox is terminated afterwards."""
    from prover_cli.on_modal import images, sandbox

    SandboxStandIn.reset({tuple(images.REPL_COMMAND): [sys.executable, str(fake_repl)]})
    monkeypatch.setattr(sandbox, "Sandbox", SandboxStandIn)
    yield SandboxStandIn
    for box in SandboxStandIn.created:
        box.terminate()
