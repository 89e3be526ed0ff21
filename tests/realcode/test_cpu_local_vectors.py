"""Issue 10, breakage 7: a per-thread local vector written through a `__half*` (the extension
kernels' `reinterpret_cast<__half*>(&local_uint4)[k]`) is no data race; a real one still is."""
import numpy as np
import pytest

from astra_cuda.backends.base import Launch, LaunchError, Scalar

from .conftest import needs_gxx

pytestmark = needs_gxx

LOCAL_VECTOR = """#line 1 "user.cu"
#include <cuda_fp16.h>
__global__ void scale_vec(__half* out, const __half* inp, float scale, int d) {
    const uint4* src = reinterpret_cast<const uint4*>(inp + blockIdx.x * d);
    uint4* dst = reinterpret_cast<uint4*>(out + blockIdx.x * d);
    for (int i = threadIdx.x; i < d / 8; i += blockDim.x) {
        uint4 in_vec = src[i];
        uint4 out_vec;
        for (int k = 0; k < 8; ++k) {
            float x = __half2float(reinterpret_cast<const __half*>(&in_vec)[k]);
            reinterpret_cast<__half*>(&out_vec)[k] = __float2half(x * scale);
        }
        dst[i] = out_vec;
    }
}
"""

SHARED_RACE = """#line 1 "user.cu"
__global__ void shift(float* out, const float* inp, float scale, int d) {
    __shared__ float tile[256];
    tile[threadIdx.x] = inp[threadIdx.x];
    out[threadIdx.x] = tile[(threadIdx.x + 1) % blockDim.x] * scale;   // no barrier
}
"""


@pytest.fixture(scope="module")
def cpu():
    from astra_cuda.backends.cpu import CpuBackend
    be = CpuBackend()
    yield be
    be.close()


def run(cpu, src, name, dtype, n):
    mod = cpu.compile(src, [name], filename="user.cu", races=True)
    inp = cpu.upload((np.arange(n) % 7).astype(dtype))
    out = cpu.upload(np.zeros(n, dtype))
    cpu.launch(mod, name, Launch((1, 1, 1), (64, 1, 1), 0), [out, inp, Scalar("float", 0.5, "float32"),
                                                            Scalar("int", n, "int32")])
    return cpu.download(out)


def test_a_local_uint4_written_through_half_pointers_is_no_race(cpu):
    out = run(cpu, LOCAL_VECTOR, "scale_vec", np.float16, 1024)
    assert np.array_equal(out, ((np.arange(1024) % 7) * 0.5).astype(np.float16))


def test_a_real_shared_memory_race_is_still_found(cpu):
    with pytest.raises(LaunchError, match="data race"):
        run(cpu, SHARED_RACE, "shift", np.float32, 64)
