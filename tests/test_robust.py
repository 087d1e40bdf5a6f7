"""Every command as careful as `prover verify` (issue 25): the right verdict wins, faults and bad
input are named (never "unexpected"), one bad line costs one line. Signals: tests/test_signals.py."""

from __future__ import annotations

import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REPO
from prover_cli.cli import app
from test_verify_file import proof, write_config, write_proofs

runner = CliRunner()


def one_line(text: str) -> str:
    """Rich wraps long lines at the terminal width: compare the words."""
    return " ".join(text.split())


# -- 1. eval scores the verdict that is current: the last line of an id ------------------------------

def test_eval_scores_the_last_verdict_of_an_id_as_verify_reports_it(tmp_path):
    """Verify 20 proofs, verify them again into the same --out under a stricter policy: verify
    appends 20 rechecked lines and reports 0 verified; eval --verdicts must say the same."""
    proofs = write_proofs(tmp_path / "samples.jsonl",
                          [proof(f"p{i // 2}/{i % 2}", problem_id=f"p{i // 2}") for i in range(20)])
    config = write_config(tmp_path / "c.toml")
    out = tmp_path / "verdicts.jsonl"
    first = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--config", str(config), "--json"])
    assert first.exit_code == 0 and json.loads(first.stdout)["verified"] == 20, first.stderr
    strict = runner.invoke(app, ["verify", str(proofs), "--out", str(out), "--config", str(config), "--json",
                                 "--set", 'verify.allowed_axioms=["propext"]'])
    summary = json.loads(strict.stdout)
    assert summary["verified"] == 0 and summary["rechecked"] == 20, strict.stderr
    assert len(out.read_text().splitlines()) == 40   # both verdicts of every id are in the file

    scored = runner.invoke(app, ["eval", "--verdicts", str(out), "--k", "1,2", "--json", "--set", "eval.plot=false"])
    assert scored.exit_code == 0, scored.stderr
    result = json.loads(scored.stdout)
    assert result["verified"] == 0 and result["pass@1"] == 0.0 and result["pass@2"] == 0.0
    assert result["samples"] == 20 and result["superseded_lines"] == 20


# -- 2. final/ is the newest complete model, whatever was killed when; a finished run rewrites nothing -

@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "tiny-model-cache"  # shared with the other modules


