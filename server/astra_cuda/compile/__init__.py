"""Compiling a user's code: the toolchains and what they say.

- `toolkit`: where the CUDA toolkit is (the project's compile_commands.json compiler,
  `CUDA_HOME`/`CUDA_PATH`, `PATH`), and its version.
- `nvcc`: the user's own file, unmodified, compiled by nvcc to a cubin for the target
  architecture with the project's flags, under `astra_cuda.compile.confine`; diagnostics at the user's
  lines, resources, each kernel's mangled name; cached (`depcache`).
- `messages`: the compilers' logs (EDG front end, the host preprocessor, ptxas) read into
  diagnostics and resource usage — shared by nvcc and NVRTC (`astra_cuda.compile.static`).
- `cubin`: the kernels of a cubin (ELF symbols, demangled).
- `depcache`: a build cache keyed by the content of a file and of every header it read.
- `torch_ext`: PyTorch-extension files: torch's include folders and flags, its element types.
- `nvrtc`: NVRTC's C API through ctypes (libnvrtc found by cuda-pathfinder).

NVRTC on a cut unit (`astra_cuda.compile.static`) remains the compiler where no toolkit exists.
"""

# `extract.CompileUnit.search_cut`: which compiler the search's proof allows (`fastpath`), said in
# every verdict; here, where every compile module can read them without importing another
SEARCH_NVRTC = "NVRTC on the cut unit proven against the file (the search's compile; final verdicts: nvcc)"
SEARCH_NVCC = "nvcc on the cut unit proven against the file (the search's compile; final verdicts: nvcc on the file)"
