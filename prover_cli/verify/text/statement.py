"""From an input record to the code Lean checks: what is trusted, what is not, and how they meet.

A record carries a trusted `formal_statement` (`theorem NAME … := by`), an optional trusted `header`
and one untrusted part:

- `proof`: the tactic block. We build `statement + proof` ourselves, so the target theorem exists
  under its own name and states the trusted statement by construction.
- `completion`: raw model output. The last ```` ```lean4 ```` / ```` ```lean ```` block is the
  candidate file. Its own header lines (`import`, `open`, `set_option` at the top) are dropped for
  the trusted header; its imports must be among the trusted header's. A copy of the trusted
  header's preamble after them (chat models restate `abbrev …_solution`, `def`, `variable`, …
  that prepare-data moved into the header) is dropped too, but only an exact one: whole commands
  of the header's non-import part, token by token with comments blanked, one contiguous run
  (`_trusted_copy`); it is not sent again (re-declaring would be a Lean error). What follows must
  start a new command (`theorem`/`lemma`/`set_option … in` at the start of a line), so that
  untrusted text cannot continue the header's last command where a backend sends both as one
  file (Kimina). The target theorem must
  appear once, as `theorem NAME` (or `lemma NAME`) followed by exactly the trusted statement
  (token by token, whitespace presence compared, amount ignored), and the file we send contains
  the *trusted* statement text there, followed by the candidate's proof (a `where` clause after
  it included: Lean reads it as the target's own, allowlist.py). Only helper
  `theorem`/`lemma` declarations may precede it (nothing that can change what the statement means:
  no `def`, `open` (but `open … in` for one helper, or for the target when the trusted header
  opens those namespaces), `namespace`, `variable`, `set_option` (a `… in` one before a helper,
  never one that reaches the target), …), their names must not occur
  in the statement, and no other declaration anywhere may be named like the target. A header
  `open` line of namespaces the trusted header opens is a header line too.

Lean then compares the target with the trusted statement (rules.py, rule 4): `trusted_signature`
gives the statement's binders and type, which rules.trusted_command declares under another name.

Everything untrusted goes through the denylist first (`denylist.py`), and what is sent to Lean is
the comment-blanked text the denylist saw (`lexer.py` explains why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Any, Sequence

from prover_cli.policy.prompts import extract_lean_block
from prover_cli.verify.text.allowlist import (
    ALLOWED_COMMANDS,
    COMMAND_KEYWORDS,
    INERT_COMMANDS,
    RESOURCE_OPTIONS,
    _is_local_open,
    check_characters,
    check_commands,
    code_commands_used,
    open_names,
    opened_namespaces,
)
from prover_cli.verify.text.denylist import scan_tokens
from prover_cli.verify.text.lexer import LexError, Lexed, Token, lex, line_col

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig



class Rejected(Exception):
    """The untrusted text fails a check before Lean runs: the verdict is `rejected`."""


class BadRecord(Exception):
    """The record itself is unusable (missing or ill-typed fields): the verdict is `error`."""


@dataclass(frozen=True)
class Candidate:
    """What the engine sends: `body` runs in the environment of `header`; `target` is printed.
    `statement` is the trusted statement, elaborated on its own for Lean's statement check."""

    id: str
    header: str
    body: str
    target: str
    statement: str = ""
    may_run_code: bool = False   # the text could run code under the policy: recycle the REPL after it


@dataclass(frozen=True)
class TextPolicy:
    """What untrusted text may contain, from `[verify]` (one object, so callers pass one thing)."""

    allow_native_decide: bool = False
    allow_commands: tuple[str, ...] = ()
    max_proof_chars: int = 200_000

    @classmethod
    def from_config(cls, verify_config: VerifyConfig) -> "TextPolicy":
        # Typed access, no fallbacks: an object that lacks a key, or holds a value of another
        # type (`"false"` is truthy), is a bug to raise, not a policy to guess.
        native, commands, limit = (verify_config.allow_native_decide, verify_config.allow_commands,
                                   verify_config.max_proof_chars)
        if not isinstance(native, bool) or not isinstance(commands, (list, tuple)) \
                or not all(isinstance(c, str) for c in commands) \
                or not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise TypeError(f"verify config has ill-typed text-policy keys: allow_native_decide={native!r}, "
                            f"allow_commands={commands!r}, max_proof_chars={limit!r}")
        return cls(native, tuple(commands), limit)


