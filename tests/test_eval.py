"""prover eval: scoring verdicts through the CLI, and countdown end to end with the tiny model."""

import json

import pytest
from typer.testing import CliRunner

from prover_cli.cli import app
from prover_cli.config import config_from_dict
from prover_cli.tasks.datasets import prepare_data
from prover_cli.errors import ConfigError
from prover_cli.evaluate import PLOT_FILE, run_eval
from prover_cli.fsio.jsonl import load_jsonl_strict

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_verdicts(path):
    rows = []
    # p1 (test): 1 of 4 verified; p2 (test): none; p3 (valid): 3 of 4, no problem_id (grouped by id)
    for pid, split, statuses, with_pid in [
        ("p1", "test", ["rejected", "verified", "timeout", "rejected"], True),
        ("p2", "test", ["rejected", "error", "rejected", "rejected"], True),
        ("p3", "valid", ["verified", "verified", "rejected", "verified"], False),
    ]:
        for j, status in enumerate(statuses):
            row = {"id": f"{pid}/{j}", "split": split, "verdict": status}
            if with_pid:
                row["problem_id"] = pid
            rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_cli_eval_verdicts_json_and_plot(tmp_path):
    verdicts = write_verdicts(tmp_path / "verdicts.jsonl")
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,2,4", "--json",
                                 "--set", f"run.dir={run_dir}"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    # by hand: pass@1 = c/n per problem; pass@2 = 1 - C(n-c,2)/C(4,2) = 1 - C(n-c,2)/6
    assert payload["pass@1"] == pytest.approx((1 / 4 + 0 + 3 / 4) / 3)
    assert payload["pass@2"] == pytest.approx(((1 - 3 / 6) + 0 + 1.0) / 3)
    assert payload["pass@4"] == pytest.approx(2 / 3)
    assert payload["solved_any"] == pytest.approx(2 / 3)
    assert payload["problems"] == 3 and payload["samples"] == 12 and payload["verified"] == 4
    assert payload["per_split"]["test"]["pass@1"] == pytest.approx(1 / 8)
    assert payload["per_split"]["valid"]["pass@2"] == pytest.approx(1.0)
    assert "tables" not in payload
    plot = tmp_path / PLOT_FILE  # beside its input, never in a run directory
    assert payload["plot"] == str(plot) and plot.read_bytes()[:8] == PNG_MAGIC
    assert not run_dir.exists()
    elsewhere = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1", "--json",
                                    "--out", str(tmp_path / "plots")])
    assert elsewhere.exit_code == 0 and json.loads(elsewhere.stdout)["plot"] == str(tmp_path / "plots" / PLOT_FILE)

    human = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,2", "--set", f"run.dir={run_dir}"])
    assert human.exit_code == 0 and human.stdout == ""
    assert "test: 2 problems" in human.stderr and "valid: 1 problems" in human.stderr and "pass@2" in human.stderr


def test_cli_eval_k_above_the_samples_of_generate_names_generate_n(tmp_path):
    """README flow: `generate` (generate.n = 4 here) then `eval --verdicts … --k 1,8`: pass@8 is skipped, named."""
    verdicts = write_verdicts(tmp_path / "verdicts.jsonl")
    result = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,8", "--json"])
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["k"] == [1] and "pass@8" not in payload
    (note,) = payload["skipped_k"]
    assert note.startswith("pass@8: problem 'p1' has 4 sample(s)") and "generate.n=8" in note and "eval.n" not in note
    human = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "1,8"])
    assert "k not scored" in human.stderr
    nothing = runner.invoke(app, ["eval", "--verdicts", str(verdicts), "--k", "8", "--json"])
    assert nothing.exit_code == 1  # with --json a failure is one JSON object on stdout (README "Exit codes")
    failure = json.loads(nothing.stdout)
    assert (failure["ok"], failure["exit_code"], failure["kind"]) == (False, 1, "input") and "'p1'" in failure["error"]
    assert "Error:" in nothing.stderr and "'p1'" in nothing.stderr and "generate.n" in nothing.stderr


