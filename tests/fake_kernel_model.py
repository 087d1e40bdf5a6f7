"""The tiny model of a Lean module shared by the `lean -o` and SafeVerify stand-ins. NOT Lean.

`tests/fake_lean.py` "elaborates" a file into this model and writes it as a stand-in `.olean`;
`tests/fake_safe_verify.py` reads two of them and re-checks the second against the first the way
SafeVerify does, with `typecheck` below as its kernel. Nothing here says anything about real
proofs: it exists so that the kernel stage's plumbing, verdict mapping and fail-closed paths can
be tested where no Lean can be installed.

A module: `imports` (Lean adds `Init` to every non-`prelude` file's imports, so the stand-in
does too), and `constants`, each {name, kind (theorem/axiom/def/opaque), levelParams, type, value,
unsafe, partial}. `type` is the declaration's signature with whitespace collapsed (binders, then
`: T`), prefixed by the `variable` binders in scope; `value` is the text after `:=`.

The kernel (`typecheck`): what type-checks in this model, and nothing else,
- an axiom (the kernel accepts any axiom: the axiom check is separate);
- a theorem/def whose value has none of the error markers (`fake_error`, `fake_kernel_error`),
  and, when its type is *closed* — no binders and a comparison of natural-number arithmetic
  (`2 + 2 = 5`), `True` or `False` — that is true, unless the value uses `sorry` or an axiom of
  the module (those prove anything, as in Lean); any other type (binders, Mathlib notation,
  anything that is not closed arithmetic) is checked by the markers only: the model cannot
  decide it, and accepts there exactly what the REPL stand-in's honest mode accepts.
Axioms (`axioms_of`): a value that is not empty depends on Lean's three standard axioms (as the
REPL stand-in says for every theorem), plus `sorryAx` when it uses `sorry`, plus every axiom of
the module it mentions (transitively), plus NAME for each `fake_axiom_NAME` marker (`__` = `.`).
"""

from __future__ import annotations

import json
import re

# The first bytes of an .olean are "olean", a version byte, the Lean githash (42 bytes, zero
# padded) and the base address (lean4 src/library/module.cpp at 636afc654ad9, `olean_header`). The stand-in
# writes a githash no Lean has, so a real Lean would refuse its files.
OLEAN_HEADER = b"olean" + bytes([1]) + b"prover-fake-lean-stand-in".ljust(42, b"\0") + bytes(8)
STANDARD_AXIOMS = ("propext", "Classical.choice", "Quot.sound")
ERROR_MARKERS = ("fake_error", "fake_kernel_error")

COMMENT = re.compile(r"--[^\n]*|/-.*?-/", re.DOTALL)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
SORRY = re.compile(r"(?<![A-Za-z0-9_.'])sorry(?![A-Za-z0-9_'!?])")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.'!?]*")
MARKER = re.compile(r"\bfake_[A-Za-z0-9_.]+")
DECL = re.compile(r"(?m)^(?P<mods>(?:@\[[^\]\n]*\]\s*)?(?:(?:private|protected|noncomputable|unsafe|partial)\s+)*)"
                  r"(?P<kw>theorem|lemma|axiom|def|abbrev|opaque|instance)\s+(?P<name>[^\s(:{\[.]+(?:\.[^\s(:{\[.]+)*)"
                  r"(?:\.\{(?P<univ>[^}]*)\})?")
COMMAND = re.compile(r"(?m)^(?:namespace|end|section|open|set_option|variable|universe|#|import|attribute|"
                     r"noncomputable\s+section)\b")
SCOPE = re.compile(r"(?m)^(?P<kw>namespace|section|end|variable)\b(?P<rest>[^\n]*)")


def blank_comments(text: str) -> str:
    return COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


# --------------------------------------------------------------------------------------------
# Elaboration (the `lean -o` stand-in)
# --------------------------------------------------------------------------------------------

