"""Stand-ins for the two Modal objects our code drives directly: a Volume and a Sandbox.

Both follow the modal 1.6.4 client (modal/volume.py, modal/sandbox/, modal/container_process.py,
modal/io_streams.py), are at least as strict, and expose only attributes the real classes have
(tests/test_modal_standin_surface.py compares their public surface and signatures with the
installed SDK's). What a test steers or inspects is private (`_`) or lives in SANDBOXES.

VolumeStandIn (every Modal test uses it in place of `images.runs_volume` / `models_volume`):
- `reload()` raises RuntimeError with Modal's wording ("there are open files preventing the
  operation: cwd is inside volume", "... cwd of '<cmd>' is inside volume", "... path X is open";
  the first part is the server's message as far as the client shows it, the substring
  `Volume.reload` matches on, the rest the client's own annotation)
  when this process, or any process it started, has its cwd or an open file under the mount:
  the same /proc walk `modal.volume._open_files_error_annotation` makes;
- `commit()` persists, then reloads as the client does after a successful commit
  (`Volume.commit`: `_do_reload` unless the server says `skip_reload`): with a file or a cwd
  open inside the Volume it raises RuntimeError (the client re-raises the reload's error as
  `RuntimeError(str(exc))`, without the annotation). Stricter than Modal when the server skips
  that reload;
- what one "container" writes is seen by another only after the writer's `commit()` and the
  reader's `reload()` (`with volume._container("name"):` switches the mount to that container's
  view; a new container mounts the latest committed state, as Modal does at container start).
  Stricter than Modal: a reload never commits the caller's pending writes implicitly.
- `batch_upload` / `read_file` act on the committed state, as from your machine.

SandboxStandIn (`sandbox.Sandbox` in tests): `create(**kwargs)` records its arguments and
refuses unknown ones; `exec(*args, workdir=, text=)` runs the command as a local process
(`python` is this interpreter, `lake env repl` the REPL stand-in, tests/fake_repl.py) with
stdin/stdout/stderr streams shaped like modal's StreamWriter/StreamReader, and refuses any
program the Sandbox's image does not declare (plan/pins.py `executables`: no host `kill`);
`poll()` returns None, then 124 after the timeout or 137 after `terminate()`; either ends every
process of the Sandbox; `exec` on a finished Sandbox raises. `create` builds its image (below).

Apps and image builds (BUILDS; `apps_running` installs the app stand-in), after modal 1.6.4 and
modal-labs/modal-client@69519aef (py/modal/):
- `App.run()` creates every function and class registered on the app before its block runs
  (runner.py `_create_all_objects`: `{**local_app_state.functions, **local_app_state.classes}`),
  and creating one loads its dependencies, the image among them (_functions.py `_deps`): every
  image of the app is built, and a failed build raises ImageBuildError out of `run()`;
- `Sandbox.create(image=...)` loads (builds) its image when the Sandbox is created (sandbox.py
  `_Sandbox._create`, its `_load`); `app=` must be running (ValueError "App has not been
  initialized yet", sandbox/_common.py `_resolve_app_id_and_client`), and `app=None` outside a
  container is InvalidError: enforced while `apps_running` is installed (other tests create
  Sandboxes with no app stand-in running, as before);
- `Image.build()` without an app builds that image alone (_image.py `_Image.build`);
- a Function of an app that is not running cannot be called (`_Object._validate_is_hydrated`:
  ExecutionError "... because the App it is defined on is not running"): `FunctionStandIn`.
A build that fails (BUILDS.failing) raises ImageBuildError with the client's wording
(_image.py: "Image build for <id> failed.\nView the build logs: ..."); no build runs anything.
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

from conftest import PATIENCE_S

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
    """One Modal Volume mounted at `_mount`, shared by the "containers" of one test."""

    def __init__(self, mount: Path, name: str = "prover-ledgers"):
        self._mount = Path(mount)
        self._mount.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._committed: dict[str, bytes] = {}
        self._current = "main"
        self._seen: dict[str, dict[str, str]] = {"main": {}}  # per container: what its mount last synced
        self._views: dict[str, dict[str, bytes]] = {}
        self._commits = 0
        self._reloads = 0
        self._uploaded: list[tuple[Path, str]] = []

    # -- inside a container ------------------------------------------------------------------
    def commit(self) -> None:
        now = _scan(self._mount)
        seen = self._seen[self._current]
        for rel, data in now.items():
            if _digest({rel: data})[rel] != seen.get(rel):
                self._committed[rel] = data
        for rel in set(seen) - set(now):
            self._committed.pop(rel, None)
        self._seen[self._current] = _digest(now)
        self._commits += 1
        if open_files_annotation(self._mount):  # the reload that follows a commit meets an open file
            raise RuntimeError(OPEN_FILES)

    def reload(self) -> None:
        annotation = open_files_annotation(self._mount)
        if annotation:
            raise RuntimeError(f"{OPEN_FILES}: {annotation}")
        now = _scan(self._mount)
        seen = self._seen[self._current]
        pending = {rel: data for rel, data in now.items() if _digest({rel: data})[rel] != seen.get(rel)}
        deleted = set(seen) - set(now)
        view = {**self._committed, **pending}
        for rel in deleted:
            view.pop(rel, None)
        self._materialize(view)
        self._seen[self._current] = _digest(self._committed)
        self._reloads += 1

    def _materialize(self, files: dict[str, bytes]) -> None:
        for child in self._mount.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        for rel, data in files.items():
            path = self._mount / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

    @contextlib.contextmanager
    def _container(self, name: str) -> Iterator[None]:
        """Run the block as container `name`: the mount shows that container's view only."""
        outer = self._current
        self._views[outer] = _scan(self._mount)
        if name not in self._seen:  # a new container mounts the latest committed state
            self._views[name] = dict(self._committed)
            self._seen[name] = _digest(self._committed)
        self._materialize(self._views[name])
        self._current = name
        try:
            yield
        finally:
            self._views[name] = _scan(self._mount)
            self._materialize(self._views[outer])
            self._current = outer

    # -- from your machine -------------------------------------------------------------------
    @contextlib.contextmanager
    def batch_upload(self, force: bool = False):
        uploaded = self._uploaded

        def put_file(local: Any, remote: str) -> None:
            uploaded.append((Path(local), remote))
            self._committed[remote.lstrip("/")] = Path(local).read_bytes()

        def put_directory(local: Any, remote: str) -> None:
            uploaded.append((Path(local), remote))
            for rel, data in _scan(Path(local)).items():
                self._committed[f"{remote.strip('/')}/{rel}"] = data

        yield types.SimpleNamespace(put_file=put_file, put_directory=put_directory)

    def remove_file(self, path: str, recursive: bool = False) -> None:
        """`Volume.remove_file(path, recursive=False)` (modal 1.6.4): a file, or with `recursive`
        a directory and all below it; a path that is not there is NotFoundError. A directory
        without `recursive` is refused here (stricter than assuming the server removes it)."""
        key = path.strip("/")
        below = [rel for rel in self._committed if rel.startswith(key + "/")]
        if key in self._committed:
            del self._committed[key]
        elif below and recursive:
            for rel in below:
                del self._committed[rel]
        elif below:
            raise modal.exception.InvalidError(f"{path} is a directory: remove_file(..., recursive=True)")
        else:
            raise modal.exception.NotFoundError(f"No such file or directory: {path}")

    def read_file(self, path: str) -> Iterator[bytes]:
        key = path.lstrip("/")
        if key not in self._committed:
            raise modal.exception.NotFoundError(f"No such file: {path}")
        yield self._committed[key]


