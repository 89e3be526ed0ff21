# CPU backend (issue 3): build its runtime objects and precompiled shim headers once at setup, so
# that first compiles are fast. Harmless where there is no g++ (the backend then says so itself).
SETUP_EXTRA += cpu-warm
.PHONY: cpu-warm
cpu-warm:
	-$(PY) -c 'from astra_cuda.backends.cpu import toolchain; toolchain.warm()'
