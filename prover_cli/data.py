"""prepare-data: map a dataset to problems.jsonl, reporting every row it does not keep.

    prover prepare-data ../shared/data/minif2f/minif2f.jsonl --out problems.jsonl
    prover prepare-data internlm/Lean-Workbook --set data.status=proved --limit 2000
    prover prepare-data examples            # the few Lean problems shipped with prover
    prover prepare-data --config configs/demo.toml   # countdown: generated from run.seed

A source is a Hugging Face dataset id or a local directory (both loaded with `datasets`, every
split), a local .json / .jsonl / .parquet file, or `examples`. A preset maps its layout to our
schema (docs/formats.md): `id`, `formal_statement` (ending in `:= by`), `header`,
`informal_statement`, `split`, `source`, plus `informal_prefix` and `status` where the source
has them.

- `minif2f`: the DeepSeek-Prover JSONL layout (`name`, `split`, `informal_prefix`,
  `formal_statement`, `goal`, `header`); splits (`valid`, `test`) and headers kept as they are.
- `lean-workbook`: internlm/Lean-Workbook, either layout it ships: `lean_workbook.json`
  (`natural_language_statement`, `formal_statement` ending in `:= by sorry`, `split` naming the
  subset, `proof` list) or `wkbk_1009.parquet` (one row per tactic: `id`, `status`, `tactic`,
  ..., so an id repeats). The trailing `sorry` is removed, the header is `verify.header`, the
  subset goes to `subset`, and the train/valid split is the seeded one. `data.status` filters
  on `status` (`proved` / anything else), derived from a non-empty `proof` list when there is
  no `status` column.
- `problems`: our own schema (e.g. a file written by this command), lean or countdown rows.
- `countdown`: `prover_cli.tasks.countdown.generate_problems` with `run.seed`; no source. With
  `data.task = "toy"` and no source, the toy task's generator likewise. `--limit` generates
  that many (generation is a pure function of the seed, so the first N are the same either way).

Every row that is not kept is counted under a reason (not valid JSON, missing statement,
duplicate id, duplicate statement, status filter, over the limit...) with its first row numbers,
and returned in the summary: nothing disappears silently.

Rules: ids must be unique (sample ids are built from them). With `data.dedupe`, a statement
equal to an earlier one up to whitespace and the theorem's name is a duplicate (Lean Workbook
states some problems twice under different names). Rows keep their source split when they have
a real one; the others get a seeded split: `valid` when a hash of (run.seed, id) falls below
`data.valid_fraction`, else `train`. Hashing each id (rather than shuffling the list) keeps a
problem's split the same when rows are added, removed or limited. `--limit` keeps the first N
problems in source order, after filtering and dedupe.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from prover_cli.errors import ConfigError, InputError
from prover_cli.jsonl import BadLine, read_jsonl, write_jsonl_atomic
from prover_cli.progress import NULL_REPORTER, Reporter

PRESETS = ("auto", "lean-workbook", "minif2f", "problems", "countdown")
EXAMPLES = "examples"
LOCAL_SUFFIXES = (".json", ".jsonl", ".parquet")
# Columns that hold a solution: never copied into problems (they would travel into prompts and
# samples, and a `proof` next to a completion could be verified instead of the model's answer).
SOLUTION_FIELDS = frozenset({"proof", "formal_proof", "full_code", "completion", "raw_completion", "tactic"})
_STANDARD_SPLITS = {"train": "train", "valid": "valid", "validation": "valid", "test": "test"}
_FIRST_ROWS_SHOWN = 5


def prepare_data(config: Any, *, source: str | None = None, out_path: str | Path | None = None,
                 limit: int | None = None, preset: str | None = None,
                 reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Read `source`, map it with `preset`, write problems.jsonl; return the counts and tables."""
    source = config.data.source if source is None else source
    preset = preset or config.data.preset
    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r}: must be one of {', '.join(PRESETS)}")
    limit = config.data.limit if limit is None else limit
    if limit < 0:
        raise ConfigError(f"--limit {limit}: must be >= 0 (0 keeps all)")
    out = Path(out_path) if out_path else config.problems_path

    generated_task = "countdown" if preset == "countdown" else None
    if not source and preset == "auto" and config.data.task in ("countdown", "toy"):
        generated_task = config.data.task
    if generated_task:
        if source:
            raise ConfigError(f"--preset countdown generates its problems from run.seed; it takes no source (got {source!r})")
        label, preset = f"{generated_task}(seed={config.run.seed})", generated_task
        report = _generated(config, generated_task, limit)
    else:
        if not source:
            raise ConfigError(
                "no source to prepare: pass SOURCE (a Hugging Face dataset id, a local "
                ".json/.jsonl/.parquet file, or `examples`) or set data.source",
                hint="`prover prepare-data examples --out problems.jsonl` works offline")
        rows, label = read_source(source)
        if preset == "auto":
            preset = detect_preset(rows, label)
        report = _map_rows(rows, preset, label, config, limit, reporter)

    if not report.kept:
        reasons = "; ".join(f"{reason}: {count}" for reason, count in report.dropped.most_common())
        raise InputError(f"{label}: no problem kept out of {report.rows} rows ({reasons or 'empty source'})")
    write_jsonl_atomic(out, report.kept)
    return _summary(report, out, label, preset)


