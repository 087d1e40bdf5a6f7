"""eval: pass@k from verdicts, the generate -> verify -> score pipeline, and the published protocols.

    prover eval --verdicts verdicts.jsonl --k 1,8,32 --json     # score what exists
    prover eval --config configs/demo.toml                      # generate + score the eval split
    prover eval --config C --ledger runs/es/ledger.json         # rebuild ES weights first
    prover eval --preset minif2f-test --set data.problems=minif2f.jsonl   # a model's published protocol
    prover eval --preset minif2f-test --backend modal --dry-run # the plan and its Modal cost

pass@k is the unbiased estimator of the Codex paper: with n samples of a problem of which c are
correct, pass@k = 1 - C(n-c, k) / C(n, k), computed in its product form
1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomials. It is averaged over
problems. The estimator is not defined for k > n: when eval generated the samples that is an
error naming `eval.n`; when it scores existing verdicts (`--verdicts`, e.g. from `prover
generate`, whose count is `generate.n`) the k values above the fewest samples of any problem are
skipped and reported, naming the problem and `generate.n`, and the others are scored. Beside it,
`solved_any` is the share of problems with at least one correct sample: the "pass@n" prover
papers quote, which equals pass@n only when every problem has n samples.

A sample is correct only when its verdict is `verified` (fail closed: `rejected`, `timeout` and
`error` count as wrong, and a verdict outside that vocabulary, `prover_cli.verify.text.rules.VERDICTS`,
is a malformed line rather than a silent failure). Records are grouped by `problem_id`; without
one, by `id` minus a trailing `/<sample index>` (our sample ids are `<problem_id>/<sample_idx>`).
The last line of an id is its verdict (`prover verify` appends a recheck; the earlier line is
superseded). A malformed line (not JSON, no `verdict`, an unknown verdict, no id) is reported by
number and the rest are scored; the command then exits 1. Splits come from each record's `split`
(or the problems file, when eval generated the samples); records without one are scored under `all`.

Where files go: beside the input, or into `--out`, never into a default run directory.
`--verdicts V` writes its plot beside V. Generating, eval writes samples.jsonl, verdicts.jsonl,
meta.json and pass_at_k.png into `--out DIR`, else into `<folder of the problems file>/eval/
<model>-<hash of model, sampling settings, split>/`, so a rerun resumes and another model or
setting never mixes into the same files (a `--out` folder holding another setting's meta.json
is refused). The plot's title names the model and the run, or for `--verdicts` the model its records
name (none if they name none) and the verdicts file; its y axis starts at 0 and its k ticks are integers.

`--preset minif2f-test | proofnet-test | putnambench` applies the published protocol of the
model's family (`PROTOCOLS`: n, k, temperature, top_p, max tokens; the header is the one prepare-
data gave the problems, the family's own for rows without one) and reports, beside our figure,
the published pass@k of that model where a paper or README gives one (`PUBLISHED`; docs/eval.md
tables them with sources). Settings upstream does not publish are filled in and named as ours.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from prover_cli import generate  # a module: `generate.generate_samples` is looked up per call (tests swap it)
from prover_cli.config import check_eval_sampling, config_from_dict
from prover_cli.errors import ConfigError, InputError
from prover_cli.es.replay import replay_seeds
from prover_cli.fsio.jsonl import (BadLine, ResumableWriter, load_jsonl_strict, log_malformed, read_jsonl,
                                   with_malformed, write_text_atomic)
from prover_cli.on_modal.plan import decode_tokens_per_s, gpu_price_per_hour
from prover_cli.policy import rollout
from prover_cli.policy.prompts import resolve_family
from prover_cli.progress import NULL_REPORTER, Reporter
from prover_cli.tasks import get_task
from prover_cli.tasks.problems import content_key, eval_problems, eval_problems_path
from prover_cli.verify import verify_file
from prover_cli.verify.text.rules import VERDICTS

if TYPE_CHECKING:
    from prover_cli.config import Config


ALL = "all"
PLOT_FILE = "pass_at_k.png"


# --------------------------------------------------------------------------------------------
# The estimator
# --------------------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with n samples, c correct (product form, no binomials)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0  # every k-subset holds a correct sample
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


@dataclass
class ProblemScore:
    n: int = 0
    c: int = 0
    split: str | None = None


_SAMPLE_SUFFIX = re.compile(r"/\d+$")


def group_verdicts(records: Iterable[dict[str, Any]], label: str,
                   splits: dict[str, str | None] | None = None) -> tuple[dict[str, ProblemScore], int]:
    """(problem id -> n, c, split), and how many lines a later line of the same id superseded.

    The last line of an id is its verdict: `prover verify` appends a new line when it rechecks a
    record (its fields or the verifier policy changed), so an earlier line of that id is stale."""
    latest: dict[Any, tuple[str, dict[str, Any]]] = {}
    superseded = 0
    for index, record in enumerate(records, start=1):
        rid = record.get("id")
        pid = record.get("problem_id")
        if not isinstance(pid, str) or not pid:
            if not _usable_id(rid):
                raise InputError(f"{label}: record {index} has neither `problem_id` nor `id`")
            pid = _SAMPLE_SUFFIX.sub("", str(rid))
        if "verdict" not in record:
            raise InputError(f"{label}: record {index} ({rid!r}) has no `verdict`")
        key: Any = str(rid) if rid is not None else ("line", index)
        if key in latest:
            superseded += 1
            del latest[key]  # the later line takes the id's place, in file order
        latest[key] = (pid, record)
    problems: dict[str, ProblemScore] = {}
    for pid, record in latest.values():
        score = problems.setdefault(pid, ProblemScore())
        score.n += 1
        score.c += record["verdict"] == "verified"
        if score.split is None:
            split = (splits or {}).get(pid) or record.get("split")
            score.split = split if isinstance(split, str) and split else None
    return problems, superseded


def _usable_id(rid: Any) -> bool:
    return isinstance(rid, (str, int)) and not isinstance(rid, bool) and str(rid) != ""


def read_verdicts(path: Path, keep: Any = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(records eval can score, malformed lines as {"line", "reason"}) of a verdicts file.

    One bad line costs that line: it is reported by number and the rest are scored. `keep(record)`
    filters the usable records (eval keeps the samples of the problems it generated)."""
    records, malformed = [], []
    for line_no, record in read_jsonl(path):
        if isinstance(record, BadLine):
            reason = record.reason
        elif not isinstance(record.get("verdict"), str):
            reason = "no `verdict` string" if "verdict" not in record else \
                f"`verdict` is {type(record['verdict']).__name__}, expected a string"
        elif record["verdict"] not in VERDICTS:  # not a silent failure: a typo or another tool's word
            shown = record["verdict"] if len(record["verdict"]) <= 40 else record["verdict"][:40] + "…"
            reason = f"`verdict` is {shown!r}, not one of {', '.join(VERDICTS)}"
        elif not (isinstance(record.get("problem_id"), str) and record["problem_id"]) and not _usable_id(record.get("id")):
            reason = "neither a `problem_id` nor an `id` (string or integer)"
        elif record.get("id") is not None and not _usable_id(record["id"]):
            reason = f"`id` is {type(record['id']).__name__}, expected a string or integer"
        else:
            if keep is None or keep(record):
                records.append(record)
            continue
        malformed.append({"line": line_no, "reason": reason})
    return records, malformed


