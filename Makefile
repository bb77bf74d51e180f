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
# pip quietly: setuptools' "Editable installation" banner is a warning of its build, which
# says nothing to someone running make
PIP := PYTHONWARNINGS=ignore $(BIN)/python -m pip
TEST_STAMP := $(VENV)/.installed-test
# editable installs as a path line in a .pth file (setuptools' compat mode), not the default
# import hook: the hook's module imports pathlib and re at every start (~10 ms of a 60 ms
# start-up) where an installed tool imports neither
EDITABLE := --config-settings editable_mode=compat -e

.PHONY: install install-test browser bytecode twin demo test test-floor test-full lint bench fuzz clean tpu-wheels

install: bytecode twin

install-test: install $(TEST_STAMP)

# An editable install leaves the tool's modules uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set every command would compile them again (~0.09 s of a
# 0.3 s start-up): compile them as pip does for an ordinary install.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q jaxprtool

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP) install -q $(EDITABLE) '.[jax]'
	@# the `fast` extra, from a wheel only (no compiler run, no build log where there is none)
	$(PIP) install -q --only-binary lark-cython $(EDITABLE) '.[fast]' 2>/dev/null \
		|| echo "lark-cython has no wheel here: the pure-Python parser is used"
	touch $(STAMP) $(VENV)/.twin

# The compiled twin of the reader's and printer's per-line loops (jaxprtool/_twin.c): pip's
# install above builds it where a C compiler is found (setup.py; elsewhere it is quietly left
# out and the Python loops run); built again in place when its source changes.
TWIN_STAMP := $(VENV)/.twin
twin: $(TWIN_STAMP)
$(TWIN_STAMP): $(STAMP) jaxprtool/_twin.c setup.py
	$(PIP) install -q --no-deps $(EDITABLE) .
	@$(BIN)/python -c 'from jaxprtool.text import twin; print(twin.describe())'
	touch $@

$(TEST_STAMP): $(STAMP)
	$(PIP) install -q $(EDITABLE) '.[test,zoo,plot]'
	touch $(TEST_STAMP)

demo: install
	$(BIN)/jaxprtool fmt samples/mlp.jaxpr
	$(BIN)/jaxprtool check samples/mlp.jaxpr
	$(BIN)/jaxprtool grad --argnums 0,1,2,3 samples/mlp.jaxpr
	$(BIN)/jaxprtool grad --argnums 0 samples/mlp.jaxpr | $(BIN)/jaxprtool run - --random 0
	$(BIN)/jaxprtool check-grad samples/mlp.jaxpr

lint: install-test
	$(BIN)/ruff check jaxprtool tests bench
	$(BIN)/ruff format --check jaxprtool tests bench

# the default run leaves out what is marked slow (pyproject's addopts: -m 'not slow'), and
# lists its ten slowest tests.  pytest keeps the test modules it rewrote (assertions) in
# tests/__pycache__ unless PYTHONDONTWRITEBYTECODE is set; cleared for the run, each xdist
# worker reads them back on the next run instead of rewriting all of them (~4 CPU-s each)
TEST_ENV := PYTHONDONTWRITEBYTECODE=
# xdist hands each worker whole test files (not single tests): a file's module-scoped
# fixtures (traced programs, JAX's oracle results, compiled executables in jit_cache and JAX's
# caches) are made once, not once per worker (test_jax_0_12_1_elementwise 5.3 -> 2.4 CPU-s)
XDIST_BY_FILE := --dist loadfile
# The reading and printing tests run a second time on the Python loops alone
# (JAXPRTOOL_PURE_PYTHON=1: the reference and fallback of the compiled twin, text/twin.py);
# tests/test_twin.py compares the two paths on the corpus, goldens and generated programs.
# That second pass runs in one process: its tests take about 10 CPU-s, and two xdist workers'
# start-up and collection added a third to it.
PURE_TESTS := tests/test_parser.py tests/test_parser_fast.py tests/test_printer.py \
	tests/test_printer_fast.py tests/test_misindented.py tests/test_printer_namer.py
# jaxtyping (installed with the zoo's Equinox) registers a pytest plugin no test uses: its
# import is ~0.13 CPU-s in each of the run's four processes
UNUSED_PLUGINS := -p no:jaxtyping
test: install-test lint
	$(TEST_ENV) $(BIN)/python -m pytest $(UNUSED_PLUGINS) -n 2 $(XDIST_BY_FILE) --durations=10 tests
	JAXPRTOOL_PURE_PYTHON=1 $(TEST_ENV) $(BIN)/python -m pytest $(UNUSED_PLUGINS) -p no:xdist $(PURE_TESTS)

