"""The run lifecycle both trainers share (`train es`, `train grpo`), with the metrics line.

Modules (tests/test_package_indexes.py keeps this list complete):

- `run.py`: the run directory of both trainers: create or refuse, resume check, base line,
  completion, the final weights whole or not at all.
- `metrics.py`: the metrics.jsonl schema shared by ES and GRPO; its one writer and one reader.
- `tracking.py`: metrics.jsonl streamed to TensorBoard / W&B / Trackio (`run.report_to`).
- `heldout.py`: held-out evaluation of the current weights, shared by ES and GRPO (the eval keys):
  sampled and greedy, 95% intervals, the base once at iteration 0.
"""
