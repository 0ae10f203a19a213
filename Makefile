# The two commands a newcomer needs: `make plan` and `make test`. Every target builds .venv itself.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := $(shell grep -v '^\#' .ci/apt-packages.txt)
AZURITE_DIR := tools/azurite
AZURITE := $(AZURITE_DIR)/node_modules/.bin/azurite-blob

.PHONY: plan test lint checkov typecheck pytest bench bench-scale schema schema-check tools azurite components clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP) $(PLAN_STAMP)

# `make plan` installs only what planning needs (the `plan` extra: no test or lint tools), so a fresh clone
# plans every stack in about three minutes on two cores; a line per stack shows on the terminal as each
# is planned. A venv that `make test` made already has it all.
PLAN_STAMP := $(VENV)/.installed-plan
$(PLAN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e '.[plan]'
	touch $(PLAN_STAMP)

plan: $(PLAN_STAMP)
	$(BIN)/agk plan --all

# Real tools the tests drive. As root (CI, containers) they are apt-installed; otherwise the
# tests report exactly which program is missing. kubectl comes from Debian's kubernetes-client only
# where no kubectl is installed (a newer one from pkgs.k8s.io is as good: client-go loads the files);
# npm (with Debian's nodejs) likewise, for Azurite.
tools:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v kubectl >/dev/null 2>&1 || missing="$$missing kubernetes-client"; \
	command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "apt-get install:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "not root: install these Debian packages for the real-tool tests:$$missing"; fi; \
	fi

# Azurite, Microsoft's Azure Storage emulator, for the blob tests: every package pinned with its hash by
# tools/azurite/package-lock.json. Installed once; later runs need no network.
$(AZURITE): $(AZURITE_DIR)/package.json $(AZURITE_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  npm ci --prefix $(AZURITE_DIR) --no-audit --no-fund --ignore-scripts --loglevel=error && touch $(AZURITE); \
	else echo "not installed: npm (apt-get install npm): the Azurite tests will say so"; fi

azurite: $(AZURITE)

# The real Kubernetes components the control-plane tests run (kube-apiserver, kube-controller-manager,
# the schedulers, kubectl, etcd, kwok), built from Go modules at the versions table's pins into
# tools/bin (tools/components/components.py). Go's module and build caches make a second build quick;
# a machine without Go gets one line, and the tests that need the binaries fail naming them.
COMPONENTS_BIN := tools/bin
components: $(STAMP)
	@if command -v go >/dev/null 2>&1; then $(BIN)/python tools/components/components.py build $(COMPONENTS_BIN); \
	else echo "not installed: go (https://go.dev/doc/install): the control-plane tests will say so"; fi

# Checkov in a venv of its own (tools/checkov/requirements.txt pins it): its dependencies are not the project's.
CHECKOV_VENV := $(VENV)/checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov
$(CHECKOV): tools/checkov/requirements.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q -r tools/checkov/requirements.txt
	touch $(CHECKOV)

lint: $(STAMP) $(CHECKOV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/actionlint .github/workflows/*.yml
	$(BIN)/lint-imports --no-cache
	$(MAKE) --no-print-directory checkov

# Every cluster's add-on objects, rendered by the project's renderer, through Checkov's Kubernetes checks:
# a finding that modules/cluster/scan_exceptions.py does not answer fails the build. --skip-download: no
# network (Checkov otherwise fetches its guideline links).
checkov: $(STAMP) $(CHECKOV)
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/python tools/checkov/render.py "$$tmp"; \
	$(CHECKOV) --directory "$$tmp" --framework kubernetes --compact --quiet --skip-download

typecheck: $(STAMP)
	$(BIN)/mypy modules infra policies agk

schema: $(STAMP)
	$(BIN)/python -m modules.stackplan.schema > stacks/schema.json

schema-check: $(STAMP)
	@$(BIN)/python -m modules.stackplan.schema | diff -u stacks/schema.json - || \
	  (echo "error: stacks/schema.json is stale: run 'make schema'" >&2; exit 1)

pytest: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadgroup --durations=20

test: tools azurite components lint typecheck schema-check pytest

bench: $(STAMP) components
	$(BIN)/python -m bench

# prod-7500 at its size on this machine (kwok, every agent pod, the controllers under their limits):
# about an hour on 2 cores; its figures are in docs/scale.md.
bench-scale: $(STAMP) components
	$(BIN)/python -m bench.scale_tier

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis $(AZURITE_DIR)/node_modules $(COMPONENTS_BIN)
