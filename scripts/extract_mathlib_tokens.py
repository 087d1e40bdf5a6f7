#!/usr/bin/env python3
"""Record the notation tokens of a Mathlib checkout that contain a quote, for verify's lexer.

    python scripts/extract_mathlib_tokens.py \\
        --source mathlib=/path/to/mathlib4.git@9837ca9d65d9de6fad1ef4381750ca688774e608 \\
        --source batteries=/path/to/batteries.git@e8dc5fc16c625fc4fe08f42d625523275ddbbb4b \\
        --revs v4.15.0 --resolved-by "GasStationManager/SafeVerify@577e953 lake-manifest.json" \\
        --out prover_cli/verify/text/tokens/

A `--source` is NAME=PATH[@COMMIT]: a bare git directory (or any git directory) read at COMMIT
with `git cat-file`, or a checked-out tree read from disk when no COMMIT is given. The first source
must be Mathlib: the table is written as `mathlib-<its commit>.json` and keyed by that commit;
`--revs` lists the revision names (tags, branches) that resolve to it, with `--resolved-by`
saying where that resolution was read.

What counts as a declared token. Lean's token table holds the atoms of every syntax declaration
in scope: the string literals of `notation`, `notation3`, `infix[l|r]`, `prefix`, `postfix`,
`syntax`, `macro`, `elab` and `binder_predicate` commands before their `=>` (for `syntax`: the
whole command), and the `symbol "…"` / `leading_parser` / `trailing_parser` atoms of parsers
written in Lean, each trimmed as `symbolNoAntiquot` trims it (leanprover/lean4
src/Lean/Parser/Basic.lean @00c1b82). Every such atom is scanned; the table keeps those that
contain `'` or `"` (the only ones that change how the lexer classifies a quote: a quote-free token
cannot swallow one) together with the file and line that declare them and their scope: `local`
notation never reaches an importer's token table and is recorded but marked so; `scoped` notation
is in the table only after `open NS`. `&"…"` atoms are non-reserved (no token) and are skipped.
Atoms with whitespace inside are recorded too; the lexer never matches them (a token never spans
whitespace in the text it reads), which can only refuse more.

Files under test, script and archive folders (`NOT_LIBRARY`) are skipped: no `import Mathlib`
reaches them. Comments are skipped as Lean skips them (nested `/- -/`, `--` to the end of the line), so a
commented-out `notation` declares nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

FORMAT = 1
# Folders no `import` of the library reaches (tests, scripts, the archive): their notation is not
# in an importer's token table.
NOT_LIBRARY = ("MathlibTest/", "test/", "Test/", "tests/", "scripts/", "Archive/", "Counterexamples/", "docs/",
               "BatteriesTest/", "AesopTest/", "examples/", "Examples/")

# A command that declares atoms, at the start of a line, after attributes and modifiers.
COMMAND = re.compile(
    r"^(?:@\[[^\]\n]*\]\s*)?(?P<mods>(?:(?:private|protected|noncomputable|local|scoped(?:\[[^\]\n]*\])?)\s+)*)"
    r"(?P<kw>notation3|notation|infixl|infixr|infix|prefix|postfix|syntax|macro|elab|binder_predicate)\b",
    re.M)
PARSER = re.compile(r"\b(leading_parser|trailing_parser)\b")
SYMBOL_CALL = re.compile(r"\b(?:symbol|nonReservedSymbol|unicodeSymbol)\s*$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def decode_string(body: str) -> str:
    """A Lean string literal's contents (between the quotes) decoded."""
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        if nxt == "x":
            out.append(chr(int(body[i + 2:i + 4], 16)))
            i += 4
        elif nxt == "u":
            out.append(chr(int(body[i + 2:i + 6], 16)))
            i += 6
        elif nxt == "\n":   # a gap: `\` newline, then whitespace, is dropped
            i += 2
            while i < len(body) and body[i] in " \t\r\n":
                i += 1
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def scan(text: str) -> tuple[str, list[tuple[int, int, str]]]:
    """(text with comments and string contents blanked, [(start, end, decoded string) …]).

    Blanking keeps offsets, so a command regex run over the result never matches inside a comment
    or a string. Char literals are read so that `'"'` does not open a string."""
    out = list(text)
    strings = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/-", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/-", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("-/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out[i:j] = [c if c == "\n" else " " for c in text[i:j]]
            i = j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            strings.append((i, j + 1, decode_string(text[i + 1:j])))
            out[i + 1:j] = [c if c == "\n" else " " for c in text[i + 1:j]]
            i = j + 1
        elif text[i] == "'" and i + 2 < n and text[i + 1] != "'" and (
                text[i + 2] == "'" or text[i + 1] == "\\"):
            # a char literal (`'"'`, `'\\''`): skip it whole; a `'` inside an identifier (`h'`)
            # is preceded by an identifier character and never reaches here with this shape
            # unless it closes one, which the identifier case below consumes first
            j = i + 2 if text[i + 1] != "\\" else text.find("'", i + 3)
            i = (j + 1) if j > 0 else i + 1
        elif text[i].isalnum() or text[i] == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "_'!?." or ord(text[j]) > 127 and text[j].isalpha()):
                j += 1
            i = j
        else:
            i += 1
    return "".join(out), strings