def files_with_identity(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    """name -> (inode, mtime, bytes): a rewrite with the same bytes still shows."""
    return {str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_an_extended_grpo_run_killed_before_its_final_save_resumes_to_the_newest_checkpoint(tmp_path, cache_dir):
    import shutil

    from prover_cli.grpo import train as grpo
    from prover_cli.config import load_config
    from prover_cli.policy.model_dir import same_weights

    run = tmp_path / "run"

    def config(steps):
        return load_config(REPO / "tests" / "configs" / "tiny.toml",
                           [f"run.dir={run}", f"model.cache_dir={cache_dir}", "grpo.max_completion_length=8",
                            "data.task=toy", f"grpo.steps={steps}", "grpo.save_every=1"])   # toy: a gradient at once

    grpo.train_grpo(config(1))
    shutil.copytree(run / "final", tmp_path / "final-at-1")
    grpo.train_grpo(config(2), resume=True)
    assert same_weights(run / "final", run / "checkpoints" / "checkpoint-2")
    # the state a kill -9 leaves once checkpoint-2 is complete but before the final save
    shutil.rmtree(run / "final")
    shutil.copytree(tmp_path / "final-at-1", run / "final")
    assert not same_weights(run / "final", run / "checkpoints" / "checkpoint-2")

    result = grpo.train_grpo(config(2), resume=True)
    assert result["complete"] is True
    assert same_weights(run / "final", run / "checkpoints" / "checkpoint-2")
    settled = files_with_identity(run / "final")
    grpo.train_grpo(config(2), resume=True)
    assert files_with_identity(run / "final") == settled   # a finished run's final/ is not rewritten


@pytest.mark.slow
def test_a_resumed_finished_es_run_rewrites_nothing_in_final_and_mends_a_stale_one(tmp_path, cache_dir):
    import shutil

    from prover_cli.config import config_from_dict
    from prover_cli.es.train import train_es
    from prover_cli.policy.model_dir import same_weights

    run = tmp_path / "run"

    def config(iterations):
        return config_from_dict({
            "model": {"name": "tiny", "cache_dir": str(cache_dir), "device": "cpu", "dtype": "float32"},
            "data": {"task": "toy"}, "generate": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 4, "n": 1},
            "es": {"population": 2, "sigma": 0.01, "learning_rate": 0.01, "iterations": iterations,
                   "problems_per_iteration": 2}, "run": {"dir": str(run), "seed": 1}})

    train_es(config(2))
    shutil.copytree(run / "final", tmp_path / "final-at-2")
    train_es(config(3), resume=True)
    shutil.copytree(run / "final", tmp_path / "final-at-3")
    settled = files_with_identity(run / "final")
    train_es(config(3), resume=True)
    assert files_with_identity(run / "final") == settled   # tokenizer.json included, byte for byte

    shutil.rmtree(run / "final")   # a kill after the ledger reached 3 but before the final save
    shutil.copytree(tmp_path / "final-at-2", run / "final")
    train_es(config(3), resume=True)
    assert same_weights(run / "final", tmp_path / "final-at-3")
    # written by a process that sampled nothing, final/ is still byte for byte what the run wrote
    assert {k: v[2] for k, v in files_with_identity(run / "final").items()} == \
        {k: v[2] for k, v in files_with_identity(tmp_path / "final-at-3").items()}


# -- a REPL killed from outside during its header: one retry, as during a proof ----------------------

@pytest.mark.parametrize("kills", [1, 2])
def test_a_repl_killed_during_its_header_is_retried_once(verify_config, tmp_path, kills):
    import threading
    import time

    from prover_cli.errors import BackendError
    from prover_cli.verify import verify_records
    from test_verify_robust import log_entries

    log = tmp_path / "repl.log"
    killed: list[int] = []
    stop = threading.Event()

    def kill_on_header() -> None:
        while not stop.is_set() and len(killed) < kills:
            for entry in log_entries(log):
                if entry.get("kind") == "header" and entry["pid"] not in killed:
                    os.kill(entry["pid"], signal.SIGKILL)
                    killed.append(entry["pid"])
                    break
            time.sleep(0.01)

    threading.Thread(target=kill_on_header, daemon=True).start()
    config = verify_config(workers=1, timeout_s=20.0, repl_args=["--log", str(log), "--header-delay", "0.5"])
    try:
        if kills == 1:
            [verdict] = verify_records([proof("p")], config)
            assert verdict["verdict"] == "verified", verdict["reason"]
        else:   # killed again in the fresh REPL's header: the machine is at fault, no verdict is written
            with pytest.raises(BackendError, match="killed by SIGKILL while running the header"):
                verify_records([proof("p")], config)
    finally:
        stop.set()
    assert len(killed) == kills
    assert len([e for e in log_entries(log) if e.get("event") == "start"]) == 2


# -- the REPL's grandchild dies with its wrapper ----------------------------------------------------

def test_the_repl_under_lake_dies_when_its_wrapper_is_killed(tmp_path):
    """`lake env repl`: the wrapper's child (lake, here the stand-in's --spawn-child parent) has
    PR_SET_PDEATHSIG, the REPL under it has not; the wrapper's sentinel kills their group."""
    import time

    from conftest import fake_repl_command
    from prover_cli.verify.lean.transport import LocalTransport
    from test_verify_pool import pid_alive
    from test_verify_robust import log_entries

    log = tmp_path / "repl.log"
    transport = LocalTransport(fake_repl_command("--spawn-child", "--log", str(log)))
    transport.start()
    try:
        deadline = time.monotonic() + 30
        while not [e for e in log_entries(log) if e.get("event") == "start"]:
            assert time.monotonic() < deadline, "the REPL never started"
            time.sleep(0.02)
        [repl] = [e["pid"] for e in log_entries(log) if e.get("event") == "start"]
        [spawner] = [e["pid"] for e in log_entries(log) if e.get("event") == "spawned"]
        os.kill(transport.pid, signal.SIGKILL)   # the wrapper alone
        deadline = time.monotonic() + 10
        while (pid_alive(repl) or pid_alive(spawner)) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not pid_alive(spawner) and not pid_alive(repl), "the REPL outlived its wrapper"
    finally:
        transport.kill()


# -- 4, 5, 6: no bad input and no machine fault reads as an internal bug ("unexpected") ----------------
#
# Each case is run through the `prover` command and must exit with the documented code, name what
# is at fault (file, line, key, field) and never print "unexpected" (our word for a bug).

def invoke(args: list[str], exit_code: int, *named: str):
    result = runner.invoke(app, args)
    text = one_line(result.stderr)
    assert "unexpected" not in text and "Traceback" not in text, text
    assert result.exit_code == exit_code, text
    for word in named:
        assert word in text, (word, text)
    return result


def sets(*overrides: str) -> list[str]:
    return [part for override in overrides for part in ("--set", override)]


CONFIG_CASES = [
    (["es.sigma=1e300"], "es.sigma=1e300: must be <= 1000.0"),
    (["es.learning_rate=1e39"], "es.learning_rate=1e39: must be <= 1000.0"),
    (["grpo.learning_rate=1e39"], "grpo.learning_rate=1e39: must be <= 1.0"),
    (["es.population=1000000000"], "es.population=1000000000: must be <= 65536"),
    (["es.problems_per_iteration=1000000000000000000"], "es.problems_per_iteration=1000000000000000000: must be <="),
    (["verify.workers=1000000"], "verify.workers=1000000: must be <= 1024"),
    (['verify.allow_commands=["frobnicate"]'], '"frobnicate" is not a Lean command the verifier knows'),
    (['run.dir=""'], "run.dir=\"\": must name a directory"),
    (["es.sigma=1e-300"], "es.sigma=1e-300: must be >= 1e-30"),
    (["verify.memory_limit_gb=1e300"], "verify.memory_limit_gb=1e300: must be <="),
    (["verify.timeout_s=1e300"], "verify.timeout_s=1e300: must be <="),
    (["io.max_line_bytes=100000000000000000000"], "io.max_line_bytes=100000000000000000000: must fit in a 64-bit"),
    (["io.max_line_bytes=9223372036854775807"], "io.max_line_bytes=9223372036854775807: must be <="),
    (["io.max_line_bytes=1e20"], "io.max_line_bytes=1e20: expected an integer"),
    (["run.seed=4294967296"], "run.seed=4294967296: must be <= 4294967295"),
    (["generate.temperature=0", "generate.n=4"], "--set generate.n=4: more than one sample per problem with greedy"),
    (["run.eval_n=2"], "run.eval_n=2: more than one sample per problem with greedy decoding (run.eval_temperature = 0.0"),
    (["generate.temperature=0", "generate.n=1", "es.samples_per_problem=3"], "es.samples_per_problem=3: more than one"),
]


@pytest.mark.parametrize("overrides, named", CONFIG_CASES, ids=[" ".join(c[0]) for c in CONFIG_CASES])
def test_config_values_a_library_would_overflow_or_refuse_exit_2(tmp_path, overrides, named):
    invoke(["verify", str(tmp_path / "proofs.jsonl"), *sets(*overrides)], 2, named)


def test_eval_with_greedy_decoding_and_several_samples_is_refused(tmp_path):
    invoke(["eval", *sets("generate.temperature=0", "generate.n=1", "eval.n=4", "eval.k=[1]")], 2,
           "eval.n=4", "(greedy)")


def _ledger(path: Path) -> dict:
    from prover_cli.es.ledger import make_record, write_ledger
    from test_es_ledger import header

    write_ledger(path, header(population=4), [make_record(i, [".5", "0", ".25", "1"], "ab" * 8, False)
                                              for i in (1, 2)])
    return json.loads(path.read_text())


LEDGER_CASES = [
    ("1-character fingerprint", lambda d: d["iterations"][0].__setitem__(0, "a"), "fingerprint 'a' has 1 characters"),
    ("doubled rewards", lambda d: d["iterations"][1].__setitem__(1, d["iterations"][1][1] * 2),
     "iteration 2: reward 2048 outside [0, 1]"),
    ("padded rewards", lambda d: d["iterations"][1].__setitem__(1, "0" + d["iterations"][1][1].replace("1f4", "01f4", 1)[:-1]),
     "iteration 2: rewards"),
    ("run_seed as a string", lambda d: d.update(run_seed="1"), '`run_seed` = "1": must be a non-negative integer'),
    ("es not an object", lambda d: d.update(es=[4]), "`es` = list: must be an object"),
    ("population a string", lambda d: d["es"].update(population="4"), '`es.population` = "4"'),
    ("sigma missing", lambda d: d["es"].pop("sigma"), "lacks `es.sigma`"),
    ("fitness shaping unknown", lambda d: d["es"].update(fitness_shaping=7), "`es.fitness_shaping` = 7"),
    ("odd antithetic population", lambda d: d["es"].update(population=3), "must be even"),
    ("base model a list", lambda d: d.update(base_model=["tiny"]), "`base_model` = list"),
    ("base sha256 short", lambda d: d["base_model"].update(sha256="ab"), "`base_model.sha256`"),
    ("snapshot not a sha256", lambda d: d["iterations"][0].append("zz"), "snapshot 'zz' is not a sha256"),
    ("record a number", lambda d: d["iterations"].__setitem__(0, 5), "iteration 1: expected [fingerprint, rewards]"),
    ("nested too deeply", lambda d: d.update(deep=True), "nested too deeply"),
    ("denominator a float", lambda d: d.update(reward_denominator=1000.0), "`reward_denominator` = 1000.0"),
    ("learning rate 1e39", lambda d: d["es"].update(learning_rate=1e39), "`es.learning_rate` = 1e+39: must be <= 1000.0"),
    ("rewards 100,000 characters", lambda d: d["iterations"][1].__setitem__(1, "1" * 100_000),
     "iteration 2: rewards (field 2) has 100,000 characters"),
]


@pytest.mark.parametrize("mutate, named", [c[1:] for c in LEDGER_CASES], ids=[c[0] for c in LEDGER_CASES])
def test_a_malformed_ledger_names_its_file_and_field(tmp_path, mutate, named):
    path = tmp_path / "ledger.json"
    data = _ledger(path)
    mutate(data)
    text = json.dumps(data) if "deep" not in data else '{"format": "prover-es-ledger", "x": ' \
        + "[" * 100000 + "]" * 100000 + "}"
    path.write_text(text)
    invoke(["replay-seeds", str(path), "--out", str(tmp_path / "out")], 1, str(path), named)


@pytest.fixture(scope="module")
def tiny_dir(cache_dir):
    from prover_cli.policy.built_models import resolve_model_path

    return Path(resolve_model_path("tiny", cache_dir, 0))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


MODEL_DIR_CASES = [
    ("config.json missing", lambda d: (d / "config.json").unlink(), "config.json: missing"),
    ("config.json empty", lambda d: (d / "config.json").write_text(""), "config.json:1: not valid JSON"),
    ("config.json not JSON", lambda d: (d / "config.json").write_text("{model_type"), "config.json:1: not valid JSON"),
    ("config.json without model_type", lambda d: (d / "config.json").write_text("{}"), "`model_type` is missing"),
    ("weights missing", lambda d: (d / "model.safetensors").unlink(), "no weights"),
    ("weights empty", lambda d: (d / "model.safetensors").write_bytes(b""), "model.safetensors: not a safetensors file"),
    ("weights cut short", lambda d: _cut(d / "model.safetensors"), "lie outside the file's"),
    ("weights garbage", lambda d: (d / "model.safetensors").write_bytes(b"\xff" * 64), "not a safetensors file"),
    ("tokenizer.json cut short", lambda d: _cut(d / "tokenizer.json"), "tokenizer.json:"),
    ("tokenizer missing", lambda d: (d / "tokenizer.json").unlink(), "no tokenizer"),
]


@pytest.mark.parametrize("damage, named", [c[1:] for c in MODEL_DIR_CASES], ids=[c[0] for c in MODEL_DIR_CASES])
def test_a_corrupt_model_directory_names_the_file(tmp_path, tiny_dir, damage, named):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    damage(model)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "t", "prompt": "1 2 3", "split": "train"}) + "\n")
    invoke(["generate", "--problems", str(problems), "--out", str(tmp_path / "s.jsonl"), "--model", str(model),
            *sets("data.task=toy", "generate.n=1", "generate.max_tokens=2")], 1, named)
    assert not (tmp_path / "s.jsonl").exists() or (tmp_path / "s.jsonl").read_text() == ""


