"""Backend `kimina` under load: in-flight proofs bounded by the server's REPL count, HTTP 429 retried.

The stand-in server here adds what project-numina/kimina-lean-server does when its REPLs are all
busy (read from its source, server/manager.py `Manager.get_repl` and server/routers/check.py
`run_checks`): it runs at most LEAN_SERVER_MAX_REPLS REPLs; each snippet of a request waits for one
up to LEAN_SERVER_MAX_WAIT seconds, and a snippet that gets none fails the whole request with
HTTP 429 `{"detail": "No available REPLs"}` (asyncio.gather re-raises the HTTPException). The
snippets of one request run concurrently. Proofs are checked by the REPL stand-in through
test_verify_kimina.FakeKimina.check; these verdicts are not Lean results.
"""

from __future__ import annotations

import json
import threading

import pytest

from conftest import PATIENCE_S
from prover_cli.verify import verify_records
from prover_cli.verify.lean import kimina
from test_verify_kimina import FakeKimina, invalid_body, proof

BUSY = "fake_kimina_busy"  # a request holding a snippet with this marker always gets HTTP 429


class BusyKimina(FakeKimina):
    """FakeKimina (its auth-free reply, server and REPL-stand-in `check`) with the server's REPL
    limit: MAX_REPLS REPLs, a MAX_WAIT per snippet, snippets of one request run concurrently."""

    def __init__(self, max_repls: int, max_wait_s: float, busy_first: int = 0, repl_args=("--delay", "0.2")):
        super().__init__(repl_args=repl_args)
        self.max_repls, self.max_wait_s = max_repls, max_wait_s
        self.busy_first = busy_first                     # answer 429 to this many requests first
        self.repls = threading.BoundedSemaphore(max_repls)
        self.lock = threading.Lock()
        self.running = self.peak = 0
        self.requests: list[list[str]] = []              # the codes of each request, in order
        self.answers: list[int] = []                     # HTTP status per request
        outer = self

        class Handler(self.server.RequestHandlerClass):
            def reply(self, status: int, body: dict) -> None:
                outer.answers.append(status)
                super().reply(status, body)

            def do_POST(self):  # noqa: N802 - http.server's name
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert invalid_body(payload) is None and self.path == "/verify"
                codes = payload["codes"]
                with outer.lock:
                    outer.requests.append([c["proof"] for c in codes])
                    refuse = outer.busy_first > 0
                    outer.busy_first -= 1 if refuse else 0
                if refuse or any(BUSY in c["proof"] for c in codes):
                    return self.reply(429, {"detail": "No available REPLs"})
                results: list = [None] * len(codes)

                def run_one(k: int) -> None:
                    if not outer.repls.acquire(timeout=outer.max_wait_s):
                        return  # no REPL within LEAN_SERVER_MAX_WAIT: this request gets 429
                    with outer.lock:
                        outer.running += 1
                        outer.peak = max(outer.peak, outer.running)
                    try:
                        results[k] = outer.check(codes[k], payload.get("timeout", 300))
                    finally:
                        with outer.lock:
                            outer.running -= 1
                        outer.repls.release()

                threads = [threading.Thread(target=run_one, args=(k,)) for k in range(len(codes))]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if any(r is None for r in results):
                    return self.reply(429, {"detail": "No available REPLs"})
                self.reply(200, {"results": results})

        self.server.RequestHandlerClass = Handler


@pytest.fixture
def config(verify_config):
    def make(url, **overrides):
        return verify_config(backend="kimina", kimina_url=url, timeout_s=5.0, workers=4, kimina_batch_size=8,
                             **overrides)
    return make


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(kimina, "RETRY_429_DELAYS_S", (0.01, 0.01, 0.01))


def test_proofs_in_flight_never_exceed_the_servers_repls(config):
    """4 workers x 8 proofs per request would be 32 in flight; the server has 2 REPLs and makes a
    snippet wait at most 0.3 s, so anything above 2 at a time would get 429s."""
    with BusyKimina(max_repls=2, max_wait_s=0.3) as server:
        verdicts = verify_records([proof(f"p{i}") for i in range(6)], config(server.url, kimina_max_repls=2))
    assert [v["verdict"] for v in verdicts] == ["verified"] * 6
    assert server.peak <= 2 and 429 not in server.answers
    assert max(len(codes) for codes in server.requests) <= 2  # no request larger than the REPLs


def test_unknown_repl_count_means_one_proof_per_worker(config):
    backend = kimina.KiminaBackend(config("http://127.0.0.1:9"))
    assert backend.in_flight.capacity == 4 and backend.batch_size == 4  # verify.workers
    backend = kimina.KiminaBackend(config("http://127.0.0.1:9", kimina_max_repls=31))
    assert backend.in_flight.capacity == 31 and backend.batch_size == 8  # verify.kimina_batch_size


def test_a_429_is_retried_with_backoff_and_the_proofs_verify(config, quick_retries):
    with BusyKimina(max_repls=8, max_wait_s=5, busy_first=2) as server:
        verdicts = verify_records([proof("a"), proof("b")], config(server.url, kimina_max_repls=8))
    assert [v["verdict"] for v in verdicts] == ["verified", "verified"]
    assert server.answers[:2] == [429, 429] and server.answers[2:] == [200] * (len(server.answers) - 2)


def test_a_proof_that_keeps_getting_429_is_an_error_alone(config, quick_retries):
    with BusyKimina(max_repls=8, max_wait_s=5) as server:
        records = [proof("a"), proof("busy", f"  have {BUSY} : True := trivial\n  linarith"), proof("c")]
        verdicts = verify_records(records, config(server.url, kimina_max_repls=8))
    got = {v["id"]: v for v in verdicts}
    assert got["a"]["verdict"] == "verified" and got["c"]["verdict"] == "verified"
    assert got["busy"]["verdict"] == "error" and "HTTP 429" in got["busy"]["reason"]
    alone = [codes for codes in server.requests if len(codes) == 1 and BUSY in codes[0]]
    assert len(alone) == 1 + len(kimina.RETRY_429_DELAYS_S)  # bounded: first try + each retry, then error


def test_in_flight_counts_proofs_across_threads():
    gate = kimina.InFlight(3)
    gate.acquire(2)
    blocked = threading.Event()

    def second():
        gate.acquire(2)   # 2 + 2 > 3: waits for the release
        blocked.set()
        gate.release(2)

    thread = threading.Thread(target=second)
    thread.start()
    assert not blocked.wait(0.2)
    gate.release(2)
    assert blocked.wait(PATIENCE_S)
    thread.join()
    assert gate.peak == 2 and gate.used == 0
    with pytest.raises(ValueError, match="exceeds"):
        gate.acquire(4)
