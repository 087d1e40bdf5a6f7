"""One command in a fresh process with a directory of its own: data in, data out.

The kernel stage (`kernel/`) runs each of its steps this way: `lean -o` on one untrusted file,
and the checker on two `.olean` files. A step receives only bytes (the files in `inputs`), and
only bytes come back (its exit status, stdout, stderr, and the files named in `outputs`); no
process, pipe or environment object crosses from one step to the next.

    runner = LocalRunner(project_dir, memory_limit_gb=16)
    result = runner.run(["lake", "env", "lean", "--root={dir}", "-o", "{dir}/Proof.olean",
                         "{dir}/Proof.lean"], inputs={"Proof.lean": b"..."},
                        outputs=("Proof.olean",), timeout_s=300)

`{dir}` in an argument is the step's own directory. `LocalRunner` makes a new temporary
directory per call (removed afterwards) and runs the command in `project_dir` (where `lake env`
finds the Lean project) under the same wrapper as the REPL (`LocalTransport`: its own process
group, an address-space limit, killed with `prover` however `prover` dies), in the box
(`box.py`, `verify.box`): no network, the toolchain and the project (Mathlib) read-only, the
step's directory its only writable one; so the checker's step reads a library no `lean -o` of
untrusted text could write. A Modal runner gives each call a fresh Sandbox from the Lean image
instead (`on_modal/sandbox.py`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from prover_cli.errors import BackendError
from prover_cli.verify.lean.box import boxed, find_program, program_argv
from prover_cli.verify.lean.repl import ReplTimeout
from prover_cli.verify.lean.transport import LocalTransport, signal_name

MAX_OUTPUT_BYTES = 8 << 20      # stdout / stderr kept per step; beyond is cut (and said so)
MAX_FILE_BYTES = 1 << 30        # an output file larger than this is not read back


@dataclass
class RunResult:
    """How one step ended. `exit_code` is None when it did not exit by itself (killed, timed out)."""

    exit_code: int | None
    signal: int | None = None          # killed by this signal from outside (OOM killer, kill -9)
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    files: dict[str, bytes] = field(default_factory=dict)   # the requested outputs that exist
    wall_s: float = 0.0
    # peak resident memory of the step's process, KiB, where the runner measures it (the Modal
    # kernel Sandbox: ru_maxrss of RUSAGE_CHILDREN); None where not. `prover doctor` reads it.
    peak_rss_kib: int | None = None

    def describe(self) -> str:
        """One line: how it ended, for a verdict's reason."""
        if self.timed_out:
            return "no answer before the deadline (killed)"
        if self.signal is not None:
            return f"killed by {signal_name(self.signal)}"
        return f"exited with code {self.exit_code}"


class Runner(Protocol):
    def run(self, argv: list[str], inputs: dict[str, bytes], outputs: tuple[str, ...],
            timeout_s: float, what: str = "command") -> RunResult: ...


def _checked_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    return name


class LocalRunner:
    """Each call: a new temporary directory holding `inputs`, the command in a fresh process
    (run in `project_dir`, `{dir}` replaced by the directory), `outputs` read back, the
    directory removed."""

    def __init__(self, project_dir: str | None = None, memory_limit_gb: float = 0.0,
                 tmp_root: str | None = None, box: str = "bubblewrap"):
        self.project_dir = project_dir or None
        self.memory_limit_gb = memory_limit_gb
        self.tmp_root = tmp_root
        self.box = box   # verify.box: "bubblewrap", or "none" (the explicit opt-out)
        self._active: set = set()          # transports running now (kill_all)
        self._lock = threading.Lock()

    def kill_all(self) -> None:
        """SIGKILL every step running now (from any thread); each comes back as killed."""
        with self._lock:
            active = list(self._active)
        for transport in active:
            transport.signal_kill()

    def run(self, argv: list[str], inputs: dict[str, bytes], outputs: tuple[str, ...],
            timeout_s: float, what: str = "command") -> RunResult:
        """`what` names the config key the command comes from, for the error when it cannot start."""
        program = program_argv(argv)   # through `env NAME=VALUE` (kernel/pins.py CHECKER_ENV): env would start
        if program and "{dir}" not in program[0] and find_program(program[0], self.project_dir or os.getcwd()) is None:
            raise BackendError(f"{what} = {argv}: cannot start `{program[0]}`: not found",
                               hint="check it, and run `prover doctor`")
        workdir = tempfile.mkdtemp(prefix="prover-kernel-", dir=self.tmp_root)
        try:
            for name, data in inputs.items():
                Path(workdir, _checked_name(name)).write_bytes(data)
            command = boxed([arg.replace("{dir}", workdir) for arg in argv], self.box, self.project_dir,
                            writable=[workdir], what=what)
            transport = LocalTransport(command, self.project_dir, self.memory_limit_gb, what=what)
            start = time.monotonic()
            try:
                transport.start()
            except BackendError as exc:
                raise BackendError(str(exc), hint="check it, and run `prover doctor`") from None
            with self._lock:
                self._active.add(transport)
            try:
                stdout, timed_out = _read_until_eof(transport, start + timeout_s)
                code = None if timed_out else _exit_code(transport, start + timeout_s)
                signal_number = None if timed_out else transport.exit_signal()
                stderr = transport.stderr_text(MAX_OUTPUT_BYTES)
            finally:
                with self._lock:
                    self._active.discard(transport)
                transport.kill()
            wall_s = time.monotonic() - start
            if signal_number is not None:
                code = None
            files = {}
            for name in outputs:
                path = Path(workdir, _checked_name(name))
                if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                    files[name] = path.read_bytes()
            return RunResult(exit_code=code, signal=signal_number, timed_out=timed_out,
                             stdout=stdout, stderr=stderr, files=files, wall_s=wall_s)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def local_runner(verify_config) -> LocalRunner:
    """The kernel stage's local runner for a `[verify]` config: in `verify.project_dir`, under
    `verify.memory_limit_gb`, in the box `verify.box` asks for, directories under
    `default_tmp_root()`."""
    return LocalRunner(verify_config.project_dir or None, float(verify_config.memory_limit_gb),
                       default_tmp_root(), box=verify_config.box)


def _exit_code(transport, deadline: float) -> int | None:
    """The step's exit code once its stdout ended: waited for up to the step's deadline (a
    wrapper slow to exit on a loaded machine is no `exited with code None` error); None after it."""
    while True:
        code = transport.returncode()   # waits up to a second
        if code is not None or time.monotonic() >= deadline:
            return code


def _read_until_eof(transport, deadline: float) -> tuple[str, bool]:
    """All of stdout (up to MAX_OUTPUT_BYTES kept) until EOF, or (what came, True) at the deadline."""
    transport.close_stdin()   # the step reads no stdin: EOF at once
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = transport.read_some(deadline)
        except ReplTimeout:
            return _decode(chunks, size), True
        if not chunk:
            return _decode(chunks, size), False
        if size < MAX_OUTPUT_BYTES:
            chunks.append(chunk)
        size += len(chunk)


def _decode(chunks: list[bytes], size: int) -> str:
    text = b"".join(chunks)[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
    if size > MAX_OUTPUT_BYTES:
        text += f"\n[… {size - MAX_OUTPUT_BYTES} more bytes of output not kept]"
    return text


def default_tmp_root() -> str | None:
    """`$PROVER_KERNEL_TMP` when set (a disk with room for Mathlib-sized .olean files), else the
    system's temporary directory."""
    return os.environ.get("PROVER_KERNEL_TMP") or None
