// An element-wise sigmoid (tests/gate/test_false_refusals.py: an approximation of it must fail
// whatever allowance the gate grants reductions).
/* @astra
grid = ["cdiv(N, 128)"]
block = ["128"]

[sizes]
N = [128, 1000]

[args]
y = { type = "float", shape = ["N"], output = true }
x = { type = "float", shape = ["N"] }
N = "N"
*/
__global__ void sigmoid(float* y, const float* x, int N) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) y[i] = 1.0f / (1.0f + expf(-x[i]));
}
