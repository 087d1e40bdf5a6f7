"""All terminal output goes through `Out`.

Humans get rich tables, progress and messages on stderr; with `--json`, stdout carries only the
result (one JSON document), so `prover eval ... --json | jq` always works. A command that fails
(exit 1, 2, 130 or an unexpected error) prints one JSON object there instead:
{"ok": false, "exit_code": N, "kind": ..., "error": ..., "hint": ...} (`Out.failure`, README
"Exit codes"). The JSON is strict: a number that is not finite is written as null.

Progress: on a terminal, live rich bars. When stderr is not a terminal (a log file, CI, `nohup`),
a live bar would print nothing until the end, or one frozen row per refresh; instead a long
stage prints one plain line when it starts, one every `PROGRESS_EVERY_S` seconds while it runs
(throttled across nested stages, so a per-step inner stage cannot flood the log), and one when
it ends. "While it runs" includes the minutes between two steps (an ES iteration, a batch of
proofs): a heartbeat thread prints the innermost running stage's line when nothing was printed
for `PROGRESS_EVERY_S` (`Out.heartbeat`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich import box
from rich.table import Table

from prover_cli.fsio.jsonl import finite_or_null


class _RichHandle:
    def __init__(self, progress: Progress, task_id: TaskID, unit: str):
        self._progress = progress
        self._task_id = task_id
        self._unit = unit
        self._start = time.monotonic()
        self._done = 0.0

    def advance(self, n: float = 1, **fields: Any) -> None:
        self._done += n
        rate = self._done / max(time.monotonic() - self._start, 1e-9)
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        self._progress.update(
            self._task_id, advance=n, rate=f"{rate:,.1f} {self._unit}/s", extra=extra
        )


# A table printed as rows of lines (too wide for the terminal) gives each row a block of
# `column  value` lines up to this many rows, and one wrapped paragraph per row beyond.
RECORD_BLOCKS_UP_TO = 6

# Seconds between two plain progress lines when stderr is not a terminal.
PROGRESS_EVERY_S = 5.0
# How often the heartbeat thread looks at the clock while a plain-line stage runs.
HEARTBEAT_POLL_S = 1.0


class _PlainHandle:
    """Progress as plain lines, for a stderr that is a file or a pipe."""

    def __init__(self, out: "Out", description: str, total: float | None, unit: str):
        self._out = out
        self._description = description
        self._total = total
        self._unit = unit
        self._start = out.clock()
        self._done = 0.0
        self._fields: dict[str, Any] = {}

    def advance(self, n: float = 1, **fields: Any) -> None:
        self._done += n
        if fields:
            self._fields = {**self._fields, **fields}  # replaced whole: the heartbeat reads it from its thread
        if not self.finished:  # the closing line says it
            self._out.progress_line(self)

    @property
    def finished(self) -> bool:
        return self._total is not None and self._total != 0 and self._done >= self._total

    def line(self, final: bool = False) -> None:
        now = self._out.clock()
        self._out.last_progress_line = now
        elapsed = now - self._start
        rate = self._done / elapsed if elapsed > 0 else 0.0
        count = f"{self._done:g}" + (f"/{self._total:g}" if self._total else "")
        parts = [f"{self._description}: {count} {self._unit}"]
        if self._total and not final:
            parts[0] += f" ({100 * self._done / self._total:.0f}%)"
        parts.append(f"{rate:,.2f} {self._unit}/s")
        parts.append(f"{_duration(elapsed)} elapsed")
        if self._total and rate > 0 and not final:
            parts.append(f"~{_duration((self._total - self._done) / rate)} left")
        line = ", ".join(parts)
        if self._fields:
            line += "  " + " ".join(f"{k}={v}" for k, v in self._fields.items())
        self._out.plain(line + (" (done)" if final else ""))


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class Out:
    """One object for all printing. `json_mode` moves the result to stdout as JSON."""

    def __init__(self, json_mode: bool = False, quiet: bool = False, clock: Callable[[], float] = time.monotonic,
                 heartbeat_wait: Callable[[threading.Event, float], bool] | None = None):
        self.json_mode = json_mode
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False)
        self.stdout = sys.stdout
        self.clock = clock  # tests pass a fake one: progress lines are time-driven
        self.last_progress_line = float("-inf")
        self._depth = 0  # nesting of progress tasks (ES: generate inside each iteration)
        self._open: tuple[_PlainHandle, ...] = ()  # the plain-line stages running, outermost first
        # (stop, seconds) -> whether to stop: the heartbeat thread's pause between two looks at
        # the clock; tests pass one they drive, so no test waits on real time
        self._heartbeat_wait = heartbeat_wait or (lambda stop, seconds: stop.wait(seconds))
        self._printing = threading.Lock()  # only ever tried, never waited for (`progress_line`)

    # -- messages (stderr) --------------------------------------------------------------------
    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(escape(message), soft_wrap=True)  # a path or a line number never split

    def prose(self, message: str, indent: int = 0, hang: int = 0) -> None:
        """A sentence or a few on stderr, wrapped between words at the terminal's width, `indent`
        cells in (continuation lines `hang` more), so no number, key or path is split unless it
        alone is wider than the terminal."""
        if self.quiet:
            return
        from rich.text import Text

        room = max(20, self.err.width - indent - hang)
        for n, line in enumerate(Text(message).wrap(self.err, room, overflow="fold")):
            pad = " " * (indent + (hang if n else 0))
            self.err.print(pad + line.plain.rstrip(), markup=False, highlight=False, soft_wrap=True)

    def warn(self, message: str) -> None:
        self.err.print(f"[yellow]Warning:[/yellow] {escape(message)}", soft_wrap=True)

    def error(self, message: str, hint: str | None = None) -> None:
        self.err.print(f"[bold red]Error:[/bold red] {escape(message)}", soft_wrap=True)
        if hint:
            self.err.print(f"[dim]Hint: {escape(hint)}[/dim]", soft_wrap=True)

    def interrupted(self, resume_command: str | None, *, why: str | None = None, starts_over: bool = False) -> None:
        """Ctrl-C, SIGTERM or SIGHUP (`why`): say so, and print the exact command that continues
        the run (or, for a command that does not resume, the one that starts it over)."""
        self.err.print(f"[yellow]Interrupted{f' ({why})' if why else ''}.[/yellow]", soft_wrap=True)
        if resume_command:
            if starts_over:
                self.err.print(f"Rerun with (it starts over): {escape(resume_command)}", soft_wrap=True)
            else:
                self.err.print(f"Resume with: {escape(resume_command)}", soft_wrap=True)

    def plain(self, line: str) -> None:
        """One unstyled line on stderr (progress in logs)."""
        if not self.quiet:
            self.err.print(line, markup=False, highlight=False, soft_wrap=True)

    # -- results ------------------------------------------------------------------------------
    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """A summary table for humans (stderr, so stdout stays clean for --json).

        At any width, a number, an interval such as `(-0.001..+0.036)`, a key or a path is never
        split across lines, and cells wrap only between words: the title is a line of its own,
        wrapped at the terminal's width (not the table's); the columns keep each one's longest
        word whole (`_column_widths`); and where the words of all columns side by side cannot
        fit, each row is printed as `column  value` lines instead (`_records`)."""
        if self.quiet:
            return
        header = [str(column) for column in columns]
        cells = [[_fmt(cell) for cell in row] for row in rows]
        if title:
            self.err.print(f"[bold]{escape(title)}[/bold]", overflow="fold")
        layout = _column_widths(header, cells, self.err.width)
        if layout is None:
            self._records(header, cells)
            return
        padding, widths = layout
        if padding < 0:   # borderless: one space between columns, a rule under the header
            table = Table(box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False, show_edge=False, collapse_padding=True)
        else:
            table = Table(padding=(0, padding))
        for column, width in zip(header, widths):
            table.add_column(column, overflow="fold", width=width)
        for row in cells:
            table.add_row(*row)
        self.err.print(table)

    def _records(self, header: list[str], cells: list[list[str]]) -> None:
        """A table too wide for the terminal, one block per row: `column  value`, the values wrapped
        between words under their own column, a blank line between rows."""
        from rich.cells import cell_len
        from rich.padding import Padding
        from rich.text import Text

        labels = [escape(h) for h in header]   # cells are markup already (`_fmt`), headers plain text
        if len(header) == 2 and not header[0].strip():
            # a key/value table (`_render`'s scalars): each row is already `key  value`
            labels, cells = [row[0] for row in cells], [[row[1] for row in cells]]
        keys = [Text.from_markup(label).plain for label in labels]
        if len(cells) > RECORD_BLOCKS_UP_TO:
            # many rows: each one a paragraph of `column: value` pairs, wrapped between words
            for row in cells:
                pairs = [f"{key}: {Text.from_markup(cell).plain}" if key else Text.from_markup(cell).plain
                         for key, cell in zip(keys, row)]
                self.prose("- " + " | ".join(pairs), hang=2)
            return
        key_longest = max((cell_len(k) for k in keys), default=1)
        key_word = max((cell_len(w) for k in keys for w in k.split()), default=1)
        value_word = max((cell_len(w) for row in cells for cell in row for w in Text.from_markup(cell).plain.split()),
                         default=1)
        if key_word + 2 + value_word > self.err.width:
            # a value word (a path) too wide to sit beside its key: each value on the lines under its key
            for n, row in enumerate(cells):
                if n:
                    self.err.print()
                for label, cell in zip(labels, row):
                    self.err.print(f"[dim]{label}[/dim]", overflow="fold")
                    self.err.print(Padding(cell, (0, 0, 0, 2), expand=False), overflow="fold")
            return
        # the keys whole where the longest value word still fits beside them, else wrapped between words
        key_width = max(key_word, min(key_longest, self.err.width - 2 - value_word))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(width=key_width, overflow="fold")
        grid.add_column(overflow="fold")
        for n, row in enumerate(cells):
            if n:
                grid.add_row("", "")
            for label, cell in zip(labels, row):
                grid.add_row(f"[dim]{label}[/dim]", cell)
        self.err.print(grid)

    def result(self, payload: Any) -> None:
        """The machine-readable result: printed to stdout with --json, ignored otherwise."""
        if self.json_mode:
            _RESULT["written"] = True  # set first: a failure while writing must not add a second document
            self.stdout.write(json.dumps(finite_or_null(payload), indent=2, sort_keys=True, default=str, allow_nan=False)
                              + "\n")
            self.stdout.flush()

    def failure(self, exit_code: int, error: str, kind: str, hint: str | None = None) -> None:
        """With --json, the one JSON object a failed command prints on stdout (unless its result is
        already there: a result with `"ok": false` says the same). Kinds: README "Exit codes"."""
        if self.json_mode and not _RESULT["written"]:
            self.result({"ok": False, "exit_code": exit_code, "kind": kind, "error": error, "hint": hint})

    # -- progress (implements progress.Reporter) ----------------------------------------------
    @contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "it") -> Iterator[Any]:
        if not self.err.is_terminal:
            yield from self._plain_task(description, total, unit)
            return
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=self.err,
            disable=self.quiet,
            transient=False,
        )
        with progress:
            task_id = progress.add_task(description, total=total, rate="", extra="")
            yield _RichHandle(progress, task_id, unit)

    def _plain_task(self, description: str, total: float | None, unit: str) -> Iterator[_PlainHandle]:
        handle = _PlainHandle(self, description, total, unit)
        top = self._depth == 0
        beat: tuple[threading.Event, threading.Thread] | None = None
        if top:
            self.plain(f"{description}: started" + (f" ({total:g} {unit})" if total else ""))
            self.last_progress_line = self.clock()
        self._depth += 1
        self._open = (*self._open, handle)
        try:
            if top and not self.quiet:
                beat = self._start_heartbeat()
            yield handle
        finally:
            self._depth -= 1
            self._open = tuple(h for h in self._open if h is not handle)
            if beat is not None:
                stop, thread = beat
                stop.set()
                thread.join(timeout=2 * HEARTBEAT_POLL_S)  # a daemon: never holds up the exit
        if top:
            handle.line(final=True)

    def progress_line(self, handle: _PlainHandle) -> None:
        """`handle`'s line, if none was printed for PROGRESS_EVERY_S (from a step or the heartbeat).

        The lock is only tried: whoever holds it is printing a progress line right now, so the
        other skips its own. Nothing here waits, and nothing a signal handler runs takes it
        (prover_cli/signals.py never prints)."""
        if self.clock() - self.last_progress_line < PROGRESS_EVERY_S:
            return
        if not self._printing.acquire(blocking=False):
            return
        try:
            if self.clock() - self.last_progress_line >= PROGRESS_EVERY_S:
                handle.line()
        finally:
            self._printing.release()

    def heartbeat(self) -> None:
        """One beat: the innermost running stage's line, if nothing was printed for PROGRESS_EVERY_S."""
        running = self._open
        if running and not running[-1].finished:
            self.progress_line(running[-1])

    def _start_heartbeat(self) -> tuple[threading.Event, threading.Thread]:
        stop = threading.Event()

        def beat() -> None:
            while not self._heartbeat_wait(stop, HEARTBEAT_POLL_S):
                try:
                    self.heartbeat()
                except Exception:  # a closed stderr (the terminal went away): stop beating, quietly
                    return

        thread = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
        thread.start()
        return stop, thread

    def log(self, message: str) -> None:
        self.info(message)


