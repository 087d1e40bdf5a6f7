"""ES versus GRPO on the demo, as a pre-registered study: `prover study run` + `prover study report`.

    .venv/bin/python benchmarks/bench_demo.py                          # prover_cli/studies/demo.toml
    .venv/bin/python benchmarks/bench_demo.py --study demo-10seeds     # 4 arms x 10 fresh seeds, null controls
    .venv/bin/python benchmarks/bench_demo.py --study my-study.toml    # any study file
    .venv/bin/python benchmarks/bench_demo.py --threads 2

The design is the study file's, not this script's (docs/study.md): its arms (a method and
overrides; a null control is an arm with `es.shuffle_rewards = true`), seeds, training-set sizes,
one test set drawn once for every run, and the comparisons registered before any run. This calls
the same library functions as `prover study run` and `prover study report` (prover_cli/comparison/study/),
under the same lock of the study directory, then prints the report's tables as markdown (the
README's table is pasted from them) and the wall time. Runs finished by the same code with the same
config are reused, so a second call trains nothing and an interrupted one resumes run by run;
the per-seed results stay in `<study.dir>/report/per_seed.csv` and `per_seed.jsonl`.

CPU heavy: one run at a time, `--threads` torch threads (default 1: the thread count changes
GRPO's float sums, so the same count gives the same numbers on the same machine).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="demo", help="study file, or a shipped study by name (default demo)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    from prover_cli.fsio.lock import hold_outputs
    from prover_cli.out import Out
    from prover_cli.comparison.study.report import report_study
    from prover_cli.comparison.study.run import run_study
    from prover_cli.comparison.study.study_file import load_study

    torch.set_num_threads(args.threads)
    study = load_study(args.study)
    out = Out(json_mode=False)
    started = time.perf_counter()
    with hold_outputs([study.dir]):
        ran = run_study(study, reporter=out)
        report = report_study(study, reporter=out)
    wall = time.perf_counter() - started
    print(f"study {study.name} ({study.path}): {len(study.arms)} arms x {len(study.train_sizes)} training-set sizes x "
          f"{len(study.seeds)} seeds; test set {report['test_set']['problems']} held-out problems "
          f"(sha256 {report['test_set']['sha256'][:12]})\n")
    print(Path(report["out"], "tables.md").read_text(encoding="utf-8"))
    print(f"headline: {report['headline']}")
    print(f"wall: {wall / 60:.1f} min, {ran['trained']} runs trained, {ran['reused']} reused "
          f"({args.threads} torch thread{'s' if args.threads > 1 else ''}); report in {report['out']}")


if __name__ == "__main__":
    main()
