"""From an input record to the code Lean checks: what is trusted, what is not, and how they meet.

A record carries a trusted `formal_statement` (`theorem NAME … := by`), an optional trusted `header`
and one untrusted part:

- `proof`: the tactic block. We build `statement + proof` ourselves, so the target theorem exists
  under its own name and states the trusted statement by construction.
- `completion`: raw model output. The last ```` ```lean4 ```` / ```` ```lean ```` block is the
  candidate file. Its own header lines (`import`, `open`, `set_option` at the top) are dropped for
  the trusted header; its imports must be among the trusted header's. The target theorem must
  appear once, as `theorem NAME` (or `lemma NAME`) followed by exactly the trusted statement
  (token by token, whitespace presence compared, amount ignored), and the file we send contains
  the *trusted* statement text there, followed by the candidate's proof. Only helper
  `theorem`/`lemma` declarations may precede it (nothing that can change what the statement means:
  no `def`, `open`, `namespace`, `variable`, `set_option`, …), their names must not occur in the
  statement, and no other declaration anywhere may be named like the target.

Everything untrusted goes through the denylist first (`denylist.py`), and what is sent to Lean is
the comment-blanked text the denylist saw (`lexer.py` explains why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prover_cli.verify.denylist import scan_tokens
from prover_cli.verify.lexer import LexError, Lexed, Token, lex, line_col


class Rejected(Exception):
    """The untrusted text fails a check before Lean runs: the verdict is `rejected`."""


class BadRecord(Exception):
    """The record itself is unusable (missing or ill-typed fields): the verdict is `error`."""


@dataclass(frozen=True)
class Candidate:
    """What the engine sends: `body` runs in the environment of `header`; `target` is printed."""

    id: str
    header: str
    body: str
    target: str


DECL_KEYWORDS = frozenset({
    "theorem", "lemma", "def", "abbrev", "instance", "axiom", "opaque", "structure", "class",
    "inductive", "coinductive", "example", "alias", "irreducible_def", "abbreviation",
})

# Tokens that may not appear before the target theorem in a completion: each can change how the
# trusted statement elaborates (names, scopes, options, variables) or is a command we do not need.
BEFORE_TARGET_FORBIDDEN = frozenset({
    "namespace", "section", "end", "open", "export", "variable", "variables", "include", "omit",
    "universe", "universes", "def", "abbrev", "structure", "class", "inductive", "coinductive",
    "opaque", "example", "attribute", "mutual", "local", "scoped", "set_option", "noncomputable",
    "alias", "irreducible_def", "abbreviation", "deriving", "initialize", "instance", "axiom",
})

TARGET_MODIFIERS = frozenset({"private", "protected", "noncomputable", "partial", "nonrec", "unsafe"})

HEADER_LINE = re.compile(r"(import|open|set_option)\b")


# --------------------------------------------------------------------------------------------
# Reading a record
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fields:
    """The fields of a well-formed record."""

    id: str
    statement: str
    header: str
    kind: str        # "proof" or "completion"
    untrusted: str
    trusted: Lexed   # the statement, lexed
    target: str      # NAME in `theorem NAME`


def check_fields(record: dict[str, Any], default_header: str) -> Fields:
    """The record's fields, or BadRecord naming the field that is missing or ill-typed."""
    record_id = record.get("id")
    if not isinstance(record_id, str) or not record_id:
        raise BadRecord("field `id` must be a non-empty string")
    statement = record.get("formal_statement")
    if not isinstance(statement, str) or not statement.strip():
        raise BadRecord("missing field `formal_statement` (the trusted statement, `theorem NAME … := by`)")
    header = record.get("header")
    if header is None or header == "":
        header = default_header
    if not isinstance(header, str):
        raise BadRecord("field `header` must be a string")
    has_proof, has_completion = "proof" in record, "completion" in record
    if has_proof == has_completion:
        raise BadRecord("exactly one of `proof` (a tactic block) and `completion` (model output) is required")
    kind = "proof" if has_proof else "completion"
    if not isinstance(record[kind], str):
        raise BadRecord(f"field `{kind}` must be a string")
    trusted = _lex_trusted(statement)
    return Fields(record_id, statement, header, kind, record[kind], trusted, target_name(trusted))


