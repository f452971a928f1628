# Every target sets up what it needs: `make demo` and `make test` work on a fresh machine.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

# Everything: torch first, pinned (it is the CPU build; a range lets pip pull a multi-GB CUDA build), then every
# extra (the real backend, notebooks, Ray, the tests).
$(VENV)/.all: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all]'
	touch $@ $(VENV)/.simulator

# The simulator alone (no torch): what `make demo` needs. A full setup has it too; this one alone does not make
# `setup` (its marker is .all).
$(VENV)/.simulator: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e .
	touch $@

setup: $(VENV)/.all

demo: $(VENV)/.simulator
	$(BIN)/tltsim compare --trace traces/synthetic/dapo_like.parquet -o out/demo
	@echo "the report: out/demo/report.html"

# Two workers (pytest-xdist), a test file each at a time (tests/conftest.py says which tests go together); the 20 slowest
# tests are listed at the end. One file: $(BIN)/python -m pytest -q tests/sim/test_tlt.py
test: setup
	$(BIN)/python -m pytest -q -n 2 --durations=20

# Regenerates every notebook's .ipynb from its jupytext source notebooks/NN_name.py and executes it (a minute or
# two on 2 CPU cores), then records what the simulator's notebooks give on the smaller parameters the tests run them
# on (tests/notebooks/expected/); one notebook: $(BIN)/jupytext --sync --execute notebooks/NN_name.py
notebooks: setup
	for nb in notebooks/[0-9][0-9]_*.py; do $(BIN)/jupytext --sync --execute $$nb || exit 1; done
	$(BIN)/python tests/notebooks/test_notebooks.py --record

# Reruns the benchmarks named in BENCHES on this machine and rewrites their recorded output,
# benchmarks/results/bench_NAME.txt, each headed by the date, the commit and the command (tens of minutes on 2 CPU
# cores; run it on an idle machine: the timings are the data). benchmarks/README.md lists every benchmark, what it
# measures and how long it takes; docs/investigations/ holds what was learnt from recorded runs.
BENCHES := sim agentic calibration calibration_fit moe spec pretrain validate checked fidelity kvcache share switch bad_input
bench: setup
	for b in $(BENCHES); do \
	  { echo "# make bench: $$(date -u '+%F %H:%M') UTC, commit $$(git rev-parse --short HEAD 2>/dev/null): python benchmarks/bench_$$b.py"; \
	    $(BIN)/python benchmarks/bench_$$b.py; } > benchmarks/results/bench_$$b.txt || exit 1; \
	done

.PHONY: setup demo test notebooks bench
