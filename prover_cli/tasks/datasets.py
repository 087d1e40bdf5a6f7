"""prepare-data: map a dataset to problems.jsonl, keeping only rows verify accepts and reporting the rest.

    prover prepare-data ../shared/data/minif2f/minif2f.jsonl --out problems.jsonl
    prover prepare-data internlm/Lean-Workbook --set data.status=proved --limit 2000
    prover prepare-data PutnamBench/lean4/src --set data.fill_answers=true   # a directory of .lean files
    prover prepare-data examples            # the few Lean problems shipped with prover
    prover prepare-data --config configs/demo.toml   # countdown: generated from run.seed
    prover prepare-data --preset toy --out toy.jsonl  # any task that generates its problems

A source is a local .json / .jsonl / .parquet / .lean file, a local directory (every such file in
it is read), a Hugging Face dataset id (its data files are downloaded and read the same way, every
file, not the one `datasets` would pick), or `examples`. Each file's layout is detected from its
columns (`--preset` forces one); files of different layouts in one directory are an error that
names them. Layouts (docs/formats.md has the columns):

- `deepseek` (alias `minif2f`): DeepSeek-Prover-V1.5's miniF2F and ProofNet (`name`, `split`,
  `informal_prefix`, `formal_statement`, `header`), and Goedel-Prover-V1's files in that layout.
- `goedel-v2`: Goedel-Prover-V2's miniF2F and MOBench (`name`/`problem_id`, `formal_statement`
  with the header, or a preamble, inside it, `lean4_code`, optional `header`).
- `lean-workbook`: internlm/Lean-Workbook's `lean_workbook.json` (`natural_language_statement`,
  `formal_statement`, `split` naming the subset, `proof` list) and `wkbk_1009.parquet` (one row per
  tactic: `id`, `status`, `tactic`, …; an id repeats); Goedel-V1-style files with `header: ""`.
- `putnambench`: one `.lean` file per problem (imports, a docstring, `theorem … :=\nsorry`; some
  declare `abbrev putnam_…_solution : T := sorry` with the intended answer in a comment under it).
- `problems`: our own schema (e.g. a file written by this command): each row shaped for a task (it
  holds the fields the task requires: `row_task`), checked by that task's field rules.
- the name of a task that generates its problems (countdown, toy, a registered one: its
  `problems_from_seed`): generated from `run.seed`, no source; with no source and `auto`, the
  problems of `data.task` when it generates its own.

The contract with verify: a Lean row is kept only if verify's own statement check
(`prover_cli.verify.text.statement.check_statement`) accepts its statement and header, so every kept
row can be verified; every other row is counted under its reason. Before that check each row is
normalised (`normalise_lean`):
- a trailing `sorry` / `by sorry` is removed; term-mode statements (`… :=`) stay term-mode (the
  proof may be a term or a `by` block);
- imports, options and `open` lines inside the statement move into `header`;
- a *trusted preamble* before the final theorem (`abbrev`/`def` answers, `variable`, `structure`,
  `inductive`, …) moves into `header` too: it is the problem's context, trusted input exactly
  like the header (review it as you would the statement). A doc comment right before the theorem
  becomes `informal_prefix` (a header may not end in a doc comment: Lean would reject it);
- PutnamBench answers (`abbrev …_solution := sorry`) are filled from the answer recorded in the
  file with `data.fill_answers = true` (proof-only evaluation), else the problem is reported as
  needing an answer. No kept row has a `sorry` in its header or statement.
- Rows without any header get the header of the model family's own evaluation
  (`prover_cli.policy.prompts.family_header`: DeepSeek's `maxHeartbeats 0` header and its blank line),
  or `verify.header` for `plain`.

Other rules: ids must be unique (sample ids are built from them). With `data.dedupe`, a problem
whose header + statement equals an earlier one up to whitespace and the theorem's name is a
duplicate (Lean Workbook states some problems twice under different names). Rows keep their
source split when they have a real one (a column, or a file named like a split); the others
get a seeded split: `valid` when a hash of (run.seed, id) falls below `data.valid_fraction`,
else `train`. Hashing each id (rather than shuffling the list) keeps a problem's split the same
when rows are added, removed or limited. PutnamBench problems are `test`. `--limit` keeps the
first N problems in source order (files in name order), after filtering and dedupe.

One bad line costs one line: a row that cannot be read at all (not UTF-8, not JSON, not an
object, over io.max_line_bytes, a number that is not finite: docs/formats.md) is named by file and
line, the other rows are mapped and written, and the result is `ok: false` (exit 1, as verify and
eval). Rows filtered on purpose (the reasons above) do not change the exit code.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from importlib.resources import files
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prover_cli import streams
from prover_cli.config import Config, check_preset
from prover_cli.errors import ConfigError, InputError
from prover_cli.fsio.jsonl import BadLine, fields_first, non_finite_in, read_jsonl, read_utf8, write_jsonl_atomic
from prover_cli.policy.prompts import family_choice, family_header
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import generates_problems, problem_defect, row_task, task_names
from prover_cli.tasks.lean import DECL_NAME
from prover_cli.tasks.problems import content_key, generated_problems
from prover_cli.verify.text.lexer import LexError, lex
from prover_cli.verify.text.statement import BadRecord, check_statement

# The layouts of a source's rows; a preset may also name a task that generates its problems (`generated_task`).
PRESETS = ("auto", "deepseek", "goedel-v2", "lean-workbook", "putnambench", "problems")
PRESET_ALIASES = {"minif2f": "deepseek"}
EXAMPLES = "examples"
DATA_SUFFIXES = (".json", ".jsonl", ".parquet")
LEAN_SUFFIX = ".lean"
LOCAL_SUFFIXES = (*DATA_SUFFIXES, LEAN_SUFFIX)
# Columns that hold a solution: never copied into problems (they would travel into prompts and
# samples, and a `proof` next to a completion could be verified instead of the model's answer).
SOLUTION_FIELDS = frozenset({"proof", "formal_proof", "full_code", "completion", "raw_completion", "tactic"})
_STANDARD_SPLITS = {"train": "train", "valid": "valid", "validation": "valid", "test": "test"}
_FIRST_ROWS_SHOWN = 5
_LEAN_FILE = "__lean_file__"  # the key under which a .lean file's text travels as one row
# JSON files that describe a dataset or a Lean project rather than hold rows (hub `datasets`
# metadata, Lake's manifest): a directory may carry them beside its data.
_METADATA_FILES = frozenset({"dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json",
                             "lake-manifest.json"})


def generated_task(preset: str) -> str | None:
    """`preset` when it names a task that generates its problems from `run.seed`, else None."""
    return preset if preset not in PRESETS and preset in task_names() and generates_problems(preset) else None


def prepare_data(config: Config, *, source: str | None = None, out_path: str | Path | None = None,
                 limit: int | None = None, preset: str | None = None,
                 reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Read `source`, map it with `preset`, write problems.jsonl; return the counts and tables."""
    source = config.data.source if source is None else source
    preset = PRESET_ALIASES.get(preset or config.data.preset, preset or config.data.preset)
    check_preset(preset, f"--preset {preset!r}")
    limit = config.data.limit if limit is None else limit
    if limit < 0:
        raise ConfigError(f"--limit {limit}: must be >= 0 (0 keeps all)")
    out = Path(out_path) if out_path else config.problems_path

    # A preset naming a task forces that task's generator whatever data.task is; with no source,
    # a task that generates its problems (prover_cli/tasks, `problems_from_seed`) generates them.
    task = generated_task(preset)
    if not source and preset == "auto" and generates_problems(config.data.task):
        task = config.data.task
    files = 1
    if task:
        if source:
            raise ConfigError(f"--preset {preset} generates its problems from run.seed; it takes no source (got {source!r})")
        label, preset = f"{task}(seed={config.run.seed})", task
        report = _generated(config, task, limit)
    else:
        if not source:
            raise ConfigError(
                "no source to prepare: pass SOURCE (a Hugging Face dataset id, a local "
                ".json/.jsonl/.parquet/.lean file or a directory of them, or `examples`) or set data.source",
                hint="`prover prepare-data examples --out problems.jsonl` works offline")
        parts, label = read_source_files(source)
        preset = detect_layout(parts, label) if preset == "auto" else preset
        if preset != "putnambench" and any(p.lean for p in parts):
            raise InputError(f"{label}: .lean files ({_names([p for p in parts if p.lean])}) are read only with "
                             f"the putnambench layout, not {preset}")
        rows = [row for part in parts for row in part.rows]
        report = _map_rows(rows, preset, label, config, limit, reporter)
        files = len(parts)

    if not report.kept:
        reasons = "; ".join(f"{reason}: {count}" for reason, count in report.dropped.most_common())
        raise InputError(f"{label}: no problem kept out of {report.rows} rows ({reasons or 'empty source'})")
    write_jsonl_atomic(out, report.kept)
    for item in report.malformed:  # one bad line costs one line: named here, the command exits 1
        reporter.log(f"{_row_place(label, item)}: {item['reason']}")
    return _summary(report, out, label, preset, files)


