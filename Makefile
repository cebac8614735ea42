# On a fresh clone: `make install` (then `source .venv/bin/activate`), `make demo` (runs twinbench compare),
# `make test` (ruff, the import contracts of docs/layout.md and the whole test suite, what CI runs) and `make check`
# (ruff, the import contracts and the quick tier: the tests that start no process; tests/tiers.py).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.twinbench-installed
# On a machine without an NVIDIA GPU, pin the local CPU wheel of torch (never a CUDA download). With one
# (nvidia-smi found), torch's default wheel is the CUDA build, and JAX needs its CUDA plugin too (the `cuda`
# extra): plain `jax` would run on the CPU beside a CUDA torch, and every comparison would be meaningless.
, := ,
GPU         := $(shell command -v nvidia-smi 2>/dev/null)
CONSTRAINTS := $(if $(GPU),,-c constraints-cpu.txt)
EXTRAS      := $(if $(GPU),test$(,)cuda,test)

.PHONY: demo test check lint install clean

# prints how to put `twinbench` on the PATH: a make recipe cannot change its caller's shell
install: $(STAMP)
	@echo "twinbench is installed in $(VENV). To put it on your PATH: source $(VENV)/bin/activate  (or call $(VENV)/bin/twinbench)"

# --no-compile: pip byte-compiles none of the .py files it installs (tens of thousands with torch and transformers,
# most never imported); Python compiles the modules a run imports on first use and keeps them in the venv.
# pip >= 25 first: a venv starts with the Python's own pip, whose older resolver evaluates every file listed on the
# package indexes' pages, a large share of the install; a current pip resolves the same set faster.
# Since 24, pip warns once per package that an extra index of the machine's pip configuration does not hold
# ("Location '...' is ignored: it is neither a file nor a directory"): those lines only are left out.
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
# $(call pip,ARGS): prints the pip command (not the filter), then runs it with those lines left out
pip = echo "$(PIP) $(1)" && $(PIP) $(1) 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
$(STAMP): pyproject.toml constraints-cpu.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(call pip,--upgrade 'pip>=25')
	@$(if $(GPU),echo "NVIDIA GPU found: installing JAX's CUDA plugin too (the cuda extra); twinbench checks both frameworks see the GPU: $(PY) -m twinbench.environment --gpu")
	@$(call pip,--no-compile $(CONSTRAINTS) -e '.[$(EXTRAS)]')
	@touch $(STAMP)

# Python keeps the bytecode of what it imports (__pycache__, ignored by git) even where the environment says
# PYTHONDONTWRITEBYTECODE: otherwise every process twinbench and the tests start (a worker per run) compiles
# torch's, JAX's and its own modules from source again, a large share of a tiny run.
demo test check: export PYTHONDONTWRITEBYTECODE=

demo: install
	$(VENV)/bin/twinbench compare

# --no-loadscope-reorder: xdist hands out the files in the order tests/conftest.py gives (the files of slow tests
# first), not by their number of tests, which left the few-test, minute-long files for the end.
# Both print the suite's CPU seconds at the end (user + sys of pytest and every process it waited for: tests/tiers.py).
test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# the quick tier: -m "not heavy" (a test that starts a Python process fails there, saying where to move it)
check: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not heavy"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) runs .pytest_cache