def parse_module(text: str) -> tuple[list[str], list[dict], list[tuple[int, str]]]:
    """(imports, constants, errors as (line, message)) of a source file in the model."""
    code = blank_comments(text)
    imports = ["Init"]
    for line in code.splitlines():
        match = re.match(r"\s*import\s+(\S+)", line)
        if match:
            imports.append(match.group(1))
    errors: list[tuple[int, str]] = []
    constants: list[dict] = []
    starts = sorted([(m.start(), "decl", m) for m in DECL.finditer(code)]
                    + [(m.start(), "cmd", m) for m in COMMAND.finditer(code)], key=lambda t: t[0])
    scopes = [("root", "", [])]   # (kind, name, variable binders)
    scope_events = {m.start(): m for m in SCOPE.finditer(code)}
    seen: set[str] = set()
    for k, (at, what, match) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(code)
        if what == "cmd":
            event = scope_events.get(at)
            if event is not None:
                kw, rest = event.group("kw"), event.group("rest").strip()
                if kw in ("namespace", "section"):
                    scopes.append((kw, rest, []))
                elif kw == "end" and len(scopes) > 1:
                    scopes.pop()
                elif kw == "variable":
                    scopes[-1][2].append(" ".join(rest.split()))
            continue
        kw, name = match.group("kw"), match.group("name")
        mods = match.group("mods") or ""
        prefix = ".".join(n for kind, n, _ in scopes if kind == "namespace" and n)
        full = f"{prefix}.{name}" if prefix else name
        line = code[:at].count("\n") + 1
        body = code[match.end():end]
        signature, sep, value = body.partition(":=")
        binders = [b for _, _, bs in scopes for b in bs]
        type_text = " ".join([*binders, " ".join(signature.split())]).strip()
        if full in seen:
            errors.append((line, f"'{full}' has already been declared"))
            continue
        seen.add(full)
        constants.append({
            "name": full,
            "kind": {"lemma": "theorem", "abbrev": "def", "instance": "def"}.get(kw, kw),
            "levelParams": [u.strip() for u in (match.group("univ") or "").split(",") if u.strip()],
            "type": type_text,
            "value": " ".join(value.split()) if sep else None,
            "unsafe": "unsafe" in mods.split(),
            "partial": "partial" in mods.split(),
            "line": line,
        })
    return imports, constants, errors


def elaboration_errors(constants: list[dict]) -> list[tuple[int, str]]:
    """What Lean would report while elaborating these constants, in the model."""
    errors = []
    env: dict[str, dict] = {}
    for const in constants:
        value = const["value"] or ""
        markers = set(MARKER.findall(value)) | set(MARKER.findall(const["type"]))
        if "fake_error" in markers:
            errors.append((const["line"], "unsolved goals\n⊢ Nat"))
        elif "fake_kernel_error" in markers:
            errors.append((const["line"], f"(kernel) declaration has metavariables '{const['name']}'"))
        elif const["kind"] != "axiom":
            ok, _ = typecheck(const, env)
            if not ok:
                errors.append((const["line"], "unsolved goals\n⊢ False"))
        env[const["name"]] = const
    return errors


def uses_sorry(const: dict) -> bool:
    return bool(SORRY.search(STRING.sub('""', const.get("value") or "")))


# --------------------------------------------------------------------------------------------
# The stand-in .olean
# --------------------------------------------------------------------------------------------

def unsafe_rec_shims(constants: list[dict]) -> list[dict]:
    """The constants with Lean's compiler shim after each recursive `def`: `f._unsafe_rec`, the
    same type and value, safety `partial` (the compiler's implementation of a structurally or
    well-founded recursive definition; issue #39, and SafeVerify 93cb93a "Ignore compiler-generated
    _unsafe_rec in partiality check"). A `partial`/`unsafe` def gets none here (its own flags say it)."""
    out = []
    for const in constants:
        out.append(const)
        if const["kind"] == "def" and not const["unsafe"] and not const["partial"] \
                and const["name"] in mentions(const.get("value") or ""):
            out.append({**const, "name": f"{const['name']}._unsafe_rec", "partial": True})
    return out


def olean_bytes(module: str, imports: list[str], constants: list[dict]) -> bytes:
    payload = {"module": module, "imports": imports,
               "constants": [{k: v for k, v in c.items() if k != "line"} for c in unsafe_rec_shims(constants)]}
    return OLEAN_HEADER + json.dumps(payload, ensure_ascii=False).encode("utf-8")


class BadHeader(Exception):
    pass


class Corrupt(Exception):
    """A payload after a valid header that is not a module: a real reader would follow garbage
    pointers in the compacted region; the stand-in checker dies of a signal instead."""


