"""A task is (problems, prompt, reward). Tasks register through one small seam.

    @register_task("countdown")
    class CountdownTask: ...

`get_task(name)` returns an instance. The built-in tasks register themselves on import of their
module; `_BUILTIN` maps names to modules so nothing heavy is imported until a task is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Protocol, Sequence

from prover_cli.errors import ConfigError


class Task(Protocol):
    name: str

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        """The text fed to the model for one problem."""

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Any,
                reporter: Any = None) -> list[float]:
        """One reward per (problem, completion) pair, computed in one batch."""


_REGISTRY: dict[str, Callable[[], Task]] = {}
_BUILTIN = {
    "countdown": "prover_cli.tasks.countdown",
    "lean": "prover_cli.tasks.lean",
    "toy": "prover_cli.tasks.toy",
}


def register_task(name: str):
    def decorator(factory):
        _REGISTRY[name] = factory
        return factory

    return decorator


def get_task(name: str) -> Task:
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise ConfigError(f"data.task = {name!r}: unknown task; known: {', '.join(sorted(set(_BUILTIN) | set(_REGISTRY)))}")
    return _REGISTRY[name]()

