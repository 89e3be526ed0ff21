"""A size the kernel never reads (bitsandbytes' 4-bit gemv takes `N`, `lda` and `ldc` and reads
none of them): in no shape, launch or `require`, it was timed at the 11008 or 4096 its name
suggests — a value no launch depends on. It is timed at its smallest test value; a size a shape
or the body reads keeps its grown value."""
from astra_cuda import api
from astra_cuda.model import source, spec

GEMV = """
__global__ void gemv_rows(int M, int N, int K, const float* __restrict__ a, const float* __restrict__ w,
                          float* __restrict__ out, int lda, int ldc) {
  const int row = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= M) return;
  float acc = 0.0f;
  for (int k = lane; k < K; k += 32) acc += a[k] * w[row * K + k];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (lane == 0) out[row] = acc;
}
void gemv(int m, int n, int k, const float* a, const float* w, float* out, int lda, int ldc) {
  gemv_rows<<<(m + 3) / 4, 128>>>(m, n, k, a, w, out, lda, ldc);
}
"""


def test_a_size_the_kernel_never_reads_is_timed_at_its_smallest_value(project):
    path = project("gemv.cu", GEMV)
    p = api.infer_spec(api.snapshot(GEMV, str(path)), "gemv_rows", run=False)
    assert p.valid, p.problems
    k = source.parse(GEMV).kernel("gemv_rows")
    m = source.parse(GEMV[:k.span.start_byte] + p.comment + GEMV[k.span.start_byte:])
    s = spec.load(m.kernel("gemv_rows"), m)
    for name in ("N", "lda", "ldc"):
        if name in s.sizes:
            assert s.bench[name] == [min(s.sizes[name])], p.comment
    assert s.bench["M"][0] * s.bench["K"][0] * 4 >= 64 << 20, p.comment   # the traffic stays in what is read
