/-
prover_check: the kernel stage's checker for Lean 4.9 - 4.21 (prover_cli/verify/kernel.py).
NOT COMPILED ON THE MACHINES THIS PROJECT IS DEVELOPED ON (no Lean there): the Modal kernel image
builds it and `prover doctor --backend modal` runs it against the kernel canaries first. Written
from the documented rules of SafeVerify (GasStationManager/SafeVerify, Main.lean at b291b588),
lean4checker (`Lean.Environment.replay`) and comparator (leanprover/comparator); read, not copied.
README.md lists each Lean API used and where it was read.

    prover_check PAIRS_FILE

PAIRS_FILE: one line per pair, `TARGET.olean<TAB>SUBMISSION.olean`, paths relative to the
file's directory. The first target's imports are the batch's header: imported ONCE, and every
pair is checked against that one environment. On stdout, one JSON line per pair, in order:
  {"pair": K, "verdict": "passed", "axioms": {"THEOREM": ["propext", ...], ...}}
  {"pair": K, "verdict": "rejected", "reason": "..."}     -- the submission breaks the contract
  {"pair": K, "verdict": "error", "reason": "..."}        -- the trusted target is unusable
then `{"checked": N, "imports": 1}` and exit 0. Anything else (a crash, a missing last line) is
the whole batch's failure; the caller splits the batch.

The contract, per pair:
 (a) the submission's imports equal the trusted target's, which equal the batch header's;
 (b) no unsafe or partial constant (compiler `_unsafe_rec` shims aside); every constant of the
     submission module replayed by the kernel (`Environment.replay`) from the header environment;
 (c) every Expr and Level rebuilt before the replay; no Nat literal that prints as negative; the
     module replayed a second time from a second rebuild, and both replays agree on every theorem;
     every constant of the target module (header declarations of every kind) present in the
     submission with the same kind, universe parameters and type (and value, for definitions and
     opaques; constructor and recursor shapes for inductives);
 (d) so the target theorem's type and universe parameters equal the trusted statement's; the
     fast path's declarations before the untrusted text (`isTrustedAux`) equal the target's in
     full, values included;
 (e) the axioms of each target theorem (`isTrustedAux` ones aside), collected in the replayed
     environment, within propext, Quot.sound, Classical.choice.
-/
import Lean

open Lean

