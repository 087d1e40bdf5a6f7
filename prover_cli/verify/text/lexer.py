"""A Lean 4 lexer just precise enough to decide what is code, what is a comment and what is a string.

The denylist and the statement check both read untrusted text, so they must agree with Lean about
where code is. Two rules make disagreement harmless:

- Comments are *blanked* (replaced by spaces, newlines kept) in the text that is sent to Lean, so
  Lean never sees a comment we did not see as one. If we end a comment earlier than Lean would,
  Lean simply sees the code we scanned; if we think a region is code that Lean thinks is a comment,
  we scanned more than needed. Either way every token Lean reads went through the denylist.
- Strings cannot be blanked (that would change the proof), so string lexing must match Lean's
  exactly, and until Lean itself classifies the text we refuse (`LexError`) every construct we do
  not model exactly. Modelled: plain strings (`\\`-escapes), and char literals the way Lean's
  `charLitFnAux` reads them: at a token start, `'`, then any one character (a newline included) or
  one of Lean's escapes (`\\\\ \\" \\' \\n \\t \\r \\xHH \\uHHHH`), then `'`. Refused: a string with an
  unescaped `{` (Lean may read it as an interpolated string, whose `{…}` holds code with its own
  nested strings: `s!"…"`, `m!"…"`, `throwError "…"`); raw strings (`r"…"`, `r#"…"#`); a char
  literal with an escape Lean does not know; `_` inside a numeral (`1_000`: read differently across
  Lean versions); a string or char literal directly adjacent to a numeral or an identifier
  (`2'"'`, `x"…"`, `'a'b`: where Lean's token boundaries depend on its token table); and
  unterminated strings, comments and `«…»` identifiers.

Quotes are read by Lean's token rule (`tokenFnAux`, below): a quote inside a notation token
(`f ⁻¹' s`, `f '' s`, `∑' n, f n`, `Σ' x, p x`) is no literal, and only the token table of the
environment says which tokens exist. The lexer reads a checked-in table (`tokens/`: Lean core's
quote tokens, and per pinned Mathlib commit every quote token its notation declares, extracted by
scripts/extract_mathlib_tokens.py with file and line) and applies the longest match; the verifier
picks the table of the configured Mathlib (`table_for_config`), and with none recorded only Lean
core's. Two refusals make a table that is incomplete, or larger than what is in scope (scoped
notation, a header importing less), harmless: a quote directly after a symbol that no recorded
token covers is refused (Lean's reading there depends on tokens we may not know), and so is a
recorded token whose `'` would start a char literal were the token not in scope (`⁻¹'a'`).

Identifier characters follow Lean's `isLetterLike` / `isSubScriptAlnum` exactly (ASCII letters,
`_`, most Greek except `λ Π Σ`, the letter-like block that holds `ℕ ℝ`, subscripts, and `'`, `!`,
`?` after the first character), so `λsorry` lexes as `λ` + `sorry`, as in Lean. Numerals include
`0x…`, `0b…`, `0o…` so that `0xadsorry` is `0xad` + `sorry`, as in Lean. Any character we do not know
is a one-character symbol: that can only split a token Lean would keep whole, which makes the
denylist stricter, never looser.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol, cast

from prover_cli.errors import BackendError


class TableSettings(Protocol):
    """The verify settings that pick the token table: a config.VerifyConfig. Named here, not
    imported, because config.py imports the allowlist, which imports this module."""

    mathlib_rev: str
    project_dir: str


class LexError(ValueError):
    """Text we cannot lex with certainty; callers reject it (fail closed). `offset` is 0-based."""

    def __init__(self, message: str, offset: int):
        super().__init__(message)
        self.offset = offset


class Token(NamedTuple):
    """One token (a named tuple: cheap to make, a proof can have hundreds of thousands)."""

    kind: str        # "ident", "number", "symbol", "hash" (#cmd), "string", "char"
    text: str        # the source text of the token
    start: int       # offsets into the lexed text
    end: int
    components: tuple[str, ...] = ()  # identifiers: dotted parts with «» removed


@dataclass(frozen=True)
class Lexed:
    text: str             # the original text
    code: str             # the same text with every comment replaced by spaces (newlines kept)
    tokens: list[Token]   # every token outside comments, strings and chars included

    def code_tokens(self) -> list[Token]:
        """Tokens that are code: strings and char literals excluded."""
        return [t for t in self.tokens if t.kind not in ("string", "char")]


# -- the token table ---------------------------------------------------------------------------
# Lean reads a token at each token start (leanprover/lean4 src/Lean/Parser/Basic.lean @00c1b82,
# `tokenFnAux`): `"` opens a string; `'` opens a char literal unless the next character is `'`;
# a digit a numeral; otherwise the longest match in the token table (`matchPrefix`) wins, over an
# identifier too when it is at least as long (`isToken`). So a quote inside a notation token
# (`f ⁻¹' s`, `∑' n, f n`, `Σ' x, p x`) is no literal, and only the table says which are tokens.

TOKENS_DIR = Path(__file__).parent / "tokens"


@dataclass(frozen=True)
class TokenTable:
    """The tokens with a quote inside that Lean reads whole; every other quote after a symbol is
    refused. `name` says where the tokens were recorded (it appears in every refusal)."""

    name: str
    tokens: frozenset[str]
    by_first: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)  # longest first

    def __post_init__(self) -> None:
        by_first: dict[str, list[str]] = {}
        for token in self.tokens:
            if token and not any(c.isspace() for c in token):   # a token never spans whitespace
                by_first.setdefault(token[0], []).append(token)
        object.__setattr__(self, "by_first", {c: tuple(sorted(ts, key=len, reverse=True)) for c, ts in by_first.items()})

    def longest(self, text: str, i: int) -> int | None:
        """End of the longest recorded token at `i` (Lean's longest match), or None."""
        for token in self.by_first.get(text[i], ()):
            if text.startswith(token, i):
                return i + len(token)
        return None


def _read_table(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:   # the install, not a proof, is at fault: stop the batch
        raise BackendError(f"{path}: unreadable token table of verify's lexer: {exc}",
                           hint="the package data prover_cli/verify/text/tokens/*.json must ship with prover_cli") from None


def _damaged(path: Path, what: str) -> BackendError:
    return BackendError(f"{path}: damaged token table of verify's lexer: {what}",
                        hint="the package data prover_cli/verify/text/tokens/*.json must ship with prover_cli as released")


def _table_tokens(path: Path, data: Any, mathlib: bool) -> list[dict[str, Any]]:
    """The `tokens` entries of a table read from `path`, its shape checked (a fault names the file
    and the key: the install is at fault, and every batch stops on it)."""
    if not isinstance(data, dict):
        raise _damaged(path, "not a JSON object")
    if mathlib and not isinstance(data.get("mathlib_commit"), str):
        raise _damaged(path, "`mathlib_commit` must be a string")
    if mathlib and not (isinstance(data.get("mathlib_revs", []), list)
                        and all(isinstance(r, str) for r in data.get("mathlib_revs", []))):
        raise _damaged(path, "`mathlib_revs` must be a list of strings")
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        raise _damaged(path, "`tokens` must be a list")
    for k, entry in enumerate(tokens):
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            raise _damaged(path, f"`tokens[{k}].token` must be a string")
        if mathlib and not isinstance(entry.get("scope"), str):
            raise _damaged(path, f"`tokens[{k}].scope` must be a string")
    return tokens


def core_table() -> TokenTable:
    """Lean core's tokens with a quote (tokens/lean-core.json): in every environment."""
    path = TOKENS_DIR / "lean-core.json"
    return TokenTable("the Lean core table", frozenset(t["token"] for t in _table_tokens(path, _read_table(path), False)))


def mathlib_table(rev: str) -> TokenTable | None:
    """Core plus the recorded table of the Mathlib at `rev` (a commit, or a name the table lists
    as resolving to it), `local` notation left out (it never reaches an importer); None when no
    recorded table matches."""
    core = core_table()
    for path in sorted(TOKENS_DIR.glob("mathlib-*.json")):
        data = _read_table(path)
        entries = _table_tokens(path, data, True)
        if rev and (rev == data["mathlib_commit"] or rev in data.get("mathlib_revs", ())):
            tokens = frozenset(t["token"] for t in entries if t["scope"] != "local")
            return TokenTable(f"the table of Mathlib {data['mathlib_commit'][:12]}", core.tokens | tokens)
    return None


def configured_mathlib(verify_config: TableSettings) -> str:
    """The Mathlib the REPL reads: the `mathlib` package's commit in `<verify.project_dir>/
    lake-manifest.json` when there is one (what `lake env repl` loads), else `verify.mathlib_rev`
    (what the Modal image is built from)."""
    manifest = Path(verify_config.project_dir or ".") / "lake-manifest.json"
    try:
        packages = json.loads(manifest.read_text(encoding="utf-8")).get("packages", [])
    except (OSError, ValueError, AttributeError):
        packages = []
    for package in packages if isinstance(packages, list) else []:
        if isinstance(package, dict) and package.get("name") == "mathlib" and isinstance(package.get("rev"), str):
            return package["rev"]
    return verify_config.mathlib_rev


def table_for_config(verify_config: TableSettings) -> TokenTable:
    """The table for the configured Mathlib; Lean core's alone (every quote a Mathlib token would
    cover is then refused: fail closed) when none is recorded for it."""
    rev = configured_mathlib(verify_config)
    table = mathlib_table(rev)
    if table is None:
        core = core_table()
        return TokenTable(f"the Lean core table only (none recorded for Mathlib {rev or '(unset)'})", core.tokens)
    return table


_ACTIVE: list[TokenTable] = []   # at most one element: the table `lex` reads when given none


# `verify.mathlib_rev`'s default (config.py; a test keeps the two equal): the table `lex` reads
# before a verifier has said which Mathlib it is configured with
DEFAULT_MATHLIB_REV = "v4.15.0"


def active_token_table() -> TokenTable:
    """The table `lex` reads when given none: the one a verifier set from its config, else the
    default config's."""
    if not _ACTIVE:
        _ACTIVE.append(mathlib_table(DEFAULT_MATHLIB_REV) or core_table())
    return _ACTIVE[0]


def set_token_table(table: TokenTable) -> None:
    """Make `table` the one `lex` reads by default (the verifier sets it from its config)."""
    _ACTIVE[:] = [table]


# Words whose presence anywhere in a text (strings and comments included) means it could run code
# of its own in the REPL, had a lexer gap let it through: the pool then recycles the process.
_CODE_WORDS = re.compile(r"(?<![\w.'])(run_tac|run_cmd|run_elab|run_meta|by_elab|elab|elab_rules|macro|macro_rules|"
                         r"syntax|notation|native_decide|implemented_by|extern|unsafe|initialize|builtin_initialize|"
                         r"IO|Lean|evalExpr|eval%)(?![\w'])|#eval|#exit|#print|%\[")


def text_may_run_code(text: str, table: TokenTable | None = None) -> bool:
    """Whether the process that ran `text` should be recycled, judged by the text alone: it does
    not lex; it has a string or char literal, or a quote read by the token table (what we did not
    read as code); or a word that runs code appears anywhere in it."""
    if _CODE_WORDS.search(text):
        return True
    try:
        lexed = lex(text, table)
    except LexError:
        return True
    return any(t.kind in ("string", "char") or t.text == "'" for t in lexed.tokens)


# -- character classes, after Lean 4's `Lean.isLetterLike`, `isSubScriptAlnum`, `isIdFirst/Rest` --

def is_letter_like(ch: str) -> bool:
    c = ord(ch)
    return ((0x3B1 <= c <= 0x3C9 and c != 0x3BB)                       # α-ω except λ
            or (0x391 <= c <= 0x3A9 and c != 0x3A0 and c != 0x3A3)      # Α-Ω except Π, Σ
            or 0x3CA <= c <= 0x3FB                                      # Coptic
            or 0x1F00 <= c <= 0x1FFE                                    # polytonic Greek
            or 0x2100 <= c <= 0x214F                                    # letter-like block (ℕ ℝ ℤ ℚ ℂ)
            or 0x1D49C <= c <= 0x1D59F)                                 # script/fraktur letters


def is_id_first(ch: str) -> bool:
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ch == "_" or is_letter_like(ch)


_CHAR_ESCAPES = set("\\\"'ntr")
_HEX = set("0123456789abcdefABCDEF")

# The same classes as regexes, so that runs of whitespace, identifier characters and comment or
# string bodies are consumed by the regex engine: lexing stays linear and fast on huge inputs.
_ID_FIRST_CLASS = ("A-Za-z_\u03b1-\u03ba\u03bc-\u03c9\u0391-\u039f\u03a1\u03a2\u03a4-\u03a9"
                   "\u03ca-\u03fb\u1f00-\u1ffe\u2100-\u214f\U0001d49c-\U0001d59f")
# Lean's isIdRest: isIdFirst, ASCII digits, ' ! ?, and the subscript letters and digits (isSubScriptAlnum)
_ID_REST_RUN = re.compile(f"[{_ID_FIRST_CLASS}0-9'!?\u2080-\u2089\u2090-\u209c\u1d62-\u1d6a\u2c7c]*")
_WHITESPACE_RUN = re.compile(r"[ \t\r\n]+")
_BLOCK_COMMENT_MARK = re.compile(r"/-|-/")
_STRING_STOP = re.compile(r'[\\"{]')
_NOT_NEWLINE_RUN = re.compile(r"[^\n]+")


def lex(text: str, table: "TokenTable | None" = None) -> Lexed:
    """Split Lean source into tokens and blank its comments, reading quotes by `table` (default:
    the active table, `set_token_table`). Raises LexError (see module doc)."""
    table = table or active_token_table()
    comments: list[tuple[int, int]] = []   # spans to blank, in order
    tokens: list[Token] = []
    i, n = 0, len(text)
    blank = lambda a, b: comments.append((a, b))  # noqa: E731

    def after_symbol(at: int) -> Token | None:
        """The symbol (or `#cmd`) token ending right at `at`, if any: where a quote's meaning
        depends on the token table (whitespace, comments and literals end every Lean token)."""
        last = tokens[-1] if tokens else None
        return last if last is not None and last.end == at and last.kind in ("symbol", "hash") else None

    def table_token(start: int, end: int) -> int:
        # one symbol per character, as for any symbol (the rules read symbols that way); the
        # quotes inside are not literals
        _check_table_token(text, start, end)
        tokens.extend(Token("symbol", text[k], k, k + 1) for k in range(start, end))
        return end

    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i = cast(re.Match, _WHITESPACE_RUN.match(text, i)).end()   # text[i] is whitespace: it matches
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif text.startswith("/-", i):
            end = _block_comment_end(text, i)
            blank(i, end)
            i = end
        elif ch == '"':
            if (before := after_symbol(i)) is not None:
                raise LexError(f"a string literal directly after `{before.text}` is not allowed: whether Lean "
                               "opens a string there depends on its token table (separate them with a space)", i)
            end = _string_end(text, i + 1, i)
            tokens.append(Token("string", text[i:end], i, end))
            i = end
        elif ch == "r" and _raw_string_start(text, i):
            raise LexError("raw string literals (`r\"…\"`, `r#\"…\"#`) are not allowed", i)
        elif ch == "'":
            if (before := after_symbol(i)) is not None:
                raise LexError(f"a `'` directly after `{before.text}` that no recorded token covers "
                               f"({table.name}): Lean reads it by a token table we cannot classify", i)
            if text.startswith("''", i):   # Lean: `'` then `'` is never a char literal; the table decides
                longest = table.longest(text, i)
                if longest is None:
                    raise LexError(f"`''` is not a token of {table.name}: we cannot tell how Lean reads it", i)
                i = table_token(i, longest)
            elif (char_end := _char_literal_end(text, i)) is not None:
                tokens.append(Token("char", text[i:char_end], i, char_end))
                i = char_end
            else:   # not a char literal: Lean stops with a parse error here; we keep scanning
                tokens.append(Token("symbol", ch, i, i + 1))
                i += 1
        elif ch.isascii() and ch.isdigit():
            end = _number_end(text, i)
            tokens.append(Token("number", text[i:end], i, end))
            i = end
        elif is_id_first(ch) or ch == "«":
            end, components = _ident_end(text, i)
            longer = table.longest(text, i) if ch in table.by_first else None
            if longer is not None and longer > end:   # Lean: a token at least as long as the identifier wins
                i = table_token(i, longer)
            else:
                tokens.append(Token("ident", text[i:end], i, end, components))
                i = end
        elif ch == "#" and i + 1 < n and (is_id_first(text[i + 1]) or text[i + 1] == "«"):
            end, components = _ident_end(text, i + 1)
            tokens.append(Token("hash", text[i:end], i, end, components))
            i = end
        elif ch in table.by_first and (longest := table.longest(text, i)) is not None:
            i = table_token(i, longest)
        else:
            tokens.append(Token("symbol", ch, i, i + 1))
            i += 1
    _check_literal_neighbours(tokens)
    return Lexed(text=text, code=_blanked(text, comments), tokens=tokens)


def _check_table_token(text: str, start: int, end: int) -> None:
    """A recorded token with a quote inside, read whole as Lean reads it. Refused where Lean would
    read a char literal instead if the token were not in scope (`⁻¹'a'` without Set notation is
    `⁻¹` then `'a'`): scoped notation, a header that imports less, or a table that records more
    than Lean has must never change where a literal starts."""
    for k in range(start, end):
        if text[k] == "'" and not text.startswith("''", k) and not (k > 0 and text[k - 1] == "'"):
            try:
                literal = _char_literal_end(text, k)
            except LexError:
                literal = k
            if literal is not None:
                raise LexError(f"`{text[start:end]}` followed by `{text[end:literal]}`: Lean reads "
                               f"`{text[k:literal]}` as a char literal unless the token `{text[start:end]}` "
                               "is in scope (separate them with a space)", k)


def _check_literal_neighbours(tokens: list[Token]) -> None:
    """A string or char literal touching a numeral or an identifier (`2'"'`, `x"…"`, `'a'b`) is
    refused: whether Lean reads one token or two there depends on its token table."""
    for k, token in enumerate(tokens):
        if token.kind not in ("string", "char"):
            continue
        before = tokens[k - 1] if k > 0 else None
        after = tokens[k + 1] if k + 1 < len(tokens) else None
        for other in (before, after):
            if other is not None and other.kind in ("number", "ident") and (
                    other.end == token.start or other.start == token.end):
                raise LexError(f"a {token.kind} literal directly next to `{other.text[:20]}` is not allowed "
                               "(separate them with a space)", token.start)


def _blanked(text: str, comments: list[tuple[int, int]]) -> str:
    """`text` with every span in `comments` replaced by spaces, newlines kept."""
    pieces, last = [], 0
    for a, b in comments:
        pieces.append(text[last:a])
        pieces.append(_NOT_NEWLINE_RUN.sub(lambda run: " " * len(run.group()), text[a:b]))
        last = b
    pieces.append(text[last:])
    return "".join(pieces)


def _block_comment_end(text: str, start: int) -> int:
    """End offset of the nested `/- … -/` comment starting at `start` (doc comments included)."""
    depth, i = 1, start + 2
    while True:
        mark = _BLOCK_COMMENT_MARK.search(text, i)
        if mark is None:
            raise LexError("unterminated comment `/-` (no matching `-/`)", start)
        i = mark.end()
        depth += 1 if mark.group() == "/-" else -1
        if depth == 0:
            return i


def _string_end(text: str, i: int, start: int) -> int:
    n = len(text)
    while i < n:
        stop = _STRING_STOP.search(text, i)
        if stop is None:
            break
        i = stop.start()
        if text[i] == "\\":
            i += 2          # any escape consumes the next character, `\` + newline (a gap) included
        elif text[i] == '"':
            return i + 1
        else:
            raise LexError("a string literal containing `{` is not allowed (Lean may read it as an "
                           "interpolated string, whose `{…}` parts are code)", start)
    raise LexError("unterminated string literal", start)


def _raw_string_start(text: str, i: int) -> bool:
    # `r"…"` or `r#…#"…"#…#`. The lexer only looks at token starts (`attr"…"` never gets here:
    # the identifier ate the `r`), and a token start after a numeral counts, as in Lean (`2r"…"`).
    j = i + 1
    while j < len(text) and text[j] == "#":
        j += 1
    return j < len(text) and text[j] == '"'


def _char_literal_end(text: str, i: int) -> int | None:
    """Lean's `charLitFnAux` at a token start: `'`, one character (any, a newline included) or an
    escape, `'`. `''` and a `'` not closed after one character are not char literals (Lean: a
    parse error; we take a symbol and keep scanning, which can only scan more). An escape Lean
    does not know is refused."""
    n = len(text)
    if i + 1 >= n or text[i + 1] == "'":
        return None
    if text[i + 1] != "\\":
        return i + 3 if i + 2 < n and text[i + 2] == "'" else None
    if i + 3 < n and text[i + 2] in _CHAR_ESCAPES and text[i + 3] == "'":
        return i + 4
    if text.startswith("x", i + 2) and all(c in _HEX for c in text[i + 3:i + 5]) and text[i + 5:i + 6] == "'":
        return i + 6
    if text.startswith("u", i + 2) and all(c in _HEX for c in text[i + 3:i + 7]) and text[i + 7:i + 8] == "'":
        return i + 8
    raise LexError("a char literal with an escape Lean does not read as one character", i)


def _number_end(text: str, i: int) -> int:
    n = len(text)
    if text[i] == "0" and i + 1 < n and text[i + 1] in "xXbBoO":
        digits = {"x": _HEX, "b": set("01"), "o": set("01234567")}[text[i + 1].lower()]
        j = i + 2
        while j < n and text[j] in digits:
            j += 1
        if j > i + 2:
            return j
        return i + 1  # `0x` with no digits: Lean errors; we take `0` and lex `x…` as an identifier
    j = i
    while j < n and text[j].isascii() and text[j].isdigit():
        j += 1
    if j < n and text[j] == "_":
        raise LexError("`_` inside or right after a numeral (`1_000`) is not allowed: Lean versions read "
                       "it differently", i)
    if j + 1 < n and text[j] == "." and text[j + 1].isascii() and text[j + 1].isdigit():
        j += 1
        while j < n and text[j].isascii() and text[j].isdigit():
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k].isascii() and text[k].isdigit():
            while k < n and text[k].isascii() and text[k].isdigit():
                k += 1
            j = k
    return j


def _ident_end(text: str, i: int) -> tuple[int, tuple[str, ...]]:
    """A dotted identifier `a.b.«c d»` starting at `i`; returns its end and its parts."""
    n = len(text)
    components = []
    while True:
        if text[i] == "«":
            close = text.find("»", i + 1)
            if close < 0:
                raise LexError("unterminated `«` identifier", i)
            components.append(text[i + 1:close])
            i = close + 1
        else:
            j = cast(re.Match, _ID_REST_RUN.match(text, i + 1)).end()   # `*`: it always matches
            components.append(text[i:j])
            i = j
        if i + 1 < n and text[i] == "." and (is_id_first(text[i + 1]) or text[i + 1] == "«"):
            i += 1
            continue
        return i, tuple(components)


def line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and 0-based column of `offset`, as Lean reports positions."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return line, col
