"""The allowlist: which Lean commands untrusted text may contain, and which characters.

The denylist (`denylist.py`) names cheats; this module names what is *allowed* and rejects the
rest, so a command we never heard of (`variable?`, a Mathlib command added next month) is
rejected rather than run. Untrusted text is a `proof` (tactic block) or a `completion`'s lean
block; in both, a token that is a command keyword may only be one of:

- `theorem` / `lemma`: helper declarations and the target;
- `open <namespaces> in` on one line: inside a proof it applies to the next tactic, before a
  declaration to that declaration (before the target, statement.py allows only namespaces the
  trusted header opens: anything else could change what the statement means);
- `set_option <option> <value> in` where <option> only bounds resources (`RESOURCE_OPTIONS`):
  `in` keeps it local to one tactic or helper declaration; directly before the target it would
  reach the statement, which statement.py refuses;
- in a completion's header lines (dropped and replaced by the trusted header), only lines that
  are identical to lines of the trusted header, or `open` lines of namespaces it opens (checked in
  `statement.py`).

Everything else that can start a command is rejected with a reason naming it and its line:
any `variable` form (`variable?` too), `include`, `omit`, `open` without `in`, `namespace`,
`section`, `end`, `export`, `universe`, `def`/`abbrev`/`instance`/`structure`/`inductive`/`class`/
`opaque`/`axiom`/`example`, modifiers (`private`, `noncomputable`, …), any attribute (`@[…]`,
`attribute […]`), `local`/`scoped`, `elab*`/`macro*`/`syntax*`/`notation*` and the other
syntax-extension commands, `#` commands, `initialize`, `mutual`, and the Lean and Mathlib commands
we know of that register or run code without any of those words (`set_library_suggestions`,
`grind_propagator`, `cbv_eval`, `count_heartbeats`, …). Where Lean starts a command follows its
layout rules: a keyword anywhere is scanned; a line at column 0, or left of the column of the
declaration's tactic block (Lean ends the block there: `tacticSeq` checks `colGe`), starts a
command and must start an allowed one; inside brackets columns do not count; a column-0 line may
continue a declaration's signature when its first token cannot start a command (a symbol, a
numeral, a dotted or non-ASCII name, or a name the signature bound). A `where` in a declaration's
body opens its `where` clause (local definitions, part of the proof, held to every rule here), at
any column, as Lean reads it (`_Layout.opens_where`); the clause's column then decides where a
command starts.

Code in the text: tactic configurations are *evaluated* (`Lean.Elab.Tactic.Config`), and some
hold functions that run later (`solve_by_elim`'s `suspend`, Mathlib `linarith`'s `discharger`),
so every `(name := value)` must have a literal value: a numeral, `true`/`false`, `.name`,
`+name`/`-name`, or `{ field := literal, … }` of those (named arguments look the same and are held
to it too); `eval%` (which evaluates code while elaborating) is rejected.

`verify.allow_commands` widens the list by keyword (e.g. `["open"]`); each one is a way for a
proof to change what is checked (see docs/verify.md for the risk of each). A record that uses a
widened command able to run code is marked (`code_commands_used`), and the pool recycles the
REPL after it.

Inside proofs also: `plausible`/`slim_check` (they close the goal when they find no
counterexample) are denied in `denylist.py`, and control, zero-width and bidirectional-format
characters outside comments and strings are rejected here (they can make the text a reviewer
reads differ from the text Lean reads).

All of it is linear in the text: one pass over the tokens, one regex over the characters.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Iterable

from prover_cli.verify.text.lexer import Lexed, Token, line_col

# Options that only bound resources: raising or lowering them can make elaboration fail or
# succeed, never change what a statement means.
RESOURCE_OPTIONS = frozenset({
    "maxHeartbeats", "maxRecDepth", "synthInstance.maxHeartbeats", "synthInstance.maxSize",
    "maxSynthPendingDepth", "exponentiation.threshold",
})

ALLOWED_COMMANDS = frozenset({"theorem", "lemma", "set_option"})

# Command keywords of Lean 4 core and Mathlib that are not allowed. Matched against the whole
# token (`variable?` and `variable!` included: the trailing `?`/`!` is stripped first).
COMMAND_KEYWORDS = frozenset({
    # scopes and names
    "variable", "variables", "include", "omit", "open", "namespace", "section", "end", "export",
    "universe", "universes", "local", "scoped", "mutual",
    # declarations other than theorem/lemma
    "def", "abbrev", "abbreviation", "instance", "structure", "inductive", "coinductive", "class",
    "opaque", "axiom", "example", "alias", "irreducible_def", "deriving", "proof_wanted", "recall",
    # modifiers
    "private", "protected", "noncomputable", "partial", "nonrec", "unsafe", "public", "meta",
    # attributes
    "attribute",
    # syntax extensions and metaprograms
    "macro", "macro_rules", "syntax", "elab", "elab_rules", "notation", "notation3", "infix",
    "infixl", "infixr", "prefix", "postfix", "declare_syntax_cat", "binder_predicate",
    "initialize", "builtin_initialize", "run_cmd", "run_elab", "run_meta", "simproc",
    "dsimproc", "simproc_decl", "dsimproc_decl", "grind_pattern", "unif_hint",
    "add_decl_doc", "assert_not_exists", "assert_exists", "suppress_compilation",
    "unsuppress_compilation", "seal", "unseal", "compile_inductive", "compile_def",
    "initialize_simps_projections", "library_note", "add_aesop_rules", "erase_aesop_rules",
    "declare_aesop_rule_sets", "mk_iff_of_inductive_prop", "lemma_wanted", "whatsnew",
    "import", "prelude", "extend_docs", "open_locale", "init_quot", "unlock_limits", "docs_to_verso",
    "deprecated_module", "recommended_spelling", "gen_injective_theorems", "end_local_scope",
    "with_weak_namespace", "scoped_notation",
    # commands that register or run code without `@[`, `elab` or `macro` in their name
    "set_library_suggestions", "set_premise_selector", "grind_propagator", "cbv_eval", "count_heartbeats",
    "sudo", "init_grind_norm", "tactic_extension", "show_panel_widgets", "irreducible", "instance_priority",
})

# Whole identifiers starting with one of these are commands we do not know yet, in families
# we do: `elab_tactic`, `macro_xyz`, `syntax_cat`, `notation4`, `declare_…`, `register_…`.
COMMAND_PREFIXES = ("elab", "macro", "syntax", "notation", "declare_", "register_", "initialize",
                    "builtin_", "add_decl", "run_", "simproc", "dsimproc", "mk_iff", "infix")

# Control characters other than tab/newline/carriage return, zero-width characters and the
# bidirectional formatting characters (the "Trojan Source" set), plus the BOM.
SUSPICIOUS_CHARS = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e"
    "\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0"
    "\ufff9-\ufffb]")


@dataclass(frozen=True)
class Problem:
    what: str    # e.g. "`variable?` command", "attribute `@[…]`"
    why: str
    line: int

    def describe(self, where: str) -> str:
        return f"{self.what} at line {self.line}{where} is not allowed: {self.why}"


def _line_finder(text: str):
    """offset -> 1-based line, by binary search over newline offsets (linear to build)."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    return lambda offset: bisect.bisect_right(newlines, offset - 1) + 1