def test_plot_names_model_and_run_starts_at_zero_with_integer_ticks():
    from prover_cli.evaluate import ProblemScore, pass_at_k_figure

    problems = {f"p{i}": ProblemScore(n=32, c=i % 3, split="test") for i in range(6)}
    figure = pass_at_k_figure(problems, [1, 8, 32], title="pass@k of AI-MO/Kimina\nruns/x")
    (axis,) = figure.axes
    assert axis.get_title() == "pass@k of AI-MO/Kimina\nruns/x"
    assert axis.get_ylim() == (0.0, 1.0)
    labels = [t.get_text() for t in axis.get_xticklabels()]
    assert labels == ["1", "2", "4", "8", "16", "32"]


def test_eval_argument_conflicts(tmp_path):
    config = config_from_dict({"run": {"dir": str(tmp_path)}})
    with pytest.raises(ConfigError, match="--model and --ledger"):
        run_eval(config, model="x", ledger=tmp_path / "ledger.json")
    with pytest.raises(ConfigError, match="no --model or --ledger"):
        run_eval(config, model="x", verdicts=tmp_path / "v.jsonl")
    with pytest.raises(ConfigError, match="k = 64 exceeds eval.n = 32"):
        run_eval(config, k=[1, 64])


@pytest.mark.slow
def test_eval_countdown_end_to_end_with_the_tiny_model(tmp_path, tmp_path_factory):
    config = config_from_dict({
        "model": {"name": "tiny", "cache_dir": str(tmp_path_factory.mktemp("model-cache")), "device": "cpu"},
        "data": {"task": "countdown"}, "task": {"countdown": {"problems": 40}},
        "generate": {"max_tokens": 6, "temperature": 1.0, "top_p": 1.0},
        "eval": {"split": "valid", "n": 2, "k": [1, 2]},
        "run": {"dir": str(tmp_path / "run")},
    })
    prepare_data(config)
    valid = [p for p in load_jsonl_strict(config.problems_path) if p["split"] == "valid"]
    assert valid  # 40 problems, ~10% valid

    result = run_eval(config)
    assert result["problems"] == len(valid) and result["samples"] == 2 * len(valid)
    assert 0.0 <= result["pass@1"] <= result["pass@2"] <= 1.0
    assert result["solved_any"] == pytest.approx(result["pass@2"])  # every problem has n = 2 samples
    verdicts = load_jsonl_strict(result["verdicts"])
    assert len(verdicts) == 2 * len(valid)
    assert {v["verdict"] for v in verdicts} <= {"verified", "rejected"}
    # the verdicts agree with the countdown checker on the stored completions
    from prover_cli.tasks.countdown import completion_reward

    samples = {s["id"]: s for s in load_jsonl_strict(result["samples_path"])}
    for v in verdicts:
        sample = samples[v["id"]]
        assert (v["verdict"] == "verified") == (completion_reward(sample["completion"], sample) == 1.0)
    assert (tmp_path / "run" / "eval").is_dir()
    with open(result["plot"], "rb") as handle:
        assert handle.read(8) == PNG_MAGIC

    again = run_eval(config)  # resumes: nothing new generated, same scores
    assert again["samples_written"] == 0 and again["pass@1"] == result["pass@1"]
    other = run_eval(config_from_dict({**config.to_dict(), "generate": {**config.to_dict()["generate"], "seed": 9}}))
    assert other["eval_dir"] != result["eval_dir"]  # another setting never mixes into the same files


# -- where a generating eval writes ----------------------------------------------------------

def fake_generate(monkeypatch):
    """Stand-in for the sampler stage only: n countdown samples per problem, all wrong."""
    import prover_cli.generate as generate

    def generate_samples(config, problems, out, *, n, **kwargs):
        with out.open("a", encoding="utf-8") as handle:
            for p in problems:
                for j in range(n):
                    handle.write(json.dumps({"id": f"{p['id']}/{j}", "problem_id": p["id"], "split": p["split"],
                                             "numbers": p["numbers"], "target": p["target"],
                                             "completion": "no answer"}) + "\n")
        return {"samples_written": n * len(problems), "tokens_per_s": 0.0, "family": "plain"}

    monkeypatch.setattr(generate, "generate_samples", generate_samples)


