#!/usr/bin/env bash
# The main job on the embedded default: tiny random model on CPU, countdown task, local backend,
# no credentials, nothing downloaded. Every stage is a real `prover` command; see configs/demo.toml.
# A random tiny model solves no countdown problem, so the countdown rewards are all 0 (ES records
# skipped updates); stage 6 shows ES learning on an objective the tiny model can reach, and
# stage 7 rebuilds those trained weights bit for bit from the base model and the seed ledger.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=configs/demo.toml
RUN=runs/demo
rm -rf "$RUN"

stage() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

stage "1/8 doctor: what this machine has"
prover doctor --config "$CONFIG"

stage "2/8 prepare-data: countdown problems -> $RUN/problems.jsonl"
prover prepare-data --config "$CONFIG"

stage "3/8 generate: samples from the tiny model -> $RUN/samples.jsonl"
prover generate --config "$CONFIG"

stage "4/8 train es: a short Evolution Strategies run -> $RUN/ledger.json, metrics.jsonl, final/"
prover train es --config "$CONFIG"

stage "5/8 eval: pass@k of the ES weights, rebuilt from the ledger"
prover eval --config "$CONFIG" --ledger "$RUN/ledger.json"

stage "6/8 train es on the toy objective (configs/toy.toml): the reward should rise"
prover train es --config configs/toy.toml --set run.dir="$RUN/toy"
python3 - "$RUN/toy/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first, last = rows[0]["reward/mean"], rows[-1]["reward/mean"]
updates = sum(not r["es/skipped"] for r in rows)
print(f"toy reward/mean: iteration 1 {first:.3f} -> iteration {rows[-1]['iteration']} {last:.3f} ({updates} updates)")
PY

stage "7/8 replay-seeds: rebuild the toy run's final weights from the base model + its ledger"
prover replay-seeds "$RUN/toy/ledger.json" --out "$RUN/toy/replayed" --config configs/toy.toml
python3 - "$RUN/toy" <<'PY'
import hashlib, pathlib, sys
run = pathlib.Path(sys.argv[1])
digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
a, b = digest(run / "final" / "model.safetensors"), digest(run / "replayed" / "model.safetensors")
ledger = (run / "ledger.json").stat().st_size
print(f"ledger {ledger} bytes; final/ sha256 {a[:16]}  replayed/ sha256 {b[:16]}  ->", "bit-identical" if a == b else "DIFFERENT")
sys.exit(0 if a == b else 1)
PY

stage "8/8 train grpo + report: the same task with GRPO, compared with ES"
prover train grpo --config "$CONFIG" --set run.dir="$RUN/grpo"
prover report "$RUN" "$RUN/grpo" --out "$RUN/report"

printf '\nDone. Everything the demo wrote is under %s/\n' "$RUN"