DECL_KEYWORDS = frozenset({
    "theorem", "lemma", "def", "abbrev", "instance", "axiom", "opaque", "structure", "class",
    "inductive", "coinductive", "example", "alias", "irreducible_def", "abbreviation",
})

# Tokens that may not appear before the target theorem in a completion: each can change how the
# trusted statement elaborates (names, scopes, options, variables) or is a command we do not need.
BEFORE_TARGET_FORBIDDEN = frozenset({
    "namespace", "section", "end", "open", "export", "variable", "variables", "include", "omit",
    "universe", "universes", "def", "abbrev", "structure", "class", "inductive", "coinductive",
    "opaque", "example", "attribute", "mutual", "local", "scoped", "noncomputable",
    "alias", "irreducible_def", "abbreviation", "deriving", "initialize", "instance", "axiom",
})

TARGET_MODIFIERS = frozenset({"private", "protected", "noncomputable", "partial", "nonrec", "unsafe"})

HEADER_LINE = re.compile(r"(import|open|set_option)\b")
LOCAL_SET_OPTION = re.compile(r"(set_option|open)\b.*\bin\s*$")   # `… in`: applies to what follows (the body)
SURROGATE = re.compile("[\ud800-\udfff]")


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


def record_fields(record: dict[str, Any], default_header: str) -> Fields:
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
    for name, value in (("formal_statement", statement), ("header", header)):
        if SURROGATE.search(value):
            raise BadRecord(f"field `{name}` contains a lone surrogate (text that is not Unicode)")
    trusted = _lex_trusted(statement)
    return Fields(record_id, statement, header, kind, record[kind], trusted, target_name(trusted))


def check_statement(statement: str, header: str) -> str:
    """NAME if verify accepts this trusted statement and header, else BadRecord (prepare-data's contract)."""
    header_imports(header)  # the header must lex: it is sent to Lean as it is
    return record_fields({"id": "-", "formal_statement": statement, "header": header, "proof": ""}, header).target


def candidate_from_record(record: dict[str, Any], default_header: str, *,
                          allow_native_decide: bool = False, policy: TextPolicy | None = None) -> Candidate:
    """Check the untrusted part of `record` and assemble the code; raises Rejected or BadRecord."""
    policy = policy or TextPolicy(allow_native_decide=allow_native_decide)
    f = record_fields(record, default_header)
    if f.kind == "proof":
        body = assemble_proof(f.statement, f.untrusted, policy=policy, header=f.header)
    else:
        body = assemble_completion(f.statement, f.trusted, f.target, f.header, f.untrusted, policy=policy)
    return Candidate(id=f.id, header=f.header, body=body, target=f.target, statement=f.statement,
                     may_run_code=may_run_code(body, policy))


def may_run_code(body: str, policy: TextPolicy) -> bool:
    """Whether text that passed the checks could still run code of its own in the REPL under this
    policy: compiled code through `native_decide` (when allowed), or a command that
    `verify.allow_commands` admits beyond the inert ones. The pool recycles the process after such
    a record: code can write into the protocol stream and register process-global state."""
    if not policy.allow_native_decide and not set(policy.allow_commands) - INERT_COMMANDS:
        return False   # the default policy: nothing in checked text runs code of its own
    try:
        lexed = lex(body)
    except LexError:
        return True
    if policy.allow_native_decide and any(part in ("native_decide", "native", "ofReduceBool", "reduceBool")
                                          for t in lexed.code_tokens() for part in t.components):
        return True
    return bool(code_commands_used(lexed, policy.allow_commands))


def _lex_trusted(statement: str) -> Lexed:
    try:
        return lex(statement)
    except LexError as exc:
        raise BadRecord(f"cannot read `formal_statement`: {exc}") from None


