"""eval: pass@k from verdicts, and the generate -> verify -> score pipeline that produces them.

    prover eval --verdicts verdicts.jsonl --k 1,8,32 --json     # score what exists
    prover eval --config configs/demo.toml                      # generate + score the eval split
    prover eval --config C --ledger runs/es/ledger.json         # rebuild ES weights first

pass@k is the unbiased estimator of the Codex paper: with n samples of a problem of which c are
correct, pass@k = 1 - C(n-c, k) / C(n, k), computed in its product form
1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomials. It is averaged over
problems; k larger than a problem's n is an error that names the problem (the estimator is not
defined there). Beside it, `solved_any` is the share of problems with at least one correct
sample: the "pass@n" prover papers quote, which equals pass@n only when every problem has n samples.

A sample is correct only when its verdict is `verified` (fail closed: `rejected`, `timeout`,
`error`, or anything else counts as wrong). Records are grouped by `problem_id`; without one,
by `id` minus a trailing `/<sample index>` (our sample ids are `<problem_id>/<sample_idx>`).
Repeated ids count once (the first). Splits come from each record's `split` (or the problems
file, when eval generated the samples); records without one are scored under `all`.

Without `--verdicts`, eval samples `eval.n` completions for each problem of `eval.split`, scores
them (Lean: `prover_cli.verify.verify_file`; countdown/toy: the task's reward, 1.0 = solved,
written as verdict-like records) and reports. Its files go to
`<run.dir>/eval/<model>-<hash of model, sampling settings, split>/` (samples.jsonl,
verdicts.jsonl, meta.json, pass_at_k.png), so a rerun resumes and another model or setting
never mixes into the same files.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from prover_cli.errors import ConfigError, InputError, NotBuiltError
from prover_cli.jsonl import ResumableWriter, load_jsonl_strict
from prover_cli.progress import NULL_REPORTER, Reporter

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
                   splits: dict[str, str] | None = None) -> tuple[dict[str, ProblemScore], int]:
    """(problem id -> n, c, split), and how many repeated ids were ignored."""
    problems: dict[str, ProblemScore] = {}
    seen: set[str] = set()
    repeated = 0
    for index, record in enumerate(records, start=1):
        rid = record.get("id")
        pid = record.get("problem_id")
        if not isinstance(pid, str) or not pid:
            if not isinstance(rid, (str, int)) or isinstance(rid, bool) or str(rid) == "":
                raise InputError(f"{label}: record {index} has neither `problem_id` nor `id`")
            pid = _SAMPLE_SUFFIX.sub("", str(rid))
        if "verdict" not in record:
            raise InputError(f"{label}: record {index} ({rid!r}) has no `verdict`")
        if rid is not None:
            if str(rid) in seen:
                repeated += 1
                continue
            seen.add(str(rid))
        score = problems.setdefault(pid, ProblemScore())
        score.n += 1
        score.c += record["verdict"] == "verified"
        if score.split is None:
            split = (splits or {}).get(pid) or record.get("split")
            score.split = split if isinstance(split, str) and split else None
    return problems, repeated


def score(problems: dict[str, ProblemScore], ks: list[int], label: str) -> dict[str, Any]:
    """pass@k per split (and over all problems), `solved_any`, counts; InputError if k > n anywhere."""
    if not problems:
        raise InputError(f"{label}: no verdicts to score")
    for k in ks:
        for pid, p in problems.items():
            if k > p.n:
                raise InputError(f"{label}: k = {k} exceeds the {p.n} sample(s) of problem {pid!r}; "
                                 "pass@k needs k <= n: lower --k or sample more (eval.n)")
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

def run_eval(config: Any, *, model: str | None = None, ledger: str | Path | None = None,
             verdicts: str | Path | None = None, k: list[int] | None = None,
             reporter: Reporter = NULL_REPORTER) -> dict[str, Any]:
    """Score `verdicts`, or generate + score `eval.split` with `model` / the weights of `ledger`."""
    ks = sorted(set(k if k is not None else config.eval.k))
    if not ks or any(value < 1 for value in ks):
        raise ConfigError(f"--k {k if k is not None else config.eval.k}: every k must be an integer >= 1")
    if verdicts is not None:
        if model is not None or ledger is not None:
            raise ConfigError("--verdicts scores existing verdicts: it takes no --model or --ledger")
        path = Path(verdicts)
        problems, repeated = group_verdicts(load_jsonl_strict(path), str(path))
        return _report(problems, repeated, ks, str(path), config.run_dir, config.eval.plot,
                       extra={"verdicts": str(path)})
    if model is not None and ledger is not None:
        raise ConfigError("--model and --ledger both name the weights to evaluate: pass one")
    if ks[-1] > config.eval.n:
        raise ConfigError(f"--k {','.join(map(str, ks))}: k = {ks[-1]} exceeds eval.n = {config.eval.n} "
                          "samples per problem; raise eval.n or lower k")
    return _generate_and_score(config, model, Path(ledger) if ledger else None, ks, reporter)


def _generate_and_score(config: Any, model: str | None, ledger: Path | None, ks: list[int],
                        reporter: Reporter) -> dict[str, Any]:
    from prover_cli.generate import generate_samples, load_problems

    problems_path = Path(config.eval.problems) if config.eval.problems else config.problems_path
    problems = load_problems(problems_path, split=config.eval.split)

    model_path, model_label = model, model or config.model.name
    if ledger is not None:
        if not ledger.is_file():
            raise InputError(f"{ledger}: ledger not found")
        replay_seeds = _stage("prover_cli.es.replay", "replay_seeds")
        ledger_sha = hashlib.sha256(ledger.read_bytes()).hexdigest()
        model_dir = config.run_dir / "eval-model"
        reporter.log(f"rebuilding the weights of {ledger} into {model_dir}")
        replay_seeds(config, ledger_path=ledger, out_dir=model_dir, upto=None, reporter=reporter)
        model_path, model_label = str(model_dir), f"ledger:{ledger}@{ledger_sha[:12]}"

    eval_dir = config.run_dir / "eval" / _eval_label(config, model_label)
    eval_dir.mkdir(parents=True, exist_ok=True)
    (eval_dir / "meta.json").write_text(json.dumps(_identity(config, model_label), indent=2) + "\n", encoding="utf-8")
    samples_path, verdicts_path = eval_dir / "samples.jsonl", eval_dir / "verdicts.jsonl"

    generated = generate_samples(config, problems, samples_path, n=config.eval.n, model=model_path,
                                 model_label=model_label, family_name=config.model.name if ledger else None,
                                 reporter=reporter, problems_label=str(problems_path))
    if config.data.task == "lean":
        verify_file = _stage("prover_cli.verify", "verify_file")
        verify_file(config, proofs_path=samples_path, out_path=verdicts_path, reporter=reporter)
    else:
        _score_with_task(config, samples_path, verdicts_path, reporter)

    wanted = {f"{p['id']}/{j}" for p in problems for j in range(config.eval.n)}
    records = [r for r in load_jsonl_strict(verdicts_path) if str(r.get("id")) in wanted]
    splits = {p["id"]: p.get("split") for p in problems}
    scored, repeated = group_verdicts(records, str(verdicts_path), splits=splits)
    missing = sorted(set(splits) - set(scored))
    if missing:
        raise InputError(f"{verdicts_path}: no verdicts for {len(missing)} problem(s), e.g. {missing[0]!r}; "
                         "rerun `prover eval` to complete them")
    return _report(scored, repeated, ks, str(verdicts_path), eval_dir, config.eval.plot, extra={
        "model": model_label, "samples_path": str(samples_path), "verdicts": str(verdicts_path),
        "eval_dir": str(eval_dir), "samples_written": generated["samples_written"],
        "tokens_per_s": generated["tokens_per_s"],
    })


def _stage(module_name: str, attr: str) -> Any:
    """Another stage's library function, imported when needed; its absence is one honest sentence."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise NotBuiltError(f"eval needs {module_name}, which is not built in this version of prover") from None
        raise
    return getattr(module, attr)


