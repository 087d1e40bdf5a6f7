# # Verification in Modal Sandboxes
#
# Each batch of proofs runs in its own `modal.Sandbox`, created from the Lean image with no
# network, no Volumes, no secrets, hard CPU and memory limits and a timeout. The library's own
# REPL pool drives it: every pool worker's REPL is one process `exec`ed in the batch's Sandbox,
# and `SandboxTransport` carries the REPL protocol over that process's stdin/stdout (the
# `Transport` seam of prover_cli/verify/transport.py). So deadlines, recycling and the verdict
# rules are exactly those of a local run; only where the bytes go changes.
#
# A Sandbox that dies (its timeout, the OOM killer, a lost worker) takes only its in-flight proofs
# with it: the pool retries each once in a fresh REPL, which starts in a fresh Sandbox, before
# their verdict is written (see `verify_batch`).
#
# The kernel stage (prover_cli/verify/kernel.py) runs each of its steps — `lean -o` on one proof,
# the trusted target, SafeVerify on two .olean files — in a fresh Sandbox of its own from the same
# image (`SandboxRunner`): the files go in on the step's stdin and come back on its stdout, so a
# step receives only data, and the checker's Sandbox has never run untrusted text.
#
# What only stand-ins exercise here: tests drive this code with tests/modal_standin.py, whose
# Sandbox runs tests/fake_repl.py (and the kernel stage's stand-ins) as local processes. No test
# has created a real Sandbox.

import concurrent.futures
import dataclasses
import json
import queue
import signal
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import modal

from prover_cli.errors import BackendError, InputError
from prover_cli.on_modal.images import (
    KERNEL_CHECKER_COMMAND,
    LEAN_COMMAND,
    LEAN_PROJECT_DIR,
    LEAN_TOOLCHAIN,
    MATHLIB_REV,
    REPL_COMMAND,
    app,
    lean_image,
)
from prover_cli.on_modal.plan import resources
from prover_cli.progress import NULL_REPORTER
from prover_cli.verify.transport import describe_exit

# Looked up at call time, so tests can put the Sandbox stand-in here.
Sandbox = modal.Sandbox

STARTUP_TIMEOUT_S = 180.0  # a Sandbox is scheduled, then the image starts: seconds, rarely minutes


def sandbox_arguments(config: Any) -> dict[str, Any]:
    """Everything `Sandbox.create` gets for one verification batch, from the plan's resources."""
    r = resources(config)["verify_sandbox"]
    return dict(
        app=app,
        image=lean_image,
        workdir=LEAN_PROJECT_DIR,
        block_network=True,                       # a proof cannot reach anything: Lean needs no network
        volumes={},                               # nor read a run directory or another proof
        secrets=[],                               # nor any credential
        cpu=(r.cpu, r.cpu),                       # (request, limit): verify.workers REPLs share these cores
        memory=(r.memory_mb, r.memory_mb),        # (request, limit) MiB: a runaway REPL cannot starve others
        timeout=r.timeout_s,                      # header + every proof at its own timeout, then killed
    )


class SandboxBox:
    """The Sandbox of one verification batch: created on first use, replaced when it has died."""

    def __init__(self, config: Any):
        self.arguments = sandbox_arguments(config)
        self.memory_limit_gb = float(config.verify.memory_limit_gb)
        self.sandbox: Any = None
        self.created = 0
        self.deaths = 0   # Sandboxes found dead before we terminated them
        self._ours: list[Any] = []  # Sandboxes we terminated ourselves
        self._lock = threading.Lock()

    def ensure(self) -> Any:
        with self._lock:
            if self.sandbox is not None and self.sandbox.poll() is not None:
                self.deaths += 1
                self.sandbox = None
            if self.sandbox is None:
                try:
                    self.sandbox = Sandbox.create(**self.arguments)
                except Exception as exc:  # Modal's own errors: say which call failed
                    raise BackendError(f"cannot create a verification Sandbox: {type(exc).__name__}: {exc}") from None
                self.created += 1
            return self.sandbox

    def dead(self, sandbox: Any) -> bool:
        return sandbox is not None and sandbox.poll() is not None

    def died_on_its_own(self, sandbox: Any) -> bool:
        """Ended, and not by our `terminate()`: a timeout, the OOM killer, a lost worker."""
        return self.dead(sandbox) and not any(sandbox is ours for ours in self._ours)

    def transport(self) -> "SandboxTransport":
        """A TransportFactory: a new, unstarted REPL pipe in this batch's Sandbox."""
        return SandboxTransport(self, list(REPL_COMMAND), LEAN_PROJECT_DIR, self.memory_limit_gb)

    def terminate(self) -> None:
        with self._lock:
            sandbox, self.sandbox = self.sandbox, None
        if sandbox is None:
            return
        if sandbox.poll() is not None:
            self.deaths += 1
            return
        self._ours.append(sandbox)
        try:
            sandbox.terminate()
        except Exception:  # already gone: nothing left to stop
            pass


