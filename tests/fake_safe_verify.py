#!/usr/bin/env python3
"""A stand-in for SafeVerify (GasStationManager/SafeVerify), the kernel stage's checker. NOT Lean.

    fake_safe_verify.py --pin COMMIT [SafeVerify's own arguments]

`--pin` (the stand-in's option, first) picks which SafeVerify it speaks: the program at that
commit, as read in its `Main.lean` (and `SafeVerify/*.lean` for the 2026 one), repository
GasStationManager/SafeVerify (MIT); the LeanParanoia comparison table (oOo0oOo/LeanParanoia
`VERIFIER_COMPARISON.md` at 11c2385a) records the 2024 messages as the real tool printed them:

2024 dialect — 0c0f7dcf (minif2f-deepseek-check, Lean 4.9), bc5d45c3 (seed-prover-check, 4.14),
577e9531 (minif2f-kimina-check, 4.15), 59f3d1fd (abc-trinity-check, 4.20), e072239e (v4.21):
    safe_verify TARGET SUBMISSION
  fewer than two arguments: `not enough arguments`. For each file, on stdout: `------------------`,
  `Replaying F`, `Finished imports`, `Finished replay`, then for every theorem/def of the module
  `---`, kind, name, type, [`:= value`], its axioms `#[a, b]`; after both `Finished with no
  errors.`, exit 0. Thrown (`uncaught exception: MSG` on stderr, exit 1): `object file 'F' does
  not exist`, `unsafe/partial function N detected`, `K N is not the same kind as the requirement
  K' N`, `theorem N does not have the same type as the requirement`, `definition N does not match
  the requirement`, `A is not in the allowed set of standard axioms`, `N not found in
  submission`, and the replay's `(kernel) …`; a failure in the submission's task is preceded by
  `found a problem in SUBMISSION` on stderr. No import check.
2026 dialect — b291b588 (main, Lean 4.27), 241dfb0d (v4.29.0):
    safe_verify [--disallow-partial] [-v|--verbose] [-s|--save FILE] TARGET SUBMISSION
  everything on stderr: `Currently running on Lean vX`, `Running SafeVerify on target file: T and
  submission file: S.`, the import checks (the target must import Init; the submission must
  import something and at least the target's modules: `Submission 'S' is missing N transitive
  imports required by target: #[…]. …`), `------------------`, per file `Replaying F`,
  `Finished setting up the environment.`, `Finished replay. Found N declarations.` (an unsafe
  constant: `unsafe constant N detected`; every theorem re-checked: `kernel verification failed
  for 'N': …`), then `N used disallowed axioms. #[…]` per offending declaration, `Found a
  problem in S with declaration N: FAILURE` per target declaration, and `SafeVerify check
  passed.` (exit 0) or `uncaught exception: SafeVerify check failed. …` (exit 1). `--save`
  writes `[[name, {targetInfo, solutionInfo, failureMode}], …]` (`deriving ToJson`).

The Lean runtime prints an uncaught IO error as `uncaught exception: MSG` and exits 1 (lean4
`src/Lean/Compiler/IR/EmitC.lean` at 01bb0dcad7a4, `emitMainFn`; `src/runtime/io.cpp` at
01c5b0710c12, `lean_io_result_show_error`). The kernel is `fake_kernel_model.typecheck`; files are
the model's stand-in .olean (`fake_kernel_model.read_olean`): a bad header is `failed to read file
'F', invalid header` (lean4 `src/library/module.cpp` at 636afc654ad9, `read_module_data`), a
corrupt payload kills the stand-in with SIGSEGV. Anything it has no recorded behaviour for (an unknown flag, an unknown
--pin) fails closed: a line saying so and exit 2.

The public attacks (tests/fake_checker.py ATTACKS; modules with inductives, constructors and
`exploit` marks, read with fake_checker's reader): the 2024 program has no defence against any of
them (no import check; unsafe constants dropped by the replay, so its unsafe/partial message never
fires; Exprs not rebuilt; only theorems and defs compared), so each passes it, as issue #32 says
of those pins. The 2026 program refuses each: `… has no imports` (char_ofnat), `… is missing N
transitive imports` (dropped imports), `unsafe constant badNatUnsafe detected` (olean_issue),
`inductive type mismatch` / `constructor mismatch` (proj_trick), and for the Level cast a kernel
failure (which of its two kernel checks fires is not recorded; the stand-in prints the second's
message); an import superset passes it.

Kernel replay messages follow `KernelException.toMessageData` (lean4 `src/Lean/Message.lean` at
f2482df773f8; `Environment.replay` in `src/Lean/Replay.lean` throws them as `IO.userError`):
`(kernel) declaration type mismatch, 'N' has type⏎  GIVEN⏎but it is expected to have type⏎  T`.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_checker  # noqa: E402
import fake_kernel_model as model  # noqa: E402

DIALECTS = {  # commit prefix -> (dialect, Lean version it runs on)
    "0c0f7dcf": ("2024", "4.9.0"), "bc5d45c3": ("2024", "4.14.0"), "577e9531": ("2024", "4.15.0"),
    "59f3d1fd": ("2024", "4.20.0"), "e072239e": ("2024", "4.21.0"),
    "b291b588": ("2026", "4.27.0"), "241dfb0d": ("2026", "4.29.0"),
}
ALLOWED = ("propext", "Quot.sound", "Classical.choice")
JSON_KIND = {"def": "definition", "theorem": "theorem", "axiom": "axiom", "opaque": "opaque",
             "inductive": "inductive", "constructor": "constructor"}


class Thrown(Exception):
    """An IO.userError that reaches `main`."""


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def err(text: str = "") -> None:
    sys.stderr.write(text + "\n")


def show_names(names) -> str:
    return "#[" + ", ".join(names) + "]"


def load(path: str) -> dict:
    if not os.path.exists(path):
        raise Thrown(f"object file '{path}' does not exist")
    with open(path, "rb") as handle:
        data = handle.read()
    sys.stdout.flush()
    sys.stderr.flush()
    try:   # inductives and constructors too (the public attacks declare them); corrupt: SIGSEGV
        return fake_checker.read_module(data)
    except fake_checker.Unreadable:
        raise Thrown(f"failed to read file '{path}', invalid header") from None


def replay(module: dict, rebuilt: bool = False) -> dict[str, dict]:
    """`Environment.replay` in the model: every constant not unsafe/partial, in order; the first
    one the kernel rejects throws. `rebuilt` (2026): the Exprs and Levels were rebuilt first, so a
    forged Level is seen; which of the 2026 program's two kernel checks then fires is not recorded,
    and the stand-in prints the second one's message (Main.lean at b291b588, `replayFile`)."""
    env: dict[str, dict] = {}
    for const in module["constants"]:
        if const["unsafe"] or const["partial"]:
            continue
        if const["name"] in env:
            raise Thrown(f"(kernel) constant has already been declared '{const['name']}'")
        if rebuilt and const.get("exploit") == "level_cast":
            raise Thrown(f"kernel verification failed for '{const['name']}': proof term rejected by kernel "
                         "typechecker (possible unsafeCast or compacted-region corruption)")
        ok, given = fake_checker.kernel_accepts(const, env, rebuilt)
        if not ok:
            raise Thrown(f"(kernel) declaration type mismatch, '{const['name']}' has type\n  {given}\n"
                         f"but it is expected to have type\n  {const['type']}")
        env[const["name"]] = const
    return env


