# Two commands on a fresh machine: `make demo` and `make test`.
# Each creates its own virtual environment (.venv) and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev
# The demo and the tests run on CPU; 8 fake devices give the tests a real mesh.
export JAX_PLATFORMS ?= cpu

.PHONY: venv demo demo-uknowbert test test-fast clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $(STAMP)

# The tests exercise the torch/tfds/beam extras too. The CPU build of PyTorch
# goes first: an unpinned torch would pull GBs of CUDA packages.
$(DEV): $(STAMP)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev]'
	touch $(DEV)

venv: $(DEV)

# A real small pretraining on CPU on the embedded Korean corpus (see README).
# `make demo DEMO_ARGS=--uknowbert`: UKnowBERT-S (tiny) with all five objectives.
DEMO_ARGS ?=
demo: $(STAMP)
	$(VENV)/bin/kjax demo --workdir runs/demo $(DEMO_ARGS)

demo-uknowbert: $(STAMP)
	$(VENV)/bin/kjax demo --workdir runs/demo_uknowbert --uknowbert

test: $(DEV)
	JAX_NUM_CPU_DEVICES=8 $(PY) -m pytest tests -q -n 2 --durations=10

# Everything but the tests marked slow.
test-fast: $(DEV)
	JAX_NUM_CPU_DEVICES=8 $(PY) -m pytest tests -q -n 2 -m "not slow"

clean:
	rm -rf runs build *.egg-info
