# The CLI installed the ways the README says (a wheel built here, into a fresh pipx home and a fresh
# venv; then `astra --version` and `astra kernels examples/`). Minutes: not part of `make test`.
.PHONY: test-install
test-install:
	scripts/test-install python3
