# # Verification in Modal Sandboxes
#
# Every REPL process the library's pool starts runs in a `modal.Sandbox` of its own, created from
# the Lean image with no network, no Volumes, no secrets, hard CPU and memory limits and a
# timeout, and ended when the process is killed or recycled. `SandboxTransport` carries the REPL
# protocol over the exec'd process's stdin/stdout (the `Transport` seam of
# prover_cli/verify/lean/transport.py), and the library's `verify_file` / `verify_records` get it through
# their placement seam (prover_cli/verify/placement.py, `verification_placement` below). So
# deadlines, recycling, the verdict rules, the summary and the resume are exactly those of a local
# run; only where the bytes go changes.
#
# A Sandbox that dies (its timeout, the OOM killer, a lost worker) takes only its in-flight proof
# with it: that is a REPL killed from outside, which the pool retries once in a fresh process, so
# in a fresh Sandbox, before its verdict is written. A Sandbox that cannot be created (after one
# more try) stops the run with a BackendError, as a local REPL that cannot start does: no verdict
# claims anything about those proofs, and a rerun resumes from the verdict file.
#
# The kernel stage (prover_cli/verify/kernel/) runs each of its steps — `lean -o` on one proof,
# the trusted target, SafeVerify on two .olean files — in a fresh Sandbox of its own from the same
# image (`SandboxRunner`): the files go in on the step's stdin and come back on its stdout, so a
# step receives only data, and the checker's Sandbox has never run untrusted text.
#
# What only stand-ins exercise here: tests drive this code with tests/modal_standin.py, whose
# Sandbox runs tests/fake_repl.py (and the kernel stage's stand-ins) as local processes. No test
# has created a real Sandbox.

import base64
import dataclasses
import json
import math
import queue
import signal
import threading
import time
from collections import deque
from typing import Any, Callable

import modal

from prover_cli.config import WORKERS_MAX, Config, VerifyConfig
from prover_cli.errors import BackendError
from prover_cli.on_modal.images import (
    KERNEL_CHECKER_COMMAND,
    LEAN_COMMAND,
    LEAN_PROJECT_DIR,
    LEAN_TOOLCHAIN,
    MATHLIB_REV,
    REPL_COMMAND,
    kernel_image,
    lean_image,
    sandbox_app,
)
from prover_cli.on_modal.plan import MAX_TIMEOUT_S, kernel_step_size, resources
from prover_cli.on_modal.plan.verification import verification_batches
from prover_cli.verify.kernel.isolated import RunResult
from prover_cli.verify.kernel.pins import effective_kernel_workers
from prover_cli.verify.lean.repl import ReplDied, ReplTimeout
from prover_cli.verify.lean.transport import describe_exit
from prover_cli.verify.placement import Placement

# Looked up at call time, so tests can put the Sandbox stand-in here.
Sandbox = modal.Sandbox

STARTUP_TIMEOUT_S = 180.0  # a Sandbox is scheduled, then the image starts: seconds, rarely minutes
CREATE_ATTEMPTS = 2        # Sandbox capacity comes and goes: one more try before the run stops


def sandbox_arguments(config: Config, timeout_s: int | None = None) -> dict[str, Any]:
    """Everything `Sandbox.create` gets for one REPL process, from the plan: one REPL's share of a
    verification batch's cores and memory (`kernel_step_size`), the batch's timeout (or `timeout_s`)."""
    r = resources(config)["verify_sandbox"]
    if timeout_s is not None:
        r = dataclasses.replace(r, timeout_s=timeout_s)
    cpu, memory_mb = kernel_step_size(config)
    return dict(
        app=sandbox_app(),                        # images.py: the container's own app, or the Lean app
        image=lean_image,
        workdir=LEAN_PROJECT_DIR,
        block_network=True,                       # a proof cannot reach anything: Lean needs no network
        volumes={},                               # nor read a run directory or another proof
        secrets=[],                               # nor any credential
        cpu=(cpu, cpu),                           # (request, limit): modal.verify_cpus / verify.workers
        memory=(memory_mb, memory_mb),            # (request, limit) MiB: a runaway REPL cannot starve others
        timeout=r.timeout_s,                      # header + a REPL's proofs of a batch at their timeout, then killed
    )


