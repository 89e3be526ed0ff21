"""Issue 25: a size bound (`size_bounds.largest_covered`) is kept only where it measures every pointer
it was sought for. FlashInfer's `PackBitsKernel` reads its input through a block-wide loader the
access walk did not follow (CUB's `BlockLoad`), seen as one element at the block's start: at a
single block (`n <= 512` here) that one element "fits" the shape `["1"]`, so the bound was kept, the
input was one byte, the bench moved nothing and the GPU run failed. Minimal cases written here."""
from tests.realcode.test_infer_asm_accesses import infer

UNSEEN_LOADER = """#include <cstdint>
// a loader whose body the walk does not see: the thread's 4 flags of its block's tile
template <int THREADS, int PER_THREAD>
__device__ void load_tile(const bool* tile, bool (&items)[PER_THREAD], long valid);

__global__ void pack_flags(const bool* flags, uint8_t* packed, long n) {
  long first = (long)blockIdx.x * blockDim.x * 4;
  bool got[4];
  load_tile<128, 4>(flags + first, got, n - first);
  uint8_t bits = got[0] | got[1] << 1 | got[2] << 2 | got[3] << 3;
  if (first + threadIdx.x * 4 < n) packed[first / 4 + threadIdx.x] = bits;
}

void pack(const bool* f, uint8_t* p, long n) { pack_flags<<<(n + 511) / 512, 128>>>(f, p, n); }
"""


def test_a_bound_that_leaves_an_input_one_fixed_element_is_no_bound(project):
    s, p = infer(project, "flags.cu", UNSEEN_LOADER, "pack_flags")
    # the input's reach is unknown, so its shape is a guess the notes flag — never a bound on `n`
    # that makes it one byte
    assert not any("n <=" in r for r in s.require), p.comment
    assert list(s.args["packed"].shape) == ["n / 4"] and s.args["packed"].output
    assert list(s.args["flags"].shape) == ["n"], p.comment
    assert any(c["n"] > 512 for c in s.cases())
    assert any("flags" in n and "CHECK" in n for n in p.notes)
