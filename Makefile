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

.PHONY: install demo test docs bench clean

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
	$(BIN)/python -m pytest -q

docs: install
	$(BIN)/python -m prover_cli.docgen

bench: install
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) runs/demo .pytest_cache