# --------------------------------------------------------------------------------------------
# Apps and image builds
# --------------------------------------------------------------------------------------------

class BuildControls:
    """The test's view of image builds and running apps (not part of Modal's surface)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.built: list[str] = []        # image names (images.IMAGES), one per load, in order
        self.failing: set[str] = set()    # image names whose build fails
        self.ran: list[str] = []          # names of the apps whose `run()` was entered
        self.detached: list[bool] = []    # each of those runs' `detach`

    enforce_apps = False                  # Sandbox.create checks its `app=` (set by apps_running)


BUILDS = BuildControls()


def image_name(image: Any) -> str:
    from prover_cli.on_modal import images

    return next((name for name, declared in images.IMAGES.items() if image is declared), "<undeclared image>")


def build_image(image: Any) -> str:
    """Load one image as the client does: its id, or ImageBuildError when the test made it fail."""
    name = image_name(image)
    image_id = f"im-standin-{name}"
    if name in BUILDS.failing:
        raise modal.exception.ImageBuildError(
            f"Image build for {image_id} failed.\nView the build logs:\n  modal image logs {image_id}", image_id)
    BUILDS.built.append(name)
    return image_id


def _impl(obj: Any) -> Any:
    from modal._utils.async_utils import synchronizer

    return synchronizer._translate_in(obj)


def app_images(app: Any) -> list[Any]:
    """Every image `app.run()` loads: those of every registered function and class (classes
    through their service function), as `_create_all_objects` indexes them."""
    state = _impl(app)._local_state
    objects = [*state.functions.values(), *(c._get_class_service_function() for c in state.classes.values())]
    return [synchronizer_out(o._spec.image) for o in objects if o._spec.image is not None]


def synchronizer_out(obj: Any) -> Any:
    from modal._utils.async_utils import synchronizer

    return synchronizer._translate_out(obj)


def app_of_function(function: Any) -> Any:
    """The app a Modal Function or Cls is registered on (the client's own record, `_app`)."""
    impl = _impl(function)
    if isinstance(function, modal.Cls):
        impl = impl._get_class_service_function()
    return synchronizer_out(impl._app)


def is_running(app: Any) -> bool:
    return _impl(app)._app_id is not None


@contextlib.contextmanager
def _app_run(self: Any, *, name: str | None = None, client: Any = None, detach: bool = False,
             interactive: bool = False, environment_name: str | None = None) -> Iterator[Any]:
    """`App.run()` (the signature of modal 1.6.4's): build every image of the app, then run the block."""
    for image in app_images(self):
        build_image(image)           # a failed build ends run() before its block, as on Modal
    impl = _impl(self)
    impl._app_id = f"ap-standin-{self.name}"
    BUILDS.ran.append(self.name)
    BUILDS.detached.append(detach)
    try:
        yield self
    finally:
        impl._app_id = None


def _image_build(self: Any, app: Any = None) -> Any:
    """`Image.build(app=None)`: this image alone; an `app` given must be running."""
    if app is not None and not is_running(app):
        raise modal.exception.InvalidError("App has not been initialized yet. Use the context manager `app.run()` "
                                           "or `App.lookup`")
    return types.SimpleNamespace(object_id=build_image(self))


def apps_running(monkeypatch) -> BuildControls:
    """Install the app and image-build stand-ins (on modal.App and modal.Image themselves)."""
    BUILDS.reset()
    monkeypatch.setattr(BUILDS, "enforce_apps", True)
    monkeypatch.setattr(modal.App, "run", _app_run)
    monkeypatch.setattr(modal.Image, "build", _image_build)
    return BUILDS


class FunctionStandIn:
    """A Modal Function (or a Cls method) of `app`: callable only while `app` runs, as on Modal;
    records its calls and returns `result`."""

    def __init__(self, app: Any, result: Any):
        self._app, self._result, self._calls, self._options = app, result, [], None

    def with_options(self, **options: Any) -> "FunctionStandIn":
        self._options = options
        return self

    def __call__(self, **parameters: Any) -> Any:   # a Cls: instantiated with its parameters
        return types.SimpleNamespace(generate_file=self)

    def _hydrated(self) -> None:
        if not is_running(self._app):
            raise modal.exception.ExecutionError("Function has not been hydrated with the metadata it needs to run "
                                                 "on Modal, because the App it is defined on is not running.")

    def remote(self, *args: Any) -> Any:
        self._hydrated()
        self._calls.append(("remote", args))
        return self._result

    def spawn(self, *args: Any) -> Any:
        self._hydrated()
        self._calls.append(("spawn", args))
        return types.SimpleNamespace(object_id="fc-standin", get=lambda: self._result)


# --------------------------------------------------------------------------------------------
# Sandbox
# --------------------------------------------------------------------------------------------
# Return codes as the modal 1.6.4 client reports them:
# - `Sandbox.poll()` / `.returncode` (modal/sandbox/_common.py, `_result_returncode`): None while
#   running, 124 once the Sandbox hit its timeout (GENERIC_STATUS_TIMEOUT), 137 once it was
#   terminated (GENERIC_STATUS_TERMINATED), else the exit code of its main process;
# - `Sandbox.wait()` (`raise_for_wait_result`): SandboxTimeoutError after a timeout,
#   SandboxTerminatedError after a terminate unless `raise_on_termination=False`;
# - `ContainerProcess.poll()` / `.wait()` (modal/container_process.py): the exit code, or
#   128 + N for a process ended by signal N; `.returncode` raises InvalidError until a poll or a
#   wait has seen the end.
# Only these codes come out of the stand-in. A Sandbox that dies under the test's chaos control
# (`die_on`) ends as terminated (137): the client shows the same code for any Sandbox Modal ends.

TIMEOUT_RETURNCODE = 124
TERMINATED_RETURNCODE = 137

_CREATE_PARAMETERS = set(inspect.signature(modal.Sandbox.create).parameters) - {"args", "self"}
_EXEC_PARAMETERS = set(inspect.signature(modal.Sandbox.exec).parameters) - {"args", "self"}


class ProgramNotInImage(Exception):
    """The stand-in's refusal (not a Modal error): `exec` of a program the Sandbox's image does
    not list in plan/pins.py's `executables`. Recorded in SANDBOXES.refused as well, so a caller that
    swallows the exception still fails its test."""


class SandboxControls:
    """The test's view of every Sandbox stand-in (not part of modal.Sandbox's surface)."""

    def __init__(self) -> None:
        self.reset({})

    def reset(self, command_map: dict[tuple[str, ...], list[str]]) -> None:
        self.created: list[SandboxStandIn] = []            # every Sandbox of the test, in order
        self.command_map = dict(command_map)               # in-image argv -> local argv
        self.sent: list[bytes] = []                        # every request written to any REPL
        self.die_on: bytes | None = None                   # chaos: a request containing this ends its Sandbox...
        self.deaths_left = 0                               # ...this many times (then Sandboxes live)
        self.barrier: threading.Barrier | None = None      # create() waits here: Sandboxes start concurrently
        self.refused: list[tuple[str, ...]] = []           # argv the stand-in refused to run
        self.ran: list[tuple[str, ...]] = []               # argv it ran, in the image's terms


SANDBOXES = SandboxControls()


def image_executables(image: Any) -> dict[str, str]:
    """What the Sandbox's image declares it has (plan/pins.py); nothing for an image we did not declare."""
    from prover_cli.on_modal import images

    for name, declared in images.IMAGES.items():
        if image is declared:
            return images.SPECS[name].executables
    return {}


class _Reader:
    """modal.io_streams.StreamReader: iterating yields chunks as they arrive, until EOF."""

    def __init__(self, pipe: Any, fd: int, text: bool):
        self._pipe, self._fd, self._text = pipe, fd, text

    @property
    def file_descriptor(self) -> int:
        return self._fd

    def __iter__(self) -> Iterator[Any]:
        fd = self._pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            yield chunk.decode("utf-8", "replace") if self._text else chunk

    def read(self) -> Any:
        return ("" if self._text else b"").join(self)


class _Writer:
    """modal.io_streams.StreamWriter: `write` buffers, `drain` sends, `write_eof` closes the
    stream once the buffered data is drained (modal: "This method needs to be used along with
    the `drain()` method, which flushes the EOF to the process")."""

    def __init__(self, pipe: Any, on_drain: Any = None):
        self._pipe, self._buffer, self._on_drain = pipe, b"", on_drain
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        self._buffer += data.encode() if isinstance(data, str) else bytes(data)

    def drain(self) -> None:
        data, self._buffer = self._buffer, b""
        if data or not self._eof:
            if self._on_drain is not None:
                self._on_drain(data)  # may end the Sandbox: then this write fails, as on Modal
            self._pipe.write(data)
            self._pipe.flush()
        if self._eof and not self._pipe.closed:
            self._pipe.close()

    def write_eof(self) -> None:
        self._eof = True


class _Process:
    """modal.container_process.ContainerProcess."""

    def __init__(self, popen: subprocess.Popen, on_drain: Any, text: bool):
        self._popen = popen
        self._returncode: int | None = None
        self.stdin = _Writer(popen.stdin, on_drain)
        self.stdout, self.stderr = _Reader(popen.stdout, 1, text), _Reader(popen.stderr, 2, text)

    def _seen(self, code: int | None) -> int | None:
        if code is not None:
            self._returncode = 128 - code if code < 0 else code  # killed by signal N: 128 + N
        return self._returncode

    def poll(self) -> int | None:
        return self._seen(self._popen.poll())

    def wait(self) -> int:
        return self._seen(self._popen.wait())

    @property
    def returncode(self) -> int:
        if self._returncode is None:
            raise modal.exception.InvalidError("You must call wait() before accessing the returncode. "
                                               "To poll for the status of a running process, use poll() instead.")
        return self._returncode


class SandboxStandIn:
    """`modal.Sandbox` for tests: each `exec` is a local process; the Sandbox ends them all.

    Only modal.Sandbox's own attributes are public (tests/test_modal_standin_surface.py); the
    test steers and inspects Sandboxes through SANDBOXES.
    """

    def __init__(self, kwargs: dict[str, Any]):
        self._kwargs = kwargs
        self._executables = image_executables(kwargs.get("image"))
        self._processes: list[_Process] = []
        self._roots: list[int] = []
        self._returncode: int | None = None
        self._created_s = time.monotonic()        # its lifetime, for tests: created ...
        self._ended_s: float | None = None        # ... and ended (terminated, timed out)
        self._timer = threading.Timer(kwargs.get("timeout") or 300, self._end, args=(TIMEOUT_RETURNCODE,))
        self._timer.daemon = True
        self._timer.start()

    @classmethod
    def create(cls, *args: str, **kwargs: Any) -> "SandboxStandIn":
        unknown = set(kwargs) - _CREATE_PARAMETERS
        if unknown:
            raise TypeError(f"Sandbox.create() got unexpected keyword arguments {sorted(unknown)}")
        if args:
            raise AssertionError("the stand-in runs REPLs through exec(), not as the entrypoint")
        if BUILDS.enforce_apps:
            app = kwargs.get("app")
            if app is None:
                raise modal.exception.InvalidError("Sandboxes require an App when created outside of a Modal container.")
            if not is_running(app):
                raise ValueError("App has not been initialized yet. To create an App lazily, use `App.lookup`")
        build_image(kwargs.get("image"))   # the Sandbox's image loads at create (a failed build raises here)
        if SANDBOXES.barrier is not None:
            SANDBOXES.barrier.wait()
        box = cls(kwargs)
        SANDBOXES.created.append(box)
        return box

    def _on_drain(self, data: bytes) -> None:
        SANDBOXES.sent.append(data)
        if SANDBOXES.die_on is not None and SANDBOXES.die_on in data and SANDBOXES.deaths_left > 0:
            SANDBOXES.deaths_left -= 1
            self._end(TERMINATED_RETURNCODE)  # as if Modal ended the whole Sandbox under the REPL

    def _require(self, argv: tuple[str, ...]) -> None:
        if not argv or argv[0] not in self._executables:
            SANDBOXES.refused.append(argv)
            raise ProgramNotInImage(f"{argv[:1]}: the Sandbox's image does not have this program "
                                    f"(it has {sorted(self._executables)})")

    def exec(self, *args: str, **kwargs: Any) -> _Process:
        unknown = set(kwargs) - _EXEC_PARAMETERS
        if unknown:
            raise TypeError(f"Sandbox.exec() got unexpected keyword arguments {sorted(unknown)}")
        if self._returncode is not None:
            raise modal.exception.SandboxTerminatedError("Sandbox has already terminated")
        argv = list(args)
        self._require(tuple(argv))
        if argv[:1] == ["python"] and "-c" in argv:  # our REPL wrapper: check and map the command it execs
            start = argv.index("-c") + 3  # -c SCRIPT LIMIT, then the command
            tail = tuple(argv[start:])
            if tail:
                self._require(tail)
            SANDBOXES.ran.append(tuple(argv))
            argv = [sys.executable] + argv[1:start] + SANDBOXES.command_map.get(tail, list(tail))
        else:
            SANDBOXES.ran.append(tuple(argv))
            argv = [sys.executable] + argv[1:] if argv[0] == "python" else argv
        workdir = kwargs.get("workdir")
        cwd = None if workdir is None or not os.path.isdir(workdir) else workdir  # the image's dir is not here
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 cwd=cwd, start_new_session=True)
        process = _Process(popen, self._on_drain, bool(kwargs.get("text", True)))
        self._processes.append(process)
        self._roots.append(popen.pid)
        return process

    def poll(self) -> int | None:
        return self._returncode

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def wait(self, raise_on_termination: bool = True) -> None:
        while self._returncode is None:
            time.sleep(0.01)
        if self._returncode == TIMEOUT_RETURNCODE:
            raise modal.exception.SandboxTimeoutError()
        if self._returncode == TERMINATED_RETURNCODE and raise_on_termination:
            raise modal.exception.SandboxTerminatedError()

    def terminate(self, *, wait: bool = False) -> int | None:
        self._end(TERMINATED_RETURNCODE)  # a no-op once it has ended
        return self._returncode if wait else None

    def _end(self, code: int) -> None:
        if self._returncode is None:
            self._returncode = code
            self._ended_s = time.monotonic()
        self._timer.cancel()
        everyone = [pid for root in self._roots for pid in _descendants(root)]  # setsid's children too
        for pid in everyone:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for process in self._processes:
            with contextlib.suppress(Exception):
                process._popen.wait(timeout=PATIENCE_S)   # SIGKILLed: reaped at once, however slow the machine