def trusted_signature(statement: str) -> str:
    """The trusted statement after its name, up to (not including) its final `:=`: the binders,
    universe parameters (`.{u}`) and type, as written. `rules.trusted_command` declares it under
    another name; BadRecord when the statement is not `theorem NAME … :=` (`target_name`)."""
    lexed = _lex_trusted(statement)
    target_name(lexed)
    tokens = lexed.code_tokens()
    colon = tokens[-3] if tokens[-1].text == "by" else tokens[-2]
    return lexed.code[tokens[1].end:colon.start]


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
    if not (colon is not None and equals is not None and colon.text == ":" and equals.text == "="
            and colon.end == equals.start):
        raise BadRecord("`formal_statement` must end with `:= by` (or `:=`), so that the proof "
                        "cannot extend the statement")
    return tokens[1].text


# --------------------------------------------------------------------------------------------
# `proof` input: statement + proof, built here
# --------------------------------------------------------------------------------------------

def assemble_proof(statement: str, proof: str, *, allow_native_decide: bool = False,
                   policy: TextPolicy | None = None, header: str = "") -> str:
    policy = policy or TextPolicy(allow_native_decide=allow_native_decide)
    lexed = _lex_untrusted(proof, "proof", policy)
    _deny(lexed, policy.allow_native_decide, "proof")
    _allow(lexed, policy, "proof", header=header, in_tactic_block=statement.rstrip().endswith("by"),
           declaration_opens=False)
    separator = "" if statement.endswith(("\n", " ")) else "\n"
    return statement + separator + lexed.code


def _allow(lexed: Lexed, policy: TextPolicy, what: str, skip: Sequence[tuple[int, int]] = (), header: str = "",
           in_tactic_block: bool = False, declaration_opens: bool = True) -> None:
    """The allowlist (`allowlist.py`): characters, then commands."""
    problem = check_characters(lexed) or check_commands(
        lexed, allow_commands=policy.allow_commands, skip=skip, in_tactic_block=in_tactic_block,
        declaration_opens=declaration_opens)
    if problem is not None:
        raise Rejected(problem.describe(f" of the {what}"))


def _header_opens(header: str) -> frozenset[str]:
    try:
        return opened_namespaces(lex(header).code)
    except LexError:
        return frozenset()


def _lex_untrusted(text: str, what: str, policy: TextPolicy | None = None) -> Lexed:
    limit = (policy or TextPolicy()).max_proof_chars
    if len(text) > limit:   # before anything that reads it: a huge input costs nothing
        raise Rejected(f"the {what} has {len(text)} characters, more than verify.max_proof_chars = {limit}")
    surrogate = SURROGATE.search(text)
    if surrogate:
        line, column = line_col(text, surrogate.start())
        raise Rejected(f"the {what} contains a lone surrogate (not Unicode text) at line {line}, column {column}")
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
    # One extraction rule for the whole product (policy/prompts.py): the last complete ```lean4/```lean
    # block outside <think>, so what generate/eval call "the answer" is what gets verified.
    block = extract_lean_block(completion)
    if block is None:
        raise Rejected("no complete ```lean4 code block after the thinking section of the completion")
    return block


