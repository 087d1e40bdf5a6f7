"""prover_cli/streams.py: every random stream of a run keeps its values, and only streams.py makes them.

The literals below were computed from the pre-refactor code at commit 49e85f1 (`git archive
49e85f1 prover_cli`, run with PYTHONPATH at it: `seeds.derive_seed`, `es.population.sampling_seed`
and `pick_problems`, `es.update.member_noise` and `shuffled`, `problems.select_train` and
`select_heldout`, `heldout.heldout_params`, `generate.problem_seed`, `data.seeded_split`,
`grpo.shuffle_in_groups`, the task generators and the transformers sampler's `_batch_seed`).
Ledgers, samples.jsonl and problems.jsonl on users' disks hold these values, so a change to any of
them is a break of replay or resume, not a refactor.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import re
from pathlib import Path

import pytest

from prover_cli import streams
from prover_cli.config import load_config

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "prover_cli"


def rows(count: int) -> list[dict[str, int]]:
    return [{"i": i} for i in range(count)]


# ---------------------------------------------------------------------------------------------
# The values: each stream, and the call site that asks it, gives what 49e85f1 gave
# ---------------------------------------------------------------------------------------------

def test_training_problems_streams_keep_their_values():
    from prover_cli.es.population import pick_problems
    from prover_cli.tasks.problems import select_train

    assert [streams.derive_seed("train-problems", s) for s in (0, 1, 17)] == [
        3222702432717404612, 87737274752040696, 3474010977931292824]
    assert select_train(rows(10), 4, 0) == [{"i": 2}, {"i": 3}, {"i": 4}, {"i": 9}]
    assert select_train(rows(10), 4, 7) == [{"i": 1}, {"i": 3}, {"i": 6}, {"i": 9}]
    assert [streams.derive_seed("es-problems", r, i) for r, i in ((0, 1), (0, 2), (3, 1))] == [
        194809050271869671, 6621074767514689549, 7908231770351872428]
    assert [p["i"] for p in pick_problems(rows(20), 0, 1, 5)] == [10, 14, 18, 3, 4]
    assert [p["i"] for p in pick_problems(rows(20), 3, 7, 5)] == [12, 10, 0, 1, 19]


def test_es_member_streams_keep_their_values():
    from prover_cli.es.update import member_noise, shuffled

    assert [streams.es_sampling_seed(r, i) for r, i in ((0, 1), (0, 2), (3, 1))] == [641053090, 1568198362, 1927958482]
    assert [member_noise(0, 1, m, True) for m in range(4)] == [
        (4204844568762405276, 1), (4204844568762405276, -1), (1528098746220976406, 1), (1528098746220976406, -1)]
    assert [member_noise(3, 2, m, False) for m in range(2)] == [(4923910682034069594, 1), (341459711412638497, 1)]
    assert streams.es_noise_seed(0, 1, 1) == 1528098746220976406
    assert [streams.derive_seed("es-shuffle", r, i) for r, i in ((0, 1), (3, 2))] == [
        6160992067309831902, 4524211211849599767]
    assert shuffled([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 0, 1) == [0.0, 4.0, 5.0, 2.0, 1.0, 3.0]
    assert shuffled([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 3, 2) == [4.0, 1.0, 0.0, 3.0, 2.0, 5.0]


def test_heldout_streams_keep_their_values():
    from prover_cli.training.heldout import greedy_params, heldout_params
    from prover_cli.tasks.problems import select_heldout

    for run_seed, seed in ((0, 1880656466), (1, 700463950), (17, 532373188)):
        config = load_config(None, [f"run.seed={run_seed}"])
        assert streams.heldout_sampling_seed(run_seed) == seed
        assert heldout_params(config).seed == greedy_params(config).seed == seed
    assert [streams.derive_seed("heldout-problems", s) for s in (0, 1, 17)] == [
        6514206108064840810, 983183714389476810, 600426326839714878]
    valid = [{"id": f"p{i}", "formal_statement": f"theorem t{i} : {i} = {i}", "split": "valid"} for i in range(12)]
    picked = {s: [p["id"] for p in select_heldout(valid, train_split="train", valid_split="valid", count=4, seed=s)]
              for s in (0, 5)}
    assert picked == {0: ["p3", "p6", "p7", "p9"], 5: ["p2", "p5", "p6", "p11"]}
    # a study's dev split: pinned, so a study's tuning record keeps meaning the same problems
    assert [streams.study_dev_split_rng(s).random() for s in (0, 3)] == [0.9872707491707057, 0.8067729594715758]


def test_legacy_streams_keep_their_values():
    from prover_cli.tasks.datasets import seeded_split
    from prover_cli.grpo.train import shuffle_in_groups

    assert [streams.generate_problem_seed(b, pid) for b, pid in ((0, "p0"), (0, "countdown_0_00001"), (1234, "p0"))] \
        == [1106200990, 485777507, 1183525217]
    units = [streams.split_unit(s, pid) for s, pid in ((0, "p0"), (0, "p1"), (1, "p0"), (7, "mathd_algebra_10"))]
    assert units == [0.688325194188493, 0.9111100872821136, 0.5813264448947806, 0.613425565552019]
    cases = ((0, "p0"), (0, "p1"), (1, "p0"), (7, "mathd_algebra_10"))
    assert [seeded_split(pid, s, 0.1) for s, pid in cases] == ["train"] * 4
    assert [seeded_split(pid, s, 0.7) for s, pid in cases] == ["valid", "train", "valid", "valid"]
    assert shuffle_in_groups([0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0], ["a"] * 4 + ["b"] * 4,
                             ["w", "x", "y", "z"] * 2, 4, 0) == [0.0, 3.0, 1.0, 2.0, 10.0, 13.0, 12.0, 11.0]
    assert shuffle_in_groups([0.0, 1.0, 2.0, 3.0], ["a"] * 4, ["w", "x", "y", "z"], 4, 5) == [0.0, 3.0, 2.0, 1.0]
    assert [streams.grpo_trainer_seed(s) for s in (0, 7, 2**32 - 1)] == [0, 7, 2**32 - 1]  # TRL gets run.seed as is


def test_streams_derived_outside_this_module_keep_their_values():
    """The allowlisted derivations (below) are pinned too: listing them is no licence to change them."""
    from prover_cli.policy.samplers.transformers_sampler import _batch_seed
    from prover_cli.tasks import countdown, toy

    assert [(p["id"], p["numbers"], p["target"]) for p in countdown.generate_problems(3, 4, 50, 0)] == [
        ("countdown_0_00000", [7, 15, 31, 28], 13125), ("countdown_0_00001", [4, 33, 36, 36], 1228),
        ("countdown_0_00002", [19, 34, 25, 35], 434)]
    assert [(p["numbers"], p["target"]) for p in countdown.generate_problems(2, 3, 20, 9)] == [
        ([19, 1, 10], 189), ([2, 11, 12], 25)]
    assert [(p["id"], p["prompt"], p["split"]) for p in toy.generate_problems(3, 0)] == [
        ("toy_0_00000", "Continue with digits only: 5 9 4", "train"),
        ("toy_0_00001", "Continue with digits only: 7 6 2", "train"),
        ("toy_0_00002", "Continue with digits only: 7 4 7", "train")]
    assert [_batch_seed(s, b) for s, b in ((0, 0), (5, 3), (2**40, 1))] == [0, 5000018, 1099514926310883329]


# ---------------------------------------------------------------------------------------------
# The one way: the derive_seed streams are sha256("<name>|<parts>"), as docs/streams.md says
# ---------------------------------------------------------------------------------------------

def by_hand(*parts, bits=63) -> int:
    """docs/streams.md's formula, written out again here rather than imported."""
    return int(hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16], 16) >> (64 - bits)


