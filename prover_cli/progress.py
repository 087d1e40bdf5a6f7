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


def quiet_third_party_bars() -> None:
    """Progress is ours (rich, on stderr): the Hugging Face hub's download bars and transformers'
    own ("Loading weights") and datasets' would interleave with it, or leak between the demo's result
    lines. Off for this process: by environment before those libraries are imported
    (HF_HUB_DISABLE_PROGRESS_BARS, which the hub and transformers read at import, and
    HF_DATASETS_DISABLE_PROGRESS_BARS), and through their switches if they already are. A user's
    own setting of either variable is kept."""
    import os
    import sys

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")   # TRL's datasets (`Map: 100%`)
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"].strip().lower() not in ("1", "true", "yes", "on"):
        return
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "datasets" in sys.modules and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"].strip() == "1":
        from datasets.utils import disable_progress_bars as datasets_bars_off

        datasets_bars_off()