def countdown_config(tmp_path, **eval_keys):
    problems = tmp_path / "data" / "problems.jsonl"
    config = config_from_dict({"data": {"task": "countdown", "problems": str(problems)}, "task": {"countdown": {"problems": 30}},
                               "eval": {"split": "train", "n": 2, "k": [1, 2], **eval_keys},
                               "run": {"dir": str(tmp_path / "runs" / "default")}})
    prepare_data(config)
    return config, problems


def test_generating_eval_writes_beside_the_problems_or_into_out(tmp_path, monkeypatch):
    fake_generate(monkeypatch)
    config, problems = countdown_config(tmp_path)
    result = run_eval(config)
    eval_dir = problems.parent / "eval"
    assert result["eval_dir"].startswith(str(eval_dir)) and (eval_dir / result["eval_dir"].rsplit("/", 1)[-1]).is_dir()
    assert not (tmp_path / "runs").exists()  # never ./runs/default
    assert result["plot"] == str(eval_dir / result["eval_dir"].rsplit("/", 1)[-1] / PLOT_FILE)

    out = tmp_path / "mine"
    chosen = run_eval(config, out_dir=out)
    assert chosen["eval_dir"] == str(out) and (out / "meta.json").is_file() and (out / PLOT_FILE).is_file()
    assert chosen["pass@1"] == result["pass@1"] == 0.0
    other = config_from_dict({**config.to_dict(), "generate": {**config.to_dict()["generate"], "temperature": 0.5}})
    with pytest.raises(ConfigError, match="holds the files of another eval setting"):
        run_eval(other, out_dir=out)


# -- --preset: the published protocols ------------------------------------------------------

@pytest.mark.parametrize("model,preset,family,n,temperature,max_tokens,published", [
    ("deepseek-ai/DeepSeek-Prover-V1.5-RL", "minif2f-test", "deepseek-v1.5-cot", 128, 1.0, 2048,
     {32: "50.0% ± 0.5%", 64: "50.7% ± 0.4%", 128: "51.6% ± 0.5%", 3200: "54.9% ± 0.7%"}),
    ("deepseek-ai/DeepSeek-Prover-V1.5-RL", "proofnet-test", "deepseek-v1.5-cot", 128, 1.0, 2048,
     {128: "18.2% ± 0.5%", 3200: "22.0% ± 0.5%"}),
    ("AI-MO/Kimina-Prover-Preview-Distill-1.5B", "minif2f-test", "kimina-preview", 32, 1.0, 32768,
     {1: "42.6%", 32: "56.2%", 1024: "61.9%"}),
    ("Goedel-LM/Goedel-Prover-SFT", "putnambench", "goedel-v1", 32, 1.0, 2048, {32: "6/644", 512: "7/644"}),
    ("Goedel-LM/Goedel-Prover-V2-8B", "minif2f-test", "goedel-v2", 32, 1.0, 32768, {32: "84.6%"}),
    ("Goedel-LM/Goedel-Prover-V2-8B", "proofnet-test", "goedel-v2", 32, 1.0, 32768, {}),
])
def test_preset_applies_the_families_published_protocol(tmp_path, model, preset, family, n, temperature,
                                                        max_tokens, published):
    from prover_cli.evaluate import apply_preset

    config = config_from_dict({"model": {"name": model}, "run": {"dir": str(tmp_path)}})
    applied = apply_preset(config, preset)
    c = applied.config
    assert (c.model.family, c.eval.split, c.eval.n) == (family, "test", n)
    assert (c.generate.temperature, c.generate.top_p, c.generate.max_tokens) == (temperature, 0.95, max_tokens)
    assert max(c.eval.k) == n and 1 in c.eval.k and all(k <= n for k in c.eval.k)
    assert {p.k: p.figure for p in applied.published} == published
    assert config.generate.max_tokens == 8192  # the caller's config is not changed


