// The pattern of FlashInfer's AppendPagedKVCacheKernel (include/flashinfer/page.cuh): a struct
// passed by value whose field is a divisor object the host builds (`uint_fastdiv`: a __host__
// constructor computes a multiplier and a shift), read in the kernel by division; and the same
// class taken by value as a parameter of its own.
#include <cstdint>

struct fastdiv {
  __host__ __device__ fastdiv() : d(0), m(0), s(0) {}
  __host__ fastdiv(uint32_t d_) : d(d_), m(0), s(0) {
    while ((1ull << s) < d) ++s;
    m = (uint32_t)((((1ull << 32) * ((1ull << s) - d)) / d) + 1);
  }
  __device__ uint32_t div(uint32_t n) const { return (uint32_t)((((uint64_t)n * m >> 32) + n) >> s); }
  uint32_t d, m, s;
};

struct paged_t { float* out; uint32_t n; fastdiv page; };

/* @astra
grid = ["cdiv(n, 128)"]
block = [128]
[sizes]
n = [1, 300, 4097]
page = [1, 7, 16]
[args]
p.out = { type = "float", shape = ["n"], output = true }
p.n = "n"
p.page = { construct = "fastdiv(page)" }
in = { type = "float", shape = ["n"] }
*/
__global__ void paged(paged_t p, const float* in) {
  uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) {
    uint32_t q = p.page.div(i);
    p.out[i] = in[i] + 1000.0f * q + (float)(i - q * p.page.d);
  }
}

/* @astra
grid = ["cdiv(n, 128)"]
block = [128]
[sizes]
n = [1, 300, 4097]
rows = [3, 64]
[args]
out = { type = "int32", shape = ["n"], output = true }
by = { construct = "fastdiv(2 * rows + 1)" }
n = "n"
*/
__global__ void row_of(int* out, fastdiv by, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (int)by.div((uint32_t)i);
}
