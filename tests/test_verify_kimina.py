"""Backend `kimina`: the same rules against a Kimina Lean Server. The server here is a loopback
HTTP stand-in that does what project-numina/kimina-lean-server does with a request, read from its
source (server/routers/backward.py, check.py, split.py, auth.py):

- `Authorization: Bearer <key>` is required when the server has a key: 401 "Missing API key" /
  "Invalid API key" otherwise, as FastAPI's `{"detail": ...}`;
- the body is validated like `VerifyRequestBody` (codes with custom_id and proof/code, an integer
  timeout): 422 otherwise; only /verify and /one_pass_verify_batch exist (404 otherwise);
- each code is split into header and body; every `import Mathlib.X` becomes one `import Mathlib`;
  the header runs on a REPL (our REPL stand-in), then the body in its env;
- one snippet whose REPL crashes fails the whole request with HTTP 500 `{"detail": <message>}`
  (the server gathers its snippets with asyncio.gather and raises HTTPException(500, str(e))).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import PATIENCE_S, fake_repl_command
from prover_cli.errors import BackendError
from prover_cli.verify import verify_records
from prover_cli.verify.lean.kimina import judge_kimina, judge_trusted, kimina_code, trusted_code
from prover_cli.verify.kernel.pins import PINS
from prover_cli.verify.lean.repl import ReplFault, ReplProcess, ReplTimeout
from prover_cli.verify.text.statement import Candidate
from test_verify_statement import STATEMENT

CRASH = "fake_kimina_crash"  # a snippet with this marker crashes its REPL inside the server


def split_snippet(code: str) -> tuple[str, str, int]:
    """server/split.py: (header, body, header line count), `import Mathlib.X` folded into `import Mathlib`."""
    lines = code.splitlines()
    i = 0
    while i < len(lines) and (lines[i].strip() == "" or lines[i].strip().startswith("import ")):
        i += 1
    header_lines = [x.strip() for x in lines[:i]]
    imports, seen, has_mathlib = [], set(), False
    for line in (x for x in header_lines if x.startswith("import ")):
        if line.startswith("import Mathlib"):
            has_mathlib = True
        elif line not in seen:
            seen.add(line)
            imports.append(line)
    header = "\n".join((["import Mathlib"] if has_mathlib else []) + imports)
    return header, "\n".join(lines[i:]), i


def invalid_body(payload) -> str | None:
    """What pydantic would refuse in a VerifyRequestBody (422), else None."""
    if not isinstance(payload, dict) or not isinstance(payload.get("codes"), list):
        return "codes: field required (a list)"
    for code in payload["codes"]:
        if not isinstance(code, dict) or not isinstance(code.get("custom_id"), (str, int)):
            return "codes.custom_id: field required (str or int)"
        content = code.get("proof", code.get("code"))
        if not isinstance(content, str):
            return f"codes: snippet {code.get('custom_id')!r} has no proof/code content"
    timeout = payload.get("timeout", 300)
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        return "timeout: value is not a valid integer"
    if payload.get("infotree_type") not in (None, "full", "tactics", "original", "substantive"):
        return "infotree_type: not a valid Infotree"
    return None


class FakeKimina:
    def __init__(self, drop_env: bool = False, status: int = 200, api_key: str | None = None,
                 repl_args: tuple[str, ...] = ()):
        self.repl_args = tuple(repl_args)
        self.payloads: list[dict] = []
        self.headers_run: list[str] = []
        self.authorizations: list[str | None] = []
        self.drop_env = drop_env
        self.status = status
        self.api_key = api_key
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                auth = self.headers.get("Authorization")
                outer.authorizations.append(auth)
                if self.path not in ("/verify", "/one_pass_verify_batch"):
                    return self.reply(404, {"detail": "Not Found"})
                if outer.api_key is not None:
                    if not auth:
                        return self.reply(401, {"detail": "Missing API key"})
                    if auth.removeprefix("Bearer ").strip() != outer.api_key:
                        return self.reply(401, {"detail": "Invalid API key"})
                try:
                    payload = json.loads(raw)
                except ValueError:
                    return self.reply(422, {"detail": [{"msg": "JSON decode error"}]})
                problem = invalid_body(payload)
                if problem:
                    return self.reply(422, {"detail": [{"msg": problem}]})
                outer.payloads.append({"path": self.path, **payload})
                if outer.status != 200:
                    return self.reply(outer.status, {"detail": "Service Unavailable"})
                timeout = payload.get("timeout", 300)
                if any(CRASH in c.get("proof", c.get("code")) for c in payload["codes"]):
                    return self.reply(500, {"detail": "Lean REPL process exited unexpectedly (code 137)"})
                self.reply(200, {"results": [outer.check(code, timeout) for code in payload["codes"]]})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def check(self, code: dict, timeout_s: int) -> dict:
        header, body, _ = split_snippet(code.get("proof", code.get("code")))
        self.headers_run.append(header)
        custom_id = code["custom_id"]
        repl = ReplProcess(fake_repl_command(*self.repl_args))
        repl.start()
        try:
            env = repl.request({"cmd": header}, time.monotonic() + PATIENCE_S)["env"]
            response = repl.request({"cmd": body, "env": env}, time.monotonic() + timeout_s)
        except ReplTimeout:
            return {"custom_id": custom_id, "error": f"Lean REPL command timed out in {timeout_s} seconds"}
        except ReplFault as exc:
            return {"custom_id": custom_id, "error": str(exc)}
        finally:
            repl.kill()
        if self.drop_env:
            response.pop("env", None)
        return {"custom_id": custom_id, "error": None, "response": dict(response, time=0.01)}

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
        # a server with 8 REPLs: one request of kimina_batch_size = 8 proofs fits in flight
        return verify_config(backend="kimina", kimina_url=url, timeout_s=1.0, **{"kimina_max_repls": 8, **overrides})
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
    # the server reports no Lean version: the verdict does not claim the configured one; the
    # kernel stage ran our own lean and checker, whose version it names
    assert ok["verifier"] == {"backend": "kimina", "lean_toolchain": "unknown",
                              "mathlib_rev": "unknown", "kimina_url": server.url,
                              "kernel_check": {"checker": "prover_check", "toolchain": "v4.15.0",
                                               "commit": PINS["v4.15.0"].commit},
                              "box": "bubblewrap"}
    assert ok["reason"] == f"all checks passed; kernel check passed (prover_check {PINS['v4.15.0'].commit[:8]})"
    # the trusted statement first (one problem: one code), then the proofs: the denied proof was
    # never sent; the other five went in one request (verify.kimina_batch_size = 8)
    trusted, payload = server.payloads
    [code] = trusted["codes"]
    assert "theorem _prover_trusted (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := _prover_hole" in code["proof"]
    assert code["proof"].rstrip().endswith("set_option pp.fullNames true in\n#print axioms _prover_trusted")
    assert payload["path"] == "/verify" and payload["infotree_type"] is None
    assert isinstance(payload["timeout"], int) and [c["custom_id"] for c in payload["codes"]] == list("01234")
    for code in payload["codes"]:
        assert set(code) == {"custom_id", "proof"} and code["proof"].startswith("import Mathlib")
        text = code["proof"]
        # the trusted statement, before the proof; the alias and its axioms after it
        assert text.index("theorem _prover_trusted") < text.index("theorem amc_p1") < text.index(
            "theorem _root_._prover_same_")
        assert "set_option pp.fullNames true in\n#print axioms _root_._prover_same_" in text
        assert "#check" not in text
    assert server.authorizations == [None, None]  # no key configured: no header


def test_batches_are_verify_kimina_batch_size_proofs(kimina_config):
    with FakeKimina() as server:
        verdicts = verify_records([proof(f"p{i}") for i in range(5)], kimina_config(server.url, kimina_batch_size=2))
    assert sorted(len(p["codes"]) for p in server.payloads) == [1, 1, 2, 2]   # the trusted statement once
    assert [v["verdict"] for v in verdicts] == ["verified"] * 5


def test_server_that_drops_env_still_verifies_through_the_nonce(kimina_config):
    with FakeKimina(drop_env=True) as server:
        [verdict] = verify_records([proof("ok")], kimina_config(server.url))
    assert verdict["verdict"] == "verified"


def test_a_forged_axioms_message_is_not_the_answer():
    candidate = Candidate("x", "import Mathlib\n", STATEMENT + "\n  linarith", "amc_p1", STATEMENT)
    code = kimina_code(candidate, "_prover_same_0123")
    assert code.rstrip().endswith("\n#print axioms _root_._prover_same_0123")
    forged = {"severity": "info", "pos": {"line": 3, "column": 2}, "endPos": {"line": 3, "column": 9},
              "data": "'amc_p1' does not depend on any axioms"}
    result = {"custom_id": "x", "error": None, "response": {"env": 1, "messages": [forged]}}
    verdict = judge_kimina(result, candidate, "_prover_same_0123", {"propext"}, code)
    assert verdict.status == "rejected" and "#print axioms" in verdict.reason
    real = dict(forged, data="'_prover_same_0123' depends on axioms: [propext]")
    result["response"]["messages"].append(real)
    assert judge_kimina(result, candidate, "_prover_same_0123", {"propext"}, code).status == "verified"


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
    with FakeKimina(status=503) as server:
        with pytest.raises(BackendError) as info:
            verify_records([proof("ok")], kimina_config(server.url))
    assert "HTTP 503" in str(info.value)


def test_http_500_splits_the_batch_and_only_the_crashing_proof_gets_error(kimina_config):
    with FakeKimina() as server:
        records = [proof("a"), proof("crash", f"  {CRASH}"), proof("c", "  fake_error")]
        verdicts = verify_records(records, kimina_config(server.url))
    got = {v["id"]: v for v in verdicts}
    assert got["a"]["verdict"] == "verified" and got["c"]["verdict"] == "rejected"
    assert got["crash"]["verdict"] == "error"
    assert "Lean REPL process exited unexpectedly (code 137)" in got["crash"]["reason"]  # the server's message
    # the trusted statement, the batch, then one by one
    assert [len(p["codes"]) for p in server.payloads] == [1, 3, 1, 1, 1]


def test_api_key_is_sent_as_a_bearer_token(kimina_config, monkeypatch):
    monkeypatch.setenv("MY_KIMINA_KEY", "s3cret")
    with FakeKimina(api_key="s3cret") as server:
        [verdict] = verify_records([proof("ok")], kimina_config(server.url, kimina_api_key_env="MY_KIMINA_KEY"))
    assert verdict["verdict"] == "verified" and server.authorizations == ["Bearer s3cret"] * 2


@pytest.mark.parametrize("key_env,value,expected", [
    ("MY_KIMINA_KEY", "wrong", "HTTP 401 Invalid API key: the key in $MY_KIMINA_KEY"),
    ("", None, "HTTP 401 Missing API key: the server wants an API key and verify.kimina_api_key_env"),
    ("MY_KIMINA_KEY", None, "verify.kimina_api_key_env = 'MY_KIMINA_KEY', but $MY_KIMINA_KEY is not set"),
])
def test_a_refused_or_missing_key_is_one_error_naming_the_variable(kimina_config, monkeypatch, key_env, value,
                                                                     expected):
    monkeypatch.delenv("MY_KIMINA_KEY", raising=False)
    if value is not None:
        monkeypatch.setenv("MY_KIMINA_KEY", value)
    with FakeKimina(api_key="s3cret") as server:
        with pytest.raises(BackendError) as info:
            verify_records([proof("a"), proof("b")], kimina_config(server.url, kimina_api_key_env=key_env))
    assert expected in str(info.value)
    assert "is the server running" not in str(info.value) + str(info.value.hint or "")


def test_the_server_widens_mathlib_submodule_imports_to_import_mathlib(kimina_config):
    """Documented in kimina.py and docs/verify.md: the server checks under all of Mathlib."""
    with FakeKimina() as server:
        record = {**proof("narrow"), "header": "import Mathlib.Tactic.Linarith\n"}
        [verdict] = verify_records([record], kimina_config(server.url, header="import Mathlib.Tactic.Linarith\n"))
    assert verdict["verdict"] == "verified"
    assert server.headers_run == ["import Mathlib"] * 2   # the trusted statement's file, the proof's
    assert split_snippet("import Mathlib.Data.Real.Basic\nimport Aesop\n\ntheorem t : True := trivial")[0] == \
        "import Mathlib\nimport Aesop"


def test_the_stand_in_refuses_what_the_server_refuses():
    assert invalid_body({"codes": [{"custom_id": "a", "proof": "x"}], "timeout": 1.5}) is not None
    assert invalid_body({"codes": [{"proof": "x"}], "timeout": 1}) is not None
    assert invalid_body({"codes": [{"custom_id": 1, "code": "x"}], "timeout": 1}) is None


# -- Lean's statement check and the canary, through the server ---------------------------------

WIDE = ["variable", "open", "namespace", "end", "section"]
KIMINA_LEAN_ONLY_CHEATS = {
    # completion blocks the (widened) text checks let through: only Lean's `#check` can catch them
    "instance variable": "variable [Fact False]\n\n" + STATEMENT + "\n  linarith",
    "variable in": "variable (h : False) in\n" + STATEMENT + "\n  linarith",
    "open changes names": "theorem helper : True := trivial\nopen Lean\n\n" + STATEMENT + "\n  linarith",
    "namespace": "namespace Foo\n\n" + STATEMENT + "\n  linarith",
}


@pytest.mark.parametrize("name", sorted(KIMINA_LEAN_ONLY_CHEATS))
def test_lean_statement_check_runs_through_the_server(name, kimina_config):
    record = {"id": name, "formal_statement": STATEMENT,
              "completion": f"```lean4\n{KIMINA_LEAN_ONLY_CHEATS[name]}\n```"}
    with FakeKimina() as server:
        honest, cheat = verify_records([proof("honest"), record], kimina_config(server.url, allow_commands=WIDE))
    assert honest["verdict"] == "verified", honest["reason"]
    assert cheat["verdict"] == "rejected" and "statement check" in cheat["reason"], cheat["reason"]


def _axioms_message(name: str, line: int = 9) -> dict:
    return {"severity": "info", "pos": {"line": line, "column": 0}, "endPos": {"line": line, "column": 6},
            "data": f"'{name}' depends on axioms: [propext]"}


def test_the_answer_must_be_the_nonce_alias_and_an_error_there_is_the_statement_check():
    candidate = Candidate("x", "import Mathlib\n", STATEMENT + "\n  linarith", "amc_p1", STATEMENT)
    code = kimina_code(candidate, "_prover_same_1")
    alias_line = code.split("\n").index(next(line for line in code.split("\n") if line.startswith("theorem _root_")))

    def verdict(*messages):
        result = {"custom_id": "0", "error": None, "response": {"env": 1, "messages": list(messages)}}
        return judge_kimina(result, candidate, "_prover_same_1", {"propext"}, code)

    assert verdict(_axioms_message("_prover_same_1")).status == "verified"
    # a proof can print anything (`trace`), but not the nonce: a forged answer is no answer
    forged = verdict(_axioms_message("amc_p1"))
    assert forged.status == "rejected" and "no parseable" in forged.reason
    twice = verdict(_axioms_message("_prover_same_1"), _axioms_message("_prover_same_1"))
    assert twice.status == "rejected" and "2 `#print axioms" in twice.reason
    # an error at the alias (positions relative to the body: the import line is split off)
    mismatch = {"severity": "error", "pos": {"line": alias_line, "column": 60},
                "data": "type mismatch\n  @amc_p1\nhas type\n  False : Prop"}
    rejected = verdict(mismatch, _axioms_message("_prover_same_1"))
    assert rejected.status == "rejected" and rejected.reason.startswith("statement check:")
    assert "type mismatch" in rejected.reason
    early = dict(mismatch, pos={"line": 3, "column": 2}, data="unsolved goals")
    assert verdict(early, _axioms_message("_prover_same_1")).reason.startswith("Lean error (line 3)")


def test_the_trusted_file_and_its_failures():
    candidate = Candidate("x", "import Mathlib\n", "", "amc_p1", STATEMENT)
    code = trusted_code(candidate)
    assert code.startswith("import Mathlib\n") and "axiom _prover_hole {p : Prop} : p" in code
    assert code.rstrip().endswith("#print axioms _prover_trusted")
    ok = {"custom_id": "0", "response": {"env": 1, "messages": [_axioms_message("_prover_trusted")]}}
    assert judge_trusted(ok, candidate) == ""
    # a trusted header that leaves `namespace Ns` open declares it inside
    inside = {"custom_id": "0", "response": {"env": 1, "messages": [_axioms_message("Ns._prover_trusted")]}}
    assert judge_trusted(inside, candidate) == "Ns."
    error = {"severity": "error", "pos": {"line": 3, "column": 0}, "data": "unknown identifier 'foo'"}
    bad = {"custom_id": "0", "response": {"env": 1, "messages": [error, _axioms_message("_prover_trusted")]}}
    assert "does not elaborate" in judge_trusted(bad, candidate).reason
    timed_out = judge_trusted({"custom_id": "0", "error": "Lean REPL command timed out in 1 seconds"}, candidate)
    assert timed_out.status == "timeout" and "trusted statement" in timed_out.reason


def test_a_trusted_statement_that_does_not_elaborate_is_the_records_error(kimina_config):
    record = {"id": "bad", "formal_statement": "theorem t (fake_error : True) : 1 = 1 := by", "proof": "  rfl"}
    with FakeKimina() as server:
        [verdict] = verify_records([record], kimina_config(server.url))
    assert verdict["verdict"] == "error" and "does not elaborate" in verdict["reason"]
    assert len(server.payloads) == 1   # the proof was not sent


def test_the_canary_runs_through_the_server_and_refuses_a_server_that_breaks_a_rule(kimina_config, tmp_path,
                                                                                     monkeypatch):
    monkeypatch.setenv("PROVER_CANARY_CACHE", str(tmp_path / "canary"))
    with FakeKimina() as server:
        [verdict] = verify_records([proof("ok")], kimina_config(server.url, canary=True))
        assert verdict["verdict"] == "verified"
        requests = len(server.payloads)
        assert requests >= 3   # the canary's trusted statements and proofs, then ours
        verify_records([proof("again")], kimina_config(server.url, canary=True))
        assert len(server.payloads) == requests + 2   # the canary passed: cached; only the statement and proof
    with FakeKimina(repl_args=("--quirk", "check-ignores-context")) as server:
        with pytest.raises(BackendError) as info:
            verify_records([proof("ok")], kimina_config(server.url, canary=True))
    assert "refuses to run" in str(info.value) and "statement check" in str(info.value)


def test_a_trusted_header_that_leaves_a_namespace_open(kimina_config, verify_config):
    """MOBench has headers ending inside `namespace GameState`: the target (and our alias) is
    `GameState.NAME`, and both backends must verify an honest proof of it and nothing else."""
    header = "import Mathlib\n\nstructure GameState where\n  n : ℕ\n\nnamespace GameState\n\n"
    records = [{**proof("honest"), "header": header},
               {"id": "cheat", "formal_statement": STATEMENT, "header": header,
                "completion": f"```lean4\nvariable [Fact False]\n\n{STATEMENT}\n  linarith\n```"}]
    wide = {"allow_commands": WIDE, "header": header}
    with FakeKimina() as server:
        by_kimina = verify_records(records, kimina_config(server.url, **wide))
    by_repl = verify_records(records, verify_config(**wide))
    for verdicts in (by_kimina, by_repl):
        assert [v["verdict"] for v in verdicts] == ["verified", "rejected"], [v["reason"] for v in verdicts]
        assert "statement check" in verdicts[1]["reason"]
