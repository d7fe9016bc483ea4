# nodecycle: every target sets up what it needs on a fresh machine (a Python 3.13 virtualenv in .venv).
#   make demo   - the demo: an instance refresh on the local sandbox, end to end
#   make test   - everything CI runs: lint, types, import contracts, template checks, sam build, tests
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(VENV)/bin
REGION ?= eu-west-1
PYTEST_WORKERS ?= 2
export SAM_CLI_TELEMETRY := 0
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help install lint template build pytest test demo sandbox bench clean

help:
	@echo "make demo      run the demo on the local sandbox (sets everything up)"
	@echo "make test      lint, types, import contracts, template checks, sam build, tests with coverage"
	@echo "make sandbox   start the sandbox and keep it running (watch it with kubectl)"
	@echo "make bench     run the benchmarks and print their ratios"

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || "$$(scripts/find-python)" -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

install: $(VENV)/.installed

lint: install
	ruff check .
	ruff format --check .
	mypy layers/nodecycle tools tests benchmarks
	@for app in functions/*/app.py; do echo "mypy $$app"; mypy "$$app"; done
	lint-imports

template: install
	sam validate --region $(REGION)
	sam validate --lint --region $(REGION)
	cfn-lint  # the template again, with the cfn-lint-serverless rules appended (.cfnlintrc)

build: install
	sam build --cached --build-dir .aws-sam/build

pytest: install
	@command -v kubectl >/dev/null || { echo "kubectl is required: the sandbox tests drive it"; exit 1; }
	pytest -n $(PYTEST_WORKERS) --dist loadfile --cov --cov-report=term --cov-report=xml -q

test: lint template build pytest

demo: install
	nodecycle demo

sandbox: install
	nodecycle sandbox

bench: install
	python -m benchmarks

clean:
	rm -rf .aws-sam .coverage .coverage.* coverage.xml .pytest_cache .mypy_cache .ruff_cache
