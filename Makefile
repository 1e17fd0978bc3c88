# Two entry points: `make lab` and `make test`. Both create .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_PORT ?= 8888

.PHONY: lab test install bench bench-full bench-throughput torch-env clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstall when the dependency list changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# JupyterLab on the quickstart notebook; token auth, loopback only.
lab: $(STAMP)
	$(BIN)/jupyter lab --ip=127.0.0.1 --port=$(LAB_PORT) --ServerApp.root_dir=$(CURDIR) \
	  --LabApp.default_url=/lab/tree/notebooks/01_quickstart.ipynb notebooks/01_quickstart.ipynb

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra --durations=15

# Performance against MetaSchedule, vendor libraries and the machine's peak -> docs/results/performance.md.
# torch (oneDNN, the conv vendor baseline) lives in its own environment, never in .venv; when it cannot be
# installed the conv vendor comparison is skipped and the report says so. On a machine shared with other
# benchmarks, hold the CPU lock around the whole run: `flock /tmp/wb-cpu.lock make bench`.
TORCH_VENV    := .venv-torch
TORCH_VERSION ?= 2.13.0

$(TORCH_VENV)/.installed:
	@($(PYTHON) -m venv $(TORCH_VENV) && $(TORCH_VENV)/bin/pip install -q torch==$(TORCH_VERSION) && touch $@) || \
	  echo "NOTE: torch==$(TORCH_VERSION) could not be installed into $(TORCH_VENV); the oneDNN comparison is skipped"

torch-env: $(TORCH_VENV)/.installed

bench: $(STAMP) torch-env      # quick mode: < 30 min on 2 cores
	$(BIN)/python benchmarks/performance.py --mode quick

bench-full: $(STAMP) torch-env # 64 and 256 trials, every workload, both MetaSchedule configurations: hours
	$(BIN)/python benchmarks/performance.py --mode full

bench-throughput: $(STAMP)
	$(BIN)/python benchmarks/measure_throughput.py

clean:
	rm -rf $(VENV) $(TORCH_VENV) .pytest_cache test-artifacts