@pytest.mark.parametrize("run_seed, iteration", [(0, 0), (1, 7), (2**32 - 1, 12345)])
def test_derive_seed_streams_follow_the_one_documented_formula(run_seed, iteration):
    assert streams.es_noise_seed(run_seed, iteration, 3) == by_hand("es-noise", run_seed, iteration, 3)
    assert streams.es_sampling_seed(run_seed, iteration) == by_hand("es-sampling", run_seed, iteration, bits=31)
    assert streams.heldout_sampling_seed(run_seed) == by_hand("heldout-sampling", run_seed, bits=31)
    for rng, parts in ((streams.train_problems_rng(run_seed), ("train-problems", run_seed)),
                       (streams.es_problems_rng(run_seed, iteration), ("es-problems", run_seed, iteration)),
                       (streams.es_shuffle_rng(run_seed, iteration), ("es-shuffle", run_seed, iteration)),
                       (streams.heldout_problems_rng(run_seed), ("heldout-problems", run_seed)),
                       (streams.study_dev_split_rng(run_seed), ("study-dev-split", run_seed))):
        assert rng.getstate() == type(rng)(by_hand(*parts)).getstate()


def test_streams_are_distinct_where_their_parts_differ():
    seeds = {streams.es_noise_seed(0, i, m) for i in range(4) for m in range(8)}
    assert len(seeds) == 32  # no two (iteration, pair) share noise
    assert streams.es_sampling_seed(0, 1) != streams.es_sampling_seed(1, 1) != streams.es_sampling_seed(1, 2)
    assert streams.heldout_sampling_seed(0) not in {streams.es_sampling_seed(0, i) for i in range(100)}
    assert streams.generate_problem_seed(0, "a") != streams.generate_problem_seed(0, "b")


