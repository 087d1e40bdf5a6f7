#!/usr/bin/env python3
"""A stand-in for `prover_check` (prover_cli/verify/checker/Main.lean), the kernel stage's own
checker for Lean 4.9 - 4.21. NOT Lean, and not a record of what the Lean program printed: that
program has never been compiled or run where this project is developed. It speaks the protocol
Main.lean defines and applies the contract Main.lean implements, on the model of
tests/fake_kernel_model.py, so that kernel.py's batching, verdict mapping and splitting are tested.

    fake_checker.py [--without CHECK ...] PAIRS_FILE        the checker
    fake_checker.py --as-lean [lean -o arguments]           `lean -o`, knowing the public attacks

The checker (as Main.lean): PAIRS_FILE holds `TARGET<TAB>SUBMISSION` lines (paths relative to
its directory); the first target's imports are imported once (`prover_check: imported the
header (N imports), once for this batch` on stderr, per import it does); one JSON line per pair
on stdout, then `{"checked": N, "imports": I}` (I: the imports it counted), exit 0. `--without CHECK` models a weaker build
(imports, unsafe, natlit, rebuild, compare): a checker that misses one defence, for the test that
such a checker refuses to verify anything. The fast path's declarations (`_prover_hole`,
`_prover_trusted`: `is_trusted_aux`, Main.lean `isTrustedAux`) are compared with the target's in
full, values included, and left out of the axiom check. A corrupt submission payload kills the process with
SIGSEGV (a real reader follows garbage pointers in the compacted region), so the whole batch has
no answer.

`--as-lean`: for a source that declares one of the attack theorems (`prover_attack_*`,
kernel.py KERNEL_ATTACKS), write the module that attack's elaboration leaves on real Lean, in the
model (ATTACKS below: what each public test case's Solution/Challenge declare, read from
leanprover/comparator tests/projects/<name>/{Challenge,Solution}.lean at 19e111e2141c and
GasStationManager/SafeVerify PR #19); any other source goes to tests/fake_lean.py. The model marks
what fools a kernel: `exploit` on a constant (`corrupt_nat`: a Nat literal forged by
`unsafeCast`, `nat_shown` is how it prints; `level_cast`: a Level forged by `unsafeCast`, seen by
a kernel given the compacted-region objects only; `char_ofnat`: the kernel's unchecked
`Char.ofNat` in string-literal reduction under a `prelude` that redefines `Char`). Each stand-in
checker decides from its own defences whether the exploit gets through (here: none does).
"""

from __future__ import annotations

import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_kernel_model as model  # noqa: E402

ALLOWED = ("propext", "Quot.sound", "Classical.choice")
KINDS = ("theorem", "axiom", "def", "opaque", "inductive", "constructor")
CHECKS = ("imports", "unsafe", "natlit", "rebuild", "compare")


# --------------------------------------------------------------------------------------------
# The model's .olean, with the kinds the attacks need
# --------------------------------------------------------------------------------------------

def const(name: str, kind: str, type_text: str, value: str | None = None, **extra) -> dict:
    return {"name": name, "kind": kind, "levelParams": [], "type": type_text, "value": value,
            "unsafe": False, "partial": False, **extra}


def module(imports: list[str], constants: list[dict], name: str = "Proof") -> bytes:
    payload = {"module": name, "imports": imports, "constants": constants}
    return model.OLEAN_HEADER + json.dumps(payload, ensure_ascii=False).encode("utf-8")


class Unreadable(Exception):
    pass


def read_module(data: bytes) -> dict:
    """model.read_olean, with inductives and constructors (the attacks declare them)."""
    if not data.startswith(model.OLEAN_HEADER):
        raise Unreadable("invalid header")
    try:
        mod = json.loads(data[len(model.OLEAN_HEADER):].decode("utf-8"))
        assert isinstance(mod["imports"], list)
        for c in mod["constants"]:
            assert isinstance(c["name"], str) and c["kind"] in KINDS and isinstance(c["type"], str)
            assert isinstance(c["unsafe"], bool) and isinstance(c["partial"], bool)
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AssertionError):
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
        raise
    return mod