def check_characters(lexed: Lexed) -> Problem | None:
    """The first control / zero-width / bidi character outside comments and strings, or None."""
    strings = [(t.start, t.end) for t in lexed.tokens if t.kind in ("string", "char")]
    starts = [a for a, _ in strings]
    for match in SUSPICIOUS_CHARS.finditer(lexed.code):   # comments are blanked in `code`
        k = bisect.bisect_right(starts, match.start()) - 1
        if k >= 0 and strings[k][0] <= match.start() < strings[k][1]:
            continue
        line = line_col(lexed.text, match.start())[0]
        return Problem(f"character U+{ord(match.group()):04X}", "control, zero-width and "
                       "bidirectional-format characters outside comments and strings can make "
                       "the text differ from what a reader sees", line)
    return None


def _is_command_keyword(token: Token) -> bool:
    if token.kind != "ident":
        return False
    word = token.text.rstrip("?!")
    if word in COMMAND_KEYWORDS:
        return True
    return len(token.components) == 1 and word.startswith(COMMAND_PREFIXES)


@dataclass
class _Layout:
    """Where the scan is in the declaration it reads: Lean ends a tactic block at the first line
    left of the block's column, so such a line starts a command; a signature may go on at column 0."""

    depth: int = 0                      # open brackets
    in_signature: bool = False          # between `theorem NAME` and its `:=`
    in_body: bool = False               # after the declaration's `:=` (its proof)
    names: set = field(default_factory=set)   # identifiers seen in the signature
    block_column: int | None = None     # column of the declaration's outermost tactic block, or of
    #                                     its `where` clause's declarations once one opened
    block_next: bool = False            # the next token opens that block (it follows `by`/`where`)
    in_where: bool = False              # the declaration's `where` clause has opened
    where_block: bool = False           # a tactic block has opened inside that clause

    def new_declaration(self) -> None:
        self.depth, self.in_signature, self.in_body, self.names = 0, True, False, set()
        self.block_column, self.block_next, self.in_where, self.where_block = None, False, False, False

    def opens_where(self, token: Token) -> bool:
        """`token` is the `where` that opens the declaration's `where` clause, as Lean reads it:
        in the body at bracket depth 0, the first one. Lean's `declValSimple` is `" :=" >> declBody
        >> Termination.suffix >> optional Term.whereDecls` (src/Lean/Parser/Command.lean, lean4
        00298d032ca2), and `whereDecls` is `ppDedent ppLine >> "where" >> sepBy1Indent letRecDecl
        "; "` (src/Lean/Parser/Term.lean, lean4 0dbbe18d70d1): no column check on `where` itself
        (`ppDedent`/`ppLine` only format), so any `where` ends the tactic block wherever it stands,
        and `sepBy1Indent` (`withPosition` + `checkColGe`, src/Lean/Parser/Extra.lean, lean4
        6cd7da88d627) makes the clause's declarations start at or right of the first one's column;
        a line left of it ends the declaration and starts a command."""
        return (token.text == "where" and token.kind == "ident" and self.in_body and not self.in_where
                and self.depth == 0)


