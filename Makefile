# Two entry points, both self-installing into .venv (see README.md):
#   make demo   install, then run `bench demo` (baseline agent on T6 and T1, into MLflow)
#   make test       install, then run the fast tier: every test not marked slow (no whole benchmark run)
#   make test-slow  install, then run the slow tier alone (the whole benchmark runs); CI runs both (.ci/run)
#   make test-all   both tiers in one session
# all on pytest-xdist workers (TEST_WORKERS), each printing its 25 slowest tests; PYTEST_ARGS passes options
# (make test PYTEST_ARGS="tests/bench -x"); README.md says how long each takes
# and two to look at the results without activating the environment:
#   make ui     the MLflow UI on the store (`bench ui`; UI_ARGS="--port 5001" passes options)
#   make lab    install JupyterLab (the `lab` extra) and open it on notebooks/ (LAB_ARGS="--no-browser" passes options)
# and the GPU proof kit (bench/selftest/__init__.py says how to run it on a lent machine):
#   make gpu-proof         bench selftest --device cuda: CUDA in the sandbox, T6 baseline, T1 steps/s bare vs bench run,
#                          evaluation on the GPU vs in-process; report in selftest-report/ (SELFTEST_ARGS passes options)
#   make gpu-proof-bundle  .gpu-proof/: the wheels a machine without a package index lacks, T6/T1 data, run.sh
# and the price table:
#   make prices   regenerate bench/agents/prices.toml from the newest LiteLLM cost map on PyPI (PRICES_ARGS="--litellm-version X")
# and the performance figures the README and docs quote:
#   make bench    every script of tests/benchmarks/ at its documented size, one at a time, into docs/benchmarks.md
#                 (needs BENCH_DATA_MIRROR, PostgreSQL's programs; its scripts took 57 min in all on the shared 2-core
#                 machine at load 5-14, see the file; BENCH_ARGS="--only eval_cost" measures one again)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-slow test-all install lint ui lab gpu-proof gpu-proof-bundle prices bench

# pytest-xdist workers: one more than a 2-core machine's cores, as the tests wait on budgets, sleeps, sandboxes and
# subprocesses as much as they compute (TEST_WORKERS=2 or 4 to change it; TEST_WORKERS=0 runs in one process)
TEST_WORKERS ?= 3

$(BIN)/bench: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned, so that the project's range never pulls another multi-GB build
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

install: $(BIN)/bench

demo: $(BIN)/bench
	$(BIN)/bench demo

test: $(BIN)/bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow" --durations=25 $(PYTEST_ARGS)

test-slow: $(BIN)/bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m slow --durations=25 $(PYTEST_ARGS)

test-all: $(BIN)/bench
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

lint: $(BIN)/bench
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

ui: $(BIN)/bench
	$(BIN)/bench ui $(UI_ARGS)

$(BIN)/jupyter-lab: $(BIN)/bench
	$(BIN)/python -m pip install -q -e '.[lab]'
	touch $@

# Jupyter refuses to start as root without --allow-root (containers, cloud machines): given only when run as root
lab: $(BIN)/jupyter-lab
	$(BIN)/jupyter-lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

gpu-proof: $(BIN)/bench
	$(BIN)/bench selftest --device cuda --out selftest-report $(SELFTEST_ARGS)

gpu-proof-bundle: $(BIN)/bench
	$(BIN)/python -m bench.selftest.bundle .gpu-proof

prices: $(BIN)/bench
	$(BIN)/bench prices refresh $(PRICES_ARGS)

bench: $(BIN)/bench
	$(BIN)/python tests/benchmarks/make_figures.py $(BENCH_ARGS)
