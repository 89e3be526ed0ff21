"""Issue 25: a dequantizing kernel in the pattern of bitsandbytes' kDequantizeBlockwise (written
here): CUB's block load/store move `valid_items` elements from the address they are given, and a
byte code read from a local `unsigned char` array indexes a 256-entry table."""
from astra_cuda import api
from astra_cuda.model import source, spec

DEQUANT = (
    "#include <cub/cub.cuh>\n"
    "template <typename T, int TILE, int THREADS, int NUM>\n"
    "__global__ void dequant(float* code, unsigned char* A, float* absmax, T* out, const int blocksize, const int n) {\n"
    "  unsigned char q[NUM];\n  T vals[NUM];\n"
    "  typedef cub::BlockLoad<unsigned char, THREADS, NUM, cub::BLOCK_LOAD_WARP_TRANSPOSE> LoadChar;\n"
    "  typedef cub::BlockStore<T, THREADS, NUM, cub::BLOCK_STORE_WARP_TRANSPOSE> StoreT;\n"
    "  __shared__ typename LoadChar::TempStorage lc;\n  __shared__ typename StoreT::TempStorage st;\n"
    "  for (int i = blockIdx.x * TILE; i < gridDim.x * TILE; i += gridDim.x * TILE) {\n"
    "    int valid = min(TILE, n - i);\n"
    "    float m = absmax[(i + threadIdx.x * NUM) >> (31 - __clz(blocksize))];\n"
    "    __syncthreads();\n    LoadChar(lc).Load(&(A[i]), q, valid, 128);\n"
    "    for (int j = 0; j < NUM; j++) vals[j] = code[q[j]] * m;\n"
    "    __syncthreads();\n    StoreT(st).Store(&(out[i]), vals, valid);\n  }\n}\n"
    "void run(float* code, unsigned char* A, float* absmax, float* out, int blocksize, int n) {\n"
    "  dequant<float, 512, 64, 8><<<(n + 511) / 512, 64>>>(code, A, absmax, out, blocksize, n);\n}\n")


def infer(project, name, text, kernel):
    project(name, text)
    path = project.root / name
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), kernel, run=False)
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return spec.load(m.kernel(kernel), m), p


def test_cub_block_load_and_store_reach_valid_items_and_a_byte_code_indexes_256_entries(project):
    """Whole 512-element tiles over n, the last one partial: `Store(&out[i], vals, min(512, n - i))`
    writes out[0 .. n) (a whole tile past n before: the tail never written, so poisoned), the load
    reads A[0 .. n), and `code[q[j]]` with `q` an `unsigned char` array reads at most code[255]."""
    s, p = infer(project, "dq.cu", DEQUANT, "dequant")
    assert s.args["out"].output and s.args["out"].shape == ("n",)
    assert not s.args["A"].output and s.args["A"].shape == ("n",)
    assert s.args["code"].shape == ("256",)


def test_a_store_whose_count_is_no_bound_keeps_the_whole_tile(project):
    """A constant count (`Store(&out[i], vals, 512)`) does not cancel the address: `out` stays the
    whole tiles of the grid, as the loop's bound on `i` reaches."""
    text = DEQUANT.replace("StoreT(st).Store(&(out[i]), vals, valid)", "StoreT(st).Store(&(out[i]), vals, 512)")
    s, p = infer(project, "dq2.cu", text, "dequant")
    assert s.args["out"].output and s.args["out"].shape == ("(n + 511) / 512", "512")