def test_eval_preset_dry_run_on_modal_gives_the_plan_and_its_cost(tmp_path):
    rows = [{"id": f"p{i}", "formal_statement": f"theorem p{i} : {i} = {i} := by\n", "header": "import Mathlib\n",
             "split": "test", "source": "x"} for i in range(10)]
    problems = tmp_path / "minif2f.jsonl"
    problems.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = runner.invoke(app, ["eval", "--preset", "minif2f-test", "--backend", "modal", "--dry-run", "--json",
                                 "--set", "model.name=Goedel-LM/Goedel-Prover-SFT",
                                 "--set", f"eval.problems={problems}", "--set", "generate.batch_size=4",
                                 "--set", "modal.est_decode_tokens_per_s=64", "--set", "modal.gpu_price_per_hour=4",
                                 "--set", "modal.verify_batch_size=100", "--set", "modal.est_header_s=60",
                                 "--set", "modal.est_verify_s_per_proof=5", "--set", "verify.workers=4",
                                 "--set", "modal.verify_cpus=8", "--set", "modal.cpu_price_per_core_hour=0.05",
                                 "--set", "modal.gpus_per_container=1"])
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True and plan["family"] == "goedel-v1" and plan["n"] == 32 and plan["problems"] == 10
    assert {"k": 32, "figure": "57.6%", "source": "Goedel-LM/Goedel-Prover README"} in plan["published"]
    # by hand: 3 calls (10 problems / 4) x 2048 tokens / 64 tokens/s = 96 s -> 0.08 GPU-hours x 4 USD;
    # 320 proofs -> 4 batches x (60 + ceil(100 / 4) x 5 = 185 s) x 8 cores = 1.644 core-hours x 0.05 USD
    assert plan["samples"] == 320
    assert plan["est_gpu_hours"] == pytest.approx(3 * 32 / 3600, abs=1e-3)
    assert plan["est_cpu_core_hours"] == pytest.approx(4 * 185 * 8 / 3600, abs=1e-3)
    assert plan["est_usd"] == pytest.approx(3 * 32 / 3600 * 4 + 4 * 185 * 8 / 3600 * 0.05, abs=0.01)
    assert not (tmp_path / "eval").exists()  # nothing ran


def test_preset_result_prints_the_published_figure_beside_ours(tmp_path, monkeypatch):
    from prover_cli.evaluate import _published_rows, apply_preset

    config = config_from_dict({"model": {"name": "deepseek-ai/DeepSeek-Prover-V2-7B"}, "run": {"dir": str(tmp_path)}})
    applied = apply_preset(config, "putnambench")
    rows = _published_rows(applied, {"k": [1, 8, 32], "pass@1": 0.01, "pass@8": 0.02, "pass@32": 0.03})
    assert rows[0] == [1, "1.0%", "not published", "-"]
    assert [32, "3.0%", "9/658", "DeepSeek-Prover-V2 paper (arXiv:2504.21801), Table 4"] in rows
    assert [1024, "not run", "11/658", "DeepSeek-Prover-V2 paper (arXiv:2504.21801), Table 4"] in rows
    with pytest.raises(ConfigError, match="--preset 'minif2f'"):
        apply_preset(config, "minif2f")
    with pytest.raises(ConfigError, match="--preset sets how samples are generated"):
        run_eval(config, preset="minif2f-test", verdicts=tmp_path / "v.jsonl")


def test_preset_with_k_samples_exactly_the_largest_k(tmp_path):
    from prover_cli.evaluate import apply_preset

    config = config_from_dict({"model": {"name": "deepseek-ai/DeepSeek-Prover-V1.5-RL"}, "run": {"dir": str(tmp_path)}})
    applied = apply_preset(config, "minif2f-test", ks=[1, 32])
    assert (applied.config.eval.n, applied.config.eval.k) == (32, [1, 32])
    assert applied.config.model.family == "deepseek-v1.5-cot"