# --------------------------------------------------------------------------------------------
# Reading a source: (row number, row or BadLine, split name from `datasets` or None)
# --------------------------------------------------------------------------------------------

Row = tuple[int, "dict[str, Any] | BadLine", "str | None"]


def read_source(source: str) -> tuple[list[Row], str]:
    """All rows of `source` and the label written into each problem's `source` field."""
    if source == EXAMPLES:
        return [(n, obj, None) for n, obj in read_jsonl(examples_path())], EXAMPLES
    path = Path(source).expanduser()
    if path.is_dir():
        return _load_with_datasets(str(path)), source
    if path.is_file():
        return _read_local_file(path), source
    if path.suffix.lower() in LOCAL_SUFFIXES or source.startswith(("/", "./", "../", "~")):
        raise InputError(f"{source}: file not found")
    return _load_with_datasets(source), source


def examples_path() -> Path:
    from importlib.resources import files

    return Path(str(files("prover_cli") / "examples" / "lean_examples.jsonl"))


def _read_local_file(path: Path) -> list[Row]:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return [(n, obj, None) for n, obj in read_jsonl(path)]
    if suffix == ".json":
        text = path.read_text(encoding="utf-8")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":  # JSON Lines under a .json name, as some hub files are
                return [(n, obj, None) for n, obj in read_jsonl(path)]
            raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        return [(i, obj if isinstance(obj, dict) else BadLine(f"expected a JSON object, got {type(obj).__name__}"), None)
                for i, obj in enumerate(data, start=1)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # brought by `datasets`

        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on bad files
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        return [(i, obj, None) for i, obj in enumerate(table.to_pylist(), start=1)]
    raise InputError(f"{path}: unsupported file type {suffix or '(none)'}; use .json, .jsonl or .parquet")


def _load_with_datasets(source: str) -> list[Row]:
    """Every split of a hub dataset (or a local dataset directory), in split order."""
    from datasets import load_dataset

    try:
        loaded = load_dataset(source)
    except (OSError, ValueError) as exc:  # not found, offline, gated, bad files: all OSError/ValueError
        raise InputError(f"{source}: cannot load it as a Hugging Face dataset ({exc})",
                         hint="check the dataset id and the network, or pass a local .jsonl/.parquet file") from None
    rows: list[Row] = []
    for split_name, split in loaded.items():
        rows.extend((i, dict(obj), split_name) for i, obj in enumerate(split, start=1))
    return rows


def detect_preset(rows: list[Row], label: str) -> str:
    """The layout, from the columns of the first readable row."""
    first = next((obj for _, obj, _ in rows if isinstance(obj, dict)), None)
    if first is None:
        raise InputError(f"{label}: no readable row to detect the layout from")
    keys = set(first)
    if {"name", "formal_statement"} <= keys and keys & {"header", "informal_prefix"}:
        return "minif2f"
    if {"natural_language_statement", "formal_statement"} <= keys:
        return "lean-workbook"
    if "id" in keys and ("formal_statement" in keys or {"numbers", "target"} <= keys or "prompt" in keys):
        return "problems"
    raise InputError(f"{label}: cannot tell the layout from its columns {sorted(keys)}; "
                     f"pass --preset (one of {', '.join(p for p in PRESETS if p != 'auto')})")


# --------------------------------------------------------------------------------------------
# Mapping rows to problems
# --------------------------------------------------------------------------------------------

@dataclass
class Drop:
    """A row that is not kept, and why (the reason is a category: it is counted)."""

    reason: str


@dataclass
class Report:
    rows: int
    kept: list[dict[str, Any]]
    dropped: Counter
    first_rows: dict[str, list[str]]


_SORRY_TAIL = re.compile(r"(:=\s*by)\s+sorry\s*$")
_BY_TAIL = re.compile(r":=\s*by\s*$")
_DECL_NAME = re.compile(r"\b(theorem|lemma)\s+([^\s(:{\[]+)")


def _statement(value: Any) -> str | Drop:
    """The statement ending in `:= by` (a trailing `sorry` removed) plus a newline, or why not."""
    if not isinstance(value, str) or not value.strip():
        return Drop("missing formal_statement")
    text = _SORRY_TAIL.sub(r"\1", value.rstrip())
    if not _BY_TAIL.search(text):
        return Drop("formal_statement does not end with `:= by`")
    return text + "\n"


def _dedupe_key(statement: str) -> str:
    """Equal up to whitespace and the theorem's name."""
    return " ".join(_DECL_NAME.sub(r"\1 _", statement, count=1).split())


def _theorem_name(statement: Any) -> str | None:
    found = _DECL_NAME.search(statement) if isinstance(statement, str) else None
    return found.group(2) if found else None


def _clean_id(value: Any) -> str | Drop:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        return Drop("missing id")
    text = str(value).strip()
    if any(ch.isspace() for ch in text):
        return Drop("id contains whitespace")
    return text


def _informal_from_prefix(prefix: str) -> str:
    text = prefix.strip()
    text = text[3:] if text.startswith("/--") else text[2:] if text.startswith("/-") else text
    return (text[:-2] if text.endswith("-/") else text).strip()


def _map_minif2f(row: dict[str, Any], hf_split: str | None, config: Any) -> dict[str, Any] | Drop:
    pid = _clean_id(row.get("name"))
    if isinstance(pid, Drop):
        return Drop("missing name")
    statement = _statement(row.get("formal_statement"))
    if isinstance(statement, Drop):
        return statement
    prefix = row.get("informal_prefix") if isinstance(row.get("informal_prefix"), str) else ""
    problem = {"id": pid, "formal_statement": statement, "header": row.get("header") or config.verify.header}
    if prefix:
        problem["informal_prefix"] = prefix
        problem["informal_statement"] = _informal_from_prefix(prefix)
    problem["split"] = _known_split(row.get("split")) or _known_split(hf_split)
    return problem


def _map_lean_workbook(row: dict[str, Any], hf_split: str | None, config: Any) -> dict[str, Any] | Drop:
    raw_statement = row.get("formal_statement")
    pid = _clean_id(row["id"]) if row.get("id") not in (None, "") else (_theorem_name(raw_statement) or Drop("missing id"))
    if isinstance(pid, Drop):
        return pid
    statement = _statement(raw_statement)
    if isinstance(statement, Drop):
        return statement
    problem: dict[str, Any] = {"id": pid, "formal_statement": statement, "header": config.verify.header}
    informal = row.get("natural_language_statement")
    if isinstance(informal, str) and informal.strip():
        problem["informal_statement"] = informal.strip()
    if isinstance(row.get("status"), str) and row["status"]:
        problem["status"] = row["status"]
    elif isinstance(row.get("proof"), list):
        problem["status"] = "proved" if any(isinstance(p, str) and p.strip() for p in row["proof"]) else "unproved"
    if isinstance(row.get("split"), str) and row["split"]:
        problem["subset"] = row["split"]  # lean_workbook / lean_workbook_plus: a subset, not a split
    problem["split"] = None  # always the seeded split: the hub's single `train` split is everything
    return problem


def _map_problems(row: dict[str, Any], hf_split: str | None, config: Any) -> dict[str, Any] | Drop:
    pid = _clean_id(row.get("id"))
    if isinstance(pid, Drop):
        return pid
    problem = {key: value for key, value in row.items() if key not in SOLUTION_FIELDS}
    problem["id"] = pid
    if "formal_statement" not in row and {"numbers", "target"} <= row.keys():
        if not isinstance(row["numbers"], list) or not isinstance(row["target"], int):
            return Drop("bad countdown numbers/target")
    elif "formal_statement" not in row and "prompt" in row:
        if not isinstance(row["prompt"], str):
            return Drop("bad toy prompt")
    else:
        statement = _statement(row.get("formal_statement"))
        if isinstance(statement, Drop):
            return statement
        problem["formal_statement"] = statement
        problem["header"] = row.get("header") or config.verify.header
    problem["split"] = _known_split(row.get("split"), any_name=True) or _known_split(hf_split)
    problem.pop("source", None)
    return problem


def _known_split(value: Any, any_name: bool = False) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    if any_name:  # our own files may use any split name
        return _STANDARD_SPLITS.get(value, value)
    return _STANDARD_SPLITS.get(value)


MAPPERS: dict[str, Callable[[dict[str, Any], str | None, Any], dict[str, Any] | Drop]] = {
    "minif2f": _map_minif2f,
    "lean-workbook": _map_lean_workbook,
    "problems": _map_problems,
}


def _map_rows(rows: list[Row], preset: str, label: str, config: Any, limit: int, reporter: Reporter) -> Report:
    mapper = MAPPERS[preset]
    report = Report(rows=len(rows), kept=[], dropped=Counter(), first_rows=defaultdict(list))
    seen_ids: set[str] = set()
    seen_statements: set[str] = set()
    wanted_status = config.data.status

    def drop(reason: str, row_no: int, split: str | None) -> None:
        report.dropped[reason] += 1
        if len(report.first_rows[reason]) < _FIRST_ROWS_SHOWN:
            report.first_rows[reason].append(f"{split}:{row_no}" if split else str(row_no))

    with reporter.task("prepare-data", total=len(rows), unit="rows") as progress:
        for index, (row_no, row, hf_split) in enumerate(rows, start=1):
            if index % 1000 == 0:  # rich redraws per call: advance in chunks on 100k-row datasets
                progress.advance(1000)
            if isinstance(row, BadLine):
                drop("not valid JSON" if row.reason.startswith("not valid JSON") else "not a JSON object", row_no, hf_split)
                continue
            problem = mapper(row, hf_split, config)
            if isinstance(problem, Drop):
                drop(problem.reason, row_no, hf_split)
                continue
            if wanted_status != "any":
                status = problem.get("status")
                if status is None:
                    drop("no status to filter on (data.status)", row_no, hf_split)
                    continue
                if (status == "proved") != (wanted_status == "proved"):
                    drop(f"status filter (data.status = {wanted_status})", row_no, hf_split)
                    continue
            if problem["id"] in seen_ids:
                drop("duplicate id", row_no, hf_split)
                continue
            seen_ids.add(problem["id"])
            if config.data.dedupe:
                key = _dedupe_key(problem["formal_statement"]) if "formal_statement" in problem else None
                if key is not None and key in seen_statements:
                    drop("duplicate statement", row_no, hf_split)
                    continue
                if key is not None:
                    seen_statements.add(key)
            if limit and len(report.kept) >= limit:
                drop("over the limit", row_no, hf_split)
                continue
            problem["source"] = label
            report.kept.append(problem)
        progress.advance(len(rows) % 1000)

    for problem in report.kept:
        if not problem.get("split"):
            problem["split"] = seeded_split(problem["id"], config.run.seed, config.data.valid_fraction)
    report.kept = [_ordered(p) for p in report.kept]
    return report


def seeded_split(problem_id: str, seed: int, valid_fraction: float) -> str:
    """`valid` or `train`, a pure function of (seed, id): stable when other rows come and go."""
    digest = hashlib.sha256(f"prover-split:{seed}:{problem_id}".encode()).digest()
    unit = int.from_bytes(digest[:8], "big") / 2**64
    return "valid" if unit < valid_fraction else "train"


_FIELD_ORDER = ("id", "formal_statement", "header", "informal_statement", "informal_prefix", "split", "source",
                "status", "subset")


def _ordered(problem: dict[str, Any]) -> dict[str, Any]:
    """Schema fields first (so files read well), then anything a `problems` row carried along."""
    from prover_cli.jsonl import fields_first

    return fields_first(problem, _FIELD_ORDER)


def _generated(config: Any, task: str, limit: int) -> Report:
    """Countdown (data.countdown_*) or toy problems, generated from run.seed: solvable by construction."""
    d = config.data
    if task == "countdown":
        from prover_cli.tasks.countdown import generate_problems

        count = limit or d.countdown_problems
        problems = generate_problems(count, d.countdown_numbers, d.countdown_max_number, config.run.seed)
    else:
        from prover_cli.tasks import toy

        count = limit or toy.DEFAULT_COUNT
        problems = toy.generate_problems(count, config.run.seed)
    return Report(rows=len(problems), kept=problems, dropped=Counter(), first_rows=defaultdict(list))


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------

def _summary(report: Report, out: Path, label: str, preset: str) -> dict[str, Any]:
    splits = Counter(p["split"] for p in report.kept)
    tables = [{
        "title": f"prepare-data: {len(report.kept)} problems from {label} ({preset})",
        "columns": ["split", "problems"],
        "rows": [[name, count] for name, count in sorted(splits.items())],
    }]
    if report.dropped:
        tables.append({
            "title": f"rows not kept: {sum(report.dropped.values())} of {report.rows}",
            "columns": ["reason", "rows", "first rows"],
            "rows": [[reason, count, ", ".join(report.first_rows.get(reason, []))]
                     for reason, count in report.dropped.most_common()],
        })
    return {
        "ok": True,
        "out": str(out),
        "source": label,
        "preset": preset,
        "rows": report.rows,
        "kept": len(report.kept),
        "dropped": sum(report.dropped.values()),
        "dropped_by_reason": dict(report.dropped),
        "dropped_first_rows": {reason: rows for reason, rows in report.first_rows.items() if rows},
        "splits": dict(sorted(splits.items())),
        "tables": tables,
    }


def iter_problems(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Problems of a problems.jsonl we wrote: (line, problem); a bad line is an InputError naming it."""
    for line_no, obj in read_jsonl(path):
        if isinstance(obj, BadLine):
            raise InputError(f"{path}:{line_no}: {obj.reason}")
        yield line_no, obj
