"""Backend `kimina`: the same verdict rules, applied to a running Kimina Lean Server.

The server (project-numina/kimina-lean-server, the one the reference pipeline used) runs its own
REPL pool. We POST `{verify.kimina_url}/verify` with
`{"codes": [{"custom_id": ID, "proof": CODE}, ...], "infotree_type": null, "timeout": S}`
(`verify.kimina_batch_size` proofs per request, `verify.workers` requests at once) and read
`{"results": [{"custom_id", "error", "response": <REPL command response>}]}`.

The API key: when the server is started with one, every request needs the header
`Authorization: Bearer <key>` (server/auth.py); we read the key from the environment variable
named by `verify.kimina_api_key_env`. A 401/403 is one BackendError that names that variable.

The server runs one file per proof, so the statement and axiom checks travel inside it, as on the
REPL backend (rules.trusted_command, rules.alias_command): header, the hole axiom and the trusted
statement declared as `_prover_trusted` (before any untrusted text), the proof, then `theorem
_root_._prover_same_<nonce> : type_of% @_root_.<Ns.>_prover_trusted := @_root_.<Ns.>TARGET` and
its `#print axioms` (under `pp.fullNames`). Lean elaborates and the kernel checks the alias, so it
exists without error exactly when the target proves the trusted statement; its axioms are the
target's. The alias's random name means no message in the proof can pose as its answer (a proof
can print any text with `trace`; it cannot guess the nonce). The server may report positions
relative to the body or to the whole file and may omit `env`, so neither is relied on: the nonce
answer proves the file was checked to its end. Once per problem (cached for the backend's life)
a file with the header, the hole, the trusted statement and its `#print axioms` tells whether the
statement elaborates (else the record's `error`) and the namespace the header leaves open (the
answer names `Ns._prover_trusted`).

The canary (canary.py) runs through `check_canaries` before the first proof, cached per server
URL (`canary_key`): we cannot see the server's Lean version, only its answers.

What the server changes: it splits each file into its import header and body and rewrites every
`import Mathlib.X` line to one `import Mathlib` (server/split.py), so a proof is checked under
the whole of Mathlib even when its header names one module: a wider environment than the header
we trusted (the REPL backend runs the header exactly as written).

Load: the server runs at most LEAN_SERVER_MAX_REPLS REPLs (server/settings.py, default CPU count
- 1); a snippet that waits longer than LEAN_SERVER_MAX_WAIT (60 s) for one fails its whole request
with HTTP 429 "No available REPLs" (server/manager.py `get_repl`, server/routers/check.py). So the
proofs we have in flight, over all requests, never exceed `verify.kimina_max_repls` (the server's
/health says only {"status": "ok"}, server/routers/health.py, so the count is ours to give; 0 =
unknown: `verify.workers`), and a request is never larger than that. A 429 (the server shared
with other clients) is retried after RETRY_429_DELAYS_S, then the request is split and its proofs
sent one by one, so only a proof that still gets 429s has an `error` verdict.

Failures: the server unreachable, another 4xx, or a reply that is not the documented shape stop
the batch with a BackendError, like a REPL that cannot start. An HTTP 500 is what the server
answers when one proof crashes its REPL (and it fails the whole request): the request is split
and its proofs sent one by one, so only a proof that still gets a 500 has an `error` verdict,
with the server's message. Per-proof `error` strings become `timeout` ("timed out") or `error`
verdicts.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, AbstractSet, Any, Callable, Iterable, cast

from prover_cli.errors import BackendError
from prover_cli.verify.lean import canary
from prover_cli.verify.text.rules import (
    TRUSTED,
    Verdict,
    alias_command,
    allowed_axioms,
    is_error,
    judge_axioms,
    judge_proof,
    parse_axioms_message,
    print_axioms_command,
    read_trusted_namespace,
    trusted_command,
)
from prover_cli.verify.text.statement import BadRecord, Candidate, trusted_signature

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig

HTTP_MARGIN_S = 30.0  # the server's own header run and queueing come on top of the proof's timeout
SERVER_MAX_WAIT_S = 60.0  # LEAN_SERVER_MAX_WAIT: a snippet waits this long for a REPL, then 429
RETRY_429_DELAYS_S = (5.0, 15.0, 45.0)  # after each 429 of a request; then its proofs go one by one


class InFlight:
    """At most `capacity` proofs in flight over all requests: a request takes one slot per proof."""

    def __init__(self, capacity: int):
        self.capacity = max(1, int(capacity))
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> None:
        if n > self.capacity:
            raise ValueError(f"a request of {n} proofs exceeds the {self.capacity} in flight allowed")
        with self._cond:
            self._cond.wait_for(lambda: self.used + n <= self.capacity)
            self.used += n
            self.peak = max(self.peak, self.used)

    def release(self, n: int) -> None:
        with self._cond:
            self.used -= n
            self._cond.notify_all()


def _with_header(candidate: Candidate) -> str:
    header = candidate.header if candidate.header.endswith("\n") else candidate.header + "\n"
    return header + "\n" + trusted_command(trusted_signature(candidate.statement))


def kimina_code(candidate: Candidate, alias: str, namespace: str = "") -> str:
    """The file for one proof: header, the trusted statement (without its `#print axioms`), the
    proof, the nonce alias and its axioms (rules.alias_command)."""
    trusted = _with_header(candidate)
    trusted = trusted[:trusted.rindex(print_axioms_command(TRUSTED))].rstrip()
    return f"{trusted}\n\n{candidate.body.rstrip()}\n\n{alias_command(namespace, candidate.target, alias)}\n"


def trusted_code(candidate: Candidate) -> str:
    """The file that tells whether the trusted statement elaborates, and in which namespace."""
    return _with_header(candidate) + "\n"


def judge_trusted(result: Any, candidate: Candidate) -> str | Verdict:
    """The namespace prefix (`""` or `"Ns."`) the trusted header leaves open, from the reply to
    `trusted_code`, or the record's `error` (a statement that does not elaborate in its header,
    or an answer we cannot read)."""
    response = _response_of(result)
    if isinstance(response, Verdict):
        response.reason = f"the trusted statement could not be checked: {response.reason}"
        return response
    namespace, why = read_trusted_namespace({**response, "env": 0})
    if namespace is None:
        return Verdict("error", f"the trusted statement does not elaborate in the header's environment: {why}")
    return namespace


def _response_of(result: Any) -> dict[str, Any] | Verdict:
    """The REPL response in one `results[i]` entry, or the verdict its absence means."""
    if not isinstance(result, dict):
        return Verdict("error", "Kimina server returned a result that is not an object")
    if result.get("error"):
        error = str(result["error"])
        status = "timeout" if "timed out" in error else "error"
        return Verdict(status, f"Kimina server: {error[:300]}")
    response = result.get("response")
    if not isinstance(response, dict):
        return Verdict("error", "Kimina server returned no REPL response")
    if "message" in response:
        return Verdict("error", f"REPL protocol error: {str(response['message'])[:300]}")
    messages = response.get("messages") or []
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return Verdict("error", "Kimina server returned a malformed `messages` field")
    return response


def _alias_line(code: str) -> int | None:
    """The line where the alias starts, counted as the server reports positions: in the body it
    runs after splitting off the leading import (and blank) lines (server/split.py). Only used to
    word the reason; a server that counts from the top of the file makes a proof error in the
    last few lines before the alias read as the statement check's, never changes a verdict."""
    lines = code.split("\n")
    start = next((k for k, line in enumerate(lines) if line.startswith("theorem _root_._prover_same_")), None)
    if start is None:
        return None
    skipped = 0
    while skipped < len(lines) and (not lines[skipped].strip() or lines[skipped].strip().startswith("import ")):
        skipped += 1
    return start - skipped + 1


