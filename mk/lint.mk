# Lint and type check (seconds): ruff over the Python code, mypy strict on the facade, the
# snapshot, the contract, the language server, the jobs, executors and evaluation (pyproject.toml).
TEST_EXTRA += test-lint

.PHONY: test-lint
test-lint: setup
	$(VENV)/bin/ruff check server tests benchmarks
	$(VENV)/bin/mypy