# Runs in the Sandbox before the REPL: its own process group (so one signal reaches `lake` and
# the `repl` it starts), RLIMIT_AS as LocalTransport sets it, its pid on the first line, then exec.
REPL_WRAPPER = """import os, resource, sys
try:
    os.setpgid(0, 0)
except OSError:
    pass
limit = int(sys.argv[1])
if limit > 0:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.stdout.write(str(os.getpid()) + chr(10))
sys.stdout.flush()
os.execvp(sys.argv[2], sys.argv[2:])
"""


# Ends the REPL's process group from inside the Sandbox with the image's own Python. `exec` takes
# a plain argv (no shell, so no shell builtin `kill`), and the image has no /bin/kill: that is
# procps, which a slim image lacks (plan.BASE_EXECUTABLES). A group already gone is not an error.
KILL_GROUP = """import os, signal, sys
try:
    os.killpg(int(sys.argv[1]), signal.SIGKILL)
except ProcessLookupError:
    pass
"""


class SandboxTransport:
    """One REPL process in a Sandbox, as a `Transport`: bytes over the exec'd process's stdin/stdout.

    The process starts through REPL_WRAPPER: its own process group, verify.memory_limit_gb as
    RLIMIT_AS, and its pid printed first so `signal_kill` can reach it. Reads and writes go
    through threads, so every call honours its deadline even when the network to the Sandbox
    stalls.
    """

    def __init__(self, box: SandboxBox, command: list[str], workdir: str, memory_limit_gb: float = 0.0):
        self.box, self.command, self.workdir = box, command, workdir
        self.memory_limit_gb = memory_limit_gb
        self._sandbox: Any = None
        self._proc: Any = None
        self._remote_pid: str | None = None
        self._chunks: queue.Queue = queue.Queue()
        self._pending = b""
        self._eof = False
        self._stderr: deque[bytes] = deque(maxlen=64)
        self._closed = False
        self._killed_by_us = False

    # -- start ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or, after `kill()`, restart) the REPL: in the batch's Sandbox, or a fresh one if it died."""
        self._chunks, self._pending, self._eof, self._closed = queue.Queue(), b"", False, False
        self._stderr.clear()
        self._remote_pid = None
        self._killed_by_us = False
        self._sandbox = self.box.ensure()
        limit_bytes = int(self.memory_limit_gb * (1 << 30))
        try:
            self._proc = self._sandbox.exec("python", "-I", "-S", "-c", REPL_WRAPPER, str(limit_bytes), *self.command,
                                            workdir=self.workdir, text=False)
        except Exception as exc:
            raise BackendError(f"cannot start `{' '.join(self.command)}` in the verification Sandbox: "
                               f"{type(exc).__name__}: {exc}") from None
        threading.Thread(target=self._pump, args=(self._proc.stdout, self._chunks.put, True), daemon=True,
                         name="sandbox-stdout").start()
        threading.Thread(target=self._pump, args=(self._proc.stderr, self._stderr.append, False), daemon=True,
                         name="sandbox-stderr").start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while b"\n" not in self._pending:
            chunk = self._next_chunk(deadline, startup=True)
            if not chunk:
                raise BackendError(f"`{' '.join(self.command)}` ended before it started in the verification "
                                   f"Sandbox: {self.exit_description()}")
            self._pending += chunk
        pid, _, self._pending = self._pending.partition(b"\n")
        self._remote_pid = pid.decode("ascii", "replace").strip()

    @staticmethod
    def _pump(stream: Any, put: Callable[[Any], None], mark_eof: bool) -> None:
        try:
            for chunk in stream:
                if chunk:
                    put(chunk if isinstance(chunk, bytes) else chunk.encode("utf-8"))
        except Exception:  # the Sandbox went away: EOF is what the reader sees
            pass
        if mark_eof:
            put(None)

    def _next_chunk(self, deadline: float, *, startup: bool = False) -> bytes:
        from prover_cli.verify.repl import ReplTimeout

        if self._eof:
            return b""
        try:
            chunk = self._chunks.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            if startup:
                raise BackendError(f"the verification Sandbox did not start `{' '.join(self.command)}` within "
                                   f"{STARTUP_TIMEOUT_S:g} s") from None
            raise ReplTimeout("no answer before the deadline") from None
        if chunk is None:
            self._eof = True
            return b""
        return chunk

    # -- the Transport protocol -----------------------------------------------------------
    def write(self, data: bytes, deadline: float) -> None:
        from prover_cli.verify.repl import ReplDied, ReplTimeout

        failure: list[BaseException] = []

        def send() -> None:
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.drain()
            except Exception as exc:
                failure.append(exc)

        sender = threading.Thread(target=send, daemon=True, name="sandbox-stdin")
        sender.start()
        sender.join(max(0.0, deadline - time.monotonic()))
        if sender.is_alive():
            raise ReplTimeout("the Sandbox did not accept the request before the deadline")
        if failure:
            raise ReplDied(self.exit_description())

    def read_some(self, deadline: float) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        return self._next_chunk(deadline)

    @property
    def alive(self) -> bool:
        if self._proc is None or self._closed or self._eof:
            return False
        return self._proc.poll() is None and not self.box.dead(self._sandbox)

    @property
    def pid(self) -> int | None:
        return None  # the process lives in the Sandbox, not on this machine

    def _sandbox_ended(self) -> bool:
        return self.box.dead(self._sandbox)

    def _returncode(self) -> int | None:
        """The exit code once the process has ended; after EOF, wait up to 1 s for it to be known."""
        if self._proc is None:
            return None
        deadline = time.monotonic() + (1.0 if self._eof else 0.0)
        while True:
            code = self._proc.poll()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(0.01)

    def exit_signal(self) -> int | None:
        """The signal that ended the REPL from outside (the pool retries such a proof once);
        None after our own `signal_kill()` or `terminate()`, which are verdicts, not accidents."""
        if self.box.died_on_its_own(self._sandbox):
            return int(signal.SIGKILL)  # the Sandbox was killed under it: not the proof's doing
        if self._killed_by_us or self._sandbox_ended():
            return None
        return _signal_of(self._returncode())

    def exit_description(self) -> str:
        tail = self.stderr_tail()
        if self._sandbox_ended():
            what = f"the verification Sandbox ended (exit code {self._sandbox.poll()}: timeout, memory or terminated)"
            return what + (f"; stderr: {tail}" if tail else "")
        code = self._returncode()
        return describe_exit(code, _signal_of(code), tail)

    def stderr_tail(self, limit_chars: int = 300) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace").strip()[-limit_chars:]

    def signal_kill(self) -> None:
        """SIGKILL the REPL's process group inside the Sandbox; safe from another thread."""
        sandbox, pid = self._sandbox, self._remote_pid
        if sandbox is None or not pid or not pid.isdigit() or self.box.dead(sandbox):
            return
        self._killed_by_us = True
        try:
            code = sandbox.exec("python", "-I", "-S", "-c", KILL_GROUP, pid, text=False).wait()
        except Exception as exc:  # the Sandbox is gone, and the REPL with it
            code, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = f"exit code {code}"
        if code != 0 and not self.box.dead(sandbox):  # say so: the exit description shows it
            self._stderr.append(f"[prover: could not end process group {pid} in the Sandbox: {why}]".encode())

    def kill(self) -> None:
        """Kill the REPL; safe to call twice, or before `start()`. Its streams end with it (EOF),
        which ends the reader threads."""
        if self._proc is None or self._closed:
            return
        self.signal_kill()
        self._closed = True


