# Two entry points: `make lab` and `make test`. Both create .venv when needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_PORT ?= 8888

.PHONY: lab test install bench bench-full clean

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

bench: $(STAMP)
	$(BIN)/python benchmarks/measure_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