# A run that ends in seconds where a defect is not caught (so a test fails rather than trains for long).
TINY_RUN = ("generate.max_tokens=2", "es.population=2", "es.iterations=1", "es.problems_per_iteration=1",
            "grpo.steps=1", "grpo.num_generations=2", "grpo.per_device_train_batch_size=2",
            "grpo.max_completion_length=2", "grpo.save_every=0")


@pytest.mark.parametrize("task", ["countdown", "toy", "lean"])
@pytest.mark.parametrize("trainer", ["es", "grpo"])
def test_a_data_problems_file_that_does_not_exist_is_an_error_for_every_task(tmp_path, cache_dir, task, trainer):
    missing = tmp_path / "typo" / "problems.jsonl"
    invoke(["train", trainer, *sets(f"data.task={task}", f"data.problems={missing}", f"run.dir={tmp_path / 'run'}",
                                    "model.name=tiny", f"model.cache_dir={cache_dir}", *TINY_RUN)],
           1, f"{missing}: problems file not found")
    assert not (tmp_path / "run" / "ledger.json").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


# -- 5. one bad line costs one line --------------------------------------------------------------------

def test_generate_skips_a_wrong_typed_or_incomplete_problem_and_samples_the_rest(tmp_path, cache_dir):
    problems = tmp_path / "problems.jsonl"
    problems.write_text("\n".join([
        json.dumps({"id": "good", "prompt": "Continue: 1 2", "split": "train"}),
        json.dumps({"id": "no-prompt", "split": "train"}),
        json.dumps({"id": "wrong-type", "prompt": ["1", "2"], "split": "train"}),
        "{not json",
        json.dumps({"id": "also-good", "prompt": "Continue: 3 4", "split": "train"}),
    ]) + "\n")
    out = tmp_path / "samples.jsonl"
    result = invoke(["generate", "--problems", str(problems), "--out", str(out), "--json",
                     *sets("data.task=toy", "model.name=tiny", f"model.cache_dir={cache_dir}", "generate.n=1",
                           "generate.max_tokens=2")], 1,
                    f"{problems}:2: problem 'no-prompt': lacks `prompt`", f"{problems}:3: problem 'wrong-type': `prompt` is list")
    summary = json.loads(result.stdout)
    assert [m["line"] for m in summary["malformed"]] == [2, 3, 4]
    assert [json.loads(line)["problem_id"] for line in out.read_text().splitlines()] == ["good", "also-good"]


