"""The pipelined ES schedule (`modal.es_member_gpus = N > 0`, on_modal/pipeline.py) and the ES held-out
evaluation on one container (`functions.es_heldout`).

What these show, with stand-ins only (no GPU, no vLLM, no Modal, no Lean here): the engines are the
real transformers sampler on the tiny model, the Volumes tests/modal_standin.py's, and the Modal
functions run in this process with `.local()`. Barrier, pipelined and in-process runs give the same
rewards, ledger, final weights and held-out numbers; a share's verification overlaps its next
member's generation; a re-run share (a retry in another container) gives the same results. Not
shown: several `vllm.LLM` engines generating at once on one GPU (pipeline.py says why only a GPU
run can confirm it), and what the schedule costs (plan/, schedule.py).
"""

import json
import math
import threading
from pathlib import Path

import pytest

from conftest import PATIENCE_S
from modal_standin import VolumeStandIn
from prover_cli.config import config_from_dict
from prover_cli.errors import ReplayMismatchError
from prover_cli.es.population import score_members
from prover_cli.on_modal import functions
from prover_cli.on_modal.pipeline import MemberPipeline, engine_configs, shares
from prover_cli.tasks import get_task

pytestmark = pytest.mark.filterwarnings("ignore:.*executing locally.*:UserWarning")


# --------------------------------------------------------------------------------------------
# The assignment and the engines' memory
# --------------------------------------------------------------------------------------------

def test_shares_are_a_fixed_partition_of_the_members():
    assert shares(6, 4) == [[0, 4], [1, 5], [2], [3]]
    assert shares(2, 5) == [[0], [1]]          # never an empty share
    for population, gpus in ((30, 4), (8, 8), (7, 3)):
        got = shares(population, gpus)
        assert sorted(m for share in got for m in share) == list(range(population))
        assert got == shares(population, gpus)
    with pytest.raises(ValueError):
        shares(4, 0)


def test_each_resident_engine_gets_its_fraction_of_the_gpu_memory():
    config = config_from_dict({"generate": {"gpu_memory_utilization": 0.9}})
    engines = engine_configs(config, 3)
    assert [c.generate.gpu_memory_utilization for c in engines] == [0.9 / 3] * 3
    assert config.generate.gpu_memory_utilization == 0.9 and len({id(c) for c in engines}) == 3


# --------------------------------------------------------------------------------------------
# The pipeline's schedule, with engines that only count (what is generated does not matter here)
# --------------------------------------------------------------------------------------------

class CountingEngine:
    """A MemberEvaluator's interface: `task` and `completions(iteration=, member=, problems=)`."""

    def __init__(self, config, log, task):
        self.config, self.log, self.task = config, log, task

    def completions(self, *, iteration, member, problems):
        self.log.append(("generate", member, self.config.generate.gpu_memory_utilization))
        return [f"m{member}p{i}" for i in range(len(problems))]


class GatedTask:
    """A task whose first scoring call waits until member 1's generation has begun, and member 1
    waits until that call has begun: a schedule that scores a member before generating the next
    one can never pass, and the first call holds member 0 alone."""

    reward_range = (0.0, 1.0)

    def __init__(self, log):
        self.log, self.calls = log, 0
        self.verifying = threading.Event()
        self.next_generation_started = threading.Event()

    def rewards(self, problems, completions, config, reporter=None):
        self.calls += 1
        if self.calls == 1:
            self.verifying.set()
            assert self.next_generation_started.wait(PATIENCE_S), "member 1 was not generated while member 0 verified"
        self.log.append(("verified", tuple(completions)))
        return [float(c.startswith("m1")) for c in completions]


def pipeline_of(log, task, *, engines=1, backend="transformers"):
    config = config_from_dict({"generate": {"backend": backend, "gpu_memory_utilization": 0.8},
                               "modal": {"es_member_gpus": 2, "es_members_per_gpu": engines}})

    def engine(c):
        e = CountingEngine(c, log, task)
        real = e.completions

        def completions(**kwargs):
            if kwargs["member"] == 1:
                assert task.verifying.wait(PATIENCE_S), "member 0 never reached verification"
                task.next_generation_started.set()
            return real(**kwargs)

        e.completions = completions
        return e

    return MemberPipeline(config, evaluator=engine)


