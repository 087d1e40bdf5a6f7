"""`prover verify` and the RL reward: records in, one verdict per record out.

    prover verify samples.jsonl --out verdicts.jsonl      # verify_file
    verify_records(records, config.verify)                # the reward of ES and GRPO

Both go the same way: check the record's fields (`error` verdict when unusable), run the denylist
and the statement check (`rejected` without running Lean), then hand the assembled code to the
backend (`repl` pool or `kimina` server), which applies the verdict rules (`rules.py`). Every
proof either backend calls `verified` then goes through the kernel stage (`kernel/`,
`verify.kernel_check`): a fresh `lean -o` and SafeVerify in processes that never ran its text.
`verify_file` writes each verdict the moment it is known (append + flush), skips ids whose last
verdict in `--out` was made from the same checked fields under the same policy (resume; a line
whose digest differs is checked again and superseded), and reports malformed input lines by
number. One bad record never stops a run: whatever goes wrong while preparing, checking or
writing one record becomes that record's `error` verdict.

Where the processes run (here, or Modal Sandboxes) is `placement.py`'s to say: a placement
changes the REPL transport, the kernel stage's runner and the commands and paths they start
with, never anything this module computes, so the summary, the verdict lines and the resume are
the same for every backend (tests/test_verify_same_across_backends.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from prover_cli.errors import InputError
from prover_cli.fsio.jsonl import BadLine, ResumableWriter, read_jsonl
from prover_cli.progress import NULL_REPORTER
from prover_cli.signals import stop_signals_as_interrupt
from prover_cli.verify.kernel.batching import second_stage
from prover_cli.verify.kernel.pins import CHECKER, pin_for, pin_warning
from prover_cli.verify.kernel.stage import KernelStage
from prover_cli.verify.lean.kimina import KiminaBackend
from prover_cli.verify.lean.pool import ReplPool
from prover_cli.verify.placement import Placement, current, place, when_left
from prover_cli.verify.text.lexer import configured_mathlib, set_token_table, table_for_config
from prover_cli.verify.text.rules import VERDICTS, Verdict
from prover_cli.verify.text.statement import BadRecord, Candidate, Rejected, TextPolicy, candidate_from_record, record_fields

if TYPE_CHECKING:
    from prover_cli.config import Config, VerifyConfig

OnResult = Callable[[Any, dict, Verdict], None]

# A later check of a proof the fast path verified (e.g. a kernel re-check in a fresh process):
# it gets the candidate (header, body, target, statement) and the `verified` verdict, and returns
# the verdict to record (the same one, or a failing one). Stages run in order, in the thread that
# reports verdicts; a stage only ever sees `verified` verdicts, so it can never make a failing
# proof pass.
Stage = Callable[[Candidate, Verdict], Verdict]


def verifier_identity(verify_config: VerifyConfig) -> dict[str, Any]:
    """Recorded in every verdict line Lean had a part in, so a verdict always says what produced it
    (a verdict the text checks reached alone records `text_checks_identity()` instead)."""
    identity: dict[str, Any] = {"backend": verify_config.backend, "lean_toolchain": verify_config.lean_toolchain,
                "mathlib_rev": verify_config.mathlib_rev}
    if verify_config.backend == "repl":
        # the toolchain `lake env repl` runs is the one `<project_dir>/lean-toolchain` names
        # (toolchain.py); without that file the config's value is a claim, and the line says so
        toolchain, source = _repl_toolchain(verify_config)
        identity.update(lean_toolchain=toolchain, lean_toolchain_from=source)
        identity["repl_command"] = list(verify_config.repl_command)
    else:
        # A Kimina server reports no Lean or Mathlib version (its /health is {"status": "ok"}):
        # our config names what we asked for, not what checked the proof.
        identity.update(lean_toolchain="unknown", mathlib_rev="unknown", kimina_url=verify_config.kimina_url)
    # the kernel stage runs our own `lean -o` and checker: its toolchain is known (the pin's)
    identity["kernel_check"] = kernel_identity(verify_config)
    # whether this machine's Lean processes (REPLs, the kernel stage's steps) ran in the box (#39);
    # a Kimina server's and Modal Sandboxes' processes are isolated by them, not by verify.box
    identity["box"] = verify_config.box
    return identity


def _repl_toolchain(verify_config: VerifyConfig) -> tuple[str, str]:
    """(toolchain, where it was read): the project's `lean-toolchain` file, else the config."""
    project = Path(verify_config.project_dir or ".")
    path = project / "lean-toolchain"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    if text:
        return text, str(path)
    return verify_config.lean_toolchain, "verify.lean_toolchain (configured; no lean-toolchain file read)"


