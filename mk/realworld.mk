# The real-world suite (issue 23): public CUDA kernels, pinned by commit, taken unedited through
# the new-user path. Not part of `make test`: it needs the mirrors (benchmarks/realworld/README.md).
#   make realworld                 fetch into the git-ignored cache, run the CPU stages over every
#                                  kernel, write benchmarks/results/realworld-cpu.json and the README table
#   make realworld-pack            the cache as one .tar.xz to carry to the GPU machine
REALWORLD_JOBS ?= 2
RW := benchmarks/realworld

.PHONY: realworld realworld-fetch realworld-pack
realworld-fetch: setup
	$(PY) $(RW)/fetch.py

realworld: realworld-fetch
	$(PY) $(RW)/run.py --backend cpu --jobs $(REALWORLD_JOBS)
	$(PY) $(RW)/report.py benchmarks/results/realworld-cpu.json --readme $(RW)/README.md

realworld-pack: setup
	$(PY) $(RW)/fetch.py --pack
