"""The CPU backend refuses what the kernel reaches, not what its headers contain (issue 24):
inline PTX in a specialization or helper the kernel never calls is dead code, an include of
<mma.h> alone is harmless, and libcu++'s host-capable headers compile as host code."""
import numpy as np
import pytest

from astra_cuda.backends.base import LaunchError, Unsupported
from cpu_helpers import run, unit

# A header of helpers in the style of serving libraries: one specialization is plain C++, the
# other inline PTX the CPU cannot run (a memory-ordering load); a lane helper in PTX.
HELPERS = r'''
template <int N> __device__ __forceinline__ void load(unsigned* d, const unsigned* s);
template <> __device__ __forceinline__ void load<1>(unsigned* d, const unsigned* s) { d[0] = s[0]; }
template <> __device__ __forceinline__ void load<2>(unsigned* d, const unsigned* s) {
  asm volatile("ld.relaxed.gpu.global.v2.u32 {%0, %1}, [%2];\n"
               : "=r"(d[0]), "=r"(d[1]) : "l"(s));
}
__device__ __forceinline__ unsigned lane() { unsigned r; asm("mov.u32 %0, %%laneid;" : "=r"(r)); return r; }
template <int N> __global__ void k(unsigned* x) { unsigned v[2]; load<N>(v, x + N * threadIdx.x); x[threadIdx.x] = v[0] + 1; }
'''


def test_inline_ptx_the_kernel_does_not_reach_is_dead_code(cpu):
    out = run(cpu, HELPERS, "k<1>", (1,), (4,), [np.arange(4, dtype=np.uint32)])[0]
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def test_inline_ptx_the_kernel_reaches_is_refused_at_its_line(cpu):
    with pytest.raises(Unsupported, match=r"to verify: inline PTX \(asm\) at user.cu:4 \(ld.relaxed.gpu.global.v2.u32\)$"):
        cpu.compile(unit(HELPERS), ["k<2>"], filename="user.cu")


def test_inline_ptx_spelled_by_a_macro_is_still_refused(cpu):
    src = ('#define LANE(r) asm("mov.u32 %0, %%laneid;" : "=r"(r))\n'
           '__device__ inline unsigned lane() { unsigned r; LANE(r); return r; }\n'
           '__global__ void k(unsigned* x) { x[0] = 1; }\n')
    with pytest.raises(Unsupported, match=r"inline PTX \(asm\) at user.cu:2"):
        cpu.compile(unit(src), ["k"], filename="user.cu")


def test_an_include_of_mma_h_alone_is_not_refused_but_wmma_is(cpu):
    out = run(cpu, "#include <mma.h>\n__global__ void k(float* x) { x[threadIdx.x] *= 2; }\n", "k", (1,), (2,),
              [np.ones(2, np.float32)])[0]
    np.testing.assert_array_equal(out, 2)
    src = ("#include <mma.h>\n__global__ void k(float* x) {\n"
           "  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;\n}\n")
    with pytest.raises(Unsupported, match=r"tensor-core code \(WMMA\) \(nvcuda\) at user.cu:3"):
        cpu.compile(unit(src), ["k"], filename="user.cu")


def test_libcuxx_host_headers_compile_as_host_code(cpu):
    src = r'''
#include <cuda/std/limits>
#include <cuda/functional>
__global__ void k(float* x) {
  float m = -cuda::std::numeric_limits<float>::infinity();
  x[threadIdx.x] = cuda::maximum<>{}(m, x[threadIdx.x]) + (cuda::std::numeric_limits<short>::max() - 32767);
}
'''
    out = run(cpu, src, "k", (1,), (4,), [np.array([-np.inf, -1.5, 0, 7], np.float32)])[0]
    np.testing.assert_array_equal(out, [-np.inf, -1.5, 0, 7])
    with pytest.raises(Unsupported, match=r"libcu\+\+ \(cuda::\) \(#include <cuda/std/barrier>\) at user.cu:1"):
        cpu.compile(unit("#include <cuda/std/barrier>\n__global__ void k(float* x) {}\n"), ["k"], filename="user.cu")



def test_a_shared_window_address_is_refused_only_where_reached(cpu):
    # DeepSpeed memory_access_utils.h: convert_to_shared() for ld.shared in PTX
    helper = "__device__ inline unsigned to_shared(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }\n"
    plain = helper + "__global__ void k(unsigned* x) { x[threadIdx.x] += 1; }\n"
    np.testing.assert_array_equal(run(cpu, plain, "k", (1,), (4,), [np.zeros(4, np.uint32)])[0], 1)
    window = helper + "__global__ void k(unsigned* x) { __shared__ unsigned s[4]; x[threadIdx.x] = to_shared(s); }\n"
    with pytest.raises(Unsupported, match=r"shared-window addresses \(__cvta_generic_to_shared\)"):
        cpu.compile(unit(window), ["k"], filename="user.cu")