def _row_place(label: str, item: dict[str, Any]) -> str:
    """`source:line`, or `source/file:row` for a file of a directory (or hub dataset)."""
    return f"{label.rstrip('/')}/{item['file']}:{item['line']}" if item.get("file") else f"{label}:{item['line']}"


# --------------------------------------------------------------------------------------------
# Reading a source: files, each a list of (row number, row or BadLine, split, where)
# --------------------------------------------------------------------------------------------

Row = tuple[int, "dict[str, Any] | BadLine", "str | None", "str | None"]


@dataclass
class SourceFile:
    """One file of a source: its name (None for a single-file source), rows, and whether it is .lean."""

    name: str | None
    rows: list[Row]
    lean: bool = False


def read_source(source: str) -> tuple[list[Row], str]:
    """All rows of `source`, every file, and the label written into each problem's `source` field."""
    parts, label = read_source_files(source)
    return [row for part in parts for row in part.rows], label


def read_source_files(source: str) -> tuple[list[SourceFile], str]:
    """The files of `source` (one, every file of a directory, or a hub dataset's data files)."""
    if source == EXAMPLES:
        return [SourceFile(None, [(n, obj, None, None) for n, obj in read_jsonl(examples_path())])], EXAMPLES
    path = Path(source).expanduser()
    if path.is_dir():
        return _read_directory(path, source), source
    if path.is_file():
        return [_read_local_file(path, None)], source
    if path.suffix.lower() in LOCAL_SUFFIXES or source.startswith(("/", "./", "../", "~")):
        raise InputError(f"{source}: file not found")
    return _read_directory(_download_hub_dataset(source), source), source


