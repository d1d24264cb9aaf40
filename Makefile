# Two entry points for a newcomer: `make demo` and `make test`. Each installs what it needs.
# `make test-fast` is the inner loop while changing code.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch; a looser pin pulls a multi-GB CUDA build. Override on a GPU machine.
TORCH ?= torch==2.13.0
# pytest-xdist workers: three a core, since most of the suite's long tests wait (on a Slurm
# allocation, an emulated Kaggle session, a deadline) with a core idle; the schedule starts them
# beside the tests that keep a core busy (tests/support/schedule.py; README, "Tests and tooling").
TEST_WORKERS ?= 6
FAST_WORKERS ?= 2

.PHONY: demo test test-fast test-cpu mutate mutate-sweep lint format bench clean

# Where PYTHONDONTWRITEBYTECODE is set (this machine's image sets it), Python caches no bytecode:
# every process compiles the project's modules again (a test session, a pytest worker's
# collection: 30 CPU-s a worker, 18 with the cache) and pytest rewrites every test module's asserts
# again. These targets let Python write its caches (`__pycache__/`, git-ignored); Python checks
# each against its source's mtime and size. The mutation runner keeps them off in its copies
# (tests/mutation/runner.py): a copy's file is edited and restored within a second, which a cache
# could miss.
demo test test-fast test-cpu bench: export PYTHONDONTWRITEBYTECODE :=

# The last step builds DeepSpeed's CPU shared-memory collective (deepspeed_shm_comm, kept in
# ~/.cache/torch_extensions), which DeepSpeed otherwise compiles the first time a process starts
# its communication (about a minute on 2 cores), inside the first DeepSpeed session of a test run.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[train,trackers,dev]'
	$(PY) -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/baton demo

# Every test, handed to the workers one at a time, the longest first, waiters beside busy tests
# (tests/support/schedule.py; each test has its own directory, database, ports and sessions; the
# trainers' whole runs are made once for all the workers: tests/trainers/conftest.py).
test: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS) --maxschedchunk 1

# Every test that starts no session, server, browser or cluster (tests/support/marks.py), the
# Hypothesis properties included: the inner loop.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -n $(FAST_WORKERS) -m "not slow"

# `make test` with every test's CPU seconds, its sessions' and servers' included, each from a
# cgroup of its own (tests/support/cpu_meter.py; root only), then the costliest tests and files.
CPU_REPORT ?= .pytest_cache/cpu-report.jsonl
test-cpu: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS) --maxschedchunk 1 -p tests.support.cpu_meter \
		--cpu-report $(CPU_REPORT); \
	status=$$?; $(PY) -m tests.support.cpu_meter $(CPU_REPORT); exit $$status

# Every listed mutant against the tests that must catch it (docs/testing.md); CI runs --guarantees.
mutate: $(VENV)/.installed
	$(PY) -m tests.mutation --baseline

# mutmut's generated mutants of the pure core modules ([tool.mutmut] in pyproject.toml), each run
# against that module's fast tests; then the per-module table for docs/testing.md. Not in CI.
mutate-sweep: $(VENV)/.installed
	$(VENV)/bin/mutmut run --max-children 2
	$(PY) -m tests.mutation.sweep

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(VENV)/.installed
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache mutants