def test_cub_brings_libcuxx_function_objects_as_the_real_cub_does(cpu):
    # bitsandbytes: `BlockReduce(...).Reduce(v, cuda::maximum<>{})` with only <cuda/std/functional>
    src = ("#include <cub/block/block_reduce.cuh>\n#include <cuda/std/functional>\n"
           "__global__ void k(float* x) {\n  using BR = cub::BlockReduce<float, 64>;\n"
           "  __shared__ typename BR::TempStorage t;\n  float m = BR(t).Reduce(x[threadIdx.x], cuda::maximum<>{});\n"
           "  if (threadIdx.x == 0) x[0] = m;\n}\n")
    a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    assert run(cpu, src, "k", (1,), (64,), [a.copy()])[0][0] == a.max()


# Idioms the CPU runs as C++ with the instruction's exact effect (inline_asm.emulate).
IDIOMS = r"""
__device__ __forceinline__ void load16(void* dst, const void* src) {
  uint4* data = reinterpret_cast<uint4*>(dst);
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(data[0].x), "=r"(data[0].y), "=r"(data[0].z), "=r"(data[0].w)
               : "l"(src));
}
__device__ __forceinline__ void load16(void* dst, const void* src, bool do_access) {
  uint4* data = reinterpret_cast<uint4*>(dst);
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n"
               "\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t@p ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
               : "=r"(data[0].x), "=r"(data[0].y), "=r"(data[0].z), "=r"(data[0].w)
               : "l"(src), "r"((int)do_access));
}
__device__ __forceinline__ void store16(void* dst, const void* src) {
  const uint4* data = reinterpret_cast<const uint4*>(src);
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n"
               : : "l"(dst), "r"(data[0].x), "r"(data[0].y), "r"(data[0].z), "r"(data[0].w) : "memory");
}
__global__ void copy(float* out, const float* in, int n, int shift) {
  float v[4];
  int i = 4 * threadIdx.x;
  load16(v, in + i + shift, i < n);
  store16(out + i, v);
  if (shift == 0 && i < n) { load16(v, in + i); out[i + 1] += v[1]; }
}
__global__ void conv(const float* x, unsigned short* h, float* back, unsigned* bf2, unsigned* lanes, float* sums) {
  int i = threadIdx.x;
  float f = x[i], g;
  unsigned short u;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(u) : "f"(f));
  h[i] = u;
  asm("cvt.f32.f16 %0, %1;" : "=f"(g) : "h"(u));
  back[i] = g;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bf2[i]) : "f"(f), "f"(-f));
  unsigned lane, packed;
  unsigned short lo, hi;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  int slane;
  asm("mov.s32 %0, %laneid;" : "=r"(slane));   // one % and .s32, as sgl-kernel writes it
  lane += slane == (int)lane ? 0u : 50000u;
  asm("mov.b32 %0, {%1, %2};" : "=r"(packed) : "h"((unsigned short)lane), "h"(u));
  asm("mov.b32 {%0, %1}, %2;" : "=h"(lo), "=h"(hi) : "r"(packed));
  lanes[i] = lo + (hi == u ? 0 : 1000);
  float s = 1.5f * i;
  for (int m = 16; m > 0; m /= 2) {
    float o;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(s), "r"(m));
    s += o;
  }
  sums[i] = s;
}
__global__ void quant(const float* x, unsigned* q8, int* q32, unsigned* s8, unsigned short* h8) {
  int i = threadIdx.x;
  unsigned d; unsigned short e; int w;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(d) : "f"(x[i]));
  q8[i] = d;
  asm volatile("cvt.rni.sat.s8.f32 %0, %1;" : "=h"(e) : "f"(x[i]));
  h8[i] = e;
  asm volatile("cvt.rni.sat.s32.f32 %0, %1;" : "=r"(w) : "f"(x[i] * 3e6f));
  q32[i] = w;
  asm volatile("cvt.sat.s8.s32 %0, %1;" : "=r"(d) : "r"(w / 1000));
  s8[i] = d;
}
"""


@pytest.fixture(scope="module")
def idioms(cpu):
    return cpu.compile(unit(IDIOMS), ["copy", "conv", "quant"], filename="user.cu")