def examples_path() -> Path:
    return Path(str(files("prover_cli") / "examples" / "lean_examples.jsonl"))


def _read_directory(folder: Path, label: str) -> list[SourceFile]:
    """Every data and .lean file under `folder` (hidden folders and Lake's build tree skipped), by name."""
    paths = sorted(p for p in folder.rglob("*")
                   if p.is_file() and p.suffix.lower() in LOCAL_SUFFIXES and p.name not in _METADATA_FILES
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not paths:
        raise InputError(f"{label}: no .json, .jsonl, .parquet or .lean file in this directory")
    return [_read_local_file(p, p.relative_to(folder).as_posix()) for p in paths]


def _split_from_name(name: str | None) -> str | None:
    """A split named by a file or its folder: `test.jsonl`, `train-00000-of-00001.parquet`, `valid/x.json`."""
    if not name:
        return None
    for part in reversed(Path(name).with_suffix("").parts):
        match = re.match(r"(train|test|valid|validation)(?:$|[-_.]\d)", part.lower())
        if match:
            return _STANDARD_SPLITS[match.group(1)]
    return None


def _read_local_file(path: Path, name: str | None) -> SourceFile:
    suffix = path.suffix.lower()
    where = name
    split = _split_from_name(name)
    if suffix == LEAN_SUFFIX:
        text = read_utf8(path)  # a bad byte names its line
        row = {_LEAN_FILE: text, "__stem__": path.stem}
        return SourceFile(name or path.name, [(1, row, None, name or path.name)], lean=True)
    if suffix == ".jsonl":
        return SourceFile(name, [(n, obj, split, where) for n, obj in read_jsonl(path)])
    if suffix == ".json":
        text = read_utf8(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":  # JSON Lines under a .json name, as some hub files are
                return SourceFile(name, [(n, obj, split, where) for n, obj in read_jsonl(path)])
            raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        except RecursionError:
            raise InputError(f"{path}: not valid JSON (nested too deeply)") from None
        except ValueError as exc:  # an integer longer than Python converts: the document cannot be read
            raise InputError(f"{path}: number too long to read ({exc})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise InputError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        return SourceFile(name, [(i, _checked_row(obj), split, where) for i, obj in enumerate(data, start=1)])
    if suffix == ".parquet":
        import pyarrow.parquet as pq  # brought by `datasets`

        try:
            table = pq.read_table(path)
        except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on bad files
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
        return SourceFile(name, [(i, _checked_row(obj), split, where) for i, obj in enumerate(table.to_pylist(), start=1)])
    raise InputError(f"{path}: unsupported file type {suffix or '(none)'}; use .json, .jsonl, .parquet or .lean")


def _checked_row(obj: Any) -> "dict[str, Any] | BadLine":
    """A row a library decoded whole (a .json document, Parquet), or a BadLine as read_jsonl would
    give its line: not an object, or holding a number that is not finite (NaN, inf: not JSON,
    so the row is refused rather than written with its value changed)."""
    if not isinstance(obj, dict):
        return BadLine(f"expected a JSON object, got {type(obj).__name__}")
    found = non_finite_in(obj)
    if found is not None:
        return BadLine(f"not a finite number: {found}; the row is refused rather than its value changed")
    return obj


def _download_hub_dataset(repo_id: str) -> Path:
    """Every data file of a hub dataset repository, downloaded (cached) into a local folder.

    `datasets.load_dataset` would read only the files its split configuration names (for
    internlm/Lean-Workbook: the Parquet file, not lean_workbook.json); reading the files
    ourselves reads all of them, and each file's layout is detected on its own.
    """
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(repo_id=repo_id, repo_type="dataset",
                                   allow_patterns=[f"*{s}" for s in LOCAL_SUFFIXES])
    except (OSError, ValueError) as exc:  # not found, offline, gated: hub errors are OSError/ValueError
        raise InputError(f"{repo_id}: cannot download it as a Hugging Face dataset ({exc})",
                         hint="check the dataset id and the network, or pass a local file or directory") from None
    return Path(folder)


def _names(parts: list[SourceFile], shown: int = 4) -> str:
    names = [p.name or "?" for p in parts]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def detect_layout(parts: list[SourceFile], label: str) -> str:
    """The one layout of all files of a source; an error naming the files when they differ."""
    layouts: dict[str, list[SourceFile]] = defaultdict(list)
    for part in parts:
        layout = "putnambench" if part.lean else detect_preset(part.rows, part.name or label)
        layouts[layout].append(part)
    if len(layouts) == 1:
        return next(iter(layouts))
    mixed = "; ".join(f"{layout}: {_names(group)}" for layout, group in sorted(layouts.items()))
    raise InputError(f"{label}: its files have different layouts ({mixed}); pass --preset to read every "
                     "file with one layout, or point at one file or folder")


def detect_preset(rows: list[Row], label: str) -> str:
    """The layout, from the columns of the first readable row."""
    first = next((row[1] for row in rows if isinstance(row[1], dict)), None)
    if first is None:
        raise InputError(f"{label}: no readable row to detect the layout from")
    keys = set(first)
    if _LEAN_FILE in keys:
        return "putnambench"
    if "formal_statement" in keys and "lean4_code" in keys:
        return "goedel-v2"
    if {"natural_language_statement", "formal_statement"} <= keys:
        return "lean-workbook"
    if {"name", "formal_statement"} <= keys and keys & {"header", "informal_prefix"}:
        return "deepseek"
    if "id" in keys and row_task(first) is not None:  # a row shaped for a task: our own schema
        return "problems"
    raise InputError(f"{label}: cannot tell the layout from its columns {sorted(keys)}; "
                     f"pass --preset (one of {', '.join(p for p in PRESETS if p != 'auto')})")


# --------------------------------------------------------------------------------------------
# Normalising a Lean row, and the contract: verify's own statement check
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
    renamed: list[str] = field(default_factory=list)
    # Rows that could not be read at all (a BadLine: not UTF-8, not JSON, not an object, a number
    # that is not finite, too long): {"line", "reason"} and "file" within a directory source.
    malformed: list[dict[str, Any]] = field(default_factory=list)


# `:= by sorry`, `:= by\n  sorry`, `:=\nsorry` (term mode) at the very end -> `:= by` / `:=`.
_SORRY_TAIL = re.compile(r":=(\s*by)?\s+sorry\s*$")
_DECL_NAME = DECL_NAME  # one definition of a declaration's name (prover_cli/tasks/lean.py)
_FORBIDDEN_IN_TRUSTED = ("sorry", "admit")


def normalise_lean(statement: Any, header: Any, prefix: Any, default_header: str) -> dict[str, str] | Drop:
    """`formal_statement`, `header` (and `informal_prefix`) that verify accepts, or why not.

    See the module docstring: the header embedded in a statement and a trusted preamble before
    the final theorem move into `header`, a trailing `sorry` goes, a doc comment right before the
    theorem becomes the informal prefix when the row has none.
    """
    if not isinstance(statement, str) or not statement.strip():
        return Drop("missing formal_statement")
    header = header if isinstance(header, str) else ""
    prefix = prefix if isinstance(prefix, str) else ""
    text = _SORRY_TAIL.sub(lambda m: ":= by" if m.group(1) else ":=", statement.replace("\r\n", "\n").rstrip())
    try:
        lexed = lex(text)
    except LexError as exc:
        return Drop(f"cannot read formal_statement ({exc})")
    finals = [t for t in lexed.code_tokens()
              if t.kind == "ident" and t.text in ("theorem", "lemma")
              and lexed.code[lexed.code.rfind("\n", 0, t.start) + 1:t.start].strip() == ""]
    if not finals:
        others = [t.text for t in lexed.code_tokens() if t.kind == "ident" and t.text in ("def", "abbrev", "instance", "example")]
        if others:  # ProofNet has a few `def … : CommGroup G :=` "theorems": there is no proposition to prove
            return Drop(f"the statement is a `{others[-1]}`, not a `theorem` (verify checks theorems only)")
        return Drop("no `theorem` or `lemma` in formal_statement")
    start = lexed.code.rfind("\n", 0, finals[-1].start) + 1
    before, doc = _split_trailing_doc(text[:start], lexed.code[:start])
    theorem = text[start:].rstrip() + "\n"

    if before.strip():  # imports / options / preamble inside the statement: into the header
        if _has_imports(before) and header.strip():
            if " ".join(header.split()) not in " ".join(before.split()):
                return Drop("imports in both the statement and the header")
            header = ""  # the statement repeats the header: keep one copy
        if header.strip() and not header.endswith("\n\n"):  # a blank line between header and preamble
            header = header.rstrip("\n") + "\n\n"
        header = (header if header.strip() else "") + before
    try:
        header, header_doc = _split_trailing_doc(header, lex(header).code)
    except LexError as exc:
        return Drop(f"cannot read the header ({exc})")
    doc = doc or header_doc
    if not header.strip():
        header = default_header
    header = header if header.endswith("\n") else header + "\n"
    if _imports_after_code(header):
        return Drop("`import` after other code in the header")
    for what, code in (("header", header), ("formal_statement", theorem)):
        try:
            words = {t.text for t in lex(code).code_tokens() if t.kind == "ident"}
        except LexError as exc:
            return Drop(f"cannot read the {what} ({exc})")
        found = sorted(words & set(_FORBIDDEN_IN_TRUSTED))
        if found:
            return Drop(f"`{found[0]}` in the trusted {what}")

    try:
        check_statement(theorem, header)
    except BadRecord as exc:
        return Drop(f"verify would reject it: {exc}")
    result = {"formal_statement": theorem, "header": header}
    if prefix.strip() and doc and " ".join(doc.split()) not in " ".join(prefix.split()):
        prefix = (prefix if prefix.endswith("\n") else prefix + "\n") + doc  # keep both: neither repeats the other
    prefix = prefix or doc or ""
    if prefix.strip():
        result["informal_prefix"] = prefix if prefix.endswith("\n") else prefix + "\n"
    return result


def _split_trailing_doc(text: str, code: str) -> tuple[str, str]:
    """(text without its trailing doc comment, that doc comment or ""); `code` is `text` comment-blanked."""
    end = len(code.rstrip())  # everything after is comments and whitespace
    region = text[end:]
    at = region.find("/--")
    if at < 0 or not region.rstrip().endswith("-/"):
        return text, ""
    return text[:end + at], region[at:].strip() + "\n"


def _has_imports(text: str) -> bool:
    return any(line.startswith("import ") for line in text.splitlines())


def _imports_after_code(header: str) -> bool:
    """Lean takes imports only at the top of a file: one after any other command cannot work."""
    seen_code = False
    for line in lex(header).code.splitlines():
        if not line.strip():
            continue
        if line.startswith("import "):
            if seen_code:
                return True
        else:
            seen_code = True
    return False


def _dedupe_key(problem: dict[str, Any]) -> str:
    """Equal up to whitespace and the theorem's name (the header counts: it may hold an answer): the
    content key the held-out set is deduplicated by too (prover_cli/tasks/problems.py)."""
    return content_key(problem)


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
    for opener in ("/--", "/-!", "/-"):
        if text.startswith(opener):
            text = text[len(opener):]
            break
    return (text[:-2] if text.endswith("-/") else text).strip()


# --------------------------------------------------------------------------------------------
# Mapping rows to problems, one mapper per layout
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Context:
    config: Config
    default_header: str


def _lean_fields(problem: dict[str, Any], statement: Any, header: Any, prefix: Any, ctx: _Context) -> dict[str, Any] | Drop:
    normal = normalise_lean(statement, header, prefix, ctx.default_header)
    if isinstance(normal, Drop):
        return normal
    problem.update(normal)
    if "informal_statement" not in problem and normal.get("informal_prefix"):
        problem["informal_statement"] = _informal_from_prefix(normal["informal_prefix"])
    return problem


def _map_deepseek(row: dict[str, Any], split: str | None, ctx: _Context) -> dict[str, Any] | Drop:
    """DeepSeek miniF2F/ProofNet, Goedel-V1 files, and Goedel-V2's (`lean4_code`) miniF2F and MOBench."""
    pid = _clean_id(row.get("name") if row.get("name") not in (None, "") else row.get("problem_id"))
    if isinstance(pid, Drop):
        return Drop("missing name")
    statement = row.get("formal_statement")
    if not (isinstance(statement, str) and statement.strip()) and isinstance(row.get("lean4_code"), str):
        statement = row["lean4_code"]
    problem: dict[str, Any] = {"id": pid}
    informal = row.get("informal_statement")
    if isinstance(informal, str) and informal.strip() and informal != "null":
        problem["informal_statement"] = informal.strip()
    mapped = _lean_fields(problem, statement, row.get("header"), row.get("informal_prefix"), ctx)
    if isinstance(mapped, Drop):
        return mapped
    mapped["split"] = _known_split(row.get("split")) or split
    return mapped


def _map_lean_workbook(row: dict[str, Any], split: str | None, ctx: _Context) -> dict[str, Any] | Drop:
    raw_statement = row.get("formal_statement")
    pid = _clean_id(row["id"]) if row.get("id") not in (None, "") else (_theorem_name(raw_statement) or Drop("missing id"))
    if isinstance(pid, Drop):
        return pid
    problem: dict[str, Any] = {"id": pid}
    informal = row.get("natural_language_statement")
    if isinstance(informal, str) and informal.strip():
        problem["informal_statement"] = informal.strip()
    mapped = _lean_fields(problem, raw_statement, row.get("header"), row.get("informal_prefix"), ctx)
    if isinstance(mapped, Drop):
        return mapped
    problem = mapped
    if isinstance(row.get("status"), str) and row["status"]:
        problem["status"] = row["status"]
    elif isinstance(row.get("proof"), list):
        problem["status"] = "proved" if any(isinstance(p, str) and p.strip() for p in row["proof"]) else "unproved"
    if isinstance(row.get("split"), str) and row["split"]:
        problem["subset"] = row["split"]  # lean_workbook / lean_workbook_plus: a subset, not a split
    problem["split"] = None  # always the seeded split: the hub's single `train` split is everything
    return problem


# `abbrev putnam_1962_a2_solution : T := sorry`, then the intended answer as `-- <answer>`.
_PUTNAM_ANSWER = re.compile(r"^((?:noncomputable\s+)?(?:abbrev|def)\s+(\S+_solution)\b.*:=)\s*sorry\s*$")


def _map_putnambench(row: dict[str, Any], split: str | None, ctx: _Context) -> dict[str, Any] | Drop:
    """One PutnamBench .lean file: the answers (`…_solution := sorry`) filled, or the problem reported."""
    pid = _clean_id(row.get("__stem__"))
    if isinstance(pid, Drop):
        return pid
    lines = row[_LEAN_FILE].replace("\r\n", "\n").split("\n")
    filled = False
    for i, line in enumerate(lines):
        match = _PUTNAM_ANSWER.match(line)
        if not match:
            continue
        if not ctx.config.data.fill_answers:
            return Drop("needs an answer (`…_solution := sorry`; data.fill_answers = true fills the answer "
                        "recorded in the file, for proof-only evaluation)")
        answer = lines[i + 1][2:].strip() if i + 1 < len(lines) and lines[i + 1].startswith("--") else ""
        if not answer:
            return Drop("needs an answer, and the file records none under `…_solution := sorry`")
        lines[i] = f"{match.group(1)} {answer}"
        filled = True
    problem = _lean_fields({"id": pid}, "\n".join(lines), "", "", ctx)
    if isinstance(problem, Drop):
        return problem
    if filled:
        problem["answer_from_file"] = True  # trusted: the benchmark's own answer, not a model's
    problem["split"] = "test"  # PutnamBench is an evaluation set
    return problem


def _map_problems(row: dict[str, Any], split: str | None, ctx: _Context) -> dict[str, Any] | Drop:
    pid = _clean_id(row.get("id"))
    if isinstance(pid, Drop):
        return pid
    problem = {key: value for key, value in row.items() if key not in SOLUTION_FIELDS}
    problem["id"] = pid
    task = row_task(row) if "formal_statement" not in row else None  # a statement: a Lean row, normalised below
    if task is not None:
        defect = problem_defect(problem, task)
        if defect:
            return Drop(f"bad {task} row: {defect}")
    else:
        problem.pop("informal_prefix", None)
        mapped = _lean_fields(problem, row.get("formal_statement"), row.get("header"), row.get("informal_prefix"), ctx)
        if isinstance(mapped, Drop):
            return mapped
        problem = mapped
    problem["split"] = _known_split(row.get("split"), any_name=True) or split
    problem.pop("source", None)
    return problem


def _known_split(value: Any, any_name: bool = False) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    if any_name:  # our own files may use any split name
        return _STANDARD_SPLITS.get(value, value)
    return _STANDARD_SPLITS.get(value)


MAPPERS: dict[str, Callable[[dict[str, Any], str | None, _Context], dict[str, Any] | Drop]] = {
    "deepseek": _map_deepseek,
    "goedel-v2": _map_deepseek,  # the same columns, plus `lean4_code`; normalisation does the rest
    "lean-workbook": _map_lean_workbook,
    "putnambench": _map_putnambench,
    "problems": _map_problems,
}


# Layouts whose names are not unique upstream: ProofNet repeats a textbook exercise number
# (`exercise_3_3`) for different problems of different books. Another problem under a seen
# name is kept as `NAME-2`, `NAME-3`, …; the same problem again is a duplicate.
_RENAMING_PRESETS = ("deepseek", "goedel-v2")


def _rename_duplicate(problem: dict[str, Any], seen_ids: set[str], seen_keys: dict[str, str], preset: str) -> str | None:
    if preset not in _RENAMING_PRESETS or "formal_statement" not in problem:
        return None
    if seen_keys.get(problem["id"]) == _dedupe_key(problem):
        return None  # the same problem again (a few-shot file repeating miniF2F rows)
    suffix = 2
    while f"{problem['id']}-{suffix}" in seen_ids:
        suffix += 1
    return f"{problem['id']}-{suffix}"


def default_header(config: Config) -> str:
    """The header for rows without one: the model family's own evaluation header, else verify.header."""
    family, _ = family_choice(config.model.name, config.model.family)
    return family_header(family) or config.verify.header


def _bad_line_reason(row: BadLine) -> str:
    """The reason a row is counted under: what read_jsonl found wrong with its line."""
    for prefix in ("not valid UTF-8", "not valid JSON", "not a finite number", "number too long to read"):
        if row.reason.startswith(prefix):
            return prefix
    if "io.max_line_bytes" in row.reason:
        return "line longer than io.max_line_bytes"
    return "not a JSON object"


def _map_rows(rows: list[Row], preset: str, label: str, config: Config, limit: int, reporter: Reporter) -> Report:
    mapper = MAPPERS[preset]
    ctx = _Context(config, default_header(config))
    report = Report(rows=len(rows), kept=[], dropped=Counter(), first_rows=defaultdict(list))
    seen_ids: set[str] = set()
    seen_keys: dict[str, str] = {}  # id -> dedupe key of its problem, for renaming repeated names
    seen_statements: set[str] = set()
    wanted_status = config.data.status

    def drop(reason: str, row_no: int, where: str | None) -> None:
        report.dropped[reason] += 1
        if len(report.first_rows[reason]) < _FIRST_ROWS_SHOWN:
            report.first_rows[reason].append(f"{where}:{row_no}" if where else str(row_no))

    with reporter.task("prepare-data", total=len(rows), unit="rows") as progress:
        for index, (row_no, row, split, where) in enumerate(rows, start=1):
            if index % 1000 == 0:  # rich redraws per call: advance in chunks on 100k-row datasets
                progress.advance(1000)
            if isinstance(row, BadLine):
                drop(_bad_line_reason(row), row_no, where)
                report.malformed.append({"line": row_no, "reason": row.reason, **({"file": where} if where else {})})
                continue
            problem = mapper(row, split, ctx)
            if isinstance(problem, Drop):
                drop(problem.reason, row_no, where)
                continue
            if wanted_status != "any":
                status = problem.get("status")
                if status is None:
                    drop("no status to filter on (data.status)", row_no, where)
                    continue
                if (status == "proved") != (wanted_status == "proved"):
                    drop(f"status filter (data.status = {wanted_status})", row_no, where)
                    continue
            if problem["id"] in seen_ids:
                renamed = _rename_duplicate(problem, seen_ids, seen_keys, preset)
                if renamed is None:
                    drop("duplicate id", row_no, where)
                    continue
                report.renamed.append(f"{problem['id']} -> {renamed}")
                problem["id"] = renamed
            seen_ids.add(problem["id"])
            if "formal_statement" in problem:
                seen_keys.setdefault(problem["id"], _dedupe_key(problem))
            if config.data.dedupe and "formal_statement" in problem:
                key = _dedupe_key(problem)
                if key in seen_statements:
                    drop("duplicate statement", row_no, where)
                    continue
                seen_statements.add(key)
            if limit and len(report.kept) >= limit:
                drop("over the limit", row_no, where)
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
    """`valid` or `train`, a pure function of (seed, id): stable when other rows come and go (stream `split`)."""
    return "valid" if streams.split_unit(seed, problem_id) < valid_fraction else "train"


_FIELD_ORDER = ("id", "formal_statement", "header", "informal_statement", "informal_prefix", "split", "source",
                "status", "subset", "answer_from_file")


def _ordered(problem: dict[str, Any]) -> dict[str, Any]:
    """Schema fields first (so files read well), then anything a `problems` row carried along."""
    return fields_first(problem, _FIELD_ORDER)


def _generated(config: Config, task: str, limit: int) -> Report:
    """The problems task `task` generates from run.seed (countdown's: shaped by its options, solvable by construction)."""
    problems = generated_problems(config, task, count=limit) or []
    return Report(rows=len(problems), kept=problems, dropped=Counter(), first_rows=defaultdict(list))


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------

def _summary(report: Report, out: Path, label: str, preset: str, files: int) -> dict[str, Any]:
    splits = Counter(p["split"] for p in report.kept)
    tables = [{
        "title": f"prepare-data: {len(report.kept)} problems from {label} ({preset})",
        "columns": ["split", "problems"],
        "rows": [[name, count] for name, count in sorted(splits.items())],
    }]
    if report.renamed:
        tables.append({
            "title": f"kept under a new id: {len(report.renamed)} (the source repeats their names)",
            "columns": ["id"], "rows": [[text] for text in report.renamed[:_FIRST_ROWS_SHOWN]]
            + ([[f"... and {len(report.renamed) - _FIRST_ROWS_SHOWN} more"]] if len(report.renamed) > _FIRST_ROWS_SHOWN else []),
        })
    if report.dropped:
        tables.append({
            "title": f"rows not kept: {sum(report.dropped.values())} of {report.rows}",
            "columns": ["reason", "rows", "first rows"],
            "rows": [[reason, count, ", ".join(report.first_rows.get(reason, []))]
                     for reason, count in report.dropped.most_common()],
        })
    if report.malformed:
        tables.append({
            "title": f"malformed rows of {label} (skipped; the others were written)",
            "columns": ["row", "reason"],
            "rows": [[_row_place(label, item), item["reason"]] for item in report.malformed],
        })
    malformed = {"malformed_lines": len(report.malformed), "malformed": report.malformed} if report.malformed else {}
    return {
        "ok": not report.malformed,  # malformed input lines: exit 1, as verify and eval (README "Exit codes")
        **malformed,
        "out": str(out),
        "source": label,
        "preset": preset,
        "files": files,
        "rows": report.rows,
        "kept": len(report.kept),
        "dropped": sum(report.dropped.values()),
        "dropped_by_reason": dict(report.dropped),
        "renamed": len(report.renamed),
        "dropped_first_rows": {reason: rows for reason, rows in report.first_rows.items() if rows},
        "splits": dict(sorted(splits.items())),
        "tables": tables,
    }