# Whether this command has put its JSON document on stdout yet (one per command: cli.py resets it).
_RESULT = {"written": False}


def forget_result() -> None:
    """A new command starts: nothing of it is on stdout yet."""
    _RESULT["written"] = False


def result_written() -> bool:
    return _RESULT["written"]


def _fmt(cell: Any) -> str:
    if isinstance(cell, float):
        return f"{cell:.4g}"
    return escape(str(cell))


def _column_widths(header: Sequence[str], rows: Sequence[Sequence[str]], width: int
                   ) -> tuple[int, Sequence[int | None]] | None:
    """(padding, content widths) that fit a table in `width` terminal cells (widths None when it
    fits as is). The padding beside the borders is 1, or 0 when only that keeps every word whole;
    -1 when only a table without borders does (one space between columns); None when not even
    that does (the caller prints the rows as records instead).

    rich, left to itself, shrinks the widest columns first and cuts what no longer fits with an
    ellipsis (`meth…`, `1.146e…`). Here every column first gets its longest word (up to a share of
    the width that lets the others have theirs too), so a word folds only when it alone is wider
    than the room; then the widest columns are narrowed to one common width until the table fits.
    """
    from rich.cells import cell_len
    from rich.text import Text

    n = len(header)
    if n == 0:
        return 1, []
    room = width - (3 * n + 1)   # per column: 2 cells of padding and a border; one border more
    lines: list[list[str]] = [[] for _ in range(n)]
    for row in [list(header), *rows]:
        for k, cell in enumerate(row[:n]):
            lines[k].extend(Text.from_markup(cell).plain.splitlines() or [""])
    longest = [max((cell_len(line) for line in col), default=0) for col in lines]
    if sum(longest) <= room:
        return 1, [None] * n
    words = [max((cell_len(w) for line in col for w in line.split()), default=0) for col in lines]
    padding = 1
    floor = [max(1, w) for w in words]   # every word whole
    if sum(floor) > room:
        padding, room = 0, width - (n + 1)
    if sum(floor) > room:
        padding, room = -1, width - (n - 1)
    if sum(floor) > room:
        return None
    # then narrow the widest columns, never below their floor, to a common width that fits
    top = _level([max(f, l) for f, l in zip(floor, longest)], room, floor)
    widths = [max(f, min(l, top)) for f, l in zip(floor, longest)]
    spare = room - sum(widths)
    for k in sorted(range(n), key=lambda i: longest[i] - widths[i], reverse=True):
        if spare <= 0:
            break
        if widths[k] < longest[k]:
            widths[k] += 1
            spare -= 1
    return padding, widths


def _level(values: Sequence[int], room: int, floor: Sequence[int] | None = None) -> int:
    """The largest level L with sum(max(floor, min(value, L))) <= room (at least 1)."""
    floor = floor or [0] * len(values)
    low, high = 1, max(values)
    while low < high:
        mid = (low + high + 1) // 2
        if sum(max(f, min(v, mid)) for f, v in zip(floor, values)) <= room:
            low = mid
        else:
            high = mid - 1
    return low