def test_eval_scores_the_good_verdict_lines_and_names_the_bad_ones(tmp_path):
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_bytes(b"\n".join([
        json.dumps({"id": "a/0", "verdict": "verified"}).encode(),
        b"{torn",
        json.dumps({"id": "a/1"}).encode(),
        json.dumps({"id": "b/0", "verdict": 1}).encode(),
        json.dumps({"verdict": "verified"}).encode(),
        b'{"id": "b/1", "verdict": "verified", "x": "\xff"}',
        json.dumps({"id": "b/0", "verdict": "rejected"}).encode(),
    ]) + b"\n")
    result = invoke(["eval", "--verdicts", str(verdicts), "--k", "1", "--json", *sets("eval.plot=false")], 1,
                    f"{verdicts}:2: not valid JSON", f"{verdicts}:3: no `verdict`")
    summary = json.loads(result.stdout)
    assert [m["line"] for m in summary["malformed"]] == [2, 3, 4, 5, 6]
    assert summary["problems"] == 2 and summary["samples"] == 2 and summary["verified"] == 1


def test_prepare_data_files_a_bad_byte_under_utf8_not_under_json_object(tmp_path):
    source = tmp_path / "rows.jsonl"
    good = {"name": "t1", "split": "test", "formal_statement": "theorem t1 : 1 = 1 := by\n", "header": ""}
    source.write_bytes(json.dumps(good).encode() + b'\n{"name": "t2", "x": "\xff"}\n[1]\n')
    # malformed lines: named, the rest written, exit 1 (README "Exit codes"), as verify and eval
    result = invoke(["prepare-data", str(source), "--out", str(tmp_path / "p.jsonl"), "--json"], 1,
                    f"{source}:2: not valid UTF-8", f"{source}:3: expected a JSON object")
    summary = json.loads(result.stdout)
    assert summary["dropped_by_reason"] == {"not valid UTF-8": 1, "not a JSON object": 1}
    assert summary["ok"] is False and [m["line"] for m in summary["malformed"]] == [2, 3]
    assert [p["id"] for p in map(json.loads, (tmp_path / "p.jsonl").read_text().splitlines())] == ["t1"]