# ## The kernel stage's steps, each in a fresh Sandbox

def kernel_sandbox_arguments(config: Any) -> dict[str, Any]:
    """`Sandbox.create` arguments of one kernel-stage step: the Lean image, no network, no
    Volumes, no secrets; one REPL's share of the verification Sandbox's cores and memory."""
    r = resources(config)["kernel_sandbox"]
    return dict(app=app, image=lean_image, workdir=LEAN_PROJECT_DIR, block_network=True, volumes={}, secrets=[],
                cpu=(r.cpu, r.cpu), memory=(r.memory_mb, r.memory_mb), timeout=r.timeout_s)


# Runs in the step's Sandbox: reads {"inputs": {name: base64}, "outputs": [...], "timeout_s": S}
# on stdin, writes the inputs into a new directory, runs the command (`{dir}` in an argument is
# that directory) in its own process group under RLIMIT_AS, kills the group at the deadline, and
# prints one JSON line: exit code or signal, stdout and stderr, the outputs that exist (base64).
STEP_RUNNER = """import base64, json, os, resource, signal, subprocess, sys, tempfile
spec = json.loads(sys.stdin.buffer.read().decode("utf-8"))
limit = int(sys.argv[1])
folder = tempfile.mkdtemp(prefix="prover-kernel-")
for name, data in spec["inputs"].items():
    with open(os.path.join(folder, name), "wb") as handle:
        handle.write(base64.b64decode(data))
argv = [arg.replace("{dir}", folder) for arg in sys.argv[2:]]
def limits():
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
result = {"exit_code": None, "signal": None, "timed_out": False}
try:
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True, preexec_fn=limits)
except OSError as exc:
    result["start_error"] = str(exc)
else:
    try:
        out, err = child.communicate(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        result["timed_out"] = True
    if child.returncode < 0:
        result["signal"] = -child.returncode
    else:
        result["exit_code"] = child.returncode
    keep = 8 << 20
    result["stdout"] = base64.b64encode(out[:keep]).decode("ascii")
    result["stderr"] = base64.b64encode(err[-keep:]).decode("ascii")
    files = {}
    for name in spec["outputs"]:
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.path.getsize(path) <= (1 << 30):
            with open(path, "rb") as handle:
                files[name] = base64.b64encode(handle.read()).decode("ascii")
    result["files"] = files
sys.stdout.write(json.dumps(result) + chr(10))
sys.stdout.flush()
"""


