# Two entry points: `make lab` and `make test`. Both create .venv when needed; `make test` also installs chromium.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
LAB_PORT ?= 8888
LAB_ARGS ?=

.PHONY: lab test install chromium bench bench-full bench-throughput torch-env clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstall when the dependency list changes.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# JupyterLab on the quickstart notebook, for any user (tests/test_make_lab.py runs exactly `make lab`):
# - loopback only (127.0.0.1) with token authentication: JupyterLab prints the URL with its token.
# - --allow-root when the effective user is root (most containers, the project's machines included): JupyterLab
#   refuses to start as root otherwise. The flag lifts only that refusal; loopback + token keep the server private.
# - --no-browser on Linux without a display (DISPLAY and WAYLAND_DISPLAY unset: a container, an SSH session): open
#   the printed URL yourself, e.g. through `ssh -L 8888:127.0.0.1:8888 host`. Without it, Python's webbrowser
#   would start a console browser (www-browser, w3m, lynx) inside this terminal when one is installed. With a
#   display (or on macOS) JupyterLab opens the quickstart in the default browser.
# - --ServerApp.port_retries=0: a port in use is an error, not a silent move to the next free port, which an SSH
#   tunnel or a bookmark for the usual port would miss. Pick another one with `make lab LAB_PORT=9999`.
# - LAB_ARGS: more JupyterLab options, e.g. `make lab LAB_ARGS=--no-browser`.
# - no "official Jupyter news?" prompt: see LAB_DEFAULTS.
LAB_AS_ROOT    := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_NO_BROWSER := $(if $(filter Linux,$(shell uname -s)),$(if $(DISPLAY)$(WAYLAND_DISPLAY),,--no-browser))

# JupyterLab asks every new user whether to fetch its news feed (a toast over the notebook). Its command-line
# options cannot stop that (--LabApp.news_url=None only empties the feed; the prompt is driven by the setting
# fetchNews, default "none" = ask), so this sets that setting's *default* to "false" in the .venv's own
# JupyterLab config (sys-prefix labconfig/default_setting_overrides.json): nothing under ~ is written, and a
# choice the user made in JupyterLab's settings still wins.
LAB_DEFAULTS := $(VENV)/etc/jupyter/labconfig/default_setting_overrides.json

$(LAB_DEFAULTS): Makefile | $(STAMP)
	@mkdir -p $(@D)
	@echo '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}' > $@

lab: $(STAMP) $(LAB_DEFAULTS)
	$(BIN)/jupyter lab --ip=127.0.0.1 --port=$(LAB_PORT) --ServerApp.port_retries=0 $(LAB_AS_ROOT) $(LAB_NO_BROWSER) \
	  --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks/01_quickstart.ipynb \
	  $(LAB_ARGS) notebooks/01_quickstart.ipynb

# `make test` also makes .venv-torch (torch-env, below): the low-precision benchmark's PyTorch worker is tested there.
# The browser test drives Debian's Chromium (Playwright cannot download browsers on the project's machines), so
# `make test` installs chromium when /usr/bin/chromium is missing (apt-get, through sudo unless root). Without
# apt-get it says so and goes on; the browser test then fails, naming what to install.
CHROMIUM := /usr/bin/chromium
SUDO     := $(if $(filter 0,$(shell id -u)),,sudo)

chromium: $(CHROMIUM)

$(CHROMIUM):
	@if command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian's chromium for the browser test (apt-get)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "NOTE: no apt-get here: install Chromium as $(CHROMIUM) yourself, the browser test needs it"; \
	fi

# Two parts: the tests that tune, build and execute notebooks run in TEST_WORKERS processes (pytest-xdist, one test
# file per process at a time: module fixtures are built once); those marked `serial` (they read the machine's load,
# time wall seconds, or drive a browser) run after them, alone. Both parts run even when the first fails.
TEST_WORKERS ?= 2

test: $(STAMP) chromium $(LAB_DEFAULTS) torch-env
	$(BIN)/ruff check workbench widgets tests benchmarks
	$(BIN)/ruff format --check workbench widgets tests benchmarks
	status=0; \
	$(BIN)/python -m pytest -q -ra --durations=15 -m "not serial" -n $(TEST_WORKERS) --dist loadfile || status=$$?; \
	$(BIN)/python -m pytest -q -ra --durations=10 -m serial || status=$$?; \
	exit $$status

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

bench: $(STAMP) torch-env      # quick mode: < 1 h on 2 cores
	$(BIN)/python benchmarks/performance.py --mode quick

bench-full: $(STAMP) torch-env # 64 and 256 trials, every workload, both MetaSchedule configurations: hours
	$(BIN)/python benchmarks/performance.py --mode full

bench-throughput: $(STAMP)
	$(BIN)/python benchmarks/measure_throughput.py

clean:
	rm -rf $(VENV) $(TORCH_VENV) .pytest_cache test-artifacts