def assemble_completion(statement: str, trusted: Lexed, target: str, header: str, completion: str,
                        *, allow_native_decide: bool = False, policy: TextPolicy | None = None) -> str:
    policy = policy or TextPolicy(allow_native_decide=allow_native_decide)
    allow_native_decide = policy.allow_native_decide
    if len(completion) > 20 * policy.max_proof_chars:   # the thinking part is not lexed, only searched
        raise Rejected(f"the completion has {len(completion)} characters, more than 20 x "
                       f"verify.max_proof_chars = {20 * policy.max_proof_chars}")
    block = last_lean_block(completion)
    lexed = _lex_untrusted(block, "completion's lean block", policy)
    header_end, imports = _split_header(lexed.code)
    allowed_imports = header_imports(header)
    extra = [m for m in imports if m not in allowed_imports]
    if extra:
        raise Rejected(f"the completion imports {', '.join(extra)}, which the trusted header does not "
                       f"(allowed: {', '.join(sorted(allowed_imports)) or 'none'})")
    # Import lines of the block's own header are the only place `import` may appear; everything
    # else, the dropped `open`/`set_option` lines included, goes through the denylist.
    header_spans = _line_spans(lexed.code[:header_end])
    _check_header_lines(lexed.code, header_spans, header)
    # A verbatim copy of the trusted header's own preamble (`abbrev …_solution`, `def`,
    # `variable`, … that chat models restate) is dropped: it is trusted text, already in the
    # header Lean runs, and is not sent again. Anything that differs stays and meets the rules.
    copy = _trusted_copy(lexed, header_end, header)
    body_start = copy.end if copy.end is not None else header_end
    dropped = [(copy.start, copy.end)] if copy.end is not None else []
    # Import lines of the block's own header are the only place `import` may appear; everything
    # else, the dropped `open`/`set_option` lines included, goes through the denylist (the copy
    # of the trusted preamble does not: it is not sent).
    unscanned = sorted([(a, b) for a, b in header_spans if lexed.code.startswith("import", a)] + dropped)
    # One pass with a moving index over the (sorted) spans: linear in the tokens, however
    # many import lines there are.
    scanned, k = [], 0
    for t in lexed.tokens:
        while k < len(unscanned) and unscanned[k][1] <= t.start:
            k += 1
        if not (k < len(unscanned) and unscanned[k][0] <= t.start):
            scanned.append(t)
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

    proof_start = _match_statement(trusted, lexed, keyword)
    # The allowlist on everything but the header lines (checked above against the trusted
    # header) and the candidate's copy of the trusted statement (replaced by it below).
    try:
        _allow(lexed, policy, "completion's lean block",
               skip=header_spans + dropped + [(keyword.start, proof_start)], header=header)
    except Rejected as exc:   # say where a near-copy of the trusted header broke off
        raise Rejected(f"{exc}{copy.near}") from None
    _check_before_target(before, block, statement_tokens=trusted.code_tokens(),
                         allowed=set(policy.allow_commands), near_copy=copy.near, code=lexed.code,
                         header_opens=_header_opens(header))
    _check_first_command(lexed, body_start, block, set(policy.allow_commands))
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
        elif HEADER_LINE.match(line) and not LOCAL_SET_OPTION.match(stripped):
            in_header_line = True
            if line.startswith("import"):
                imports += stripped.split()[1:]
        elif in_header_line and line[:1] in (" ", "\t"):
            pass
        else:
            break
        offset += len(line)
    return offset, imports


def _line_spans(header_code: str) -> list[tuple[int, int]]:
    """(start, end) of every non-blank line of the block's header part."""
    spans, offset = [], 0
    for line in header_code.splitlines(keepends=True):
        if line.strip():
            spans.append((offset, offset + len(line)))
        offset += len(line)
    return spans


def _check_header_lines(code: str, spans: list[tuple[int, int]], header: str) -> None:
    """Every header line of the block (dropped for the trusted header) must be a line of the
    trusted header: a different `open` or `set_option` there is a different problem."""
    try:
        trusted_code = lex(header).code
    except LexError as exc:
        raise BadRecord(f"cannot read the header: {exc}") from None
    trusted_lines = {line.strip() for line in trusted_code.splitlines() if line.strip()}
    opened = opened_namespaces(trusted_code)
    for a, b in spans:
        line = code[a:b].strip()
        words = line.split()
        # A resource limit with another value is harmless (the line is dropped anyway): models
        # echo the DeepSeek header (`maxHeartbeats 400000`) where a dataset says 0. An `open` of
        # namespaces the trusted header opens anyway changes nothing (`open Real` under `open
        # BigOperators Real Nat …`).
        resource_limit = len(words) == 3 and words[0] == "set_option" and words[1] in RESOURCE_OPTIONS
        reopen = words[:1] == ["open"] and len(words) > 1 and set(words[1:]) <= opened
        if not line.startswith("import") and line not in trusted_lines and not resource_limit and not reopen:
            number = code.count("\n", 0, a) + 1
            raise Rejected(f"header line {number} of the completion's lean block, `{line[:80]}`, is not "
                           "a line of the trusted header (only identical header lines are allowed)")


