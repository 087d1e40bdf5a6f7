"""The denylist: cheats recognised in the text, before anything is sent to Lean.

Lean reports no error for many ways of not proving a theorem (`admit`, a declared `axiom`, `#exit`,
`set_option debug.skipKernelTC`, native code, notation or instance tricks), so the text is checked
first and denied code never runs. The scan works on tokens from `lexer.lex`, which has already
removed comments and string/char literals, and matches whole identifiers (each dotted part, `«»`
removed): `sorry` is a hit, `sorry_lemma`, `my_axiom_free` and a comment "we avoid sorry" are not.

Every entry says why it is denied; `docs/verify.md` lists the same table.
"""

from __future__ import annotations

from dataclasses import dataclass

from prover_cli.verify.text.lexer import LexError, Token, lex, line_col

# A word is denied wherever it appears as a whole identifier or as one part of a dotted name
# (`_root_.sorryAx`, `Lean.ofReduceBool`, `«sorryAx»`).
DENIED_WORDS: dict[str, str] = {
    "sorry": "closes any goal without a proof",
    "admit": "synonym of sorry",
    "stop": "`stop` discards the rest of the proof and closes the goal with sorry",
    "sorryAx": "the axiom behind sorry",
    "axiom": "declares an unproved assumption",
    "implemented_by": "replaces compiled code, trusted by native evaluation",
    "extern": "replaces compiled code with foreign code",
    "csimp": "replaces compiled code, trusted by native evaluation",
    "unsafe": "unsafe code escapes the kernel's checks",
    "run_cmd": "runs arbitrary metaprograms",
    "run_tac": "runs arbitrary metaprograms",
    "run_elab": "runs arbitrary metaprograms",
    "run_meta": "runs arbitrary metaprograms",
    "by_elab": "runs arbitrary metaprograms",
    "elab": "defines new elaborators (arbitrary metaprograms)",
    "elab_rules": "defines new elaborators (arbitrary metaprograms)",
    "macro": "defines new syntax that can hide any of the above",
    "macro_rules": "defines new syntax that can hide any of the above",
    "syntax": "defines new syntax that can hide any of the above",
    "declare_syntax_cat": "defines new syntax",
    "binder_predicate": "defines new syntax",
    "notation": "notation can change what a statement means",
    "notation3": "notation can change what a statement means",
    "infix": "notation can change what a statement means",
    "infixl": "notation can change what a statement means",
    "infixr": "notation can change what a statement means",
    "prefix": "notation can change what a statement means",
    "postfix": "notation can change what a statement means",
    "instance": "a new instance can change what a statement means (e.g. a bogus Decidable)",
    "initialize": "runs code when the environment loads",
    "builtin_initialize": "runs code when the environment loads",
    "simproc": "a simproc is a metaprogram run by simp",
    "dsimproc": "a simproc is a metaprogram run by simp",
    "simproc_decl": "a simproc is a metaprogram run by simp",
    "dsimproc_decl": "a simproc is a metaprogram run by simp",
    "import": "imports belong to the trusted header, not to a proof",
    "native_decide": "trusts the compiler instead of the kernel (policy: verify.allow_native_decide)",
    "native": "`decide +native` / `native := true` trust the compiler (policy: verify.allow_native_decide)",
    "ofReduceBool": "the axiom behind native evaluation",
    "ofReduceNat": "the axiom behind native evaluation",
    "reduceBool": "native evaluation inside a proof term",
    "reduceNat": "native evaluation inside a proof term",
    "apply?": "`apply?` closes the goal with sorry when it finds only a partial proof",
    "plausible": "`plausible` closes the goal (with sorry) when it finds no counterexample",
    "slim_check": "`slim_check` closes the goal (with sorry) when it finds no counterexample",
}

# Words that `verify.allow_native_decide = true` lifts (the axiom check then also accepts
# `Lean.ofReduceBool`).
NATIVE_WORDS = frozenset({"native_decide", "native", "ofReduceBool", "reduceBool"})

HASH_REASON = ("`#` commands are denied in proofs: `#exit` stops checking, `#eval` runs code, "
               "`#print` and `#guard_msgs` can forge or swallow messages")


@dataclass(frozen=True)
class Hit:
    word: str       # what was found, e.g. "sorry", "#exit", "set_option debug.skipKernelTC"
    why: str
    line: int       # 1-based, in the scanned text
    column: int     # 0-based

    def describe(self, where: str = "") -> str:
        place = f" at line {self.line}, column {self.column}{where}"
        return f"denied `{self.word}`{place}: {self.why}"


def scan(text: str, *, allow_native_decide: bool = False) -> list[Hit]:
    """Every denied construct in `text` (comments and strings excluded). LexError propagates."""
    return scan_tokens(lex(text).tokens, text, allow_native_decide=allow_native_decide)


def scan_tokens(tokens: list[Token], text: str, *, allow_native_decide: bool = False) -> list[Hit]:
    code = [t for t in tokens if t.kind not in ("string", "char")]
    hits: list[Hit] = []

    def hit(word: str, why: str, token: Token) -> None:
        line, column = line_col(text, token.start)
        hits.append(Hit(word, why, line, column))

    for k, token in enumerate(code):
        if token.kind == "hash":
            hit(token.text, HASH_REASON, token)
            continue
        if token.kind != "ident":
            continue
        for part in token.components:
            # `sorry!`, `admit?`: Lean would read a different identifier, but nothing honest looks
            # like that, so the part without its trailing `!`/`?` is checked too.
            for word in (part, part.rstrip("!?")):
                if word in DENIED_WORDS and not (allow_native_decide and word in NATIVE_WORDS):
                    hit(word, DENIED_WORDS[word], token)
                    break
            else:
                continue
            break
        following = code[k + 1] if k + 1 < len(code) else None
        if token.text == "set_option" and following is not None and following.kind == "ident" \
                and following.components[0] == "debug":
            hit(f"set_option {following.text}", "`debug.*` options switch off checks "
                "(`debug.skipKernelTC` skips the kernel)", token)
        if token.text == "open" and following is not None and following.text == "private":
            hit("open private", "exposes private declarations of other modules", token)
    return hits


def first_problem(text: str, *, allow_native_decide: bool = False) -> str | None:
    """A one-line reason to reject `text`, or None when the denylist finds nothing."""
    try:
        hits = scan(text, allow_native_decide=allow_native_decide)
    except LexError as exc:
        line, column = line_col(text, exc.offset)
        return f"cannot lex the proof at line {line}, column {column}: {exc}"
    return hits[0].describe() if hits else None
