"""Evolution Strategies with a bit-exact seed ledger (docs/ledger.md).

- `train.py`: `prover train es`, the ES loop, read top to bottom (the iteration's members through
  population.py, normalise and update through update.py, ledger, held-out evaluation).
- `population.py`: one iteration's problems, sampling seed and members (perturb, sample, restore)
  and their rewards, through prover_cli/rollout.py: the loop, the probe and remote workers share it.
- `update.py`: seeds, fitness shaping and the update from an iteration's member rewards
  (`apply_rewards`): training, replay and remote workers share it.
- `noise.py`: device-independent noise (integer counter hash, Irwin-Hall) and the exact fp32
  arithmetic that applies it: a fused kernel where one applies, else the eager definition.
- `noise_definition.py`: the definition the kernels are checked against (constants, the
  pure-Python reference, the eager torch ops); below noise.py and both kernels.
- `kernel.py`: the same noise, perturb and update fused into one C pass per chunk on CPU
  (compiled at first use, checked against the definition, eager fallback).
- `weights.py`: `NamedWeights`, the fp32 master ES perturbs / restores / updates, and fingerprints.
- `ledger.py`: the ledger format, written atomically after every iteration.
- `replay.py`: `prover replay-seeds`, and `rebuild` (ledger records onto base weights), which
  `--resume` uses too.
- `vllm_worker.py`: the vLLM worker extension (perturb / restore / update via collective_rpc).
"""
