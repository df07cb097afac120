# One entry point. `make book` builds (and opens) the book; `make test` runs every check.
VENV ?= .venv
PY := $(VENV)/bin/python
JB := $(VENV)/bin/jupyter-book
NOTEBOOKS := $(shell find book -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)
export MMTOKEN_PROGRESS ?= off
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup book build test unit slow lint nbval strict sync claims figures bench clean reader meta

setup:
	bash scripts/setup.sh

build: setup  ## the HTML book; the build also writes the reader notebooks (_build/html/notebooks)
	$(JB) build . --builder html
	$(MAKE) --no-print-directory reader

book: build  ## build the book, then open it in a browser when one is available
	@echo "book: file://$(CURDIR)/_build/html/index.html"
	@if [ -z "$$CI" ] && { [ -n "$$DISPLAY" ] || [ "$$(uname)" = Darwin ]; }; then \
	    $(PY) -m webbrowser -t "file://$(CURDIR)/_build/html/index.html" >/dev/null 2>&1 || true; fi

strict: setup  ## -W build: a failing cell, a warning or a broken reference fails
	$(JB) build . --builder html -W -n --keep-going

unit: setup  ## the fast unit tests (end-to-end tests marked `slow` are left out; `make slow` runs them)
	$(PY) -m pytest tests -m "not slow"

slow: setup  ## only the slow end-to-end tests
	$(PY) -m pytest tests -m slow

lint: setup  ## ruff: the lint rules and the format of pyproject.toml (`ruff format .` applies the format)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/check_sync.py

nbval: setup
	$(PY) -m pytest --nbval $(NOTEBOOKS) --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=3600

test: lint strict  ## everything, ending with the pytest summary
	$(PY) -m pytest tests $(NOTEBOOKS) --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=3600

sync: setup  ## update each chapter's .ipynb from its .md (the source), then re-execute the references
	$(VENV)/bin/jupytext --to ipynb --update $(shell find book -name '*.md' | xargs grep -l '^jupytext:' | sort)
	for nb in $(NOTEBOOKS); do $(VENV)/bin/jupyter execute --inplace "$$nb" || exit 1; done

claims: setup
	$(PY) -m mmtoken claims

figures: setup
	$(PY) -m mmtoken figures --out figures

reader:  ## the notebooks branch (reader notebooks + binder/) in _build/reader, from the last build
	$(PY) scripts/reader_branch.py

meta:  ## check that everything naming the address or version agrees with pyproject.toml
	$(PY) scripts/project_meta.py check

bench: setup  ## benchmarks (not part of the tests): results in benchmarks/results/
	$(PY) benchmarks/run_all.py

clean:
	rm -rf _build figures
