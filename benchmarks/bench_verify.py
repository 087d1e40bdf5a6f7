"""Overhead of the verify engine, measured against the REPL stand-in that answers instantly.

    python benchmarks/bench_verify.py [--proofs 400]

With Lean taking no time, what is left is ours: lexing + denylist + statement assembly, the JSON
framing, the pool's threads and queues, the verdict rules. Printed side by side in one run:

- baseline: one stand-in process driven by a bare loop (write request, read answer; the same two
  round trips per proof as the engine: the proof, then `#print axioms`), no checks at all;
- the pool with 1, 2 and 4 workers, warm (processes started and the header run before timing),
  through `Verifier.verify` (the path of `verify_records` and `prover verify`);
- the text checks alone (`candidate_from_record`), no process.

Figures are proofs/s and the ratio to the baseline. The stand-in is not Lean: with a real REPL each
proof costs Lean's elaboration time (typically 0.1–10 s), which dwarfs these numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prover_cli.config import DEFAULT_HEADER, VerifyConfig  # noqa: E402
from prover_cli.verify import Verifier  # noqa: E402
from prover_cli.verify.repl import ReplProcess  # noqa: E402
from prover_cli.verify.statement import candidate_from_record  # noqa: E402

FAKE = [sys.executable, str(REPO / "tests" / "fake_repl.py")]
SHARED = REPO.parent / "shared" / "data" / "minif2f" / "minif2f_valid_few_shot_proofs.jsonl"


def records(n: int) -> list[dict]:
    """Real human proofs from miniF2F when available (comments and all), else a small stand-in."""
    if SHARED.exists():
        rows = [json.loads(line) for line in SHARED.read_text(encoding="utf-8").splitlines()]
        base = [{"formal_statement": r["formal_statement"], "proof": r["formal_proof"]} for r in rows]
    else:
        base = [{"formal_statement": "theorem t (x : Nat) : x + 0 = x := by", "proof": "  simp"}]
    return [dict(base[k % len(base)], id=f"p{k}") for k in range(n)]


def baseline(recs: list[dict]) -> float:
    candidates = [candidate_from_record(r, DEFAULT_HEADER) for r in recs]  # not timed
    proc = ReplProcess(FAKE)
    proc.start()
    try:
        env = proc.request({"cmd": DEFAULT_HEADER}, time.monotonic() + 30)["env"]
        start = time.perf_counter()
        for c in candidates:
            answer = proc.request({"cmd": c.body, "env": env}, time.monotonic() + 30)
            proc.request({"cmd": f"#print axioms {c.target}", "env": answer["env"]}, time.monotonic() + 30)
        return len(candidates) / (time.perf_counter() - start)
    finally:
        proc.kill()


def pool(recs: list[dict], workers: int) -> float:
    config = VerifyConfig()
    config.repl_command = FAKE
    config.workers = workers
    config.memory_limit_gb = 0.0
    config.max_proofs_per_process = 10 ** 9  # no recycling inside the timed run
    with Verifier(config) as verifier:
        verifier.verify(recs[: 4 * workers])  # warm: start every process, run the header
        start = time.perf_counter()
        verdicts = verifier.verify(recs)
        rate = len(recs) / (time.perf_counter() - start)
    assert all(v["verdict"] == "verified" for v in verdicts), "the benchmark proofs must verify"
    return rate


def text_checks(recs: list[dict]) -> float:
    start = time.perf_counter()
    for r in recs:
        candidate_from_record(r, DEFAULT_HEADER)
    return len(recs) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proofs", type=int, default=400)
    args = parser.parse_args()
    recs = records(args.proofs)
    base = baseline(recs)
    rows = [("bare loop, 1 process (baseline)", base)]
    rows += [(f"pool, {w} worker{'s' if w > 1 else ''}", pool(recs, w)) for w in (1, 2, 4)]
    rows.append(("text checks only (no process)", text_checks(recs)))
    print(f"verify engine overhead: {args.proofs} proofs, instant REPL stand-in, {os.cpu_count()} CPUs")
    print(f"{'':34s} {'proofs/s':>10s} {'vs baseline':>12s}")
    for name, rate in rows:
        print(f"{name:34s} {rate:10.0f} {rate / base:11.2f}x")


if __name__ == "__main__":
    main()
