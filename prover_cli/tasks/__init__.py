"""A task is (problems, prompt, reward): one file that registers itself, plus one line in `BUILTIN`.

    @register_task("countdown")
    class CountdownTask:
        name = "countdown"
        problem_fields = {"numbers": ("ints", True), "target": (int, True)}   # what prompt and reward read
        reward_range = (0.0, 1.0)                                           # every reward lies in it
        def build_prompt(self, problem, tokenizer, family): ...
        def rewards(self, problems, completions, config, reporter=None): ...
        options = {"problems": Option(512, "Problems to generate.", min=1)}  # [task.countdown] in a config
        def problems_from_seed(self, config, count): ...                    # optional: needs no dataset
        def problem_defect(self, problem): ...                              # optional: checks past the types
        def content_key(self, problem): ...                                 # optional: what makes two rows one problem

Everything task-specific asks this registry: `data.task`'s allowed names (`task_names`, read
without importing a task), the fields a problem must carry and their checks (`problem_defect`),
the problems a task generates from `run.seed` (`problems_from_seed`), the reward range the ES
ledger holds recorded rewards to (`reward_range`), the options a config sets for it
(`options`, read from its own table `[task.<name>]`: `options_for`), which rows of a problems
file are its own (`row_task`: a row holding every field the task requires) and what makes two of
them one problem (`content_key`). `get_task(name)` returns an instance; a built-in task's module
is imported only then (`BUILTIN` maps names to modules), so `prover --help` imports no task; loading
a config imports the task it names. docs/tasks.md has the recipe.

A task from outside the package: a module that calls `register_task`, named by the config key
`data.task_module` (a dotted module path importable by this Python: installed, or on
`PYTHONPATH`). Loading the config imports it (`check_task`), so every command that reads the
config, and every process that loads it (a resumed run, `report`), knows the task. A config key
rather than an entry point: it needs no packaging step, and the run's own config.toml records
which module defined its task.

The built-in tasks, one file each (tests/test_package_indexes.py keeps this list complete):

- lean.py        reward 1.0 only for a `verified` verdict (prover_cli/verify/)
- countdown.py   reach a target with + - * /, checked exactly with fractions
- toy.py         the fraction of digits in a completion: an objective the tiny model learns in seconds

What every task shares, beside the registry:

- problems.py    the run's problems: train split, held-out subset, eval split; a file or generated
- datasets.py    `prepare-data`: a dataset's rows mapped to problems.jsonl (Lean layouts, our own schema)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from prover_cli.errors import ConfigError
from prover_cli.progress import Reporter


class TaskTables(Protocol):
    """What the registry reads of a config: its `[task.<name>]` tables. prover_cli/config.py's
    `Config` is one; it imports this registry, so the registry names it by shape, not by import."""

    task: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Option:
    """One option a task declares: its default (whose type, bool, int, float or str, is the option's
    type), a one-line doc (docs/config.md) and the choices or range it accepts. A config sets it in
    the task's table, `[task.<name>]`, or with `--set task.<name>.<option>=value`."""

    default: bool | int | float | str
    doc: str
    choices: tuple[Any, ...] | None = None
    min: float | None = None
    max: float | None = None

    @property
    def rules(self) -> dict[str, Any]:
        """The checks in the form the config's keys hold them (prover_cli/config.py, `_key`)."""
        return {"doc": self.doc, "choices": self.choices, "min": self.min, "max": self.max}


class Task(Protocol):
    """What every task has. Optional, found by name: `problems_from_seed(config, count)` (the task
    generates its problems) and `problem_defect(problem)` (a check past the field types)."""

    name: str
    # field -> (type, required): what build_prompt and rewards read. Types: str, int, or "ints" (a
    # non-empty list of integers). An optional field may also be missing or null.
    problem_fields: Mapping[str, tuple[Any, bool]]
    # (low, high) every reward lies in, which the ES ledger checks recorded rewards against; None: any finite number.
    reward_range: tuple[float, float] | None

    def build_prompt(self, problem: dict[str, Any], tokenizer: Any, family: str) -> str:
        """The text fed to the model for one problem."""

    def rewards(self, problems: Sequence[dict[str, Any]], completions: Sequence[str], config: Any,
                reporter: Reporter | None = None) -> list[float]:
        """One reward per (problem, completion) pair, computed in one batch (`config`: the run's
        `Config`, by shape: the config imports this registry)."""


