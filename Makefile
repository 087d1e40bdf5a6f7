# Two commands a newcomer runs:  `make demo` (main job on the embedded default) and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test docs bench clean

$(BIN)/prover: pyproject.toml
	$(PY) -m venv $(VENV)
	# CPU torch first, so nothing pulls a CUDA build of several GB.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/prover

install: $(BIN)/prover

demo: install
	PATH=$(CURDIR)/$(BIN):$$PATH bash scripts/demo.sh

test: install
	$(BIN)/python -m pytest -q

docs: install
	$(BIN)/python -m prover_cli.docgen

bench: install
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) runs/demo .pytest_cache
