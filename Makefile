# One entry point. `make book` builds (and opens) the book; `make test` runs every check.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
JB := $(VENV)/bin/jupyter-book
NOTEBOOKS := $(shell find book -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)
LEDGER_NB := book/appendix/claims.ipynb
CHAPTER_NBS := $(filter-out $(LEDGER_NB),$(NOTEBOOKS))
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=3600
XDIST := -n $(JOBS) --dist loadfile
# The paper scale builds into its own folder (own execution cache): quick outputs are never shown as paper ones.
OUT := $(if $(filter paper,$(MMTOKEN_SCALE)),_build/paper,.)
export MMTOKEN_PROGRESS ?= off
# The book's own runs (nbval, the builds, the references' execution) record their claims in the ledger; nothing
# else does (a reader's session, the unit tests): mmtoken.config.recording.
RECORD := MMTOKEN_RECORD=1
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup book build pdf test unit slow lint nbval strict sync claims figures bench clean reader meta trained reproduce scale-times

setup:
	bash scripts/setup.sh

# `make book` renders the stored outputs: the quick-scale build seeds its execution cache with the
# stored notebooks and executes only chapters whose .md changed since (scripts/stored_outputs.py).
# EXECUTE=all empties the cache first: every chapter is executed. The paper scale is never seeded.
EXECUTE ?= stored
build: setup  ## the HTML book from the stored outputs (EXECUTE=all: execute every chapter); also the reader notebooks
	@case "$(EXECUTE)" in stored|all) ;; *) echo "EXECUTE must be stored or all, got '$(EXECUTE)'" >&2; exit 2;; esac
	@if [ "$(EXECUTE)" = all ]; then rm -rf $(OUT)/_build/.jupyter_cache; \
	elif [ "$(OUT)" = . ]; then $(PY) scripts/stored_outputs.py seed --stale execute; fi
	$(RECORD) $(JB) build . --builder html $(if $(filter paper,$(MMTOKEN_SCALE)),--path-output $(OUT))
	$(MAKE) --no-print-directory reader

book: build  ## build the book, then open it in a browser when one is available
	@echo "book: file://$(abspath $(OUT))/_build/html/index.html"
	@if [ -z "$$CI" ] && { [ -n "$$DISPLAY" ] || [ "$$(uname)" = Darwin ]; }; then \
	    $(PY) -m webbrowser -t "file://$(abspath $(OUT))/_build/html/index.html" >/dev/null 2>&1 || true; fi

# `make pdf`: the book as one PDF, from the stored outputs (Jupyter Book's LaTeX builder, xelatex). Needs
# Debian's texlive-xetex, texlive-latex-extra, texlive-fonts-recommended, latexmk and fonts-dejavu
# (`sudo apt-get install ...`; the release workflow installs them); written to _build/mmtoken.pdf.
TEX_PACKAGES := texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended latexmk fonts-dejavu
print-tex-packages:  # the Debian packages make pdf needs (the release workflow installs them)
	@echo $(TEX_PACKAGES)

pdf: setup  ## the book as one PDF (_build/mmtoken.pdf), from the stored outputs; needs TeX (see the Makefile)
	@command -v xelatex >/dev/null && command -v latexmk >/dev/null || { \
	    echo "make pdf needs xelatex and latexmk: sudo apt-get install $(TEX_PACKAGES)" >&2; exit 2; }
	$(PY) scripts/stored_outputs.py seed --stale execute
	rm -rf _build/latex
	$(RECORD) $(JB) build . --builder pdflatex
	cp _build/latex/mmtoken.pdf _build/mmtoken.pdf
	@echo "pdf: $(abspath _build/mmtoken.pdf)"

strict: setup  ## -W build: a failing cell, a warning or a broken reference fails
	$(RECORD) $(JB) build . --builder html -W -n --keep-going

unit: setup  ## the fast unit tests (end-to-end tests marked `slow` are left out; `make slow` runs them)
	$(PY) -m pytest $(XDIST) tests -m "not slow"