OPENERS = {"(": ")", "[": "]", "{": "}", "⟨": "⟩", "⦃": "⦄"}
CLOSERS = set(OPENERS.values())


def check_commands(lexed: Lexed, *, allow_commands: Iterable[str] = (), skip: Iterable[tuple[int, int]] = (),
                   in_tactic_block: bool = False, declaration_opens: bool = True) -> Problem | None:
    """The first command outside the allowlist in `lexed` (spans in `skip` excepted: their tokens
    are not checked, but still tell where declarations and tactic blocks are), or None.

    `in_tactic_block`: the text continues a statement ending in `:= by` (`proof` input), so its
    first token opens the tactic block.
    `declaration_opens`: `open … in` may also stand at the start of a line, before a declaration
    (a completion); in a `proof` only inside it (indented)."""
    allowed_extra = {c.strip() for c in allow_commands}
    skip_spans = sorted(skip)
    skip_starts = [a for a, _ in skip_spans]
    line_of = _line_finder(lexed.text)
    code = lexed.code

    def skipped(offset: int) -> bool:
        k = bisect.bisect_right(skip_starts, offset) - 1
        return k >= 0 and skip_spans[k][0] <= offset < skip_spans[k][1]

    tokens = lexed.code_tokens()
    # `proof` input (the only caller with `declaration_opens` false) continues the statement's
    # `:=`: the text is the target's body from its first token
    layout = _Layout(block_next=in_tactic_block, in_body=not declaration_opens)
    newlines = [m.start() for m in re.finditer("\n", code)]
    line_firsts, previous_line = set(), -1      # starts of the first token (strings included) of each line
    for t in lexed.tokens:
        line = bisect.bisect_left(newlines, t.start)
        if line != previous_line:
            line_firsts.add(t.start)
        previous_line = bisect.bisect_left(newlines, t.end - 1)   # a string may span lines
    for k, token in enumerate(tokens):
        following = tokens[k + 1] if k + 1 < len(tokens) else None
        line = bisect.bisect_left(newlines, token.start)          # 0-based line of the token
        column = token.start - (newlines[line - 1] + 1 if line > 0 else 0)
        first_on_line = token.start in line_firsts
        starts_declaration = first_on_line and token.text in ("theorem", "lemma") and layout.depth == 0
        if starts_declaration:
            layout.new_declaration()
        elif layout.block_next:
            # in a `where` clause, the first tactic block of its declarations may sit left of the
            # clause's column: Lean ends the declaration only at a line left of both
            layout.block_column = column if layout.block_column is None else min(column, layout.block_column)
            layout.block_next = False
        opens_where = layout.opens_where(token)
        if not skipped(token.start):
            problem = (_check_token(tokens, k, token, following, code, line_of, allowed_extra,
                                    declaration_opens or column > 0)
                       or (None if opens_where else _check_layout(token, first_on_line, column, layout, tokens, k,
                                                                  code, line_of, allowed_extra)))
            if problem is not None:
                return problem
        if opens_where:   # the clause's declarations belong to this declaration: their column rules
            layout.in_where, layout.block_column, layout.block_next = True, None, True
            continue
        _advance(layout, tokens, k, token, following)
    return None


