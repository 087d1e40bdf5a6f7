"""Overhead of the verify engine, measured against the REPL stand-in that answers instantly.

    python benchmarks/bench_verify.py [--proofs 400]

With Lean taking no time, what is left is ours: lexing + denylist + statement assembly, the JSON
framing, the pool's threads and queues, the verdict rules. Printed side by side in one run:

- baseline: one stand-in process driven by a bare loop (write request, read answer; the same two
  round trips per proof as the engine: the proof, then Lean's statement and axiom check on the
  alias; the trusted statement once per problem, before timing), no checks at all;
- the pool with 1, 2 and 4 workers, warm (processes started and the header run before timing),
  through `Verifier.verify` (the path of `verify_records` and `prover verify`);
- the text checks alone (`candidate_from_record`), no process;
- the kernel stage (`verify.kernel_check`, `kernel/`) with its stand-ins (`tests/fake_lean.py`,
  `tests/fake_safe_verify.py`): seconds and CPU-seconds per proof (ours plus the child processes'),
  two fresh processes per proof (`lean -o`, the checker) plus the target once per problem, and the
  proofs/s of the fast path alone vs the fast path followed by the stage, 2 workers each;
- pre-checks on hostile sizes (`--pre-checks`, on by default): a 10 MB proof and 24,000 `import`
  lines (the inputs that once took 20 s in the main thread), under the default
  `verify.max_proof_chars` (refused before reading) and with the limit lifted (read in full), and
  the cost per MB at two sizes: a ratio near 1.0 means linear time.

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
from prover_cli.verify.lean.repl import ReplProcess  # noqa: E402
from prover_cli.verify.text.rules import alias_command, trusted_command  # noqa: E402
from prover_cli.verify.text.statement import candidate_from_record, trusted_signature  # noqa: E402

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
        trusted = {}   # the trusted statement, once per problem (the pool caches it too): not timed
        for c in candidates:
            if c.statement not in trusted:
                command = trusted_command(trusted_signature(c.statement))
                trusted[c.statement] = proc.request({"cmd": command, "env": env}, time.monotonic() + 30)["env"]
        start = time.perf_counter()
        for c in candidates:
            answer = proc.request({"cmd": c.body, "env": trusted[c.statement]}, time.monotonic() + 30)
            proc.request({"cmd": alias_command("", c.target), "env": answer["env"]}, time.monotonic() + 30)
        return len(candidates) / (time.perf_counter() - start)
    finally:
        proc.kill()


def pool(recs: list[dict], workers: int) -> float:
    config = VerifyConfig()
    config.repl_command = FAKE
    config.workers = workers
    config.memory_limit_gb = 0.0
    config.max_proofs_per_process = 10 ** 9  # no recycling inside the timed run
    config.canary = False                     # steady state: the canary runs once per toolchain
    config.kernel_check = False               # the fast path alone (the kernel stage is measured apart)
    with Verifier(config) as verifier:
        verifier.verify(recs[: 4 * workers])  # warm: start every process, run the header
        start = time.perf_counter()
        verdicts = verifier.verify(recs)
        rate = len(recs) / (time.perf_counter() - start)
    assert all(v["verdict"] == "verified" for v in verdicts), "the benchmark proofs must verify"
    return rate


def kernel_stage(recs: list[dict], workers: int = 2) -> dict:
    """The kernel stage on the fast path's passes, with its stand-ins: wall and CPU seconds per proof."""
    import resource

    from prover_cli.verify.kernel.job import KernelJob
    from prover_cli.verify.kernel.pins import CHECKER_AXIOMS, PINS
    from prover_cli.verify.kernel.stage import KernelStage

    pin = PINS["v4.15.0"]
    config = VerifyConfig()
    config.workers = workers
    config.memory_limit_gb = 0.0
    config.lean_command = [sys.executable, str(REPO / "tests" / "fake_lean.py")]
    config.kernel_checker_command = [sys.executable, str(REPO / "tests" / "fake_safe_verify.py"), "--pin", pin.commit]
    stage = KernelStage(config)
    candidates = [candidate_from_record(r, DEFAULT_HEADER) for r in recs]
    jobs = [KernelJob(c.header, c.statement, c.target, c.body) for c in candidates]
    stage.check(jobs[:1], CHECKER_AXIOMS)                       # not timed: python caches, one target
    for job in {(j.header, j.statement): j for j in jobs}.values():
        stage._target_olean(job)                                # targets once per problem, not timed
    before_self, before_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    results = stage.check(jobs, CHECKER_AXIOMS)
    wall = time.perf_counter() - start
    after_self, after_children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    assert all(r.status == "passed" for r in results), [r.reason for r in results if r.status != "passed"][:3]
    cpu = sum(getattr(after, f) - getattr(before, f) for before, after in
              ((before_self, after_self), (before_children, after_children)) for f in ("ru_utime", "ru_stime"))
    return {"proofs_per_s": len(jobs) / wall, "wall_s_per_proof": wall * workers / len(jobs),
            "cpu_s_per_proof": cpu / len(jobs)}


def text_checks(recs: list[dict]) -> float:
    start = time.perf_counter()
    for r in recs:
        candidate_from_record(r, DEFAULT_HEADER)
    return len(recs) / (time.perf_counter() - start)


def _timed(record: dict, policy) -> tuple[float, str]:
    from prover_cli.verify.text.statement import Rejected

    start = time.perf_counter()
    try:
        candidate_from_record(record, DEFAULT_HEADER, policy=policy)
        outcome = "assembled"
    except Rejected as exc:
        outcome = "rejected: " + str(exc)[:60]
    return time.perf_counter() - start, outcome


def pre_checks() -> None:
    from prover_cli.verify.text.statement import TextPolicy

    statement = "theorem big (x : ℕ) : x + 0 = x := by"
    line = "  nlinarith [sq_nonneg (a - b), sq_nonneg (a + b), mul_pos ha hb] -- a comment\n"
    big_proof = line * (10_000_000 // len(line))
    imports = "```lean4\n" + "import Mathlib\n" * 24_000 + statement + "\n  simp\n```"
    default, lifted = TextPolicy(), TextPolicy(max_proof_chars=10 ** 9)
    cases = [
        ("10 MB proof, default limit", {"proof": big_proof}, default),
        ("24,000 import lines, default limit", {"completion": imports}, default),
        ("10 MB proof, limit lifted", {"proof": big_proof}, lifted),
        ("24,000 import lines, limit lifted", {"completion": imports}, lifted),
    ]
    print(f"\npre-checks before Lean ({os.cpu_count()} CPUs, main thread)")
    for name, fields, policy in cases:
        seconds, outcome = _timed({"id": "x", "formal_statement": statement, **fields}, policy)
        print(f"{name:38s} {seconds:8.3f} s   {outcome}")
    small, large = line * (1_000_000 // len(line)), line * (4_000_000 // len(line))
    per_mb = []
    for text in (small, large):
        seconds, _ = _timed({"id": "x", "formal_statement": statement, "proof": text}, lifted)
        per_mb.append(seconds / (len(text) / 1e6))
    print(f"{'cost per MB, 4 MB vs 1 MB (1.0 = linear)':38s} {per_mb[1] / per_mb[0]:8.2f}x   "
          f"({per_mb[0]:.3f} s/MB at 1 MB)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proofs", type=int, default=400)
    parser.add_argument("--kernel-proofs", type=int, default=40, help="proofs through the kernel stage")
    parser.add_argument("--only-pre-checks", action="store_true", help="skip the engine part")
    args = parser.parse_args()
    if args.only_pre_checks:
        pre_checks()
        return
    recs = records(args.proofs)
    base = baseline(recs)
    rows = [("bare loop, 1 process (baseline)", base)]
    rows += [(f"pool, {w} worker{'s' if w > 1 else ''}", pool(recs, w)) for w in (1, 2, 4)]
    rows.append(("text checks only (no process)", text_checks(recs)))
    print(f"verify engine overhead: {args.proofs} proofs, instant REPL stand-in, {os.cpu_count()} CPUs")
    print(f"{'':34s} {'proofs/s':>10s} {'vs baseline':>12s}")
    for name, rate in rows:
        print(f"{name:34s} {rate:10.0f} {rate / base:11.2f}x")
    kernel_proofs = recs[: args.kernel_proofs]
    fast = pool(kernel_proofs, 2)
    stage = kernel_stage(kernel_proofs, 2)
    both = 1.0 / (1.0 / fast + 1.0 / stage["proofs_per_s"])
    print(f"\nkernel stage, stand-ins ({len(kernel_proofs)} proofs, 2 workers; not Lean: with Lean each step imports "
          "the header afresh)")
    print(f"{'fast path alone':34s} {fast:10.1f} proofs/s   1.00x")
    print(f"{'fast path, then the kernel stage':34s} {both:10.1f} proofs/s   {both / fast:.2f}x")
    print(f"{'kernel stage per proof':34s} {stage['wall_s_per_proof']:10.3f} s wall, "
          f"{stage['cpu_s_per_proof']:.3f} CPU-s (2 processes + their wrappers)")
    pre_checks()


if __name__ == "__main__":
    main()
