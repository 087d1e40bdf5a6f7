"""A client for one leanprover-community/repl process: framing, deadlines, and killing it.

Protocol facts (from the real transcripts in `../shared/lean-repl-transcripts`):

- A request is one JSON object followed by a blank line. The REPL reads lines until an empty one
  and joins them *without* a separator, so a raw newline inside a JSON string would vanish
  (`by` + newline + `sorry` becomes `bysorry`). We send one line: `json.dumps` escapes newlines.
- A response is pretty-printed JSON over one or more lines, followed by one empty line.
- A command response always has an integer `env`; `messages` and `sorries` appear only when
  non-empty. A protocol error is `{"message": "…"}` with no `env` (`Unknown environment.`).

Every read has a deadline, and so does every write (a REPL that stops reading cannot block us on
a full pipe). Where the process runs and how it is killed is the transport's business
(`transport.py`: `LocalTransport` runs it in its own session under an address-space limit, and
makes it die with us); a local REPL runs in the box (`box.py`: no network, the library
read-only): `transport.BoxedLocalTransport`, which `local_transport_factory` makes.
"""

from __future__ import annotations

import json
from typing import Any

# The REPL's faults live in the transport layer below (its write and read_some raise them too);
# callers may import them from here as before (ReplFault: pool.py, the tests).
from prover_cli.verify.lean.transport import (BoxedLocalTransport, LocalTransport, ReplDied, ReplFault,  # noqa: F401
                                         ReplGarbage, ReplTimeout, Transport)


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------

def encode_request(request: dict[str, Any]) -> bytes:
    """One line of JSON (newlines escaped, so the REPL's line joining cannot change it) + a blank line."""
    return (json.dumps(request, ensure_ascii=False) + "\n\n").encode("utf-8")


def split_requests(text: str) -> list[str]:
    """What the REPL does with its input: lines up to an empty line, joined with no separator.
    (Used by tests on the transcripts' `.in` files; the stand-in REPL does the same on its own.)"""
    requests: list[str] = []
    current: list[str] = []
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
    """One REPL process over a `Transport`. Not thread-safe: one thread drives it (the pool gives
    each worker its own); only `signal_kill()` may be called from another thread.

    `ReplProcess(transport)`; `ReplProcess(command, project_dir, memory_limit_gb, box)` is the
    local shorthand for `ReplProcess(BoxedLocalTransport(command, project_dir, memory_limit_gb,
    box))`: the REPL in the box (`box.py`) unless `box="none"`.
    """

    def __init__(self, transport: "Transport | list[str]", project_dir: str = "",
                 memory_limit_gb: float = 0.0, box: str = "bubblewrap"):
        if isinstance(transport, (list, tuple)):
            transport = BoxedLocalTransport(list(transport), project_dir or None, memory_limit_gb, box)
        self.transport = transport
        self.header_envs: dict[str, int] = {}   # header text -> env where it ran
        self.trusted_envs: dict[tuple[str, str], tuple[int, str]] = {}   # (header, statement) -> (env, namespace)
        self.proofs_done = 0
        self._reader = ResponseReader()

    @property
    def pid(self) -> int | None:
        return self.transport.pid

    @property
    def alive(self) -> bool:
        return self.transport.alive

    def start(self) -> None:
        self.transport.start()
        self._reader = ResponseReader()
        self.header_envs = {}
        self.trusted_envs = {}
        self.proofs_done = 0

    def request(self, request: dict[str, Any], deadline: float) -> Any:
        """Send one request and return its response; ReplTimeout/ReplDied/ReplGarbage otherwise.

        After any fault the process is in an unknown state: the caller must `kill()` it.
        """
        if not self.alive:
            raise ReplDied(self._exit_description())
        if self._reader.pending().strip():
            raise ReplGarbage(f"REPL printed output nobody asked for: {self._reader.pending()[:200]!r}")
        self.transport.write(encode_request(request), deadline)
        while True:
            response = self._reader.take()
            if response is not None:
                return response
            chunk = self.transport.read_some(deadline)
            if not chunk:
                raise ReplDied(self._exit_description())
            self._reader.feed(chunk)

    def exit_signal(self) -> int | None:
        """The signal that killed the REPL, when it was killed by one (for the pool's retry)."""
        return self.transport.exit_signal()

    def _exit_description(self) -> str:
        what = self.transport.exit_description()
        partial = self._reader.pending().strip()
        if partial:
            head, sep, tail = what.partition("; stderr: ")
            what = head + f" after printing {partial[:120]!r}" + sep + tail
        return what

    def stderr_tail(self, limit_chars: int = 300) -> str:
        return self.transport.stderr_tail(limit_chars)

    def signal_kill(self) -> None:
        """SIGKILL the REPL without touching our pipes; safe from another thread (the thread
        driving this process then sees EOF, and calls `kill()` to clean up)."""
        self.transport.signal_kill()

    def kill(self) -> None:
        """Kill the REPL (its whole process group, locally) and release it. Safe to call twice."""
        self.transport.kill()
        self.header_envs = {}
        self.trusted_envs = {}
