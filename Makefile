# Set-up and checks.  `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
# python3.12 when it runs (it gets the newest jax), else python3; support 3.11+.
PYTHON ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 python3; do \
	$$p -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
# the tool and JAX (all `make demo` needs); the test tools, the zoo's libraries and
# matplotlib (memory --plot) on top
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: install install-test browser bytecode demo test test-full lint bench fuzz clean tpu-wheels

install: bytecode

install-test: install $(TEST_STAMP)

# An editable install leaves the tool's modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set every command would compile them again (~0.09 s of a
# 0.3 s start-up): compile them as pip does for an ordinary install.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q jaxprtool

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[jax]'
	@# the `fast` extra, from a wheel only (no compiler run, no build log where there is none)
	$(BIN)/python -m pip install -q --only-binary lark-cython -e '.[fast]' 2>/dev/null \
		|| echo "lark-cython has no wheel here: the pure-Python parser is used"
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,zoo,plot]'
	touch $(TEST_STAMP)

demo: install
	$(BIN)/jaxprtool fmt samples/mlp.jaxpr
	$(BIN)/jaxprtool check samples/mlp.jaxpr && echo "check: ok"
	$(BIN)/jaxprtool grad --argnums 0,1,2,3 samples/mlp.jaxpr
	$(BIN)/jaxprtool grad --argnums 0 samples/mlp.jaxpr | $(BIN)/jaxprtool run - --random 0
	$(BIN)/jaxprtool check-grad samples/mlp.jaxpr

lint: install-test
	$(BIN)/ruff check jaxprtool tests bench
	$(BIN)/ruff format --check jaxprtool tests bench

# the default run leaves out what is marked slow (pyproject's addopts: -m 'not slow'), and
# lists its ten slowest tests
test: install-test lint
	$(BIN)/python -m pytest -n 2 --durations=10 tests

# the browser checks of tests/test_browser.py: selenium, and Debian's chromium, its driver and
# Graphviz where this user may install them (else those tests are skipped, saying why)
browser: install-test
	$(BIN)/python -m pip install -q -e '.[browser]'
	@command -v chromedriver >/dev/null && command -v dot >/dev/null || { \
		[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			chromium chromium-driver graphviz >/dev/null; \
	} || echo "chromium/chromedriver/graphviz not installed: the browser checks will be skipped"

test-full: install-test browser
	$(BIN)/python -m pytest -n 2 -m '' tests

bench: install-test
	$(BIN)/python bench/run_all.py

# the long fuzzing run: FUZZ_EXAMPLES cases on FUZZ_WORKERS processes (tests/fuzzgen.py);
# FUZZ_SAVE=DIR keeps the failing inputs, FUZZ_SEED picks another campaign
FUZZ_EXAMPLES ?= 100000
FUZZ_WORKERS ?= 2
fuzz: install-test
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_WORKERS=$(FUZZ_WORKERS) FUZZ_HASHSEED_EVERY=1000 \
		$(BIN)/python -m pytest -s -m "" -p no:xdist "tests/test_fuzz.py::test_fuzz_campaign[full]"

# the wheels bench/device/tpu_check.sh installs on a TPU machine, which has JAX 0.10.2 on
# Python 3.11 and no package registry: the tool's dependencies its image lacks
TPU_WHEELS := click lark rich markdown-it-py mdurl pygments graphviz pathspec
tpu-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl-tpu $(TPU_WHEELS)

clean:
	rm -rf $(VENV) build dist *.egg-info
