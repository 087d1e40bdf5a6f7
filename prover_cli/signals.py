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
"""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_state = {"depth": 0, "stopping": False}


def _handler(signum: int, frame: Any) -> None:
    if _state["stopping"]:
        return  # already stopping: let the cleanup finish
    _state["stopping"] = True
    raise KeyboardInterrupt(signal.Signals(signum).name)


class stop_signals_as_interrupt:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread while the `with` body runs
    (re-entrant: nested uses restore what was there before them)."""

    def __enter__(self) -> "stop_signals_as_interrupt":
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, _handler)
            _state["depth"] += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._previous:
            return
        for number, previous in self._previous.items():
            signal.signal(number, previous if previous is not None else signal.SIG_DFL)
        _state["depth"] -= 1
        if _state["depth"] == 0:
            _state["stopping"] = False


def signal_of(interrupt: BaseException) -> str | None:
    """`SIGTERM` / `SIGHUP` for an interrupt this module raised; None for Ctrl-C."""
    name = str(interrupt.args[0]) if interrupt.args else ""
    return name if name in {s.name for s in STOP_SIGNALS} else None