def test_the_gpu_generates_the_next_member_while_lean_checks_the_last():
    log = []
    task = GatedTask(log)
    results = pipeline_of(log, task).evaluate(1, [0, 1, 2], [{"id": "a"}, {"id": "b"}])
    assert [r["member"] for r in results] == [0, 1, 2]
    assert [r["rewards"] for r in results] == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    calls = [e[1] for e in log if e[0] == "verified"]
    assert calls[0] == ("m0p0", "m0p1")       # member 0 verified alone, while member 1 was generated
    assert log.index(("generate", 1, 0.8)) < log.index(("verified", calls[0]))
    # the members that arrived meanwhile go next, in the order they arrived (together or one by one)
    assert [c for call in calls[1:] for c in call] == ["m1p0", "m1p1", "m2p0", "m2p1"] and len(calls) <= 3


def test_members_scored_together_get_the_rewards_each_would_get_alone():
    from concurrent.futures import Future

    from prover_cli.on_modal.pipeline import score_together
    from prover_cli.tasks.toy import ToyTask

    task, config = ToyTask(), config_from_dict({"data": {"task": "toy"}})
    problems = task.problems_from_seed(config, 2)
    members = [["12", "1a"], ["a", "zzzz"], ["9", "1234"]]   # toy: the fraction of characters that are digits
    futures = [Future() for _ in members]
    score_together(task, problems, list(zip(members, futures)), config)
    from prover_cli.policy import rollout

    assert [f.result() for f in futures] == [rollout.score(task, problems, m, config) for m in members]
    assert len({tuple(f.result()) for f in futures}) == 3   # three different answers, each to its own member


def test_resident_engines_share_the_members_and_the_gpu_memory():
    log = []
    task = GatedTask(log)
    task.next_generation_started.set()
    results = pipeline_of(log, task, engines=2, backend="vllm").evaluate(1, [1, 3, 5], [{"id": "a"}])
    assert [r["completions"] for r in results] == [["m1p0"], ["m3p0"], ["m5p0"]]
    assert {(m, share) for _, m, share in (e for e in log if e[0] == "generate")} == {(1, 0.4), (3, 0.4), (5, 0.4)}


def test_a_verification_failure_fails_the_share():
    class Broken(GatedTask):
        def rewards(self, *args, **kwargs):
            self.verifying.set()
            raise RuntimeError("the verifier broke")

    log = []
    task = Broken(log)
    with pytest.raises(RuntimeError, match="the verifier broke"):
        pipeline_of(log, task).evaluate(1, [0, 1], [{"id": "a"}])


@pytest.mark.parametrize("rewards", [[1.0], [1.0, float("nan")], [1.0, 2.0], [1, 0], "10", None])
def test_rewards_scored_elsewhere_are_refused_unless_they_are_what_score_returns(rewards):
    config = config_from_dict({"es": {"population": 2, "problems_per_iteration": 1}})
    batch = [{"id": "p", "numbers": [1, 2], "target": 3}]
    good = {"completions": ["a"], "rewards": [1.0]}
    bad = {"completions": ["b"] * (len(rewards) if isinstance(rewards, list) else 1), "rewards": rewards}
    with pytest.raises(RuntimeError):
        score_members([good, bad], get_task("countdown"), batch * 2, config, 1, None)


def test_members_scored_and_unscored_together_are_refused():
    config = config_from_dict({"es": {"population": 2, "problems_per_iteration": 1}})
    with pytest.raises(RuntimeError, match="some members came back scored"):
        score_members([{"completions": ["a"], "rewards": [1.0]}, ["b"]], get_task("countdown"), [{"id": "p"}],
                      config, 1, None)


