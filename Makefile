# The two commands of the quick start: `make up` and `make test`; `make check` is the inner loop.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstall only when the dependency list changes; the install is editable, so
# source edits need none. `up` needs the runtime dependencies only (what the image
# installs); tests and linters the dev extra as well. uv installs them, pinned and put in
# the virtualenv first: on a fresh clone it installs the dev extra in 7.4 s (12 s with uv's own
# cache empty) where pip took 23.
# Bytecode is compiled at install, as pip does: an environment that never writes it
# (PYTHONDONTWRITEBYTECODE) would otherwise compile every import of every process again.
UV_VERSION := 0.13.9
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP := $(VENV)/.installed-stamp

.PHONY: help up test check lint clean kafka-broker

# Each target that ends its line with `## what it does` is listed by `make help`.
help: ## list the targets (this)
	@awk -F ':.*## ' '/^[a-zA-Z0-9_./-]+:.*## / { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)

$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

$(RUNTIME_STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e .
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

# `make up PORT=8080` (and `HOST=0.0.0.0`) set PIN_HTTP__PORT (PIN_HTTP__HOST) for `up`; unset,
# the environment's, else 127.0.0.1:8000.
up: $(RUNTIME_STAMP) ## the whole service on one machine (PORT=, HOST= to choose its address)
	$(if $(HOST),PIN_HTTP__HOST=$(HOST) )$(if $(PORT),PIN_HTTP__PORT=$(PORT) )$(BIN)/pin-sessions up

# The tracker's build tools (esbuild, tsc), pinned by clients/js/package-lock.json; the tests
# build it and check the copies the service serves.
JS_STAMP := clients/js/node_modules/.package-lock.json

$(JS_STAMP): clients/js/package.json clients/js/package-lock.json
	cd clients/js && npm ci --no-audit --no-fund

# The tests' Kafka broker: Apache Kafka's jars from Maven Central (tests/kafka-broker/pom.xml),
# fetched once per build file into ~/.cache/pin-sessions/ (needs Java 17+ and Maven; `up` needs
# neither).
kafka-broker: $(STAMP) ## fetch the tests' Kafka broker (Java 17+ and Maven)
	$(BIN)/python -m tests.support.kafka_dist

# The tests' temporary directories, their PostgreSQL clusters' data included, in memory where
# the machine has a tmpfs: the clusters run without fsync, so their writes are only CPU, and
# on a disk their writeback cost the suite 45 s of PostgreSQL CPU (BENCHMARKS.md, "The test suite").
PYTEST_DEBUG_TEMPROOT ?= $(if $(wildcard /dev/shm/.),/dev/shm,)
export PYTEST_DEBUG_TEMPROOT

# The project's own modules compiled as uv compiles the dependencies: where bytecode is never
# written (PYTHONDONTWRITEBYTECODE) each of the suite's ~150 processes compiled them again,
# 0.08 s of every API process's start. Only changed files are compiled again.
test: $(STAMP) $(JS_STAMP) kafka-broker ## every test, end-to-end ones included
	$(BIN)/python -m compileall -q src tests bench
	$(BIN)/pytest

lint: $(STAMP) ## ruff (lint and format) and mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Lint, types, and every test that needs nothing beyond this process and PostgreSQL: the unit
# and in-process API tests. The `e2e` ones (processes, HTTP servers, browsers, brokers) are
# marked at collection (tests/support/markers.py) and left to `make test`.
check: lint ## lint, then the tests that need only PostgreSQL (the inner loop)
	$(BIN)/pytest -m "not e2e"

# The Prometheus Operator's copy of deploy/prometheus/*.yml (a test keeps them equal).
deploy/kubernetes/prometheus-rule.yaml: deploy/prometheus/*.yml deploy/kubernetes/generate_prometheus_rule.py | $(BIN)/python ## the alert rules for the Prometheus Operator
	$(BIN)/python deploy/kubernetes/generate_prometheus_rule.py > $@

clean: ## remove the virtualenv and the tools' caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
