# Every target sets up what it needs: `make demo` and `make test` work on a fresh machine.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

$(BIN)/tltsim: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: it is the CPU build; a range lets pip pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all]'
	touch $@

setup: $(BIN)/tltsim

demo: setup
	$(BIN)/tltsim compare --trace traces/dapo_like.parquet -o out/demo

test: setup
	$(BIN)/python -m pytest -q

# Regenerates every notebook's .ipynb from its jupytext source notebooks/NN_name.py and executes it (a minute or
# two on 2 CPU cores); one notebook: $(BIN)/jupytext --sync --execute notebooks/NN_name.py
notebooks: setup
	for nb in notebooks/[0-9][0-9]_*.py; do $(BIN)/jupytext --sync --execute $$nb || exit 1; done

# Reruns every benchmark on this machine and rewrites benchmarks/results/bench_*.txt, each headed by when, at
# which commit and under what load it ran (tens of minutes on 2 CPU cores; run it on an idle machine: the
# timings are the data). What was learnt from a recording goes in benchmarks/results/NOTES.md, not in the .txt.
BENCHES := sim calibration calibration_fit moe spec pretrain validate kvcache share switch
bench: setup
	for b in $(BENCHES); do \
	  { echo "# make bench: $$(date -u '+%F %H:%M') UTC, commit $$(git rev-parse --short HEAD 2>/dev/null), load average $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	    $(BIN)/python benchmarks/bench_$$b.py; } > benchmarks/results/bench_$$b.txt || exit 1; \
	done

.PHONY: setup demo test notebooks bench
