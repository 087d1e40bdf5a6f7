"""Values that still got through, or got "unexpected" (issue #30): each is refused with an error
naming the file, line or key (exit 2 for a config error, 1 for work that failed), never as a bug."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import pytest


from test_robust import invoke, one_line, runner, sets  # noqa: E402,F401  (one CLI-case runner for the fault tables)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared with the other modules


@pytest.fixture(scope="module")
def tiny_dir(cache_dir):
    from prover_cli.policy.built_models import resolve_model_path

    return Path(resolve_model_path("tiny", cache_dir, 0))


def tiny_model(tiny_dir):
    from prover_cli.config import ModelConfig
    from prover_cli.policy.samplers.transformers_sampler import load_model_and_tokenizer

    config = ModelConfig(name=str(tiny_dir), dtype="float32", device="cpu")
    model, tokenizer, _ = load_model_and_tokenizer(config)
    return model, tokenizer


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# -- 1. every learning rate is bounded; no model with NaN or inf is ever saved -------------------------

def test_every_learning_rate_key_has_an_upper_bound():
    from prover_cli.config import SECTIONS

    rates = [(section, f) for section, cls in SECTIONS.items() for f in fields(cls)
             if "learning_rate" in f.name or f.name == "lr" or f.name.endswith("_lr")]
    assert {f"{s}.{f.name}" for s, f in rates} >= {"es.learning_rate", "grpo.learning_rate"}
    for section, f in rates:
        assert f.metadata["max"] is not None, f"{section}.{f.name} has no upper bound"


@pytest.mark.parametrize("override, named", [
    ("grpo.learning_rate=1e39", "--set grpo.learning_rate=1e39: must be <= 1.0"),
    ("grpo.learning_rate=inf", "--set grpo.learning_rate=inf: must be a finite number"),
    ("es.learning_rate=1e39", "--set es.learning_rate=1e39: must be <= 1000.0"),
])
def test_a_learning_rate_that_only_diverges_is_a_config_error(tmp_path, override, named):
    invoke(["train", "grpo", *sets(override, f"run.dir={tmp_path / 'run'}")], 2, named)
    assert not (tmp_path / "run").exists()


def _poison(tensor, count: int = 3) -> None:
    import torch

    with torch.no_grad():
        tensor.view(-1)[:count] = float("nan")


def test_grpo_final_with_nan_weights_is_refused_and_the_old_final_kept(tmp_path, tiny_dir):
    from prover_cli.grpo.train import save_final
    from prover_cli.policy.model_dir import NonFiniteWeightsError

    model, tokenizer = tiny_model(tiny_dir)
    final = tmp_path / "final"
    save_final(model, tokenizer, final)
    before = files(final)
    _poison(model.model.layers[1].mlp.down_proj.weight)
    with pytest.raises(NonFiniteWeightsError) as caught:
        save_final(model, tokenizer, final)
    message = str(caught.value)
    assert message.startswith(f"{final}: not written: tensor model.layers.1.mlp.down_proj.weight holds NaN or inf "
                              "(3 of "), message
    assert "nothing was saved" in message and f"{final} is kept as it was" in message
    assert files(final) == before and not (tmp_path / "final.tmp").exists()


def test_a_grpo_checkpoint_with_nan_weights_is_refused_before_the_trainer_writes(tmp_path, tiny_dir):
    from types import SimpleNamespace

    from prover_cli.grpo.trl_glue import resumable_trainer_class
    from prover_cli.policy.model_dir import NonFiniteWeightsError

    model, _ = tiny_model(tiny_dir)
    _poison(model.lm_head.weight)
    cls = resumable_trainer_class()
    trainer = cls.__new__(cls)  # only what _save_checkpoint reads before it saves
    trainer.model, trainer.state = model, SimpleNamespace(global_step=3)
    trainer._get_output_dir = lambda trial: str(tmp_path / "checkpoints")
    with pytest.raises(NonFiniteWeightsError, match=r"checkpoint-3: not written: tensor lm_head.weight holds NaN"):
        trainer._save_checkpoint(model, None)
    assert not (tmp_path / "checkpoints").exists()


def test_es_snapshot_and_model_dir_with_nan_weights_are_refused_before_writing(tmp_path, tiny_dir):
    from prover_cli.es.weights import NamedWeights, save_model_dir
    from prover_cli.policy.model_dir import NonFiniteWeightsError

    model, tokenizer = tiny_model(tiny_dir)
    weights = NamedWeights.from_module(model)
    weights.base["model.norm.weight"][0] = float("inf")
    with pytest.raises(NonFiniteWeightsError, match="tensor model.norm.weight holds NaN or inf"):
        weights.save(tmp_path / "snapshots" / "incoming.safetensors")
    assert not (tmp_path / "snapshots").exists() or not any((tmp_path / "snapshots").iterdir())
    with pytest.raises(NonFiniteWeightsError, match="nothing was saved"):
        save_model_dir(model, tokenizer, weights, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _es_config(run: Path, cache_dir: Path, iterations: int, **es) -> list[str]:
    return sets("model.name=tiny", f"model.cache_dir={cache_dir}", "model.device=cpu", "model.dtype=float32",
                "data.task=toy", "generate.top_p=1.0", "generate.max_tokens=2",
                "es.population=2", "es.sigma=0.01", "es.learning_rate=0.01", f"es.iterations={iterations}",
                "es.problems_per_iteration=1", f"run.dir={run}", *(f"es.{k}={v}" for k, v in es.items()))


def test_an_es_run_whose_weights_turn_nan_keeps_its_final_and_names_the_tensor(tmp_path, cache_dir, monkeypatch):
    """Train 1 iteration (final/ written), then resume to 2 with an update that leaves NaN in one
    tensor: `train es` exits 1 naming it, and final/ is the 1-iteration model, byte for byte."""
    import prover_cli.es.train as es_train

    run = tmp_path / "run"
    invoke(["train", "es", *_es_config(run, cache_dir, 1)], 0)
    before = files(run / "final")
    real = es_train.apply_rewards

    def diverging(weights, *args, **kwargs):
        result = real(weights, *args, **kwargs)
        weights.base["model.embed_tokens.weight"][0, :5] = float("nan")
        return result

    monkeypatch.setattr(es_train, "apply_rewards", diverging)
    invoke(["train", "es", "--resume", *_es_config(run, cache_dir, 2)], 1,
           f"{run / 'final'}: not written: tensor model.embed_tokens.weight holds NaN or inf (5 of",
           "nothing was saved", "is kept as it was")
    assert files(run / "final") == before and not (run / "final.tmp").exists()


def test_replay_seeds_refuses_to_write_nan_weights_and_keeps_the_old_out(tmp_path, cache_dir, monkeypatch):
    import prover_cli.es.replay as replay

    run = tmp_path / "run"
    invoke(["train", "es", *_es_config(run, cache_dir, 1)], 0)
    out = tmp_path / "replayed"
    args = ["replay-seeds", str(run / "ledger.json"), "--out", str(out), *sets(f"model.cache_dir={cache_dir}")]
    invoke(args, 0)
    before = files(out)
    real = replay.rebuild

    def diverging(weights, *a, **k):
        start = real(weights, *a, **k)
        weights.base["lm_head.weight"][1, 1] = float("-inf")
        return start

    monkeypatch.setattr(replay, "rebuild", diverging)
    invoke(args, 1, f"{out}: not written: tensor lm_head.weight holds NaN or inf (1 of", "nothing was saved")
    assert files(out) == before and not (tmp_path / "replayed.tmp").exists()


# -- 2. a ledger header is held to the config's ranges; a record's fields to the population ------------

def _ledger(path: Path) -> dict:
    from prover_cli.es.ledger import make_record, write_ledger
    from test_es_ledger import header

    write_ledger(path, header(population=4), [make_record(i, [".5", "0", ".25", "1"], "ab" * 8, False)
                                              for i in (1, 2)])
    return json.loads(path.read_text())


def _no_model_load(monkeypatch):
    """Replay must stop at the ledger: loading the model is already too late."""
    import prover_cli.policy.samplers.transformers_sampler as sampler

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the ledger was checked")

    monkeypatch.setattr(sampler, "load_model_and_tokenizer", refuse)


@pytest.mark.parametrize("mutate, named", [
    (lambda d: d["es"].update(learning_rate=1e39),
     "ledger header `es.learning_rate` = 1e+39: must be <= 1000.0, as for config key es.learning_rate"),
    (lambda d: d["es"].update(sigma=1e-300), "`es.sigma` = 1e-300: must be >= 1e-30"),
    (lambda d: d["es"].update(sigma=10 ** 400), "`es.sigma` = an integer of 333 hex digits: must be"),
    (lambda d: d["es"].update(population=10 ** 9), "`es.population` = 1000000000: must be <= 65536"),
    (lambda d: d.update(run_seed=2 ** 40), "`run_seed` = 1099511627776: must be <= 4294967295, as for config key run.seed"),
    (lambda d: d["sampling"].update(top_p=5), "`sampling.top_p` = 5: must be <= 1.0, as for config key generate.top_p"),
    (lambda d: d.update(reward_denominator=10 ** 30), "`reward_denominator` = an integer"),
    (lambda d: d["iterations"][1].__setitem__(1, "1" * 100_000),
     "iteration 2: rewards (field 2) has 100,000 characters; 4 rewards (the header's es.population) take at most"),
    (lambda d: d["iterations"][0].__setitem__(1, "f" * 1200), "iteration 1: rewards 'ffff"),
    (lambda d: d["iterations"][0].__setitem__(0, "g" * 100_000), "fingerprint 'gggg"),
], ids=["lr 1e39", "sigma tiny", "sigma huge int", "population 1e9", "run_seed 2^40", "top_p 5", "denominator 1e30",
        "rewards 100k chars", "reward past a float", "fingerprint 100k chars"])
def test_a_ledger_out_of_range_is_refused_before_replay_names_file_and_field(tmp_path, monkeypatch, mutate, named):
    path = tmp_path / "ledger.json"
    data = _ledger(path)
    mutate(data)
    path.write_text(json.dumps(data))
    _no_model_load(monkeypatch)
    result = invoke(["replay-seeds", str(path), "--out", str(tmp_path / "out")], 1, str(path), named)
    assert len(result.stderr) < 3000  # a 100,000-character field is not printed back


# -- 3. a BOM is skipped in ledger.json, as in TOML and JSONL; named where transformers reads ----------

def test_a_ledger_with_a_bom_reads_like_the_one_without(tmp_path, monkeypatch):
    from prover_cli.es.ledger import read_ledger

    path = tmp_path / "ledger.json"
    _ledger(path)
    plain = read_ledger(path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_ledger(path) == plain
    _no_model_load(monkeypatch)  # replay reads it, then stops at --upto (before any model is loaded)
    invoke(["replay-seeds", str(path), "--out", str(tmp_path / "out"), "--upto", "5"], 1,
           f"{path}: --upto 5, but the ledger has 2 iterations")


def test_a_model_config_json_with_a_bom_is_named_as_transformers_cannot_read_it(tmp_path, tiny_dir):
    from prover_cli.errors import InputError
    from prover_cli.policy.model_dir import check_model_dir

    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    (model / "config.json").write_bytes(b"\xef\xbb\xbf" + (model / "config.json").read_bytes())
    with pytest.raises(InputError, match="config.json: starts with a UTF-8 byte order mark, which transformers"):
        check_model_dir(model)


# -- 4. a model directory with NaN weights, a missing or a stray tensor; a cache_dir that cannot be ---

def _rewrite_weights(model: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(model / "model.safetensors"))
    change(tensors)
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})


def _generate(tmp_path: Path, model: Path, exit_code: int, *named: str):
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "t", "prompt": "1 2 3", "split": "train"}) + "\n")
    out = tmp_path / "s.jsonl"
    invoke(["generate", "--problems", str(problems), "--out", str(out), "--model", str(model),
            *sets("data.task=toy", "generate.n=1", "generate.max_tokens=2", "generate.temperature=1.0")],
           exit_code, *named)
    return out


def _nan(tensors):
    tensors["model.layers.0.self_attn.q_proj.weight"][0, 0] = float("nan")


def _drop(tensors):
    tensors.pop("model.layers.0.mlp.down_proj.weight")


def _extra(tensors):
    tensors["model.layers.9.mlp.up_proj.weight"] = tensors["model.layers.0.mlp.up_proj.weight"].clone()


@pytest.mark.parametrize("change, named", [
    (_nan, "tensor model.layers.0.self_attn.q_proj.weight holds NaN or inf (1 of"),
    (_drop, "tensor model.layers.0.mlp.down_proj.weight missing from the weights"),
    (_extra, "tensor model.layers.9.mlp.up_proj.weight in the weights but not in this model"),
], ids=["nan", "missing", "unexpected"])
def test_a_model_directory_with_bad_weights_is_refused_at_load(tmp_path, tiny_dir, change, named):
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    _rewrite_weights(model, change)
    out = _generate(tmp_path, model, 1, str(model), named)
    assert not out.exists() or out.read_text() == ""


def test_tied_weights_saved_once_are_not_missing(tmp_path, tiny_dir):
    """lm_head tied to embed_tokens (tie_word_embeddings), saved once: loads and samples."""
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (model / "config.json").write_text(json.dumps(config))
    _rewrite_weights(model, lambda t: t.pop("lm_head.weight"))
    out = _generate(tmp_path, model, 0)
    assert len(out.read_text().splitlines()) == 1


@pytest.mark.parametrize("cache", ["/proc/nope", "a-file"])
def test_a_cache_dir_that_cannot_be_created_names_the_key_and_path(tmp_path, monkeypatch, cache):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "t", "prompt": "1 2 3", "split": "train"}) + "\n")
    invoke(["generate", "--problems", str(problems), "--out", str(tmp_path / "s.jsonl"),
            *sets("model.name=tiny", f"model.cache_dir={cache}", "data.task=toy", "generate.n=1")], 2,
           f'model.cache_dir = "{cache}": cannot create that directory')


# -- 5. sizes no run can hold; problems per iteration beyond the training split ------------------------

@pytest.mark.parametrize("override, named", [
    ("es.population=1000000000", "--set es.population=1000000000: must be <= 65536"),
    ("es.problems_per_iteration=1000000000000000000", "--set es.problems_per_iteration=1000000000000000000: must be <= 1048576"),
    ("verify.workers=1000000", "--set verify.workers=1000000: must be <= 1024"),
    ("verify.kernel_check_workers=1000000", "--set verify.kernel_check_workers=1000000: must be <= 1024"),
])
def test_sizes_beyond_what_a_run_can_hold_are_config_errors(tmp_path, override, named):
    invoke(["verify", str(tmp_path / "proofs.jsonl"), *sets(override)], 2, named)


def test_problems_per_iteration_beyond_the_training_split_names_key_and_size(tmp_path, cache_dir):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "1 2 3", "split": split}) + "\n"
                                for i, split in enumerate(["train", "train", "train", "valid"])))
    run = tmp_path / "run"
    invoke(["train", "es", *_es_config(run, cache_dir, 1, problems_per_iteration=4),
            *sets(f"data.problems={problems}")], 2,
           "--set es.problems_per_iteration=4: more than the 3 problems of the training split "
           '(data.train_split = "train")', "set es.problems_per_iteration <= 3")
    assert not (run / "ledger.json").exists()


# -- 6. verify.allow_commands names commands the allowlist knows -----------------------------------

def test_an_unknown_allow_commands_entry_is_a_config_error_listing_the_accepted(tmp_path):
    invoke(["verify", str(tmp_path / "proofs.jsonl"), *sets('verify.allow_commands=["open", "frobnicate"]')], 2,
           '"frobnicate" is not a Lean command the verifier knows', "verify.allow_commands", "accepted:", "open,",
           "variable", "`@[`", "`#` command")
    invoke(["verify", str(tmp_path / "proofs.jsonl"), *sets('verify.allow_commands=["opn"]')], 2,
           "did you mean `open`?")


def test_known_allow_commands_entries_are_accepted():
    from prover_cli.config import load_config

    config = load_config(None, ['verify.allow_commands=["open", " namespace ", "#eval", "@[", "attribute", "def", '
                                '"elab_rules", "macro_foo", "set_option"]'])
    assert len(config.verify.allow_commands) == 9


# -- 7. run.dir must name a directory --------------------------------------------------------------

@pytest.mark.parametrize("value", ['""', '"   "'])
def test_an_empty_run_dir_is_a_config_error(tmp_path, cache_dir, monkeypatch, value):
    monkeypatch.chdir(tmp_path)
    invoke(["train", "es", *_es_config(tmp_path / "unused", cache_dir, 1), *sets(f"run.dir={value}")], 2,
           "--set run.dir=", "must name a directory")
    assert list(tmp_path.iterdir()) == []


def test_run_dir_dot_is_still_the_current_directory():
    from prover_cli.config import load_config

    assert str(load_config(None, ["run.dir=."]).run_dir) == "."