def _advance(layout: _Layout, tokens: list[Token], k: int, token: Token, following: Token | None) -> None:
    """Update the layout after `token`: brackets, the end of the signature, the tactic block."""
    if token.text in OPENERS:
        layout.depth += 1
    elif token.text in CLOSERS:
        layout.depth = max(0, layout.depth - 1)
    elif layout.depth == 0 and token.text == ":" and following is not None and following.text == "=" \
            and following.start == token.end and layout.in_signature:
        layout.in_signature, layout.in_body = False, True
    elif token.kind == "ident" and layout.in_signature:
        layout.names.add(token.text)
    elif token.text == "by" and layout.depth == 0 and not layout.in_signature and (
            layout.block_column is None if not layout.in_where else not layout.where_block):
        layout.block_next, layout.where_block = True, layout.in_where


def _check_token(tokens: list[Token], k: int, token: Token, following: Token | None, code: str, line_of,
                 allowed_extra: set[str], open_in_allowed: bool) -> Problem | None:
    """The per-token rules: `#` commands, attributes, options, `open`, command keywords, option
    values, `eval%`."""
    if token.kind == "hash":
        if token.text in allowed_extra:
            return None
        return Problem(f"`{token.text}` command", "`#` commands run code or print (and can "
                       "forge) messages", line_of(token.start))
    if token.text == "@" and following is not None and following.text == "[" and following.start == token.end:
        if "@[" in allowed_extra or "attribute" in allowed_extra:
            return None
        return Problem("attribute `@[…]`", "attributes register metaprograms (`command_elab`, "
                       "`tactic`, `delab`, linters) and instances", line_of(token.start))
    if token.text == "set_option":
        return _check_set_option(token, following, tokens[k + 2:k + 4], line_of, allowed_extra)
    if token.text == "open" and "open" not in allowed_extra:
        if open_in_allowed and _is_local_open(tokens, k, code):
            return None   # before the target only namespaces the header opens: statement.py checks that
        return Problem("`open` command", "outside the trusted header only `open <namespaces> in` (on one line) "
                       "is allowed: it applies to the next tactic or declaration only", line_of(token.start))
    if _is_command_keyword(token):
        word = token.text.rstrip("?!")
        if word in allowed_extra or token.text in allowed_extra:
            return None
        return Problem(f"`{token.text}` command", "only helper `theorem`/`lemma` declarations, "
                       "the target and `set_option <resource limit> <value> in` are allowed "
                       "(verify.allow_commands widens this)", line_of(token.start))
    if token.text == "eval" and following is not None and following.text == "%" and following.start == token.end:
        return Problem("`eval%`", "it evaluates code while the proof elaborates", line_of(token.start))
    if token.text == "(" and following is not None and following.kind == "ident" and k + 3 < len(tokens) \
            and tokens[k + 2].text == ":" and tokens[k + 3].text == "=" and tokens[k + 3].start == tokens[k + 2].end:
        if not _literal_value(tokens, k + 4):
            return Problem(f"`({following.text} := …)` with a value that is not a literal",
                           "tactic configurations are evaluated (a function in them runs as code), so an option "
                           "value may only be a numeral, `true`/`false`, a `.name`, `+opt`/`-opt`, or `{ field "
                           ":= literal, … }` of those (named arguments included: they look the same)",
                           line_of(token.start))
    return None