def pass_at_k_table(problems: dict[str, ProblemScore], ks: list[int], label: str, n_key: str = "eval.n") -> dict[str, Any]:
    """pass@k per split (and over all problems), `solved_any`, counts; InputError if k > n anywhere.

    `n_key` is the config key that set the number of samples, named in the error.
    """
    if not problems:
        raise InputError(f"{label}: no verdicts to score")
    for k in ks:
        for pid, p in problems.items():
            if k > p.n:
                raise InputError(f"{label}: k = {k} exceeds the {p.n} sample(s) of problem {pid!r}; "
                                 f"pass@k needs k <= n: lower --k or sample more ({n_key})")
    by_split: dict[str, list[ProblemScore]] = defaultdict(list)
    for p in problems.values():
        by_split[p.split or ALL].append(p)
    groups = dict(sorted(by_split.items()))
    if len(groups) > 1 or ALL not in groups:
        groups[ALL] = list(problems.values())
    return {name: _aggregate(members, ks) for name, members in groups.items()}


def _aggregate(members: list[ProblemScore], ks: list[int]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "problems": len(members),
        "samples": sum(p.n for p in members),
        "verified": sum(p.c for p in members),
        "n_min": min(p.n for p in members),
        "n_max": max(p.n for p in members),
    }
    for k in ks:
        result[f"pass@{k}"] = _mean_pass(members, k)
    result["solved_any"] = sum(p.c > 0 for p in members) / len(members)
    return result


def _mean_pass(members: list[ProblemScore], k: int) -> float:
    return sum(pass_at_k(p.n, p.c, k) for p in members) / len(members)


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------

