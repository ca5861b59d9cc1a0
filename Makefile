# Every target sets itself up: a fresh clone needs only python3 (>= 3.11) and make.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed-stamp
INCIDENT ?= fixtures/incidents/order-service-threadpool-config

.PHONY: setup demo test lint system-deps replay bench fixtures clean wheel-smoke docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

## The embedded default: replay a recorded incident with the playbook reasoner, no servers.
demo: $(STAMP)
	$(VENV)/bin/opsagent investigate $(INCIDENT) --no-live --no-lessons

## Debian's Prometheus and Alertmanager (tests that run real servers), PostgreSQL (the shared store's
## tests) and Chromium (the headless screenshot test of the report page).
PG_CTL := $(firstword $(wildcard /usr/lib/postgresql/*/bin/pg_ctl))
system-deps:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v prometheus-alertmanager >/dev/null \
		&& command -v chromium >/dev/null && [ -n "$(PG_CTL)" ]; then \
		echo "prometheus, alertmanager, postgresql and chromium present"; \
	elif command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			prometheus prometheus-alertmanager postgresql chromium >/dev/null; \
	else \
		echo "apt-get not found: tests that need Prometheus, Alertmanager, PostgreSQL or Chromium will be skipped"; \
	fi

test: $(STAMP) system-deps
	$(PY) -m pytest

## The wheel as a user installs it: built, installed into a fresh venv outside the checkout, demo run from
## there (also part of `make test`).
wheel-smoke: $(STAMP)
	$(PY) -m pytest tests/test_packaging.py

lint: $(STAMP)
	$(VENV)/bin/ruff check opsagent adapters tests benchmarks fixtures/generate.py
	$(VENV)/bin/ruff format --check opsagent adapters tests benchmarks
	$(VENV)/bin/mypy

## The docs site: regenerate the reference pages from the code, then build with --strict into site/
## (tests/test_docs.py does the same check and build in `make test`).
docs: $(STAMP)
	$(PY) docs/generate.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

replay: $(STAMP)
	$(VENV)/bin/opsagent replay fixtures/incidents

bench: $(STAMP)
	$(PY) benchmarks/replay_bench.py fixtures/incidents

fixtures: $(STAMP)
	$(PY) fixtures/generate.py
	$(VENV)/bin/opsagent fixtures validate fixtures/incidents

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
