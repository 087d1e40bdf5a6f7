"""The pipelined ES schedule (`modal.es_member_gpus = N > 0`): what each generating GPU does.

    shares(es.population, N + 1)              # member i goes to GPU i % (N + 1): fixed by (population, N) alone;
                                              # share 0 is the loop's own GPU, shares 1..N the member containers'
    pipeline = MemberPipeline(config)         # `modal.es_members_per_gpu` engines, each keeping its own theta
    pipeline.evaluate(iteration, members, problems) -> [{"member", "completions", "rewards"}, ...]
    loop = LoopShare(config); sampler = loop.load_sampler()   # the loop's GPU: its sampler is engine 0

The loop's GPU (train_es) holds theta and a sampler anyway, so it evaluates share 0 itself, with
the same pipeline, while the member containers evaluate theirs (on_modal/functions.py): an idle
loop GPU billed through the iteration is what kept the schedule from issue #33's cost goal
(docs/modal.md, "Why this schedule"). It runs `modal.es_members_per_gpu` engines like a member
GPU, so the shares stay equal (i % (N + 1)): engine 0 is the loop's own sampler, whose weights
the update moves in place (no catch-up); the others are member engines that catch up from the
ledger the loop has just written, as a member container's do. Memory is a member GPU's: k
engines of 1/k of `generate.gpu_memory_utilization` plus k fp32 masters (docs/modal.md gives the
arithmetic); the update and the held-out evaluation run on engine 0 while the others wait.

Each engine takes every k-th member of the container's share and, for each: perturb in place,
generate, restore (es/member.py, the code every schedule runs), then hands that member's samples
to the share's one verification thread and goes on to the next member while Lean checks. The
thread calls the library's reward (`rollout.score`: for Lean, `verify_records(..., keep_warm=True)`
at the container's placement) as soon as a member arrives and the previous call is done, with
every member that arrived meanwhile in the same call: one call at a time, since a warm pool is one
pool (verify/engine.py). On Modal the share's `verify.workers` REPL Sandboxes stay warm through the
share (`warm_through_the_share`): each imports the header once per iteration, not once per member. A
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
docs promise: two engines from threads gave one engine's samples on vLLM's CPU build
(tests/real_vllm/test_pipeline.py, `make test-vllm`); on a GPU only a GPU run can confirm it.

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

from prover_cli.config import Config
from prover_cli.es.member import MemberEvaluator
from prover_cli.es.population import load_es_sampler, member_completions
from prover_cli.policy import rollout
from prover_cli.tasks import get_task
from prover_cli.verify.placement import current, verification_at


def shares(population: int, gpus: int) -> list[list[int]]:
    """Members per generating GPU: member i on GPU i % gpus (no empty shares when gpus > population).
    The pipelined schedule calls it with gpus = modal.es_member_gpus + 1: share 0 is the loop's."""
    if gpus < 1:
        raise ValueError("the pipelined schedule needs at least one GPU")
    return [list(range(g, population, gpus)) for g in range(min(gpus, population))]


def engine_configs(config: Config, engines: int) -> list[Any]:
    """One config per resident engine, each with 1/engines of `generate.gpu_memory_utilization`."""
    out = []
    for _ in range(engines):
        copied = copy.deepcopy(config)
        copied.generate.gpu_memory_utilization = config.generate.gpu_memory_utilization / engines
        out.append(copied)
    return out


# torch's one global generator (transformers sampler): every engine in this process takes turns,
# the loop's and, under `.local()`, the member containers' run in this process too
_TORCH_GENERATOR = threading.Lock()


def resident_engines(config: Config) -> int:
    """Engines on one generating GPU: `modal.es_members_per_gpu` when pipelined, else one."""
    return config.modal.es_members_per_gpu if config.modal.es_member_gpus else 1


