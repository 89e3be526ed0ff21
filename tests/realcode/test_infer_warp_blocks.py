"""A block the launcher makes of a count of warps the caller chooses (`threads_per_block =
num_warps_per_block * WARP_SIZE`), the shape of sgl-kernel's transfer_kernel_impl launcher:
the guessed count is held to 1024 threads through the local, and a launch no size can make
valid leaves the sizes as they were (they were doubled in vain to 524288 each: 512 GiB of
buffers) with a note saying why. Written here."""
from __future__ import annotations

from astra_cuda import api
from astra_cuda.infer.sizes import Draft, repair

WARPS = """\
#include <cstdint>
#define WARP_SIZE 32
__global__ void copy_items(const int64_t* __restrict__ idx, const float* __restrict__ src, float* __restrict__ dst,
                           int64_t num_items, int64_t items_per_warp, int64_t item_size) {
  int32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  int32_t lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
  for (int i = 0; i < items_per_warp; ++i) {
    int64_t item = warp * items_per_warp + i;
    if (item >= num_items) break;
    for (int64_t j = lane; j < item_size; j += WARP_SIZE) dst[item * item_size + j] = src[idx[item] * item_size + j];
  }
}
void launch(const int64_t* idx, const float* src, float* dst, int64_t num_items, int64_t item_size,
            int64_t block_quota, int64_t num_warps_per_block) {
  auto div_up = [](int64_t x, int64_t y) { return (x + y - 1) / y; };
  const int64_t items_per_warp = div_up(num_items, block_quota * num_warps_per_block);
  const int32_t num_blocks = div_up(num_items, items_per_warp * num_warps_per_block);
  const int32_t threads_per_block = num_warps_per_block * WARP_SIZE;
  copy_items<<<num_blocks, threads_per_block>>>(idx, src, dst, num_items, items_per_warp, item_size);
}
"""


def test_a_chosen_warp_count_is_held_to_1024_threads(tmp_path):
    f = tmp_path / "warps.cu"
    f.write_text(WARPS)
    prop = api.infer_spec(api.snapshot(WARPS, str(f)), "copy_items", run=False)
    assert prop.comment is not None, prop.notes
    assert 'block = ["1024"]' in prop.comment, prop.comment
    assert any("`num_warps_per_block` is chosen by the caller" in n and "took 32" in n for n in prop.notes)


def test_a_constant_block_out_of_range_leaves_the_sizes_as_they_were():
    d = Draft(grid=["cdiv(n, 256)"], block=["8192"], shared=None, require=[],
              sizes={"n": [1, 100, 4096], "m": [128, 4096]}, bench={},
              buffers={"x": (["n", "m"], 4, False)})
    notes: list[str] = []
    assert not repair(d, notes)
    assert d.sizes == {"n": [1, 100, 4096], "m": [128, 4096]}
    assert any("out of CUDA's range whatever the sizes" in n for n in notes), notes