def judge_kimina(result: Any, candidate: Candidate, alias: str, allowed: AbstractSet[str], code: str = "") -> Verdict:
    """The verdict rules on one `results[i]` entry of the server's reply to `kimina_code` (`code`):
    no error (the proof's, or the alias's: Lean does not accept the target as a proof of the
    trusted statement), no sorry, and exactly one `#print axioms` answer naming the nonce alias,
    listing only allowed axioms."""
    response = _response_of(result)
    if isinstance(response, Verdict):
        return response
    messages = response.get("messages") or []
    sorries = response.get("sorries") or []
    ours = [m for m in messages if _reported_name(m) == alias]
    others = [m for m in messages if not any(m is o for o in ours)]
    alias_line = _alias_line(code) if code else None
    if alias_line is not None:
        errors = [m for m in others if is_error(m)]
        late = [m for m in errors if isinstance(m.get("pos"), dict) and isinstance(m["pos"].get("line"), int)
                and m["pos"]["line"] >= alias_line]
        if errors and len(late) == len(errors):
            said = " | ".join(str(m.get("data", "")).strip().replace("\n", " ⏎ ")[:400] for m in late)
            return Verdict("rejected", f"statement check: Lean does not accept `{candidate.target}` as a proof of "
                                       f"the trusted statement; Lean answered: {said}", others)
    # The server may drop `env`; the nonce answer (checked next) stands in for it.
    verdict = judge_proof({"env": response.get("env", -1) if isinstance(response.get("env"), int) else -1,
                           "messages": others, "sorries": sorries})
    if verdict is None:
        verdict = judge_axioms(ours, alias, allowed, others)
    verdict.reason = verdict.reason.replace(alias, f"{candidate.target} (alias)")
    return verdict


