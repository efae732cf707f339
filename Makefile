# kernelbook: build the book, run the tests.
#
#   make book                      execute the notebooks (measure on a GPU, replay without) and build
#   make book MODE=replay          never measure, even on a GPU
#   make book PROFILE=0            measure without the Nsight Compute profiles (quicker)
#   make book ONLY='lenet/*' PARAMS='repeats=20 batch_sizes=[100, 1000] label="a b"'
#   make notebook NB=lenet/00      write book/lenet/00_baseline.ipynb for papermill / Jupyter
#   make book WORKERS=1            one notebook after another, in one process (default: replaying,
#                                  a local Dask cluster of one worker per core; measuring, 1)
#   make book FORCE=1              execute every notebook (by default a replay keeps those whose inputs are unchanged)
#   make book GPUS=2               measure on two GPUs, one dask-cuda worker each (pip install -e '.[gpus]')
#   make test                      lint (ruff), then the tests that need no GPU, but the whole-book ones (one worker per core)
#   make test-book                 the tests that read the whole book: one strict replay + build (minutes)
#   make test-gpu                  the tests that need a CUDA GPU
#   make render                    screenshots of every page in headless Chromium (1280 and 400 px) into _build/screens
#   make browser                   install headless Chromium if absent (test-book and render need it)
#   make clean                     remove _build/ (the environment stays; `make distclean` removes it too)
#
# The environment is .venv/, created from pyproject.toml; it is reinstalled when pyproject.toml
# changes; it registers the `kernelbook` Jupyter kernel in .venv. PARAMS is a space-separated
# list of NAME=VALUE, each as `kernelbook run -p NAME=VALUE` takes it; a value may hold spaces
# inside brackets or quotes ([100, 1000], "a b"). It travels whole in KERNELBOOK_PARAMS, so the
# shell never splits or unquotes it.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

MODE   ?= auto
PROFILE ?= 1
ONLY   ?=
PARAMS ?=
STRICT ?= 1
WORKERS ?=
GPUS   ?=
FORCE  ?=

# Nsight Compute profiles every step when measuring; PROFILE=0 skips it for quick runs.
export KERNELBOOK_PROFILE := $(PROFILE)

RUN_ARGS   := --mode $(MODE) $(if $(ONLY),--only '$(ONLY)') $(if $(WORKERS),--workers $(WORKERS)) $(if $(GPUS),--gpus $(GPUS)) $(if $(filter 1,$(FORCE)),--force)
BUILD_ARGS := $(if $(filter 1,$(STRICT)),,--no-strict)

.PHONY: book run build test test-book test-gpu render browser clean distclean env notebook

book run: export KERNELBOOK_PARAMS = $(PARAMS)

# One recipe, not `book: run build`, so that `make -j` cannot build before the batch is done.
book: $(STAMP)
	$(BIN)/kernelbook run $(RUN_ARGS)
	$(BIN)/kernelbook build $(BUILD_ARGS)

env: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing kernelbook and its dependencies into $(VENV) ..."
	@$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[test]"
	@$(BIN)/python -m kernelbook.kernelspec
	@touch $@

run: $(STAMP)
	$(BIN)/kernelbook run $(RUN_ARGS)

build: $(STAMP)
	$(BIN)/kernelbook build $(BUILD_ARGS)

test: $(STAMP)
	$(BIN)/ruff check kernelbook tests scripts
	$(BIN)/python -m pytest -m "not gpu and not book" -n auto --maxschedchunk 2 -v

# The one strict whole-book build of CI (tests/test_book.py's fixture): .ci/run calls it after `make test`.
test-book: $(STAMP) browser
	$(BIN)/python -m pytest -m "book and not gpu" -v

# tests/test_layout.py measures the built pages in headless Chromium: installed here when absent.
browser:
	bash scripts/install_browser.sh

test-gpu: $(STAMP)
	$(BIN)/python -m pytest -m gpu -v

NB ?= lenet/00
notebook: $(STAMP)
	$(BIN)/kernelbook notebook $(NB)

render: $(STAMP)
	bash scripts/render_pages.sh

clean:
	rm -rf _build

distclean: clean
	rm -rf $(VENV)