def read_olean(data: bytes) -> dict:
    if len(data) < len(OLEAN_HEADER) or not data.startswith(OLEAN_HEADER):
        raise BadHeader()
    try:
        module = json.loads(data[len(OLEAN_HEADER):].decode("utf-8"))
        assert isinstance(module, dict) and isinstance(module["imports"], list)
        for c in module["constants"]:
            assert isinstance(c["name"], str) and c["kind"] in ("theorem", "axiom", "def", "opaque")
            assert isinstance(c["type"], str) and (c["value"] is None or isinstance(c["value"], str))
            assert isinstance(c["levelParams"], list) and isinstance(c["unsafe"], bool)
            assert isinstance(c["partial"], bool)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AssertionError):
        raise Corrupt() from None
    return module


# --------------------------------------------------------------------------------------------
# The kernel of the model
# --------------------------------------------------------------------------------------------

def typecheck(const: dict, env: dict[str, dict]) -> tuple[bool, str]:
    """(does it type-check in the model, the type the value has when it does not)."""
    if const["kind"] == "axiom":
        return bool(const["type"].strip()), "?"
    value = const.get("value")
    if value is None:
        return False, "(no value)"
    if set(MARKER.findall(value)) & set(ERROR_MARKERS):
        return False, "fake_kernel: a term with an error"
    if closed_truth(const["type"]) is not False:
        return True, ""
    proves_anything = uses_sorry(const) or any(env.get(name, {}).get("kind") == "axiom" for name in mentions(value))
    if proves_anything:
        return True, ""
    return False, "True"


def axioms_of(name: str, env: dict[str, dict], seen: set | None = None) -> set[str]:
    seen = set() if seen is None else seen
    if name in seen or name not in env:
        return set()
    seen.add(name)
    const = env[name]
    if const["kind"] == "axiom":
        return {name}
    value = const.get("value") or ""
    axioms = set(STANDARD_AXIOMS) if value.strip() else set()
    if uses_sorry(const):
        axioms.add("sorryAx")
    axioms |= {m[len("fake_axiom_"):].replace("__", ".") for m in MARKER.findall(value)
               if m.startswith("fake_axiom_")}
    for used in mentions(value):
        axioms |= axioms_of(used, env, seen)
    return axioms


def mentions(value: str) -> set[str]:
    """The names a value may refer to: each identifier and its dotted prefixes (`ax.elim` -> `ax`)."""
    names = set()
    for ident in IDENT.findall(value):
        parts = ident.split(".")
        names.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return names


def _is_closed(type_text: str) -> bool:
    """No binders: the signature is `: T`."""
    return type_text.startswith(":")


_RELATIONS = ("≤", "≥", "≠", "<=", ">=", "!=", "=", "<", ">")


def closed_truth(type_text: str) -> bool | None:
    """The truth of a closed `: T` where T is `True`, `False` or `a REL b` over natural-number
    arithmetic (+ - * / % ^, parentheses; `-` truncates and `/` floors, as on ℕ); None when T is
    not closed or not of that form."""
    if not _is_closed(type_text):
        return None
    body = type_text[1:].strip()
    if body == "True":
        return True
    if body == "False":
        return False
    for rel in _RELATIONS:
        left, sep, right = body.partition(f" {rel} ")
        if sep:
            a, b = _nat(left), _nat(right)
            if a is None or b is None:
                return None
            return {"≤": a <= b, "<=": a <= b, "≥": a >= b, ">=": a >= b, "≠": a != b, "!=": a != b,
                    "=": a == b, "<": a < b, ">": a > b}[rel]
    return None


def _nat(text: str) -> int | None:
    tokens = re.findall(r"\d+|[-+*/%^()]|\S", text)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def atom():
        tok = peek()
        if tok is None:
            raise ValueError
        if tok == "(":
            take()
            value = expr()
            if take() != ")":
                raise ValueError
            return value
        if tok.isdigit():
            return int(take())
        raise ValueError

    def power():
        base = atom()
        if peek() == "^":
            take()
            exponent = power()
            if exponent > 64:
                raise ValueError
            return base ** exponent
        return base

    def term():
        value = power()
        while peek() in ("*", "/", "%"):
            op, rhs = take(), power()
            if op == "*":
                value *= rhs
            else:   # ℕ division and remainder by 0: 0 and the dividend
                value = (value // rhs if rhs else 0) if op == "/" else (value % rhs if rhs else value)
        return value

    def expr():
        value = term()
        while peek() in ("+", "-"):
            op, rhs = take(), term()
            value = value + rhs if op == "+" else max(0, value - rhs)
        return value

    try:
        value = expr()
    except (ValueError, IndexError):
        return None
    return value if pos == len(tokens) else None