def kernel_accepts(c: dict, env: dict, rebuilt: bool) -> tuple[bool, str]:
    """The model kernel on one constant: inductives and constructors are well formed here; an
    exploit fools it unless the Exprs it sees were rebuilt (level_cast) — the others are stopped
    by checks outside the kernel, if at all."""
    exploit = c.get("exploit")
    if exploit == "level_cast" and rebuilt:
        return False, "a universe level parameter the declaration does not declare"
    if exploit is not None or c["kind"] in ("inductive", "constructor"):
        return True, ""
    if c["kind"] == "opaque" and c["value"] is None:
        return True, ""
    return model.typecheck(c, env)


# --------------------------------------------------------------------------------------------
# What the attacks leave (model form): name -> (target module, submission module)
# --------------------------------------------------------------------------------------------

def _proj(extra_field: bool) -> list[dict]:
    ctor_type = "(a : Nat) (h : False) : S" if extra_field else "(a : Nat) : S"
    return [const("S", "inductive", ": Type", ctors=["S.mk"]), const("S.mk", "constructor", ctor_type),
            const("T", "def", ": Type", "S")]


THEOREM_FALSE = ": False"
ATTACKS: dict[str, tuple[bytes, bytes]] = {
    # comparator olean_issue: unsafe def + implemented_by opaque + run_elab addDecl of a def whose
    # Nat literal is the forged object; the theorem's `decide`/`omega` go through with it (the
    # target imports Lean too, as kernel.py's adaptation does, so the import check does not decide it)
    "prover_attack_olean_issue": (
        module(["Init", "Lean"], [const("prover_attack_olean_issue", "theorem", THEOREM_FALSE, "sorry")]),
        module(["Init", "Lean"], [
            {**const("badNatUnsafe", "def", ": Nat", "unsafeCast (-4294967296 : Int)"), "unsafe": True},
            const("badNatVal", "opaque", ": Nat", None),
            const("badNat", "def", ": Nat", "badNatVal", exploit="corrupt_nat", nat_shown="-4294967296"),
            const("prover_attack_olean_issue", "theorem", THEOREM_FALSE, "omega badNat", exploit="corrupt_nat")])),
    # comparator char_ofnat_issue: a `prelude` file (no imports) with its own False, Nat, Char, String
    "prover_attack_char_ofnat": (
        module(["Init"], [const("prover_attack_char_ofnat", "theorem", THEOREM_FALSE, "sorry")]),
        module([], [*({**const(n, "axiom", ": Type"), "unsafe": True} for n in ("lcErased", "lcAny", "lcVoid")),
                    const("False", "inductive", ": Prop", ctors=[]),
                    const("Char", "inductive", ": Type", ctors=["Char.mk"]),
                    const("Char.mk", "constructor", "(n : False) : Char"),
                    const("Char.ofNat", "def", "(n : Nat) : Box", "Box.mk True'.intro"),
                    const("confused", "def", ": Char", "head (String.data \"\\x02\")", exploit="char_ofnat"),
                    const("prover_attack_char_ofnat", "theorem", THEOREM_FALSE, "Char.n confused",
                          exploit="char_ofnat")])),
    # comparator proj_trick: the submission's `S` has a field `h : False`; `T`, `pr%` and the
    # theorem's statement are the same text
    "prover_attack_proj_trick": (
        module(["Init", "Lean"], [*_proj(False), const("prover_attack_proj_trick", "theorem",
                                                        ": ∀ (s : T), (pr% s) = (0 : Nat)", "sorry")]),
        module(["Init", "Lean"], [*_proj(True), const("prover_attack_proj_trick", "theorem",
                                                       ": ∀ (s : T), (pr% s) = (0 : Nat)", "(S.h s).elim")])),
    # SafeVerify PR #19, case 2: the submission leaves out an import of the target
    "prover_attack_dropped_imports": (
        module(["Init", "Lean"], [const("prover_attack_dropped_imports", "theorem", ": True", "sorry")]),
        module(["Init"], [const("prover_attack_dropped_imports", "theorem", ": True", "trivial")])),
    # one import more than the target (SafeVerify's 2026 check accepts a superset)
    "prover_attack_extra_import": (
        module(["Init"], [const("prover_attack_extra_import", "theorem", ": True", "sorry")]),
        module(["Init", "Lean"], [const("prover_attack_extra_import", "theorem", ": True", "trivial")])),
    # SafeVerify PR #19 (commit 5cafc55): a Level forged with `unsafeCast` (the `magic`/`isProp`
    # universe attack proving False); no public source text, so a stand-in case only
    "prover_attack_level_cast": (
        module(["Init"], [const("prover_attack_level_cast", "theorem", THEOREM_FALSE, "sorry")]),
        module(["Init"], [const("magic", "def", "{α : Sort u} : α → Prop", "isProp", exploit="level_cast"),
                          const("prover_attack_level_cast", "theorem", THEOREM_FALSE, "magic", exploit="level_cast")])),
}