class SandboxBox:
    """A Sandbox for REPL processes: created on first use, replaced when it has died."""

    def __init__(self, config: Config, timeout_s: int | None = None):
        self.arguments = sandbox_arguments(config, timeout_s)
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
            for attempt in range(1, CREATE_ATTEMPTS + 1):
                if self.sandbox is not None:
                    break
                try:
                    self.sandbox = Sandbox.create(**self.arguments)
                except Exception as exc:  # Modal's own errors: say which call failed
                    if attempt == CREATE_ATTEMPTS:
                        raise BackendError(f"cannot create a verification Sandbox ({attempt} tries): "
                                           f"{type(exc).__name__}: {exc}") from None
                    continue
                self.created += 1
            return self.sandbox

    def dead(self, sandbox: Any) -> bool:
        return sandbox is not None and sandbox.poll() is not None

    def died_on_its_own(self, sandbox: Any) -> bool:
        """Ended, and not by our `terminate()`: a timeout, the OOM killer, a lost worker."""
        return self.dead(sandbox) and not any(sandbox is ours for ours in self._ours)

    def transport(self) -> "SandboxTransport":
        """A TransportFactory: a new, unstarted REPL pipe in this box's Sandbox (shared by every pipe it makes)."""
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
    stalls. With `own_sandbox`, the box is this process's alone: killing the process ends the
    Sandbox, so the next start (a restart, a recycle) gets a fresh one.
    """

    def __init__(self, box: SandboxBox, command: list[str], workdir: str, memory_limit_gb: float = 0.0,
                 own_sandbox: bool = False):
        self.box, self.command, self.workdir = box, command, workdir
        self.memory_limit_gb = memory_limit_gb
        self.own_sandbox = own_sandbox
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
        """SIGKILL the REPL's process group inside the Sandbox (its own Sandbox: end that); safe
        from another thread."""
        if self.own_sandbox:
            if self._sandbox is not None and not self.box.dead(self._sandbox):
                self._killed_by_us = True
                self.box.terminate()
            return
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
        if self._proc is not None and not self._closed:
            self.signal_kill()
            self._closed = True
        if self.own_sandbox:
            self.box.terminate()   # also after a start that failed once its Sandbox existed


# ## The kernel stage's steps, each in a fresh Sandbox

def kernel_sandbox_arguments(config: Config) -> dict[str, Any]:
    """`Sandbox.create` arguments of one kernel-stage step: the kernel image (images.py: the Lean
    image's toolchain and Mathlib with the checker, so a checker that does not build stays out of
    the fast path's image), no network, no Volumes, no secrets; one REPL's share of the
    verification Sandbox's cores and memory."""
    r = resources(config)["kernel_sandbox"]
    return dict(app=sandbox_app(), image=kernel_image, workdir=LEAN_PROJECT_DIR, block_network=True, volumes={}, secrets=[],
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
    result["max_rss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux: the step's peak
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
    its input files on stdin and giving back its outputs on stdout, terminated afterwards.
    `batches_at_once`: checker batches the kernel stage runs beside each other (KernelStage reads
    it; second_stage in verify/kernel/batching.py): the call's verification batches, each with its
    own kernel stage as the plan prices it, their steps within verify.kernel_check_workers."""

    canary_key = "modal-sandbox"

    def __init__(self, config: Config, batches_at_once: int = 1):
        self.config = config
        self.batches_at_once = max(1, batches_at_once)
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
                             wall_s=time.monotonic() - start, peak_rss_kib=result.get("max_rss_kib"))
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


# ## Where verification runs on Modal: the library's placement seam (prover_cli/verify/placement.py)
#
# `prover verify --backend modal` and the RL reward run the library's own `verify_file` and
# `verify_records`; functions.py enters one of these placements around them, so only where the
# REPLs and the kernel stage's steps run changes. The planned concurrency is kept by mapping the
# `[modal]` keys onto the pool (docs/modal.md): the proofs make ceil(proofs / modal.verify_batch_size)
# batches, at most modal.verify_max_containers at once, each worth verify.workers REPL processes,
# so the pool gets verify.workers x batches processes (and the kernel stage as many steps at a
# time per batch as before, and one checker batch at a time per batch: `batches` side by side),
# each in a Sandbox of one REPL's share of modal.verify_cpus and modal.verify_memory_gb, recycled
# after the proofs one REPL of a batch would have checked, so the Sandbox's timeout (header +
# those proofs at their timeout) bounds every process, and ended after its last proof of the call
# (a REPL's Sandbox idling while the others and the kernel stage finish would be billed). The plan
# counts exactly this, event by event (on_modal/plan/verification.py).

def _check_image_versions(verify_config: VerifyConfig) -> None:
    """Fail closed if the config names other Lean versions than the image has."""
    if (verify_config.lean_toolchain, verify_config.mathlib_rev) != (LEAN_TOOLCHAIN, MATHLIB_REV):
        raise BackendError(
            f"verify.lean_toolchain = {verify_config.lean_toolchain!r}, verify.mathlib_rev = "
            f"{verify_config.mathlib_rev!r}, but the Lean image has {LEAN_TOOLCHAIN!r} and {MATHLIB_REV!r}",
            hint="set PROVER_LEAN_TOOLCHAIN / PROVER_MATHLIB_REV to the config values and rerun (the image rebuilds)")


def _sandbox_verify_config(verify_config: VerifyConfig) -> Any:
    """The image's REPL, Lean project and kernel-stage commands; the image's Lean versions."""
    _check_image_versions(verify_config)
    return dataclasses.replace(verify_config, repl_command=list(REPL_COMMAND), project_dir=LEAN_PROJECT_DIR,
                               lean_command=list(LEAN_COMMAND), kernel_checker_command=list(KERNEL_CHECKER_COMMAND))


def _kernel_verify_config(verify_config: VerifyConfig) -> Any:
    """Kimina elaborates on its server: only the kernel stage's commands and project are the image's."""
    _check_image_versions(verify_config)
    return dataclasses.replace(verify_config, project_dir=LEAN_PROJECT_DIR, lean_command=list(LEAN_COMMAND),
                               kernel_checker_command=list(KERNEL_CHECKER_COMMAND))


def batches_sized(config: Config, placed: VerifyConfig) -> int:
    """The batches `sandbox_concurrency` sized `placed` for, read back from its kernel steps at once."""
    return max(1, effective_kernel_workers(placed) // effective_kernel_workers(config.verify))


def sandbox_concurrency(config: Config, verify_config: VerifyConfig, proofs: int | None) -> Any:
    """`verify_config` with the pool sized as the plan's batches (see the section's comment);
    `proofs` None (not known yet): as many batches as may run at once."""
    m = config.modal
    batches = verification_batches(config, proofs)
    proofs_per_repl = math.ceil(m.verify_batch_size / verify_config.workers)   # one REPL's share of a batch
    return dataclasses.replace(
        verify_config,
        workers=min(WORKERS_MAX, verify_config.workers * batches),
        kernel_check_workers=min(WORKERS_MAX, effective_kernel_workers(verify_config) * batches),
        max_proofs_per_process=min(verify_config.max_proofs_per_process, proofs_per_repl))


def repl_sandboxes(config: Config, timeout_s: int | None = None) -> Callable[[], "SandboxTransport"]:
    """A TransportFactory: every REPL process the pool starts gets a Sandbox of its own, created
    when it starts and ended when it is killed or recycled. A Sandbox that dies under a proof is a
    REPL killed from outside: the pool's one retry in a fresh process runs in a fresh Sandbox."""
    memory_limit_gb = float(config.verify.memory_limit_gb)

    def transport() -> SandboxTransport:
        return SandboxTransport(SandboxBox(config, timeout_s), list(REPL_COMMAND), LEAN_PROJECT_DIR, memory_limit_gb,
                                own_sandbox=True)

    return transport


def verification_placement(config: Config) -> Any:
    """Where this config's Lean verification runs on Modal: with the REPL backend, every REPL in a
    Sandbox and every kernel-stage step in another; with Kimina (its server elaborates), only the
    kernel stage's steps, in fresh Sandboxes. Both use the image's commands and fail closed when
    the config names other Lean versions than the image has (at the first verification)."""
    if config.verify.backend == "repl":
        return Placement(
            where="modal sandboxes",
            configure=lambda verify, proofs: sandbox_concurrency(config, _sandbox_verify_config(verify), proofs),
            transport_factory=lambda verify: repl_sandboxes(config),
            # a kernel stage per batch: the batches' checker batches run beside each other
            kernel_runner=lambda verify: SandboxRunner(config, batches_at_once=batches_sized(config, verify)),
            keep_warm=False)   # a REPL's Sandbox would be billed while it idles: each ends after its last proof
    return Placement(where="modal kernel sandboxes",
                     configure=lambda verify, proofs: _kernel_verify_config(verify),
                     kernel_runner=lambda verify: SandboxRunner(config))


def warm_share_timeout_s(config: Config) -> int:
    """A warm share REPL's Sandbox lives through its share: the header, then up to
    `verify.max_proofs_per_process` proofs at their timeout (the pool recycles it there), within
    Modal's ceiling. A backstop only: each read has its own deadline, and the share's end ends it."""
    v = config.verify
    return int(min(MAX_TIMEOUT_S, v.header_timeout_s + v.max_proofs_per_process * (v.timeout_s + 5) + 120))


def warm_share_placement(config: Config) -> Any:
    """Where one share of the pipelined ES schedule verifies (pipeline.py): `verify.workers` REPL
    Sandboxes kept warm through the share, so each imports the header once per iteration, not once
    per member, and is recycled only by `verify.max_proofs_per_process`; they end with the share
    (verification_at closes the warm pools made under it). This is what the plan bills
    (`plan.es_lean_workers`: `verify.workers` workers per generating GPU, up the whole iteration)."""
    timeout_s = warm_share_timeout_s(config)
    return Placement(
        where="modal sandboxes, warm through one ES share",
        configure=lambda verify, proofs: _sandbox_verify_config(verify),   # verify.workers processes, as configured
        transport_factory=lambda verify: repl_sandboxes(config, timeout_s),
        kernel_runner=lambda verify: SandboxRunner(config),
        keep_warm=True)
