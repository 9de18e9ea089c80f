# Two commands run everything on a fresh machine:
#   make smoke   set up, then run the smoke campaign on the embedded default profile
#   make test    set up, then run the whole test suite (real llama.cpp builds included)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: setup smoke test clean

$(BIN)/parity: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

setup: $(BIN)/parity
	@./scripts/ensure-system-deps

smoke: setup
	$(BIN)/parity campaign run campaigns/smoke.yaml

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
