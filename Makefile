# The two commands of the README: `make train` and `make test`. Both create the environment if missing.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: train test venv setup export readme docs lab hooks lint clean-venv gpu-wheels

# (re)install when the package's requirements change
$(STAMP): settings.ini setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# the long-context blocks guide's first command: the same as `make venv`
setup: venv

train: $(STAMP)
	$(BIN)/longctx_train $(ARGS)

# two pytest-xdist workers (the machines have 2 cores) share the test files and the notebooks' runs (tests/conftest.py)
test: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q --durations=15 -n 2 tests $(ARGS)

# notebooks -> package, README; then strip notebook metadata
export: $(STAMP)
	$(BIN)/nbdev_clean
	$(BIN)/nbdev_export
	$(BIN)/python .ci/readme.py

readme: $(STAMP)
	$(BIN)/python .ci/readme.py

# docs site -> _docs/: nbdev_docs where quarto is installed, else executes the notebooks and renders them with nbconvert
docs: $(STAMP)
	$(BIN)/python .ci/docs.py $(ARGS)

# run the tutorials in a Jupyter kernel and keep their outputs (plots, tables) in the notebooks, for the repository's page; then commit
.PHONY: tutorials
tutorials: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python .ci/tutorials.py $(ARGS)

# JupyterLab on the notebooks (the source of the package)
lab: $(STAMP)
	$(BIN)/jupyter lab nbs

# nbdev's hooks: notebooks cleaned when saved in Jupyter, and git's merge driver for notebook conflicts
hooks: $(STAMP)
	$(BIN)/nbdev_install_hooks

# pyflakes-class errors in the package and the tests (ruff.toml)
lint: $(STAMP)
	$(BIN)/ruff check longctx_nb tests

# wheels of nbdev, fastcore, execnb and what they need (Python 3.12, manylinux) in .whl/, for a GPU machine without a
# network: examples/gpu_check.sh's cells step runs the notebooks with them (see the top of examples/gpu_check.sh)
gpu-wheels:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) .ci/gpu_wheels.py --dest .whl $(ARGS)

clean-venv:
	rm -rf $(VENV)
