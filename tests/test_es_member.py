"""Remote-style ES: members sampled by MemberEvaluator workers (as Modal runs them) give the same
ledger and the same weights as the in-process loop, and a worker catches up from the ledger."""

import json

import pytest

from prover_cli.errors import ReplayMismatchError
from prover_cli.es.member import MemberEvaluator
from prover_cli.es.population import LocalPopulation
from prover_cli.es.train import train_es
from tests.test_es_train import make_config, tensor_hashes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"


def test_workers_reproduce_the_local_loop(tmp_path, cache_dir):
    local = make_config(tmp_path / "local", cache_dir, iterations=3)
    train_es(local)

    remote = make_config(tmp_path / "remote", cache_dir, iterations=3)
    # Two workers split the population, like two Modal containers: each keeps its own theta
    # and catches up from the ledger the loop commits.
    workers = [MemberEvaluator(remote), MemberEvaluator(remote)]
    calls = []

    class Workers(LocalPopulation):  # the loop's own sampler updates theta; its members are the workers'
        def members(self, iteration, problems):
            calls.append(iteration)
            return [workers[m % 2].completions(iteration=iteration, member=m, problems=problems)
                    for m in range(remote.es.population)]

        def close(self):
            calls.append("closed")

    train_es(remote, population=Workers(remote))
    assert calls == [1, 2, 3, "closed"]
    assert all(w.applied == 2 for w in workers)  # each applied iterations 1..2 before iteration 3

    ledger = lambda d: json.loads((d / "ledger.json").read_text())
    assert ledger(tmp_path / "local")["iterations"] == ledger(tmp_path / "remote")["iterations"]
    assert tensor_hashes(tmp_path / "local" / "final") == tensor_hashes(tmp_path / "remote" / "final")


def test_worker_refuses_an_iteration_the_ledger_does_not_reach(tmp_path, cache_dir):
    config = make_config(tmp_path / "run", cache_dir, iterations=1)
    train_es(config)
    worker = MemberEvaluator(config)
    problems = [{"id": "p", "split": "train"}]
    with pytest.raises(ReplayMismatchError, match="the ledger has only 1 iterations"):
        worker.completions(iteration=3, member=0, problems=problems)
