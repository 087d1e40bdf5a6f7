#!/usr/bin/env python3
"""A stand-in for `prover_check` (prover_cli/verify/kernel/checker/Main.lean), the kernel stage's own
checker for Lean 4.9 - 4.21. NOT Lean, and not a record of what the Lean program printed: that
program has never been compiled or run where this project is developed. It speaks the protocol
Main.lean defines and applies the contract Main.lean implements, on the model of
tests/fake_kernel_model.py, so that kernel/stage.py's batching, verdict mapping and splitting are tested.

    fake_checker.py [--without CHECK ...] DIR                the checker
    fake_checker.py --as-lean [lean -o arguments]           `lean -o`, knowing the public attacks

The checker (as Main.lean `checkAll`): DIR holds pairs `T{k}.olean` `P{k}.olean` up to the first
missing `P{k}.olean`; the first target's
imports are imported once (`prover_check: imported the header (N imports), once for this batch` on
stderr, per import it does); per pair K, `axioms K THEOREM AXIOM...` lines then `pair K passed`,
or `pair K rejected|error REASON`; then `checked N imports I`, exit 0. It refuses to run (exit 1)
unless LEAN_ABORT_ON_PANIC=1 is in its environment (kernel/pins.py CHECKER_ENV): stricter than the
Lean program, which would run and merely go on after a panic. `--without CHECK` models a build
missing one defence of Main.lean (CHECKS: `imports` the exact import list, `unsafe` every unsafe
constant, `partial` partial constants but `_unsafe_rec`, `natlit` a Nat literal that prints with
`-`, `canonical` a positive literal that does not read back as itself (natlit and canonical are the
two halves of Main.lean's one `(toString n).toNat? == some n`), `opaque` the axiom walk through
opaque values, `compare` header declarations beyond a theorem's type): each canary of kernel/kernel_canary.py
KERNEL_ATTACKS is the one thing a build missing its defence gets wrong. Main.lean rebuilds no
Expr or Level (no evidenced way at these tags: docs/verify.md), so a Level forged with `unsafeCast`
(`level_cast`) fools the model kernel here: the stand-in says the real checker would pass it.
The fast path's declarations (`_prover_hole`, `_prover_trusted`: `is_trusted_aux`, Main.lean
`isTrustedAux`) are compared with the target's in full and left out of the axiom check. A
corrupt submission payload kills the process with SIGSEGV (a real reader follows garbage pointers
in the compacted region), so the whole batch has no answer.

`--as-lean`: for a source that declares one of the attack theorems (`prover_attack_*`,
kernel/kernel_canary.py KERNEL_ATTACKS), write the module that attack's elaboration leaves on real Lean, in the
model (ATTACKS below: what each public test case's Solution/Challenge declare, read from
leanprover/comparator tests/projects/<name>/{Challenge,Solution}.lean at 19e111e2141c and
066c3bc (opaque_value), and GasStationManager/SafeVerify PR #19; the hand-built modules are what
their payload writes, kernel/kernel_canary.py `_HAND_BUILT`); any other source goes to tests/fake_lean.py. The
model marks what fools a kernel: `exploit` on a constant (`corrupt_nat`: a Nat literal forged by
`unsafeCast`, `nat_shown` is how it prints, `nat_canonical` false for a positive one held as a
big-number object; `level_cast`: a Level forged by `unsafeCast`; `char_ofnat`: the kernel's
unchecked `Char.ofNat` in string-literal reduction under a `prelude` that redefines `Char`;
`opaque_value`: a theorem proved by an opaque whose value is an axiom). Each stand-in checker
decides from its own defences whether the exploit gets through.
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
CHECKS = ("imports", "unsafe", "partial", "natlit", "canonical", "opaque", "compare")


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


def kernel_accepts(c: dict, env: dict, rebuilt: bool = False) -> tuple[bool, str]:
    """The model kernel on one constant: inductives and constructors are well formed here; an
    exploit fools it unless the Exprs it sees were rebuilt (level_cast: fake_safe_verify's 2026
    dialect rebuilds; Main.lean does not) — the others are stopped by checks outside the kernel,
    if at all."""
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
    # target imports Lean too, as kernel/kernel_canary.py's adaptation does, so the import check does not decide it)
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
    # the same forged literal in a module the payload writes itself (kernel/kernel_canary.py `_HAND_BUILT`): no
    # unsafe constant left, so the Nat-literal check alone stands between it and the kernel
    "prover_attack_olean_hand_built": (
        module(["Init", "Lean"], [const("prover_attack_olean_hand_built", "theorem", THEOREM_FALSE, "sorry")]),
        module(["Init", "Lean"], [
            const("badNatVal", "opaque", ": Nat", None),
            const("badNat", "def", ": Nat", "badNatVal", exploit="corrupt_nat", nat_shown="-4294967296"),
            const("prover_attack_olean_hand_built", "theorem", THEOREM_FALSE, "omega badNat", exploit="corrupt_nat")])),
    # a positive literal held as a big-number object (`unsafeCast (1099511627776 : Int) : Nat`):
    # prints as a natural number, so only the read-back half of the literal check refuses it
    "prover_attack_noncanonical": (
        module(["Init", "Lean"], [const("prover_attack_noncanonical", "theorem", THEOREM_FALSE, "sorry")]),
        module(["Init", "Lean"], [
            const("badNatVal", "opaque", ": Nat", None),
            const("badNat", "def", ": Nat", "badNatVal", exploit="corrupt_nat", nat_shown="1099511627776",
                  nat_canonical=False),
            const("prover_attack_noncanonical", "theorem", THEOREM_FALSE, "omega badNat", exploit="corrupt_nat")])),
    # comparator opaque_value (066c3bc, the fix a4f69682): the theorem's axiom hides in an opaque's value
    "prover_attack_opaque_value": (
        module(["Init"], [const("prover_attack_opaque_value", "theorem", THEOREM_FALSE, "sorry")]),
        module(["Init"], [const("f", "axiom", THEOREM_FALSE),
                          const("v", "opaque", THEOREM_FALSE, "f"),
                          const("prover_attack_opaque_value", "theorem", THEOREM_FALSE, "v", exploit="opaque_value")])),
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


def replay(env: dict, mod: dict) -> dict:
    """Environment.replay / replay': unsafe and partial constants skipped (src/Lean/Replay.lean,
    Lean4Checker/Replay.lean `replay'`), every other constant through the model kernel."""
    env = dict(env)
    for c in mod["constants"]:
        if c["unsafe"] or c["partial"]:
            continue
        if c["name"] in env:
            raise Rejected(f"(kernel) constant has already been declared '{c['name']}'")
        ok, given = kernel_accepts(c, env)
        if not ok:
            raise Rejected(f"(kernel) declaration type mismatch, '{c['name']}' has type\n  {given}\n"
                           f"but it is expected to have type\n  {c['type']}")
        env[c["name"]] = c
    return env


def mismatch(name: str, want: dict, mine: dict) -> str | None:
    """Main.lean `mismatch`: kind, universe parameters, type; the value too, unless a theorem."""
    if want["kind"] != mine["kind"]:
        return f"is a {mine['kind']}"
    if want["levelParams"] != mine["levelParams"]:
        return "has other universe parameters"
    if want["type"] != mine["type"]:
        return "has another type"
    if (want["kind"] != "theorem" or is_trusted_aux(name)) and \
            (want["value"] != mine["value"] or want.get("ctors") != mine.get("ctors")):
        return "has another value"
    return None


def axioms_of(name: str, env: dict, opaque_values: bool, seen: set | None = None) -> set[str]:
    """Main.lean `axiomsOf`: the model's axioms (fake_kernel_model.axioms_of), walking an opaque's
    value only when `opaque_values` (a build that walks `value?` alone does not)."""
    seen = set() if seen is None else seen
    if name in seen or name not in env:
        return set()
    seen.add(name)
    const = env[name]
    if const["kind"] == "axiom":
        return {name}
    if const["kind"] == "opaque" and not opaque_values:
        return set()
    value = const.get("value") or ""
    found = set(model.STANDARD_AXIOMS) if value.strip() else set()
    if model.uses_sorry(const):
        found.add("sorryAx")
    found |= {m[len("fake_axiom_"):].replace("__", ".") for m in model.MARKER.findall(value)
              if m.startswith("fake_axiom_")}
    for used in model.mentions(value):
        found |= axioms_of(used, env, opaque_values, seen)
    return found


def own_problem(k: int, c: dict, without: set) -> str | None:
    """Main.lean `ownProblem` on the submission's constant number `k` (its name never printed)."""
    if "unsafe" not in without and c["unsafe"]:
        return f"constant #{k} of the submission is unsafe"
    shown = str(c.get("nat_shown", "0"))
    if "natlit" not in without and shown.startswith("-"):
        return f"constant #{k} of the submission holds a Nat literal that does not read back as itself"
    if "canonical" not in without and not shown.startswith("-") and c.get("nat_canonical") is False:
        return f"constant #{k} of the submission holds a Nat literal that does not read back as itself"
    if "partial" not in without and c["kind"] == "def" and c["partial"] and c["name"].rsplit(".", 1)[-1] != "_unsafe_rec":
        return f"constant #{k} of the submission is a partial definition"
    return None


