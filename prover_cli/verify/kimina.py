"""Backend `kimina`: the same verdict rules, applied to a running Kimina Lean Server.

The server (project-numina/kimina-lean-server, the one the reference pipeline used) runs its own
REPL pool. We POST `{verify.kimina_url}/verify` with
`{"codes": [{"custom_id": ID, "proof": CODE}], "infotree_type": null, "timeout": S}` and read
`{"results": [{"custom_id", "error", "response": <REPL command response>}]}`.

The server runs one file per proof, so the axiom check travels inside it: after the proof we
append `theorem prover_axioms_<nonce> : type_of% @TARGET := @TARGET` and
`#print axioms prover_axioms_<nonce>`. The alias has exactly the target's axioms, and its random
name means no message in the proof can pose as the answer (a proof can print any text with
`trace`; it cannot guess the nonce). The server may report positions relative to the body or
to the whole file and may omit `env`, so neither is relied on: the nonce answer proves the file
was checked to its end.

Failures of the server itself (unreachable, HTTP error, a reply that is not the documented shape)
stop the batch with a BackendError, like a REPL that cannot start; per-proof `error` strings
become `timeout` ("timed out") or `error` verdicts.
"""

from __future__ import annotations

import json
import math
import secrets
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Callable, Iterable

from prover_cli.errors import BackendError
from prover_cli.verify.rules import (
    Verdict,
    allowed_axioms,
    judge_axioms,
    judge_proof,
    parse_axioms_message,
)
from prover_cli.verify.statement import Candidate

HTTP_MARGIN_S = 30.0  # the server's own header run and queueing come on top of the proof's timeout


def kimina_code(candidate: Candidate, check_name: str) -> str:
    header = candidate.header if candidate.header.endswith("\n") else candidate.header + "\n"
    return (f"{header}\n{candidate.body.rstrip()}\n\n"
            f"theorem {check_name} : type_of% @{candidate.target} := @{candidate.target}\n\n"
            f"#print axioms {check_name}\n")


def judge_kimina(result: Any, candidate: Candidate, check_name: str, allowed: set[str]) -> Verdict:
    """The verdict rules on one `results[i]` entry of the server's reply."""
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
    sorries = response.get("sorries") or []
    ours = [m for m in messages if isinstance(m, dict) and _reported_name(m) == check_name]
    proof_messages = [m for m in messages if not any(m is o for o in ours)]
    # The server may drop `env`; the nonce answer (checked next) stands in for it.
    verdict = judge_proof({"env": response.get("env", -1) if isinstance(response.get("env"), int) else -1,
                           "messages": proof_messages, "sorries": sorries})
    if verdict is None:
        verdict = judge_axioms(ours, check_name, allowed, proof_messages)
    verdict.reason = verdict.reason.replace(check_name, f"{candidate.target} (alias)")
    return verdict


def _reported_name(message: dict[str, Any]) -> str | None:
    parsed = parse_axioms_message(message.get("data"))
    return parsed[0] if parsed else None


class KiminaBackend:
    """Same interface as ReplPool: `run(candidates, on_verdict)` and `close()`."""

    def __init__(self, verify_config: Any):
        self.config = verify_config
        self.allowed = allowed_axioms(verify_config)
        self.url = verify_config.kimina_url.rstrip("/") + "/verify"

    def run(self, candidates: Iterable[Candidate], on_verdict: Callable[[Candidate, Verdict], None]) -> None:
        with ThreadPoolExecutor(max_workers=self.config.workers, thread_name_prefix="kimina") as pool:
            pending = {pool.submit(self.check, c): c for c in candidates}
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        candidate = pending.pop(future)
                        on_verdict(candidate, future.result())
            finally:
                for future in pending:
                    future.cancel()

    def check(self, candidate: Candidate) -> Verdict:
        check_name = f"prover_axioms_{secrets.token_hex(8)}"
        payload = {
            "codes": [{"custom_id": candidate.id, "proof": kimina_code(candidate, check_name)}],
            "infotree_type": None,
            "timeout": max(1, math.ceil(self.config.timeout_s)),
        }
        start = time.monotonic()
        reply = self._post(payload)
        results = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(results, list) or len(results) != 1:
            raise BackendError(f"{self.url}: reply is not {{\"results\": [one result]}}: {str(reply)[:200]}")
        verdict = judge_kimina(results[0], candidate, check_name, self.allowed)
        verdict.time_s = round(time.monotonic() - start, 4)
        return verdict

    def _post(self, payload: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self.url, data=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": "application/json"}, method="POST")
        timeout_s = self.config.timeout_s + self.config.header_timeout_s + HTTP_MARGIN_S
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as reply:
                body = reply.read()
        except urllib.error.HTTPError as exc:
            raise BackendError(f"{self.url}: HTTP {exc.code} {exc.reason}",
                               hint="is the Kimina Lean Server running? (verify.kimina_url)") from None
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
