"""The kernel stage's canary: does it hold on this toolchain? Core-only canaries straight to the
stage (one through a fooled fast path) and the public attacks on checkers, each of which the
checker must reject; run once per toolchain and checker (a pass cached), and by `prover doctor`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from prover_cli.errors import BackendError
from prover_cli.verify.kernel.job import Elaborated, KernelJob, KernelResult
from prover_cli.verify.kernel.pins import CHECKER_AXIOMS, CheckerPin
from prover_cli.verify.kernel.stage import KernelStage, compile_module, kernel_verdict
from prover_cli.verify.lean.canary import Canary, cache_dir, cached_pass, project_files, store_pass
from prover_cli.verify.text.rules import Verdict
from prover_cli.verify.text.statement import Candidate

if TYPE_CHECKING:
    from prover_cli.config import VerifyConfig


# --------------------------------------------------------------------------------------------
# The stage's canary: does it hold on this toolchain?
# --------------------------------------------------------------------------------------------

def _k(name: str, rest: str) -> str:
    return f"theorem prover_kernel_canary_{name}{rest}"


# Lean core only (no Mathlib names), so they mean the same under any header; `expect` as the
# final verdict. Each goes straight to the stage, as if the fast path had been fooled into calling
# it verified, except the false statement, which goes through a fast path first when one is given
# (with a REPL that forges its answers, only the stage stands between it and `verified`).
FOOLED = "false statement"
KERNEL_CANARIES: tuple[Canary, ...] = (
    Canary("honest", "an honest proof passes the kernel stage (elaboration, replay, statement, axioms read)",
           _k("honest", " : 2 + 2 = 4 := by"), _k("honest", " : 2 + 2 = 4 := by") + "\n  decide", "verified"),
    Canary(FOOLED, "a false statement the fast path called verified does not pass the kernel stage",
           _k("false", " : 2 + 2 = 5 := by"), _k("false", " : 2 + 2 = 5 := by") + "\n  decide", "rejected"),
    Canary("another statement", "a module whose target states something else is rejected (statement as Expr)",
           _k("other", " : 2 + 2 = 4 := by"), _k("other", " : 2 + 2 = 4 ∧ True := by") + "\n  exact ⟨rfl, trivial⟩",
           "rejected"),
    Canary("declared axiom", "a proof through a declared axiom is rejected (axioms of the replayed environment)",
           _k("axiom", " : 2 + 2 = 5 := by"),
           "axiom prover_kernel_canary_ax : 2 + 2 = 5\n\n" + _k("axiom", " : 2 + 2 = 5 := by")
           + "\n  exact prover_kernel_canary_ax", "rejected"),
    Canary("sorry", "a proof with `sorry` is rejected (sorryAx in the replayed environment)",
           _k("sorry", " : 2 + 2 = 5 := by"), _k("sorry", " : 2 + 2 = 5 := by") + "\n  sorry", "rejected"),
)


@dataclass(frozen=True)
class KernelAttack:
    """A public attack on checkers, as two files: the trusted target and what the attack's
    elaboration leaves (the submission, compiled with `lean -o` like any proof). The checker must
    reject it; a rejection anywhere else (the submission does not compile) tests nothing, so it
    fails the canary too."""

    name: str
    rule: str
    source: str        # repository, path, commit the texts are adapted from
    theorem: str
    target: str
    submission: str
    exact_imports: bool = False   # only a checker promising equal imports is held to it


_CHAR_OFNAT = """prelude
set_option genCtorIdx false
set_option linter.all false

unsafe axiom lcErased : Type
unsafe axiom lcAny : Type
unsafe axiom lcVoid : Type

universe u

inductive False : Prop

inductive True' : Prop where
  | intro : True'

inductive Unit'' where
  | intro : Unit''

inductive Nat where
  | zero : Nat
  | succ (n : Nat) : Nat

structure Char : Type where
  mk ::
  n : False

structure Box : Type where
  mk ::
  f : True'

inductive List (α : Type u) where
  | nil : List α
  | cons (hd : α) (tl : List α) : List α

structure String where
  ofList ::
  data : List Char

