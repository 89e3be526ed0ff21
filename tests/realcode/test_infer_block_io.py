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


def test_a_scale_per_block_read_by_the_whole_last_tile_covers_the_tile(project):
    """bitsandbytes' kDequantizeBlockwise: one absmax per `blocksize` elements, read by every thread
    of a 512-element tile (`absmax[(i + threadIdx.x * 8) >> log2(blocksize)]`) before the tile's tail
    is cut. The loop runs one trip per block (its step, the grid's tiles, reaches the bound from any
    start), so `i` is the tile's start. Where n ends a partial tile the last tile's threads read
    absmax past cdiv(n, blocksize) (n = blocksize = 128: index 2 of 1, a GPU fault under
    compute-sanitizer), so it is the quotient of n rounded up to whole tiles, said in a note, with
    no requirement of whole tiles (it was cdiv(n, blocksize))."""
    s, p = infer(project, "dq3.cu", DEQUANT, "dequant")
    assert s.args["absmax"].shape == ("cdiv(cdiv(n, 512) * 512, blocksize)",), p.comment
    assert any("`absmax` is one value per block with `n` rounded up to whole tiles of 512" in x for x in p.notes), p.notes
    assert not any("n % 512" in r for r in s.require)
    assert s.args["A"].shape == ("n",) and s.args["out"].shape == ("n",)


# A warp per row of a 4-bit weight matrix, four rows a block: each lane reads the scale of its
# group (`scale[(row * K + k) / group]`, by a shift) before it tests `row < M`, so the rows of the
# last block past M read scales too.
GEMV = (
    "template <typename T, int THREADS>\n"
    "__global__ void gemv4(int M, int K, const T* x, const unsigned char* W, const float* scale, T* y, int ldw, "
    "int group) {\n"
    "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
    "  const int row = (THREADS / 32) * blockIdx.x + warp, base = ldw * row;\n"
    "  float acc = 0.0f;\n"
    "  for (int k = lane * 32; k < K; k += 32 * 32) {\n"
    "    float s = scale[((2 * base) + k) >> (31 - __clz(group))];\n"
    "    if (row < M)\n"
    "      for (int j = 0; j < 16; j++)\n"
    "        if (k / 2 + j < K / 2) acc += (float)(W[base + k / 2 + j] & 15) * s * (float)x[k + 2 * j];\n"
    "  }\n"
    "  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffff, acc, o);\n"
    "  if (row < M && lane == 0) y[row] = (T)acc;\n}\n"
    "void run(int m, int k, float* x, unsigned char* w, float* s, float* y, int ldw, int group) {\n"
    "  gemv4<float, 128><<<(m + 3) / 4, 128>>>(m, k, x, w, s, y, ldw, group);\n}\n")


def test_a_scale_read_before_the_row_test_covers_the_last_block_of_rows(project):
    """Four rows a block, `(M + 3) / 4` blocks: at M = 1 rows 1..3 read `scale` at (row * K + k) /
    group, past cdiv(M * K, group) (one value at K = group = 128): its shape is the quotient of M
    rounded up to whole blocks of rows (it was cdiv(M * K, group), which the probes at whole tiles
    and the rounding moved through K never showed)."""
    s, p = infer(project, "gemv.cu", GEMV, "gemv4")
    assert s.args["scale"].shape == ("cdiv(cdiv(M, 4) * 4 * K, group)",), p.comment
    assert any("`scale` is one value per block with `M` rounded up to whole tiles of 4" in x for x in p.notes), p.notes
    assert s.args["W"].shape == ("M", "K / 2") and s.args["y"].shape == ("M",) and s.args["y"].output
    assert not any("M % 4" in r for r in s.require)


def test_a_scale_read_only_where_its_rows_are_is_the_plain_quotient(project):
    """The same kernel with the scale read inside `row < M`: no row past M reads it, so the plain
    quotient stands (the rounded one is for a kernel that reads past it only)."""
    text = GEMV.replace("    float s = scale[((2 * base) + k) >> (31 - __clz(group))];\n    if (row < M)\n",
                        "    if (row < M) {\n    float s = scale[((2 * base) + k) >> (31 - __clz(group))];\n")
    text = text.replace("(float)x[k + 2 * j];\n  }\n", "(float)x[k + 2 * j];\n  }}\n")
    s, p = infer(project, "gemv2.cu", text, "gemv4")
    assert s.args["scale"].shape == ("cdiv(M * K, group)",), p.comment


def test_a_loop_whose_one_step_reaches_its_bound_runs_once_at_its_start():
    """`for (i = blockIdx.x * 512; i < gridDim.x * 512; i += gridDim.x * 512)`: block b's i is
    b * 512 alone, so a thread's read at i + threadIdx.x * 8 ends in the last tile (4 blocks:
    3 * 512 + 63 * 8), not 504 past the grid's end; a smaller step keeps the loose bound."""
    from astra_cuda.model import access, source
    text = ("__global__ void k(const float* s, float* out, int n) {\n"
            "  for (int i = blockIdx.x * 512; i < gridDim.x * 512; i += STEP)\n"
            "    out[blockIdx.x] = s[i + threadIdx.x * 8];\n}\n")
    one = source.parse(text.replace("STEP", "gridDim.x * 512")).kernel("k")
    facts = access.analyse(one, {"n": 2048}, (4, 1, 1), (64, 1, 1), {"s": 4, "out": 4}, set(), 100, {})
    assert facts.uses["s"].hi == 3 * 512 + 63 * 8
    more = source.parse(text.replace("STEP", "256")).kernel("k")
    facts = access.analyse(more, {"n": 2048}, (4, 1, 1), (64, 1, 1), {"s": 4, "out": 4}, set(), 100, {})
    assert facts.uses["s"].hi == 4 * 512 - 1 + 63 * 8