def _identity(config: Any, model_label: str) -> dict[str, Any]:
    g = config.generate
    return {"model": model_label, "family": config.model.family, "task": config.data.task,
            "split": config.eval.split, "n": config.eval.n, "temperature": g.temperature, "top_p": g.top_p,
            "max_tokens": g.max_tokens, "seed": g.seed, "backend": g.backend}


def _eval_label(config: Any, model_label: str) -> str:
    digest = hashlib.sha256(json.dumps(_identity(config, model_label), sort_keys=True).encode()).hexdigest()[:10]
    stem = model_label.rstrip("/").rsplit("/", 1)[-1].split("@")[0] or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem)[:60] + "-" + digest


def _score_with_task(config: Any, samples_path: Path, verdicts_path: Path, reporter: Reporter) -> None:
    """Countdown/toy: reward 1.0 = solved, written as verdict records so one pass@k path scores all tasks."""
    from prover_cli.generate import SAMPLE_FIELDS
    from prover_cli.tasks import get_task

    task = get_task(config.data.task)
    samples = load_jsonl_strict(samples_path)
    with ResumableWriter(verdicts_path) as writer:
        todo = [s for s in samples if str(s.get("id")) not in writer.done_ids]
        if not todo:
            return
        problems = [{**{k: v for k, v in s.items() if k not in SAMPLE_FIELDS}, "id": s["problem_id"]} for s in todo]
        rewards = task.rewards(problems, [s["completion"] for s in todo], config, reporter=reporter)
        for sample, reward in zip(todo, rewards, strict=True):
            writer.write({"id": sample["id"], "problem_id": sample["problem_id"], "split": sample.get("split"),
                          "verdict": "verified" if reward >= 1.0 else "rejected", "reward": reward})


# --------------------------------------------------------------------------------------------
# Report: tables, the dict, the plot
# --------------------------------------------------------------------------------------------

def _report(problems: dict[str, ProblemScore], repeated: int, ks: list[int], label: str, plot_dir: Path,
            plot: bool, extra: dict[str, Any]) -> dict[str, Any]:
    per_split = score(problems, ks, label)
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
    result["repeated_ids_ignored"] = repeated
    result["per_split"] = per_split
    result.update(extra)
    if plot:
        result["plot"] = str(plot_pass_at_k(problems, plot_dir / PLOT_FILE, ks))
    result["tables"] = tables
    return result


def plot_pass_at_k(problems: dict[str, ProblemScore], path: Path, ks: list[int]) -> Path:
    """PNG of the pass@k curve per split, k from 1 to the smallest n; the requested k are marked."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

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
    axis.set_xlabel("k (samples)")
    axis.set_ylabel("pass@k")
    axis.set_ylim(0, 1)
    axis.grid(True, alpha=0.3)
    axis.legend()
    axis.set_title("pass@k")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


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