def candidate_from_record(record: dict[str, Any], default_header: str, *,
                          allow_native_decide: bool = False) -> Candidate:
    """Check the untrusted part of `record` and assemble the code; raises Rejected or BadRecord."""
    f = check_fields(record, default_header)
    if f.kind == "proof":
        body = assemble_proof(f.statement, f.untrusted, allow_native_decide=allow_native_decide)
    else:
        body = assemble_completion(f.statement, f.trusted, f.target, f.header, f.untrusted,
                                   allow_native_decide=allow_native_decide)
    return Candidate(id=f.id, header=f.header, body=body, target=f.target)


def _lex_trusted(statement: str) -> Lexed:
    try:
        return lex(statement)
    except LexError as exc:
        raise BadRecord(f"cannot read `formal_statement`: {exc}") from None


def target_name(trusted: Lexed) -> str:
    """NAME in `theorem NAME … :=`: the declaration whose axioms are printed.

    The statement must end with `:=` or `:= by`: otherwise the untrusted text that follows it
    could continue the *type* (`… : x = 2` + ` ∨ True := by simp`).
    """
    tokens = trusted.code_tokens()
    if len(tokens) < 2 or tokens[0].text not in ("theorem", "lemma") or tokens[1].kind != "ident":
        raise BadRecord("`formal_statement` must start with `theorem NAME` (or `lemma NAME`)")
    tail = tokens[-3:] if tokens[-1].text == "by" else tokens[-2:] + [None]
    colon, equals = tail[0], tail[1]
    if not (colon is not None and colon.text == ":" and equals.text == "=" and colon.end == equals.start):
        raise BadRecord("`formal_statement` must end with `:= by` (or `:=`), so that the proof "
                        "cannot extend the statement")
    return tokens[1].text


# --------------------------------------------------------------------------------------------
# `proof` input: statement + proof, built here
# --------------------------------------------------------------------------------------------

def assemble_proof(statement: str, proof: str, *, allow_native_decide: bool = False) -> str:
    lexed = _lex_untrusted(proof, "proof")
    _deny(lexed, allow_native_decide, "proof")
    separator = "" if statement.endswith(("\n", " ")) else "\n"
    return statement + separator + lexed.code


def _lex_untrusted(text: str, what: str) -> Lexed:
    try:
        return lex(text)
    except LexError as exc:
        line, column = line_col(text, exc.offset)
        raise Rejected(f"cannot read the {what} at line {line}, column {column}: {exc}") from None


def _deny(lexed: Lexed, allow_native_decide: bool, what: str, tokens: list[Token] | None = None) -> None:
    hits = scan_tokens(lexed.tokens if tokens is None else tokens, lexed.text,
                       allow_native_decide=allow_native_decide)
    if hits:
        raise Rejected(hits[0].describe(f" of the {what}"))


# --------------------------------------------------------------------------------------------
# `completion` input: find the candidate file, check it, rebuild it around the trusted statement
# --------------------------------------------------------------------------------------------

def last_lean_block(completion: str) -> str:
    # One extraction rule for the whole product (prompts.py): the last complete ```lean4/```lean
    # block outside <think>, so what generate/eval call "the answer" is what gets verified.
    from prover_cli.prompts import extract_lean_block

    block = extract_lean_block(completion)
    if block is None:
        raise Rejected("no complete ```lean4 code block after the thinking section of the completion")
    return block


def assemble_completion(statement: str, trusted: Lexed, target: str, header: str, completion: str,
                        *, allow_native_decide: bool = False) -> str:
    block = last_lean_block(completion)
    lexed = _lex_untrusted(block, "completion's lean block")
    body_start, imports = _split_header(lexed.code)
    allowed_imports = header_imports(header)
    extra = [m for m in imports if m not in allowed_imports]
    if extra:
        raise Rejected(f"the completion imports {', '.join(extra)}, which the trusted header does not "
                       f"(allowed: {', '.join(sorted(allowed_imports)) or 'none'})")
    # Import lines of the block's own header are the only place `import` may appear; everything
    # else, the dropped `open`/`set_option` lines included, goes through the denylist.
    import_spans = _import_line_spans(lexed.code[:body_start])
    scanned = [t for t in lexed.tokens if not any(a <= t.start < b for a, b in import_spans)]
    _deny(lexed, allow_native_decide, "completion's lean block", scanned)

    body_tokens = [t for t in lexed.code_tokens() if t.start >= body_start]
    declared = _declarations(body_tokens)
    named_like_target = [(kw, tok) for kw, tok in declared if _last_part(tok) == target]
    if not named_like_target:
        raise Rejected(f"the completion does not declare the target theorem `{target}`")
    if len(named_like_target) > 1:
        where = ", ".join(f"`{kw.text} {tok.text}` (line {line_col(block, kw.start)[0]})"
                          for kw, tok in named_like_target)
        raise Rejected(f"the target name `{target}` is declared {len(named_like_target)} times: {where}")
    keyword, name = named_like_target[0]
    if keyword.text not in ("theorem", "lemma") or name.text != target:
        raise Rejected(f"the target must be declared as `theorem {target}`, found `{keyword.text} {name.text}`")
    before = [t for t in body_tokens if t.start < keyword.start]
    if lexed.code[:keyword.start].rstrip(" \t")[-1:] not in ("", "\n") or \
            (before and before[-1].text in TARGET_MODIFIERS):
        raise Rejected(f"`theorem {target}` must start its own line, without modifiers before it")

    _check_before_target(before, block, statement_tokens=trusted.code_tokens())
    proof_start = _match_statement(trusted, lexed, keyword)
    return (lexed.code[body_start:keyword.start] + statement.rstrip()
            + lexed.code[proof_start:])


