/- prover_check's replay for Lean 4.9, 4.14, 4.15: the core `Environment.replay`, as lean4checker
calls it at v4.9.0 (b3178065), v4.14.0 (bee437b6) and v4.15.0 (be02a474), `Main.lean`
`replayFromImports`. Copied to `ProverReplay.lean` by the kernel image's build. -/
import Lean.Replay

open Lean

unsafe def replayModule (env : Environment) (names : Array Name) (consts : Array ConstantInfo) : IO Environment := do
  let mut newConstants := {}
  for name in names, ci in consts do
    newConstants := newConstants.insert name ci
  env.replay newConstants