def _check_layout(token: Token, first_on_line: bool, column: int, layout: _Layout, tokens: list[Token], k: int,
                  code: str, line_of, allowed_extra: set[str]) -> Problem | None:
    """A line that Lean reads as the start of a command (column 0, or left of the declaration's
    tactic block) must start an allowed one: `theorem`/`lemma`, `set_option … in`, `open … in`
    (checked above); a column-0 line inside a signature may continue it."""
    if not first_on_line or layout.depth > 0:
        return None
    left_of_block = layout.block_column is not None and column < layout.block_column
    if column != 0 and not left_of_block:
        return None
    if token.text in ALLOWED_COMMANDS or token.text == "open" or token.text.rstrip("?!") in allowed_extra \
            or token.text in allowed_extra:
        return None
    if token.text == "@" and k + 1 < len(tokens) and tokens[k + 1].text == "[" and (
            "@[" in allowed_extra or "attribute" in allowed_extra):
        return None
    if column == 0 and layout.in_signature and _continues_signature(token, layout):
        return None
    block, indent = ("the `where` clause", "its declarations") if layout.in_where else ("the tactic block",
                                                                                      "tactic lines")
    where = "at the start of a line" if column == 0 else f"left of {block}'s column ({layout.block_column})"
    return Problem(f"`{token.text}` {where}", f"Lean ends {block} (and the declaration) at a line left of "
                   "its column and reads a new command there; only `theorem`/`lemma`, `set_option … in` and "
                   f"`open … in` commands are allowed (indent {indent})", line_of(token.start))


def _continues_signature(token: Token, layout: _Layout) -> bool:
    """A column-0 token that cannot start a command: a symbol or numeral, a dotted or non-ASCII
    identifier, or a name the signature already bound (`(a b : ℝ) :` then `a * b ≤ …`)."""
    if token.kind in ("symbol", "number"):
        return True
    return token.kind == "ident" and (len(token.components) > 1 or not token.text.isascii()
                                      or token.text in layout.names)


def _literal_value(tokens: list[Token], k: int) -> bool:
    """The tokens from `k` to the `)` closing the option are one literal option value."""
    end = _literal_end(tokens, k)
    return end is not None and end < len(tokens) and tokens[end].text == ")"


