# Two commands run everything on a fresh machine:
#   make smoke   set up, then run the smoke campaign on the embedded default profile
#   make test    set up, then run the whole test suite (real llama.cpp builds included)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# make test runs the suite in PYTEST_WORKERS processes (pytest-xdist; 4 on the 2-core box, as tests
# wait on servers, Slurm and locks: its CPU sat 25 % idle with 2 workers, 14 % with 3 and 8 % with 4,
# 783 s -> 743 s from 3 to 4 back to back), one test file per worker at a time, the longest files
# first (tests/conftest.py LONGEST_FIRST); PYTEST_WORKERS=0: one process
PYTEST_WORKERS ?= 4

.PHONY: setup smoke test clean

$(BIN)/parity: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

# compileall: every parity start (the suite makes ~650) imports ~100 modules; with
# PYTHONDONTWRITEBYTECODE set and no .pyc each start compiles them again (~0.08 CPU-s a start)
setup: $(BIN)/parity
	@./scripts/ensure-system-deps
	@$(BIN)/python -m compileall -q parity tests

smoke: setup
	$(BIN)/parity campaign run campaigns/smoke.yaml

# then the tests marked `quiet`, one at a time (scripts/run-tests)
test: setup
	./scripts/run-tests $(BIN)/python $(PYTEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache
