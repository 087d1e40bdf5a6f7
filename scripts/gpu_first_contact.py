"""GPU first contact: about 10 minutes on one GPU, measuring what the Modal plan otherwise assumes.

    python scripts/gpu_first_contact.py --config configs/kimina-es.toml --model /models/Kimina-Prover-Preview-Distill-1.5B
    python scripts/gpu_first_contact.py --config kimina-es --model AI-MO/Kimina-Prover-Preview-Distill-1.5B   # HF cache

Run it on a machine with the GPU of `modal.gpu` (an H100 for the kimina configs), vLLM and the
model already there: `--model` is a local checkpoint directory or a hub name found in the local
Hugging Face cache (offline: nothing is downloaded). The steps, in order; the script stops at the
first that fails (except step 5, whose failure is what it measures) and writes what it measured:

1. engine: one vLLM engine at the configured share (`generate.gpu_memory_utilization` /
   `modal.es_members_per_gpu`, as pipeline.engine_configs builds it) with the ES extension
   (prover_cli/es/vllm_worker.py ESWorkerExtension); `torch.cuda.mem_get_info` before the engine,
   after its start and after `es_init`: what the engine takes beyond its budget and what es_init keeps.
2. member batch: one ES member's call, es.problems_per_iteration x es.samples_per_problem sequences
   of 8 real Lean Workbook statements (PROBLEMS below) at `generate.max_tokens` and
   `es.member_temperature`: the decode speed per sequence (the longest sequence's tokens over the
   call's seconds, the doctor's rule).
3. held-out batch: the held-out evaluation's two calls (run.eval_problems x run.eval_n sampled,
   then greedy) on the same engine (the loop's engine 0 runs them in training), timed; the 8
   statements repeated to run.eval_problems. The engine is then shut down.
4. two engines at once: two engines of half the configured share each, the same member batch on
   both from two threads (as pipeline.MemberPipeline runs them): the resident slowdown, the
   fraction of one generation each further engine adds (0 = free, 1 = serial).
5. the configured engines: `modal.es_members_per_gpu` engines built one after another; a failure
   (vLLM's "Free memory on device ... is less than desired GPU memory utilization", an OOM) is
   recorded, not raised.

It writes the report (`--report`, JSON: every step, its seconds, memory and error) and the
calibration file the plan reads (prover_cli/on_modal/calibration.py's format; `--out`, default
the plan's default path for this GPU and model): decode_tokens_per_s (only when the device is a
`modal.gpu`), resident_slowdown, engine_overhead_gib, es_init_gib. A later write by the doctor
keeps these (and this script keeps the doctor's Lean figures). Then
`prover train es --config ... --backend modal --dry-run` prices with them and labels each
"measured (gpu_first_contact, <date>, n = ...)".

Tested here without a GPU (tests/test_gpu_first_contact.py): the arguments, the model lookup,
the problems, the calibration written from a measured dict and the plan reading it. The GPU steps
themselves have not run in this repository (no GPU in CI); no figure here is a measurement.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from prover_cli.config import Config, load_config  # after the path above: the repository's own package
from prover_cli.on_modal.calibration import default_path, figure, is_gpu_type, write
from prover_cli.policy import rollout
from prover_cli.policy.samplers import SamplingParams
from prover_cli.shipped import resolve_config
from prover_cli.tasks import get_task
from prover_cli.training.heldout import greedy_params, heldout_params

GIB = 1024 ** 3
BY = "scripts/gpu_first_contact.py"
HEADER = "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"

# Eight Lean Workbook statements (internlm/Lean-Workbook), as the kimina-lean-server test fixtures
# carry them (project-numina/kimina-lean-server@fb2393de, tests/match/input/goedel-lean_workbook_*.lean,
# MIT; ../shared/data/proofs/lean_workbook_goedel_kimina_fixtures.jsonl, its first 8 rows): the id,
# the natural-language comment and the statement, without the proof.
PROBLEMS: list[dict[str, str]] = [
    {"id": "lean_workbook_10009",
     "informal_statement": "prove that $a^{3}+b^{3}+c^{3}+{\\frac {15\\,abc}{4}} \\geq \\frac{1}{4}$ given $a, b, c,$ "
                           "are non-negative reals such that $a+b+c=1$",
     "formal_statement": "theorem lean_workbook_10009 (a b c: ℝ) (ha : a ≥ 0 ∧ b ≥ 0 ∧ c ≥ 0 ∧ a + b + c = 1): "
                         "a^3 + b^3 + c^3 + (15 * a * b * c)/4 ≥ 1/4  := by"},
    {"id": "lean_workbook_1001",
     "informal_statement": "$ (a^{2}+b^{2})(c^{2}+d^{2}) = (ad-bc)^{2}+(ac+bd)^{2} $ is an identity (that is, it holds "
                           "for all values of $a$ , $b$ , $c$ , $d$ . In fact, it is a special (two-variable) case "
                           "of Lagrange's Identity.",
     "formal_statement": "theorem lean_workbook_1001 {a b c d : ℂ} : (a^2 + b^2) * (c^2 + d^2) = "
                         "(a * d - b * c)^2 + (a * c + b * d)^2  := by"},
    {"id": "lean_workbook_10012",
     "informal_statement": "Let $a$ , $b$ be real positive numbers such that $a\\geq 2b$ Prove that "
                           "$\\frac{a^2}{b} + \\frac{b^2}{a}$ $\\geq$ $\\frac{9a}{4}$",
     "formal_statement": "theorem lean_workbook_10012 (a b : ℝ) (h₁ : 0 < a ∧ 0 < b) (h₂ : a ≥ 2 * b) : "
                         "(a ^ 2 / b + b ^ 2 / a) ≥ 9 * a / 4  := by"},
    {"id": "lean_workbook_10013",
     "informal_statement": "Let $a,b,c$ be positive numbers such that $a+b+c=3$ . Prove: "
                           "$\\sqrt{a}+\\sqrt{b}+\\sqrt{c}\\geq ab+bc+ca$ .",
     "formal_statement": "theorem lean_workbook_10013 (a b c : ℝ) (ha : 0 < a) (hb : 0 < b) (hc : 0 < c) "
                         "(habc : a + b + c = 3) :  Real.sqrt a + Real.sqrt b + Real.sqrt c ≥ a * b + b * c + c * a  "
                         ":= by"},
    {"id": "lean_workbook_10014",
     "informal_statement": "If $b \\ge 1$ then $a \\le 2b$ which implies $(a-b)(a-2b) \\le 0$",
     "formal_statement": "theorem lean_workbook_10014 : 1 ≤ b → a ≤ 2 * b → (a - b) * (a - 2 * b) ≤ 0  := by"},
    {"id": "lean_workbook_10016",
     "informal_statement": "Let $a,b,c\\ge 0$ and $ a^2+b^2+c^2 =2.$ Prove that $\\frac{\\sqrt{b^2+c^2}}{3-a}+"
                           "\\frac{\\sqrt{c^2+a^2}}{3-b}\\le 2\\sqrt{ \\frac{2}{7}}$",
     "formal_statement": "theorem lean_workbook_10016 (a b c : ℝ) (ha : 0 ≤ a) (hb : 0 ≤ b) (hc : 0 ≤ c) "
                         "(hab : a + b + c = 3) (h : a^2 + b^2 + c^2 = 2) : (Real.sqrt (b^2 + c^2) / (3 - a) + "
                         "Real.sqrt (c^2 + a^2) / (3 - b)) ≤ 2 * Real.sqrt (2 / 7)  := by"},
    {"id": "lean_workbook_1002",
     "informal_statement": "Explain why $|y| > |2y^2|$ when $-\\frac{1}{2} < y < 0$.",
     "formal_statement": "theorem lean_workbook_1002 (y : ℝ) (hy : -1 / 2 < y ∧ y < 0) : |y| > |2*y^2|  := by"},
    {"id": "lean_workbook_10026",
     "informal_statement": "Prove that $ab \\leq \\frac{1}{4}$ given $a + b = 1$ and $a, b \\geq 0$.",
     "formal_statement": "theorem lean_workbook_10026 (a b : ℝ) (h1 : a + b = 1) (h2 : a >= 0 ∧ b >= 0) : "
                         "a * b <= 1 / 4  := by"},
]


def problems(count: int) -> list[dict[str, str]]:
    """`count` problems: the 8 statements in order, repeated (ids made unique) when more are asked for."""
    out = []
    for i in range(count):
        base = PROBLEMS[i % len(PROBLEMS)]
        suffix = "" if i < len(PROBLEMS) else f"#{i // len(PROBLEMS)}"
        out.append({**base, "id": base["id"] + suffix, "header": HEADER, "split": "valid"})
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a config file or a shipped config's name (kimina-es)")
    parser.add_argument("--model", required=True, help="a local checkpoint directory, or a hub name in the local "
                                                       "Hugging Face cache (nothing is downloaded)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override, as `prover --set`")
    parser.add_argument("--out", default=None, help="the calibration file (default: the plan's default path for this "
                                                    "GPU and model, PROVER_CALIBRATION_DIR honoured)")
    parser.add_argument("--report", default="gpu_first_contact.json", help="every step's result, as JSON")
    return parser.parse_args(argv)


def model_directory(name: str) -> Path:
    """`name` as a local directory: itself, or its snapshot in the local Hugging Face cache (offline)."""
    path = Path(name)
    if path.is_dir():
        if not any(path.glob("*.safetensors")):
            raise SystemExit(f"--model {name}: no *.safetensors in that directory")
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name, local_files_only=True, allow_patterns=["*.safetensors", "*.json", "*.txt",
                                                                                   "*.model", "tokenizer*"]))
    except Exception as exc:   # huggingface_hub's LocalEntryNotFoundError and friends: not in the cache
        raise SystemExit(f"--model {name}: not a directory and not in the local Hugging Face cache "
                         f"({type(exc).__name__}); download it first, e.g. `hf download {name}`") from None


def load(args: argparse.Namespace) -> Any:
    return load_config(resolve_config(args.config), args.set)


# --------------------------------------------------------------------------------------------
# What was measured -> the calibration file the plan reads
# --------------------------------------------------------------------------------------------

def figures_from(measured: dict[str, Any], gpu_matches: bool) -> dict[str, dict[str, Any]]:
    """The calibration figures a measured dict supports (calibration.FIGURES; a figure a step did not
    reach is left out, so its estimate stays)."""
    out: dict[str, dict[str, Any]] = {}
    member = measured.get("member_batch") or {}
    if member.get("ok") and gpu_matches and member.get("seconds"):
        tokens = member["sequence_tokens"]
        out["decode_tokens_per_s"] = figure(max(tokens) / member["seconds"], len(tokens), (
            f"{len(tokens)} sequences of one member's call on {measured.get('device')}, the longest {max(tokens)} "
            f"tokens in {member['seconds']:.1f} s ({BY})"))
    two = measured.get("two_engines") or {}
    if two.get("ok") and member.get("seconds"):
        slowdown = max(0.0, two["seconds"] / member["seconds"] - 1.0)
        out["resident_slowdown"] = figure(slowdown, 2, (
            f"two engines of half the share each, the member batch on both at once: {two['seconds']:.1f} s against "
            f"{member['seconds']:.1f} s for one engine alone ({BY})"))
    engine = measured.get("engine") or {}
    if engine.get("ok"):
        raw = engine["started_gib"] - engine["budget_gib"]
        out["engine_overhead_gib"] = figure(max(0.0, raw), 1, (
            f"free memory before the engine less after its start ({engine['started_gib']:.2f} GiB) less its budget "
            f"({engine['budget_gib']:.2f} GiB): {raw:.2f} GiB" + (", recorded as 0" if raw < 0 else "") + f" ({BY})"))
        if engine.get("es_init_gib", 0) > 0:
            out["es_init_gib"] = figure(engine["es_init_gib"], 1, (
                f"free memory before es_init less after it, with the engine up ({BY})"))
    return out


def write_calibration(path: Path, config: Config, measured: dict[str, Any], stamp: str) -> Path | None:
    """The calibration file from what was measured (None when nothing was)."""
    figures = figures_from(measured, is_gpu_type(str(measured.get("device", "")), config.modal.gpu))
    if not figures:
        return None
    return write(path, config, figures, stamp, by=BY)


# --------------------------------------------------------------------------------------------
# The GPU steps
# --------------------------------------------------------------------------------------------

def free_gib() -> float:
    import torch

    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0] / GIB


def engine_config(config: Config, share: float) -> Any:
    copied = copy.deepcopy(config)
    copied.generate.gpu_memory_utilization = share
    return copied


def start_engine(config: Config, model_dir: Path, share: float) -> Any:
    from prover_cli.policy.samplers.vllm_sampler import ES_WORKER_EXTENSION, VLLMSampler

    cfg = engine_config(config, share)
    return VLLMSampler(cfg.model, cfg.generate, model_path=str(model_dir), worker_extension_cls=ES_WORKER_EXTENSION)


def close_engine(sampler: Any, settle_s: float = 60.0) -> None:
    """Shut an engine down and wait until its memory is back (vLLM's engine core is another process,
    and the next engine's startup check needs the memory free): until the free memory stops rising."""
    llm = getattr(sampler, "llm", None)
    engine = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if engine is not None and hasattr(engine, "shutdown"):
        engine.shutdown()
    del llm
    sampler.llm = None
    gc.collect()
    deadline, last = time.monotonic() + settle_s, -1.0
    while time.monotonic() < deadline:
        time.sleep(2)
        now = free_gib()
        if now <= last + 0.05:
            return
        last = now


def member_call(config: Config, sampler: Any) -> dict[str, Any]:
    """One ES member's generation call, timed: its sequences' token counts."""
    es = config.es
    params = SamplingParams(n=es.samples_per_problem, temperature=es.member_temperature, top_p=config.generate.top_p,
                            max_tokens=config.generate.max_tokens, seed=0)
    started = time.monotonic()
    outputs = rollout.sample(sampler, get_task(config.data.task), problems(es.problems_per_iteration), params,
                             config.model.family)
    seconds = time.monotonic() - started
    tokens = [s.completion_tokens for group in outputs for s in group]
    return {"ok": True, "seconds": round(seconds, 3), "sequence_tokens": tokens}


def step_engine(config: Config, model_dir: Path, measured: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")           # this process's own CUDA context before the baseline
    total = torch.cuda.mem_get_info()[1] / GIB
    measured["device"] = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    measured["total_gib"] = round(total, 2)
    share = config.generate.gpu_memory_utilization / max(1, config.modal.es_members_per_gpu)
    before = free_gib()
    sampler = start_engine(config, model_dir, share)
    started = free_gib()
    sampler.es_weights()                    # es_init in the engine's worker
    initialised = free_gib()
    state["sampler"] = sampler
    return {"ok": True, "share": share, "budget_gib": round(share * total, 3), "free_before_gib": round(before, 3),
            "started_gib": round(before - started, 3), "es_init_gib": round(started - initialised, 3),
            "free_after_gib": round(initialised, 3)}


def step_member_batch(config: Config, model_dir: Path, measured: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    return member_call(config, state["sampler"])


def step_two_engines(config: Config, model_dir: Path, measured: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    share = config.generate.gpu_memory_utilization / max(1, config.modal.es_members_per_gpu) / 2
    engines = [start_engine(config, model_dir, share) for _ in range(2)]   # one after another, as the pipeline does
    for engine in engines:
        engine.es_weights()
    results: list[dict[str, Any]] = [{}, {}]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = member_call(config, engines[i])
        except BaseException as exc:    # reported below, in this thread
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    for engine in engines:
        close_engine(engine)
    if errors:
        raise errors[0]
    return {"ok": True, "seconds": round(seconds, 3), "share_each": share, "each": results}


def step_configured_engines(config: Config, model_dir: Path, measured: dict[str, Any],
                            state: dict[str, Any]) -> dict[str, Any]:
    k = config.modal.es_members_per_gpu
    if k == 1:
        return {"ok": True, "engines": 1, "note": "one engine per GPU: step 1 built it"}
    engines, free = [], [free_gib()]
    try:
        for _ in range(k):
            engine = start_engine(config, model_dir, config.generate.gpu_memory_utilization / k)
            engine.es_weights()
            engines.append(engine)
            free.append(free_gib())
        return {"ok": True, "engines": k, "free_gib_after_each": [round(f, 3) for f in free]}
    except Exception as exc:    # what this step measures: recorded, and the script goes on
        return {"ok": False, "recorded": True, "engines_started": len(engines), "error": f"{type(exc).__name__}: {exc}",
                "free_gib_after_each": [round(f, 3) for f in free]}
    finally:
        for engine in engines:
            close_engine(engine)


def step_heldout(config: Config, model_dir: Path, measured: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    sampler = state.pop("sampler")          # step 1's engine, at the configured share
    items = problems(config.run.eval_problems or len(PROBLEMS))
    calls = [heldout_params(config)] + ([greedy_params(config)] if config.run.eval_temperature > 0 else [])
    timings = []
    try:
        for params in calls:
            started = time.monotonic()
            outputs = rollout.sample(sampler, get_task(config.data.task), items, params, config.model.family)
            timings.append({"sequences": sum(len(group) for group in outputs), "max_tokens": params.max_tokens,
                            "seconds": round(time.monotonic() - started, 3),
                            "longest": max(s.completion_tokens for group in outputs for s in group)})
    finally:
        close_engine(sampler)
    return {"ok": True, "problems": len(items), "calls": timings, "seconds": round(sum(t["seconds"] for t in timings), 3)}


STEPS: list[tuple[str, Callable[..., dict[str, Any]]]] = [
    ("engine", step_engine), ("member_batch", step_member_batch), ("heldout", step_heldout),
    ("two_engines", step_two_engines), ("configured_engines", step_configured_engines),
]


def run_steps(config: Config, model_dir: Path, measured: dict[str, Any]) -> None:
    """Each step in order; the first failure stops the rest (step 5 records its own)."""
    state: dict[str, Any] = {}
    for name, step in STEPS:
        started = time.monotonic()
        print(f"[{name}] ...", flush=True)
        try:
            measured[name] = {**step(config, model_dir, measured, state), "wall_s": round(time.monotonic() - started, 1)}
        except Exception as exc:
            measured[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                              "wall_s": round(time.monotonic() - started, 1)}
        print(f"[{name}] {json.dumps(measured[name])}", flush=True)
        if not measured[name]["ok"] and not measured[name].get("recorded"):
            measured["stopped_at"] = name
            break
    if state.get("sampler") is not None:     # stopped before the held-out step closed it
        close_engine(state.pop("sampler"), settle_s=0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = load(args)
    model_dir = model_directory(args.model)
    measured: dict[str, Any] = {"config": str(config.source), "model": args.model, "model_dir": str(model_dir),
                                "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    try:
        run_steps(config, model_dir, measured)
    finally:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out = Path(args.out) if args.out else default_path(config)
        written = write_calibration(out, config, measured, stamp)
        measured["calibration"] = str(written) if written else None
        Path(args.report).write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
        print(f"report: {args.report}; calibration: {written or 'nothing measured, none written'}", flush=True)
    return 1 if measured.get("stopped_at") else 0


if __name__ == "__main__":   # vLLM may start its engines with spawn: the guard keeps the children from rerunning this
    sys.exit(main())
