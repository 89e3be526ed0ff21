"""Issue 25: minimal cases written here of what flash-attention's layer norm `ln_fwd_kernel`
(csrc/layer_norm/ln_fwd_kernels.cuh) shows. Its `void*` fields are read and written through a
vector class template that its traits class names (`using Ivec = typename Ktraits::Ivec;`, the
traits' `Vec<input_t, NUM_ELTS>`; `x0.load_from(params.x0, idx_x)`, `static_cast<const
Vec_type*>(base)[idx]` inside, `Vec_type` a `BytesToType<BYTES>` specialization): the class was not
read, so every such access was unbounded, the shapes guessed, and on a GPU the kernel's stores past
`params.x` changed `params.dmask`. Its indices step once per load inside the load loop's guard
(`idx_x += VEC_COLS_PER_LDG`), and its instance covers a row only up to its hidden size."""
from astra_cuda.model import access, source

from tests.realcode.test_infer_asm_accesses import infer

TRAITS = """#include <cstdint>
template <int BYTES> struct BytesToType {};
template <> struct BytesToType<16> { using Type = uint4; };
template <typename Elt_type, uint32_t NUM_ELT> struct Vec {
  enum { BYTES = NUM_ELT * sizeof(Elt_type) };
  using Vec_type = typename BytesToType<BYTES>::Type;
  union { Vec_type vec; Elt_type elt[NUM_ELT]; } data;
  __device__ void load_from(const void* base, const size_t idx) { data.vec = static_cast<const Vec_type*>(base)[idx]; }
  __device__ void store_to(void* base, const size_t idx) { static_cast<Vec_type*>(base)[idx] = data.vec; }
};
template <typename input_t_, int COLS, int WARPS> struct Traits {
  using input_t = input_t_;
  enum { NUM_ELTS = 16 / sizeof(input_t) };
  enum { THREADS = WARPS * 32, LDGS = COLS / NUM_ELTS / 32 };
  using Ivec = Vec<input_t, NUM_ELTS>;
};
struct Params { void* x; void* gamma; void* z; int rows; int cols; };
"""

KERNEL = """template <typename Ktraits>
__global__ void scale_rows(Params params) {
  using Ivec = typename Ktraits::Ivec;
  enum { LDGS = Ktraits::LDGS, NUM_ELTS = Ktraits::NUM_ELTS };
  const int lane = threadIdx.x % 32, row = blockIdx.x * (Ktraits::THREADS / 32) + threadIdx.x / 32;
  Ivec gamma[LDGS];
  for (int it = 0; it < LDGS; it++)
    if (lane + it * 32 < params.cols / NUM_ELTS) gamma[it].load_from(params.gamma, lane + it * 32);
  if (row >= params.rows) return;
  for (int it = 0; it < LDGS; it++) {
    const int col = lane + it * 32;
    if (col < params.cols / NUM_ELTS) {
      Ivec x;
      x.load_from(params.x, row * params.cols / NUM_ELTS + col);
      for (int j = 0; j < NUM_ELTS; j++) x.data.elt[j] *= gamma[it].data.elt[j];
      x.store_to(params.z, row * params.cols / NUM_ELTS + col);
    }
  }
}
void launch(Params p) { scale_rows<Traits<float, 1024, 4>><<<(p.rows + 3) / 4, 128>>>(p); }
"""


def test_vectors_of_the_traits_class_are_measured_and_the_instance_bounds_the_row(project):
    s, p = infer(project, "ln.cu", TRAITS + KERNEL, "scale_rows")
    # 16-byte vectors of 4 floats: every row of `cols` floats read and written whole, up to the
    # 1024 columns the instance's 8 loads of 32 vectors cover
    assert list(s.args["params.x"].shape) == list(s.args["params.z"].shape) == ["rows", "4 * cols"], p.comment
    assert list(s.args["params.gamma"].shape) == ["4 * cols"]
    assert "cols <= 1024" in s.require and all(c["cols"] <= 1024 for c in s.cases())
    assert s.args["params.z"].output and not s.args["params.x"].output


STEPPED = """__global__ void rows(const float* x, float* z, int cols) {
  int idx = blockIdx.x * cols + threadIdx.x;
  for (int it = 0; it < 4; it++) {
    if (it * 32 + threadIdx.x < cols) {
      z[idx] = x[idx];
      idx += 32;
    }
  }
}
"""


def test_an_index_stepped_once_a_trip_inside_the_loops_guard_reaches_its_last_trip():
    """`idx += 32` at the end of each trip (under the trip's guard): a single pass over the body saw
    only the first trip's index, 32 of the row's 128 elements — an extent too small, never one too large."""
    k = source.parse(STEPPED).kernel("rows")
    f = access.analyse(k, {"cols": 128}, (2, 1, 1), (32, 1, 1), {"x": 4, "z": 4}, set(), 100, {})
    assert f.uses["x"].hi == f.uses["z"].hi == 2 * 128 - 1
