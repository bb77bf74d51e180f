# Set-up and checks.  `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
# python3.12 when it runs (it gets the newest jax), else python3; support 3.11+.
PYTHON ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install bytecode demo test test-full lint bench fuzz clean

install: bytecode

# An editable install leaves the tool's modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set every command would compile them again (~0.09 s of a
# 0.3 s start-up): compile them as pip does for an ordinary install.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q jaxprtool

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,zoo,plot]'
	$(BIN)/python -m pip install -q -e '.[fast]' || echo "lark-cython does not install here: the pure-Python parser is used"
	touch $(STAMP)

demo: install
	$(BIN)/jaxprtool fmt samples/mlp.jaxpr
	$(BIN)/jaxprtool check samples/mlp.jaxpr && echo "check: ok"
	$(BIN)/jaxprtool grad --argnums 0,1,2,3 samples/mlp.jaxpr
	$(BIN)/jaxprtool grad --argnums 0 samples/mlp.jaxpr | $(BIN)/jaxprtool run - --random 0
	$(BIN)/jaxprtool check-grad samples/mlp.jaxpr

lint: install
	$(BIN)/ruff check jaxprtool tests bench
	$(BIN)/ruff format --check jaxprtool tests bench

# the default run leaves out what is marked slow (pyproject's addopts: -m 'not slow'), and
# lists its ten slowest tests
test: install lint
	$(BIN)/python -m pytest -n 2 --durations=10 tests

test-full: install
	$(BIN)/python -m pytest -n 2 -m '' tests

bench: install
	$(BIN)/python bench/run_all.py

# the long fuzzing run: FUZZ_EXAMPLES cases on FUZZ_WORKERS processes (tests/fuzzgen.py);
# FUZZ_SAVE=DIR keeps the failing inputs, FUZZ_SEED picks another campaign
FUZZ_EXAMPLES ?= 100000
FUZZ_WORKERS ?= 2
fuzz: install
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_WORKERS=$(FUZZ_WORKERS) FUZZ_HASHSEED_EVERY=1000 \
		$(BIN)/python -m pytest -s -m "" -p no:xdist "tests/test_fuzz.py::test_fuzz_campaign[full]"

clean:
	rm -rf $(VENV) build dist *.egg-info