def check_submission(header: list, target: dict, sub: dict, without: set) -> dict:
    if "imports" not in without and sub["imports"] != header:
        raise Rejected("the submission's imports are not the trusted header's")
    for k, c in enumerate(sub["constants"]):
        why = own_problem(k, c, without)
        if why:
            raise Rejected(why)
    try:
        replayed = replay({}, sub)
    except Rejected:
        raise Rejected("the kernel refused the submission's replay") from None
    axioms = {}
    for want in target["constants"]:
        name = want["name"]
        if name.rsplit(".", 1)[-1] == "_unsafe_rec":
            continue   # Main.lean: a recursive def's compiler shim, never replayed in either module
        mine = replayed.get(name)
        if mine is None:
            raise Rejected(f"{want['kind']} {name} of the trusted target is not in the submission")
        why = mismatch(name, want, mine) if "compare" not in without else (
            "has another type" if want["kind"] == "theorem" and want["type"] != mine["type"] else None)
        if why is not None:
            raise Rejected(f"{want['kind']} {name} of the trusted target {why} in the submission")
        if want["kind"] == "theorem" and not is_trusted_aux(name):
            order = model.STANDARD_AXIOMS   # in the REPL stand-in's order, as fake_safe_verify lists them
            found = sorted(axioms_of(name, replayed, "opaque" not in without),
                           key=lambda a: (a not in order, order.index(a) if a in order else 0, a))
            bad = [a for a in found if a not in ALLOWED]
            if bad:   # named only when trusted text declared them (Main.lean): sorryAx, the target's
                trusted = {c["name"] for c in target["constants"]} | {"sorryAx"}
                named = [a for a in bad if a in trusted or a not in {c["name"] for c in sub["constants"]}]
                more = " and axioms of the submission" if len(named) < len(bad) else ""
                raise Rejected(f"theorem {name} depends on axioms outside propext, Quot.sound, Classical.choice:"
                               f"{''.join(' ' + a for a in named)}{more}")
            axioms[name] = found
    return axioms