_REGISTRY: dict[str, Callable[[], Task]] = {}
# The built-in tasks, one line each: name -> (module that registers it, what it is: docs/config.md shows this).
BUILTIN = {
    "lean": ("prover_cli.tasks.lean", "reward = verified by Lean"),
    "countdown": ("prover_cli.tasks.countdown", "arithmetic, checked exactly in Python"),
    "toy": ("prover_cli.tasks.toy", "the fraction of digits, for CPU tests"),
}
FIELD_KINDS = {str: "a string", int: "an integer", "ints": "a non-empty list of integers"}


def register_task(name: str) -> Callable[[Any], Any]:
    """Register a task class (or a factory with the same attributes) under `name`; its declared
    fields, reward range and options are checked here, so a malformed task fails when its module loads."""
    def decorator(factory: Any) -> Any:
        fields = getattr(factory, "problem_fields", None)
        if not isinstance(fields, Mapping) or any(not isinstance(v, tuple) or len(v) != 2 or v[0] not in FIELD_KINDS
                                                  or not isinstance(v[1], bool) for v in fields.values()):
            raise TypeError(f"task {name!r}: problem_fields must map each field to (kind, required), kind one of "
                            f"str, int, \"ints\"; got {fields!r}")
        bounds = getattr(factory, "reward_range", ...)
        if bounds is not None and not (isinstance(bounds, tuple) and len(bounds) == 2 and bounds[0] <= bounds[1]):
            raise TypeError(f"task {name!r}: reward_range must be (low, high) with low <= high, or None; got {bounds!r}")
        options = getattr(factory, "options", {})
        if not isinstance(options, Mapping) or any(
                not isinstance(o, Option) or type(o.default) not in (bool, int, float, str) for o in options.values()):
            raise TypeError(f"task {name!r}: options must map each name to an Option with a bool, int, float or str "
                            f"default; got {options!r}")
        renamed = getattr(factory, "renamed", {})
        if not isinstance(renamed, Mapping) or any(new not in options for new in renamed.values()):
            raise TypeError(f"task {name!r}: renamed must map old config keys to its own options; got {renamed!r}")
        # One name, one task: a module never replaces a built-in task or another module's (a run's
        # ledger and config name the task, and must mean the same code wherever they are read).
        where = (getattr(factory, "__module__", None), getattr(factory, "__qualname__", None))
        owner = (BUILTIN[name][0], where[1]) if name in BUILTIN else None
        existing = _REGISTRY.get(name)
        if existing is not None:
            owner = (existing.__module__, existing.__qualname__)
        if owner is not None and owner != where:
            raise TypeError(f"task {name!r} is already {owner[0]}'s; register {where[0]}'s under another name")
        _REGISTRY[name] = factory
        return factory

    return decorator


def task_names() -> list[str]:
    """Every task `data.task` may name now: the built-in ones, then those registered since, in that order."""
    return [*BUILTIN, *(name for name in _REGISTRY if name not in BUILTIN)]


def get_task(name: str) -> Task:
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(BUILTIN[name][0])
    if name not in _REGISTRY:
        raise ConfigError(f"data.task = {name!r}: unknown task; known: {', '.join(task_names())}",
                          hint="a task from outside prover is registered by the module data.task_module names")
    return _REGISTRY[name]()