def test_a_count_chosen_as_the_smaller_of_two_bounds_reaches_the_smaller():
    """bitsandbytes' 8-bit optimizers spell the tile's count `n - i >= 512 ? 512 : n - i`, a min (its
    condition's sides differ as the two choices do): a block load of it from &g[i] ends at n - 1
    where the tile is partial, i + 511 where it is whole. (Not read, the load reached only &g[i]
    once the one-trip loop made i the tile's start.)"""
    from astra_cuda.model import access, source
    text = ("#include <cub/cub.cuh>\n"
            "__global__ void k(float* g, int n) {\n  float v[8];\n  int valid = 0;\n"
            "  typedef cub::BlockLoad<float, 64, 8, cub::BLOCK_LOAD_WARP_TRANSPOSE> L;\n"
            "  __shared__ typename L::TempStorage t;\n"
            "  for (int i = blockIdx.x * 512; i < gridDim.x * 512; i += gridDim.x * 512) {\n"
            "    valid = COUNT;\n    L(t).Load(&(g[i]), v, valid, 0.f);\n  }\n}\n")
    for count, last in (("n - i >= 512 ? 512 : n - i", 1000 - 1), ("n - i < 512 ? n - i : 512", 1000 - 1),
                        ("i + 512 < n ? 512 : n - i", 1000 - 1),   # kdequant_mm_int32_fp16's spelling
                        ("n - i >= 512 ? n - i : 512", 4 * 512 - 1)):   # the larger: its tile's end bounds it
        kernel = source.parse(text.replace("COUNT", count)).kernel("k")
        facts = access.analyse(kernel, {"n": 1000}, (4, 1, 1), (64, 1, 1), {"g": 4}, set(), 100, {})
        assert facts.uses["g"].hi == last, count


PACK = ("#include <cstdint>\n#include <cub/cub.cuh>\n"
        "__global__ void pack(bool* in, uint8_t* out, int64_t n) {\n"
        "  int64_t first = (int64_t)blockIdx.x * blockDim.x * 4;\n  bool v[4];\n"
        "  typedef cub::BlockLoad<bool, 128, 4, cub::BLOCK_LOAD_DIRECT> L;\n"
        "  __shared__ typename L::TempStorage t;\n"
        "  int left = (n - first > INT32_MAX) ? INT32_MAX : n - first;\n"
        "  L(t).Load(in + first, v, left, 0);\n"
        "  if (first + threadIdx.x * 4 < n) out[first / 4 + threadIdx.x] = v[0] | v[1] << 1 | v[2] << 2 | v[3] << 3;\n}\n"
        "void run(bool* i, uint8_t* o, int64_t n) { pack<<<(n + 511) / 512, 128>>>(i, o, n); }\n")


def test_a_count_capped_by_a_limit_the_walk_cannot_read_still_reaches_the_end(project):
    """FlashInfer's PackBits spells its count `n - first > INT32_MAX ? INT32_MAX : n - first`, a min one
    side of which is no number to the walk: the other bounds it, so the load reads in[0 .. n) — it was
    the first element of each block, and a size bound `n <= 512` made `in` one byte (0 MiB benched)."""
    s, p = infer(project, "pack.cu", PACK, "pack")
    assert s.args["in"].shape == ("n",) and not any("<=" in r for r in s.require), p.comment
    assert not any("`in`" in n and "CHECK" in n for n in p.notes), p.notes


def test_a_block_load_without_a_bounded_count_reaches_its_whole_tile():
    """`L(t).Load(p + i, v)` of CUB's BlockLoad<T, 64, 8>: 512 elements from p + i, every block's;
    with a count no polynomial bounds (read from memory) no further than that either — one element
    at the tile's start before. A class that is not CUB's, or a tile of unknown width, is not read so."""
    from astra_cuda.model import access, source
    text = ("#include <cub/cub.cuh>\n"
            "template <int THREADS>\n__global__ void k(const float* g, const int* lens, float* out) {\n"
            "  float v[8];\n  typedef LOADER L;\n  __shared__ typename L::TempStorage t;\n"
            "  L(t).Load(g + blockIdx.x * 512, v COUNT);\n  out[blockIdx.x * 64 + threadIdx.x] = v[0];\n}\n")
    for loader, count, last in (("cub::BlockLoad<float, THREADS, 8>", "", 4 * 512 - 1),
                                ("cub::BlockLoad<float, 64, 8, cub::BLOCK_LOAD_DIRECT>", ", lens[blockIdx.x]", 4 * 512 - 1),
                                ("cub::BlockLoad<float, 32, 8, cub::BLOCK_LOAD_DIRECT, 2>", "", 4 * 512 - 1),
                                ("cub::BlockLoad<float, 64, 8>", ", 100", 3 * 512 + 99),
                                ("Loader<float, 64, 8>", "", 3 * 512)):
        kernel = source.parse(text.replace("LOADER", loader).replace("COUNT", count)).kernel("k")
        facts = access.analyse(kernel, {}, (4, 1, 1), (64, 1, 1), {"g": 4, "lens": 4, "out": 4}, {"lens"}, 100,
                               {"THREADS": 64})
        assert facts.uses["g"].hi == last, (loader, count)
