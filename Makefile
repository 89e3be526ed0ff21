# Two commands from a fresh machine: `make demo` and `make test`.
# Each area adds its own targets in mk/<area>.mk (editor, agents, ...).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
ASTRA := $(VENV)/bin/astra
# The stamp changes whenever pyproject.toml does, so setup re-runs only then.
STAMP := $(VENV)/.setup-$(shell cat pyproject.toml mk/*.mk 2>/dev/null | sha1sum | cut -c1-12)

# Extra setup steps and test targets contributed by mk/*.mk.
SETUP_EXTRA :=
TEST_EXTRA  :=
-include mk/*.mk

.PHONY: setup test test-python demo clean
setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,cluster]'
	$(MAKE) --no-print-directory $(SETUP_EXTRA)
	rm -f $(VENV)/.setup-* && touch $@

test: setup
	$(MAKE) --no-print-directory test-python $(TEST_EXTRA)

# One pytest process per core, whole files to each (module fixtures built once); the slowest
# tests listed so a run's log says where its time went.
PYTEST_WORKERS ?= auto
test-python: setup
	$(PY) -m pytest -q -ra -n $(PYTEST_WORKERS) --dist loadfile --durations=30

demo: setup
	$(ASTRA) kernels examples/silu_and_mul.cu
	$(ASTRA) optimize examples/silu_and_mul.cu --kernel silu_and_mul --llm offline --backend auto

clean:
	rm -rf $(VENV) .astra build *.egg-info bundled/libs bundled/libs.tar.xz bundled/deps .e2e-python astra-cuda-*.vsix
