"""The pipelined ES schedule (`modal.es_member_gpus = N > 0`): what one member GPU container does.

    shares(es.population, N)                  # member i goes to GPU i % N: fixed by (population, N) alone
    pipeline = MemberPipeline(config)         # `modal.es_members_per_gpu` engines, each keeping its own theta
    pipeline.evaluate(iteration, members, problems) -> [{"member", "completions", "rewards"}, ...]

Each engine takes every k-th member of the container's share and, for each: perturb in place,
generate, restore (es/member.py, the code every schedule runs), then hands that member's samples
to the share's one verification thread and goes on to the next member while Lean checks. The
thread calls the library's reward (`rollout.score`: for Lean, `verify_records(..., keep_warm=True)`
at the container's placement) as soon as a member arrives and the previous call is done, with
every member that arrived meanwhile in the same call: one call at a time, since a warm pool is one
pool (verify/engine.py), and fewer calls when Lean is the slower side, so fewer header imports
where the placement starts its workers per call (on Modal's Sandboxes it does: sandbox.py). A
task's reward of a sample depends on that sample alone, so these rewards are the barrier
schedule's, where the loop scores every member in one call (tests/test_modal_pipeline.py).

Several engines on one GPU: vLLM documents `gpu_memory_utilization` as a per-instance limit, two
instances sharing one GPU each taking a fraction (docs.vllm.ai, `vllm serve
--gpu-memory-utilization`), and asks that two instances never initialise at the same time on
one GPU (vllm-project/vllm#9198, #18974: memory profiling counts the other's allocation). So the
engines are built one after another, each with 1/k of `generate.gpu_memory_utilization` (the ES
fp32 master of each lies outside that budget: es/vllm_worker.py). Each vLLM engine seeds every
request itself, so engines generate at once, one thread each; the transformers sampler reseeds
torch's one global generator per batch, so its engines take turns (same samples, no overlap).
Several in-process `vllm.LLM` instances generating from threads at once is not something vLLM's
docs promise: only a run on a GPU can confirm it (the tests use the transformers stand-in).

Retries: a member is a pure function of (ledger, iteration, member), so a share that Modal re-runs
in another container (one that died) gives the same completions and rewards; a fresh container
catches up from the ledger's newest snapshot.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable


def shares(population: int, gpus: int) -> list[list[int]]:
    """Members per GPU container: member i on GPU i % gpus (no empty shares when gpus > population)."""
    if gpus < 1:
        raise ValueError("the pipelined schedule needs at least one GPU")
    return [list(range(g, population, gpus)) for g in range(min(gpus, population))]


def engine_configs(config: Any, engines: int) -> list[Any]:
    """One config per resident engine, each with 1/engines of `generate.gpu_memory_utilization`."""
    out = []
    for _ in range(engines):
        copied = copy.deepcopy(config)
        copied.generate.gpu_memory_utilization = config.generate.gpu_memory_utilization / engines
        out.append(copied)
    return out


class MemberPipeline:
    def __init__(self, config: Any, evaluator: Callable[[Any], Any] | None = None):
        from prover_cli.es.member import MemberEvaluator

        engines = config.modal.es_members_per_gpu if config.modal.es_member_gpus else 1
        self.config = config
        # built one after another: vLLM engines must not initialise on one GPU at the same time
        self.engines = [(evaluator or MemberEvaluator)(c) for c in engine_configs(config, engines)]
        self.task = self.engines[0].task
        # torch's one global generator (transformers sampler): its engines must take turns
        self._turns = None if config.generate.backend == "vllm" else threading.Lock()

    def evaluate(self, iteration: int, members: list[int], problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each member's completions and rewards, in `members` order; verification overlaps generation."""
        if len(set(members)) != len(members):
            raise ValueError(f"iteration {iteration}: a member twice in one share: {members}")
        arrived: queue.Queue = queue.Queue()
        verifier = threading.Thread(target=self._verify_as_they_arrive, args=(arrived, problems),
                                    name="es-verify", daemon=True)
        verifier.start()
        scored: dict[int, tuple[list[str], Future]] = {}

        def run_engine(engine: Any, mine: list[int]) -> None:
            for member in mine:
                with self._turns or contextlib.nullcontext():
                    completions = engine.completions(iteration=iteration, member=member, problems=problems)
                scored[member] = (completions, Future())
                arrived.put(scored[member])  # to Lean now; this engine goes on to its next member

        k = len(self.engines)
        try:
            if k == 1:
                run_engine(self.engines[0], members)
            else:
                with ThreadPoolExecutor(max_workers=k, thread_name_prefix="es-engine") as generators:
                    running = [generators.submit(run_engine, engine, members[j::k])
                               for j, engine in enumerate(self.engines)]
                    for future in running:
                        future.result()  # an engine's failure fails the share (a missing member would bias the update)
        finally:
            arrived.put(None)  # every member has arrived: the verifier ends after the last of them
        return [{"member": m, "completions": scored[m][0], "rewards": scored[m][1].result()} for m in members]

    def _verify_as_they_arrive(self, arrived: queue.Queue, problems: list[dict[str, Any]]) -> None:
        """One verification call for every member that arrived while the last call ran: verification
        starts as soon as a member arrives and Lean is free, and when Lean is the slower side, the
        members waiting for it go together (fewer calls, so fewer header imports where the
        placement does not keep workers warm: on_modal/sandbox.py)."""
        while True:
            waiting = [arrived.get()]
            while not arrived.empty():
                waiting.append(arrived.get())
            members = [item for item in waiting if item is not None]
            if members:
                score_together(self.task, problems, members, self.config)
            if len(members) < len(waiting):  # the end marker, always the last item put
                return


def score_together(task: Any, problems: list[dict[str, Any]], members: list[tuple[list[str], Future]],
                   config: Any) -> None:
    """Score several members' completions in one `rollout.score` call and give each its own rewards;
    a failure fails every one of them (never a reward of 0 for a sample nobody checked)."""
    from prover_cli import rollout

    try:
        rewards = rollout.score(task, problems * len(members), [c for completions, _ in members for c in completions],
                                config)
    except Exception as exc:
        for _, future in members:
            future.set_exception(exc)
        return
    offset = 0
    for completions, future in members:
        future.set_result(rewards[offset:offset + len(completions)])
        offset += len(completions)