class SandboxRunner:
    """`isolated.Runner` over Modal: every `run` is a fresh Sandbox from the Lean image, given
    its input files on stdin and giving back its outputs on stdout, terminated afterwards."""

    canary_key = "modal-sandbox"

    def __init__(self, config: Any):
        self.config = config
        self.arguments = kernel_sandbox_arguments(config)
        self.memory_limit_gb = float(config.verify.memory_limit_gb)
        self._active: set[Any] = set()
        self._lock = threading.Lock()

    def kill_all(self) -> None:
        with self._lock:
            active = list(self._active)
        for box in active:
            try:
                box.terminate()
            except Exception:  # already gone
                pass

    def run(self, argv: list[str], inputs: dict[str, bytes], outputs: tuple[str, ...], timeout_s: float,
            what: str = "command") -> Any:
        import base64

        from prover_cli.verify.isolated import RunResult

        spec = json.dumps({"inputs": {k: base64.b64encode(v).decode("ascii") for k, v in inputs.items()},
                           "outputs": list(outputs), "timeout_s": timeout_s}).encode("utf-8")
        start = time.monotonic()
        try:
            box = Sandbox.create(**self.arguments)
        except Exception as exc:
            raise BackendError(f"cannot create a kernel-stage Sandbox: {type(exc).__name__}: {exc}") from None
        with self._lock:
            self._active.add(box)
        try:
            limit_bytes = int(self.memory_limit_gb * (1 << 30))
            try:
                proc = box.exec("python", "-I", "-S", "-c", STEP_RUNNER, str(limit_bytes), *argv,
                                workdir=LEAN_PROJECT_DIR, text=False)
                proc.stdin.write(spec)
                proc.stdin.write_eof()
                proc.stdin.drain()
            except Exception as exc:
                if box.poll() is not None:
                    return RunResult(exit_code=None, signal=int(signal.SIGKILL), wall_s=time.monotonic() - start)
                raise BackendError(f"{what}: cannot start `{' '.join(argv)}` in a kernel-stage Sandbox: "
                                   f"{type(exc).__name__}: {exc}") from None
            answer: list[bytes] = []
            reader = threading.Thread(target=lambda: answer.append(_read_all(proc.stdout)), daemon=True,
                                      name="kernel-sandbox-stdout")
            reader.start()
            reader.join(timeout_s + STARTUP_TIMEOUT_S)
            if reader.is_alive():
                return RunResult(exit_code=None, timed_out=True, wall_s=time.monotonic() - start)
            try:
                result = json.loads(answer[0].decode("utf-8"))
            except (IndexError, UnicodeDecodeError, ValueError):
                if box.poll() is not None:   # the Sandbox ended under the step (timeout, memory, terminated)
                    return RunResult(exit_code=None, signal=int(signal.SIGKILL), wall_s=time.monotonic() - start)
                return RunResult(exit_code=None, signal=None, stderr="the kernel-stage Sandbox gave no answer",
                                 wall_s=time.monotonic() - start)
            if "start_error" in result:
                raise BackendError(f"{what} = {argv}: cannot start `{argv[0]}` in the kernel-stage Sandbox: "
                                   f"{result['start_error']}")
            return RunResult(exit_code=result["exit_code"], signal=result["signal"], timed_out=result["timed_out"],
                             stdout=base64.b64decode(result["stdout"]).decode("utf-8", "replace"),
                             stderr=base64.b64decode(result["stderr"]).decode("utf-8", "replace"),
                             files={k: base64.b64decode(v) for k, v in result["files"].items()},
                             wall_s=time.monotonic() - start)
        finally:
            with self._lock:
                self._active.discard(box)
            try:
                box.terminate()
            except Exception:  # already gone
                pass