def test_population_on_modal_sends_one_share_per_gpu_and_puts_members_back_in_order(monkeypatch):
    seen = {}
    loop_running, remote_running = threading.Event(), threading.Event()

    class FakeMembers:
        def __init__(self, **parameters):
            self.share = self

        def starmap(self, inputs, order_outputs, return_exceptions):
            remote_running.set()
            seen["together"] = loop_running.wait(PATIENCE_S)   # the loop's share runs meanwhile
            seen.update(inputs=list(inputs), return_exceptions=return_exceptions)
            return iter([[{"member": m, "completions": [f"c{m}"], "rewards": [m / 4]} for m in members]
                         for _, members, _ in inputs])

    class FakeCls:
        def with_options(self, **options):
            return FakeMembers

    monkeypatch.setattr(functions, "ESMember", FakeCls())
    monkeypatch.setattr(functions.modal, "is_local", lambda: False)
    monkeypatch.setattr(functions, "_commit", lambda volume: seen.setdefault("committed", True))
    config = config_from_dict({"es": {"population": 6}, "modal": {"es_member_gpus": 2}})
    population = functions.ModalPopulation(config, config.to_dict())
    loop_running.set()   # the loop's share fails at once: the member containers' shares need not wait for it
    with pytest.raises(RuntimeError, match="before the loop loaded its sampler"):
        population.members(3, [{"id": "p"}])   # train_es loads the loop's sampler through the population first
    loop_running.clear()
    remote_running.clear()

    class LoopPipeline:   # the loop's own share: what the loop's GPU evaluates meanwhile
        def evaluate(self, iteration, members, problems):
            loop_running.set()
            assert remote_running.wait(PATIENCE_S)   # the member containers' shares were sent first
            seen["loop"] = (iteration, list(members), problems)
            return [{"member": m, "completions": [f"c{m}"], "rewards": [m / 4]} for m in members]

    population.loop_share.pipeline = LoopPipeline()
    got = population.members(3, [{"id": "p"}])
    # member i on GPU i % 3: share 0 is the loop's, shares 1 and 2 go to the two member containers
    assert seen["loop"] == (3, [0, 3], [{"id": "p"}])
    assert seen["inputs"] == [(3, [1, 4], [{"id": "p"}]), (3, [2, 5], [{"id": "p"}])]
    assert seen["return_exceptions"] is False and seen["committed"] and seen["together"]
    assert got == [{"completions": [f"c{m}"], "rewards": [m / 4]} for m in range(6)]


def test_the_heldout_container_is_eval_sized_and_gets_the_configured_gpu():
    """`es_heldout` is declared with `eval`'s resources (one container, Modal's default scaledown,
    not the members' long window) and called with the configured GPU."""
    from test_modal import declared

    from prover_cli.on_modal import plan

    config = config_from_dict({"modal": {"gpu": "L4"}})
    got, table = declared(functions.es_heldout), plan.resources(config_from_dict({}))["eval"]
    assert (got["image"], got["timeout_s"], got["max_containers"], got["scaledown_window_s"]) == \
        (table.image, table.timeout_s, table.max_containers, None)
    assert functions.options("eval", config, gpu=True)["gpu"] == "L4:1"


# --------------------------------------------------------------------------------------------
# The whole loop on the tiny model: barrier, pipelined and in-process give one run
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs-volume")
    runs = VolumeStandIn(root, "prover-ledgers")
    models = VolumeStandIn(root.parent / (root.name + "-models"), "prover-models")
    from prover_cli.on_modal import remote

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(functions, "RUNS_MOUNT", str(root))
        for module in (functions, remote):
            mp.setattr(module, "runs_volume", runs)
        mp.setattr(functions, "models_volume", models)
        yield root


def run_config(cache, run_dir, **modal):
    return config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(cache), "device": "cpu", "dtype": "float32"},
        # toy: a reward graded by characters, so members' rewards differ and every update is taken
        "data": {"task": "toy"},
        "generate": {"n": 1, "max_tokens": 8, "temperature": 1.0, "top_p": 1.0, "batch_size": 8},
        # sampled members: the shared sampling seed matters, not only the weights
        "es": {"population": 4, "iterations": 2, "problems_per_iteration": 3, "sigma": 0.05,
               "learning_rate": 0.05, "member_temperature": 1.0, "snapshot_every": 1},
        "run": {"dir": run_dir, "seed": 1, "eval_every": 1, "eval_n": 2, "eval_temperature": 1.0,
                "eval_problems": 4},
        "modal": modal,
    }).to_dict()