# ---------------------------------------------------------------------------------------------
# Only streams.py makes random streams: a scan of the package's syntax trees
# ---------------------------------------------------------------------------------------------

WARMSTART = "the warm-started base model, built from model.tiny_seed like the tiny model it starts from"
# (path pattern, function, what it does) -> why it may. Everything else that seeds, hashes a seed,
# does arithmetic on one or draws from a global RNG outside streams.py fails the scan below.
ALLOWED = {
    ("prover_cli/es/noise/definition.py", "stream_key", "hashes a seed"):
        "the noise kernels' definition consumes an es-noise seed: sha256(prover-noise-v1|seed|tensor)",
    ("prover_cli/es/*.py", "_self_check", "calls Generator"):
        "the fused noise kernels' self-check draws fixed test weights (seed 0), not a run's stream",
    ("prover_cli/es/*.py", "_self_check", "calls manual_seed"): "as above: the self-check's fixed test weights",
    ("prover_cli/grpo/trl_glue.py", "resumable_trainer_class.EpochSeededSampler.__iter__", "calls manual_seed"):
        "reseeds TRL's prompt sampler with the seed TRL was given (grpo-trainer) each epoch, for resume",
    ("prover_cli/policy/samplers/transformers_sampler.py", "TransformersSampler._generate_batches", "calls manual_seed"):
        "the sampler consumes the sampling seed it is handed, one torch seed per batch",
    ("prover_cli/policy/samplers/transformers_sampler.py", "_batch_seed", "seed arithmetic"):
        "the sampler's per-batch torch seed from the one sampling seed it is handed (pinned above)",
    ("prover_cli/tasks/*.py", "generate_problems", "calls Random"):
        "a task is one file: its generator turns the seed it is given into problems (pinned above)",
    ("prover_cli/policy/tiny_model.py", "build_tiny_model", "calls manual_seed"):
        "the base model built from model.tiny_seed (a cache key of the model), not a stream of a run",
    ("prover_cli/policy/warmstart.py", "training_pairs", "seed arithmetic"): WARMSTART,
    ("prover_cli/policy/warmstart.py", "warm_start", "calls Random"): WARMSTART,
    ("prover_cli/policy/warmstart.py", "build_warmstart", "calls manual_seed"): WARMSTART,
}

SEED_NAME = re.compile(r"(^|_)seed$")  # seed, run_seed, tiny_seed, data_seed; not `seeds` (a count)
SEEDING_CALLS = {"Random", "SystemRandom", "seed", "manual_seed", "manual_seed_all", "Generator", "default_rng",
                 "RandomState", "set_seed", "derive_seed"}
GLOBAL_DRAWS = {"random", "randint", "randrange", "shuffle", "sample", "choice", "choices", "uniform", "gauss",
                "getrandbits", "rand", "randn", "randperm", "normal", "bernoulli", "multinomial"}


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return ""


