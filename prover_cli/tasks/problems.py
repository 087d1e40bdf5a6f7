"""The run's problems: which a run trains on, which are held out, which subset evaluation uses.

    from prover_cli.tasks import problems

    problems.train_problems(config)      # data.train_split of the run's problems (a data.train_size subset)
    problems.heldout_problems(config)    # data.valid_split, deduplicated by content, a fixed run.eval_problems subset
    problems.read_problems(path, split=..., malformed=[...], task_name=...)   # generate and eval
    problems.eval_problems(config, malformed=[...])                           # eval.split of eval.problems

Where a run's problems come from (`run_problems`): the problems file (`data.problems`, by default
`<run.dir>/problems.jsonl`) when it exists. Without one, a task that generates its problems
(the task's `problems_from_seed`: countdown, toy) generates them from `run.seed`
(`generated_problems`, as `prepare-data` writes them), but only when `data.problems` is left
empty: a path the user named that does not exist is an error for every task, never a silent
switch to generated problems. Lean problems always come from a file.

A split no problem has is one error, whoever asks (`no_problems_in_split`): it names the file (or
the generator), the split, the config key that chose it and the splits the problems do have.

**The test set is one for every seed, arm and training-set size** (`select_heldout`): the
`data.valid_split` rows, deduplicated by content (`content_key`, which each task declares for its
own rows: a Lean statement up to whitespace and the theorem's name, a countdown puzzle's number
multiset and target, a toy prompt up to whitespace), so a problem stated twice is counted once; a row whose content is also in the
training split is dropped too (a held-out problem never equals a training one); then, with
`run.eval_problems = K`, a fixed subset of K drawn from `run.eval_problems_seed`, never from
`run.seed`. How many rows each rule dropped travels with the list (`HeldOutSet`) into every
held-out record (`eval/duplicates_dropped`, `eval/train_overlap_dropped`, prover_cli/training/heldout.py).

**The training-set size** (`data.train_size = N`, the limited-data axis): N problems of the
training split drawn from `run.seed` (`select_train`), nested: a seed's 16 are among its 64. It
never changes the test set, which is chosen from the whole training split.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prover_cli import streams
from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import BadLine, load_jsonl_strict, read_jsonl, write_jsonl_atomic
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import problem_defect as task_defect
from prover_cli.tasks import problem_generator, row_content_key

if TYPE_CHECKING:
    from prover_cli.config import Config


# --------------------------------------------------------------------------------------------
# The run's problems: the file, or generated from run.seed
# --------------------------------------------------------------------------------------------

def generated_problems(config: Config, task: str | None = None, count: int = 0) -> list[dict[str, Any]] | None:
    """Seeded problems of a task that needs no dataset (`task`, default `data.task`): `count` of them
    (0: the task's default, e.g. `task.countdown.problems`), from `run.seed`; None for a task whose
    problems come from a file (Lean). The task says which (prover_cli/tasks, `problems_from_seed`)."""
    make = problem_generator(task or config.data.task)
    return make(config, count) if make is not None else None


def run_problems(config: Config) -> tuple[list[dict[str, Any]], str, bool]:
    """(every problem of the run, where they came from, whether they were generated)."""
    path = config.problems_path
    if path.exists():
        return load_jsonl_strict(path), str(path), False
    if config.data.problems:
        raise InputError(f"{path}: problems file not found (data.problems = {config.data.problems!r})",
                         hint="fix the path, or write it with `prover prepare-data`; a task that generates its "
                              "problems (countdown, toy) does so when data.problems is left empty")
    generated = generated_problems(config)
    if generated is None:
        raise InputError(f"{path}: problems file not found (data.problems, task {config.data.task}); "
                         "run `prover prepare-data --config <config>` to create it, or set data.problems")
    return generated, f"{config.data.task} problems generated from run.seed = {config.run.seed}", True


def no_problems_in_split(source: Any, split: str, key: str, present: Any, hint: str = "") -> InputError:
    """The one error for a split no (usable) problem has."""
    splits = ", ".join(sorted({str(s) for s in present})) or "none"
    return InputError(f"{source}: no problems with split {split!r} ({key}); splits present: {splits}",
                      hint=hint or f"set {key.split(',')[0]} to a split the problems have")


def in_split(problems: list[dict[str, Any]], split: str, source: Any, key: str, hint: str = "") -> list[dict[str, Any]]:
    """The problems of `split`, in order; none is `no_problems_in_split`."""
    chosen = [p for p in problems if p.get("split") == split]
    if not chosen:
        raise no_problems_in_split(source, split, key, (p.get("split") for p in problems), hint)
    return chosen


def train_problems(config: Config, reporter: Reporter = NULL_REPORTER, *,
                   save_generated: bool = False) -> list[dict[str, Any]]:
    """The `data.train_split` problems of the run. `save_generated`: generated problems are also
    written to `data.problems`' path, so the run's problems stay inspectable and reusable (GRPO)."""
    problems, source, generated = run_problems(config)
    if generated and save_generated:
        path = config.problems_path
        write_jsonl_atomic(path, problems)
        reporter.log(f"{path}: generated {len(problems)} {config.data.task} problems (seed {config.run.seed})")
        source = str(path)
    train = in_split(problems, config.data.train_split, source, "data.train_split")
    return select_train(train, config.data.train_size, config.run.seed, source)


def select_train(train: list[dict[str, Any]], size: int, seed: int, source: Any = "problems") -> list[dict[str, Any]]:
    """`size` problems of the training split (0: all), in file order: the first `size` of one seeded
    permutation, so the sizes of one seed are nested (its 16 are among its 64)."""
    if size == 0 or size == len(train):
        return train
    if size > len(train):
        raise InputError(f"{source}: data.train_size = {size} but the training split has {len(train)} problems",
                         hint=f"set data.train_size <= {len(train)} (0 = all of them)")
    order = streams.train_problems_rng(seed).sample(range(len(train)), len(train))
    return [train[i] for i in sorted(order[:size])]


# --------------------------------------------------------------------------------------------
# The held-out set: deduplicated by content, disjoint from training, one subset for every seed
# --------------------------------------------------------------------------------------------

def content_key(problem: dict[str, Any]) -> str:
    """What makes two rows the same problem, whatever their ids: the key of the first task (registry
    order: lean, countdown, toy, then registered ones) that recognises the row (its `content_key`:
    a Lean statement up to whitespace and the theorem's name; a countdown puzzle's numbers as a
    multiset and its target; a toy prompt up to whitespace). A row no task recognises is only itself (its id)."""
    key = row_content_key(problem)
    return key if key is not None else "id|" + str(problem.get("id", problem.get("name")))


class HeldOutSet(list[dict[str, Any]]):
    """The held-out problems (a list), with what choosing them dropped: `duplicates_dropped` (rows of
    a problem already held out), `train_overlap_dropped` (rows whose problem is also in the training
    split) and `sha256`, the set's content fingerprint (ids and content keys, order-free), which
    `prover report` compares before pairing two runs."""

    def __init__(self, problems: list[dict[str, Any]], duplicates_dropped: int = 0, train_overlap_dropped: int = 0):
        super().__init__(problems)
        self.duplicates_dropped = duplicates_dropped
        self.train_overlap_dropped = train_overlap_dropped
        self.sha256 = heldout_sha256(problems)


def heldout_sha256(problems: list[dict[str, Any]]) -> str:
    """Content fingerprint of a held-out set: sha256 of its sorted (id, content key) pairs, 16 hex digits."""
    pairs = sorted([str(p.get("id", p.get("name", i))), content_key(p)] for i, p in enumerate(problems))
    return hashlib.sha256(json.dumps(pairs).encode("utf-8")).hexdigest()[:16]


def select_heldout(problems: list[dict[str, Any]], *, train_split: str, valid_split: str, count: int, seed: int,
                   source: Any = "problems", key: str = "data.valid_split", hint: str = "") -> HeldOutSet:
    """The test set from all of a run's problems: `valid_split` rows in file order, each problem once
    (its first row) and none that is also a `train_split` problem, then a fixed subset of `count`
    (0: all) drawn from `seed` (`run.eval_problems_seed`)."""
    rows = in_split(problems, valid_split, source, key, hint)
    trained = {content_key(p) for p in problems if p.get("split") == train_split}
    kept: list[dict[str, Any]] = []
    seen: set[str] = set()
    duplicates = overlap = 0
    for problem in rows:
        content = content_key(problem)
        if content in trained:
            overlap += 1
        elif content in seen:
            duplicates += 1
        else:
            seen.add(content)
            kept.append(problem)
    if not kept:
        raise InputError(f"{source}: every {valid_split!r} problem is also a {train_split!r} problem by content "
                         f"({overlap} rows): no held-out problem is left", hint="hold out problems the run does not train on")
    if 0 < count < len(kept):
        rng = streams.heldout_problems_rng(seed)
        kept = [kept[i] for i in sorted(rng.sample(range(len(kept)), count))]
    return HeldOutSet(kept, duplicates, overlap)


def heldout_problems(config: Config) -> HeldOutSet:
    """The run's test set (`select_heldout`): the same for ES and GRPO, every seed and every training-set size."""
    problems, source, _ = run_problems(config)
    return select_heldout(problems, train_split=config.data.train_split, valid_split=config.data.valid_split,
                          count=config.run.eval_problems, seed=config.run.eval_problems_seed, source=source,
                          key=f"data.valid_split, for the held-out evaluation every run.eval_every = {config.run.eval_every}",
                          hint="set data.valid_split to a split the problems have, or run.eval_every = 0")


# --------------------------------------------------------------------------------------------
# A problems file read strictly: `generate` and `eval`
# --------------------------------------------------------------------------------------------

def read_problems(path: Path, split: str | None = None, malformed: list[dict[str, Any]] | None = None,
                  task_name: str | None = None, split_key: str = "split") -> list[dict[str, Any]]:
    """Problems of `path` (of `split` if given; `split_key` names the config key that chose it).

    A bad line, a duplicate id, or (with `task_name`) a problem without the fields that task
    reads is an error naming the line, or, when a `malformed` list is given, appended to it
    ({"line", "reason"}) and skipped."""
    if not path.exists():
        raise InputError(f"{path}: problems file not found",
                         hint="write it with `prover prepare-data` (e.g. `prover prepare-data examples --out problems.jsonl`)")

    def bad(line_no: int, reason: str) -> None:
        if malformed is None:
            raise InputError(f"{path}:{line_no}: {reason}")
        malformed.append({"line": line_no, "reason": reason})

    problems: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    splits: set[Any] = set()
    for line_no, problem in read_jsonl(path):
        if isinstance(problem, BadLine):
            bad(line_no, problem.reason)
            continue
        pid = problem.get("id")
        if not isinstance(pid, str) or not pid:
            bad(line_no, "problem has no string `id`")
            continue
        if pid in seen:
            bad(line_no, f"duplicate problem id {pid!r} (first on line {seen[pid]})")
            continue
        seen[pid] = line_no
        splits.add(problem.get("split"))
        if split is None or problem.get("split") == split:
            defect = problem_defect(problem, task_name) if task_name else None
            if defect:
                bad(line_no, f"problem {pid!r}: {defect}")
                continue
            problems.append(problem)
    if split is not None and not problems and not (malformed and any(s == split for s in splits)):
        raise no_problems_in_split(path, split, split_key, splits)
    return problems


def eval_problems_path(config: Config) -> Path:
    """The file `prover eval` samples: `eval.problems`, else the run's problems file."""
    return Path(config.eval.problems) if config.eval.problems else config.problems_path


def eval_problems(config: Config, malformed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `eval.split` problems of `eval_problems_path` usable by `data.task` (bad lines go to `malformed`)."""
    path = eval_problems_path(config)
    problems = read_problems(path, split=config.eval.split, malformed=malformed, task_name=config.data.task,
                             split_key="eval.split")
    if not problems:
        raise InputError(f"{path}: no usable problem in split {config.eval.split!r} ({len(malformed)} malformed line(s))")
    return problems


def problem_defect(problem: dict[str, Any], task_name: str) -> str | None:
    """Why `problem` cannot be prompted or scored by task `task_name` (a missing or wrong-typed field,
    or the task's own check: prover_cli/tasks, `problem_fields`), or None."""
    return task_defect(problem, task_name)


def check_fields(problems: list[dict[str, Any]], task_name: str, label: str) -> None:
    """InputError naming the first problem `task_name` cannot prompt or score."""
    for problem in problems:
        defect = problem_defect(problem, task_name)
        if defect:
            raise InputError(f"{label}: problem {problem.get('id')!r} {defect}",
                             hint="prepare the problems for this task, or set data.task to match them")
