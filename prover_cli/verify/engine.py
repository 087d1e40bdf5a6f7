"""`prover verify` and the RL reward: records in, one verdict per record out.

    prover verify samples.jsonl --out verdicts.jsonl      # verify_file
    verify_records(records, config.verify)                # the reward of ES and GRPO

Both go the same way: check the record's fields (`error` verdict when unusable), run the denylist
and the statement check (`rejected` without running Lean), then hand the assembled code to the
backend (`repl` pool or `kimina` server), which applies the verdict rules (`rules.py`).
`verify_file` writes each verdict the moment it is known (append + flush), skips ids that already
have a verdict in `--out` (resume), and reports malformed input lines by number.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

from prover_cli.errors import InputError
from prover_cli.jsonl import BadLine, ResumableWriter, read_jsonl
from prover_cli.progress import NULL_REPORTER
from prover_cli.verify.rules import VERDICTS, Verdict
from prover_cli.verify.statement import BadRecord, Rejected, candidate_from_record, check_fields

OnResult = Callable[[Any, dict, Verdict], None]


def verifier_identity(verify_config: Any) -> dict[str, Any]:
    """Recorded in every verdict line, so a verdict always says what produced it."""
    identity = {"backend": verify_config.backend, "lean_toolchain": verify_config.lean_toolchain,
                "mathlib_rev": verify_config.mathlib_rev}
    if verify_config.backend == "repl":
        identity["repl_command"] = list(verify_config.repl_command)
    else:
        identity["kimina_url"] = verify_config.kimina_url
    return identity


def verdict_record(record: dict[str, Any], verdict: Verdict, identity: dict[str, Any]) -> dict[str, Any]:
    """The input record's fields, then ours (ours win)."""
    return {**record, "id": record.get("id"), "verdict": verdict.status, "reason": verdict.reason,
            "messages": verdict.messages, "axioms": verdict.axioms, "time_s": verdict.time_s,
            "verifier": identity}


class Verifier:
    """The configured backend. Keep one open across batches to keep REPL processes warm
    (the header, e.g. `import Mathlib`, then runs once per process, not once per batch)."""

    def __init__(self, verify_config: Any):
        self.config = verify_config
        self.identity = verifier_identity(verify_config)
        if verify_config.backend == "kimina":
            from prover_cli.verify.kimina import KiminaBackend

            self.backend = KiminaBackend(verify_config)
        else:
            from prover_cli.verify.pool import ReplPool

            self.backend = ReplPool(verify_config)

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()

    def check(self, items: Iterable[tuple[Any, dict[str, Any]]], on_result: OnResult,
              describe: Callable[[Any], str] = lambda key: "") -> None:
        """Verdicts for (key, record) pairs, passed to `on_result(key, record, verdict)` as known."""
        queued = []
        for key, record in items:
            try:
                candidate = candidate_from_record(record, self.config.header,
                                                  allow_native_decide=self.config.allow_native_decide)
            except BadRecord as exc:
                on_result(key, record, Verdict("error", f"{describe(key)}malformed record: {exc}"))
            except Rejected as exc:
                on_result(key, record, Verdict("rejected", str(exc)))
            else:
                queued.append((key, record, candidate))
        by_candidate = {id(c): (k, r) for k, r, c in queued}
        self.backend.run([c for _, _, c in queued],
                         lambda candidate, verdict: on_result(*by_candidate[id(candidate)], verdict))

    def verify(self, records: list[dict[str, Any]], reporter: Any = NULL_REPORTER) -> list[dict[str, Any]]:
        reporter = reporter or NULL_REPORTER  # tasks pass None when nobody watches
        results: list[dict[str, Any] | None] = [None] * len(records)
        counts: Counter = Counter()
        with reporter.task("verify", total=len(records), unit="proofs") as task:
            def on_result(index: int, record: dict, verdict: Verdict) -> None:
                results[index] = verdict_record(record, verdict, self.identity)
                counts[verdict.status] += 1
                task.advance(1, **{k: counts[k] for k in VERDICTS if counts[k]})

            self.check(enumerate(records), on_result)
        missing = [k for k, r in enumerate(results) if r is None]
        if missing:  # pragma: no cover - a bug in a backend, never silently a zero reward
            raise RuntimeError(f"verify: no verdict for records {missing[:5]}")
        return results  # type: ignore[return-value]


def verify_records(records: list[dict[str, Any]], verify_config: Any,
                   reporter: Any = NULL_REPORTER, *, keep_warm: bool = False) -> list[dict[str, Any]]:
    """One verdict dict per record, in input order (`id`, `verdict`, `reason`, …).

    By default starts and stops its own backend. Trainers pass `keep_warm=True`: the backend
    then stays open for the next batch with the same `[verify]` config (closed at exit), so
    `import Mathlib` is paid once per REPL process, not once per ES member or GRPO step.
    """
    if keep_warm:
        return _warm_verifier(verify_config).verify(list(records), reporter=reporter)
    with Verifier(verify_config) as verifier:
        return verifier.verify(list(records), reporter=reporter)