# The declared floors (pyproject.toml's lowest versions) installed together, as a
# lowest-direct resolution of '.[jax,test,plot]' resolves them, in a second venv on Python
# 3.11 (JAX 0.10.0 there), and the core tests run against them: parse/print, check, every
# AD command (jvp, linearize, transpose, vjp, grad), vmap, the passes, run and the API,
# check-grad, memory (--plot too), every in-process command on programs JAX 0.10.0 traces
# (test_installed_jax.py), texts of JAX 0.12.1 and 0.12.0.1 run on it; then lint with the
# floor ruff.  A test of what a later
# JAX does is skipped there, saying what the installed JAX lacks.  Where no Python 3.11 is
# found, nothing runs and it says so.
FLOOR_PYTHON ?= $(shell for p in python3.11 $$HOME/.pyenv/versions/3.11*/bin/python3.11; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null && { echo $$p; break; }; done)
FLOOR_VENV := .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.installed
FLOOR_TESTS := tests/test_parser.py tests/test_printer.py tests/test_check.py \
	tests/test_ad_jvp.py tests/test_ad_reverse.py tests/test_ad_elementwise.py \
	tests/test_ad_control_flow.py tests/test_vmap.py tests/test_passes.py \
	tests/test_run_cli.py tests/test_backend.py tests/test_api.py tests/test_check_grad.py \
	tests/test_memory.py tests/test_installed_jax.py tests/test_older_jax.py \
	tests/test_unmarked_style.py tests/test_jax_0_12_1.py

# uv resolves the floors (pip has no lowest-version resolution); it comes from the registry
$(BIN)/uv: $(STAMP)
	$(BIN)/python -m pip install -q uv

# a fresh venv whenever pyproject.toml changes: nothing of an earlier resolution is kept
$(FLOOR_STAMP): pyproject.toml $(BIN)/uv
	rm -rf $(FLOOR_VENV)
	$(BIN)/uv venv -q --python $(FLOOR_PYTHON) $(FLOOR_VENV)
	$(BIN)/uv pip install -q --python $(FLOOR_VENV)/bin/python --resolution lowest-direct \
		-e '.[jax,test,plot]'
	touch $@

test-floor:
ifeq ($(FLOOR_PYTHON),)
	@echo "test-floor: skipped: no Python 3.11 found (the floors, JAX 0.10.0 among them, are tested on 3.11)"
else
	$(MAKE) --no-print-directory $(FLOOR_STAMP)
	@$(FLOOR_VENV)/bin/python -c 'import importlib.metadata as m; \
		print("test-floor:", ", ".join(f"{p} {m.version(p)}" for p in ("jax", "jaxlib", "numpy", \
		"scipy", "ml_dtypes", "lark", "click", "rich", "pytest", "hypothesis", "ruff")))'
	$(FLOOR_VENV)/bin/ruff check jaxprtool tests bench
	$(FLOOR_VENV)/bin/ruff format --check jaxprtool tests bench
	$(FLOOR_VENV)/bin/python -m pytest -n 2 -rs $(FLOOR_TESTS)
endif

# the browser checks of tests/test_browser.py: selenium, and Debian's chromium, its driver and
# Graphviz where this user may install them (else those tests are skipped, saying why)
browser: install-test
	$(PIP) install -q $(EDITABLE) '.[browser]'
	@command -v chromedriver >/dev/null && command -v dot >/dev/null || { \
		[ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -q >/dev/null \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
			chromium chromium-driver graphviz >/dev/null; \
	} || echo "chromium/chromedriver/graphviz not installed: the browser checks will be skipped"

test-full: install-test browser
	$(TEST_ENV) $(BIN)/python -m pytest -n 2 $(XDIST_BY_FILE) -m '' tests
	JAXPRTOOL_PURE_PYTHON=1 $(TEST_ENV) $(BIN)/python -m pytest -n 2 -m '' $(PURE_TESTS)

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
TPU_WHEELS := click lark rich markdown-it-py mdurl pygments graphviz
tpu-wheels:
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
		--implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl-tpu $(TPU_WHEELS)

clean:
	rm -rf $(VENV) $(FLOOR_VENV) build dist *.egg-info jaxprtool/_twin*.so
