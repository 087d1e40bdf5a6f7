"""The allowlist: which Lean commands untrusted text may contain, and which characters.

The denylist (`denylist.py`) names cheats; this module names what is *allowed* and rejects the
rest, so a command we never heard of (`variable?`, a Mathlib command added next month) is
rejected rather than run. Untrusted text is a `proof` (tactic block) or a `completion`'s lean
block; in both, a token that is a command keyword may only be one of:

- `theorem` / `lemma`: helper declarations and the target;
- `open <namespaces> in` inside a proof (indented, on one line): it applies to the next tactic
  only (the same words at column 0, or without `in`, are rejected);
- `set_option <option> <value> in` where <option> only bounds resources (`RESOURCE_OPTIONS`):
  a resource limit cannot change what a statement means, and `in` keeps it local;
- in a completion's header lines (dropped and replaced by the trusted header), only lines that
  are identical to lines of the trusted header (checked in `statement.py`).

Everything else that can start a command is rejected with a reason naming it and its line:
any `variable` form (`variable?` too), `include`, `omit`, `open`, `namespace`, `section`, `end`,
`export`, `universe`, `def`/`abbrev`/`instance`/`structure`/`inductive`/`class`/`opaque`/
`axiom`/`example`, modifiers (`private`, `noncomputable`, …), any attribute (`@[…]`,
`attribute […]`), `local`/`scoped`, `elab*`/`macro*`/`syntax*`/`notation*` and the other
syntax-extension commands, `#` commands, `initialize`, `mutual`, and Mathlib's commands we know
of. Lean's parser ends a tactic block at the first token that cannot continue it, so a command
keyword anywhere in the text, at any indentation, starts a command: the scan looks at every
token, not only at line starts; and every line that starts at column 0 must start with an
allowed command (a tactic at column 0 would be a new command as far as we can tell).

`verify.allow_commands` widens the list by keyword (e.g. `["open"]`); each one is a way for a
proof to change what is checked (see docs/verify.md for the risk of each).

Inside proofs also: `plausible`/`slim_check` (they close the goal when they find no
counterexample) are denied in `denylist.py`, and control, zero-width and bidirectional-format
characters outside comments and strings are rejected here (they can make the text a reviewer
reads differ from the text Lean reads).

All of it is linear in the text: one pass over the tokens, one regex over the characters.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Iterable

from prover_cli.verify.lexer import Lexed, Token, line_col

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


def check_commands(lexed: Lexed, *, allow_commands: Iterable[str] = (), skip: Iterable[tuple[int, int]] = (),
                   what_text: str = "") -> Problem | None:
    """The first command outside the allowlist in `lexed` (spans in `skip` excepted), or None."""
    allowed_extra = {c.strip() for c in allow_commands}
    skip_spans = sorted(skip)
    skip_starts = [a for a, _ in skip_spans]
    line_of = _line_finder(lexed.text)

    def skipped(offset: int) -> bool:
        k = bisect.bisect_right(skip_starts, offset) - 1
        return k >= 0 and skip_spans[k][0] <= offset < skip_spans[k][1]

    tokens = [t for t in lexed.code_tokens() if not skipped(t.start)]
    line_starts = _line_start_offsets(lexed.code)
    for k, token in enumerate(tokens):
        following = tokens[k + 1] if k + 1 < len(tokens) else None
        if token.kind == "hash":
            if token.text in allowed_extra:
                continue
            return Problem(f"`{token.text}` command", "`#` commands run code or print (and can "
                           "forge) messages", line_of(token.start))
        if token.text == "@" and following is not None and following.text == "[" \
                and following.start == token.end:
            if "@[" in allowed_extra or "attribute" in allowed_extra:
                continue
            return Problem("attribute `@[…]`", "attributes register metaprograms (`command_elab`, "
                           "`tactic`, `delab`, linters) and instances", line_of(token.start))
        if token.text == "set_option":
            problem = _check_set_option(token, following, tokens[k + 2:k + 4], line_of, allowed_extra)
            if problem is not None:
                return problem
            continue
        if token.text == "open" and "open" not in allowed_extra:
            if _is_local_open(tokens, k, line_starts, lexed.code):
                continue
            return Problem("`open` command", "outside the trusted header only `open <namespaces> in` "
                           "inside a proof (indented, one line) is allowed: it applies to one tactic",
                           line_of(token.start))
        if _is_command_keyword(token):
            word = token.text.rstrip("?!")
            if word in allowed_extra or token.text in allowed_extra:
                continue
            return Problem(f"`{token.text}` command", "only helper `theorem`/`lemma` declarations, "
                           "the target and `set_option <resource limit> <value> in` are allowed "
                           "(verify.allow_commands widens this)", line_of(token.start))
        if token.kind == "ident" and token.start in line_starts and token.text not in ALLOWED_COMMANDS \
                and token.text not in allowed_extra:
            return Problem(f"`{token.text}` at the start of a line", "a line starting at column 0 "
                           "starts a new command, and only `theorem`/`lemma` and `set_option … in` "
                           "commands are allowed (indent tactic lines)", line_of(token.start))
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


def _is_local_open(tokens: list[Token], k: int, line_starts: set[int], code: str) -> bool:
    """`open A B in` inside a tactic block: indented, names only, `in` on the same line."""
    if tokens[k].start in line_starts:
        return False
    line_end = code.find("\n", tokens[k].start)
    line_end = len(code) if line_end < 0 else line_end
    j = k + 1
    while j < len(tokens) and tokens[j].start < line_end and tokens[j].kind == "ident" \
            and tokens[j].text not in ("in", "private", "scoped") and not _is_command_keyword(tokens[j]):
        j += 1
    return j > k + 1 and j < len(tokens) and tokens[j].start < line_end and tokens[j].text == "in"


def _line_start_offsets(code: str) -> set[int]:
    """Offsets of the first character of every line whose first character is not blank."""
    starts = set()
    if code[:1] not in ("", " ", "\t", "\n", "\r"):
        starts.add(0)
    for match in re.finditer(r"\n(?=[^ \t\r\n])", code):
        starts.add(match.start() + 1)
    return starts