slow: setup  ## only the slow end-to-end tests
	$(PY) -m pytest $(XDIST) tests -m slow

lint: setup  ## ruff: the lint rules and the format of pyproject.toml (`ruff format .` applies the format)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/check_sync.py

nbval: setup
	$(RECORD) $(PY) -m pytest $(XDIST) $(CHAPTER_NBS) $(NBVAL)
	$(RECORD) $(PY) -m pytest $(LEDGER_NB) $(NBVAL)

# Every notebook is executed exactly once (see CONTRIBUTING.md, "What make test runs"):
# 1. nbval executes each chapter's .ipynb, $(JOBS) at a time, and checks its stored outputs; each
#    chapter records its claims' results (mmtoken.book.ledger) in the results cache;
# 2. the strict build renders those stored outputs (scripts/stored_outputs.py seeds the build's
#    execution cache with them) and executes nothing; the log line counts executions per notebook;
# 3. the unit tests and the claims appendix, which read the recorded claim results.
test: setup lint  ## everything, ending with the pytest summary
	@echo "make test 1/3: nbval executes every chapter once ($(JOBS) at a time)"
	$(RECORD) $(PY) -m pytest -p no:cacheprovider $(XDIST) $(CHAPTER_NBS) $(NBVAL) --durations=20
	@echo "make test 2/3: strict build of the outputs nbval checked (no execution)"
	$(PY) scripts/stored_outputs.py seed
	mkdir -p _build
	set -o pipefail; $(RECORD) $(JB) build . --builder html -W -n --keep-going 2>&1 | tee _build/strict.log
	$(PY) scripts/stored_outputs.py count _build/strict.log
	@echo "make test 3/3: unit tests and the claims appendix (recorded claim results)"
	$(PY) -m pytest $(XDIST) tests --durations=30
	$(RECORD) $(PY) -m pytest -p no:cacheprovider $(LEDGER_NB) $(NBVAL)

sync: setup  ## update each chapter's .ipynb from its .md (the source), then re-execute the references
	$(VENV)/bin/jupytext --to ipynb --update $(shell find book -name '*.md' | xargs grep -l '^jupytext:' | sort)
	for nb in $(NOTEBOOKS); do $(RECORD) $(VENV)/bin/jupyter execute --inplace "$$nb" || exit 1; done

claims: setup
	$(PY) -m mmtoken claims

figures: setup
	$(PY) -m mmtoken figures --out figures

reader:  ## the notebooks branch (reader notebooks + binder/) in _build/reader, from the last build
	$(PY) scripts/reader_branch.py --html $(OUT)/_build/html --out $(OUT)/_build/reader

meta:  ## check that everything naming the address or version agrees with pyproject.toml
	$(PY) scripts/project_meta.py check

# Chapters 9 and 12's trained runs travel with the repository (book/trained/, mmtoken.book.trained): a cold
# `make test` reads them while their code is unchanged. After changing training code, retrain and commit them:
trained: setup  ## retrain chapters 9 and 12 from an empty results folder and rewrite book/trained (about 30 min)
	$(PY) scripts/trained.py make

# Everything from an empty data folder, nbval against the stored outputs, the carried runs against the retrained
# ones; writes benchmarks/results/reproduce.json (shown on the claims appendix). The release workflow runs it.
reproduce: setup  ## the whole book again from nothing, compared with what the repository stores (about an hour)
	$(PY) scripts/reproduce.py --jobs $(JOBS)

bench: setup  ## benchmarks (not part of the tests): results in benchmarks/results/
	$(PY) benchmarks/run_all.py

# Each chapter as a reader runs it (fresh kernel, empty data folder), timed at both scales; about an hour at paper
# scale on 2 cores (a chapter is stopped at 10 minutes). Results in benchmarks/results/paper_scale.json.
scale-times: setup  ## time every theory chapter at quick and at paper scale (not part of the tests)
	$(PY) benchmarks/paper_scale.py --scale quick
	$(PY) benchmarks/paper_scale.py --scale paper

clean:
	rm -rf _build figures