def _kind(node: ast.AST) -> str | None:
    """What a node does with randomness, or None."""
    if isinstance(node, ast.Call):
        name = _name(node.func)
        owner = _name(node.func.value) if isinstance(node.func, ast.Attribute) else ""
        if name in SEEDING_CALLS:
            return f"calls {name}"
        if name in GLOBAL_DRAWS and owner in ("random", "np", "numpy", "torch") and \
                not any(k.arg == "generator" for k in node.keywords):
            return f"draws from the global {owner} RNG"
        if (owner == "hashlib" or name == "hash") and any(SEED_NAME.search(_name(n))
                                                          for a in node.args for n in ast.walk(a)):
            return "hashes a seed"
    if isinstance(node, ast.Attribute) and node.attr == "random" and _name(node.value) in ("np", "numpy"):
        return "uses numpy.random"
    if isinstance(node, ast.BinOp) and any(SEED_NAME.search(_name(x)) for x in (node.left, node.right)):
        return "seed arithmetic"
    return None


def random_stream_sites(path: Path, source: str) -> list[tuple[str, str, int]]:
    """(function, kind, line) of every place in `source` that makes or draws from a random stream."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if where == "<module>" else f"{where}.{child.name}"
            kind = _kind(child)
            if kind:
                found.append((where, kind, child.lineno))
            visit(child, inner)

    visit(ast.parse(source, filename=str(path)), "<module>")
    return found


def test_only_streams_py_makes_random_streams():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative == "prover_cli/streams.py":
            continue
        for where, kind, line in random_stream_sites(path, path.read_text(encoding="utf-8")):
            if not any(fnmatch.fnmatch(relative, pattern) and where == function and kind == allowed
                       for pattern, function, allowed in ALLOWED):
                unexplained.append(f"{relative}:{line}: {where} {kind}")
    assert not unexplained, ("random streams outside prover_cli/streams.py (add a named stream there, or an "
                             "ALLOWED entry with its reason):\n" + "\n".join(unexplained))


@pytest.mark.parametrize("snippet, kind", [
    ("import random\nrng = random.Random(f'x:{seed}')", "calls Random"),
    ("import torch\ng = torch.Generator().manual_seed(3)", "calls manual_seed"),
    ("import numpy as np\nnp.random.seed(1)", "calls seed"),
    ("import numpy as np\nx = np.random.default_rng(1)", "calls default_rng"),
    ("import random\nrandom.shuffle(order)", "draws from the global random RNG"),
    ("import torch\nx = torch.randn(3)", "draws from the global torch RNG"),
    ("s = run_seed * 31 + iteration", "seed arithmetic"),
    ("import hashlib\nd = hashlib.sha256(f'my-stream:{run_seed}'.encode())", "hashes a seed"),
    ("from prover_cli.streams import derive_seed\ns = derive_seed('x', 1)", "calls derive_seed"),
])
def test_the_scan_catches_each_way_of_making_a_stream(snippet, kind):
    assert kind in [k for _, k, _ in random_stream_sites(Path("<snippet>"), snippet)]


def test_the_scan_leaves_counts_and_content_hashes_alone():
    snippet = ("import hashlib, torch\nn = seeds * per_member\nkey = hashlib.sha256(text.encode())\n"
               "x = torch.randn(3, generator=g)\nlabel = f'seed {seed}'\n")
    assert random_stream_sites(Path("<snippet>"), snippet) == []


# ---------------------------------------------------------------------------------------------
# The table: docs/streams.md names every stream, and the ledger and format docs point at it
# ---------------------------------------------------------------------------------------------

def test_docs_streams_md_has_a_row_per_stream_and_the_other_docs_point_at_it():
    table = (REPO / "docs" / "streams.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", table, flags=re.M))
    assert documented >= set(streams.STREAMS), f"docs/streams.md lacks {sorted(set(streams.STREAMS) - documented)}"
    for name, function in streams.STREAMS.items():
        assert f"`{function.__name__}`" in table, f"docs/streams.md: stream {name!r} should name {function.__name__}"
    for doc in ("ledger.md", "formats.md"):
        assert "streams.md" in (REPO / "docs" / doc).read_text(encoding="utf-8"), f"docs/{doc} should point at it"