def allowedAxioms : List Name := [`propext, `Quot.sound, `Classical.choice]

-- ---------------------------------------------------------------------------------------------
-- Rebuilding: new objects for every node, so nothing of the compacted region is reused
-- (a value forged with `unsafeCast` at elaboration time keeps its shape only by reference)
-- ---------------------------------------------------------------------------------------------

partial def rebuildLevel : Level → Level
  | .zero => .zero
  | .succ l => .succ (rebuildLevel l)
  | .max a b => .max (rebuildLevel a) (rebuildLevel b)
  | .imax a b => .imax (rebuildLevel a) (rebuildLevel b)
  | .param n => .param n
  | .mvar m => .mvar m

partial def rebuildExpr : Expr → Expr
  | .bvar i => .bvar i
  | .fvar f => .fvar f
  | .mvar m => .mvar m
  | .sort l => .sort (rebuildLevel l)
  | .const n ls => .const n (ls.map rebuildLevel)
  | .app f a => .app (rebuildExpr f) (rebuildExpr a)
  | .lam n t b bi => .lam n (rebuildExpr t) (rebuildExpr b) bi
  | .forallE n t b bi => .forallE n (rebuildExpr t) (rebuildExpr b) bi
  | .letE n t v b nd => .letE n (rebuildExpr t) (rebuildExpr v) (rebuildExpr b) nd
  | .lit (.natVal n) => .lit (.natVal n)
  | .lit (.strVal s) => .lit (.strVal s)
  | .mdata d e => .mdata d (rebuildExpr e)
  | .proj s i e => .proj s i (rebuildExpr e)

def rebuildConstant : ConstantInfo → ConstantInfo
  | .axiomInfo a => .axiomInfo { a with type := rebuildExpr a.type }
  | .defnInfo d => .defnInfo { d with type := rebuildExpr d.type, value := rebuildExpr d.value }
  | .thmInfo t => .thmInfo { t with type := rebuildExpr t.type, value := rebuildExpr t.value }
  | .opaqueInfo o => .opaqueInfo { o with type := rebuildExpr o.type, value := rebuildExpr o.value }
  | .quotInfo q => .quotInfo { q with type := rebuildExpr q.type }
  | .inductInfo i => .inductInfo { i with type := rebuildExpr i.type }
  | .ctorInfo c => .ctorInfo { c with type := rebuildExpr c.type }
  | .recInfo r => .recInfo { r with type := rebuildExpr r.type,
                                    rules := r.rules.map (fun rule => { rule with rhs := rebuildExpr rule.rhs }) }

def kindOf : ConstantInfo → String
  | .axiomInfo _ => "axiom"
  | .defnInfo _ => "def"
  | .thmInfo _ => "theorem"
  | .opaqueInfo _ => "opaque"
  | .quotInfo _ => "quot"
  | .inductInfo _ => "inductive"
  | .ctorInfo _ => "constructor"
  | .recInfo _ => "recursor"

def valueOf : ConstantInfo → Option Expr
  | .defnInfo d => some d.value
  | .thmInfo t => some t.value
  | .opaqueInfo o => some o.value
  | _ => none

/-- The declarations the fast path adds before the untrusted text, and the kernel stage adds to
both modules in the same place (prover_cli/verify/rules.py `HOLE`, `TRUSTED`; a namespace the
trusted header leaves open prefixes them): part of the trusted header. `_prover_trusted` is proved
by the hole axiom by construction, so each is compared in full (its value too) with the trusted
target's own, and neither is held to the axiom list; a theorem that uses one depends on
`_prover_hole`, which no policy allows. -/
def isTrustedAux : Name → Bool
  | .str _ s => s == "_prover_hole" || s == "_prover_trusted"
  | _ => false

/-- Lean's compiler emits `f._unsafe_rec` shims for recursive definitions: not user code. -/
def isUnsafeRecShim : Name → Bool
  | .str _ s => s == "_unsafe_rec"
  | _ => false

-- ---------------------------------------------------------------------------------------------
-- Checks on the submission module's own data, before any replay
-- ---------------------------------------------------------------------------------------------

def importList (mod : ModuleData) : Array (Name × Bool) :=
  mod.imports.map fun i => (i.module, i.runtimeOnly)

partial def natLiterals : Expr → Array Nat
  | .lit (.natVal n) => #[n]
  | .app f a => natLiterals f ++ natLiterals a
  | .lam _ t b _ => natLiterals t ++ natLiterals b
  | .forallE _ t b _ => natLiterals t ++ natLiterals b
  | .letE _ t v b _ => natLiterals t ++ natLiterals v ++ natLiterals b
  | .mdata _ e => natLiterals e
  | .proj _ _ e => natLiterals e
  | _ => #[]

def constantExprs (ci : ConstantInfo) : Array Expr :=
  match valueOf ci with
  | some v => #[ci.type, v]
  | none => #[ci.type]

/-- Throws the reason the module breaks (b) or the Nat-literal rule of (c). -/
def checkOwnConstants (mod : ModuleData) : IO Unit := do
  for name in mod.constNames, ci in mod.constants do
    if ci.isUnsafe && !isUnsafeRecShim name then
      throw <| IO.userError s!"unsafe constant {name} in the submission"
    if ci.isPartial then
      throw <| IO.userError s!"partial constant {name} in the submission"
    for e in constantExprs ci do
      for n in natLiterals e do
        let shown := toString (Expr.lit (.natVal n))
        if shown.startsWith "-" then
          throw <| IO.userError s!"Nat literal in {name} prints as {shown}: not a natural number (a forged object)"

/-- Every constant of the module, rebuilt, replayed by the kernel into `env` (the header's). -/
def replayModule (env : Environment) (mod : ModuleData) : IO Environment := do
  let mut newConstants := {}
  for name in mod.constNames, ci in mod.constants do
    if !isUnsafeRecShim name then
      newConstants := newConstants.insert name (rebuildConstant ci)
  env.replay newConstants

-- ---------------------------------------------------------------------------------------------
-- Comparing with the trusted target, collecting axioms
-- ---------------------------------------------------------------------------------------------

/-- Why the submission's `mine` does not match the trusted `want`, or none. -/
def mismatch (want mine : ConstantInfo) : Option String :=
  if kindOf want != kindOf mine then some s!"is a {kindOf mine}, the trusted one a {kindOf want}"
  else if want.levelParams != mine.levelParams then some "has other universe parameters"
  else if want.type != mine.type then some "has another type"
  else match want, mine with
    | .thmInfo _, .thmInfo _ => none
    | .defnInfo a, .defnInfo b =>
      if a.value != b.value then some "has another value"
      else if a.safety != b.safety then some "has another safety" else none
    | .opaqueInfo a, .opaqueInfo b => if a.value != b.value then some "has another value" else none
    | .inductInfo a, .inductInfo b =>
      if a.ctors != b.ctors || a.numParams != b.numParams || a.numIndices != b.numIndices || a.all != b.all
      then some "is another inductive type" else none
    | .ctorInfo a, .ctorInfo b =>
      if a.induct != b.induct || a.cidx != b.cidx || a.numFields != b.numFields then some "is another constructor"
      else none
    | _, _ => none

partial def axiomsOf (env : Environment) : List Name → NameSet → Array Name → Array Name
  | [], _, out => out
  | n :: rest, seen, out =>
    if seen.contains n then axiomsOf env rest seen out
    else match env.find? n with
      | some (.axiomInfo _) => axiomsOf env rest (seen.insert n) (out.push n)
      | some ci => axiomsOf env (ci.getUsedConstants.toList ++ rest) (seen.insert n) out
      | none => axiomsOf env rest (seen.insert n) (out.push n)   -- unknown: reported, never allowed

-- ---------------------------------------------------------------------------------------------
-- One pair
-- ---------------------------------------------------------------------------------------------

def line (pair : Nat) (verdict : String) (rest : List (String × Json)) : String :=
  (Json.mkObj ([("pair", toJson pair), ("verdict", Json.str verdict)] ++ rest)).compress

/-- The submission against the target, in the header environment `env`: the axioms of every
target theorem when it meets the contract, else the reason (thrown). -/
def checkSubmission (env : Environment) (header : Array (Name × Bool)) (target sub : ModuleData) :
    IO (List (String × Json)) := do
  if importList sub != header then
    let mine := (importList sub).map (·.1)
    let want := header.map (·.1)
    throw <| IO.userError s!"the submission's imports {mine} are not the trusted header's {want}"
  checkOwnConstants sub
  let replayed ← replayModule env sub
  let again ← replayModule env sub            -- a second rebuild, a second kernel pass
  let mut axioms : List (String × Json) := []
  for name in sub.constNames, ci in sub.constants do
    if let .thmInfo _ := ci then
      match replayed.find? name, again.find? name with
      | some a, some b =>
        if a.type != b.type || valueOf a != valueOf b then
          throw <| IO.userError s!"theorem {name}: the two replays disagree"
      | _, _ => throw <| IO.userError s!"theorem {name} is missing after the replay"
  for name in target.constNames, want in target.constants do
    let some mine := replayed.find? name
      | throw <| IO.userError s!"{kindOf want} {name} of the trusted target is not in the submission"
    if !(sub.constNames.contains name) then
      throw <| IO.userError s!"{kindOf want} {name} of the trusted target is not declared by the submission module"
    if let some why := mismatch want mine then
      throw <| IO.userError s!"{kindOf want} {name} {why} than the trusted target's"
    if isTrustedAux name && valueOf want != valueOf mine then
      throw <| IO.userError s!"{kindOf want} {name} has another value than the trusted target's"
    if !isTrustedAux name then
      if let .thmInfo _ := want then
        let found := axiomsOf replayed [name] {} #[]
        let bad := found.filter (fun a => !(allowedAxioms.contains a))
        if !bad.isEmpty then
          throw <| IO.userError s!"theorem {name} depends on axioms outside propext, Quot.sound, Classical.choice: {bad}"
        axioms := axioms ++ [(toString name, Json.arr (found.map fun a => Json.str (toString a)))]
  return axioms

/-- One line of the answer, and the batch's header (imported at the first pair, then kept). -/
def checkPair (dir : System.FilePath) (k : Nat) (entry : String)
    (header : Option (Array (Name × Bool) × Environment)) :
    IO (String × Option (Array (Name × Bool) × Environment)) := do
  let [t, s] := entry.splitOn "\t"
    | return (line k "error" [("reason", Json.str "not a TARGET<TAB>SUBMISSION line")], header)
  let (target, _) ← readModuleData (dir / t)   -- the trusted side: unreadable ends the batch
  let (imports, env) ← match header with
    | some h => pure h
    | none => do
      let env ← importModules target.imports {} 0
      IO.eprintln s!"prover_check: imported the header ({target.imports.size} imports), once for this batch"
      pure (importList target, env)
  let header := some (imports, env)
  if importList target != imports then
    return (line k "error" [("reason", Json.str "the trusted target's imports are not the batch's header")], header)
  match ← (readModuleData (dir / s)).toBaseIO with
  | .error e =>
    return (line k "error" [("reason", Json.str s!"the submission's .olean cannot be read: {e}")], header)
  | .ok (sub, _) =>
    try
      let axioms ← checkSubmission env imports target sub
      return (line k "passed" [("axioms", Json.mkObj axioms)], header)
    catch e =>
      return (line k "rejected" [("reason", Json.str (toString e))], header)

def main (args : List String) : IO UInt32 := do
  let [pairsFile] := args
    | do IO.eprintln "usage: prover_check PAIRS_FILE"; return 2
  initSearchPath (← findSysroot)
  let pairsPath : System.FilePath := pairsFile
  let dir := pairsPath.parent.getD "."
  let lines := (← IO.FS.lines pairsPath).filter (· != "")
  let mut header : Option (Array (Name × Bool) × Environment) := none
  let mut k := 0
  for entry in lines do
    let (out, kept) ← checkPair dir k entry header
    header := kept
    IO.println out
    (← IO.getStdout).flush
    k := k + 1
  IO.println (Json.mkObj [("checked", toJson k), ("imports", toJson (if header.isSome then 1 else 0))]).compress
  return 0
