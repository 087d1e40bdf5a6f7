"""The comparison side: `prover report` and `prover study` read runs and compare them by one rule.

Modules, from the commands down (tests/test_package_indexes.py keeps this list complete):

- `report.py`: `prover report`: ES and GRPO runs side by side, seeds aggregated per arm, the
  report directory (report.json, report.png).
- `run_reader.py`: reading a run directory (metrics, resolved config, where its problems are) and
  the check that the runs compared saw comparable problem sets.
- `arms.py`: one run's summary; arms (the seeds of one method and setting), their curves, the
  paired differences between arms and the tables `prover report` prints.
- `report_figure.py`: report.png, the held-out curves with their bands and the training reward.
- `study/`: `prover study plan|tune|run|report`, a pre-registered design (docs/study.md).
- `compare.py`: the one comparison rule of `prover report` and `prover study`: which evaluation of
  a run, at which budget (`final_at`), and when two budgets are too far apart (`unequal`).
- `stats.py`: the intervals and tests: Wilson with the design effect, t over seeds, pairing by
  problem, Holm, power (stdlib only).
"""
