"""The byte pipe under one REPL process: where the REPL runs is a transport, the protocol is not.

`repl.ReplProcess` does the framing, deadlines and verdict-relevant faults on top of any
`Transport`; `pool.ReplPool` makes one per worker with a `TransportFactory`. `LocalTransport`
runs the REPL as a local subprocess; a Modal Sandbox transport implements the same protocol
(see /work/coord/TRANSPORT.md for the agreement between the two).

LocalTransport:
- the process runs in its own session, so `kill()` reaches `lake env repl` *and* the `repl` it
  started (one `killpg`);
- it runs under an address-space limit (`verify.memory_limit_gb`, RLIMIT_AS);
- it dies with its parent: the command runs under `repl_watchdog.py`, which holds the read end of
  a pipe whose only write end we hold, and SIGKILLs the REPL's process group when that pipe
  reaches EOF, i.e. when we are gone, however we died (SIGKILL included). When the wrapper alone
  is killed, the REPL command gets `PR_SET_PDEATHSIG` and a sentinel forked by the wrapper kills
  the whole group, so `repl` under `lake env` dies too. The wrapper, not us, sets the
  parent-death signal because the kernel sends it when the *thread* that forked exits, and our
  pool starts processes from worker threads that end with each batch;
- a REPL killed by a signal (OOM killer, `kill -9`) is reported as such (`exit_signal()`), so the
  pool can retry the proof in a fresh process instead of blaming the proof;
- every read and write waits with `poll` against a deadline, never a blocking call.
"""

from __future__ import annotations

import os
import re
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Callable, Protocol, cast

from prover_cli.errors import BackendError
from prover_cli.verify.lean.box import boxed

READ_CHUNK_BYTES = 1 << 16

# Run as a script (`python -I -S`): standard library only, so it starts in milliseconds.
WATCHDOG_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repl_watchdog.py")


# The REPL's faults: a transport raises ReplTimeout past a deadline and ReplDied on a closed pipe;
# repl.py raises all of them (ReplGarbage for bad framing). Here, below both, so neither imports back.
class ReplFault(Exception):
    """The REPL did not answer properly. `kind` is the verdict: "timeout" or "error"."""

    kind = "error"


class ReplTimeout(ReplFault):
    kind = "timeout"


class ReplDied(ReplFault):
    """EOF: the process exited or closed its output."""


class ReplGarbage(ReplFault):
    """Output that is not a JSON response in the REPL framing."""


class Transport(Protocol):
    """A byte pipe to one REPL process; framing, deadlines and verdicts stay in repl.py/pool.py above it."""

    def start(self) -> None: ...
    def write(self, data: bytes, deadline: float) -> None: ...
    def read_some(self, deadline: float) -> bytes: ...
    @property
    def alive(self) -> bool: ...
    @property
    def pid(self) -> int | None: ...
    def exit_description(self) -> str: ...
    def exit_signal(self) -> int | None: ...
    def stderr_tail(self, limit_chars: int = 300) -> str: ...
    def signal_kill(self) -> None: ...
    def kill(self) -> None: ...


TransportFactory = Callable[[], Transport]   # returns a new, not yet started transport


def local_transport_factory(verify_config) -> TransportFactory:
    """LocalTransports from `verify.repl_command`, `verify.project_dir`, `verify.memory_limit_gb`,
    each REPL in the box `verify.box` asks for (box.py; a BackendError at start when it cannot be made)."""
    command = list(verify_config.repl_command)
    cwd = verify_config.project_dir or None
    limit_gb = float(verify_config.memory_limit_gb)
    box = verify_config.box
    return lambda: BoxedLocalTransport(command, cwd, limit_gb, box)