# --------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------

class Rejected(Exception):
    pass


def replay(env: dict, mod: dict, rebuilt: bool) -> dict:
    env = dict(env)
    for c in mod["constants"]:
        if c["unsafe"] or c["partial"]:
            continue   # Environment.replay skips them (src/Lean/Replay.lean); refused before, unless --without unsafe
        if c["name"] in env:
            raise Rejected(f"(kernel) constant has already been declared '{c['name']}'")
        ok, given = kernel_accepts(c, env, rebuilt)
        if not ok:
            raise Rejected(f"(kernel) declaration type mismatch, '{c['name']}' has type\n  {given}\n"
                           f"but it is expected to have type\n  {c['type']}")
        env[c["name"]] = c
    return env


def mismatch(want: dict, mine: dict) -> str | None:
    if want["kind"] != mine["kind"]:
        return f"is a {mine['kind']}, the trusted one a {want['kind']}"
    if want["levelParams"] != mine["levelParams"]:
        return "has other universe parameters"
    if want["type"] != mine["type"]:
        return "has another type"
    if want["kind"] in ("def", "opaque") and want["value"] != mine["value"]:
        return "has another value"
    if want["kind"] == "inductive" and want.get("ctors") != mine.get("ctors"):
        return "is another inductive type"
    return None


def check_submission(header: list, target: dict, sub: dict, without: set) -> dict:
    if "imports" not in without and sub["imports"] != header:
        raise Rejected(f"the submission's imports #[{', '.join(sub['imports'])}] are not the trusted header's "
                       f"#[{', '.join(header)}]")
    for c in sub["constants"]:
        if "unsafe" not in without and c["unsafe"] and not c["name"].endswith("._unsafe_rec"):
            raise Rejected(f"unsafe constant {c['name']} in the submission")
        if "unsafe" not in without and c["partial"]:
            raise Rejected(f"partial constant {c['name']} in the submission")
        if "natlit" not in without and str(c.get("nat_shown", "0")).startswith("-"):
            raise Rejected(f"Nat literal in {c['name']} prints as {c['nat_shown']}: not a natural number (a forged object)")
    rebuilt = "rebuild" not in without
    replayed = replay({}, sub, rebuilt)
    replay({}, sub, rebuilt)   # the second kernel pass agrees in the model
    own = {c["name"] for c in sub["constants"]}
    axioms = {}
    for want in target["constants"]:
        mine = replayed.get(want["name"])
        if mine is None:
            raise Rejected(f"{want['kind']} {want['name']} of the trusted target is not in the submission")
        if want["name"] not in own:
            raise Rejected(f"{want['kind']} {want['name']} of the trusted target is not declared by the submission module")
        why = mismatch(want, mine) if "compare" not in without else (
            "has another type" if want["kind"] == "theorem" and want["type"] != mine["type"] else None)
        aux = is_trusted_aux(want["name"])
        if why is None and aux and want["value"] != mine["value"]:
            why = "has another value"   # part of the trusted header: all of it is the target's
        if why is not None:
            raise Rejected(f"{want['kind']} {want['name']} {why} than the trusted target's")
        if want["kind"] == "theorem" and not aux:
            order = model.STANDARD_AXIOMS   # in the REPL stand-in's order, as fake_safe_verify lists them
            found = sorted(model.axioms_of(want["name"], replayed),
                           key=lambda a: (a not in order, order.index(a) if a in order else 0, a))
            bad = [a for a in found if a not in ALLOWED]
            if bad:
                raise Rejected(f"theorem {want['name']} depends on axioms outside propext, Quot.sound, "
                               f"Classical.choice: #[{', '.join(bad)}]")
            axioms[want["name"]] = found
    return axioms