def header_imports(header: str) -> set[str]:
    try:
        code = lex(header).code
    except LexError as exc:
        raise BadRecord(f"cannot read the header: {exc}") from None
    return set(_split_header(code)[1])


def _split_header(code: str) -> tuple[int, list[str]]:
    """Offset where the body starts (after the leading import/open/set_option lines) and the
    modules imported there. Indented lines after a header line continue it (`open A\\n  B`)."""
    offset, imports, in_header_line = 0, [], False
    for line in code.splitlines(keepends=True):
        stripped = line.strip()
        if not stripped:
            in_header_line = False
        elif HEADER_LINE.match(line):
            in_header_line = True
            if line.startswith("import"):
                imports += stripped.split()[1:]
        elif in_header_line and line[:1] in (" ", "\t"):
            pass
        else:
            break
        offset += len(line)
    return offset, imports


def _import_line_spans(header_code: str) -> list[tuple[int, int]]:
    spans, offset = [], 0
    for line in header_code.splitlines(keepends=True):
        if line.startswith("import"):
            spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def _declarations(tokens: list[Token]) -> list[tuple[Token, Token]]:
    """(keyword, name) for every `theorem NAME`, `def NAME`, … in a token list."""
    found = []
    for k, token in enumerate(tokens[:-1]):
        if token.kind == "ident" and token.text in DECL_KEYWORDS and tokens[k + 1].kind == "ident":
            found.append((token, tokens[k + 1]))
    return found


def _last_part(token: Token) -> str:
    return token.components[-1] if token.components else token.text


def _check_before_target(before: list[Token], block: str, statement_tokens: list[Token]) -> None:
    for token in before:
        if (token.kind == "ident" and token.text in BEFORE_TARGET_FORBIDDEN) or token.kind == "hash":
            line = line_col(block, token.start)[0]
            raise Rejected(f"`{token.text}` at line {line} precedes the target theorem: only helper "
                           "`theorem`/`lemma` declarations may come before it")
    statement_words = {part for t in statement_tokens if t.kind == "ident" for part in t.components}
    for keyword, name in _declarations(before):
        if _last_part(name) in statement_words:
            raise Rejected(f"helper `{keyword.text} {name.text}` reuses a name that occurs in the "
                           "trusted statement")


def _match_statement(trusted: Lexed, lexed: Lexed, keyword: Token) -> int:
    """Offset just after the candidate's copy of the trusted statement; Rejected if it differs."""
    want = trusted.tokens
    have = [t for t in lexed.tokens if t.start >= keyword.start][:len(want)]
    mismatch = None
    if want[0].text in ("theorem", "lemma") and have and have[0].text in ("theorem", "lemma"):
        pairs = list(zip(want[1:], have[1:]))
        offset = 1
    else:
        pairs, offset = list(zip(want, have)), 0
    if len(have) < len(want):
        mismatch = "the candidate statement is shorter than the trusted one"
    for k, (w, h) in enumerate(pairs, start=offset):
        if w.text != h.text:
            mismatch = f"`{h.text}` where the trusted statement has `{w.text}`"
            break
        if k > 0 and _space_before(trusted.code, w) != _space_before(lexed.code, h):
            mismatch = f"spacing differs before `{w.text}`"
            break
    if mismatch is None:
        return have[-1].end
    line = line_col(lexed.text, keyword.start)[0]
    raise Rejected(f"the statement of `theorem` at line {line} is not the trusted statement: {mismatch}")


def _space_before(text: str, token: Token) -> bool:
    return token.start > 0 and text[token.start - 1] in " \t\r\n"