def text_checks_identity() -> dict[str, Any]:
    """The `verifier` of a verdict the text checks reached before any Lean process saw the proof
    (a malformed record, a denied token, a statement that is not the problem's): no backend, no
    toolchain and no kernel stage ran, so none is named; only the rules that decided."""
    return {"ran": "text checks", "rules": RULES_VERSION}


class TextVerdict(Verdict):
    """A verdict of the text checks alone (statement.py, denylist.py): no Lean process saw the proof."""


def kernel_identity(verify_config: VerifyConfig) -> dict[str, Any] | bool:
    """`false`, or the checker and the commit pinned for the toolchain."""
    if not verify_config.kernel_check:
        return False
    pin = pin_for(verify_config.lean_toolchain)
    return {"checker": pin.checker if pin else CHECKER, "commit": pin.commit if pin else None,
            "toolchain": pin.toolchain if pin else None}


BOX_OFF_WARNING = ("verify.box = \"none\": the Lean processes on this machine ran the proofs' text outside the "
                   "box, with your network and your files (a proof that escapes the verdict rules runs code as you); "
                   "see docs/verify.md, *The box*")

KERNEL_CHECK_OFF_WARNING = ("verify.kernel_check = false: `verified` rests on the fast path's answers alone "
                            "(Lean's messages, `#print axioms`, `#check` read from the process that ran the "
                            "proof), which a proof that runs code there can forge; see docs/verify.md")

# Bump when a verdict rule changes, so that resume rechecks verdicts made under the old rules.
RULES_VERSION = 6   # 4: statement check by Lean (restated trusted statement), config/lexer/indent rules;
                    # 5: the kernel stage (verify.kernel_check); 6: the lexer's token tables, `set_option
                    # ... in` before the target, `where` clauses, our checker's contract (issue #32)

_SURROGATE = re.compile("[\ud800-\udfff]")


def policy_digest(verify_config: VerifyConfig) -> str:
    """What a verdict depends on besides the record: the verifier policy and the toolchain."""
    policy = {
        "rules": RULES_VERSION,
        "allowed_axioms": sorted(verify_config.allowed_axioms),
        "allow_native_decide": bool(verify_config.allow_native_decide),
        "allow_commands": sorted(verify_config.allow_commands),
        "max_proof_chars": verify_config.max_proof_chars,
        "backend": verify_config.backend,
        "lean_toolchain": verify_config.lean_toolchain,
        "mathlib_rev": verify_config.mathlib_rev,
        # the Mathlib the REPL loads (`<project_dir>/lake-manifest.json`, lexer.configured_mathlib):
        # a manifest that moves Mathlib makes every verdict stale (#39)
        "mathlib_in_use": configured_mathlib(verify_config),
        "kernel_check": kernel_identity(verify_config),
    }
    return _digest(policy)


def record_digest(record: dict[str, Any], default_header: str) -> str:
    """The fields a verdict is about: header (as used), statement, proof or completion."""
    header = record.get("header")
    checked = {"header": header if header not in (None, "") else default_header,
               "formal_statement": record.get("formal_statement"),
               "proof": record.get("proof"), "completion": record.get("completion"),
               "has": sorted(k for k in ("proof", "completion") if k in record)}
    return _digest(checked)


def _digest(value: Any) -> str:
    # ensure_ascii: a lone surrogate is escaped, not an encoding error
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, default=repr)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def _escape_surrogates(value: Any) -> Any:
    """Lone surrogates (from `"\\ud800"` escapes in the input) cannot be written as UTF-8:
    carried-through fields keep them as visible `\\udXXX` text instead."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_escape_surrogates(k): _escape_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_surrogates(v) for v in value]
    return value


def verdict_record(record: dict[str, Any], verdict: Verdict, identity: dict[str, Any],
                   digest: dict[str, str] | None = None) -> dict[str, Any]:
    """The input record's fields, then ours (ours win)."""
    line = {**_escape_surrogates(record), "id": _escape_surrogates(record.get("id")),
            "verdict": verdict.status, "reason": _escape_surrogates(verdict.reason),
            "messages": _escape_surrogates(verdict.messages), "axioms": verdict.axioms,
            "time_s": verdict.time_s, "verifier": identity}
    if digest is not None:
        line["digest"] = digest
    return line


