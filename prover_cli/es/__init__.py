"""Evolution Strategies with a bit-exact seed ledger (docs/ledger.md).

Modules, from the loop down (tests/test_package_indexes.py keeps this list complete):

- `train.py`: `prover train es`, the ES loop, read top to bottom (the iteration's members through
  population.py, normalise and update through update.py, ledger, held-out evaluation).
- `population.py`: one iteration's problems, sampling seed and members (perturb, sample, restore)
  and their rewards, through prover_cli/policy/rollout.py: the loop, the probe and remote workers share it.
- `update.py`: seeds, fitness shaping and the update from an iteration's member rewards
  (`apply_rewards`): training, replay and remote workers share it.
- `signal.py`: is the update signal or noise: the signal share of each iteration's rewards, and
  `SignalMonitor`, the loop's diagnostic (metrics keys, the warning, the progress field).
- `probe.py`: `prover train es --probe`: the signal share and members' reward at es.sigma and its
  neighbours, before training, and which sigma to use.
- `replay.py`: `prover replay-seeds`, and `rebuild` (ledger records onto base weights), which
  `--resume` uses too.
- `member.py`: one member (and the held-out evaluation) away from the loop, on a remote worker
  that catches up from the ledger (Modal's ES members).
- `ledger.py`: the ledger format, written atomically after every iteration.
- `weights.py`: `NamedWeights`, the fp32 master ES perturbs / restores / updates (fingerprints
  and config.json's dtype are generic: prover_cli/policy/model_dir.py).
- `batched.py`: many members in one transformers `generate` (`es.batched_members`), each row with
  its own member's weights, stacked bit-equal to the one-at-a-time perturbation.
- `vllm_lora.py`: `es.noise = "lora"` on vLLM: each member a LoRA adapter, the population in one
  engine call.
- `vllm_worker.py`: the vLLM worker extension (perturb / restore / update via collective_rpc).
- `noise/`: the members' noise: es/noise/full.py (integer-hash noise on every weight, a fused pass
  where one applies), es/noise/definition.py (what the fused paths are checked against),
  es/noise/lowrank.py (`es.noise = "lowrank"`, `"lora"`: A B^T/sqrt(r) from the member's seed).
- `fused_cpu.py`: the same noise, perturb and update fused into one C pass per chunk on CPU
  (compiled at first use, checked against the definition, eager fallback).
- `fused_gpu.py`: the same in Triton on CUDA (optional; no FMA; checked on each device first).

"Kernel" in this package means only a Triton/CUDA device function; Lean's kernel re-check is
prover_cli/verify/kernel/.
"""