noncomputable def Char.ofNat (n : Nat) : Box := Box.mk True'.intro

noncomputable def M (l : List Char) : Type :=
  @List.rec Char (fun _ => Type) Unit'' (fun _ _ _ => Char) l

noncomputable def head (l : List Char) : M l :=
  @List.rec Char M Unit''.intro (fun hd _ _ => hd) l

noncomputable def confused : Char := head (String.data "\\x02")

theorem prover_attack_char_ofnat : False := Char.n confused
"""

_PROJ_ELAB = """import Lean
open Lean Elab Term

structure S : Type where
  a : Nat{extra}

def T : Type := S

elab "pr% " s:term : term => do
  return Expr.proj `S 0 (← elabTerm s none)

theorem prover_attack_proj_trick : ∀ (s : T), (pr% s) = (0 : Nat) := {proof}
"""

# The olean_issue payload, with the module written by the payload itself (issue #39): a command run
# during `lean -o` may write Proof.olean and exit 0 before Lean writes its own, so the checker alone
# carries the guarantee. This one writes the file's constants but the unsafe one, so the unsafe
# check cannot be what refuses it: the Nat-literal check must. {value}: the forged literal;
# -4294967296 as olean_issue, or 1099511627776 (2^40), a positive value held as a big-number object
# (an Int that large is one), which prints as a natural number: `lean_nat_big_le` and
# `lean_nat_big_sub` take a big number for larger than any small one (src/runtime/object.cpp,
# reasoned, not run), so `decide` proves both facts below. NOT COMPILED HERE (no Lean); the doctor's
# kernel canary compiles it on the kernel image and fails, naming it, if it does not compile.
_HAND_BUILT = """import Lean

open Lean Elab Command

unsafe def badNatUnsafe : Nat := unsafeCast ({value} : Int)

@[implemented_by badNatUnsafe] opaque badNatVal : Nat

run_elab
  addDecl <| .defnDecl {{
    name        := .str .anonymous "badNat"
    levelParams := []
    type        := .const ``Nat []
    value       := .lit <| .natVal badNatVal
    hints       := .opaque
    safety      := .safe
  }}

theorem {theorem} : False := by
{proof}
  omega

run_cmd do
  let env ← getEnv
  let data ← mkModuleData env
  let mut names := #[]
  let mut consts := #[]
  for name in data.constNames, ci in data.constants do
    if !ci.isUnsafe then
      names := names.push name
      consts := consts.push ci
  saveModuleData (((← getFileName).dropRight 5) ++ ".olean") env.mainModule
    {{ data with constNames := names, constants := consts }}
  IO.Process.exit 0
"""


def _hand_built(theorem: str, value: str, facts: tuple[str, str]) -> str:
    proof = "\n".join(f"  have h{k} : {fact} := by decide" for k, fact in enumerate(facts))
    return _HAND_BUILT.format(theorem=theorem, value=value, proof=proof)


# Each text is the public test case with its theorem renamed (and comments dropped); the Level
# `unsafeCast` case of SafeVerify PR #19 (commit 5cafc55) has no public source text (the PR lists
# it among its test results; no file at b291b588 holds it), so it is a stand-in test only
# (tests/fake_checker.py) and no canary here.
KERNEL_ATTACKS: tuple[KernelAttack, ...] = (
    KernelAttack("olean_issue", "a Nat literal forged with `unsafeCast` at elaboration time is refused (Nat-literal "
                 "check, no unsafe constant)",
                 "leanprover/comparator tests/projects/olean_issue (e0a37c608aca, at 19e111e2141c)",
                 # the target imports Lean as the submission does: the import check must not be what decides
                 "prover_attack_olean_issue", "import Lean\n\ntheorem prover_attack_olean_issue : False := sorry\n",
                 """import Lean

open Lean

unsafe def badNatUnsafe : Nat := unsafeCast (-4294967296 : Int)

@[implemented_by badNatUnsafe] opaque badNatVal : Nat

run_elab
  addDecl <| .defnDecl {
    name        := .str .anonymous "badNat"
    levelParams := []
    type        := .const ``Nat []
    value       := .lit <| .natVal badNatVal
    hints       := .opaque
    safety      := .safe
  }

theorem prover_attack_olean_issue : False := by
  have truly_marvelous_0 : ¬badNat ≤ 9223372036854775807 := by decide
  have truly_marvelous_1 : ¬9223372036854775807 < badNat := by decide
  omega
"""),
    KernelAttack("char_ofnat_issue", "a `prelude` module that redefines `False` and `Char` is refused (imports)",
                 "leanprover/comparator tests/projects/char_ofnat_issue (8c0e44e73c53, at 19e111e2141c)",
                 "prover_attack_char_ofnat", "theorem prover_attack_char_ofnat : False := sorry\n", _CHAR_OFNAT),
    KernelAttack("proj_trick", "a structure of the target redefined in the submission is refused (header "
                 "declarations of every kind compared)",
                 "leanprover/comparator tests/projects/proj_trick (322d8cae1136, at 19e111e2141c)",
                 "prover_attack_proj_trick", _PROJ_ELAB.format(extra="", proof="sorry"),
                 _PROJ_ELAB.format(extra="\n  h : False", proof="by\n  intro s\n  exact (S.h s).elim")),
    KernelAttack("dropped imports", "a submission that imports less than the target is refused (imports)",
                 "GasStationManager/SafeVerify PR #19, case 2 `Missing Mathlib import` (check added in bea2fbd)",
                 "prover_attack_dropped_imports", "import Lean\n\ntheorem prover_attack_dropped_imports : True := sorry\n",
                 "theorem prover_attack_dropped_imports : True := trivial\n"),
    KernelAttack("opaque_value", "an axiom reached only through an opaque's value is found (the axiom walk reads "
                 "opaque values)",
                 "leanprover/comparator tests/projects/opaque_value (a4f69682, test corrected at 066c3bc)",
                 "prover_attack_opaque_value", "theorem prover_attack_opaque_value : False := sorry\n",
                 "axiom f : False\nopaque v : False := f\ntheorem prover_attack_opaque_value : False := v\n"),
    KernelAttack("olean_issue hand-built", "a forged negative Nat literal in a module with no unsafe constant is "
                 "refused (Nat-literal check alone)",
                 "leanprover/comparator tests/projects/olean_issue (e0a37c608aca), written by its own payload (#39)",
                 "prover_attack_olean_hand_built", "import Lean\n\ntheorem prover_attack_olean_hand_built : False := sorry\n",
                 _hand_built("prover_attack_olean_hand_built", "-4294967296",
                             ("¬badNat ≤ 9223372036854775807", "¬9223372036854775807 < badNat"))),
    KernelAttack("non-canonical literal", "a positive Nat literal that does not read back as itself is refused "
                 "(`(toString n).toNat? == some n`, not only a `-`)",
                 "this project (#39), from comparator's olean_issue with 2^40 for the forged value",
                 "prover_attack_noncanonical", "import Lean\n\ntheorem prover_attack_noncanonical : False := sorry\n",
                 _hand_built("prover_attack_noncanonical", "1099511627776",
                             ("badNat - 1099511627776 = 0", "¬badNat ≤ 1099511627776"))),
    KernelAttack("extra import", "a submission that imports more than the target is refused (imports equal)",
                 "this project (issue #32): SafeVerify's 2026 check accepts a superset",
                 "prover_attack_extra_import", "theorem prover_attack_extra_import : True := sorry\n",
                 "import Lean\n\ntheorem prover_attack_extra_import : True := trivial\n", exact_imports=True),
)


def attacks_for(pin: CheckerPin) -> tuple[KernelAttack, ...]:
    return tuple(a for a in KERNEL_ATTACKS if not a.exact_imports or pin.imports == "exact")


def check_attack(stage: KernelStage, attack: KernelAttack) -> KernelResult:
    """The attack's two files compiled afresh, then the checker on them (a batch of its own: its
    imports are not the configured header's)."""
    start = time.monotonic()
    compiled = [compile_module(stage.runner, stage.lean_command, text, stage.timeout_s, what)[0]
                for text, what in ((attack.target, "the attack's target"), (attack.submission, "the attack"))]
    bad = next((c for c in compiled if isinstance(c, str)), None)
    if bad is not None:
        return KernelResult("error", f"{bad}: the attack must compile for the canary to test the checker",
                            time_s=round(time.monotonic() - start, 4))
    job = KernelJob("", attack.target, attack.theorem, "")
    target, submission = (cast(bytes, c) for c in compiled)   # no reason among them: both compiled
    [result] = stage._check_batch([(job, Elaborated(target, submission, time.monotonic() - start))],
                                  CHECKER_AXIOMS)
    return result


def run_kernel_canary(stage: KernelStage, header: str, fast_path: Any = None) -> list[dict[str, Any]]:
    """Every kernel canary through `stage` (in parallel), then every public attack the pin is
    held to (`attacks_for`): one result each, with its seconds. `fast_path(candidate) ->
    Verdict`, when given, judges the fooled case first."""
    fast: dict[str, Verdict] = {}
    if fast_path is not None:
        canary = next(c for c in KERNEL_CANARIES if c.name == FOOLED)
        fast[FOOLED] = fast_path(Candidate(id=f"kernel canary: {FOOLED}", header=header, body=canary.body,
                                           target=canary.target, statement=canary.statement))
    staged = [c for c in KERNEL_CANARIES if fast.get(c.name) is None or fast[c.name].status == "verified"]
    results = dict(zip((c.name for c in staged), stage.check(
        [KernelJob(header, c.statement, c.target, c.body) for c in staged], CHECKER_AXIOMS)))
    out = []
    for canary in KERNEL_CANARIES:
        first = fast.get(canary.name) or Verdict("verified", "straight to the stage")
        verdict = kernel_verdict(first, results.get(canary.name))
        out.append({"canary": canary.name, "rule": canary.rule, "expect": canary.expect, "got": verdict.status,
                    "reason": verdict.reason, "fast_path": fast[canary.name].status if canary.name in fast else None,
                    "time_s": results[canary.name].time_s if canary.name in results else 0.0,
                    "ok": verdict.status == canary.expect})
    for attack in attacks_for(stage.pin):
        result = check_attack(stage, attack)
        by_checker = result.status == "rejected" and result.reason.startswith("kernel check (")
        out.append({"canary": f"attack: {attack.name}", "rule": attack.rule, "expect": "rejected",
                    "got": result.status, "reason": result.reason, "fast_path": None, "time_s": result.time_s,
                    "source": attack.source, "ok": by_checker})
    return out


KERNEL_CANARY_VERSION = 5   # 3: the public attacks (KERNEL_ATTACKS); 4: the fast path's declarations in both modules; 5: #39's three


def ensure_kernel_canary(stage: KernelStage, verify_config: VerifyConfig, fast_path: Any = None) -> None:
    """Run the kernel canary once per toolchain and checker (a pass is cached on disk beside the
    fast path's canary; a failure never is); BackendError naming the rule when one fails."""
    import hashlib

    project, files = project_files(verify_config)
    fields = {"kernel_canary": KERNEL_CANARY_VERSION, "pin": stage.pin.commit, "lean": stage.lean_command,
              "checker": stage.checker_command, "project": str(project), "files": files,
              "header": verify_config.header, "runner": getattr(stage.runner, "canary_key", "local"),
              "fast_path": fast_path is not None}
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()[:24]
    path = cache_dir() / f"kernel-{key}.json"
    if cached_pass(path):
        return
    results = run_kernel_canary(stage, verify_config.header, fast_path)
    if not all(r["ok"] for r in results):
        raise BackendError("verification refuses to run: " + kernel_canary_failures(results),
                           hint="run `prover doctor`; check the pinned checker (verify.kernel_checker_command) "
                                "and verify.lean_command")
    store_pass(path, fields, results)


def kernel_canary_failures(results: list[dict[str, Any]]) -> str:
    return "; ".join(f"rule `{r['rule']}` does not hold (kernel canary {r['canary']!r}: expected {r['expect']}, "
                     f"got {r['got']}: {r['reason'][:400]})" for r in results if not r["ok"])
