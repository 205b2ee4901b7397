# Data Movement Limits: two commands do everything on a fresh machine (Python 3.11 and make).
#   make book   set up .venv, then build the whole book into _build/html
#   make test   build what the tests need, then run every test
# Options: SCENARIO=FILE.yaml|NAME (make book), SET="key=value ..." (make book), PYTHON=python3.11

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BUILD_ARGS := $(if $(SCENARIO),--scenario $(SCENARIO)) $(foreach s,$(SET),--set $(s))
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: book test lint derivations clean venv browser-deps

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

book: $(STAMP)
	$(PY) -m dmlimits build $(BUILD_ARGS)

# The tests read the default book (executed notebooks and HTML); build it first when missing
# or older than its sources.
_build/html/index.html: $(STAMP) $(shell find lib notebooks book -type f -not -name '*.pyc' 2>/dev/null) _config.yml _toc.yml
	$(PY) -m dmlimits build

# The library, sources, builds and HTML tests, plus nbval: every executed notebook of the
# default book is re-run and its outputs (glued numbers included) compared.
test: _build/html/index.html lint browser-deps
	$(PY) -m pytest tests _build/executed --nbval

# The browser test drives Debian's Chromium through its driver; never a downloaded browser.
browser-deps:
	@if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver for the browser test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; \
	fi

lint: $(STAMP)
	$(PY) -m ruff check lib tests bench

derivations: $(STAMP)
	$(PY) -m dmlimits derivations --verify

clean:
	rm -rf _build