class Verifier:
    """The configured backend. Keep one open across batches to keep REPL processes warm
    (the header, e.g. `import Mathlib`, then runs once per process, not once per batch).

    Without an explicit `transport_factory` or `kernel_runner`, the current placement says where
    its processes run (placement.py); `proofs`, when known, lets it size them for that many.
    `config` is the `[verify]` config as it holds there (its commands and paths)."""

    def __init__(self, verify_config: VerifyConfig, *, transport_factory: Any = None, stages: Iterable[Stage] = (),
                 kernel_runner: Any = None, proofs: int | None = None):
        placed = place(verify_config, transport_factory=transport_factory, kernel_runner=kernel_runner,
                       proofs=proofs)
        verify_config, transport_factory, kernel_runner = placed.config, placed.transport_factory, placed.kernel_runner
        self.config = verify_config
        self._transport_factory = transport_factory
        self.stages: list[Stage] = list(stages)
        self.policy = TextPolicy.from_config(verify_config)
        # quotes are read by the token table of the configured Mathlib (lexer.py); none recorded:
        # Lean core's alone, and every quote only a Mathlib token would cover is refused
        self.token_table = table_for_config(verify_config)
        set_token_table(self.token_table)
        self.identity = verifier_identity(verify_config)
        self.kernel = None
        if verify_config.kernel_check:
            # `kernel_runner` runs each stage step; None: local processes (Modal's gives each a Sandbox)
            self.kernel = KernelStage(verify_config, runner=kernel_runner)
        if verify_config.backend == "kimina":
            self.backend: KiminaBackend | ReplPool = KiminaBackend(verify_config)
        else:
            # a place that bills idle processes (keep_warm False: Modal's Sandboxes) ends each REPL
            # after its last proof of a call, not when the kernel stage and the other REPLs are done
            release_idle = placed.placement is not None and not placed.placement.keep_warm
            self.backend = ReplPool(verify_config, transport_factory=transport_factory, release_idle=release_idle)

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.backend.close()
        if self.kernel is not None:
            self.kernel.stop()

    def check(self, items: Iterable[tuple[Any, dict[str, Any]]], on_result: OnResult,
              describe: Callable[[Any], str] = lambda key: "") -> None:
        """Verdicts for (key, record) pairs, passed to `on_result(key, record, verdict)` as known."""
        set_token_table(self.token_table)   # a warm verifier of another config may have set its own
        queued = []
        for key, record in items:
            try:
                candidate = candidate_from_record(record, self.config.header, policy=self.policy)
            except BadRecord as exc:
                on_result(key, record, TextVerdict("error", f"{describe(key)}malformed record: {exc}"))
            except Rejected as exc:
                on_result(key, record, TextVerdict("rejected", str(exc)))
            except Exception as exc:  # a bug or an input we did not foresee: this record only
                on_result(key, record, TextVerdict("error", f"{describe(key)}could not prepare this record: "
                                                            f"{type(exc).__name__}: {exc}"))
            else:
                queued.append((key, record, candidate))
        by_candidate = {id(c): (k, r) for k, r, c in queued}
        candidates = [c for _, _, c in queued]
        if self.kernel is None:
            def report(candidate: Candidate, verdict: Verdict) -> None:
                verdict = self._after_fast_path(candidate, verdict)
                on_result(*by_candidate[id(candidate)], verdict)

            self.backend.run(candidates, report)
            return
        # the kernel stage last, after any other stage: its checks run in parallel, off this thread
        canary = self.config if self.config.canary else None
        with second_stage(self.kernel, set(self.config.allowed_axioms), canary_config=canary,
                          canary_fast_path=self._fresh_fast_path) as stage:
            def on_fast(candidate: Candidate, verdict: Verdict) -> None:
                stage.submit(candidate, self._after_fast_path(candidate, verdict), by_candidate[id(candidate)],
                             on_result)

            self.backend.run(candidates, on_fast)
            stage.finish(on_result)

    def identity_of(self, verdict: Verdict) -> dict[str, Any]:
        """What produced `verdict`: the text checks alone, or this backend (and its kernel stage)."""
        return text_checks_identity() if isinstance(verdict, TextVerdict) else self.identity

    def _fresh_fast_path(self, candidate: Candidate) -> Verdict:
        """One candidate through a new backend of the same kind (one REPL, no canary of its own),
        for the kernel canary: the batch's backend is busy with its proofs."""
        return fast_path_once(self.config, candidate, transport_factory=self._transport_factory)

    def _after_fast_path(self, candidate: Candidate, verdict: Verdict) -> Verdict:
        """The later stages on a verified verdict; an exception in one is that proof's `error`."""
        for stage in self.stages:
            if verdict.status != "verified":
                break
            try:
                verdict = stage(candidate, verdict)
            except Exception as exc:
                verdict = Verdict("error", f"{getattr(stage, '__name__', 'a verification stage')} failed: "
                                           f"{type(exc).__name__}: {exc}", verdict.messages, verdict.axioms)
        return verdict

    def verify(self, records: list[dict[str, Any]], reporter: Any = NULL_REPORTER) -> list[dict[str, Any]]:
        reporter = reporter or NULL_REPORTER  # tasks pass None when nobody watches
        results: list[dict[str, Any] | None] = [None] * len(records)
        counts: Counter = Counter()
        with reporter.task("verify", total=len(records), unit="proofs") as task:
            def on_result(index: int, record: dict, verdict: Verdict) -> None:
                results[index] = verdict_record(record, verdict, self.identity_of(verdict))
                counts[verdict.status] += 1
                task.advance(1, **{k: counts[k] for k in VERDICTS if counts[k]})

            self.check(enumerate(records), on_result)
        missing = [k for k, r in enumerate(results) if r is None]
        if missing:  # pragma: no cover - a bug in a backend, never silently a zero reward
            raise RuntimeError(f"verify: no verdict for records {missing[:5]}")
        return results  # type: ignore[return-value]


