#include <stdint.h>
struct { int32_t n_tokens; int32_t n_sequences; } typedef Batch;
struct { int32_t start_idx; int32_t n_tokens; int32_t seen_tokens; int32_t unused; } typedef Seq;
/* @astra
grid = ["cdiv(d, 256)", "seqs"]
block = [64]
require = ["d % 4 == 0"]
[sizes]
seqs = [1, 7, 130]
d = [4, 256, 1000]
V = [64, 1000]
[args]
out = { type = "float", shape = ["seqs", "d"], output = true }
acts = { type = "float", shape = ["V", "d"] }
batch = { records = 1, n_sequences = "seqs" }
seqs_ = { records = "seqs", start_idx = { init = "randint(1, V / 2 + 1)" }, n_tokens = { init = "randint(1, V / 2 + 1)" } }
d = "d"
*/
__global__ void k(float* out, const float* acts, const Batch* batch, const Seq* seqs_, const int32_t d) {
    const int32_t s = blockIdx.y;
    if (s >= batch->n_sequences) return;
    const Seq q = seqs_[s];
    const int row = q.start_idx + q.n_tokens - 1;
    const int i = 4 * (threadIdx.x + blockIdx.x * 64);
    if (i < d) *(uint4*)(out + s * d + i) = *(const uint4*)(acts + row * d + i);
}
