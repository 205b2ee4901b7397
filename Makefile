# Data Movement Limits: two commands do everything on a fresh machine (Python 3.11 and make).
#   make book   set up .venv, then build the whole book into _build/html
#   make student  the student edition (no solutions, no instructors' pages) into _build/student/html
#   make slides   the twelve lectures as offline reveal.js decks into _build/slides
#   make pdf      the book's PDF (installs Debian's TeX when missing) into _build/pdf
#   make test   build what the tests need, then run every test
#   make lab    JupyterLab on the project: the chapters open as notebooks (jupytext), library installed
# Options: SCENARIO=FILE.yaml|NAME (make book), SET="key=value ..." (make book), PYTHON=python3.11,
#          LAB_ARGS="--no-browser --port=8899" (make lab)

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BUILD_ARGS := $(if $(SCENARIO),--scenario $(SCENARIO)) $(foreach s,$(SET),--set $(s))
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: book student test check lint derivations clean venv browser-deps lab presets slides pdf pdf-deps

# Sweeps are cached on disk, content-addressed by the search's modules, the data and the
# scenario: a changed formula or constant never reads an old sweep.  DMLIMITS_SWEEP_CACHE=off
# switches it off.
export DMLIMITS_SWEEP_CACHE ?= $(CURDIR)/_build/cache/sweeps
# Built formulas (sympy's results and lambdified functions) are kept the same way, so that each
# kernel and test process does not derive them again.  DMLIMITS_FORMULA_CACHE=off: none kept.
export DMLIMITS_FORMULA_CACHE ?= $(CURDIR)/_build/cache/formulas

# Python may write bytecode (__pycache__ beside lib/'s and tests/' modules, ignored by git)
# even where the environment sets PYTHONDONTWRITEBYTECODE, as the project's machine does:
# without it pytest rewrote every test module's assertions again in each worker (about 6 s of
# each worker's collection) and every kernel compiled the library again.
export PYTHONDONTWRITEBYTECODE :=

venv: $(STAMP)

# The pinned requirements are installed with uv (pinned here; under a minute instead of pip's
# two on the project's machine), falling back to pip when uv cannot be had or fails;
# INSTALLER=pip skips uv.  uv compiles the bytecode as pip does: without it, where
# PYTHONDONTWRITEBYTECODE is set (as on the project's machine), every kernel and test process
# would compile sympy and the rest from source, and the book took 90 s longer.
UV_VERSION := 0.13.9
INSTALLER ?= uv
PIP := $(PY) -m pip install --quiet --disable-pip-version-check

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ "$(INSTALLER)" != uv ]; then \
	  echo "installing requirements.txt with pip"; $(PIP) -r requirements.txt; \
	elif ! $(PIP) uv==$(UV_VERSION) >/dev/null 2>&1; then \
	  echo "could not install uv $(UV_VERSION): installing requirements.txt with pip"; \
	  $(PIP) -r requirements.txt; \
	elif ! $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) -r requirements.txt; then \
	  echo "uv failed (above): installing requirements.txt with pip"; \
	  $(PIP) -r requirements.txt; \
	else \
	  echo "installed requirements.txt with uv $(UV_VERSION)"; \
	fi
	$(PIP) --no-deps --no-build-isolation -e .
	$(PY) -m dmlimits.build.vendor
	@touch $@

book: $(STAMP)
	$(PY) -m dmlimits build $(BUILD_ARGS)

# The student edition (no solutions, no instructors' pages) into _build/student/html, from the
# same sources; the executed chapters come from the cache the default book filled.
student: $(STAMP)
	$(PY) -m dmlimits build --edition student $(BUILD_ARGS)

# tests/test_editions.py reads it beside the default book; built after it, so that it reuses
# its executed chapters.
_build/student/html/index.html: _build/html/index.html
	$(PY) -m dmlimits build --edition student

# The tests read the default book (executed notebooks and HTML); build it first when missing
# or older than its sources.
_build/html/index.html: $(STAMP) $(shell find lib notebooks book -type f -not -name '*.pyc' 2>/dev/null) _config.yml _toc.yml
	$(PY) -m dmlimits build

# The library, sources, builds and HTML tests, plus nbval: every executed notebook of the
# default book is re-run and its outputs (glued numbers included) compared.  On every core
# (pytest-xdist); a file's tests stay on one worker, so each notebook runs in one kernel.  The
# files go out longest first (tests/conftest.py's LONGEST_FIRST): --no-loadscope-reorder keeps
# that order instead of xdist's, which sorts files by how many tests they hold.
test: _build/html/index.html _build/student/html/index.html _build/slides/index.html _build/pdf/data-movement-limits.pdf lint browser-deps
	$(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=15 tests _build/executed --nbval

# The course's twelve lectures (lectures/*.md) as reveal.js decks that work offline, into
# _build/slides with an index.html that lists them (tests/test_slides.py reads them).
slides: $(STAMP)
	$(PY) -m dmlimits.build.slides

# make test builds the decks when missing or older than the lectures and the library.
_build/slides/index.html: $(STAMP) $(shell find lib lectures -type f -not -name '*.pyc' 2>/dev/null)
	$(PY) -m dmlimits.build.slides

# The book of every scenario preset, each into _build/scenarios/NAME/html (the sweeps and the
# executed chapters they share with other books are taken from the caches).  The template-prose
# test reads them: `make presets` then `.venv/bin/python -m pytest tests/test_template_prose.py`.
presets: $(STAMP)
	@failed=""; \
	for p in $$($(PY) -c 'from dmlimits.core import scenario as sc; print(*sc.preset_names())'); do \
	  echo "== $$p"; $(PY) -m dmlimits build --scenario $$p || failed="$$failed $$p"; \
	done; \
	if [ -n "$$failed" ]; then echo "these presets' books failed:$$failed"; exit 1; fi

# The book's PDF (XeLaTeX, from the default book's executed chapters; docs/performance.md gives
# its time).  Debian's TeX is installed when missing (about 150 MB to download).
pdf: _build/html/index.html pdf-deps
	$(PY) -m dmlimits build --pdf

_build/pdf/data-movement-limits.pdf: _build/html/index.html
	@$(MAKE) --no-print-directory pdf

pdf-deps:
	@if ! { command -v xelatex && command -v latexmk && command -v pdftotext \
	        && fc-list | grep -q FreeSerif; } >/dev/null 2>&1; then \
	  echo "installing Debian's TeX (XeLaTeX, latexmk, FreeFont) and poppler-utils for the PDF"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends \
	    texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended \
	    latexmk fonts-freefont-otf poppler-utils; \
	fi

# The browser test drives Debian's Chromium through its driver; never a downloaded browser.
browser-deps:
	@if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then \
	  echo "installing Debian's chromium and chromium-driver for the browser test"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver; \
	fi

# The fast loop while changing a formula: lint and the library's tests on every core, no build.
# The tests run `derivations --verify` (every step proved, every premise checked) themselves.
check: lint
	$(PY) -m pytest tests -q -n auto --dist loadgroup -m "not slow and not book"

# JupyterLab (pinned in requirements.txt, with jupytext): the MyST chapters open as notebooks
# (lab/overrides.json makes the Jupytext notebook the default viewer of Markdown files).
# As root (a container, CI) JupyterLab refuses to start without --allow-root.
LAB_ARGS ?=
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: $(STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" $(LAB_ROOT) \
	  --LabApp.app_settings_dir="$(CURDIR)/lab" --LabApp.default_url=/lab/tree/notebooks/model.md \
	  $(LAB_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check lib tests bench

derivations: $(STAMP)
	$(PY) -m dmlimits derivations --verify

clean:
	rm -rf _build