def _read_all(stream: Any) -> bytes:
    chunks = []
    try:
        for chunk in stream:
            chunks.append(chunk if isinstance(chunk, bytes) else chunk.encode("utf-8"))
    except Exception:  # the Sandbox went away: what came is what there is
        pass
    return b"".join(chunks)


def _signal_of(code: int | None) -> int | None:
    """The signal an exit code reports: -N (a process killed by N), or 128 + N (the shell's way)."""
    if code is not None and code < 0:
        return -code
    if code is not None and code > 128:
        return code - 128
    return None


# ## The two entry points to Lean, with each batch in a Sandbox

def _check_image_versions(verify_config: Any) -> None:
    """Fail closed if the config names other Lean versions than the image has."""
    if (verify_config.lean_toolchain, verify_config.mathlib_rev) != (LEAN_TOOLCHAIN, MATHLIB_REV):
        raise BackendError(
            f"verify.lean_toolchain = {verify_config.lean_toolchain!r}, verify.mathlib_rev = "
            f"{verify_config.mathlib_rev!r}, but the Lean image has {LEAN_TOOLCHAIN!r} and {MATHLIB_REV!r}",
            hint="set PROVER_LEAN_TOOLCHAIN / PROVER_MATHLIB_REV to the config values and rerun (the image rebuilds)")


def _sandbox_verify_config(verify_config: Any) -> Any:
    """The image's REPL, Lean project and kernel-stage commands; the image's Lean versions."""
    _check_image_versions(verify_config)
    return dataclasses.replace(verify_config, repl_command=list(REPL_COMMAND), project_dir=LEAN_PROJECT_DIR,
                               lean_command=list(LEAN_COMMAND), kernel_checker_command=list(KERNEL_CHECKER_COMMAND))


