"""A client for one leanprover-community/repl process: framing, deadlines, and killing it.

Protocol facts (from the real transcripts in `../shared/lean-repl-transcripts`):

- A request is one JSON object followed by a blank line. The REPL reads lines until an empty one
  and joins them *without* a separator, so a raw newline inside a JSON string would vanish
  (`by` + newline + `sorry` becomes `bysorry`). We send one line: `json.dumps` escapes newlines.
- A response is pretty-printed JSON over one or more lines, followed by one empty line.
- A command response always has an integer `env`; `messages` and `sorries` appear only when
  non-empty. A protocol error is `{"message": "…"}` with no `env` (`Unknown environment.`).

Every read has a deadline (poll on the pipe, never a blocking read), and so does every write (a
REPL that stops reading cannot block us on a full pipe). The process runs in its own session, so
`kill()` reaches `lake env repl` *and* the `repl` it started; it runs under an address-space limit.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import tempfile
import time
from typing import Any

from prover_cli.errors import BackendError

READ_CHUNK_BYTES = 1 << 16


class ReplFault(Exception):
    """The REPL did not answer properly. `kind` is the verdict: "timeout" or "error"."""

    kind = "error"


class ReplTimeout(ReplFault):
    kind = "timeout"


class ReplDied(ReplFault):
    """EOF: the process exited or closed its output."""


class ReplGarbage(ReplFault):
    """Output that is not a JSON response in the REPL framing."""


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------

def encode_request(request: dict[str, Any]) -> bytes:
    """One line of JSON (newlines escaped, so the REPL's line joining cannot change it) + a blank line."""
    return (json.dumps(request, ensure_ascii=False) + "\n\n").encode("utf-8")


def split_requests(text: str) -> list[str]:
    """What the REPL does with its input: lines up to an empty line, joined with no separator.
    (Used by tests on the transcripts' `.in` files; the stand-in REPL does the same on its own.)"""
    requests, current = [], []
    for line in text.split("\n"):
        if line.strip() == "":
            if current:
                requests.append("".join(current))
                current = []
        else:
            current.append(line)
    if current:
        requests.append("".join(current))
    return requests


class ResponseReader:
    """Incremental parser of REPL output: feed bytes, take complete responses.

    A response ends at the first empty line; the text before it must be one JSON value. Leading
    empty lines are skipped (nothing else may precede a response).
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def pending(self) -> bytes:
        return self._buffer

    def take(self) -> Any | None:
        """The next complete response, or None if more bytes are needed. Raises ReplGarbage."""
        while self._buffer.startswith(b"\n") or self._buffer.startswith(b"\r\n"):
            self._buffer = self._buffer[1:] if self._buffer[:1] == b"\n" else self._buffer[2:]
        end = self._find_blank_line()
        if end is None:
            return None
        raw, self._buffer = self._buffer[:end[0]], self._buffer[end[1]:]
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReplGarbage(f"REPL printed something that is not JSON ({exc}): "
                              f"{raw[:200].decode('utf-8', 'replace')!r}") from None

    def _find_blank_line(self) -> tuple[int, int] | None:
        for marker in (b"\n\n", b"\n\r\n"):
            k = self._buffer.find(marker)
            if k >= 0:
                return k + 1, k + len(marker)
        return None


def parse_responses(data: bytes) -> list[Any]:
    """All responses in a complete REPL output (e.g. a transcript's `.expected.out`)."""
    reader = ResponseReader()
    reader.feed(data)
    responses = []
    while (response := reader.take()) is not None:
        responses.append(response)
    if reader.pending().strip():
        raise ReplGarbage(f"incomplete response at the end: {reader.pending()[:200]!r}")
    return responses


# --------------------------------------------------------------------------------------------
# One process
# --------------------------------------------------------------------------------------------

class ReplProcess:
    """One REPL process. Not thread-safe: one thread drives it (the pool gives each worker its own)."""

    def __init__(self, command: list[str], project_dir: str = "", memory_limit_gb: float = 0.0):
        self.command = list(command)
        self.cwd = project_dir or None
        self.memory_limit_gb = memory_limit_gb
        self.header_envs: dict[str, int] = {}   # header text -> env where it ran
        self.proofs_done = 0
        self._proc: subprocess.Popen | None = None
        self._reader = ResponseReader()
        self._stderr = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        if self.cwd is not None and not os.path.isdir(self.cwd):
            raise BackendError(f"verify.project_dir = {self.cwd!r}: no such directory")
        # stderr goes to a file: a pipe nobody reads would fill and block the REPL.
        self._stderr = tempfile.TemporaryFile(prefix="prover-repl-stderr-")
        limit = int(self.memory_limit_gb * (1 << 30))
        try:
            self._proc = subprocess.Popen(
                self.command, cwd=self.cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, start_new_session=True,  # own process group: kill() gets children
                preexec_fn=(lambda: _limit_address_space(limit)) if limit > 0 else None,
            )
        except OSError as exc:
            self._stderr.close()
            raise BackendError(f"verify.repl_command = {self.command}: cannot start "
                               f"`{self.command[0]}`: {exc.strerror or exc}") from None
        os.set_blocking(self._proc.stdin.fileno(), False)
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._reader = ResponseReader()
        self.header_envs = {}
        self.proofs_done = 0

    def request(self, request: dict[str, Any], deadline: float) -> Any:
        """Send one request and return its response; ReplTimeout/ReplDied/ReplGarbage otherwise.

        After any fault the process is in an unknown state: the caller must `kill()` it.
        """
        if not self.alive:
            raise ReplDied(self._exit_description())
        if self._reader.pending().strip():
            raise ReplGarbage(f"REPL printed output nobody asked for: {self._reader.pending()[:200]!r}")
        self._write(encode_request(request), deadline)
        while True:
            response = self._reader.take()
            if response is not None:
                return response
            self._read_some(deadline)

    def _write(self, data: bytes, deadline: float) -> None:
        fd = self._proc.stdin.fileno()
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
                raise ReplDied(self._exit_description()) from None
            view = view[written:]

    def _read_some(self, deadline: float) -> None:
        fd = self._proc.stdout.fileno()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ReplTimeout("no answer before the deadline")
        if not _wait(fd, select.POLLIN, remaining):
            raise ReplTimeout("no answer before the deadline")
        try:
            chunk = os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            return
        if not chunk:
            raise ReplDied(self._exit_description())
        self._reader.feed(chunk)

    def _exit_description(self) -> str:
        code = None
        if self._proc is not None:
            try:
                code = self._proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                code = None
        what = "REPL closed its output" if code is None else f"REPL exited with code {code}"
        partial = self._reader.pending().strip()
        if partial:
            what += f" after printing {partial[:120]!r}"
        tail = self.stderr_tail()
        return what + (f"; stderr: {tail}" if tail else "")

    def stderr_tail(self, limit_chars: int = 300) -> str:
        if self._stderr is None or self._stderr.closed:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit_chars))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def signal_kill(self) -> None:
        """SIGKILL the process group without touching our pipes; safe from another thread (the
        thread driving this process then sees EOF, and calls `kill()` to clean up)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """Kill the whole process group and reap it. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.header_envs = {}


def _wait(fd: int, event: int, timeout_s: float) -> bool:
    """True when `fd` is ready for `event` (or hung up / in error: the next read or write says
    which) within `timeout_s`. poll, not select: select fails for descriptors above 1023."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0.0, timeout_s) * 1000.0))


def _limit_address_space(limit_bytes: int) -> None:
    # Runs in the child between fork and exec: one syscall, nothing imported or allocated there.
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