def _declarations(tokens: list[Token]) -> list[tuple[Token, Token]]:
    """(keyword, name) for every `theorem NAME`, `def NAME`, … in a token list."""
    found = []
    for k, token in enumerate(tokens[:-1]):
        if token.kind == "ident" and token.text in DECL_KEYWORDS and tokens[k + 1].kind == "ident":
            found.append((token, tokens[k + 1]))
    return found


def _last_part(token: Token) -> str:
    return token.components[-1] if token.components else token.text


def _check_before_target(before: list[Token], block: str, statement_tokens: list[Token],
                         allowed: AbstractSet[str] = frozenset(), near_copy: str = "", code: str = "",
                         header_opens: frozenset[str] = frozenset()) -> None:
    # `… in` commands directly before the target (a chain: `open A in` + `set_option … in` +
    # `theorem NAME`) each apply to the rest, so to the target's statement, which must elaborate
    # with nothing but the trusted header in front of it.
    for start, end in _target_prefixes(before, code):
        line = line_col(block, before[start].start)[0]
        if before[start].text == "set_option" and "set_option" not in allowed:
            raise Rejected(f"`set_option {before[start + 1].text} … in` at line {line} applies to the target "
                           "theorem, whose statement elaborates under the trusted header's options only (put it "
                           f"inside the proof, before the tactic that needs it: `  set_option {before[start + 1].text} "
                           f"{before[start + 2].text} in`)")
        names = open_names(before, start) if before[start].text == "open" else []
        if names and "open" not in allowed and not set(names) <= header_opens:
            raise Rejected(f"`open {' '.join(names)} in` at line {line} applies to the target theorem, and "
                           "the trusted header does not open all of these namespaces (that could change "
                           "what the statement means)")
    for k, token in enumerate(before):
        if token.text in allowed:
            continue
        if token.text == "open" and code and _is_local_open(before, k, code):
            continue   # `open … in`: one tactic, or one helper declaration (before the target: above)
        if (token.kind == "ident" and token.text.rstrip("?!") in BEFORE_TARGET_FORBIDDEN) or token.kind == "hash":
            line = line_col(block, token.start)[0]
            raise Rejected(f"`{token.text}` at line {line} precedes the target theorem: only helper "
                           "`theorem`/`lemma` declarations (and an exact copy of the trusted header) "
                           f"may come before it{near_copy}")
    statement_words = {part for t in statement_tokens if t.kind == "ident" for part in t.components}
    for keyword, name in _declarations(before):
        if _last_part(name) in statement_words:
            raise Rejected(f"helper `{keyword.text} {name.text}` reuses a name that occurs in the "
                           "trusted statement")


def _target_prefixes(before: list[Token], code: str) -> list[tuple[int, int]]:
    """(start, end) token ranges of the `set_option <opt> <value> in` and one-line `open … in`
    commands that end right where the target starts, last first."""
    found, end = [], len(before)
    while end > 0 and before[end - 1].text == "in":
        if end >= 4 and before[end - 4].text == "set_option":
            start = end - 4
        else:
            start = next((k for k in range(end - 2, -1, -1) if before[k].text == "open"), -1)
            if start < 0 or not code or not _is_local_open(before, start, code) \
                    or start + len(open_names(before, start)) + 2 != end:
                break
        found.append((start, end))
        end = start
    return found


# --------------------------------------------------------------------------------------------
# A completion's copy of the trusted header's preamble
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrustedCopy:
    """The span of the block that is a copy of trusted header text (`end` None: no copy), and,
    when a longer copy broke off, where (for the rejection reason)."""

    start: int = 0
    end: int | None = None
    near: str = ""


# Tokens after which untrusted text may follow the trusted header in one file: they start a
# command and cannot continue the one before (a term, a binder list, an `open` list).
FIRST_COMMANDS = frozenset({"theorem", "lemma", "set_option", "open"})