class MemberPipeline:
    def __init__(self, config: Config, evaluator: Callable[[Any], Any] | None = None, *, engines: list[Any] | None = None):
        """`engines`: already built (the loop's share, LoopShare); else `resident_engines` of `evaluator`."""
        self.config = config
        self._turns = None if config.generate.backend == "vllm" else _TORCH_GENERATOR
        if engines is None:
            # built one after another: vLLM engines must not initialise on one GPU at the same time
            # (and a transformers model's load must not draw from the generator another engine seeded)
            with self._turns or contextlib.nullcontext():
                engines = [(evaluator or MemberEvaluator)(c) for c in engine_configs(config, resident_engines(config))]
        self.engines = engines
        self.task = self.engines[0].task

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
        members waiting for it go together (fewer, larger calls), at the share's warm pool."""
        with warm_through_the_share(self.config):
            while True:
                waiting = [arrived.get()]
                while not arrived.empty():
                    waiting.append(arrived.get())
                members = [item for item in waiting if item is not None]
                if members:
                    score_together(self.task, problems, members, self.config)
                if len(members) < len(waiting):  # the end marker, always the last item put
                    return


@contextlib.contextmanager
def warm_through_the_share(config: Config) -> Any:
    """Lean workers that stay warm through the share: on Modal's Sandboxes (whose placement starts
    its REPLs per call, since an idle Sandbox is billed) the share's `verify.workers` REPL
    Sandboxes import the header once and serve every member of the share, then end with it
    (sandbox.warm_share_placement; the plan bills them for the iteration). A placement that
    keeps workers warm anyway (local) is left as it is."""
    if config.data.task != "lean" or config.verify.backend != "repl" or current().keep_warm:
        yield
        return
    # lazy: sandbox.py imports the modal SDK, and this module is also imported where the SDK is
    # absent (tests/real_vllm's environment runs MemberPipeline)
    from prover_cli.on_modal.sandbox import warm_share_placement

    with verification_at(warm_share_placement(config), this_thread=True):   # shares in one process keep apart
        yield


def score_together(task: Any, problems: list[dict[str, Any]], members: list[tuple[list[str], Future]],
                   config: Config) -> None:
    """Score several members' completions in one `rollout.score` call and give each its own rewards;
    a failure fails every one of them (never a reward of 0 for a sample nobody checked)."""
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


# ---------------------------------------------------------------------------------------------
# Share 0: the loop's own GPU
# ---------------------------------------------------------------------------------------------

class LoopEngine:
    """Engine 0 of the loop's share: the loop's sampler and its live weights, theta_{t-1} whenever a
    member is asked for (the loop updates them in place after the iteration), so no catch-up."""

    def __init__(self, config: Config, sampler: Any, weights: Any):
        self.config, self.sampler, self.weights = config, sampler, weights
        self.task = get_task(config.data.task)

    def completions(self, *, iteration: int, member: int, problems: list[dict[str, Any]]) -> list[str]:
        return member_completions(self.sampler, self.weights, self.task, problems, self.config, iteration, member)


class LoopShare:
    """The loop's share of the pipelined schedule: `load_sampler()` loads the loop's sampler as engine 0
    (1/k of the GPU's memory budget) and the k - 1 other engines after it; `evaluate` runs share 0."""

    def __init__(self, config: Config):
        self.config = config
        self.pipeline: MemberPipeline | None = None

    def load_sampler(self) -> Any:
        first, *others = engine_configs(self.config, resident_engines(self.config))
        sampler = load_es_sampler(first)
        engines = [LoopEngine(first, sampler, sampler.es_weights()), *(MemberEvaluator(c) for c in others)]
        self.pipeline = MemberPipeline(self.config, engines=engines)
        return sampler

    def evaluate(self, iteration: int, members: list[int], problems: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.pipeline is None:
            raise RuntimeError("the loop's share asked for before the loop loaded its sampler (LoopShare.load_sampler)")
        return self.pipeline.evaluate(iteration, members, problems)