def axioms(name: str, env: dict) -> list[str]:
    """In the REPL stand-in's order (Lean's three first), so both stand-ins list them alike."""
    order = model.STANDARD_AXIOMS
    return sorted(model.axioms_of(name, env), key=lambda a: (a not in order, order.index(a) if a in order else 0, a))


# --------------------------------------------------------------------------------------------
# 2024
# --------------------------------------------------------------------------------------------

def replay_file_2024(path: str, targets: list | None = None) -> list:
    out("------------------")
    out(f"Replaying {path}")
    module = load(path)
    out("Finished imports")
    env = replay(module)
    out("Finished replay")
    infos = []
    for const in module["constants"]:
        if const["name"] not in env or const["kind"] not in ("theorem", "def"):
            continue
        out("---")
        out(const["kind"])
        out(const["name"])
        out(const["type"].lstrip(": ") if const["type"].startswith(":") else const["type"])
        if const["kind"] == "def":
            out(f":= {const['value']}")
        names = axioms(const["name"], env)
        out(show_names(names))
        infos.append((const, names))
        if const["kind"] == "def" and (const["unsafe"] or const["partial"]):
            raise Thrown(f"unsafe/partial function {const['name']} detected")
    for target, target_axioms in targets or []:
        mine = env.get(target["name"])
        name = target["name"]
        if mine is None:
            raise Thrown(f"{name} not found in submission")
        if mine["kind"] != target["kind"]:
            raise Thrown(f"{mine['kind']} {name} is not the same kind as the requirement {target['kind']} {name}")
        if mine["kind"] == "theorem" and (mine["type"], mine["levelParams"]) != (target["type"], target["levelParams"]):
            raise Thrown(f"theorem {name} does not have the same type as the requirement")
        if mine["kind"] == "def":
            same_value = "sorryAx" in target_axioms or mine["value"] == target["value"]
            if (mine["type"], mine["levelParams"]) != (target["type"], target["levelParams"]) or not same_value:
                raise Thrown(f"definition {name} does not match the requirement")
        for axiom in axioms(name, env):
            if axiom not in ALLOWED:
                raise Thrown(f"{axiom} is not in the allowed set of standard axioms")
    return infos


