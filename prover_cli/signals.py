"""One signal policy for every command: SIGTERM and SIGHUP stop a command the way Ctrl-C does.

    with stop_signals_as_interrupt():     # cli.py wraps every command in it
        run_the_command()

SIGTERM is what `kill`, `timeout`, `docker stop` and job schedulers send; SIGHUP is what a closed
terminal or SSH session sends. Left to Python's defaults both end the process on the spot: no
exit status of our own, no resume command, and REPL processes reaped only by their watchdog.
Here each becomes a KeyboardInterrupt in the main thread, so every command stops through the
same path as Ctrl-C: the `with`/`finally` blocks run (REPLs killed, writers closed), everything
already written stays (JSONL lines are flushed one by one, ledgers, checkpoints and `final/`
are replaced whole), and the cli prints the command that resumes the run and exits 130.

Only the first signal interrupts: while the command is stopping, more SIGTERM/SIGHUP are ignored
(a scheduler often sends SIGTERM to a whole process group, or twice), so a cleanup is never cut
in half. `kill -9` still ends it at once, and what is on disk is then resumable too.
Handlers can only be installed from the main thread; elsewhere this is a no-op.

A few steps must not be cut in half by any of these signals, Ctrl-C included: taking an output
lock (the lock file is created and recorded, and only then does a `finally` own its release).
`signals_deferred()` holds a signal that arrives inside it and raises it as it ends.

Nor may the interrupt land inside a library that pairs a lock's acquire and release by hand:
`logging` takes its module lock and each handler's lock outside any `try`, so a KeyboardInterrupt
raised between the two leaves the lock held, and the next log call from any other thread (a
REPL reader, a pool worker the cleanup joins) waits for ever (seen: `prover verify` asleep in
`poll` 8 minutes after Ctrl-C, its traceback ending in logging's `_releaseLock`). So the
handlers do no work beyond deciding where to raise (no logging, no printing, no lock taken), and a
signal that finds the main thread inside such code is held and raised at the first line the
main thread runs outside it: a one-shot trace function on the frames below (it unsets itself as
it raises). A time-based retry would not do: a loop that logs all the time is inside logging
whenever a timer fires. Under a debugger or coverage tracer, which that would displace, the
signal is raised at once, as before.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_state: dict[str, Any] = {"depth": 0, "stopping": False, "deferring": 0, "pending": None}


# Code an interrupt must not land in: it takes locks without a `try` that would release them.
_UNSAFE_DIRS = (os.path.dirname(logging.__file__) + os.sep,)


def _handler(signum: int, frame: Any) -> None:
    if _state["deferring"]:
        _state["pending"] = _state["pending"] or signum   # the first one counts; raised at the end
        return
    if _in(frame, _UNSAFE_DIRS) and _hold_until_safe(signum, frame):
        return
    _interrupt(signum)


def _in(frame: Any, prefixes: tuple[str, ...]) -> bool:
    return frame is not None and frame.f_code.co_filename.startswith(prefixes)


def _hold_until_safe(signum: int, frame: Any) -> bool:
    """Arm the trace that raises `signum` at the main thread's next line outside unsafe code;
    False (raise now) when another tracer is in charge."""
    if sys.gettrace() not in (None, _raise_when_safe):
        return False
    _state["pending"] = _state["pending"] or signum
    while frame is not None:
        frame.f_trace = _raise_when_safe   # the frames below get line events as control returns
        frame = frame.f_back
    sys.settrace(_raise_when_safe)         # and the frames they call, on their first line
    return True


def _raise_when_safe(frame: Any, event: str, arg: Any) -> Any:
    if _in(frame, _UNSAFE_DIRS) or frame.f_code.co_filename == __file__:
        return None   # not here: inside logging, or in this module, which raises on its own
    signum, _state["pending"] = _state["pending"], None
    sys.settrace(None)
    if signum is None or _state["deferring"]:
        _state["pending"] = signum   # `signals_deferred` raises it as its block ends
        return None
    _interrupt(signum)


def _interrupt(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt   # what Python's own handler does: every Ctrl-C interrupts
    if _state["stopping"]:
        return  # already stopping: let the cleanup finish
    _state["stopping"] = True
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """A SIGTERM, SIGHUP or Ctrl-C that arrives inside the block is raised when the block ends
    (while `stop_signals_as_interrupt` is in force; elsewhere signals act as usual). Only the
    main thread receives signals, so in other threads this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["deferring"] += 1
    try:
        yield
    finally:
        _state["deferring"] -= 1
        if not _state["deferring"] and _state["pending"] is not None:
            signum, _state["pending"] = _state["pending"], None
            _interrupt(signum)


class stop_signals_as_interrupt:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread while the `with` body runs
    (re-entrant: nested uses restore what was there before them)."""

    def __enter__(self) -> "stop_signals_as_interrupt":
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, _handler)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:   # not when ignored
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, _handler)
            _state["depth"] += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._previous:
            return
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        _state["depth"] -= 1
        held = None if _state["deferring"] else _state["pending"]
        if held is not None:   # held off logging, and the body ended before its next line
            _state["pending"] = None
            if sys.gettrace() is _raise_when_safe:
                sys.settrace(None)
        if _state["depth"] == 0:
            _state["stopping"] = False
        if held is not None and exc[0] is None:
            raise KeyboardInterrupt(*(() if held == signal.SIGINT else (signal.Signals(held).name,)))


def signal_of(interrupt: BaseException) -> str | None:
    """`SIGTERM` / `SIGHUP` for an interrupt this module raised; None for Ctrl-C."""
    name = str(interrupt.args[0]) if interrupt.args else ""
    return name if name in {s.name for s in STOP_SIGNALS} else None
