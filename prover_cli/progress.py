"""Progress reporting seam: library code reports, the cli renders.

Library functions take `reporter: Reporter = NULL_REPORTER` and call
`with reporter.task("verify", total=n) as t: t.advance(1, verified=3)`. The cli passes a rich
implementation; tests and remote (Modal) calls use the silent one. This keeps rich out of the
library and the library out of the terminal.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Protocol


class TaskHandle(Protocol):
    def advance(self, n: float = 1, **fields: Any) -> None: ...


class Reporter(Protocol):
    def task(self, description: str, total: float | None = None, unit: str = "it"): ...

    def log(self, message: str) -> None: ...


class _NullHandle:
    def advance(self, n: float = 1, **fields: Any) -> None:
        pass


class NullReporter:
    """Reports nothing. The default for library calls."""

    @contextmanager
    def task(self, description: str, total: float | None = None, unit: str = "it") -> Iterator[_NullHandle]:
        yield _NullHandle()

    def log(self, message: str) -> None:
        pass


NULL_REPORTER = NullReporter()
