"""Issue 25: the instance a launcher dispatches to, and the sizes that reach it — minimal cases written
here of DeepSpeed's `apply_rotary_pos_half` launcher (csrc/transformer/inference/csrc/
apply_rotary_pos_emb.cu): `alignment` set to 16, 8 or 4 by an `if`/`else if` chain over the half
rotary width, then `if (alignment == 4) LAUNCH(4)`: the `<.., 4>` instance sees only the widths of the
chain's third branch; and its kernel's tile, `cg::tiled_partition<threadsPerHead>(tb)`, as wide as the
instance's template argument (not a warp: each head's accesses then reached 28 elements past it)."""
from .test_infer_patterns import infer

CHAIN = """
#include <cassert>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
template <typename T, int TPH, int G>
__global__ void rot(T* q, unsigned rotary_dim, unsigned head_size, unsigned total) {
  cg::thread_block tb = cg::this_thread_block();
  cg::thread_block_tile<TPH> g = cg::tiled_partition<TPH>(tb);
  const int head = blockIdx.x * (256 / TPH) + threadIdx.x / TPH;
  const int i = g.thread_rank() * (G / sizeof(T));
  if (head < total && i < rotary_dim) q[head * head_size + i] *= 2.f;
}
template <typename T>
void launch(T* q, unsigned head_size, unsigned rotary_dim, unsigned total) {
  const int half_dim = rotary_dim >> 1;
  int alignment = sizeof(T);
  if (half_dim % (16 / sizeof(T)) == 0) {
    alignment = 16;
  } else if (half_dim % (4 / sizeof(T)) == 0) {
    alignment = 4;
  } else {
    assert(false);
  }
  dim3 grid((total + 63) / 64);
  if (alignment == 4) {
    rot<T, 4, 4><<<grid, 256>>>(q, rotary_dim, head_size, total);
  } else if (alignment == 16) {
    rot<T, 4, 16><<<grid, 256>>>(q, rotary_dim, head_size, total);
  }
}
template void launch<float>(float*, unsigned, unsigned, unsigned);
"""


def test_the_chain_that_sets_the_value_a_launch_is_under_is_required(project):
    project("rot.cu", CHAIN)
    s, p = infer(project, "rot.cu", "rot")
    req = " ".join(s.require)
    assert "(rotary_dim >> 1) % (16 / 4) != 0" in req and "(rotary_dim >> 1) % (4 / 4) == 0" in req, p.comment
    # the test sizes are widths the program sends to this instance: never a multiple of 4 halves
    assert s.sizes["rotary_dim"] and all((r >> 1) % 4 != 0 for r in s.sizes["rotary_dim"]), p.comment


def test_a_tile_as_wide_as_a_template_argument_bounds_its_ranks(project):
    project("rot.cu", CHAIN)
    s, p = infer(project, "rot.cu", "rot")
    # each head's 4 lanes reach its 4 elements (head_size, fixed at the tile's width), not 32
    assert s.args["q"].shape == ("4 * total",) and s.args["head_size"].value == "4", p.comment
