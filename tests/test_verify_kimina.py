"""Backend `kimina`: the same rules against a Kimina Lean Server. The server here is a loopback
HTTP stand-in that does what the real one does with a snippet (run the import header, then the
body in its env, on a REPL: our stand-in REPL) and answers in the `/verify` shape."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import fake_repl_command
from prover_cli.errors import BackendError
from prover_cli.verify import verify_records
from prover_cli.verify.kimina import judge_kimina, kimina_code
from prover_cli.verify.repl import ReplFault, ReplProcess, ReplTimeout
from prover_cli.verify.statement import Candidate
from test_verify_statement import STATEMENT


class FakeKimina:
    def __init__(self, drop_env: bool = False, status: int = 200):
        self.payloads: list[dict] = []
        self.drop_env = drop_env
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.payloads.append({"path": self.path, **payload})
                if outer.status != 200:
                    self.send_response(outer.status)
                    self.end_headers()
                    return
                results = [outer.check(code, payload["timeout"]) for code in payload["codes"]]
                body = json.dumps({"results": results}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def check(self, code: dict, timeout_s: int) -> dict:
        lines = code["proof"].split("\n")
        k = 0
        while k < len(lines) and (not lines[k].strip() or lines[k].startswith("import ")):
            k += 1
        header, body = "\n".join(lines[:k]), "\n".join(lines[k:])
        repl = ReplProcess(fake_repl_command())
        repl.start()
        try:
            env = repl.request({"cmd": header}, time.monotonic() + 10)["env"]
            response = repl.request({"cmd": body, "env": env}, time.monotonic() + timeout_s)
        except ReplTimeout:
            return {"custom_id": code["custom_id"], "error": f"Lean REPL command timed out in {timeout_s} seconds"}
        except ReplFault as exc:
            return {"custom_id": code["custom_id"], "error": str(exc)}
        finally:
            repl.kill()
        if self.drop_env:
            response.pop("env", None)
        return {"custom_id": code["custom_id"], "error": None, "response": dict(response, time=0.01)}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def proof(record_id, text="  linarith"):
    return {"id": record_id, "formal_statement": STATEMENT, "proof": text}


@pytest.fixture
def kimina_config(verify_config):
    def make(url, **overrides):
        return verify_config(backend="kimina", kimina_url=url, timeout_s=1.0, **overrides)
    return make


def test_request_shape_and_verdicts(kimina_config):
    with FakeKimina() as server:
        records = [proof("ok"), proof("err", "  fake_error"), proof("sorry", "  fake_axiom_sorryAx"),
                   proof("warn", "  fake_sorry_ws"), proof("hang", "  fake_hang"), proof("denied", "  admit")]
        verdicts = verify_records(records, kimina_config(server.url))
    got = {v["id"]: v["verdict"] for v in verdicts}
    assert got == {"ok": "verified", "err": "rejected", "sorry": "rejected", "warn": "rejected",
                   "hang": "timeout", "denied": "rejected"}
    ok = verdicts[0]
    assert ok["axioms"] == ["propext", "Classical.choice", "Quot.sound"]
    assert ok["verifier"] == {"backend": "kimina", "lean_toolchain": "leanprover/lean4:v4.15.0",
                              "mathlib_rev": "v4.15.0", "kimina_url": server.url}
    assert len(server.payloads) == 5  # the denied proof was never sent
    for payload in server.payloads:
        assert payload["path"] == "/verify" and payload["infotree_type"] is None
        assert isinstance(payload["timeout"], int) and len(payload["codes"]) == 1
        [code] = payload["codes"]
        assert set(code) == {"custom_id", "proof"} and code["proof"].startswith("import Mathlib")
        assert "#print axioms prover_axioms_" in code["proof"]


def test_server_that_drops_env_still_verifies_through_the_nonce(kimina_config):
    with FakeKimina(drop_env=True) as server:
        [verdict] = verify_records([proof("ok")], kimina_config(server.url))
    assert verdict["verdict"] == "verified"


def test_a_forged_axioms_message_is_not_the_answer():
    candidate = Candidate("x", "import Mathlib\n", STATEMENT + "\n  linarith", "amc_p1")
    code = kimina_code(candidate, "prover_axioms_0123")
    assert code.rstrip().endswith("#print axioms prover_axioms_0123")
    forged = {"severity": "info", "pos": {"line": 3, "column": 2}, "endPos": {"line": 3, "column": 9},
              "data": "'amc_p1' does not depend on any axioms"}
    result = {"custom_id": "x", "error": None, "response": {"env": 1, "messages": [forged]}}
    verdict = judge_kimina(result, candidate, "prover_axioms_0123", {"propext"})
    assert verdict.status == "rejected" and "#print axioms" in verdict.reason
    real = dict(forged, data="'prover_axioms_0123' depends on axioms: [propext]")
    result["response"]["messages"].append(real)
    assert judge_kimina(result, candidate, "prover_axioms_0123", {"propext"}).status == "verified"


def test_protocol_error_and_error_strings(kimina_config):
    candidate = Candidate("x", "import Mathlib\n", STATEMENT, "amc_p1")
    protocol = {"custom_id": "x", "error": None, "response": {"message": "Unknown environment.", "time": 0.1}}
    assert judge_kimina(protocol, candidate, "n", set()).status == "error"
    crashed = {"custom_id": "x", "error": "REPL died"}
    assert judge_kimina(crashed, candidate, "n", set()).status == "error"


def test_unreachable_server_is_a_backend_error(kimina_config):
    with FakeKimina() as server:
        url = server.url
    with pytest.raises(BackendError) as info:
        verify_records([proof("ok")], kimina_config(url))
    assert "cannot reach" in str(info.value)


def test_http_error_is_a_backend_error(kimina_config):
    with FakeKimina(status=500) as server:
        with pytest.raises(BackendError) as info:
            verify_records([proof("ok")], kimina_config(server.url))
    assert "HTTP 500" in str(info.value)