_WARM: dict[str, Verifier] = {}


def _warm_verifier(verify_config: Any) -> Verifier:
    import atexit
    import dataclasses
    import json

    key = json.dumps(dataclasses.asdict(verify_config), sort_keys=True, default=str)
    if key not in _WARM:
        if not _WARM:
            atexit.register(close_warm_verifiers)
        _WARM[key] = Verifier(verify_config)
    return _WARM[key]


def close_warm_verifiers() -> None:
    """Stop every backend kept warm by `verify_records(..., keep_warm=True)`."""
    while _WARM:
        _WARM.popitem()[1].close()


# --------------------------------------------------------------------------------------------
# `prover verify`
# --------------------------------------------------------------------------------------------

def verify_file(config: Any, *, proofs_path: str | Path, out_path: str | Path | None = None,
                reporter: Any = NULL_REPORTER) -> dict[str, Any]:
    """Verify a JSONL of proofs into a JSONL of verdicts (resumable); returns the summary."""
    proofs_path = Path(proofs_path)
    out_path = Path(out_path) if out_path is not None else proofs_path.with_name(proofs_path.stem + ".verdicts.jsonl")
    if out_path.resolve() == proofs_path.resolve():
        raise InputError(f"{out_path}: --out must differ from the input file")
    verify_config = config.verify
    reporter = reporter or NULL_REPORTER
    start = time.monotonic()

    # -- read and validate every line first: malformed ones are reported by number ------------
    malformed: list[dict[str, Any]] = []
    records: list[tuple[int, dict[str, Any]]] = []
    first_line: dict[str, int] = {}
    bad_fields: dict[str, str] = {}
    for line_no, obj in read_jsonl(proofs_path):
        if isinstance(obj, BadLine):
            malformed.append({"line": line_no, "reason": obj.reason})
            continue
        record_id = obj.get("id")
        if not isinstance(record_id, str) or not record_id:
            malformed.append({"line": line_no, "reason": "missing or non-string `id`"})
            continue
        if record_id in first_line:
            malformed.append({"line": line_no, "reason": f"duplicate id {record_id!r} "
                                                         f"(first on line {first_line[record_id]})"})
            continue
        first_line[record_id] = line_no
        try:
            check_fields(obj, verify_config.header)
        except BadRecord as exc:
            bad_fields[record_id] = str(exc)
            malformed.append({"line": line_no, "reason": f"id {record_id!r}: {exc}"})
        records.append((line_no, obj))
    for item in malformed:
        reporter.log(f"{proofs_path}:{item['line']}: {item['reason']}")

    # -- check what has no verdict yet, writing each verdict as soon as it is known -----------
    verifier = Verifier(verify_config)
    with ResumableWriter(out_path) as writer:
        todo = [(line_no, r) for line_no, r in records if r["id"] not in writer.done_ids]
        resumed = len(records) - len(todo)
        counts: Counter = Counter()
        with reporter.task("verify", total=len(todo), unit="proofs") as task:
            def on_result(line_no: int, record: dict, verdict: Verdict) -> None:
                writer.write(verdict_record(record, verdict, verifier.identity))
                counts[verdict.status] += 1
                task.advance(1, **{k: counts[k] for k in VERDICTS if counts[k]})

            try:
                verifier.check(todo, on_result, describe=lambda line_no: f"line {line_no}: ")
            finally:
                verifier.close()
        final = {str(r.get("id")): r.get("verdict") for r in writer.records}
    elapsed_s = time.monotonic() - start

    # -- summary --------------------------------------------------------------------------------
    totals = Counter(final.get(r["id"]) for _, r in records)
    checked = sum(counts.values())
    summary: dict[str, Any] = {
        "ok": not malformed,
        "input": str(proofs_path),
        "out": str(out_path),
        "proofs": len(records),
        **{status: totals.get(status, 0) for status in VERDICTS},
        "checked": checked,
        "resumed": resumed,
        "malformed_lines": len(malformed),
        "elapsed_s": round(elapsed_s, 3),
        "proofs_per_s": round(checked / elapsed_s, 3) if elapsed_s > 0 else 0.0,
        "verifier": verifier.identity,
        "malformed": malformed,
    }
    share = (lambda n: f"{100.0 * n / len(records):.1f}%") if records else (lambda n: "-")
    tables = [{"title": f"verify: {proofs_path.name} -> {out_path.name}",
               "columns": ["verdict", "proofs", "share"],
               "rows": [[status, totals.get(status, 0), share(totals.get(status, 0))] for status in VERDICTS]}]
    if malformed:
        tables.append({"title": "malformed input lines", "columns": ["line", "problem"],
                       "rows": [[m["line"], m["reason"]] for m in malformed]})
    summary["tables"] = tables
    return summary