def _trusted_commands(header: str) -> tuple[list[Token], list[int]]:
    """The trusted header's tokens after its import lines, and the indices where a command
    starts (the first token of a line that is a command keyword), plus 0 and the end."""
    lexed = lex(header)   # header_imports() has lexed it already: no LexError here
    code, import_end, in_import = lexed.code, 0, False
    offset = 0
    for line in code.splitlines(keepends=True):   # as `_split_header` reads import lines
        if not line.strip():
            in_import = False
        elif line.startswith("import") or (in_import and line[:1] in (" ", "\t")):
            in_import, import_end = True, offset + len(line)
        else:
            break
        offset += len(line)
    tokens = [t for t in lexed.tokens if t.start >= import_end]
    starts = {0, len(tokens)}
    for k, t in enumerate(tokens):
        first_on_line = code[code.rfind("\n", 0, t.start) + 1:t.start].strip() == ""
        is_keyword = t.kind == "ident" and (t.text.rstrip("?!") in COMMAND_KEYWORDS or t.text in ALLOWED_COMMANDS)
        attribute = t.text == "@" and k + 1 < len(tokens) and tokens[k + 1].text == "["
        if first_on_line and (is_keyword or attribute):
            starts.add(k)
    return tokens, sorted(starts)


def _trusted_copy(lexed: Lexed, body_start: int, header: str) -> TrustedCopy:
    """The longest prefix of the block's body (from `body_start`) that equals, token by token
    (comments blanked, every token's text), whole commands of the trusted header's non-import
    part: all of it, or a contiguous run of its commands. One run only, so a reordered or
    interleaved preamble is not a copy."""
    trusted, starts = _trusted_commands(header)
    if len(trusted) == 0:
        return TrustedCopy()
    body = [t for t in lexed.tokens if t.start >= body_start]
    code = lexed.code

    def ends_a_line(n: int) -> bool:   # the copy of n tokens is followed by a new line (or nothing)
        return n == len(body) or code[code.rfind("\n", 0, body[n].start) + 1:body[n].start].strip() == ""

    best: tuple[int, int] | None = None   # (i, j): trusted[i:j] == body[:j - i]
    near, near_length = "", 1   # the longest copy that broke off (two tokens at least: not a lone `def`)
    for i in starts[:-1]:
        m = 0
        while m < len(body) and i + m < len(trusted) and body[m].text == trusted[i + m].text:
            m += 1
        # the longest run of whole trusted commands that is also whole lines of the block
        # (`set_option maxHeartbeats 400000 in` is not a copy of `set_option maxHeartbeats 400000`)
        j = max((s for s in starts if i < s <= i + m and ends_a_line(s - i)), default=i)
        if j > i and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
        if i + m < len(trusted) and m < len(body) and m > near_length and (best is None or i + m > best[1]):
            near_length = m
            line = line_col(lexed.text, body[m].start)[0]
            near = (f" (it is not an exact copy of the trusted header: `{body[m].text}` at line {line} "
                    f"where the header has `{trusted[i + m].text}`)")
    if best is None:
        return TrustedCopy(near=near)
    i, j = best
    return TrustedCopy(body[0].start, body[j - i - 1].end, near)


def _check_first_command(lexed: Lexed, body_start: int, block: str, allowed: AbstractSet[str] = frozenset()) -> None:
    """What follows the trusted header must start a new command (`theorem`, `lemma`, `set_option
    … in`), at the start of its line: a backend that sends header and proof as one file (Kimina)
    would otherwise let a leading `+ 1` or an indented name continue the header's last command
    (another `abbrev` answer, a longer `open` list). A keyword `verify.allow_commands` admits
    may come first too (each starts a command)."""
    first = next((t for t in lexed.tokens if t.start >= body_start), None)
    if first is None:
        return
    line_start = lexed.code.rfind("\n", 0, first.start) + 1
    leading = lexed.text[line_start:first.start]
    # only a comment may precede it on its line (`/-- doc -/ theorem …`), not indentation
    at_line_start = leading == "" or (leading[0] not in " \t" and lexed.code[line_start:first.start].strip() == "")
    starts_command = first.text in FIRST_COMMANDS or first.text.rstrip("?!") in allowed or (
        first.text == "@" and "@[" in allowed)
    if not starts_command or not at_line_start:
        line = line_col(block, first.start)[0]
        raise Rejected(f"`{first.text}` at line {line} of the completion's lean block: after the header, the "
                       "code must start with a `theorem`/`lemma`/`set_option … in` command at the start of "
                       "a line (text that continues the trusted header would change it)")


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