def check_task(name: str, module: str, where: str, module_where: str) -> None:
    """ConfigError unless `name` is a task: a built-in one, or one that importing `module`
    (`data.task_module`, when set) registered. `where` and `module_where` prefix the errors."""
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:  # a missing module or one of its imports; its other errors keep their traceback
            raise ConfigError(f"{module_where}: cannot import it: {exc}",
                              hint="name a module this Python can import (installed, or on PYTHONPATH)") from None
    if name in BUILTIN or name in _REGISTRY:
        return
    registered = f"; {module} registers none of that name" if module else ""
    raise ConfigError(f"{where}: must be one of {', '.join(map(repr, task_names()))}{registered}",
                      hint="a task from outside prover: set data.task_module to the module that calls "
                           "register_task (docs/tasks.md)")


# --------------------------------------------------------------------------------------------
# What callers ask of a task by name
# --------------------------------------------------------------------------------------------

def reward_range(name: str) -> tuple[float, float] | None:
    """The range every reward of task `name` lies in; None when any finite reward is possible, or
    when `name` is no task this process knows (a ledger read without its task's module)."""
    if name not in BUILTIN and name not in _REGISTRY:
        return None
    return get_task(name).reward_range


def problem_generator(name: str) -> Callable[[Any, int], list[dict[str, Any]]] | None:
    """Task `name`'s `problems_from_seed(config, count)` (its problems generated from `run.seed`;
    count 0: the task's default), or None when the task reads its problems from a file. The
    caller hands the config to the task itself: this asks by name only."""
    return getattr(get_task(name), "problems_from_seed", None)


def generates_problems(name: str) -> bool:
    return problem_generator(name) is not None


def problem_defect(problem: dict[str, Any], name: str) -> str | None:
    """Why task `name` cannot prompt or score `problem` (a missing or wrong-typed field, or the
    task's own check), or None."""
    task = get_task(name)
    for key, (kind, required) in task.problem_fields.items():
        value = problem.get(key)
        if value is None:
            if required:
                return f"lacks `{key}`, needed by data.task = {name!r}"
            continue
        if kind == "ints":
            ok = isinstance(value, list) and bool(value) and all(type(v) is int for v in value)
        else:
            ok = isinstance(value, kind) and not isinstance(value, bool)
        expected = FIELD_KINDS[kind]
        if not ok:
            return f"`{key}` is {type(value).__name__}, expected {expected} (data.task = {name!r})"
    own_check = getattr(task, "problem_defect", None)
    return own_check(problem) if own_check is not None else None


def task_options(name: str) -> Mapping[str, Option]:
    """The options task `name` declares (empty for a task without any)."""
    options: Mapping[str, Option] = getattr(get_task(name), "options", {})
    return options


def options_for(config: TaskTables, name: str) -> dict[str, Any]:
    """Task `name`'s option values for `config`: its `[task.<name>]` table over the declared defaults
    (a task the config's tables do not name, e.g. one `prepare-data --preset` picks: the defaults)."""
    values = {key: option.default for key, option in task_options(name).items()}
    values.update(config.task.get(name, {}))
    return values


def renamed_key(dotted: str) -> tuple[str, str] | None:
    """(task, option) for a config key a task's option replaced (`section.key` as it was), or None.
    Every built-in task is imported to answer: only asked on the error path of an unknown key."""
    for name in task_names():
        new = getattr(get_task(name), "renamed", {}).get(dotted)
        if new is not None:
            return name, new
    return None


def row_task(row: Mapping[str, Any]) -> str | None:
    """The task a problems-file row is shaped for: the first (registry order) whose required fields
    it holds every one of, or None."""
    for name in task_names():
        required = [key for key, (_, needed) in get_task(name).problem_fields.items() if needed]
        if required and all(key in row for key in required):
            return name
    return None


def row_content_key(problem: Mapping[str, Any]) -> str | None:
    """What makes two rows one problem, by the first task (registry order) whose `content_key`
    recognises the row; None when no task does."""
    for name in task_names():
        key_of = getattr(get_task(name), "content_key", None)
        key = key_of(problem) if key_of is not None else None
        if key is not None:
            return str(key)
    return None