def fast_path_once(verify_config: VerifyConfig, candidate: Candidate, *, transport_factory: Any = None) -> Verdict:
    """The fast path's verdict on one candidate, from a backend started for it alone."""
    import dataclasses

    config = dataclasses.replace(verify_config, workers=1, canary=False)
    if config.backend == "kimina":
        backend: Any = KiminaBackend(config)
    else:
        backend = ReplPool(config, transport_factory=transport_factory)
    verdicts: list[Verdict] = []
    try:
        backend.run([candidate], lambda _, verdict: verdicts.append(verdict))
    finally:
        backend.close()
    return verdicts[0]


def verify_records(records: list[dict[str, Any]], verify_config: VerifyConfig,
                   reporter: Any = NULL_REPORTER, *, keep_warm: bool = False,
                   transport_factory: Any = None, kernel_runner: Any = None) -> list[dict[str, Any]]:
    """One verdict dict per record, in input order (`id`, `verdict`, `reason`, …).

    By default starts and stops its own backend. Trainers pass `keep_warm=True`: the backend
    then stays open for the next batch with the same `[verify]` config (closed at exit), so
    `import Mathlib` is paid once per REPL process, not once per ES member or GRPO step; unless
    the current placement refuses warm processes (Modal: a Sandbox idling between batches is billed).
    """
    records = list(records)
    explicit = transport_factory is not None or kernel_runner is not None
    if keep_warm and (explicit or current().keep_warm):
        return _warm_verifier(verify_config, transport_factory, kernel_runner).verify(records, reporter=reporter)
    with Verifier(verify_config, transport_factory=transport_factory, kernel_runner=kernel_runner,
                  proofs=len(records)) as verifier:
        return verifier.verify(records, reporter=reporter)


# key -> (the placement it was made under, None when the caller chose the place; the verifier)
_WARM: dict[str, tuple[Placement | None, Verifier]] = {}


def _warm_verifier(verify_config: VerifyConfig, transport_factory: Any = None, kernel_runner: Any = None) -> Verifier:
    import atexit
    import dataclasses
    import json

    placement = None if transport_factory is not None or kernel_runner is not None else current()
    key = json.dumps(dataclasses.asdict(verify_config), sort_keys=True, default=str)
    key += f"|transport={id(transport_factory) if transport_factory is not None else 'placed'}"
    key += f"|kernel={id(kernel_runner) if kernel_runner is not None else 'placed'}"
    # a placement's warm verifiers are closed when it is left (placement.verification_at), so this
    # id never outlives its object while a verifier is kept under it
    key += f"|placement={id(placement) if placement is not None else 'caller'}"
    if key not in _WARM:
        if not _WARM:
            atexit.register(close_warm_verifiers)
        _WARM[key] = (placement, Verifier(verify_config, transport_factory=transport_factory,
                                          kernel_runner=kernel_runner))
    return _WARM[key][1]


