"""The identifiers and syntax forms of the kernel checker's Lean files (prover_cli/verify/kernel/checker),
as tests/test_checker_evidence.py checks them against tests/fixtures/checker_evidence.json.

A token is a dotted identifier chain (`Quot.sound`, `.opaqueInfo`, `ci.type`), a name literal
(`` `propext ``), a keyword, or one of the symbol forms in SYMBOLS. A chain whose first component
is a name the file binds itself (a `def`, a parameter, a `let`/`for`/`fun`/pattern variable:
the fixture's `own` list) gives one token per field or function applied after it (`sub.imports.map`
-> `.imports`, `.map`). Comments are dropped; a string literal's text is dropped, an `s!` string's `{...}`
holes are code.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKER_DIR = Path(__file__).resolve().parent.parent / "prover_cli" / "verify" / "kernel" / "checker"
# Which Lean files each supported tag compiles: Main.lean, lakefile.lean and one replay file,
# copied to ProverReplay.lean by the kernel image's build (prover_cli/on_modal/images.py).
REPLAY_FILE = {"v4.9.0": "replay/core.lean", "v4.14.0": "replay/core.lean", "v4.15.0": "replay/core.lean",
               "v4.20.0": "replay/prime.lean", "v4.21.0": "replay/prime.lean"}
TAGS = tuple(REPLAY_FILE)

IDENT_CHAR = r"A-Za-z0-9_'!?\u03b1-\u03c9\u2080-\u2089"
CHAIN = re.compile(rf"`?\.?[A-Za-z_\u03b1-\u03c9][{IDENT_CHAR}]*(?:\.[A-Za-z_\u03b1-\u03c9][{IDENT_CHAR}]*)*")
# Symbol forms the files may use; each one present needs evidence like an identifier.
SYMBOLS = ("←", ":=", "=>", "·", "<|", "!=", "==", "&&", "||", "++", "::", "#[", "∉", "×", "→",
           " / ", "s!\"", "\\\"", "\\t", "(σ := σ)", "fun\n", "| _ =>", "let some", "if let some", "| [] =>",
           "let [", "match ← ", "let (", "@[", " > ", " + ")


def strip_comments(text: str) -> str:
    text = re.sub(r"/-.*?-/", " ", text, flags=re.S)
    return re.sub(r"--[^\n]*", " ", text)


def split_strings(text: str) -> tuple[str, list[str]]:
    """(the code with every string literal's text removed, the symbol forms the literals used)."""
    forms: list[str] = []

    def repl(match: re.Match) -> str:
        interpolated, body = match.group(1), match.group(2)
        if "\\\"" in body:
            forms.append("\\\"")
        if "\\t" in body:
            forms.append("\\t")
        if interpolated:
            forms.append("s!\"")
            return " " + " ".join(re.findall(r"\{([^{}]*)\}", body)) + " "
        return ' "" '
    code = re.sub(r'(s!)?"((?:[^"\\]|\\.)*)"', repl, text)
    return code, forms


def tokens(text: str, own: set[str]) -> set[str]:
    """Every token of one Lean file's text (see the module docstring)."""
    code, forms = split_strings(strip_comments(text))
    found = set(forms)
    for symbol in SYMBOLS:
        if symbol in code and symbol not in ("\\\"", "\\t", "s!\""):
            found.add(symbol)
    for chain in CHAIN.findall(code):
        if chain.startswith("`"):
            found.add(chain)
            continue
        lead = chain.startswith(".")
        parts = chain.lstrip(".").split(".")
        if not lead and parts[0] in own:
            found.update("." + part for part in parts[1:])   # each field or function applied
            continue
        found.add(("." if lead else "") + ".".join(parts))
    return found


def lean_files(tag: str) -> list[str]:
    """The Lean files the build compiles at `tag` (lakefile.toml aside)."""
    return ["Main.lean", REPLAY_FILE[tag]]


TOML_TOKEN = re.compile(r"(?m)^\s*(\[\[?[A-Za-z_]+\]\]?|[A-Za-z_]+\s*=)")


def toml_tokens(text: str) -> set[str]:
    """The tables and keys of a lakefile.toml (`[[require]]`, `rev =`), comments dropped."""
    code = re.sub(r"#[^\n]*", "", text)
    return {re.sub(r"\s*=$", " =", t) for t in TOML_TOKEN.findall(code)}


def occurs(token: str, line: str) -> bool:
    """Whether `token` occurs in `line` as a whole token (not inside a longer identifier)."""
    if token == "fun\n":
        return re.search(r"(?<![A-Za-z0-9_])fun\s*$", line) is not None
    if not token[:1].isalnum() and token[:1] not in "._`":
        return token.replace("\n", "") in line or (token == "fun\n" and line.rstrip().endswith("fun"))
    pattern = (r"(?<![" + IDENT_CHAR + r"])" if token[0] not in "." else r"") + re.escape(token) \
        + (r"(?![" + IDENT_CHAR + r"])" if token[-1] not in "." else "")
    return re.search(pattern, line) is not None
