-- The kernel stage's checker (README.md). Lean core only: no Mathlib, no Batteries, so it builds
-- in seconds at any supported toolchain; it reads Mathlib's .olean files from `lake env`'s
-- search path when it runs.
import Lake
open Lake DSL

package prover_check

@[default_target]
lean_exe prover_check where
  root := `Main
  supportInterpreter := true