def close_warm_verifiers(placement: Placement | None = None) -> None:
    """Stop every backend kept warm by `verify_records(..., keep_warm=True)` (with `placement`:
    only those made under it)."""
    for key in [k for k, (where, _) in _WARM.items() if placement is None or where is placement]:
        _WARM.pop(key)[1].close()


when_left(lambda placement: close_warm_verifiers(placement=placement))


# --------------------------------------------------------------------------------------------
# `prover verify`
# --------------------------------------------------------------------------------------------

def verify_file(config: Config, *, proofs_path: str | Path, out_path: str | Path | None = None,
                reporter: Any = NULL_REPORTER, transport_factory: Any = None,
                kernel_runner: Any = None) -> dict[str, Any]:
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
            record_fields(obj, verify_config.header)
        except BadRecord as exc:
            bad_fields[record_id] = str(exc)
            malformed.append({"line": line_no, "reason": f"id {record_id!r}: {exc}"})
        records.append((line_no, obj))
    for item in malformed:
        reporter.log(f"{proofs_path}:{item['line']}: {item['reason']}")

    # -- check what has no current verdict, writing each verdict as soon as it is known --------
    # the policy never depends on where the processes run (placement.py): a verdict made on one
    # backend is current on every other
    policy = policy_digest(verify_config)
    digests = {r["id"]: {"record": record_digest(r, verify_config.header), "policy": policy}
               for _, r in records}
    # said once per command: in the summary (its `warnings` table for humans, the key with --json)
    warnings = [KERNEL_CHECK_OFF_WARNING] if not verify_config.kernel_check else []
    warnings += [w for w in [pin_warning(verify_config)] if w]
    warnings += [BOX_OFF_WARNING] if verify_config.box == "none" else []
    with ResumableWriter(out_path) as writer, stop_signals_as_interrupt():  # SIGTERM/SIGHUP: as Ctrl-C
        last = {str(r.get("id")): r for r in writer.records}   # the last line per id is its verdict
        todo, rechecked = [], 0
        for line_no, r in records:
            previous = last.get(r["id"])
            if previous is not None and previous.get("digest") == digests[r["id"]]:
                continue
            rechecked += previous is not None   # a stale verdict: its record or the policy changed
            todo.append((line_no, r))
        resumed = len(records) - len(todo)
        # made here, once the work is known: a placement may size its processes by it (no process
        # starts before the first proof needs one)
        verifier = Verifier(verify_config, transport_factory=transport_factory, kernel_runner=kernel_runner,
                            proofs=len(todo))
        counts: Counter = Counter()
        with reporter.task("verify", total=len(todo), unit="proofs") as task:
            def on_result(line_no: int, record: dict, verdict: Verdict) -> None:
                digest = digests.get(record.get("id"))
                identity = verifier.identity_of(verdict)
                try:
                    line = verdict_record(record, verdict, identity, digest)
                    json.dumps(line, ensure_ascii=False).encode("utf-8")  # fails here, not half-written
                except Exception as exc:   # an input field we cannot write: keep the verdict, say why
                    verdict = Verdict("error", f"line {line_no}: the verdict could not be written with "
                                               f"the record's fields ({type(exc).__name__}: {exc})")
                    line = verdict_record({"id": str(record.get("id"))}, verdict, identity, digest)
                writer.write(line)
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
        "rechecked": rechecked,
        "malformed_lines": len(malformed),
        "elapsed_s": round(elapsed_s, 3),
        "proofs_per_s": round(checked / elapsed_s, 3) if elapsed_s > 0 else 0.0,
        "verifier": verifier.identity,
        "malformed": malformed,
        "warnings": warnings,
    }
    share = (lambda n: f"{100.0 * n / len(records):.1f}%") if records else (lambda n: "-")
    tables = [{"title": f"verify: {proofs_path.name} -> {out_path.name}",
               "columns": ["verdict", "proofs", "share"],
               "rows": [[status, totals.get(status, 0), share(totals.get(status, 0))] for status in VERDICTS]}]
    if malformed:
        tables.append({"title": "malformed input lines", "columns": ["line", "problem"],
                       "rows": [[m["line"], m["reason"]] for m in malformed]})
    if summary["warnings"]:
        tables.append({"title": "warnings", "columns": ["warning"], "rows": [[w] for w in summary["warnings"]]})
    summary["tables"] = tables
    return summary
