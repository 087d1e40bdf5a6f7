/- prover_check's replay for Lean 4.20, 4.21: lean4checker's own patched `replay'`
(`Lean4Checker/Replay.lean`), as lean4checker calls it at v4.20.0 (aeaca0f1) and v4.21.0
(ad292fe4), `Main.lean` `replayFromImports` (the core copy is deprecated from 4.19). Copied to
`ProverReplay.lean` by the kernel image's build. -/
import Lean4Checker.Replay

open Lean

unsafe def replayModule (env : Environment) (names : Array Name) (consts : Array ConstantInfo) : IO Environment := do
  let mut newConstants := {}
  for name in names, ci in consts do
    newConstants := newConstants.insert name ci
  env.replay' newConstants
