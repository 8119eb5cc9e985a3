# labgate: the two commands of the README, and the steps they are made of.
#   make run    start a local control plane with labgate installed and show a researcher's accepted and refused apply
#   make test   every test: lint, types, Rego, unit, end-to-end against the real control plane
# Both install what they need: the Python environment (.venv) and the pinned Go tools
# (toolchain/versions.env, built once into ~/.cache/labgate/tools).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run stop test setup tools debian-packages venv lint policy-test unit tools-tests e2e e2e-kind clean

run: venv  ## start everything and show the main job (stop with: make stop); refuses while one runs
	toolchain/build.sh $(RUN_TOOLS)
	$(BIN)/python -m devcluster up --demo --nodes devcluster/pools/lab.yaml --kueue

stop:  ## stop what `make run` started
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m devcluster down; else echo "nothing to stop"; fi

test: setup lint policy-test  ## every test
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

setup: venv tools debian-packages

# Debian's debootstrap, umoci, containerd and runc for the image tests, and containernetworking-plugins,
# iptables, ipset, gcc and libc6-dev for the node tests: installed with apt where this runs as root
# (skipped with the reason elsewhere, and those tests then say so).
debian-packages:
	toolchain/debian-packages.sh

# The tools tests and `make run` need; the benchmarks' own (vegeta, gatekeeper) build on first use.
TEST_TOOLS := kubernetes kube-proxy kube-router etcd opa regal helm registry crane cosign-v2 cosign-v3 kwok kueue

# The tools `make run`'s stack uses (no registry, signing or lint tools).
RUN_TOOLS := kubernetes etcd opa kwok kueue

tools:  ## build the pinned Go tools that are not cached yet
	toolchain/build.sh $(TEST_TOOLS)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (3.11 or newer)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

lint: venv  ## ruff, mypy --strict and the import-layer contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	"$$(toolchain/build.sh --bin-dirs | grep /regal-)/regal" lint policies

policy-test: venv tools  ## Rego: format, strict compile, unit tests, and every policy sample
	$(BIN)/labgate policy test --policies policies

# The three test tiers (tests/conftest.py); `make test` runs them all, in one pytest run.
unit: venv  ## tier 1: unit tests that run no pinned tool, each within a short timeout
	$(BIN)/python -m pytest tests/unit -m "not tools" $(PYTEST_ARGS)

tools-tests: venv tools  ## tier 2: unit tests that run the pinned opa or helm (marker `tools`)
	$(BIN)/python -m pytest tests/unit -m tools $(PYTEST_ARGS)

e2e: setup  ## tier 3: end-to-end tests on the real control plane
	$(BIN)/python -m pytest tests/e2e $(PYTEST_ARGS)

e2e-kind: setup  ## the same e2e tests on a kind cluster (needs a Docker engine; skipped with the reason otherwise)
	$(BIN)/python -m pytest tests/e2e --cluster=kind -rs $(PYTEST_ARGS)

clean: stop
	rm -rf $(VENV) .labgate-dev .pytest_cache .mypy_cache .ruff_cache