def _top_level_arrow(blanked: str, start: int, end: int) -> int:
    """Offset of the first `=>` at bracket depth 0 in blanked[start:end], else `end`."""
    depth = 0
    for k in range(start, end):
        ch = blanked[k]
        if ch in "([{⟨":
            depth += 1
        elif ch in ")]}⟩":
            depth = max(0, depth - 1)
        elif depth == 0 and blanked.startswith("=>", k):
            return k
    return end


def _command_end(blanked: str, start: int) -> int:
    """A command runs until the next line that starts in column 0 with a non-space character."""
    match = re.compile(r"\n(?=\S)").search(blanked, start)
    return match.start() if match else len(blanked)


def atoms(text: str) -> list[tuple[str, int, str]]:
    """(atom, 1-based line, scope) for every atom declared in one Lean file; scope is `global`,
    `scoped` or `local`."""
    blanked, strings = scan(text)
    found: list[tuple[str, int, str]] = []

    def strings_in(a: int, b: int, scope: str) -> None:
        for s_start, s_end, value in strings:
            if a <= s_start and s_end <= b and blanked[s_start - 1:s_start] != "&":
                atom = value.strip()
                if atom:
                    found.append((atom, text.count("\n", 0, s_start) + 1, scope))

    for match in COMMAND.finditer(blanked):
        mods = match.group("mods")
        scope = "local" if "local" in mods else "scoped" if "scoped" in mods else "global"
        end = _command_end(blanked, match.end())
        if match.group("kw") != "syntax":
            end = _top_level_arrow(blanked, match.end(), end)
        strings_in(match.end(), end, scope)
    for match in PARSER.finditer(blanked):
        strings_in(match.end(), _command_end(blanked, match.end()), "global")
    for s_start, _, value in strings:
        if SYMBOL_CALL.search(blanked, 0, s_start) and value.strip():
            found.append((value.strip(), text.count("\n", 0, s_start) + 1, "global"))
    return sorted(set(found), key=lambda a: (a[1], a[0]))


# -- reading a source ----------------------------------------------------------------------------

def read_source(path: str, commit: str | None) -> tuple[str, dict[str, str]]:
    """(commit, {relative path: text}) for every `.lean` file of a git directory at `commit`, or of
    a checked-out tree when `commit` is None."""
    if commit is None:
        root = Path(path)
        try:
            head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            head = "unknown"
        return head, {str(p.relative_to(root)): p.read_text(encoding="utf-8")
                      for p in sorted(root.rglob("*.lean"))
                      if ".lake" not in p.parts and not str(p.relative_to(root)).startswith(NOT_LIBRARY)}
    git = ["git", f"--git-dir={path}"]
    full = subprocess.run(git + ["rev-parse", "--verify", f"{commit}^{{commit}}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    names = subprocess.run(git + ["ls-tree", "-r", "--name-only", full], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    names = [name for name in names if name.endswith(".lean") and not name.startswith(".lake/")]
    names = [name for name in names if not name.startswith(NOT_LIBRARY)]
    batch = subprocess.run(git + ["cat-file", "--batch"], input="".join(f"{full}:{name}\n" for name in names).encode(),
                           capture_output=True, check=True).stdout
    files, pos = {}, 0
    for name in names:
        header_end = batch.index(b"\n", pos)
        size = int(batch[pos:header_end].split()[2])
        files[name] = batch[header_end + 1:header_end + 1 + size].decode("utf-8")
        pos = header_end + 1 + size + 1
    return full, files


def quote_tokens(package: str, files: dict[str, str]) -> tuple[list[dict], int]:
    rows, scanned = [], 0
    for name, text in files.items():
        for atom, line, scope in atoms(text):
            scanned += 1
            if "'" in atom or '"' in atom:
                rows.append({"token": atom, "package": package, "file": name, "line": line, "scope": scope})
    return rows, scanned


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", action="append", required=True, help="NAME=PATH[@COMMIT]; Mathlib first")
    parser.add_argument("--revs", nargs="*", default=[], help="revision names that resolve to Mathlib's commit")
    parser.add_argument("--resolved-by", default="", help="where the revision names were resolved")
    parser.add_argument("--note", default="", help="a sentence recorded in the table")
    parser.add_argument("--out", required=True, help="directory for mathlib-<commit>.json")
    args = parser.parse_args(argv)
    packages, tokens, scanned = {}, [], 0
    for spec in args.source:
        name, _, rest = spec.partition("=")
        path, commit = rest.rsplit("@", 1) if "@" in rest else (rest, "")
        if not name or not path:
            parser.error(f"--source {spec!r}: expected NAME=PATH[@COMMIT]")
        full, files = read_source(path, commit or None)
        packages[name] = {"commit": full, "lean_files": len(files)}
        rows, count = quote_tokens(name, files)
        tokens += rows
        scanned += count
    mathlib = next(iter(packages))
    table = {
        "format": FORMAT,
        "mathlib_commit": packages[mathlib]["commit"],
        "mathlib_revs": args.revs,
        "revs_resolved_by": args.resolved_by,
        "packages": packages,
        "atoms_scanned": scanned,
        "note": args.note,
        "tokens": sorted(tokens, key=lambda t: (t["token"], t["package"], t["file"], t["line"])),
    }
    out = Path(args.out) / f"mathlib-{table['mathlib_commit']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{out}: {len(tokens)} tokens with a quote, of {scanned} atoms in {sum(p['lean_files'] for p in packages.values())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
