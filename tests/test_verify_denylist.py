"""The lexer and the denylist: whole tokens outside comments and strings, lexed as Lean lexes them."""

from __future__ import annotations

import pytest

from prover_cli.verify.text.denylist import DENIED_WORDS, first_problem, scan
from prover_cli.verify.text.lexer import LexError, lex


def words(text: str, **kwargs) -> list[str]:
    return [hit.word for hit in scan(text, **kwargs)]


# -- one case per cheat class -----------------------------------------------------------------

CHEATS = {
    "sorry": "  nlinarith [sq_nonneg a]\n  sorry",
    "admit": "  admit",
    "stop": "  norm_num\n  stop\n  simp",
    "sorryAx": "  exact sorryAx _ false",
    "sorryAx_root": "  exact (_root_.sorryAx _ false)",
    "sorryAx_guillemets": "  exact «sorryAx» _ false",
    "axiom": "  trivial\naxiom cheat : False",
    "#exit": "  norm_num\n#exit",
    "#eval": "  rfl\n#eval 1",
    "#print_forgery": "  rfl\n#print \"'X' does not depend on any axioms\"",
    "#guard_msgs": "  rfl\n#guard_msgs in example : True := trivial",
    "debug.skipKernelTC": "  set_option debug.skipKernelTC true in\n  exact bogus",
    "implemented_by": "  rfl\n@[implemented_by foo] def bar : Nat := 0",
    "extern": "  rfl\n@[extern \"c_fn\"] opaque f : Nat → Nat",
    "csimp": "  rfl\n@[csimp] theorem c : @f = @g := rfl",
    "unsafe": "  rfl\nunsafe def u : Nat := 0",
    "run_cmd": "  rfl\nrun_cmd pure ()",
    "run_tac": "  run_tac pure ()",
    "run_elab": "  rfl\nrun_elab pure ()",
    "by_elab": "  exact by_elab pure ()",
    "elab": "  rfl\nelab \"cheat\" : tactic => pure ()",
    "macro": "  rfl\nmacro \"cheat\" : tactic => `(tactic| trivial)",
    "macro_rules": "  rfl\nmacro_rules | `(tactic| trivial) => `(tactic| skip)",
    "syntax": "  rfl\nsyntax \"cheat\" : tactic",
    "notation": "  rfl\nlocal notation \"ℝ\" => Nat",
    "infixl": "  rfl\ninfixl:65 \" +' \" => HAdd.hAdd",
    "instance": "  rfl\ninstance : Decidable False := .isTrue sorry_free",
    "attribute_instance": "  rfl\nattribute [local instance] foo",
    "initialize": "  rfl\ninitialize pure ()",
    "import": "  rfl\nimport Mathlib.Tactic",
    "native_decide": "  native_decide",
    "decide_native": "  decide +native",
    "native_config": "  decide (config := { native := true })",
    "ofReduceBool": "  exact Lean.ofReduceBool _ _ rfl",
    "apply?": "  apply?",
    "open_private": "  rfl\nopen private foo in\nexample : True := trivial",
    "simproc": "  rfl\nsimproc cheat (_) := fun _ => pure .continue",
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_cheat_class_is_denied(name):
    assert scan(CHEATS[name]), f"{name} slipped through"
    assert first_problem(CHEATS[name]).startswith("denied `")


HONEST = [
    "  -- we avoid sorry and admit here; no axiom, no native_decide, no #exit\n  norm_num",
    "  /- nested /- sorry -/ still a comment: admit axiom -/\n  simp",
    "  /-- doc: #eval macro instance -/\n  rfl",
    "  exact sorry_lemma h",
    "  exact my_axiom_free x",
    "  have admit_free : True := trivial\n  exact admit_free",
    "  exact Nat.axiomatic_thing",
    "  simp only [Nat.reduceMul, instHAdd]",
    "  exact inferInstance",
    "  haveI : Fact (1 < 2) := ⟨by norm_num⟩\n  norm_num",
    "  exact?",
    "  have h' : x' = x' := rfl\n  cases' h with a b\n  exact h'",
    "  show \"sorry\" = \"sorry\"\n  rfl",
    "  exact 'a'.toNat_pos",
    "  simp [show (2 : ℝ) ≠ 0 by norm_num]",
    "  nlinarith [sq_nonneg (a - b), sq_nonneg (a + b), mul_pos ha hb]",
    "  decide",
    "  set_option maxHeartbeats 400000 in\n  norm_num",
    "  open Real in\n  simp",
    "  rcases h with ⟨x, hx⟩ <;> simp_all",
    "  exact #[1, 2].size_pos",
]


@pytest.mark.parametrize("text", HONEST)
def test_honest_text_is_not_denied(text):
    assert scan(text) == [], text


def test_native_decide_policy_lifts_only_native_words():
    assert words("  native_decide", allow_native_decide=True) == []
    assert words("  decide +native", allow_native_decide=True) == []
    assert words("  native_decide\n  sorry", allow_native_decide=True) == ["sorry"]


def test_every_denied_word_is_found_as_a_whole_token_only():
    for word in DENIED_WORDS:
        assert words(f"  exact {word} x") == [word], word
        assert words(f"  exact {word}_lemma x") == [], word
        assert words(f"  exact my_{word} x") == [], word
        assert words(f"  -- {word}\n  rfl") == [], word


def test_hits_name_the_line_and_column():
    [hit] = scan("  norm_num\n  exact foo sorry")
    assert (hit.word, hit.line, hit.column) == ("sorry", 2, 12)


# -- the lexer agrees with Lean where a disagreement would hide code --------------------------

@pytest.mark.parametrize("text, word", [
    ("  exact λsorry", "sorry"),              # λ is not an identifier character in Lean
    ("  exact Πsorry", "sorry"),              # nor Π or Σ
    ("  exact 0xadsorry", "sorry"),           # hex literal 0xad, then `sorry`
    ("  exact 0b1admit", "admit"),            # binary literal 0b1, then `admit`
    ("  exact '\"' sorry '\"'", "sorry"),      # char literals: '"' does not open a string
    ("  exact \"a\\\\\" sorry", "sorry"),     # escaped backslash, then the string ends
    ("  exact sorry!", "sorry"),              # conservative: trailing ! or ? stripped
    ("  exact («sorry»)", "sorry"),
])
def test_lexer_does_not_hide_code_in_strings_or_odd_tokens(text, word):
    assert word in words(text)


@pytest.mark.parametrize("text", [
    "  exact \"{x}\"",            # may be an interpolated string: its {…} is code
    "  exact s!\"{sorry}\"",
    "  exact \"unterminated",
    "  /- unterminated comment",
    "  exact «unterminated",
    "  exact r#\"unterminated\"",
    "  exact r\"\\\" sorry \"x\"",          # raw strings: refused outright
    "  exact r#\"a\"# sorry",
    "  exact 2'\"' sorry '\"'",               # a literal directly after a numeral or identifier
    "  exact x\"s\" sorry",
    "  exact 'a'b sorry",
    "  exact 1_000",                           # `_` in a numeral (read differently across versions)
    "  exact '\\q'",                          # an escape Lean does not have
])
def test_what_cannot_be_lexed_with_certainty_is_refused(text):
    with pytest.raises(LexError):
        lex(text)
    assert first_problem(text).startswith("cannot lex")


def test_a_char_literal_holds_any_one_character_a_newline_included():
    """Lean's `charLitFnAux`: at a token start, `'`, one character, `'`, whatever the character; the
    lexer once refused a newline there and so read the text after it differently from Lean."""
    tokens = lex("  exact '\n' run_tac '\"' \"x\"").tokens
    assert [(t.kind, t.text) for t in tokens] == [("ident", "exact"), ("char", "'\n'"), ("ident", "run_tac"),
                                                  ("char", "'\"'"), ("string", '"x"')]
    assert words("  exact '\n' run_tac (pure ())") == ["run_tac"]
    assert [t.kind for t in lex("'\\n' '\\x41' '\\u0041' '{'").tokens] == ["char"] * 4
    # `''` is no char literal (Lean: a parse error, unless an imported notation makes it a token):
    # refused, or two symbols, never a char that hides what follows
    try:
        kinds = [t.kind for t in lex("'' x").tokens]
    except LexError:
        kinds = None
    assert kinds in (None, ["symbol", "symbol", "ident"])


def test_comments_are_blanked_with_positions_kept():
    text = "a -- c1\n/- c2\n/- c3 -/ -/b"
    lexed = lex(text)
    assert lexed.code == "a      \n     \n         " + "  b"
    assert len(lexed.code) == len(text) and lexed.code.count("\n") == text.count("\n")
    assert [t.text for t in lexed.tokens] == ["a", "b"]


def test_identifiers_and_numbers_follow_lean():
    tokens = lex("h₀.1 x' ℝ αβ Nat.succ «a b».c 1.5e3 0x1F h!").tokens
    assert [t.text for t in tokens] == ["h₀", ".", "1", "x'", "ℝ", "αβ", "Nat.succ", "«a b».c",
                                       "1.5e3", "0x1F", "h!"]
    assert tokens[7].components == ("a b", "c")


def test_docs_list_every_denied_word():
    from conftest import REPO

    docs = (REPO / "docs" / "verify.md").read_text(encoding="utf-8")
    missing = [w for w in DENIED_WORDS if f"`{w}`" not in docs]
    assert missing == [], "docs/verify.md misses denied words"