def run_eval(config: Config, *, model: str | None = None, ledger: str | Path | None = None,
             verdicts: str | Path | None = None, k: list[int] | None = None, out_dir: str | Path | None = None,
             preset: str | None = None, dry_run: bool = False, backend: str = "local",
             reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Score `verdicts`, or generate + score `eval.split` with `model` / the weights of `ledger`.

    `out_dir` is where the files go (default: beside the input); `preset` applies a benchmark's
    published protocol first; `dry_run` returns the plan (and, for `backend = "modal"`, its cost)
    without running anything.
    """
    out = out_dir
    applied: Applied | None = None
    if preset is not None:
        if verdicts is not None:
            raise ConfigError("--preset sets how samples are generated; --verdicts scores existing ones: pass one")
        applied = apply_preset(config, preset, model_name=model, ks=k, reporter=reporter)
        config = applied.config
        k = list(applied.protocol.k)
    ks = sorted(set(k if k is not None else config.eval.k))
    if not ks or any(value < 1 for value in ks):
        raise ConfigError(f"--k {k if k is not None else config.eval.k}: every k must be an integer >= 1")
    if verdicts is not None:
        if model is not None or ledger is not None:
            raise ConfigError("--verdicts scores existing verdicts: it takes no --model or --ledger")
        if dry_run:
            raise ConfigError("--dry-run plans a generating eval; --verdicts only scores what exists")
        path = Path(verdicts)
        records, malformed = read_verdicts(path)
        log_malformed(reporter, path, malformed)
        if not records:
            raise InputError(f"{path}: no verdicts to score" + (f" ({len(malformed)} malformed line(s))" if malformed else ""))
        problems, superseded = group_verdicts(records, str(path))
        ks, skipped = _ks_within_samples(problems, ks, str(path))
        plot_dir = Path(out) if out else path.parent
        title = _plot_title(_record_model(records), _verdicts_label(path))
        result = _report(problems, superseded, ks, str(path), plot_dir, config.eval.plot, title=title,
                         extra={"verdicts": str(path), **({"skipped_k": skipped} if skipped else {})})
        return with_malformed(result, path, malformed)
    if model is not None and ledger is not None:
        raise ConfigError("--model and --ledger both name the weights to evaluate: pass one")
    check_eval_sampling(config)  # greedy with eval.n > 1: identical samples, or transformers refuses
    if ks[-1] > config.eval.n:
        raise ConfigError(f"--k {','.join(map(str, ks))}: k = {ks[-1]} exceeds eval.n = {config.eval.n} "
                          "samples per problem; raise eval.n or lower k")
    if dry_run:
        return eval_plan(config, ks, applied, backend=backend, model=model)
    result = _generate_and_score(config, model, Path(ledger) if ledger else None, ks, Path(out) if out else None,
                                 reporter)
    if applied is not None:
        result["preset"] = applied.benchmark_key
        result["family"] = applied.protocol.family
        result["published"] = _published_rows(applied, result)
        result["tables"].append({
            "title": f"{applied.benchmark.name}: ours beside the published figure ({applied.model_label})",
            "columns": ["k", "ours", "published", "source"], "rows": result["published"]})
    return result


def _ks_within_samples(problems: dict[str, ProblemScore], ks: list[int], label: str) -> tuple[list[int], list[str]]:
    """The k values every problem has samples for, and a sentence for each one skipped.

    Existing verdicts come from `prover generate` (generate.n samples per problem), so the
    sentence names generate.n, not eval.n, which did not produce them.
    """
    if not problems:
        raise InputError(f"{label}: no verdicts to score")
    fewest_id, fewest = min(((pid, p.n) for pid, p in problems.items()), key=lambda item: (item[1], item[0]))
    kept = [value for value in ks if value <= fewest]
    skipped = [f"pass@{value}: problem {fewest_id!r} has {fewest} sample(s) (generate.n when `prover generate` "
               f"wrote them); generate with --set generate.n={value} or more to score it" for value in ks if value > fewest]
    if not kept:
        raise InputError(f"{label}: every k ({','.join(map(str, ks))}) exceeds the {fewest} sample(s) of problem "
                         f"{fewest_id!r}; lower --k or generate more samples (generate.n)")
    return kept, skipped


def _record_model(records: list[dict[str, Any]]) -> str | None:
    """The model the verdicts' records name, or None when none does (the title then names none)."""
    return next((str(r["model"]) for r in records if isinstance(r.get("model"), str) and r["model"]), None)


def _verdicts_label(path: Path) -> str:
    """The verdicts file as the title names it: as given, or its folder and name when that is long."""
    given = str(path)  # a Path: "verdicts.jsonl", never "./verdicts.jsonl"
    return given if len(given) <= 60 else "/".join(filter(None, ("...", path.resolve().parent.name, path.name)))


def _plot_title(model: str | None, run: str) -> str:
    """What is known, and only that: `pass@k of MODEL` (or `pass@k`), then the run or file, if any."""
    return "\n".join(filter(None, (f"pass@k of {model}" if model else "pass@k", run)))


def _generate_and_score(config: Config, model: str | None, ledger: Path | None, ks: list[int], out: Path | None,
                        reporter: Reporter) -> dict[str, Any]:
    problems_path = eval_problems_path(config)
    bad_problems: list[dict[str, Any]] = []  # reported and skipped; the command then exits 1
    try:
        problems = eval_problems(config, malformed=bad_problems)
    finally:
        log_malformed(reporter, problems_path, bad_problems)
    problems, repeated = distinct_problems(problems)
    if repeated:
        reporter.log(f"{problems_path}: {repeated} row(s) of split {config.eval.split!r} repeat an earlier problem by "
                     f"content; each problem is counted once ({len(problems)} problems), as the held-out evaluation "
                     "counts them (docs/eval.md)")
    base = out if out is not None else problems_path.parent / "eval"  # beside the input, never ./runs/default

    model_path, model_label = model, model or config.model.name
    if ledger is not None:
        if not ledger.is_file():
            raise InputError(f"{ledger}: ledger not found")
        ledger_sha = hashlib.sha256(ledger.read_bytes()).hexdigest()
        model_dir = base / f"model-{ledger_sha[:12]}"
        reporter.log(f"rebuilding the weights of {ledger} into {model_dir}")
        replay_seeds(config, ledger_path=ledger, out_dir=model_dir, upto=None, reporter=reporter)
        model_path, model_label = str(model_dir), f"ledger:{ledger}@{ledger_sha[:12]}"

    identity = _identity(config, model_label)
    eval_dir = out if out is not None else base / _eval_label(config, model_label)
    meta = eval_dir / "meta.json"
    if out is not None and meta.is_file():
        try:
            before = json.loads(meta.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            before = None
        if before != identity:
            raise ConfigError(f"{eval_dir}: holds the files of another eval setting ({meta}); "
                              "pass another --out, or leave --out out to get a folder per setting")
    write_text_atomic(meta, json.dumps(identity, indent=2) + "\n")  # whole or not at all: a resume reads it
    samples_path, verdicts_path = eval_dir / "samples.jsonl", eval_dir / "verdicts.jsonl"

    generated = generate.generate_samples(config, problems, samples_path, n=config.eval.n, model=model_path,
                                 model_label=model_label, family_name=config.model.name if ledger else None,
                                 reporter=reporter, problems_label=str(problems_path))
    if config.data.task == "lean":
        verify_file(config, proofs_path=samples_path, out_path=verdicts_path, reporter=reporter)
    else:
        _score_with_task(config, samples_path, verdicts_path, reporter)

    wanted = {f"{p['id']}/{j}" for p in problems for j in range(config.eval.n)}
    records, bad_verdicts = read_verdicts(verdicts_path, keep=lambda r: str(r.get("id")) in wanted)
    log_malformed(reporter, verdicts_path, bad_verdicts)
    splits = {p["id"]: p.get("split") for p in problems}
    scored, superseded = group_verdicts(records, str(verdicts_path), splits=splits)
    missing = sorted(set(splits) - set(scored))
    if missing:
        raise InputError(f"{verdicts_path}: no verdicts for {len(missing)} problem(s), e.g. {missing[0]!r}; "
                         "rerun `prover eval` to complete them")
    title = _plot_title(model_label, f"{problems_path} ({config.eval.split}), n={config.eval.n}, "
                                     f"T={config.generate.temperature:g}")
    result = _report(scored, superseded, ks, str(verdicts_path), eval_dir, config.eval.plot, title=title, extra={
        "model": model_label, "samples_path": str(samples_path), "verdicts": str(verdicts_path),
        "eval_dir": str(eval_dir), "samples_written": generated["samples_written"],
        "tokens_per_s": generated["tokens_per_s"], "family": generated.get("family"), "repeated_rows": repeated,
    })
    return with_malformed(with_malformed(result, problems_path, bad_problems), verdicts_path, bad_verdicts)


def distinct_problems(problems: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Each problem once, its first row (`problems.content_key`: a countdown puzzle's numbers and
    target, a Lean statement up to whitespace and its name), as the held-out evaluation counts them:
    a puzzle drawn twice is one problem, not two chances. Returns (the problems, rows dropped)."""
    seen: set[str] = set()
    kept = []
    for problem in problems:
        key = content_key(problem)
        if key not in seen:
            seen.add(key)
            kept.append(problem)
    return kept, len(problems) - len(kept)


def _identity(config: Config, model_label: str) -> dict[str, Any]:
    g = config.generate
    return {"model": model_label, "family": config.model.family, "task": config.data.task,
            "split": config.eval.split, "n": config.eval.n, "temperature": g.temperature, "top_p": g.top_p,
            "max_tokens": g.max_tokens, "seed": g.seed, "backend": g.backend}


def _eval_label(config: Config, model_label: str) -> str:
    digest = hashlib.sha256(json.dumps(_identity(config, model_label), sort_keys=True).encode()).hexdigest()[:10]
    stem = model_label.rstrip("/").rsplit("/", 1)[-1].split("@")[0] or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:60] + "-" + digest


def _score_with_task(config: Config, samples_path: Path, verdicts_path: Path, reporter: Reporter) -> None:
    """Every task but Lean (countdown, toy, a registered one): reward 1.0 = solved, written as verdict
    records so one pass@k path scores all tasks."""
    task = get_task(config.data.task)
    samples = load_jsonl_strict(samples_path)
    with ResumableWriter(verdicts_path) as writer:
        todo = [s for s in samples if str(s.get("id")) not in writer.done_ids]
        if not todo:
            return
        problems = [{**{k: v for k, v in s.items() if k not in generate.SAMPLE_FIELDS}, "id": s["problem_id"]} for s in todo]
        rewards = rollout.score(task, problems, [s["completion"] for s in todo], config, reporter=reporter)
        for sample, reward in zip(todo, rewards, strict=True):
            writer.write({"id": sample["id"], "problem_id": sample["problem_id"], "split": sample.get("split"),
                          "verdict": "verified" if reward >= 1.0 else "rejected", "reward": reward})


# --------------------------------------------------------------------------------------------
# Report: tables, the dict, the plot
# --------------------------------------------------------------------------------------------

def _report(problems: dict[str, ProblemScore], superseded: int, ks: list[int], label: str, plot_dir: Path,
            plot: bool, extra: dict[str, Any], title: str = "pass@k") -> dict[str, Any]:
    per_split = pass_at_k_table(problems, ks, label)
    overall = per_split[ALL]
    tables = []
    for name, values in per_split.items():
        n_text = str(values["n_min"]) if values["n_min"] == values["n_max"] else f"{values['n_min']}-{values['n_max']}"
        tables.append({
            "title": f"{name}: {values['problems']} problems, n={n_text}",
            "columns": ["metric", "value"],
            "rows": [[f"pass@{k}", values[f"pass@{k}"]] for k in ks]
            + [["solved by any of n", values["solved_any"]], ["verified samples", f"{values['verified']} / {values['samples']}"]],
        })
    result: dict[str, Any] = {"ok": True, "k": ks}
    result.update({key: overall[key] for key in ("problems", "samples", "verified")})
    result.update({f"pass@{k}": overall[f"pass@{k}"] for k in ks})
    result["solved_any"] = overall["solved_any"]
    result["superseded_lines"] = superseded  # earlier lines of an id a later line rechecked
    result["per_split"] = per_split
    result.update(extra)
    if plot:
        result["plot"] = str(plot_pass_at_k(problems, plot_dir / PLOT_FILE, ks, title=title))
    for note in extra.get("skipped_k", []):
        tables.append({"title": "k not scored", "columns": ["why"], "rows": [[note]]})
    result["tables"] = tables
    return result


def plot_pass_at_k(problems: dict[str, ProblemScore], path: Path, ks: list[int], title: str = "pass@k") -> Path:
    """PNG of the pass@k curve per split (`pass_at_k_figure`), written to `path`."""
    import matplotlib.pyplot as plt

    figure = pass_at_k_figure(problems, ks, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path


def pass_at_k_figure(problems: dict[str, ProblemScore], ks: list[int], title: str = "pass@k") -> Any:
    """The pass@k curve per split, k from 1 to the smallest n; the requested k are marked.

    The title names the model and the run; y runs from 0 to 1; the k ticks are integers (powers
    of two on the log axis, plus the largest k), never 10^0.5-style labels.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    by_split: dict[str, list[ProblemScore]] = defaultdict(list)
    for p in problems.values():
        by_split[p.split or ALL].append(p)
    figure, axis = plt.subplots(figsize=(6, 4), dpi=120)
    for name, members in sorted(by_split.items()):
        grid = _k_grid(min(p.n for p in members))
        (line,) = axis.plot(grid, [_mean_pass(members, k) for k in grid], label=f"{name} ({len(members)} problems)")
        marked = [k for k in ks if k <= grid[-1]]
        axis.scatter(marked, [_mean_pass(members, k) for k in marked], color=line.get_color(), zorder=3)
    axis.set_xscale("log", base=2)
    largest = max(min(p.n for p in members) for members in by_split.values())
    ticks = sorted({2 ** e for e in range(largest.bit_length()) if 2 ** e <= largest} | {largest})
    axis.xaxis.set_major_locator(FixedLocator(ticks))
    axis.xaxis.set_minor_locator(NullLocator())
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{int(round(value))}"))
    axis.set_xlim(0.9, max(largest, 2) * 1.1)
    axis.set_xlabel("k (samples)")
    axis.set_ylabel("pass@k")
    axis.set_ylim(0, 1)
    axis.grid(True, alpha=0.3)
    axis.legend()
    axis.set_title(title, fontsize=9)
    figure.tight_layout()
    return figure


def _k_grid(n: int) -> list[int]:
    """Every k up to 64, then about 16 points per doubling: enough for a smooth curve at any n."""
    if n <= 64:
        return list(range(1, n + 1))
    grid = set(range(1, 65))
    k = 64.0
    while k < n:
        k *= 2 ** (1 / 16)
        grid.add(min(int(round(k)), n))
    return sorted(grid)


# --------------------------------------------------------------------------------------------
# Published protocols (`--preset`), and the dry-run plan
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    name: str
    split: str
    problems: int | None   # problems in that split (None: it depends on the benchmark's version)
    prepare: str           # the command that prepares it


BENCHMARKS: dict[str, Benchmark] = {
    "minif2f-test": Benchmark("miniF2F-test", "test", 244,
                              "prover prepare-data DeepSeek-Prover-V1.5/datasets/minif2f.jsonl"),
    "proofnet-test": Benchmark("ProofNet-test", "test", 186,
                               "prover prepare-data DeepSeek-Prover-V1.5/datasets/proofnet.jsonl"),
    # The papers' PutnamBench runs give the answer (Goedel-Prover's putnam.jsonl inlines it):
    # proof-only evaluation, i.e. prepared with data.fill_answers = true.
    "putnambench": Benchmark("PutnamBench", "test", None,
                             "prover prepare-data PutnamBench/lean4/src --set data.fill_answers=true"),
}
EVAL_PRESETS = tuple(BENCHMARKS)

DSP15_PAPER = "DeepSeek-Prover-V1.5 paper (arXiv:2408.08152)"
DSP2_PAPER = "DeepSeek-Prover-V2 paper (arXiv:2504.21801)"
GOEDEL_README = "Goedel-LM/Goedel-Prover README"
GOEDEL_V2_README = "Goedel-LM/Goedel-Prover-V2 README"
KIMINA_REPORT = "Kimina-Prover Preview technical report (arXiv:2504.11354), Table 1"
KIMINA_RL_README = "project-numina/kimina-prover-rl README"


@dataclass(frozen=True)
class Protocol:
    """How a family's own evaluation sampled; `ours` names what upstream did not publish."""

    family: str
    n: int
    k: tuple[int, ...]
    temperature: float
    top_p: float
    max_tokens: int
    source: str
    ours: str = ""


PROTOCOLS: dict[str, Protocol] = {
    "deepseek-v1.5": Protocol("deepseek-v1.5", 32, (1, 8, 32), 1.0, 0.95, 2048,
                              f"{DSP15_PAPER} §4 (temperature 1, top-p 0.95) and configs/sampling.py (max_tokens 2048)"),
    "deepseek-v1.5-cot": Protocol("deepseek-v1.5-cot", 32, (1, 8, 32), 1.0, 0.95, 2048,
                                  f"{DSP15_PAPER} §4 and configs/sampling.py (mode='cot')"),
    "goedel-v1": Protocol("goedel-v1", 32, (1, 8, 32), 1.0, 0.95, 2048,
                          "Goedel-LM/Goedel-Prover eval/step1_inference.py (n 32)"),
    "goedel-v2": Protocol("goedel-v2", 32, (1, 8, 32), 1.0, 0.95, 32768,
                          f"{GOEDEL_V2_README} (pass@32, 32K tokens), scripts/pipeline.sh (temperature 1.0), "
                          "src/inference.py (top_p 0.95)"),
    "deepseek-v2": Protocol("deepseek-v2", 32, (1, 8, 32), 1.0, 0.95, 32768,
                            f"{DSP2_PAPER} (pass@32; 32,768-token sequences)",
                            ours="temperature and top_p are not published: ours are DeepSeek-V1.5's"),
    "deepseek-v2-noncot": Protocol("deepseek-v2-noncot", 32, (1, 8, 32), 1.0, 0.95, 32768,
                                   f"{DSP2_PAPER} (pass@32; 32,768-token sequences)",
                                   ours="temperature and top_p are not published: ours are DeepSeek-V1.5's"),
    "kimina-preview": Protocol("kimina-preview", 32, (1, 8, 32), 1.0, 0.95, 32768,
                               f"{KIMINA_REPORT} (pass@1/32; 32K-token context)",
                               ours="temperature and top_p are not published in the report: ours are DeepSeek's"),
    "kimina-prover": Protocol("kimina-prover", 32, (1, 8, 32), 1.0, 0.95, 32768,
                              f"{KIMINA_RL_README} (pass@32)",
                              ours="temperature, top_p and max tokens are not published there: ours"),
    "plain": Protocol("plain", 32, (1, 8, 32), 1.0, 0.95, 2048, "none (our plain family)",
                      ours="every setting is ours"),
}


@dataclass(frozen=True)
class Published:
    model: str        # lower-cased substring of the model name
    family: str       # the prompt mode the figure was measured with
    benchmark: str
    k: int
    figure: str
    source: str


def _pub(model: str, family: str, benchmark: str, source: str, **figures: str) -> list[Published]:
    return [Published(model, family, benchmark, int(k[1:]), figure, source) for k, figure in figures.items()]


# Only figures read in the source named beside them (docs/eval.md has the same table).
PUBLISHED: list[Published] = [
    *_pub("kimina-prover-preview-distill-1.5b", "kimina-preview", "minif2f-test", KIMINA_REPORT,
          k1="42.6%", k32="56.2%", k1024="61.9%"),
    *_pub("kimina-prover-preview-distill-7b", "kimina-preview", "minif2f-test", KIMINA_REPORT,
          k1="52.5%", k32="63.1%", k1024="70.8%"),
    *_pub("deepseek-prover-v1.5-rl", "deepseek-v1.5-cot", "minif2f-test", f"{DSP15_PAPER}, Table 1",
          k32="50.0% ± 0.5%", k64="50.7% ± 0.4%", k128="51.6% ± 0.5%", k3200="54.9% ± 0.7%"),
    *_pub("deepseek-prover-v1.5-rl", "deepseek-v1.5-cot", "proofnet-test", f"{DSP15_PAPER}, Table 2",
          k128="18.2% ± 0.5%", k3200="22.0% ± 0.5%"),
    *_pub("deepseek-prover-v1.5-rl", "deepseek-v1.5", "minif2f-test", f"{DSP15_PAPER}, Table 3",
          k128="50.5% ± 0.6%"),
    *_pub("deepseek-prover-v1.5-rl", "deepseek-v1.5", "proofnet-test", f"{DSP15_PAPER}, Table 3",
          k128="17.5% ± 0.5%"),
    *_pub("goedel-prover-sft", "goedel-v1", "minif2f-test", GOEDEL_README, k32="57.6%", k3200="62.7%",
          k25600="64.7%"),
    *_pub("goedel-prover-sft", "goedel-v1", "proofnet-test", f"{DSP2_PAPER}, Table 4", k32="15.6%"),
    *_pub("goedel-prover-sft", "goedel-v1", "putnambench", GOEDEL_README, k32="6/644", k512="7/644"),
    *_pub("goedel-prover-v2-8b", "goedel-v2", "minif2f-test", GOEDEL_V2_README, k32="84.6%"),
    *_pub("goedel-prover-v2-32b", "goedel-v2", "minif2f-test", GOEDEL_V2_README, k32="88.0%"),
    *_pub("goedel-prover-v2-32b", "goedel-v2", "putnambench", GOEDEL_V2_README, k32="43 solved"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2", "minif2f-test", f"{DSP2_PAPER}, Table 1",
          k1="58.6% ± 1.1%", k32="75.6% ± 0.5%", k1024="79.9% ± 0.3%", k8192="82.0%"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2", "proofnet-test", f"{DSP2_PAPER}, Table 4",
          k32="23.0% ± 0.4%", k128="25.4% ± 0.7%", k1024="29.6%"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2", "putnambench", f"{DSP2_PAPER}, Table 4",
          k32="9/658", k128="10/658", k1024="11/658"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2-noncot", "minif2f-test", f"{DSP2_PAPER}, Table 1",
          k1="55.5% ± 1.4%", k32="68.0% ± 0.5%", k1024="73.2% ± 0.5%", k8192="75.0%"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2-noncot", "proofnet-test", f"{DSP2_PAPER}, Table 4",
          k32="21.6% ± 0.2%", k128="23.1% ± 0.6%", k1024="24.7%"),
    *_pub("deepseek-prover-v2-7b", "deepseek-v2-noncot", "putnambench", f"{DSP2_PAPER}, Table 4",
          k32="8/658", k128="9/658", k1024="10/658"),
    *_pub("kimina-prover-rl-1.7b", "kimina-prover", "minif2f-test", KIMINA_RL_README, k32="76.63%"),
    *_pub("kimina-prover-rl-0.6b", "kimina-prover", "minif2f-test", KIMINA_RL_README, k32="71.30%"),
]


def published_figures(model_name: str, family: str, benchmark: str) -> list[Published]:
    """The published pass@k of this model, in this prompt mode, on this benchmark (maybe none)."""
    name = (model_name or "").lower()
    return [p for p in PUBLISHED if p.model in name and p.family == family and p.benchmark == benchmark]


@dataclass(frozen=True)
class Applied:
    """A preset applied to a config: the new config and what it was built from."""

    config: Config
    benchmark_key: str
    benchmark: Benchmark
    protocol: Protocol
    model_label: str
    published: list[Published]


def apply_preset(config: Config, preset: str, *, model_name: str | None = None, ks: list[int] | None = None,
                 reporter: Reporter = NULL_REPORTER) -> Applied:
    """The config with the published protocol of the model's family for benchmark `preset`.

    `ks` (from `--k`) replaces the protocol's k values, and n becomes the largest of them.
    """
    if preset not in BENCHMARKS:
        raise ConfigError(f"--preset {preset!r}: must be one of {', '.join(EVAL_PRESETS)}")
    benchmark = BENCHMARKS[preset]
    model_label = model_name or config.model.name
    family = resolve_family(model_label, config.model.family, reporter=reporter)
    protocol = PROTOCOLS[family]
    published = published_figures(model_label, family, preset)
    # n covers the largest published k we can afford to compare with (at most 128 here)
    affordable = [p.k for p in published if p.k <= 128]
    chosen: tuple[int, ...]
    if ks:
        n, chosen = max(ks), tuple(sorted(set(ks)))
    else:
        n = max([protocol.n, *affordable])
        chosen = tuple(sorted({*protocol.k, *affordable, n} - {value for value in protocol.k if value > n}))
    raw = config.to_dict()
    raw["model"]["family"] = family
    raw["eval"].update(split=benchmark.split, n=n, k=list(chosen))
    raw["generate"].update(temperature=protocol.temperature, top_p=protocol.top_p, max_tokens=protocol.max_tokens)
    applied_config = config_from_dict(raw, source=f"{config.source} + --preset {preset}")
    return Applied(applied_config, preset, benchmark, dataclasses.replace(protocol, n=n, k=chosen), model_label, published)


def _published_rows(applied: Applied, result: dict[str, Any]) -> list[list[Any]]:
    """[k, our figure, the published one, source] for every k either side has."""
    by_k: dict[int, Published] = {p.k: p for p in applied.published}
    rows = []
    for value in sorted(set(by_k) | set(result.get("k", []))):
        ours = result.get(f"pass@{value}")
        pub = by_k.get(value)
        rows.append([value, f"{ours:.1%}" if isinstance(ours, float) else "not run",
                     pub.figure if pub else "not published", pub.source if pub else "-"])
    return rows


def eval_plan(config: Config, ks: list[int], applied: Applied | None, *, backend: str, model: str | None) -> dict[str, Any]:
    """`eval --dry-run`: the protocol, the work, and on Modal an upper cost estimate; nothing runs.

    The estimate uses the `[modal]` keys the training plans use (docs/config.md): one generation
    call per `generate.batch_size` problems, its n samples per problem decoding in parallel at
    `modal.est_decode_tokens_per_s` up to `generate.max_tokens`; Lean verification in batches of
    `modal.verify_batch_size` proofs (header `modal.est_header_s`, then
    `modal.est_verify_s_per_proof` per proof, `verify.workers` at a time, on `modal.verify_cpus`
    billed cores). Not counted: container starts, the model download, memory, network.
    """
    g, m, v = config.generate, config.modal, config.verify
    problems_path = eval_problems_path(config)
    counted = _count_split(problems_path, config.eval.split)
    nominal = applied.benchmark.problems if applied else None
    problems = counted if counted is not None else nominal
    model_label = model or config.model.name
    family = applied.protocol.family if applied else resolve_family(model_label, config.model.family)
    rows = [["model", model_label], ["family (prompt)", family],
            ["problems", f"{problems_path} split {config.eval.split!r}: "
                         + (f"{counted} problems" if counted is not None else
                            f"not prepared yet ({applied.benchmark.prepare})" if applied else "not prepared yet")],
            ["samples per problem (eval.n)", config.eval.n], ["k", ",".join(map(str, ks))],
            ["temperature, top_p", f"{g.temperature:g}, {g.top_p:g}"], ["max tokens", g.max_tokens],
            ["header", _header_summary(problems_path, config.eval.split)]]
    if applied:
        rows += [["protocol source", applied.protocol.source]]
        if applied.protocol.ours:
            rows += [["not published", applied.protocol.ours]]
        if nominal is not None and counted is not None and counted != nominal:
            rows += [["warning", f"{applied.benchmark.name} has {nominal} problems; this file has {counted}"]]
    result: dict[str, Any] = {"ok": True, "command": "eval", "backend": backend, "dry_run": True,
                              "model": model_label, "family": family, "n": config.eval.n, "k": ks,
                              "problems": problems}
    tables = [{"title": "plan: eval" + (f" --preset {applied.benchmark_key}" if applied else ""),
               "columns": ["", ""], "rows": rows}]
    if applied:
        pub_rows = [[p.k, p.figure, p.source] for p in applied.published] or [["-", "not published", "-"]]
        tables.append({"title": f"published pass@k of {model_label} on {applied.benchmark.name} ({family})",
                       "columns": ["k", "published", "source"], "rows": pub_rows})
        result["published"] = [{"k": p.k, "figure": p.figure, "source": p.source} for p in applied.published]
    if backend == "modal" and problems:
        speed, gpu_price = decode_tokens_per_s(config), gpu_price_per_hour(config)  # 0: modal.gpu's table entry
        samples = problems * config.eval.n
        calls = math.ceil(problems / g.batch_size)
        call_s = g.max_tokens / speed
        gpu_hours = calls * call_s / 3600 * m.gpus_per_container
        lean = config.data.task == "lean"
        batches = math.ceil(samples / m.verify_batch_size) if lean else 0
        batch_s = m.est_header_s + math.ceil(min(m.verify_batch_size, samples) / v.workers) * m.est_verify_s_per_proof
        core_hours = batches * batch_s * m.verify_cpus / 3600 if lean else 0.0
        usd = gpu_hours * gpu_price + core_hours * m.cpu_price_per_core_hour
        result.update(samples=samples, est_gpu_hours=round(gpu_hours, 3), est_cpu_core_hours=round(core_hours, 3),
                      est_usd=round(usd, 2))
        tables.append({"title": f"Modal cost estimate ({m.gpu}, the modal.* prices and est_* speeds)",
                       "columns": ["", ""], "rows": [
            ["generation", f"{calls} call(s) x {g.max_tokens} tokens / {speed:g} tokens/s = "
                           f"{gpu_hours:.2f} GPU-hours x {gpu_price:g} USD"],
            ["verification", f"{batches} batch(es) of {m.verify_batch_size} proofs x {batch_s:.0f} s on "
                             f"{m.verify_cpus:g} cores = {core_hours:.2f} core-hours x {m.cpu_price_per_core_hour:g} USD"],
            ["total", f"{usd:.2f} USD"],
            ["assumes", "each call's samples decode as one batch at the per-sequence speed, every sample to its "
                        "token limit (the training plans' model); measure one run and adjust modal.est_*"],
            ["not counted", "container starts, the model download, memory, network"]]})
    elif backend == "modal":
        tables.append({"title": "Modal cost estimate", "columns": ["", ""],
                       "rows": [["unknown", "no problem count: prepare the problems first"]]})
    result["tables"] = tables
    return result


def _count_split(path: Path, split: str) -> int | None:
    if not path.is_file():
        return None
    return sum(1 for r in load_jsonl_strict(path) if r.get("split") == split)


_HEARTBEATS = re.compile(r"set_option\s+maxHeartbeats\s+(\d+)")


def _header_summary(path: Path, split: str) -> str:
    """How the problems' headers set maxHeartbeats: the one header setting the papers' runs differ in."""
    if not path.is_file():
        return "from the problems, once prepared (rows without one get the family's header)"
    values: Counter[str] = Counter()
    for r in load_jsonl_strict(path):
        if r.get("split") == split and isinstance(r.get("header"), str):
            found = _HEARTBEATS.findall(r["header"])
            values[f"maxHeartbeats {found[-1]}" if found else "no maxHeartbeats option"] += 1
    return "the problems' own: " + ", ".join(f"{text} in {count}" for text, count in values.most_common())


def eval_output_dir(config: Config, out: str | Path | None) -> Path:
    """Where a generating eval writes (what the CLI locks): `--out`, else the problems file's eval/ folder."""
    return Path(out) if out else eval_problems_path(config).parent / "eval"