def kernel_stage_in_sandboxes(config: Any, library_function: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """`verify_records` (kind "records") or `verify_file` (kind "file") for the Kimina backend on
    Modal: the server elaborates as before, and the kernel stage's steps run in fresh Sandboxes
    from the Lean image (whose Lean must be the configured one), with the image's commands."""
    if kind == "file":
        def verify_file(cfg: Any, **kwargs: Any) -> Any:
            cfg = dataclasses.replace(cfg, verify=_kernel_verify_config(cfg.verify))
            return library_function(cfg, **{**kwargs, "kernel_runner": SandboxRunner(config)})
        return verify_file

    def verify_records(records: list[dict[str, Any]], verify_config: Any, *args: Any, **kwargs: Any) -> Any:
        return library_function(records, _kernel_verify_config(verify_config), *args,
                                **{**kwargs, "kernel_runner": SandboxRunner(config)})
    return verify_records


def _kernel_verify_config(verify_config: Any) -> Any:
    _check_image_versions(verify_config)
    return dataclasses.replace(verify_config, project_dir=LEAN_PROJECT_DIR, lean_command=list(LEAN_COMMAND),
                               kernel_checker_command=list(KERNEL_CHECKER_COMMAND))


def _error_verdict(record: dict[str, Any], exc: BaseException, verify: Any) -> dict[str, Any]:
    """A batch that failed twice: every proof in it is an `error`, never a silent 0. The line is
    built by the library's own `verdict_record`, so it has every field a verdict has."""
    from prover_cli.verify.engine import verdict_record, verifier_identity
    from prover_cli.verify.rules import Verdict

    reason = f"modal: verification Sandbox failed twice: {type(exc).__name__}: {exc}"
    return verdict_record(record, Verdict(status="error", reason=reason), verifier_identity(verify))


def _verify_records_with(records: list[dict[str, Any]], verify_config: Any, transport_factory: Any,
                         kernel_runner: Any = None) -> list[dict[str, Any]]:
    """The library's `verify_records` (its non-warm path), on REPLs from `transport_factory`, the
    kernel stage's steps on `kernel_runner`."""
    from prover_cli.verify.engine import Verifier

    with Verifier(verify_config, transport_factory=transport_factory, kernel_runner=kernel_runner) as verifier:
        return verifier.verify(list(records))


def verify_batch(config: Any, records: list[dict[str, Any]], verify_config: Any) -> list[dict[str, Any]]:
    """Verdicts of one batch, its REPLs in one Sandbox.

    A Sandbox that dies under a proof ends that REPL with a signal we did not send, so the pool
    retries just that proof once in a fresh process, which `SandboxBox.ensure` starts in a fresh
    Sandbox; proofs already checked keep their verdicts. A Sandbox that cannot start, or dies
    during the header (a BackendError: no verdict is known), costs the batch one more attempt in
    a fresh Sandbox; after that its proofs get `error` verdicts naming the failure.
    """
    verify_config = _sandbox_verify_config(verify_config)
    failure: BackendError | None = None
    for _ in range(2):
        box = SandboxBox(config)
        try:
            return _verify_records_with(records, verify_config, box.transport, SandboxRunner(config))
        except BackendError as exc:
            failure = exc
        finally:
            box.terminate()
    return [_error_verdict(record, failure, verify_config) for record in records]


def verify_records_in_sandboxes(config: Any) -> Callable[..., list[dict[str, Any]]]:
    """`verify_records` with the library's signature: batches of `modal.verify_batch_size`
    records, each in its own Sandbox, all batches at once (up to `modal.verify_max_containers`)."""

    def verify_records(records: list[dict[str, Any]], verify_config: Any, reporter: Any = NULL_REPORTER, *,
                       keep_warm: bool = False, transport_factory: Any = None,
                       kernel_runner: Any = None) -> list[dict[str, Any]]:
        # keep_warm is moot: a Sandbox lives for one batch. transport_factory, kernel_runner: we choose them.
        records = list(records)
        size = config.modal.verify_batch_size
        batches = [records[i:i + size] for i in range(0, len(records), size)]
        if not batches:
            return []
        verdicts: list[dict[str, Any]] = []
        workers = min(len(batches), config.modal.verify_max_containers)
        with reporter.task("verify in Modal Sandboxes", total=len(records), unit="proofs") as task:
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="sandbox-batch") as pool:
                futures = [pool.submit(verify_batch, config, batch, verify_config) for batch in batches]
                for batch, future in zip(batches, futures):
                    verdicts.extend(future.result())
                    task.advance(len(batch))
        return verdicts

    return verify_records


