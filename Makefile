# Two commands on a fresh clone: `make demo` (runs twinbench compare) and `make test` (the test suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.twinbench-installed
# On a machine without an NVIDIA GPU, pin the local CPU wheel of torch (never a CUDA download).
CONSTRAINTS := $(if $(shell command -v nvidia-smi 2>/dev/null),,-c constraints-cpu.txt)

.PHONY: demo test lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints-cpu.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(CONSTRAINTS) -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/twinbench compare

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples

clean:
	rm -rf $(VENV) runs .pytest_cache
