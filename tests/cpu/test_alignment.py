"""A GPU faults on an access that is not aligned to its type; x86 does not. The CPU backend holds
kernel code to the GPU's rule (the compiler's alignment check, handled by the runtime), so a
`float4` load one float past an aligned address fails on the CPU as it does on the GPU — in the
plain build, under AddressSanitizer (buffers copied) and in dynamic shared memory — while aligned
vector accesses run as before."""
import numpy as np
import pytest

from astra_cuda.backends.base import LaunchError
from cpu_helpers import i32, run

# The pattern of vector-copy kernels (vLLM's cache kernels, FasterTransformer's int8 quantizers):
# a float4 load at an offset the caller chooses; with off = 1 the address is 4 bytes past 16.
COPY4 = r'''
__global__ void copy4(const float* x, float* y, int off) {
  int i = 4 * threadIdx.x;
  float4 v = *reinterpret_cast<const float4*>(x + i + off);
  y[i] = v.x; y[i + 1] = v.y; y[i + 2] = v.z; y[i + 3] = v.w;
}
'''

SHARED = r'''
__global__ void smem4(const float* x, float* y, int off) {
  extern __shared__ float s[];
  s[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  if (threadIdx.x < 4) {
    float4 v = reinterpret_cast<const float4*>(s + off)[threadIdx.x];
    y[threadIdx.x] = v.x + v.y + v.z + v.w;
  }
}
'''


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_an_aligned_vector_load_runs(cpu, sanitize):
    x = np.arange(36, dtype=np.float32)
    y = run(cpu, COPY4, "copy4", (1,), (8,), [x, np.zeros(32, np.float32), i32(4)], sanitize=sanitize)[1]
    np.testing.assert_array_equal(y, x[4:36])


@pytest.mark.parametrize("sanitize", [False, True], ids=["plain", "asan"])
def test_a_misaligned_vector_load_faults_as_on_the_gpu(cpu, sanitize):
    x = np.arange(36, dtype=np.float32)
    with pytest.raises(LaunchError, match=r"misaligned address 0x[0-9a-f]*4: an access to 'const (struct )?float4' "
                                          r"needs 16-byte alignment, at user.cu:3 in block \(0,0,0\) thread \(0,0,0\)"):
        run(cpu, COPY4, "copy4", (1,), (8,), [x, np.zeros(32, np.float32), i32(1)], sanitize=sanitize)


def test_dynamic_shared_memory_is_aligned_and_checked(cpu):
    x = np.arange(32, dtype=np.float32)
    y = run(cpu, SHARED, "smem4", (1,), (32,), [x, np.zeros(4, np.float32), i32(0)], shmem=128)[1]
    np.testing.assert_array_equal(y, x[:16].reshape(4, 4).sum(axis=1))
    with pytest.raises(LaunchError, match=r"misaligned address .*needs 16-byte alignment, at user.cu:6"):
        run(cpu, SHARED, "smem4", (1,), (32,), [x, np.zeros(4, np.float32), i32(2)], shmem=128)