# Main.lean `isTrustedAux`: the fast path's declarations before the untrusted text
# (prover_cli/verify/rules.py HOLE, TRUSTED), by the last component of the name (a namespace the
# trusted header leaves open prefixes them). `_prover_trusted` is proved by the hole axiom by
# construction, so it is compared in full with the target's and left out of the axiom check.
TRUSTED_AUX = ("_prover_hole", "_prover_trusted")


def is_trusted_aux(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in TRUSTED_AUX


def line(pair: int, verdict: str, **rest) -> str:
    return json.dumps({"pair": pair, "verdict": verdict, **rest}, ensure_ascii=False, separators=(",", ":"))


def read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def checker(args: list[str]) -> int:
    without: set[str] = set()
    while args[:1] == ["--without"] and len(args) >= 2 and args[1] in CHECKS:
        without.add(args[1])
        args = args[2:]
    if len(args) != 1:
        sys.stderr.write("usage: prover_check PAIRS_FILE\n")
        return 2
    directory = os.path.dirname(args[0]) or "."
    with open(args[0], encoding="utf-8") as handle:
        entries = [e for e in handle.read().splitlines() if e]
    header = None
    imports_done = 0
    for k, entry in enumerate(entries):
        parts = entry.split("\t")
        if len(parts) != 2:
            print(line(k, "error", reason="not a TARGET<TAB>SUBMISSION line"), flush=True)
            continue
        try:
            target = read_module(read_file(os.path.join(directory, parts[0])))
        except (OSError, Unreadable) as exc:   # the trusted side: the batch ends (uncaught)
            sys.stderr.write(f"uncaught exception: {exc}\n")
            return 1
        if header is None:
            header = target["imports"]
            imports_done += 1
            sys.stderr.write(f"prover_check: imported the header ({len(header)} imports), once for this batch\n")
        if target["imports"] != header:
            print(line(k, "error", reason="the trusted target's imports are not the batch's header"), flush=True)
            continue
        try:
            sub = read_module(read_file(os.path.join(directory, parts[1])))
        except (OSError, Unreadable) as exc:
            print(line(k, "error", reason=f"the submission's .olean cannot be read: {exc}"), flush=True)
            continue
        try:
            print(line(k, "passed", axioms=check_submission(header, target, sub, without)), flush=True)
        except Rejected as exc:
            print(line(k, "rejected", reason=str(exc)), flush=True)
    print(json.dumps({"checked": len(entries), "imports": imports_done}), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# `lean -o`, knowing the attacks
# --------------------------------------------------------------------------------------------

def as_lean(args: list[str]) -> int:
    import re

    import fake_lean

    source = next((a for a in args if a.endswith(".lean")), None)
    olean = args[args.index("-o") + 1] if "-o" in args else None
    text = open(source, encoding="utf-8").read() if source and os.path.exists(source) else ""
    found = re.search(r"theorem (prover_attack_\w+)", text)
    if found is None or found.group(1) not in ATTACKS or olean is None:
        return fake_lean.main(args)
    target, submission = ATTACKS[found.group(1)]
    with open(olean, "wb") as handle:
        handle.write(target if re.search(r":=\s*sorry\s*$", text) else submission)
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(as_lean(argv[1:]) if argv[:1] == ["--as-lean"] else checker(argv))