# -- 4. a full disk while saving a model (safetensors) or a checkpoint (torch.save) --------------------

def _run_with_file_size_limit(limit_bytes: int, args: list[str]) -> subprocess.CompletedProcess:
    """`prover ARGS` in a process that may not write files past `limit_bytes` (`ulimit -f`): the
    kernel refuses the write that crosses it (EFBIG), as a full disk refuses every write (ENOSPC)."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run([sys.executable, "-m", "prover_cli", *args], cwd=REPO, capture_output=True, text=True,
                          preexec_fn=limit, timeout=300, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.slow
def test_a_model_write_the_machine_refuses_is_named_with_path_errno_and_the_resume_command(tmp_path, tiny_dir):
    """`train es` saving final/ (safetensors) where no more than 300 kB may be written per file."""
    args = ["train", "es", *sets("data.task=toy", "model.name=tiny", f"model.cache_dir={tiny_dir.parent}",
                                 f"run.dir={tmp_path / 'run'}", *TINY_RUN)]
    failed = _run_with_file_size_limit(300_000, args)
    text = one_line(failed.stderr)
    assert failed.returncode == 1 and "unexpected" not in text, text
    assert "final.tmp/model.safetensors: cannot write: File too large [EFBIG]" in text, text
    assert f"resume with: {shlex.join(['prover', *args, '--resume'])}" in text


def test_torch_save_and_safetensors_write_failures_read_as_machine_faults(tmp_path):
    """What a full disk looks like through torch.save (Trainer checkpoints: the errno is lost) and
    safetensors (the errno in the text): a MachineError naming the file, never a bug."""
    import torch
    from safetensors.torch import save_file

    from prover_cli.errors import write_fault_from

    tensors = {"w": torch.zeros(100_000)}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for name, save in (("optimizer.pt", lambda path: torch.save(tensors, path)),
                       ("model.safetensors", lambda path: save_file(tensors, str(path)))):
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))   # Python ignores SIGXFSZ
        try:
            with pytest.raises(Exception) as caught:
                save(tmp_path / name)
            fault = write_fault_from(caught.value)   # as the cli does: while the machine still refuses
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert not isinstance(caught.value, OSError)   # the libraries' own exception types
        assert fault is not None and str(fault) == f"{tmp_path / name}: cannot write: File too large [EFBIG]"


def test_a_damaged_checkpoint_to_resume_from_is_named(tmp_path):
    """`--resume` from a checkpoint whose weights or optimizer state were cut: the file is named."""
    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":")
    args = ["train", "grpo", "--resume", *sets(f"run.dir={tmp_path / 'run'}", "data.task=toy", *TINY_RUN,
                                               "grpo.steps=5")]
    invoke(args, 1, f"{checkpoint / 'model.safetensors'}: not a safetensors file")
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "optimizer.pt").write_bytes(b"PK\x03\x04 cut short")
    invoke(args, 1, f"{checkpoint / 'optimizer.pt'}: not a readable torch.save file")


def test_replay_seeds_out_that_is_a_file_is_named(tmp_path):
    (tmp_path / "out").write_text("x")
    _ledger(tmp_path / "ledger.json")
    invoke(["replay-seeds", str(tmp_path / "ledger.json"), "--out", str(tmp_path / "out")], 1, "is a file")


def test_small_files_are_replaced_whole_so_a_failed_write_leaves_the_old_one(tmp_path):
    """The run's config.toml (what a resume compares with), eval's meta.json, wandb-run-id and
    report.json are written aside and renamed: a write the machine refuses midway leaves the
    previous file whole (it used to leave it cut, and the resume then refused a broken TOML)."""
    from prover_cli.config import load_config
    from prover_cli.errors import MachineError
    from prover_cli.training.metrics import write_resolved_config

    path = write_resolved_config(load_config(None, [f"run.dir={tmp_path}"]))
    before = path.read_text()
    longer = load_config(None, [f"run.dir={tmp_path}", "verify.header=" + "x" * 20_000])
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before.encode()) + 1000, hard))   # Python ignores SIGXFSZ
    try:
        with pytest.raises(MachineError, match=r"config.toml.tmp: cannot write: File too large \[EFBIG\]"):
            write_resolved_config(longer)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert path.read_text() == before and not path.with_name("config.toml.tmp").exists()
