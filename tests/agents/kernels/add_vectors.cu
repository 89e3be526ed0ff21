// c = a + b, one element per thread, the grid rounded up to whole blocks of 256 (the shape of the
// introductory vector-add samples). Written here for the tests.

/* @astra
grid = ["(n + 256 - 1) / 256"]
block = ["256"]

[sizes]
n = [1, 100, 4096]

[bench]
n = [25600000]

[args]
a = { type = "float", shape = ["n"] }
b = { type = "float", shape = ["n"] }
c = { type = "float", shape = ["n"], output = true }
n = "n"
*/
__global__ void add_vectors(const float *a, const float *b, float *c, int n) {
  int i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i < n) {
    c[i] = a[i] + b[i];
  }
}

void add(const float *a, const float *b, float *c, int n) {
  int threads = 256;
  int blocks = (n + threads - 1) / threads;
  add_vectors<<<blocks, threads>>>(a, b, c, n);
}