def _literal_end(tokens: list[Token], k: int) -> int | None:
    """Index after one literal at `k`: a numeral, `true`/`false`, `.name`, `+name`/`-name`, or
    `{ name := literal, … }`; None if there is none."""
    if k >= len(tokens):
        return None
    token = tokens[k]
    if token.kind == "number" or token.text in ("true", "false"):
        return k + 1
    if token.text in (".", "+", "-") and k + 1 < len(tokens) and tokens[k + 1].kind == "ident" \
            and tokens[k + 1].start == token.end and len(tokens[k + 1].components) == 1:
        return k + 2
    if token.text == "{":
        j = k + 1
        while j < len(tokens) and tokens[j].text != "}":
            if not (tokens[j].kind == "ident" and j + 2 < len(tokens) and tokens[j + 1].text == ":"
                    and tokens[j + 2].text == "=" and tokens[j + 2].start == tokens[j + 1].end):
                return None
            after = _literal_end(tokens, j + 3)
            if after is None or after >= len(tokens):
                return None
            j = after
            if tokens[j].text == ",":
                j += 1
        return j + 1 if j < len(tokens) else None
    return None


def _check_set_option(token: Token, option: Token | None, rest: list[Token], line_of,
                      allowed_extra: set[str]) -> Problem | None:
    line = line_of(token.start)
    if option is None or option.kind != "ident":
        return Problem("`set_option`", "it must name an option", line)
    if option.text not in RESOURCE_OPTIONS and "set_option" not in allowed_extra:
        return Problem(f"`set_option {option.text}`", "only options that bound resources may be set "
                       f"({', '.join(sorted(RESOURCE_OPTIONS))})", line)
    if len(rest) < 2 or rest[0].kind not in ("number", "ident") or rest[1].text != "in":
        return Problem(f"`set_option {option.text}` without `in`", "write `set_option "
                       f"{option.text} <value> in`, so that it applies to one command or tactic", line)
    return None


def open_names(tokens: list[Token], k: int) -> list[str]:
    """The namespaces of the `open … in` at `k` (`_is_local_open` holds)."""
    names: list[str] = []
    for t in tokens[k + 1:]:
        if t.text == "in":
            return names
        names.append(t.text)
    return names


def _is_local_open(tokens: list[Token], k: int, code: str) -> bool:
    """`open A B in` on one line: names only, then `in` (it applies to the next tactic or
    command only)."""
    line_end = code.find("\n", tokens[k].start)
    line_end = len(code) if line_end < 0 else line_end
    j = k + 1
    while j < len(tokens) and tokens[j].start < line_end and tokens[j].kind == "ident" \
            and tokens[j].text not in ("in", "private", "scoped") and not _is_command_keyword(tokens[j]):
        j += 1
    return j > k + 1 and j < len(tokens) and tokens[j].start < line_end and tokens[j].text == "in"


# `verify.allow_commands` entries that cannot run code of the proof's own: scopes and names.
INERT_COMMANDS = frozenset({"open", "namespace", "section", "end", "variable", "variables", "universe",
                            "universes", "include", "omit", "export"})


def code_commands_used(lexed: Lexed, allow_commands: Iterable[str]) -> set[str]:
    """The widened (`verify.allow_commands`) commands the text uses that can run code or change
    the process (attributes, definitions, instances, `elab`, `#` commands, options, …)."""
    widened = {c.strip() for c in allow_commands} - INERT_COMMANDS
    if not widened:
        return set()
    used = set()
    tokens = lexed.code_tokens()
    for k, token in enumerate(tokens):
        word = token.text.rstrip("?!")
        if word in widened or token.text in widened:
            used.add(word)
        elif token.text == "@" and k + 1 < len(tokens) and tokens[k + 1].text == "[" and "@[" in widened:
            used.add("@[")
    return used


def opened_namespaces(header_code: str) -> frozenset[str]:
    """Namespaces the trusted header opens with plain `open A B …` lines (no `in`, `hiding`,
    `renaming`, `scoped`, parentheses): an `open` of only these changes nothing."""
    opened: set[str] = set()
    for line in header_code.splitlines():
        words = line.split()
        if words[:1] == ["open"] and len(words) > 1 and all(
                re.fullmatch(r"[A-Za-z_][\w.']*", w) and w not in ("in", "hiding", "renaming", "scoped")
                for w in words[1:]):
            opened.update(words[1:])
    return frozenset(opened)
