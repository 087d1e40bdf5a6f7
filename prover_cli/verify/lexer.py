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

Identifier characters follow Lean's `isLetterLike` / `isSubScriptAlnum` exactly (ASCII letters,
`_`, most Greek except `λ Π Σ`, the letter-like block that holds `ℕ ℝ`, subscripts, and `'`, `!`,
`?` after the first character), so `λsorry` lexes as `λ` + `sorry`, as in Lean. Numerals include
`0x…`, `0b…`, `0o…` so that `0xadsorry` is `0xad` + `sorry`, as in Lean. Any character we do not know
is a one-character symbol: that can only split a token Lean would keep whole, which makes the
denylist stricter, never looser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple


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


# -- character classes, after Lean 4's `Lean.isLetterLike`, `isSubScriptAlnum`, `isIdFirst/Rest` --

def is_letter_like(ch: str) -> bool:
    c = ord(ch)
    return ((0x3B1 <= c <= 0x3C9 and c != 0x3BB)                       # α-ω except λ
            or (0x391 <= c <= 0x3A9 and c != 0x3A0 and c != 0x3A3)      # Α-Ω except Π, Σ
            or 0x3CA <= c <= 0x3FB                                      # Coptic
            or 0x1F00 <= c <= 0x1FFE                                    # polytonic Greek
            or 0x2100 <= c <= 0x214F                                    # letter-like block (ℕ ℝ ℤ ℚ ℂ)
            or 0x1D49C <= c <= 0x1D59F)                                 # script/fraktur letters


def is_subscript_alnum(ch: str) -> bool:
    c = ord(ch)
    return (0x2080 <= c <= 0x2089 or 0x2090 <= c <= 0x209C or 0x1D62 <= c <= 0x1D6A
            or c == 0x2C7C)


def is_id_first(ch: str) -> bool:
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z") or ch == "_" or is_letter_like(ch)


def is_id_rest(ch: str) -> bool:
    return (is_id_first(ch) or ch.isascii() and ch.isdigit() or ch in "'!?"
            or is_subscript_alnum(ch))


_CHAR_ESCAPES = set("\\\"'ntr")
_HEX = set("0123456789abcdefABCDEF")

# The same classes as regexes, so that runs of whitespace, identifier characters and comment or
# string bodies are consumed by the regex engine: lexing stays linear and fast on huge inputs.
_ID_FIRST_CLASS = ("A-Za-z_\u03b1-\u03ba\u03bc-\u03c9\u0391-\u039f\u03a1\u03a2\u03a4-\u03a9"
                   "\u03ca-\u03fb\u1f00-\u1ffe\u2100-\u214f\U0001d49c-\U0001d59f")
_ID_REST_RUN = re.compile(f"[{_ID_FIRST_CLASS}0-9'!?\u2080-\u2089\u2090-\u209c\u1d62-\u1d6a\u2c7c]*")
_WHITESPACE_RUN = re.compile(r"[ \t\r\n]+")
_BLOCK_COMMENT_MARK = re.compile(r"/-|-/")
_STRING_STOP = re.compile(r'[\\"{]')
_NOT_NEWLINE_RUN = re.compile(r"[^\n]+")


def lex(text: str) -> Lexed:
    """Split Lean source into tokens and blank its comments. Raises LexError (see module doc)."""
    comments: list[tuple[int, int]] = []   # spans to blank, in order
    tokens: list[Token] = []
    i, n = 0, len(text)
    blank = lambda a, b: comments.append((a, b))  # noqa: E731

    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i = _WHITESPACE_RUN.match(text, i).end()
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
            end = _string_end(text, i + 1, i)
            tokens.append(Token("string", text[i:end], i, end))
            i = end
        elif ch == "r" and _raw_string_start(text, i):
            raise LexError("raw string literals (`r\"…\"`, `r#\"…\"#`) are not allowed", i)
        elif ch == "'" and (end := _char_literal_end(text, i)) is not None:
            tokens.append(Token("char", text[i:end], i, end))
            i = end
        elif ch.isascii() and ch.isdigit():
            end = _number_end(text, i)
            tokens.append(Token("number", text[i:end], i, end))
            i = end
        elif is_id_first(ch) or ch == "«":
            end, components = _ident_end(text, i)
            tokens.append(Token("ident", text[i:end], i, end, components))
            i = end
        elif ch == "#" and i + 1 < n and (is_id_first(text[i + 1]) or text[i + 1] == "«"):
            end, components = _ident_end(text, i + 1)
            tokens.append(Token("hash", text[i:end], i, end, components))
            i = end
        else:
            tokens.append(Token("symbol", ch, i, i + 1))
            i += 1
    _check_literal_neighbours(tokens)
    return Lexed(text=text, code=_blanked(text, comments), tokens=tokens)


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
            j = _ID_REST_RUN.match(text, i + 1).end()
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
