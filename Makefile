# The two commands a new user needs: `make run` (the main job) and `make test` (the whole suite).
# Both create .venv from nothing when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install run test lint plan bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Main job: the paper case study in sim mode (three deployments x offered loads), then a table.
run: $(STAMP)
	$(PY) -m harness -m experiment=paper_case_study

plan: $(STAMP)
	$(PY) -m harness.plan

test: $(STAMP)
	$(PY) -m pytest -q

# Linters and the type checker (configured in pyproject.toml); .ci/run calls it after the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) results/runs results/multirun results/plans