def main_2024(args: list[str]) -> int:
    if len(args) < 2:
        raise Thrown("not enough arguments")
    target, submission = args[0], args[1]
    infos = replay_file_2024(target)
    try:
        replay_file_2024(submission, infos)
    except Thrown:
        err(f"found a problem in {submission}")
        raise
    out("Finished with no errors.")
    return 0


# --------------------------------------------------------------------------------------------
# 2026
# --------------------------------------------------------------------------------------------

def replay_file_2026(path: str, disallow_partial: bool) -> tuple[dict, dict]:
    err(f"Replaying {path}")
    module = load(path)
    err("Finished setting up the environment.")
    count = 0
    for const in module["constants"]:
        if const["unsafe"]:
            raise Thrown(f"unsafe constant {const['name']} detected")
        if disallow_partial and const["partial"] and const["name"].rsplit(".", 1)[-1] != "_unsafe_rec":
            # `isCompilerUnsafeRecName` (Main.lean at b291b588 and 241dfb0d): Lean's shim for a recursive def
            raise Thrown(f"partial constant {const['name']} detected")
        count += 1
    env = replay(module, rebuilt=True)
    err(f"Finished replay. Found {count} declarations.")
    for const in module["constants"]:
        if const["kind"] == "theorem" and not fake_checker.kernel_accepts(const, env, True)[0]:
            raise Thrown(f"kernel verification failed for '{const['name']}': inferred type does not match declared type")
    decls = {c["name"]: {"const": c, "axioms": axioms(c["name"], env)}
             for c in module["constants"] if c["name"] in env
             and c["kind"] in ("theorem", "def", "opaque", "inductive", "constructor")}
    return decls, module


def failure_json(failure: str | None, target: dict, mine: dict | None):
    """`CheckFailure` as `deriving ToJson` writes it (SafeVerify/Types.lean at b291b588; Lean's
    derive handler, `mkToJsonBodyForInduct`: a constructor without fields is its name as a string,
    one with fields `{name: [fields]}`)."""
    if failure is None:
        return None
    if failure.startswith("kind mismatch"):
        return {"kind": [target["const"]["kind"], mine["const"]["kind"]]}
    return {"declaration not found in submission": "notFound", "inductive type mismatch": "inductCheck",
            "constructor mismatch": "ctorCheck", "theorem type mismatch": "thmType",
            "definition type or value mismatch": "defnCheck", "uses disallowed axioms": "axioms"}[failure]


