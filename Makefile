# nodecycle: every target sets up what it needs on a fresh machine (a Python 3.13 virtualenv in .venv).
#   make demo   - the demo: an instance refresh on the local sandbox, end to end
#   make test   - everything CI runs: lint, types, import contracts, template checks, sam build, tests
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(VENV)/bin
REGION ?= eu-west-1
# One more worker than the 2 cores CI has: the sandbox tests mostly wait on their timers (about 60% CPU with
# 2 workers); with 3, the same run took 13 min 13 s instead of 15 min 36 s and passed (2026-12-03)
PYTEST_WORKERS ?= 3
export SAM_CLI_TELEMETRY := 0
# Python writes each module's compiled .pyc next to it (in __pycache__, ignored by git) as it does by default: a
# machine whose environment sets PYTHONDONTWRITEBYTECODE (this one's did) compiles every module of the repository
# in every process, each pytest worker collecting the suite (14 CPU-s instead of 6, the assertion rewriting
# included) and each Lambda container of a sandbox importing the layer from source. The built layer ships its
# .pyc (layers/Makefile), so a container reading them is what Lambda does; the cold-start benchmarks compile
# on purpose where they measure that (--cold-without-pyc).
unexport PYTHONDONTWRITEBYTECODE
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: help install lock lint lint-types template build pytest durations test test-unit test-contracts test-functions \
	test-integration test-sandbox test-campaign test-crash test-benchmarks mutations demo sandbox bench clean

help:
	@echo "make demo      run the demo on the local sandbox (sets everything up)"
	@echo "make test      lint, types, import contracts, template checks, sam build, tests with coverage"
	@echo "make test-unit | test-contracts | test-functions | test-integration | test-sandbox | test-campaign | test-benchmarks"
	@echo "make test-crash  the crash tests at every kill point (make test runs a sample of them)"
	@echo "               one level of the suite (tests/README.md), without coverage"
	@echo "make mutations   every planted bug of the campaign's tests run end to end (make test runs none)"
	@echo "make sandbox   start the sandbox and keep it running (watch it with kubectl)"
	@echo "make bench     run the benchmarks and print their ratios"
	@echo "make durations run the tests as make test does and record each file's time (tests/durations.json)"

# requirements/dev.lock pins every development tool and library (make lock writes it): CI installs
# exactly what was tested here.
$(VENV)/.installed: pyproject.toml requirements/dev.lock
	@test -x $(BIN)/python || "$$(scripts/find-python)" -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements/dev.lock -e '.[dev,sandbox]'
	@touch $@

install: $(VENV)/.installed

lock: install
	$(BIN)/python -m pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --strip-extras --extra dev --extra sandbox --no-emit-index-url --no-emit-find-links \
		--output-file requirements/dev.lock pyproject.toml

lint: install lint-types
	ruff check .
	ruff format --check .
	lint-imports

lint-types: install
	mypy layers/nodecycle sandbox cli tests benchmarks
	@for app in functions/*/app.py; do echo "mypy $$app"; mypy "$$app"; done

template: install
	sam validate --region $(REGION)
	sam validate --lint --region $(REGION)
	cfn-lint  # the template again, with the cfn-lint-serverless rules appended (.cfnlintrc)

build: install
	sam build --cached --build-dir .aws-sam/build

PYTEST_ARGS ?=

pytest: install
	@command -v kubectl >/dev/null || { echo "kubectl is required: the sandbox tests drive it"; exit 1; }
	pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not mutations" --cov --cov-report=term --cov-report=xml -q \
		--durations=25 $(PYTEST_ARGS)

# The files go out to the workers longest first, by their times in tests/durations.json: after tests are added
# or made faster, record them again (a whole run, as make test's; `make test PYTEST_ARGS=--record-durations`
# records them in the same run) and commit the file.
durations: build
	$(MAKE) pytest PYTEST_ARGS=--record-durations

test: lint template build pytest

test-unit: install
	pytest -m unit -q -p no:cacheprovider

test-contracts: install
	pytest -m contracts -q -n $(PYTEST_WORKERS) --dist loadfile

test-functions: install
	pytest -m functions -q -n $(PYTEST_WORKERS) --dist loadfile

test-integration: install
	pytest -m integration -q -n $(PYTEST_WORKERS) --dist loadfile

test-sandbox: install
	pytest -m sandbox -q -n $(PYTEST_WORKERS) --dist loadfile

test-campaign: install
	pytest -m "campaign and not mutations" -q

# The planted bugs whose judges tests/campaign/test_invariants.py shows failing on crafted histories, run end to end
# on a mutated copy of the product (test_mutations.py; make test only checks that each still applies).
# Each starts a world, and two wait out a 50 s outage and a tripled drain timeout: two at once, on their own workers.
mutations: install
	pytest tests/campaign/test_mutations.py -m mutations -q -n 2

# The crash tests at every kill point (make test kills at a sample of them: tests/conftest.py's --kill-points)
test-crash: install
	pytest tests/integration/lifecycle/test_crash_recovery.py tests/integration/lifecycle/test_crash_recovery_contended.py \
		tests/integration/lifecycle/test_crash_recovery_launch.py -q -n $(PYTEST_WORKERS) --dist loadfile --kill-points all

test-benchmarks: install build
	pytest -m benchmarks -q -n $(PYTEST_WORKERS) --dist loadfile

demo: install
	nodecycle demo

sandbox: install
	nodecycle sandbox

bench: install build
	python -m benchmarks --save

clean:
	rm -rf .aws-sam .coverage .coverage.* coverage.xml .pytest_cache .mypy_cache .ruff_cache
