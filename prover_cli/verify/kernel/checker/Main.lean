/-
prover_check: the kernel stage's checker for Lean 4.9 - 4.21 (prover_cli/verify/kernel/).
NOT COMPILED WHERE THIS PROJECT IS DEVELOPED (no Lean there): the Modal kernel image builds it
(`lake build prover_check`, lean4checker required at the tag's release commit) and `prover doctor
--backend modal` runs it against the kernel canaries first. The kernel replay is lean4checker's
(`ProverReplay.lean`, one of `replay/*.lean`, chosen per tag); this file only compares. Every
identifier and syntax form below is one that a source file known to build at each supported tag
uses the same way: tests/fixtures/checker_evidence.json (repository, path, commit, line), checked
by tests/test_checker_evidence.py.

    prover_check DIR

DIR holds the pairs `T0.olean` (the trusted target) `P0.olean` (the submission), `T1.olean`
`P1.olean`, ... up to the first missing `P{k}.olean`. The first target's imports are imported once;
every pair is checked in that environment. stdout:
per pair K, either `axioms K THEOREM AXIOM...` (one line per target theorem) then `pair K passed`,
or `pair K rejected REASON` / `pair K error REASON`; then `checked N imports 0|1`, exit 0. No text
of the submission is ever printed (a name could hold a line break): reasons name the trusted
target's constants, or a submission constant's index; a passed pair's axioms are all within
propext, Quot.sound, Classical.choice by then.
-/
import Lean
import ProverReplay

open Lean

def allowedAxioms : List Name := [`propext, `Quot.sound, `Classical.choice]

/-- The kind of a constant (SafeVerify 2024 `Lean.ConstantInfo.kind`'s cases). -/
def kindOf : ConstantInfo → String
  | .axiomInfo  _ => "axiom"
  | .defnInfo   _ => "def"
  | .thmInfo    _ => "theorem"
  | .opaqueInfo _ => "opaque"
  | .quotInfo   _ => "quot"
  | .inductInfo _ => "inductive"
  | .ctorInfo   _ => "constructor"
  | .recInfo    _ => "recursor"

/-- The expressions a constant holds, opaque values included (Batteries
`CollectDependents.collect`'s cases). -/
def exprsOf (ci : ConstantInfo) : Array Expr :=
  match ci with
  | ConstantInfo.defnInfo v => #[v.type, v.value]
  | ConstantInfo.thmInfo v => #[v.type, v.value]
  | ConstantInfo.opaqueInfo v => #[v.type, v.value]
  | _ => #[ci.type]

/-- The constants `ci` uses: those of its expressions, and an inductive's constructors. -/
def usedConstants (ci : ConstantInfo) : Array Name :=
  let names := (exprsOf ci).foldl (fun acc e => acc ++ e.getUsedConstants) #[]
  match ci with
  | ConstantInfo.inductInfo v => v.ctors.foldl (fun acc c => acc.push c) names
  | _ => names

/-- The axioms reachable from `todo` in `env` (an unknown name counts as one: never allowed). -/
partial def axiomsOf (env : Environment) (todo : List Name) (seen : NameSet) (found : Array Name) :
    Array Name :=
  match todo with
  | [] => found
  | n :: rest =>
    if seen.contains n then axiomsOf env rest seen found
    else match env.find? n with
      | some (ConstantInfo.axiomInfo _) => axiomsOf env rest (seen.insert n) (found.push n)
      | some ci => axiomsOf env ((usedConstants ci).toList ++ rest) (seen.insert n) found
      | none => axiomsOf env rest (seen.insert n) (found.push n)

/-- Every Nat literal of `e` reads back to itself from its printed form: a negative one (prints
with `-`) and a non-canonical one (a big-number object holding a small value) both fail. -/
def literalsOk (e : Expr) : Bool :=
  runST fun σ => do
    let ok ← ST.mkRef (σ := σ) true
    e.forEach fun
      | .lit (.natVal n) => ok.modify (· && (toString n).toNat? == some n)
      | _ => pure ()
    ok.get

/-- Whether the last component of `n` is `last`. -/
def lastIs (n : Name) (last : String) : Bool :=
  match n with
  | .str _ s => s == last
  | _ => false

/-- The fast path's declarations before the untrusted text (rules.py `HOLE`, `TRUSTED`): part of
the trusted header, compared in full and left out of the axiom check. -/
def isTrustedAux (n : Name) : Bool :=
  lastIs n "_prover_hole" || lastIs n "_prover_trusted"

/-- Why the submission's own constant number `k` is refused, before any replay. -/
def ownProblem (k : Nat) (name : Name) (ci : ConstantInfo) : Option String :=
  if ci.isUnsafe then   -- every kind, `_unsafe_rec` shims included
    some s!"constant #{k} of the submission is unsafe"
  else if (exprsOf ci).any (fun e => !literalsOk e) then
    some s!"constant #{k} of the submission holds a Nat literal that does not read back as itself"
  else match ci with
    | .defnInfo dv =>
      if dv.safety != .safe && !lastIs name "_unsafe_rec" then   -- Lean's shim for a recursive def
        some s!"constant #{k} of the submission is a partial definition"
      else none
    | _ => none

/-- Why the replayed `mine` is not the trusted `want`, or none. A theorem's proof may differ
(unless it is a fast-path declaration); everything else is compared in full. -/
def mismatch (name : Name) (want mine : ConstantInfo) : Option String :=
  if kindOf want != kindOf mine then some s!"is a {kindOf mine}"
  else if want.levelParams != mine.levelParams then some "has other universe parameters"
  else if want.type != mine.type then some "has another type"
  else if kindOf want != "theorem" || isTrustedAux name then
    if exprsOf want != exprsOf mine then some "has another value" else none
  else none

/-- The pair `t` (the trusted target's .olean), `s` (the submission's), in the header environment
(imported at the first pair, then kept): the verdict, as (word, reason or theorem axiom lines). -/
unsafe def checkPair (k : Nat) (t s : System.FilePath) (header : Option (Array Name × Environment)) :
    IO (String × Array String × Option (Array Name × Environment)) := do
  let (target, _) ← readModuleData t      -- the trusted side: unreadable ends the batch
  let (imports, env) ← match header with
    | some h => pure h
    | none => do
      let env ← importModules target.imports {} 0
      pure (target.imports.map (·.module), env)
  let header := some (imports, env)
  if target.imports.map (·.module) != imports then
    return ("error", #["the trusted target's imports are not the batch's header"], header)
  match ← (readModuleData s).toBaseIO with
  | Except.error _ => return ("error", #["the submission's .olean cannot be read"], header)
  | Except.ok (sub, _) =>
    if sub.imports.map (·.module) != imports then
      return ("rejected", #["the submission's imports are not the trusted header's"], header)
    let mut i := 0
    for name in sub.constNames, ci in sub.constants do
      if let some why := ownProblem i name ci then
        return ("rejected", #[why], header)
      i := i + 1
    match ← (replayModule env sub.constNames sub.constants).toBaseIO with
    | Except.error _ => return ("rejected", #["the kernel refused the submission's replay"], header)
    | Except.ok replayed =>
      let mut axioms : Array String := #[]
      for name in target.constNames, want in target.constants do
        if lastIs name "_unsafe_rec" then
          continue   -- a recursive def's compiler shim: never replayed, in either module
        let some mine := replayed.find? name
          | return ("rejected", #[s!"{kindOf want} {name} of the trusted target is not in the submission"], header)
        if let some why := mismatch name want mine then
          return ("rejected", #[s!"{kindOf want} {name} of the trusted target {why} in the submission"], header)
        if kindOf want == "theorem" && !isTrustedAux name then
          let found := axiomsOf replayed [name] {} #[]
          let bad := found.filter (· ∉ allowedAxioms)
          if bad.size > 0 then
            -- named only when trusted text declared them (the header, the target): a submission's
            -- own axiom could be named with a line break
            let named := bad.filter (fun a => env.contains a || target.constNames.contains a)
            let what := named.foldl (fun line a => s!"{line} {a}") ":"
            let more := if named.size < bad.size then " and axioms of the submission" else ""
            return ("rejected", #[s!"theorem {name} depends on axioms outside propext, Quot.sound, Classical.choice{what}{more}"], header)
          axioms := axioms.push (found.foldl (fun line a => s!"{line} {a}") s!"axioms {k} {name}")
      return ("passed", axioms, header)

/-- Every pair `T{k}.olean`, `P{k}.olean` of `dir` from `k` on, in order, until no `P{k}.olean`:
a passed pair's `axioms K THEOREM AXIOM...` lines, then its `pair K passed`; `pair K rejected|error
REASON` otherwise. (How many, whether the header was imported.) -/
unsafe def checkAll (dir : System.FilePath) (k : Nat) (header : Option (Array Name × Environment)) :
    IO (Nat × Bool) := do
  let s := dir / s!"P{k}.olean"
  unless (← s.pathExists) do
    return (k, header.isSome)
  let (word, lines, kept) ← checkPair k (dir / s!"T{k}.olean") s header
  if word == "passed" then
    for line in lines do
      IO.println line
    IO.println s!"pair {k} passed"
  else
    for line in lines do
      IO.println s!"pair {k} {word} {line}"
  checkAll dir (k + 1) kept

unsafe def main (args : List String) : IO UInt32 := do
  initSearchPath (← findSysroot)
  match args with
  | [dir] =>
    let (n, imported) ← checkAll dir 0 none
    IO.println s!"checked {n} imports {if imported then 1 else 0}"
    return 0
  | _ => throw <| IO.userError "usage: prover_check DIR (holding T0.olean P0.olean T1.olean P1.olean ...)"