def main_2026(args: list[str], version: str, allow_disproofs_flag: bool) -> int:
    flags = {"disallow_partial": False, "verbose": False, "save": None}
    positional = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == "--disallow-partial":
            flags["disallow_partial"] = True
        elif arg in ("-v", "--verbose"):
            flags["verbose"] = True
        elif arg in ("-s", "--save") and rest:
            flags["save"] = rest.pop(0)
        elif arg in ("-d", "--disproofs") and allow_disproofs_flag:
            err("fake_safe_verify: --disproofs has no recorded behaviour here (fails closed)")
            return 2
        elif arg.startswith("-"):
            err(f"fake_safe_verify: no recorded behaviour for the argument {arg!r} (fails closed)")
            return 2
        else:
            positional.append(arg)
    if len(positional) != 2:
        err("fake_safe_verify: no recorded behaviour for these arguments (fails closed)")
        return 2
    target, submission = positional
    err(f"Currently running on Lean v{version}")
    err(f"Running SafeVerify on target file: {target} and submission file: {submission}.")
    target_imports = load(target)["imports"]
    submission_imports = load(submission)["imports"]
    if "Init" not in target_imports:
        raise Thrown(f"Target '{target}' does not import Init. Refusing to verify against a prelude-based target.")
    if not submission_imports:
        raise Thrown(f"'{submission}' has no imports (possible prelude file). Submissions must import Init to "
                     "prevent kernel type redefinition.")
    missing = [m for m in target_imports if m not in submission_imports]
    if missing:
        shown = show_names(missing[:10]) + (f" ... and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise Thrown(f"Submission '{submission}' is missing {len(missing)} transitive imports required by target: "
                     f"{shown}. Submissions must transitively import at least everything the target imports to "
                     "prevent type redefinition attacks.")
    err("------------------")
    target_decls, _ = replay_file_2026(target, flags["disallow_partial"])
    err("------------------")
    submission_decls, _ = replay_file_2026(submission, flags["disallow_partial"])
    for name, info in submission_decls.items():   # validateNewDefinitionNatLiterals
        shown = str(info["const"].get("nat_shown", "0"))
        if name not in target_decls and shown.startswith("-"):
            raise Thrown(f"suspicious Nat literal in new declaration '{name}': stored natVal={shown} but renders "
                         f"as '{shown}' (possible unsafeCast corruption)")
    err("------------------")
    violations = False
    for name, info in submission_decls.items():
        if any(a not in ALLOWED for a in info["axioms"]):
            err(f"{name} used disallowed axioms. {show_names(info['axioms'])}")
            violations = True
    outcomes = []
    for name, target_info in target_decls.items():
        mine = submission_decls.get(name)
        failure = None
        if mine is None:
            failure = "declaration not found in submission"
        elif mine["const"]["kind"] != target_info["const"]["kind"]:
            failure = f"kind mismatch (expected {target_info['const']['kind']}, got {mine['const']['kind']})"
        elif mine["const"]["kind"] == "inductive" and (mine["const"]["type"], mine["const"].get("ctors")) != (
                target_info["const"]["type"], target_info["const"].get("ctors")):
            failure = "inductive type mismatch"
        elif mine["const"]["kind"] == "constructor" and mine["const"]["type"] != target_info["const"]["type"]:
            failure = "constructor mismatch"
        elif mine["const"]["kind"] == "theorem" and (mine["const"]["type"], mine["const"]["levelParams"]) != (
                target_info["const"]["type"], target_info["const"]["levelParams"]):
            failure = "theorem type mismatch"
        elif mine["const"]["kind"] == "def" and ((mine["const"]["type"], mine["const"]["levelParams"]) != (
                target_info["const"]["type"], target_info["const"]["levelParams"]) or (
                "sorryAx" not in target_info["axioms"] and mine["const"]["value"] != target_info["const"]["value"])):
            failure = "definition type or value mismatch"
        elif any(a not in ALLOWED for a in mine["axioms"]):
            failure = "uses disallowed axioms"
        outcomes.append((name, target_info, mine, failure))
    err("------------------")
    for name, _, _, failure in outcomes:
        if failure is not None:
            err(f"Found a problem in {submission} with declaration {name}: {failure}")
    err("------------------")
    if flags["save"]:
        def info_json(info):
            return None if info is None else {"constInfo": {"kind": JSON_KIND[info["const"]["kind"]]},
                                              "axioms": info["axioms"]}
        report = [[name, {"targetInfo": info_json(t), "solutionInfo": info_json(m), "failureMode": failure_json(f, t, m)}]
                  for name, t, m, f in outcomes]
        with open(flags["save"], "w", encoding="utf-8") as handle:
            handle.write(json.dumps(report))
    if violations or any(f is not None for *_, f in outcomes):
        raise Thrown("SafeVerify check failed. For more diagnostic information about failures, run safe_verify "
                     "with the -v (or --verbose) flag.")
    err("SafeVerify check passed.")
    return 0


def main(argv: list[str]) -> int:
    args = list(argv)
    pin = "577e9531"
    if args[:1] == ["--pin"] and len(args) >= 2:
        pin = args[1]
        args = args[2:]
    dialect = next((d for prefix, d in DIALECTS.items() if pin.startswith(prefix) or prefix.startswith(pin[:8])), None)
    if dialect is None or len(pin) < 7:
        err(f"fake_safe_verify: no recorded behaviour for SafeVerify at {pin!r} (fails closed)")
        return 2
    try:
        if dialect[0] == "2024":
            return main_2024(args)
        return main_2026(args, dialect[1], allow_disproofs_flag=pin.startswith("b291b588"))
    except Thrown as exc:
        sys.stdout.flush()
        err(f"uncaught exception: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