def verify_file_in_sandboxes(config: Any, library_verify_file: Callable[..., Any]) -> Callable[..., dict[str, Any]]:
    """`verify_file` with the library's signature: the proofs file is cut into shards of
    `modal.verify_batch_size` lines (`<out>.shards/lines-<first>-<last>.jsonl`), each verified by
    the library's own `verify_file` with its REPLs in one Sandbox, all shards at once; then the
    shard verdicts are joined, in input order, into `out_path`. Rerunning resumes shard by shard.
    Deaths are handled as in `verify_batch`; a shard whose Sandbox fails twice gets `error`
    verdicts in `out_path` only (its own verdict file keeps what was checked), so the next run
    retries exactly those proofs."""

    def run_shard(cfg: Any, shard: Path) -> dict[str, Any]:
        out = shard.with_suffix(".verdicts.jsonl")
        for attempt in (1, 2):
            box = SandboxBox(cfg)
            try:
                return library_verify_file(cfg, proofs_path=shard, out_path=out, transport_factory=box.transport,
                                           kernel_runner=SandboxRunner(cfg))
            except BackendError:  # the Sandbox could not start, or died in the header: resume once more
                if attempt == 2:
                    raise
            finally:
                box.terminate()
        raise AssertionError("unreachable")

    def verify_file(cfg: Any, *, proofs_path: Path, out_path: Path | None = None, reporter: Any = NULL_REPORTER,
                    transport_factory: Any = None, kernel_runner: Any = None) -> dict[str, Any]:
        proofs_path = Path(proofs_path)
        out_path = Path(out_path) if out_path is not None else proofs_path.with_name(proofs_path.stem + ".verdicts.jsonl")
        if not proofs_path.exists():
            raise InputError(f"{proofs_path}: proofs file not found on the runs Volume")
        cfg = dataclasses.replace(cfg, verify=_sandbox_verify_config(cfg.verify))
        lines = proofs_path.read_text(encoding="utf-8").splitlines(keepends=True)
        shard_dir = out_path.with_name(out_path.name + ".shards")
        size = cfg.modal.verify_batch_size
        shards = []
        for start in range(0, len(lines), size):
            chunk = "".join(lines[start:start + size])
            shard = shard_dir / f"lines-{start + 1:07d}-{min(start + size, len(lines)):07d}.jsonl"
            if not shard.exists() or shard.read_text(encoding="utf-8") != chunk:
                write_atomic(shard, chunk)
            shards.append(shard)

        workers = max(1, min(len(shards), cfg.modal.verify_max_containers))
        results: list[Any] = []
        with reporter.task("verify in Modal Sandboxes", total=len(shards), unit="shards") as task:
            with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="sandbox-shard") as pool:
                futures = [pool.submit(run_shard, cfg, shard) for shard in shards]
                for future in futures:
                    try:
                        results.append(future.result())
                    except Exception as exc:  # this shard only; the others go on
                        results.append(exc)
                    task.advance(1)

        joined: list[str] = []
        failed = 0
        ok = True
        for shard, result in zip(shards, results):
            if isinstance(result, BaseException):
                failed += 1
                for line in shard.read_text(encoding="utf-8").splitlines():
                    record = json_or_none(line) or {"id": None, "line": line[:200]}
                    joined.append(json.dumps(_error_verdict(record, result, cfg.verify), ensure_ascii=False) + "\n")
                continue
            ok = ok and result.get("ok", True) is not False
            joined.extend(line + "\n" for line in
                          shard.with_suffix(".verdicts.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
        write_atomic(out_path, "".join(joined))

        counts: dict[str, int] = {}
        for line in joined:
            verdict = (json_or_none(line) or {}).get("verdict", "unreadable")
            counts[verdict] = counts.get(verdict, 0) + 1
        return {
            "ok": ok and failed == 0,
            "proofs": len(lines),
            "shards": len(shards),
            "failed_shards": failed,
            "out_path": str(out_path),
            **counts,
            "tables": [{"title": f"verify in Modal Sandboxes: {proofs_path}",
                        "columns": ["verdict", "count"], "rows": sorted(counts.items())}],
        }

    return verify_file


def json_or_none(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def write_atomic(path: Path, text: str) -> None:
    from prover_cli.jsonl import write_text_atomic  # the package's one atomic-file writer

    write_text_atomic(path, text)