def _reported_name(message: Any) -> str | None:
    parsed = parse_axioms_message(message.get("data")) if isinstance(message, dict) else None
    return parsed[0] if parsed else None


class KiminaBackend:
    """Same interface as ReplPool: `run(candidates, on_verdict)` and `close()`."""

    def __init__(self, verify_config: VerifyConfig):
        self.config = verify_config
        self.allowed = allowed_axioms(verify_config)
        # (header, statement, target) -> the namespace prefix the header leaves open
        self._expected: dict[tuple[str, str, str], str] = {}
        self._failed: dict[tuple[str, str, str], Verdict] = {}  # the same, failed: kept for one run only
        self._canary_done = not verify_config.canary
        self.transport_factory = None
        self.url = verify_config.kimina_url.rstrip("/") + "/verify"
        self.key_env = verify_config.kimina_api_key_env
        # The server's REPL count bounds the proofs in flight (see the module docstring).
        max_repls = int(verify_config.kimina_max_repls)
        self.in_flight = InFlight(max_repls or verify_config.workers)
        self.batch_size = min(max(1, int(verify_config.kimina_batch_size)), self.in_flight.capacity)
        self.headers = {"Content-Type": "application/json"}
        if self.key_env:
            key = os.environ.get(self.key_env, "")
            if not key:
                raise BackendError(f"verify.kimina_api_key_env = {self.key_env!r}, but ${self.key_env} is not set "
                                   "in this environment", hint=f"export {self.key_env}=<the server's API key>")
            self.headers["Authorization"] = f"Bearer {key}"

    @property
    def canary_key(self) -> str:
        """What identifies the toolchain for the canary's cache: the server (we cannot see its Lean)."""
        return f"kimina {self.url}"

    def run(self, candidates: Iterable[Candidate], on_verdict: Callable[[Candidate, Verdict], None]) -> None:
        todo = list(candidates)
        if todo and not self._canary_done:
            canary.ensure_canary(self)   # BackendError naming the rule when this server breaks one
            self._canary_done = True
        batches = [todo[i:i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
        self._failed = {}
        with ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="kimina") as pool:
            # Each problem's trusted statement first, once (batches run in parallel: they would
            # all ask for it), then the proofs.
            problems = list({(c.header, c.statement, c.target): c for c in todo
                             if (c.header, c.statement, c.target) not in self._expected}.values())
            for namespaces in [pool.submit(self._trusted_namespaces, problems[i:i + self.batch_size])
                               for i in range(0, len(problems), self.batch_size)]:
                namespaces.result()
            pending = {pool.submit(self.check_batch, batch): batch for batch in batches}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        batch = pending.pop(future)
                        for candidate, verdict in zip(batch, future.result()):
                            on_verdict(candidate, verdict)
            finally:
                for future in pending:
                    future.cancel()

    def check(self, candidate: Candidate, allowed: AbstractSet[str] | None = None) -> Verdict:
        return self.check_batch([candidate], allowed)[0]

    def check_canaries(self, pairs: list[tuple[Candidate, AbstractSet[str]]]) -> list[Verdict]:
        """The canary's proofs, each under its own axiom policy (canary.py), in batches."""
        verdicts = []
        for i in range(0, len(pairs), self.batch_size):
            chunk = pairs[i:i + self.batch_size]
            verdicts += self._checked([c for c, _ in chunk], [a for _, a in chunk])
        return verdicts

    def check_batch(self, batch: list[Candidate], allowed: AbstractSet[str] | None = None) -> list[Verdict]:
        """Verdicts of one batch: each problem's trusted statement checked once (cached per
        problem), then one request for the proofs; after an HTTP 500, one request per proof."""
        return self._checked(batch, [self.allowed if allowed is None else allowed] * len(batch))

    def _checked(self, batch: list[Candidate], alloweds: list[AbstractSet[str]]) -> list[Verdict]:
        expected = self._trusted_namespaces(batch)
        verdicts: list[Verdict | None] = [e if isinstance(e, Verdict) else None for e in expected]
        todo = [k for k, v in enumerate(verdicts) if v is None]
        for k, verdict in zip(todo, self._proofs([batch[k] for k in todo], [alloweds[k] for k in todo],
                                                 [cast(str, expected[k]) for k in todo])):   # todo: the namespaces
            verdicts[k] = verdict
        return verdicts  # type: ignore[return-value]

    def _proofs(self, batch: list[Candidate], alloweds: list[AbstractSet[str]],
                expected: list[str]) -> list[Verdict]:
        if not batch:
            return []
        try:
            return self._request(batch, alloweds, expected)
        except _ServerError as exc:
            if len(batch) == 1:
                return [Verdict("error", f"Kimina server: HTTP 500 on this proof alone: {exc.message[:300]}")]
        except _Busy as exc:
            if len(batch) == 1:
                return [Verdict("error", f"Kimina server: {exc}")]
        return [v for k in range(len(batch)) for v in self._proofs(batch[k:k + 1], alloweds[k:k + 1],
                                                                    expected[k:k + 1])]

    def _trusted_namespaces(self, batch: list[Candidate]) -> list[str | Verdict]:
        """Per candidate: the namespace its trusted header leaves open (cached per problem) or the
        `error` verdict of a statement that does not elaborate. One request for the new problems."""
        keys = [(c.header, c.statement, c.target) for c in batch]
        new: dict[tuple[str, str, str], Candidate] = {}
        for key, candidate in zip(keys, batch):
            if key not in self._expected and key not in self._failed and key not in new:
                new[key] = candidate
        failed = self._failed
        if new:
            problems = list(new.items())
            for (key, candidate), printed in zip(problems, self._trusted_request([c for _, c in problems])):
                if isinstance(printed, Verdict):
                    failed[key] = printed   # for this run only: a later run asks again
                else:
                    self._expected[key] = printed
        out: list[str | Verdict] = []
        for key, candidate in zip(keys, batch):
            if not candidate.statement:
                out.append(Verdict("error", "internal: no trusted statement to check the target against"))
            elif key in failed:
                failed_verdict = failed[key]
                out.append(Verdict(failed_verdict.status, failed_verdict.reason))
            else:
                out.append(self._expected[key])
        return out

    def _trusted_request(self, problems: list[Candidate]) -> list[str | Verdict]:
        codes = []
        for c in problems:
            try:
                codes.append(trusted_code(c) if c.statement else "")
            except BadRecord:
                codes.append("")   # judged below: no answer naming `_prover_trusted`
        try:
            results = self._results(codes)
        except (_ServerError, _Busy) as exc:
            if len(problems) == 1:
                what = f"HTTP 500: {exc.message[:300]}" if isinstance(exc, _ServerError) else str(exc)
                return [Verdict("error", f"the trusted statement could not be checked: Kimina server: {what}")]
            return [p for k in range(len(problems)) for p in self._trusted_request(problems[k:k + 1])]
        return [judge_trusted(r, c) for r, c in zip(results, problems)]

    def _results(self, codes: list[str]) -> list[Any]:
        """One POST /verify with `codes`; the results in the same order (BackendError otherwise)."""
        payload = {
            # our own ids, unique within the request (records' ids need not be)
            "codes": [{"custom_id": str(k), "proof": code} for k, code in enumerate(codes)],
            "infotree_type": None,
            "timeout": max(1, math.ceil(self.config.timeout_s)),
        }
        reply = self._post_retrying_429(payload, len(codes))
        results = reply.get("results") if isinstance(reply, dict) else None
        by_id = {str(r.get("custom_id")): r for r in results if isinstance(r, dict)} if isinstance(results, list) else {}
        if not isinstance(results, list) or len(results) != len(codes) \
                or sorted(by_id) != sorted(str(k) for k in range(len(codes))):
            raise BackendError(f"{self.url}: reply is not {{\"results\": [one result per proof]}}: {str(reply)[:200]}")
        return [by_id[str(k)] for k in range(len(codes))]

    def _request(self, batch: list[Candidate], alloweds: list[AbstractSet[str]],
                 expected: list[str]) -> list[Verdict]:
        names = [f"_prover_same_{secrets.token_hex(8)}" for _ in batch]
        codes = [kimina_code(c, name, namespace) for c, name, namespace in zip(batch, names, expected)]
        start = time.monotonic()
        results = self._results(codes)
        elapsed_s = round(time.monotonic() - start, 4)
        verdicts = []
        for result, candidate, name, allowed, code in zip(results, batch, names, alloweds, codes):
            verdict = judge_kimina(result, candidate, name, allowed, code)
            verdict.time_s = elapsed_s
            verdicts.append(verdict)
        return verdicts

    def _post_retrying_429(self, payload: dict[str, Any], proofs: int) -> Any:
        """One request, holding one in-flight slot per proof; a 429 is retried after each of
        RETRY_429_DELAYS_S (slots released while waiting), then raised as _Busy."""
        for attempt, delay in enumerate((*RETRY_429_DELAYS_S, None), start=1):
            self.in_flight.acquire(proofs)
            try:
                return self._post(payload, proofs)
            except _Busy:
                if delay is None:
                    raise _Busy(f"HTTP 429 (no available REPL) on {attempt} attempts over "
                                f"{sum(RETRY_429_DELAYS_S):g} s of backoff") from None
            finally:
                self.in_flight.release(proofs)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _post(self, payload: dict[str, Any], proofs: int) -> Any:
        request = urllib.request.Request(self.url, data=json.dumps(payload).encode("utf-8"),
                                         headers=self.headers, method="POST")
        # the server checks a request's proofs in parallel when its pool has the REPLs, one after
        # another when not: wait for the slow case, plus the header and queueing
        timeout_s = proofs * self.config.timeout_s + self.config.header_timeout_s + SERVER_MAX_WAIT_S + HTTP_MARGIN_S
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                body = reply.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            if exc.code == 500:
                raise _ServerError(detail) from None
            if exc.code == 429:
                raise _Busy(detail) from None
            if exc.code in (401, 403):
                if self.key_env:
                    why = f"the key in ${self.key_env} (verify.kimina_api_key_env) was refused"
                    hint = f"put the server's API key in ${self.key_env}"
                else:
                    why = "the server wants an API key and verify.kimina_api_key_env names no variable"
                    hint = "export LEAN_SERVER_API_KEY=<key> and set verify.kimina_api_key_env = \"LEAN_SERVER_API_KEY\""
                raise BackendError(f"{self.url}: HTTP {exc.code} {detail}: {why}", hint=hint) from None
            raise BackendError(f"{self.url}: HTTP {exc.code} {detail}",
                               hint="check verify.kimina_url and the server's log") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BackendError(f"{self.url}: cannot reach the Kimina Lean Server: {reason}",
                               hint="start it or fix verify.kimina_url, or use verify.backend = \"repl\"") from None
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise BackendError(f"{self.url}: reply is not JSON: {body[:200]!r}") from None

    def close(self) -> None:
        pass


class _ServerError(Exception):
    """HTTP 500: the server failed on (at least) one proof of the request."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _Busy(Exception):
    """HTTP 429: a snippet of the request found no free REPL within the server's max wait."""


def _detail(exc: urllib.error.HTTPError) -> str:
    """FastAPI's error body is {"detail": ...}; fall back to the reason phrase."""
    try:
        body = json.loads(exc.read().decode("utf-8"))
        detail = body.get("detail") if isinstance(body, dict) else None
    except (OSError, ValueError, UnicodeDecodeError):
        detail = None
    return str(detail) if detail else str(exc.reason)
