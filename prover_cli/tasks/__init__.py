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


def generate_problems(config: Any) -> list[dict[str, Any]] | None:
    """Seeded problems of the tasks that need no dataset (as `prepare-data` makes them); None for Lean."""
    d = config.data
    if d.task == "countdown":
        from prover_cli.tasks import countdown

        return countdown.generate_problems(d.countdown_problems, d.countdown_numbers, d.countdown_max_number,
                                           seed=config.run.seed, prompt=d.countdown_prompt)
    if d.task == "toy":
        from prover_cli.tasks import toy

        return toy.generate_problems(toy.DEFAULT_COUNT, seed=config.run.seed)
    return None


def run_problems(config: Any) -> tuple[list[dict[str, Any]], str, bool]:
    """(every problem of the run, where they came from, whether they were generated).

    The problems file when it exists. Without one, countdown and toy generate theirs from
    `run.seed`, but only when `data.problems` is left empty (`<run.dir>/problems.jsonl`): a path
    the user named that does not exist is an error for every task, never a silent switch to
    generated problems."""
    from prover_cli.errors import InputError
    from prover_cli.jsonl import load_jsonl_strict

    path = config.problems_path
    if path.exists():
        return load_jsonl_strict(path), str(path), False
    if config.data.problems:
        raise InputError(f"{path}: problems file not found (data.problems = {config.data.problems!r})",
                         hint="fix the path, or write it with `prover prepare-data`; countdown and toy generate "
                              "their problems when data.problems is left empty")
    generated = generate_problems(config)
    if generated is None:
        raise InputError(f"{path}: problems file not found (data.problems, task {config.data.task}); "
                         "run `prover prepare-data --config <config>` to create it, or set data.problems")
    return generated, f"{config.data.task} problems generated from run.seed = {config.run.seed}", True
