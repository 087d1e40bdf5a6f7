"""GRPO through TRL's `GRPOTrainer` (docs/grpo.md).

Modules (tests/test_package_indexes.py keeps this list complete):

- `train.py`: `prover train grpo`, the algorithm top to bottom: problems, reward, one
  metrics.jsonl line per optimizer step, the final weights.
- `trl_glue.py`: TRL glue: `GRPOConfig` with every default we depend on, a trainer whose prompt
  order survives a resume, the dataset, the policy's fp32 master weights, held-out evaluation.
- `resume.py`: the run directory opened or refused, the newest whole checkpoint, the config
  checked against the run's.
"""
