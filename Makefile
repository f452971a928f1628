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

# Reruns every benchmark on this machine and rewrites benchmarks/results/ (tens of minutes on 2 CPU cores;
# run it on an idle machine: the timings are the data).
BENCHES := sim calibration spec pretrain validate kvcache
bench: setup
	for b in $(BENCHES); do $(BIN)/python benchmarks/bench_$$b.py > benchmarks/results/bench_$$b.txt || exit 1; done

.PHONY: setup demo test bench
