#!/usr/bin/env bash
# The main job on the embedded default (configs/demo.toml): a tiny model on CPU, the countdown
# task, local backend, no credentials, nothing downloaded. Every stage is a real `prover` command.
#
# The base policy is `tiny-countdown`, the tiny random model after a short supervised warm-start
# on generated countdown solutions (prover_cli/policy/warmstart.py; built on first use, with a line saying
# so, then cached): it solves some held-out problems, not all. ES and GRPO train from it on the same
# problems with the same sample budget, both evaluate their current weights on the same held-out
# problems (both metrics, sampled and greedy, with 95% intervals), and the demo ends with
# `prover report` of both runs, one line per metric, and what one seed cannot tell.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/demo.toml
RUN=runs/demo
rm -rf "$RUN"

stage() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

stage "1/8 doctor: what the demo needs here, and what only a real run would"
prover doctor --config "$CONFIG"

stage "2/8 prepare-data: countdown problems -> $RUN/problems.jsonl"
prover prepare-data --config "$CONFIG"

stage "3/8 generate: samples of the held-out problems from the base model -> $RUN/samples.jsonl"
python3 - "$CONFIG" <<'PY'
import sys
from prover_cli.config import load_config
from prover_cli.demo import build_base
build_base(load_config(sys.argv[1]), say=lambda line: print(line, flush=True))
PY
prover generate --config "$CONFIG" --set generate.split=valid

stage "4/8 train es from the base -> $RUN/es/{ledger.json,metrics.jsonl,final/}"
python3 - "$CONFIG" <<'PY'
import sys
from prover_cli.config import load_config
from prover_cli.demo import budget_line, noise_line
config = load_config(sys.argv[1])
print(budget_line(config))
print(noise_line(config))
PY
prover train es --config "$CONFIG" --set run.dir="$RUN/es"
python3 - "$RUN/es" <<'PY'
# how much of the ES update was signal (es/signal.py): the whole run's pooled share, and the mean of
# the es/signal_share values the run recorded (each pooled over its last 5 iterations)
import json, pathlib, sys
from prover_cli.es.signal import NOISE_BELOW, pooled_share, share_error
lines = [json.loads(x) for x in (pathlib.Path(sys.argv[1]) / "metrics.jsonl").read_text().splitlines()]
parts = [(r["es/signal_var"], r["es/noise_var"]) for r in lines if "es/noise_var" in r]
shares = [r["es/signal_share"] for r in lines if "es/signal_share" in r]
run, error = pooled_share(parts, window=len(parts)), share_error(parts, window=None)
if run is not None and shares:
    print(f"ES signal share: {run:.2f} +- {error or 0:.2f} over the run's {len(parts)} iterations (mean of the recorded "
          f"es/signal_share {sum(shares) / len(shares):.2f}); 1 = all signal, below {NOISE_BELOW} mostly noise")
PY

stage "5/8 eval: pass@k of the ES weights, rebuilt from the ledger"
prover eval --config "$CONFIG" --set run.dir="$RUN/es" --ledger "$RUN/es/ledger.json"

stage "6/8 replay-seeds: rebuild the ES run's final weights from the base model + its ledger"
prover replay-seeds "$RUN/es/ledger.json" --out "$RUN/es/replayed" --config "$CONFIG"
python3 - "$RUN/es" <<'PY'
import hashlib, pathlib, sys
run = pathlib.Path(sys.argv[1])
digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
a, b = digest(run / "final" / "model.safetensors"), digest(run / "replayed" / "model.safetensors")
ledger = (run / "ledger.json").stat().st_size
print(f"ledger {ledger} bytes; final/ sha256 {a[:16]}  replayed/ sha256 {b[:16]}  ->", "bit-identical" if a == b else "DIFFERENT")
sys.exit(0 if a == b else 1)
PY

stage "7/8 train grpo from the same base, same problems -> $RUN/grpo/"
# evaluated at ES's sample budgets: run.eval_every counts ES iterations, GRPO steps are smaller
GRPO_EVAL_EVERY=$(python3 -c 'import sys; from prover_cli.config import load_config; from prover_cli.demo import grpo_eval_every; print(grpo_eval_every(load_config(sys.argv[1])))' "$CONFIG")
prover train grpo --config "$CONFIG" --set run.dir="$RUN/grpo" --set run.eval_every="$GRPO_EVAL_EVERY"

stage "8/8 held-out verified rate, base -> ES and GRPO, both metrics with 95% intervals; prover report"
prover report "$RUN/es" "$RUN/grpo" --out "$RUN/report"
python3 - "$CONFIG" "$RUN/es" "$RUN/grpo" <<'PY'
import sys
from prover_cli.config import load_config
from prover_cli.demo import comparison
print("\n".join(comparison(load_config(sys.argv[1]), sys.argv[2], sys.argv[3])["lines"]))
PY
cat <<'EOF'

One seed per method cannot say whether ES or GRPO learns more here: the intervals above cover the
held-out problems and samples, not the luck of training, and from seed to seed ES - GRPO moves by
more than these lines' gaps. What answers it is a study, designed before it runs
(docs/study.md): ES and GRPO at two training-set sizes on one test set, over several seeds,
the pre-registered comparison first; `demo-10seeds` is the README's 10 fresh seeds with null controls:
    prover study run demo          # trains what is missing, then reports (docs/study.md)
    .venv/bin/python benchmarks/bench_demo.py --study demo-10seeds
EOF