def kernel_command_map() -> dict[tuple[str, ...], list[str]]:
    """The kernel stage's steps in the image's terms -> its stand-ins (tests/fake_checker.py
    --as-lean for `lean -o`; the image's checker: tests/fake_checker.py for prover_check,
    tests/fake_safe_verify.py at a SafeVerify pin); `{dir}` stays for the step runner to fill."""
    from prover_cli.on_modal import images
    from prover_cli.verify.kernel.job import checker_argv, elaborate_argv

    tests = Path(__file__).resolve().parent
    pin = images.KERNEL_PIN
    mapping = {tuple(elaborate_argv(images.LEAN_COMMAND)): elaborate_argv(
        [sys.executable, str(tests / "fake_checker.py"), "--as-lean"])}   # fake_lean.py + the public attacks
    if pin is not None:
        stand_in = ([sys.executable, str(tests / "fake_checker.py")] if pin.dialect == "batch"
                    else [sys.executable, str(tests / "fake_safe_verify.py"), "--pin", pin.commit])
        mapping[tuple(checker_argv(images.KERNEL_CHECKER_COMMAND, pin))] = checker_argv(stand_in, pin)
    return mapping


def sandboxes_running(monkeypatch, fake_repl) -> Iterator[SandboxControls]:
    """For a fixture (`yield from`): Lean verification goes to Sandbox stand-ins that run
    `fake_repl` for the image's REPL command; every Sandbox is terminated afterwards, and the
    test fails if any code asked a Sandbox to run a program its image does not have."""
    from prover_cli.on_modal import images, sandbox

    SANDBOXES.reset({tuple(images.REPL_COMMAND): [sys.executable, str(fake_repl)], **kernel_command_map()})
    BUILDS.built.clear()
    monkeypatch.setattr(sandbox, "Sandbox", SandboxStandIn)
    yield SANDBOXES
    for box in SANDBOXES.created:
        box.terminate()
    refused, SANDBOXES.refused = SANDBOXES.refused, []
    assert not refused, f"a Sandbox was asked to run programs its image does not have: {refused}"
