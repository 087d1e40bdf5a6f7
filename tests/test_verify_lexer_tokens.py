"""The lexer reads quotes as Lean does, by the token table of the configured Mathlib.

Lean's rule (leanprover/lean4 src/Lean/Parser/Basic.lean @00c1b82722b5, `tokenFnAux`): at a token
start `"` opens a string, `'` opens a char literal unless the next character is `'`, and otherwise
the longest token-table match wins (over an identifier too when at least as long, `isToken`);
identifiers take `'` after their first character (`isIdRest`). The cases below are built from the
recorded table (prover_cli/verify/text/tokens/mathlib-<commit>.json); nothing here ran Lean.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from prover_cli.verify.text import lexer
from prover_cli.verify.text.lexer import LexError, lex

REPO = Path(__file__).resolve().parent.parent
TOKENS = REPO / "prover_cli" / "verify" / "text" / "tokens"
MATHLIB_COMMIT = "9837ca9d65d9de6fad1ef4381750ca688774e608"   # Mathlib v4.15.0 (table's revs_resolved_by)
TABLE = json.loads((TOKENS / f"mathlib-{MATHLIB_COMMIT}.json").read_text(encoding="utf-8"))
MATHLIB = lexer.mathlib_table("v4.15.0")
CORE_ONLY = lexer.table_for_config(type("C", (), {"project_dir": "/nonexistent", "mathlib_rev": "v9.99.0"})())

# every recorded token an importer of Mathlib sees that starts with a symbol (the ones whose
# quote the old lexer took for a char literal); identifier-like ones (`cases'`) are identifiers too
SYMBOL_TOKENS = sorted({t["token"] for t in TABLE["tokens"] if t["scope"] != "local"
                        and not lexer.is_id_first(t["token"][0])})


def kinds(text: str, table=MATHLIB) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in lex(text, table).tokens]


def code_idents(text: str, table=MATHLIB) -> list[str]:
    return [t.text for t in lex(text, table).code_tokens() if t.kind == "ident"]


# -- the recorded table ---------------------------------------------------------------------------

def test_the_table_is_keyed_by_the_commit_the_default_pin_resolves_to():
    from prover_cli.config import VerifyConfig

    assert TABLE["mathlib_commit"] == MATHLIB_COMMIT and VerifyConfig().mathlib_rev in TABLE["mathlib_revs"]
    # v4.15.0 -> commit was read in the lake-manifest.json of the SafeVerify commit kernel/pins.py pins
    # for v4.15.0 (Kimina's checker: its Mathlib is the default toolchain's)
    safeverify_v4_15 = "577e95319a2bb1bb8df541f0c645811f6577a0ae"
    assert f"GasStationManager/SafeVerify@{safeverify_v4_15}" in TABLE["revs_resolved_by"]
    assert safeverify_v4_15 in (REPO / "prover_cli" / "verify" / "kernel" / "pins.py").read_text(encoding="utf-8")
    assert TABLE["packages"]["mathlib"]["commit"] == MATHLIB_COMMIT


@pytest.mark.parametrize("path", sorted(TOKENS.glob("mathlib-*.json")), ids=lambda p: p.stem[:20])
def test_every_table_is_keyed_by_its_commit_and_resolved_at_a_pinned_checker(path):
    table = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == f"mathlib-{table['mathlib_commit']}.json"
    [safeverify] = re.findall(r"GasStationManager/SafeVerify@([0-9a-f]{40})", table["revs_resolved_by"])
    assert safeverify in (REPO / "prover_cli" / "verify" / "kernel" / "pins.py").read_text(encoding="utf-8")
    for rev in table["mathlib_revs"]:
        assert lexer.mathlib_table(rev).name == f"the table of Mathlib {table['mathlib_commit'][:12]}"
    assert all(t["line"] > 0 and t["file"].endswith(".lean") and ("'" in t["token"] or '"' in t["token"])
               for t in table["tokens"])
    assert {"''", "⁻¹'", "∑'"} <= {t["token"] for t in table["tokens"] if t["scope"] == "global"}


@pytest.mark.parametrize("token, path", [
    ("⁻¹'", "Mathlib/Data/Set/Operations.lean"),
    ("''", "Mathlib/Data/Set/Operations.lean"),
    ("∑'", "Mathlib/Topology/Algebra/InfiniteSum/Defs.lean"),
    ("∏'", "Mathlib/Topology/Algebra/InfiniteSum/Defs.lean"),
])
def test_the_set_and_tsum_notations_are_recorded_with_file_and_line(token, path):
    rows = [t for t in TABLE["tokens"] if t["token"] == token and t["scope"] == "global"]
    assert [(r["package"], r["file"]) for r in rows] == [("mathlib", path)]
    assert rows[0]["line"] > 0


def test_without_a_verifier_the_default_configs_table_is_read():
    from prover_cli.config import VerifyConfig

    assert lexer.DEFAULT_MATHLIB_REV == VerifyConfig().mathlib_rev
    saved = list(lexer._ACTIVE)
    try:
        lexer._ACTIVE.clear()
        assert lexer.active_token_table().tokens == MATHLIB.tokens
    finally:
        lexer._ACTIVE[:] = saved


def test_local_notation_is_recorded_but_never_read():
    local = {t["token"] for t in TABLE["tokens"] if t["scope"] == "local"} - {
        t["token"] for t in TABLE["tokens"] if t["scope"] != "local"}
    assert "abs'" in local and not local & MATHLIB.tokens


def test_core_tokens_are_in_every_table():
    assert {"Σ'", "×'"} <= CORE_ONLY.tokens <= MATHLIB.tokens
    assert "none recorded for Mathlib v9.99.0" in CORE_ONLY.name


# -- Lean's rule, on cases from the table ---------------------------------------------------------

@pytest.mark.parametrize("token", SYMBOL_TOKENS)
def test_a_run_tac_after_a_recorded_token_is_seen_on_the_same_and_the_next_line(token):
    for text in (f"f {token} s run_tac t", f"f {token} s\nrun_tac t", f"  exact f {token} s\nrun_cmd t"):
        words = code_idents(text)
        assert words[-2] in ("run_tac", "run_cmd"), (text, words)


def test_a_recorded_token_is_one_lean_token_read_as_symbols():
    assert kinds("f ⁻¹' s") == [("ident", "f"), ("symbol", "⁻"), ("symbol", "¹"), ("symbol", "'"), ("ident", "s")]
    assert kinds("f '' s")[1:3] == [("symbol", "'"), ("symbol", "'")]
    assert kinds("x ⁻¹'o s")[-1] == ("ident", "s")   # the longest match, `⁻¹'o` over `⁻¹'`


@pytest.mark.parametrize("text", [
    "f ⁻¹'\"'\" run_tac evil \"",    # Lean: token, string `"'"`, code; the old lexer: char `'"'`, string
    "f ''\"'\" run_tac evil \"",
    "∑'\"x\"",
])
def test_the_string_parity_attack_is_refused(text):
    for table in (MATHLIB, CORE_ONLY):
        with pytest.raises(LexError):
            lex(text, table)


@pytest.mark.parametrize("text, lean_reads", [
    ("f ⁻¹'a'", "'a'"),        # without `⁻¹'` in scope Lean reads `⁻¹` then the char `'a'`
    ("f ⁻¹' 'a'", "' '"),
    ("f '' s =' 'b'", "' '"),  # `='` is scoped (ModelTheory): outside it, `=` and the char `' '`
])
def test_a_token_whose_quote_would_start_a_char_literal_without_it_is_refused(text, lean_reads):
    with pytest.raises(LexError, match=re.escape(lean_reads)):
        lex(text, MATHLIB)


def test_a_token_longer_than_the_identifier_at_its_start_wins():
    """`isToken`: a token at least as long as the identifier wins; `℘'[` (Mathlib v4.27.0) is
    longer than the identifier `℘'`, so Lean reads the token, `[` included."""
    newer = lexer.mathlib_table("v4.27.0")
    assert kinds("℘'[x] s", newer)[:3] == [("symbol", "℘"), ("symbol", "'"), ("symbol", "[")]
    assert kinds("℘'[x] s", MATHLIB)[0] == ("ident", "℘'")   # not a token at v4.15.0


def test_identifiers_keep_their_primes():
    assert kinds("h' x'' h'.trans cases' π' x₁'", CORE_ONLY) == [
        ("ident", "h'"), ("ident", "x''"), ("ident", "h'.trans"), ("ident", "cases'"), ("ident", "π'"),
        ("ident", "x₁'")]


@pytest.mark.parametrize("table", [MATHLIB, CORE_ONLY])
def test_real_char_literals_after_a_token_start(table):
    assert kinds("#eval 'a' '\\n' '\\'' '\"' x", table) == [
        ("hash", "#eval"), ("char", "'a'"), ("char", "'\\n'"), ("char", "'\\''"), ("char", "'\"'"), ("ident", "x")]


def test_strings_after_recorded_tokens():
    assert kinds('f ⁻¹\' s = "ab" ∧ ∑\' n, g "c"')[-1] == ("string", '"c"')
    assert ("string", '"ab"') in kinds('f ⁻¹\' s = "ab"')


@pytest.mark.parametrize("text", ["('a')", "[\"a\"]", "⟨'a', h⟩", "x='a'"])
def test_a_literal_directly_after_a_symbol_is_refused(text):
    """Whether Lean starts a literal there depends on every token that could end there; a quote
    after whitespace, a comment or another literal always starts one."""
    with pytest.raises(LexError):
        lex(text, MATHLIB)
    assert kinds(text.replace("(", "( ").replace("[", "[ ").replace("⟨", "⟨ ").replace("=", "= "))


# -- fail closed without a table ------------------------------------------------------------------

@pytest.mark.parametrize("text", ["f ⁻¹' s", "f '' s", "∑' n, f n", "x ⊗' y"])
def test_without_a_table_for_the_configured_mathlib_every_such_quote_is_refused(text):
    with pytest.raises(LexError, match="none recorded for Mathlib v9.99.0"):
        lex(text, CORE_ONLY)
    assert lex("Σ' x, p x", CORE_ONLY)   # Lean core's own token is known in every table


def test_the_configured_mathlib_is_read_from_the_projects_lake_manifest(tmp_path):
    from prover_cli.config import VerifyConfig

    config = VerifyConfig()
    config.project_dir = str(tmp_path)
    assert lexer.table_for_config(config).tokens == MATHLIB.tokens   # no manifest: verify.mathlib_rev
    manifest = {"packages": [{"name": "mathlib", "rev": "0123456789abcdef0123456789abcdef01234567"}]}
    (tmp_path / "lake-manifest.json").write_text(json.dumps(manifest))
    table = lexer.table_for_config(config)
    assert "none recorded for Mathlib 0123456789ab" in table.name
    with pytest.raises(LexError):
        lex("f ⁻¹' s", table)
    manifest["packages"][0]["rev"] = MATHLIB_COMMIT
    (tmp_path / "lake-manifest.json").write_text(json.dumps(manifest))
    assert lexer.table_for_config(config).tokens == MATHLIB.tokens


@pytest.fixture
def restore_active_table():
    saved = list(lexer._ACTIVE)
    yield
    lexer._ACTIVE[:] = saved


def test_the_verifier_reads_records_by_its_configs_table(verify_config, restore_active_table):
    from prover_cli.verify import verify_records

    record = {"id": "a", "formal_statement": "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := by",
              "proof": "  have : f ⁻¹' s = f ⁻¹' s := rfl\n  linarith"}
    [rejected] = verify_records([record], verify_config(workers=1, mathlib_rev="v9.99.0"))
    assert rejected["verdict"] == "rejected" and "none recorded for Mathlib v9.99.0" in rejected["reason"]
    [read] = verify_records([record], verify_config(workers=1))
    assert "token table" not in read["reason"] and "none recorded" not in read["reason"]


def test_the_parity_attack_is_a_named_rejection_before_any_repl(verify_config, tmp_path, restore_active_table):
    """Issue #32 item 5: `⁻¹'` then `"'"`: Lean reads a token and a string, after which `run_tac`
    is code; the old lexer read a char literal and a string, so `run_tac` sat in a "string"."""
    from prover_cli.verify import verify_records

    log = tmp_path / "repl.log"
    record = {"id": "a", "formal_statement": "theorem amc_p1 (x : ℝ) (h₀ : 2 * x = 4) : x = 2 := by",
              "proof": "  have h : f ⁻¹'\"'\" = 1 := rfl\n  run_tac pure ()\n  \"\n  linarith"}
    [verdict] = verify_records([record], verify_config(workers=1, repl_args=["--log", str(log)]))
    assert verdict["verdict"] == "rejected" and "char literal" in verdict["reason"]
    entries = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert not [e for e in entries if e.get("kind") == "cmd"]   # no REPL ran the text


# -- recycling, judged by the text ----------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("  linarith", False),
    ("  nlinarith [sq_nonneg (x - 2), h₀]", False),
    ("  have : 'a' = 'a' := rfl\n  linarith", True),       # a literal: not read as code
    ("  simp [show \"run_tac\" = \"run_tac\" from rfl]", True),
    ("  exact f ⁻¹' s", True),                              # a quote read by the table
    ("  run_tac pure ()", True),
    ("  exact \"x", True),                                  # does not lex
])
def test_text_may_run_code(text, expected):
    assert lexer.text_may_run_code(text, MATHLIB) is expected


def test_a_fresh_repl_serves_the_record_after_a_text_the_lexer_did_not_read_as_code(verify_config, tmp_path):
    from prover_cli.verify import verify_records
    from test_verify_pool import proof, requests_by_pid

    log = tmp_path / "repl.log"
    records = [proof("plain1"), proof("literal", "  have : 'a' = 'a' := rfl\n  linarith"), proof("plain2"),
               proof("plain3")]
    verdicts = verify_records(records, verify_config(workers=1, repl_args=["--log", str(log)]))
    assert len(verdicts) == 4
    cmds = [[e["cmd"] for e in entries if e["kind"] == "cmd"] for entries in requests_by_pid(log).values()]
    # the literal's process served nothing after it; the plain proofs before it shared one
    assert [len(c) for c in cmds] == [2, 2]
    assert "'a'" in cmds[0][-1] and all("'a'" not in cmd for cmd in cmds[1])


def test_plain_proofs_share_one_process(verify_config, tmp_path):
    from prover_cli.verify import verify_records
    from test_verify_pool import proof, requests_by_pid

    log = tmp_path / "repl.log"
    verify_records([proof(f"p{k}") for k in range(3)], verify_config(workers=1, repl_args=["--log", str(log)]))
    assert len(requests_by_pid(log)) == 1


# -- the extraction script ------------------------------------------------------------------------

def _script():
    spec = importlib.util.spec_from_file_location("extract_mathlib_tokens", REPO / "scripts" / "extract_mathlib_tokens.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_extracts_declared_atoms_with_their_line_and_scope(tmp_path):
    source = (
        "/-! doc: notation \"no'\" => x -/\n"
        "-- infixl:80 \" gone' \" => f\n"
        "infixl:80 \" ⁻¹' \" => preimage \"after'\"\n"
        "scoped[Foo] notation3 \"∑' \"(...)\", \"r:67:(scoped f => tsum f) => r \"after'\"\n"
        "local notation \"abs'\" => abs\n"
        "syntax (name := c) \"cases' \" (&\"nonres'\")? term : tactic\n"
        "def msg := \"not an atom'\"\n"
    )
    (tmp_path / "Mathlib").mkdir()
    (tmp_path / "Mathlib" / "A.lean").write_text(source, encoding="utf-8")
    (tmp_path / "MathlibTest").mkdir()
    (tmp_path / "MathlibTest" / "T.lean").write_text("notation \"test'\" => 1\n", encoding="utf-8")
    script = _script()
    assert script.atoms(source) == [("⁻¹'", 3, "global"), (",", 4, "scoped"), ("∑'", 4, "scoped"),
                                    ("abs'", 5, "local"), ("cases'", 6, "global")]
    assert script.main(["--source", f"mathlib={tmp_path}", "--revs", "vX", "--out", str(tmp_path / "out")]) == 0
    [written] = (tmp_path / "out").glob("mathlib-*.json")
    table = json.loads(written.read_text(encoding="utf-8"))
    assert table["mathlib_revs"] == ["vX"]
    assert [(t["token"], t["file"], t["line"]) for t in table["tokens"]] == [
        ("abs'", "Mathlib/A.lean", 5), ("cases'", "Mathlib/A.lean", 6), ("⁻¹'", "Mathlib/A.lean", 3),
        ("∑'", "Mathlib/A.lean", 4)]


@pytest.mark.parametrize("damage, key", [
    ([], "not a JSON object"),
    ({"tokens": {}}, "`tokens` must be a list"),
    ({"tokens": [{"tok": "x'"}]}, "`tokens[0].token` must be a string"),
    ({"tokens": ["x'"]}, "`tokens[0].token` must be a string"),
    ({"tokens": [{"token": 3}]}, "`tokens[0].token` must be a string"),
    ({"tokens": [{"token": "x'"}]}, "`tokens[0].scope` must be a string"),         # a Mathlib table only
    ({"mathlib_commit": 3, "tokens": []}, "`mathlib_commit` must be a string"),
    ({"mathlib_revs": "v4.15.0", "tokens": []}, "`mathlib_revs` must be a list of strings"),
])
def test_a_damaged_table_names_the_file_and_the_key(tmp_path, monkeypatch, damage, key):
    """#39: every shape fault is a BackendError naming the file (never an unexpected KeyError)."""
    import json
    import shutil

    from prover_cli.errors import BackendError
    from prover_cli.verify.text import lexer

    tokens = tmp_path / "tokens"
    shutil.copytree(lexer.TOKENS_DIR, tokens)
    mathlib = sorted(tokens.glob("mathlib-*.json"))[0]
    target = tokens / "lean-core.json" if "scope" not in key and "mathlib" not in key else mathlib
    if "scope" in key or "mathlib" in key:
        good = json.loads(mathlib.read_text())
        damage = {**{k: v for k, v in good.items() if k != "tokens"}, **damage} if isinstance(damage, dict) else damage
    target.write_text(json.dumps(damage))
    monkeypatch.setattr(lexer, "TOKENS_DIR", tokens)
    with pytest.raises(BackendError) as raised:
        lexer.mathlib_table("v4.15.0")
    assert str(raised.value).startswith(f"{target}: damaged token table") and key in str(raised.value)
