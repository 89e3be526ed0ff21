# The real-world suite (issue 23): public CUDA kernels, pinned by commit, taken unedited through
# the new-user path. Not part of `make test`: it needs the mirrors (benchmarks/realworld/README.md).
#   make realworld                 fetch into the git-ignored cache, run the CPU stages over every
#                                  kernel, write benchmarks/results/realworld-cpu.json and the README table
#   make realworld-pack            the cache as one .tar.xz to carry to the GPU machine
#   make realworld-env             the suite's own environment, what a user building these projects has:
#                                  the CUDA libraries' headers (pyproject's [realworld]) and torch's CUDA
#                                  build, whose headers PyTorch extensions compile with (--no-deps: never
#                                  imported, its CUDA libraries are not needed; ~3 GB, once), and the
#                                  cuDNN frontend's headers TransformerEngine's build passes (--no-deps:
#                                  headers only, not its 500 MB of CUTLASS DSL)
REALWORLD_JOBS ?= 2
RW := benchmarks/realworld

RW_TORCH := torch==2.14.1
RW_HEADERS := nvidia-cudnn-frontend==1.32.0
RW_ENV := $(VENV)/.realworld-$(shell (grep -A4 '^realworld = ' pyproject.toml; echo $(RW_TORCH) $(RW_HEADERS)) | sha1sum | cut -c1-12)

.PHONY: realworld realworld-fetch realworld-pack realworld-env
realworld-env: $(RW_ENV)
$(RW_ENV): $(STAMP)
	$(PY) -m pip install -q -e '.[test,cluster,realworld]'
	$(PY) -m pip install -q --no-deps '$(RW_TORCH)' '$(RW_HEADERS)'
	rm -f $(VENV)/.realworld-* && touch $@

realworld-fetch: realworld-env
	$(PY) $(RW)/fetch.py

realworld: realworld-fetch
	$(PY) $(RW)/run.py --backend cpu --jobs $(REALWORLD_JOBS)
	$(PY) $(RW)/report.py benchmarks/results/realworld-cpu.json --readme $(RW)/README.md

realworld-pack: setup
	$(PY) $(RW)/fetch.py --pack