class LocalTransport:
    """The REPL as a local subprocess (see the module docstring for what it guarantees)."""

    def __init__(self, command: list[str], cwd: str | None = None, memory_limit_gb: float = 0.0,
                 what: str = "verify.repl_command"):
        self.what = what   # the config key the command comes from, for error messages
        self.command = list(command)
        self.cwd = cwd or None
        self.memory_limit_gb = memory_limit_gb
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._watchdog_w: int | None = None   # our end of the watchdog pipe: closing it kills the REPL
        self._repl_pgid: int | None = None    # the REPL's own process group (the wrapper reports it)
        self._we_killed = False               # signal_kill() was ours: not a death "from outside"

    @property
    def _started(self) -> subprocess.Popen[bytes]:
        """The process start() made, typed as such: before start() or after kill() it is None and
        the caller's attribute access fails, as it always did (a cast, no check added)."""
        return cast("subprocess.Popen[bytes]", self._proc)

    @property
    def pid(self) -> int | None:
        """The wrapper's pid; the REPL itself is `repl_pid`."""
        return self._proc.pid if self._proc else None

    @property
    def repl_pid(self) -> int | None:
        return self._repl_pgid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise BackendError(f"verify.project_dir = {self.cwd!r}: no such directory")
        if not self.command:
            raise BackendError(f"{self.what} is empty")
        # stderr goes to a file: a pipe nobody reads would fill and block the REPL.
        self._stderr = tempfile.TemporaryFile(prefix="prover-repl-stderr-")
        limit = int(self.memory_limit_gb * (1 << 30))
        watch_r, watch_w = os.pipe()
        os.set_inheritable(watch_r, True)
        argv = [sys.executable, "-I", "-S", WATCHDOG_SCRIPT, str(watch_r), "--", *self.command]
        try:
            self._proc = subprocess.Popen(
                argv, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, start_new_session=True,  # own process group: kill() gets children
                pass_fds=(watch_r,),
                preexec_fn=(lambda: _limit_address_space(limit)) if limit > 0 else None,
            )
        except OSError as exc:
            os.close(watch_r)
            os.close(watch_w)
            self._stderr.close()
            raise BackendError(f"{self.what} = {self.command}: cannot start "
                               f"`{self.command[0]}`: {exc.strerror or exc}") from None
        os.close(watch_r)
        self._watchdog_w = watch_w
        self._we_killed = False
        os.set_blocking(cast(IO[bytes], self._started.stdin).fileno(), False)
        os.set_blocking(cast(IO[bytes], self._started.stdout).fileno(), False)
        self._check_started()

    def _check_started(self) -> None:
        """The wrapper reports a command it cannot exec on stderr and exits 127: say so now."""
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            code = self._started.poll()
            raw = self._raw_stderr(2000)
            if code == 127 and "repl_watchdog: cannot start:" in raw:
                why = raw.split("repl_watchdog: cannot start:", 1)[1].strip()
                self.kill()
                raise BackendError(f"{self.what} = {self.command}: cannot start "
                                   f"`{self.command[0]}`: {why}")
            started = re.search(r"repl_watchdog: started (\d+)\n", raw)
            if started:
                self._repl_pgid = int(started.group(1))
                return
            if code is not None:
                return   # exited at once: the first request reports how
            time.sleep(0.002)
        self.kill()
        raise BackendError(f"{self.what} = {self.command}: the process wrapper did not start "
                           "within 5 s")

    def write(self, data: bytes, deadline: float) -> None:
        fd = cast(IO[bytes], self._started.stdin).fileno()
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ReplTimeout("REPL did not accept the request before the deadline")
            if not _wait(fd, select.POLLOUT, remaining):
                continue
            try:
                written = os.write(fd, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise ReplDied(self.exit_description()) from None
            view = view[written:]

    def read_some(self, deadline: float) -> bytes:
        fd = cast(IO[bytes], self._started.stdout).fileno()
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not _wait(fd, select.POLLIN, remaining):
            raise ReplTimeout("no answer before the deadline")
        while True:
            try:
                return os.read(fd, READ_CHUNK_BYTES)   # b"" is EOF
            except BlockingIOError:   # woken without data: wait again, against the same deadline
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not _wait(fd, select.POLLIN, remaining):
                    raise ReplTimeout("no answer before the deadline") from None

    def close_stdin(self) -> None:
        """EOF on the process's stdin (for one-shot commands that read none: `isolated.py`)."""
        if self._proc is not None and self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass

    def returncode(self) -> int | None:
        """The wrapper's exit code (the command's, or 128 + N after a signal); None while running."""
        return self._returncode()

    def stderr_text(self, limit_chars: int) -> str:
        """The last `limit_chars` of the command's stderr, without the wrapper's own lines."""
        text = self._raw_stderr(limit_chars)
        return "\n".join(line for line in text.splitlines() if not line.startswith("repl_watchdog: "))

    def _returncode(self) -> int | None:
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return None

    def exit_signal(self) -> int | None:
        """The signal that killed the REPL from outside (reported by the wrapper as exit code
        128 + N); None when it exited by itself, is alive, or when we killed it."""
        return None if self._we_killed else self._raw_exit_signal()

    def _raw_exit_signal(self) -> int | None:
        code = self._returncode()
        if code is None:
            return None
        if code < 0:
            return -code
        if code > 128 and f"repl_watchdog: killed by signal {code - 128}" in self._raw_stderr(4000):
            return code - 128
        return None

    def exit_description(self) -> str:
        return describe_exit(self._returncode(), self._raw_exit_signal(), self.stderr_tail())

    def _raw_stderr(self, limit_chars: int) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit_chars))
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def stderr_tail(self, limit_chars: int = 300) -> str:
        text = self._raw_stderr(limit_chars * 4)
        # The wrapper's own bookkeeping lines are not the REPL's stderr.
        text = "\n".join(line for line in text.splitlines() if not line.startswith("repl_watchdog: "))
        return text.strip()[-limit_chars:]

    def signal_kill(self) -> None:
        """SIGKILL the REPL's process group without touching our pipes; safe from another thread
        (the thread driving this process then sees EOF, and calls `kill()` to clean up)."""
        proc, group = self._proc, self._repl_pgid
        if proc is not None and proc.poll() is None and group is not None:
            self._we_killed = True
            _killpg(group)

    def kill(self) -> None:
        """Kill the REPL's process group and reap all of it. Safe to call twice.

        The wrapper reaps the REPL and everything it started (it is their subreaper) and then
        exits, so once we have reaped the wrapper no process of this REPL is left.
        """
        proc, self._proc = self._proc, None
        group, self._repl_pgid = self._repl_pgid, None
        if proc is not None:
            if group is not None:
                _killpg(group)
            for stream in (proc.stdin, proc.stdout):   # both pipes (PIPE above): never None
                try:
                    cast(IO[bytes], stream).close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a wrapper stuck in the kernel
                _killpg(proc.pid)
                if group is not None:
                    _killpg(group)
                proc.wait()
        if self._watchdog_w is not None:
            try:
                os.close(self._watchdog_w)
            except OSError:
                pass
            self._watchdog_w = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _killpg(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def describe_exit(code: int | None, signal_number: int | None, stderr_tail: str) -> str:
    """How a REPL ended, in one line (shared with the Modal Sandbox transport)."""
    if signal_number is not None:
        what = f"REPL killed by {signal_name(signal_number)}"
    elif code is None:
        what = "REPL closed its output"
    else:
        what = f"REPL exited with code {code}"
    return what + (f"; stderr: {stderr_tail}" if stderr_tail else "")


def signal_name(number: int) -> str:
    """`SIGKILL` for 9; shared with the Modal Sandbox transport."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _limit_address_space(limit_bytes: int) -> None:
    # Runs in the child between fork and exec: one syscall, nothing imported or allocated there.
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def _wait(fd: int, event: int, timeout_s: float) -> bool:
    """True when `fd` is ready for `event` (or hung up / in error: the next read or write says
    which) within `timeout_s`. poll, not select: select fails for descriptors above 1023."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout_s) * 1000.0))


class BoxedLocalTransport(LocalTransport):
    """A LocalTransport whose command is put in the box (`box.py`) at each start, so a box that
    cannot be made is a BackendError where a program that cannot start is one: at start, after
    the verdicts that need no REPL are written. `command` is the box's argv once started."""

    def __init__(self, command: list[str], cwd: str | None = None, memory_limit_gb: float = 0.0,
                 box: str = "bubblewrap", what: str = "verify.repl_command"):
        super().__init__(command, cwd, memory_limit_gb, what=what)
        self.box = box
        self.unboxed_command = list(command)

    def start(self) -> None:
        if self.cwd is None or os.path.isdir(self.cwd):   # else LocalTransport names the missing directory
            self.command = boxed(self.unboxed_command, self.box, self.cwd, what=self.what)
        super().start()
