"""Issue 25: a dequantizing kernel in the pattern of bitsandbytes' kDequantizeBlockwise (written
here): CUB's block load/store move `valid_items` elements from the address they are given (a count
set in the `if`/`else` a template argument decides, an address chosen by one), a byte code read from
a local `unsigned char` array indexes a 256-entry table, and a `switch` over a template argument
walks the case it picks (a `#pragma` after its label included), an enumerator argument its number."""
from .test_infer_asm_accesses import infer

DEQUANT = (
    "#include <cub/cub.cuh>\n"
    "typedef enum DataType_t { General8bit = 0, FP4 = 1 } DataType_t;\n"
    "template <typename T, int TILE, int THREADS, int NUM, int DATA_TYPE>\n"
    "__global__ void dequant(float* code, unsigned char* A, float* absmax, T* out, const int blocksize, const int n) {\n"
    "  int valid_load = 0, valid_store = 0;\n  unsigned char q[NUM];\n  T vals[NUM * ((DATA_TYPE > 0) ? 2 : 1)];\n"
    "  typedef cub::BlockLoad<unsigned char, THREADS, NUM, cub::BLOCK_LOAD_WARP_TRANSPOSE> LoadChar;\n"
    "  typedef cub::BlockStore<T, THREADS, NUM, cub::BLOCK_STORE_WARP_TRANSPOSE> StoreT;\n"
    "  __shared__ typename LoadChar::TempStorage lc;\n  __shared__ typename StoreT::TempStorage st;\n"
    "  for (int i = blockIdx.x * TILE; i < gridDim.x * TILE; i += gridDim.x * TILE) {\n"
    "    if (DATA_TYPE > 0) {\n"
    "      valid_load = min(TILE, static_cast<int>((static_cast<long>(n) + 1) / 2) - i);\n"
    "      valid_store = min(TILE * 2, n - i * 2);\n"
    "    } else {\n      valid_load = min(TILE, n - i);\n      valid_store = valid_load;\n    }\n"
    "    float m = absmax[(i + threadIdx.x * NUM) >> (31 - __clz(blocksize))];\n"
    "    __syncthreads();\n    LoadChar(lc).Load(&(A[i]), q, valid_load, 128);\n"
    "    switch (DATA_TYPE) {\n    case General8bit:\n#pragma unroll NUM\n"
    "      for (int j = 0; j < NUM; j++) vals[j] = __ldg(&code[q[j]]) * m;\n      break;\n"
    "    case FP4:\n#pragma unroll NUM\n"
    "      for (int j = 0; j < NUM; j++) { vals[j * 2] = (q[j] >> 4) * m; vals[j * 2 + 1] = (q[j] & 15) * m; }\n"
    "      break;\n    }\n"
    "    __syncthreads();\n    StoreT(st).Store(&(out[(DATA_TYPE > 0) ? i * 2 : i]), vals, valid_store);\n  }\n}\n"
    "void run(float* code, unsigned char* A, float* absmax, float* out, int blocksize, int n) {\n"
    "  dequant<float, 512, 64, 8, General8bit><<<(n + 511) / 512, 64>>>(code, A, absmax, out, blocksize, n);\n}\n")


def test_cub_block_load_and_store_reach_valid_items_and_a_byte_code_indexes_256_entries(project):
    """Whole 512-element tiles over n, the last one partial: `Store(&out[i], vals, min(512, n - i))`
    writes out[0 .. n) (a whole tile past n before: the tail never written, so poisoned), the load
    reads A[0 .. n), and `code[q[j]]` in `case 0:` with `q` an `unsigned char` array reads at most
    code[255] (the switch was not walked before: `code` untouched)."""
    s, p = infer(project, "dq.cu", DEQUANT, "dequant")
    assert s.args["out"].output and s.args["out"].shape == ("n",)
    assert not s.args["A"].output and s.args["A"].shape == ("n",)
    assert s.args["code"].shape == ("256",)


def test_a_store_whose_count_is_no_bound_keeps_the_whole_tile(project):
    """A constant count (`Store(&out[i], vals, 512)`) does not cancel the address: `out` stays the
    whole tiles of the grid, as the loop's bound on `i` reaches."""
    text = DEQUANT.replace("StoreT(st).Store(&(out[(DATA_TYPE > 0) ? i * 2 : i]), vals, valid_store)", "StoreT(st).Store(&(out[(DATA_TYPE > 0) ? i * 2 : i]), vals, 512)")
    s, p = infer(project, "dq2.cu", text, "dequant")
    assert s.args["out"].output and s.args["out"].shape == ("(n + 511) / 512", "512")


def test_a_switch_on_a_runtime_value_walks_every_case(project):
    """`switch (mode)` on a kernel argument: each case is a branch, so what any of them reads
    counts (`b` was never touched before: no shape measured for it)."""
    s, p = infer(project, "sw.cu",
                 "__global__ void pick(float* out, const float* a, const float* b, int mode, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n"
                 "  switch (mode) {\n  case 0:\n    out[i] = a[i];\n    break;\n"
                 "  case 1:\n#pragma unroll\n    for (int j = 0; j < 1; j++) out[i] = b[i];\n    break;\n  }\n}\n"
                 "void run(float* o, const float* a, const float* b, int m, int n) {\n"
                 "  pick<<<(n + 255) / 256, 256>>>(o, a, b, m, n);\n}\n", "pick")
    assert s.args["a"].shape == ("n",) and s.args["b"].shape == ("n",) and s.args["out"].output
