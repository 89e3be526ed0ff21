"""Issue 10, breakage 6: cooperative_groups and <nv/target> compile in the static check (NVRTC
with CCCL's headers; the NVRTC <cstdint> stand-in no longer clashes with CCCL's)."""
from astra_cuda import api

CG = """#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdint>
#include <climits>
namespace cg = cooperative_groups;
__global__ void row_sum(float* out, const float* in, int n) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float s = 0.f;
    for (int i = warp.thread_rank(); i < n; i += warp.size()) s += in[(int64_t)blockIdx.x * n + i];
    s = cg::reduce(warp, s, cg::plus<float>());
    if (warp.thread_rank() == 0) out[blockIdx.x] = s + (INT_MAX - INT_MAX);
}
"""

NV_TARGET = """#include <nv/target>
__global__ void pick(float* o) {
    NV_IF_ELSE_TARGET(NV_PROVIDES_SM_80, o[0] = 1.f;, o[0] = 2.f;)
}
"""


def errors(text, tmp_path, name):
    f = tmp_path / name
    f.write_text(text)
    report = api.static_check(api.snapshot(text, str(f)))
    return [d for d in report.diagnostics if d.severity == "error"], report


def test_cooperative_groups_compile_statically(tmp_path):
    errs, report = errors(CG, tmp_path, "cg.cu")
    assert not errs, errs
    assert report.resources["row_sum"].registers


def test_nv_target_compiles_statically(tmp_path):
    errs, _ = errors(NV_TARGET, tmp_path, "t.cu")
    assert not errs, errs