# Main.lean `isTrustedAux`: the fast path's declarations before the untrusted text
# (prover_cli/verify/text/rules.py HOLE, TRUSTED), by the last component of the name (a namespace the
# trusted header leaves open prefixes them). `_prover_trusted` is proved by the hole axiom by
# construction, so it is compared in full with the target's and left out of the axiom check.
TRUSTED_AUX = ("_prover_hole", "_prover_trusted")


def is_trusted_aux(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in TRUSTED_AUX


def read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def answer(k: int, header: list, target: dict, path: str, without: set) -> list[str]:
    """One pair's lines (Main.lean `checkAll`)."""
    if target["imports"] != header:
        return [f"pair {k} error the trusted target's imports are not the batch's header"]
    try:
        sub = read_module(read_file(path))
    except (OSError, Unreadable):
        return [f"pair {k} error the submission's .olean cannot be read"]
    try:
        theorems = check_submission(header, target, sub, without)
    except Rejected as exc:
        return [f"pair {k} rejected {exc}"]
    return [" ".join(["axioms", str(k), name, *found]) for name, found in theorems.items()] + [f"pair {k} passed"]


def checker(args: list[str]) -> int:
    without: set[str] = set()
    while args[:1] == ["--without"] and len(args) >= 2 and args[1] in CHECKS:
        without.add(args[1])
        args = args[2:]
    if os.environ.get("LEAN_ABORT_ON_PANIC") != "1":
        sys.stderr.write("uncaught exception: the stand-in checker runs only with LEAN_ABORT_ON_PANIC=1 "
                         "(kernel/pins.py CHECKER_ENV)\n")
        return 1
    if len(args) != 1 or args[0].startswith("--"):
        sys.stderr.write("uncaught exception: usage: prover_check DIR (holding T0.olean P0.olean T1.olean P1.olean ...)\n")
        return 1
    header = None
    imports_done = 0
    pairs = []
    while os.path.exists(os.path.join(args[0], f"P{len(pairs)}.olean")):
        k = len(pairs)
        pairs.append((os.path.join(args[0], f"T{k}.olean"), os.path.join(args[0], f"P{k}.olean")))
    for k, (target_path, sub_path) in enumerate(pairs):
        try:
            target = read_module(read_file(target_path))
        except (OSError, Unreadable) as exc:   # the trusted side: the batch ends (uncaught)
            sys.stderr.write(f"uncaught exception: {exc}\n")
            return 1
        if header is None:
            header = target["imports"]
            imports_done += 1
            sys.stderr.write(f"prover_check: imported the header ({len(header)} imports), once for this batch\n")
        for line in answer(k, header, target, sub_path, without):
            print(line, flush=True)
    print(f"checked {len(pairs)} imports {imports_done}", flush=True)
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