def lines(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def three_runs(volume, tmp_path_factory):
    from prover_cli.es.train import train_es

    from prover_cli.es import member

    cache = tmp_path_factory.mktemp("model-cache")
    calls = {"shares": [], "heldout": []}
    real_evaluate, real_heldout = MemberPipeline.evaluate, member.heldout_at

    def counted_evaluate(self, iteration, members, problems):
        calls["shares"].append((iteration, list(members), len(self.engines)))
        return real_evaluate(self, iteration, members, problems)

    def counted_heldout(config, iteration, record, **kwargs):
        calls["heldout"].append((config.run.dir.rsplit("/", 1)[-1], iteration))
        return real_heldout(config, iteration, record, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MemberPipeline, "evaluate", counted_evaluate)
        mp.setattr(member, "heldout_at", counted_heldout)
        barrier = run_config(cache, "runs/barrier")
        functions.train_es.local(barrier, {"resume": False})
        assert calls == {"shares": [], "heldout": [("barrier", 1), ("barrier", 2)]}
        pipelined = run_config(cache, "runs/pipelined", es_member_gpus=1, es_members_per_gpu=2)
        functions.train_es.local(pipelined, {"resume": False})
        three_gpus = run_config(cache, "runs/pipelined-3", es_member_gpus=2)  # the loop's one engine: no catch-up
        functions.train_es.local(three_gpus, {"resume": False})
    # two shares per iteration, the loop's (share 0, concurrently with the other) and one member
    # container's, each GPU with two resident engines; the evaluations on the loop's GPU, not elsewhere
    assert sorted(calls["shares"][:4]) == [(1, [0, 2], 2), (1, [1, 3], 2), (2, [0, 2], 2), (2, [1, 3], 2)]
    assert sorted(calls["shares"][4:]) == [(1, [0, 3], 1), (1, [1], 1), (1, [2], 1), (2, [0, 3], 1), (2, [1], 1),
                                           (2, [2], 1)]
    assert calls["heldout"][2:] == []
    local = config_from_dict({**barrier, "run": {**barrier["run"], "dir": str(volume / "runs/local")}})
    train_es(local)  # the library alone, in this process: members, rewards and evaluations here
    return {"cache": cache, **{name: volume / "runs" / name for name in ("barrier", "pipelined", "pipelined-3", "local")}}


def without_wall(record):
    return {k: v for k, v in record.items() if "wall_s" not in k and "elapsed_s" not in k}


@pytest.mark.slow
def test_barrier_and_pipelined_members_give_the_same_rewards_and_the_same_ledger(three_runs):
    from tests.test_es_train import tensor_hashes

    runs = {name: three_runs[name] for name in ("barrier", "pipelined", "pipelined-3", "local")}
    ledgers = {name: json.loads((d / "ledger.json").read_text())["iterations"] for name, d in runs.items()}
    assert ledgers["barrier"] == ledgers["pipelined"] == ledgers["pipelined-3"] == ledgers["local"]
    rewards = {name: [r["reward/mean"] for r in lines(d / "metrics.jsonl")[1:]] for name, d in runs.items()}
    assert rewards["barrier"] == rewards["pipelined"] == rewards["pipelined-3"] == rewards["local"]
    assert len(rewards["local"]) == 2
    # a run that skipped every update, or scored nothing, would make these equal for free
    steps = lines(runs["local"] / "metrics.jsonl")[1:]
    assert all(not s["es/skipped"] and s["es/update_norm"] > 0 for s in steps), steps
    hashes = {name: tensor_hashes(d / "final") for name, d in runs.items()}
    assert hashes["barrier"] == hashes["pipelined"] == hashes["pipelined-3"] == hashes["local"]


@pytest.mark.slow
def test_the_heldout_evaluation_on_its_own_container_equals_the_loops_own(three_runs):
    # barrier: es_heldout's container, theta rebuilt from the ledger; pipelined: the loop's GPU,
    # its live weights as one engine among resident ones; local: the library alone
    evaluations = {name: [without_wall({k: v for k, v in r.items() if k.startswith("eval/")})
                          for r in lines(three_runs[name] / "metrics.jsonl")]
                   for name in ("barrier", "pipelined", "pipelined-3", "local")}
    assert all(len(e) == 3 and all(e) for e in evaluations.values())  # the base, then iterations 1 and 2
    assert evaluations["barrier"] == evaluations["pipelined"] == evaluations["pipelined-3"] == evaluations["local"]


@pytest.mark.slow
def test_a_share_run_again_in_a_warm_or_a_fresh_container_gives_the_same_members(three_runs, volume):
    config = config_from_dict(run_config(three_runs["cache"], str(three_runs["pipelined"]),
                                         es_member_gpus=2, es_members_per_gpu=2))
    from prover_cli.tasks.problems import train_problems

    problems = train_problems(config)[:3]
    warm = MemberPipeline(config)
    first = warm.evaluate(3, [0, 2, 3], problems)   # theta_2: both iterations of the ledger applied
    again = warm.evaluate(3, [0, 2, 3], problems)   # Modal's retry of the same input
    fresh = MemberPipeline(config).evaluate(3, [0, 2, 3], problems)  # a retry in another container
    assert first == again == fresh and all(e.applied == 2 for e in warm.engines)
    assert all(len(m["rewards"]) == 3 and all(math.isfinite(r) for r in m["rewards"]) for m in first)


@pytest.mark.slow
def test_the_heldout_container_refuses_a_record_its_rebuilt_weights_do_not_match(three_runs, volume):
    from prover_cli.es.member import heldout_at

    config = config_from_dict(run_config(three_runs["cache"], str(three_runs["pipelined"])))
    from prover_cli.es.ledger import read_ledger

    _, records = read_ledger(three_runs["pipelined"] / "ledger.json")
    # not the loop's record: its snapshot dropped (replayed from iteration 1's) and another fingerprint
    forged = {**{k: v for k, v in records[1].items() if k != "snap"}, "fp": "0" * len(records[1]["fp"])}
    with pytest.raises(ReplayMismatchError, match="iteration 2"):
        heldout_at(config, 2, forged)


@pytest.mark.slow
def test_pipelined_lean_rewards_are_verified_in_sandboxes_and_equal_the_barriers(volume, tmp_path_factory, monkeypatch):
    """The lean task: each share verifies from its background thread in Sandboxes (the stand-in
    Sandboxes running tests/fake_repl.py), its `verify.workers` REPL Sandboxes kept warm through
    the share (one header import serves all its members: what the plan bills), all ended with the
    share; and the ledger is the barrier's."""
    from conftest import FAKE_REPL
    from modal_standin import sandboxes_running

    from prover_cli.on_modal import images

    standin = sandboxes_running(monkeypatch, FAKE_REPL)
    controls = next(standin)
    repl_sandboxes: dict[str, list] = {}
    try:
        cache = tmp_path_factory.mktemp("lean-model-cache")
        runs = {}
        for name, modal in (("lean-barrier", {}), ("lean-pipelined", {"es_member_gpus": 1})):
            before = len(controls.created)
            config = json.loads(json.dumps(run_config(cache, f"runs/{name}", verify_batch_size=3, **modal)))
            config["data"] = {"task": "lean", "source": "examples", "preset": "auto", "problems": "data/lean.jsonl",
                              "train_split": "train"}
            config["verify"] = {"workers": 1, "timeout_s": PATIENCE_S, "header_timeout_s": PATIENCE_S,
                                "memory_limit_gb": 0.0}
            config["es"].update({"population": 4, "iterations": 1, "problems_per_iteration": 2})
            config["run"].update({"eval_every": 0})
            functions.prepare_data.local(config, {"source": None, "out_path": None, "limit": None, "preset": None})
            assert functions.train_es.local(config, {"resume": False})["ok"]
            runs[name] = volume / "runs" / name
            repl_sandboxes[name] = [box for box in controls.created[before:] if box._kwargs["image"] is images.lean_image]
    finally:
        next(standin, None)
    ledgers = [json.loads((d / "ledger.json").read_text())["iterations"] for d in runs.values()]
    metrics = [lines(d / "metrics.jsonl")[-1] for d in runs.values()]
    # every REPL Sandbox a share kept warm ended with its share (their count, one header import per
    # share, is tests/test_modal_sandbox.py's: here the members' completions repeat, so few proofs are new)
    assert repl_sandboxes["lean-pipelined"] and all(box.poll() is not None for box in repl_sandboxes["lean-pipelined"])
    assert ledgers[0] == ledgers[1]
    assert [m["reward/mean"] for m in metrics] == [metrics[0]["reward/mean"]] * 2 and metrics[0]["samples"] == 8