def _launch(cpu, module, name, block, args):
    from astra_cuda.backends.base import Launch
    bufs = [cpu.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    cpu.launch(module, name, Launch((1, 1, 1), (block, 1, 1), 0), bufs, timeout_s=30)
    return [None if not isinstance(a, np.ndarray) else cpu.download(b) for a, b in zip(args, bufs)]


def test_vector_and_guarded_loads_and_stores_run_exactly(cpu, idioms):
    from cpu_helpers import i32
    a = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    out = _launch(cpu, idioms, "copy", 8, [np.full(32, 7, np.float32), a, i32(24), i32(0)])[0]
    want = np.where(np.arange(32) < 24, a, 0).astype(np.float32)  # lanes past n read nothing: zeros
    want[1:24:4] += a[1:24:4]
    np.testing.assert_array_equal(out, want)
    with pytest.raises(LaunchError, match="misaligned address .*: an access needs 16-byte alignment, at user.cu:"):  # as on the GPU
        _launch(cpu, idioms, "copy", 8, [np.zeros(36, np.float32), np.zeros(36, np.float32), i32(32), i32(1)])


def test_conversions_packing_lanes_and_shuffles_run_exactly(cpu, idioms):
    x = np.concatenate([np.random.default_rng(1).standard_normal(26).astype(np.float32) * 900,
                        np.array([np.nan, np.inf, 65520.0, 65519.99, 2.0**-25, -2.0**-25], np.float32)])
    h, back, bf2, lanes, sums = _launch(cpu, idioms, "conv", 32, [x, np.zeros(32, np.uint16), np.zeros(32, np.float32),
                                                                    np.zeros(32, np.uint32), np.zeros(32, np.uint32),
                                                                    np.zeros(32, np.float32)])[1:]
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16).copy()
    want[26] = 0x7FFF  # the GPU's canonical NaN
    np.testing.assert_array_equal(h, want)
    np.testing.assert_array_equal(back, want.view(np.float16).astype(np.float32))
    def bf16(v):  # round to nearest even on the upper 16 bits
        b = v.view(np.uint32).astype(np.uint64)
        return np.where(np.isnan(v), 0x7FFF, (b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint32)
    np.testing.assert_array_equal(bf2, bf16(x) << 16 | bf16(-x))
    np.testing.assert_array_equal(lanes, np.arange(32))
    np.testing.assert_array_equal(sums, 1.5 * 496)  # the butterfly sums all 32 lanes in each


def test_saturating_integer_conversions_run_exactly(cpu, idioms):
    # vLLM's int8 quantization (scaled_quant.cu): ties to even, saturation, NaN to 0, sign-extended
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, -128.5, 300, -300, np.nan, np.inf, -np.inf, 1e9, -1e9,
                  0.49999997, *np.random.default_rng(2).standard_normal(16) * 100], np.float32)
    q8, q32, s8, h8 = _launch(cpu, idioms, "quant", 32, [x, np.zeros(32, np.uint32), np.zeros(32, np.int32),
                                                          np.zeros(32, np.uint32), np.zeros(32, np.uint16)])[1:]
    def sat(v, lo, hi):
        return np.where(np.isnan(v), 0, np.clip(np.nan_to_num(np.rint(v.astype(np.float64)), posinf=hi, neginf=lo),
                                                lo, hi)).astype(np.int64)
    np.testing.assert_array_equal(q8.view(np.int32), sat(x, -128, 127))
    np.testing.assert_array_equal(h8.view(np.int16), sat(x, -128, 127))
    w = sat(x * np.float32(3e6), -2**31, 2**31 - 1)
    np.testing.assert_array_equal(q32, w)
    np.testing.assert_array_equal(s8.view(np.int32), np.clip(np.trunc(w / 1000), -128, 127))


@pytest.mark.parametrize("stmt", [
    'asm volatile("ld.global.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p));',     # ordering: not a hint
    'asm volatile("ld.global.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(h));',
    'asm volatile("ld.global.v2.u32 {%1, %0}, [%2];" : "=r"(v), "=r"(w) : "l"(p));',  # operands swapped
    'asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v), "=r"(w) : "r"(q));',  # a 32-bit address
    'asm volatile("cvt.rn.f16.f32 %0, %1;" : "+h"(u) : "f"(f));',                   # read and written
    'asm volatile("cvt.rz.f16.f32 %0, %1;" : "=h"(u) : "f"(f));',                   # another rounding
    'asm volatile("cvt.rzi.sat.s8.f32 %0, %1;" : "=h"(u) : "f"(f));',                # another rounding
    'asm volatile("cvt.rni.sat.s32.f32 %0, %1;" : "=h"(u) : "f"(f));',               # 32 bits in a 16-bit register
    'asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x101f, 0xffffffff;" : "=f"(o) : "f"(s), "r"(m));',  # segments
    'asm volatile("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(o) : "f"(s));',
    'asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(p) : "cc");',
])
def test_only_exact_idioms_are_emulated(stmt):
    from astra_cuda.backends.cpu import inline_asm
    marked = inline_asm.mark("__device__ void f() {\n  " + stmt + "\n}\n", "user.cu")
    assert len(marked.places) == 1 and "astra::" not in marked.source
