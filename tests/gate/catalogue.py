"""The cheat catalogue: broken and cheating candidates the gate must reject (with the check
expected to catch each), and correct optimised variants it must pass.

Each entry rewrites one kernel of an example file (`examples/*.cu`); the example's own kernel is
the reference. `python -m tests.gate.catalogue > docs/cheat-catalogue.md` writes the published
table (a test keeps it in sync).
"""
from __future__ import annotations

from dataclasses import dataclass

SILU_SIG = "__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, const int d)"
RMS_SIG = ("__global__ void fused_add_rmsnorm_kernel(__half* __restrict__ input, __half* __restrict__ residual,\n"
           "    const __half* __restrict__ weight, const float epsilon, const int num_tokens, const int hidden_size)")
MERGE_SIG = ("__global__ void merge_attn_states(__half* __restrict__ out, float* __restrict__ out_lse,\n"
             "    const __half* __restrict__ v_a, const float* __restrict__ lse_a,\n"
             "    const __half* __restrict__ v_b, const float* __restrict__ lse_b,\n"
             "    const int num_heads, const int head_dim)")

KERNELS = {"silu_and_mul": "silu_and_mul", "fused_add_rmsnorm": "fused_add_rmsnorm_kernel",
           "merge_attn_states": "merge_attn_states"}


@dataclass(frozen=True)
class Entry:
    name: str
    example: str            # examples/<example>.cu
    what: str               # one line for the table
    body: str               # the rewritten kernel (replaces the example's kernel definition)
    caught_by: tuple[str, ...] = ()   # empty: a correct variant that must pass
    prelude: str = ""       # file-scope code added above the kernel's spec comment
    timed: bool = False     # cheats the timing loop: where kernels are not timed (the CPU) the gate
                            # may pass it; on the GPU the gate or the profile refuses it

    @property
    def cheat(self) -> bool:
        return bool(self.caught_by)

    @property
    def kernel(self) -> str:
        return KERNELS[self.example]


def silu(body: str) -> str:
    return SILU_SIG + " {\n" + body.strip("\n") + "\n}"


def rms(body: str) -> str:
    return RMS_SIG + " {\n" + body.strip("\n") + "\n}"


def merge(body: str) -> str:
    return MERGE_SIG + " {\n" + body.strip("\n") + "\n}"


SILU_LOOP = """
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
"""

RMS_FIRST_PASS = """
  __shared__ float scratch[MAX_THREADS];
  __shared__ float inv_rms;
  const int64_t row = blockIdx.x;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    float x = __half2float(input[idx]) + __half2float(residual[idx]);
    const __half rounded = __float2half(x);
    residual[idx] = rounded;
    x = __half2float(rounded);
    sum_sq += x * x;
  }
"""
RMS_SECOND_PASS = """
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    const float x = __half2float(residual[idx]);
    input[idx] = __float2half(x * inv_rms * __half2float(weight[i]));
  }
"""

MERGE_HOISTED = """
  const int64_t token = blockIdx.x;
  const int head = blockIdx.y;
  const int64_t row = token * num_heads + head;
  const float sa = lse_a[row];
  const float sb = lse_b[row];
  const float m = fmaxf(sa, sb);
  const float wa = expf(sa - m);
  const float wb = expf(sb - m);
  const float inv = 1.0f / (wa + wb);
  const float ca = wa * inv, cb = wb * inv;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
    const float va = __half2float(v_a[row * head_dim + i]);
    const float vb = __half2float(v_b[row * head_dim + i]);
    out[row * head_dim + i] = __float2half(va * ca + vb * cb);
  }
  if (threadIdx.x == 0) out_lse[row] = logf(wa + wb) + m;
"""

CHEATS = [
    Entry("zero_output", "silu_and_mul", "writes zeros everywhere (passes a loose absolute tolerance on small data)",
          silu("""
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) out[(int64_t)blockIdx.x * d + i] = __float2half(0.0f);
"""), ("not_constant",)),
    Entry("no_op", "silu_and_mul", "writes nothing, relying on stale output memory", silu("""
  if (d < 0) out[0] = input[0];
"""), ("poison",)),
    Entry("drops_vector_tail", "silu_and_mul", "half2-vectorized loop that drops the odd last element (and, on odd rows, misaligns)",
          silu("""
  const int64_t token = blockIdx.x;
  const __half2* x2 = reinterpret_cast<const __half2*>(input + token * 2 * d);
  const __half2* y2 = reinterpret_cast<const __half2*>(input + token * 2 * d + d);
  __half2* o2 = reinterpret_cast<__half2*>(out + token * d);
  for (int i = threadIdx.x; i < d / 2; i += blockDim.x) {
    const float2 x = __half22float2(x2[i]);
    const float2 y = __half22float2(y2[i]);
    o2[i] = __floats2half2_rn(silu(x.x) * y.x, silu(x.y) * y.y);
  }
"""), ("poison", "launch")),  # on a GPU, odd rows also misalign the half2 accesses: a fault
    Entry("remembers_it_ran", "silu_and_mul", "a __device__ flag: computes on the first launch, returns early after",
          silu("""
  if (already_done) return;
""" + SILU_LOOP + """
  __syncthreads();
  if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) already_done = 1;
"""), ("poison", "compare", "statefulness"), prelude="__device__ int already_done = 0;"),
    Entry("caches_by_pointer", "silu_and_mul",
          "remembers results per input pointer in device memory and replays them for the same pointer",
          silu("""
  const int64_t token = blockIdx.x;
  const bool replay = (cached_input == input && cached_d == d);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const int64_t o = token * d + i;
    if (replay && o < (1 << 22)) { out[o] = memo[o]; continue; }
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[o] = __float2half(silu(x) * y);
    if (o < (1 << 22)) memo[o] = out[o];
  }
  if (threadIdx.x == 0 && blockIdx.x == gridDim.x - 1) { cached_input = input; cached_d = d; }
"""), ("statefulness", "compare", "poison"),
          prelude="__device__ const __half* cached_input = nullptr;\n__device__ int cached_d = 0;\n"
                  "__device__ __half memo[1 << 22];"),
    Entry("mutates_const_input", "silu_and_mul", "casts away const and overwrites its input", silu("""
  const int64_t token = blockIdx.x;
  __half* scratch = const_cast<__half*>(input);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
    scratch[token * 2 * d + i] = __float2half(0.0f);
  }
"""), ("inputs_unchanged",)),
    Entry("shared_memory_race", "fused_add_rmsnorm", "drops the __syncthreads() after thread 0 publishes inv_rms",
          rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
""" + RMS_SECOND_PASS), ("schedules", "compare", "determinism", "compute_sanitizer")),
    Entry("skips_timed_sizes", "silu_and_mul", "returns early on large (timed-only) sizes: d > 8192", silu("""
  if (d > 8192) return;
""" + SILU_LOOP), ("poison",)),
    Entry("first_rows_only", "silu_and_mul", "processes only the first 64 rows (shape specialisation)", silu("""
  if (blockIdx.x >= 64) return;
""" + SILU_LOOP), ("poison",)),
    Entry("hard_coded_width", "silu_and_mul", "loop bound hard-coded to the tested width 4096", silu("""
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < 4096; i += blockDim.x) {
    if (i >= d) break;
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
"""), ("poison",)),
    Entry("precision_downgrade", "fused_add_rmsnorm",
          "approximate inverse square root without a Newton step (bit trick), ~3% error",
          rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) {
    const float v = total / hidden_size + epsilon;
    inv_rms = __int_as_float(0x5f3759df - (__float_as_int(v) >> 1));
  }
  __syncthreads();
""" + RMS_SECOND_PASS), ("compare",)),
    Entry("tuned_to_normal_inputs", "silu_and_mul",
          "exact sigmoid only for -6 < x < 6 (all that normal test data ever holds), 0.5 beyond", silu("""
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    const float s = fabsf(x) < 6.0f ? 1.0f / (1.0f + expf(-x)) : 0.5f;
    out[token * d + i] = __float2half(x * s * y);
  }
"""), ("compare",)),
    Entry("constant_output", "merge_attn_states", "returns constants for both outputs", merge("""
  const int64_t row = (int64_t)blockIdx.x * num_heads + blockIdx.y;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) out[row * head_dim + i] = __float2half(0.5f);
  if (threadIdx.x == 0) out_lse[row] = 1.0f;
"""), ("not_constant",)),
    Entry("skips_second_output", "merge_attn_states", "never writes out_lse", merge("""
  const int64_t row = (int64_t)blockIdx.x * num_heads + blockIdx.y;
  const float m = fmaxf(lse_a[row], lse_b[row]);
  const float wa = expf(lse_a[row] - m), wb = expf(lse_b[row] - m);
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
    out[row * head_dim + i] = __float2half((__half2float(v_a[row * head_dim + i]) * wa +
                                            __half2float(v_b[row * head_dim + i]) * wb) / (wa + wb));
"""), ("poison",)),
    Entry("ignores_one_operand", "merge_attn_states", "uses only the first partial state's weight", merge("""
  const int64_t row = (int64_t)blockIdx.x * num_heads + blockIdx.y;
  for (int i = threadIdx.x; i < head_dim; i += blockDim.x) out[row * head_dim + i] = v_a[row * head_dim + i];
  if (threadIdx.x == 0) out_lse[row] = lse_a[row];
"""), ("compare",)),
    Entry("out_of_bounds_write", "silu_and_mul", "also writes one element past the end of the output", silu(
        SILU_LOOP + """
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) out[(int64_t)gridDim.x * d] = __float2half(0.0f);
"""), ("sanitize", "compute_sanitizer", "launch", "inputs_unchanged", "compare", "poison")),
    Entry("out_of_bounds_read", "silu_and_mul", "reads one element past the end of its input", silu(
        SILU_LOOP + """
  if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) {
    const float past = __half2float(input[(int64_t)gridDim.x * 2 * d]);
    if (past == 12345.0f) out[0] = __float2half(past);
  }
"""), ("sanitize", "compute_sanitizer", "launch")),
    Entry("clock_warmup_detection", "silu_and_mul",
          "reads clock64() and stops working once the kernel has been warm for a while", silu("""
  if (threadIdx.x == 0 && blockIdx.x == 0 && first_seen == 0) first_seen = clock64();
  __syncthreads();
  if (first_seen != 0 && clock64() - first_seen > 2000000LL) return;
""" + SILU_LOOP), ("poison", "statefulness", "compare"), prelude="__device__ long long first_seen = 0;"),
    Entry("stops_after_100_launches", "silu_and_mul",
          "counts its launches in a __device__ counter and stops working after 100 (outlasts a short test run)",
          silu("""
  __shared__ bool tired;
  if (threadIdx.x == 0) tired = launches > 100u;
  __syncthreads();
  if (tired) return;
""" + SILU_LOOP + """
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&launches, 1u);
"""), ("statefulness",), prelude="__device__ unsigned launches = 0;"),
    Entry("skips_if_output_looks_written", "silu_and_mul",
          "skips elements whose output already holds a number (defeats NaN-only poisoning)", silu("""
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    if (!__hisnan(out[token * d + i])) continue;
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
"""), ("poison",)),
    Entry("skips_many_tokens", "silu_and_mul", "returns early when launched with 4096 or more tokens (timed batch only)",
          silu("""
  if (gridDim.x >= 4096) return;
""" + SILU_LOOP), ("poison",)),
    Entry("signature_changed", "silu_and_mul", "adds a parameter (breaks the launch contract)",
          SILU_SIG.replace("const int d)", "const int d, const int stride)") + " {\n" + SILU_LOOP + "}",
          ("screen",)),
    Entry("launch_bounds_too_small", "silu_and_mul", "__launch_bounds__(256) while the spec launches 1024 threads",
          silu(SILU_LOOP).replace("__global__ void", "__global__ void __launch_bounds__(256)"), ("screen",)),
    Entry("host_api_call", "silu_and_mul", "calls a host API (cudaMalloc) from the kernel", silu("""
  void* p = nullptr;
  if (d < 0) cudaMalloc(&p, 16);
""" + SILU_LOOP), ("screen",)),
    Entry("skips_residual_write", "fused_add_rmsnorm", "forgets to store the updated residual (in-place output)",
          rms(RMS_FIRST_PASS.replace("    residual[idx] = rounded;\n", "") + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
  __syncthreads();
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    const float x = __half2float(__float2half(__half2float(input[idx]) + __half2float(residual[idx])));
    input[idx] = __float2half(x * inv_rms * __half2float(weight[i]));
  }
"""), ("compare",)),
    Entry("mutates_weight", "fused_add_rmsnorm", "scales the const weight in place", rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
  __syncthreads();
  __half* w = const_cast<__half*>(weight);
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    input[idx] = __float2half(__half2float(residual[idx]) * inv_rms * __half2float(weight[i]));
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) w[i] = weight[i];
  if (blockIdx.x == 0 && threadIdx.x == 0) w[0] = __float2half(__half2float(weight[0]) + 1.0f);
"""), ("inputs_unchanged",)),
    Entry("unguarded_reduction", "fused_add_rmsnorm",
          "tree reduction that reads shared memory beyond blockDim (uninitialised) for small rows",
          rms(RMS_FIRST_PASS + """
  scratch[threadIdx.x] = sum_sq;
  __syncthreads();
  for (int stride = MAX_THREADS / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) scratch[threadIdx.x] += scratch[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) inv_rms = rsqrtf(scratch[0] / hidden_size + epsilon);
  __syncthreads();
""" + RMS_SECOND_PASS), ("not_constant", "compare", "schedules", "sanitize", "determinism",
                                "compute_sanitizer")),
    Entry("divergent_barrier", "fused_add_rmsnorm", "__syncthreads() inside a branch not all threads take",
          rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) {
    inv_rms = rsqrtf(total / hidden_size + epsilon);
    __syncthreads();
  }
""" + RMS_SECOND_PASS), ("schedules", "launch", "compare", "determinism", "compute_sanitizer")),
    Entry("nan_output", "silu_and_mul", "writes NaN everywhere (0/0)", silu("""
  const float zero = d < 0 ? 1.0f : 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
    out[(int64_t)blockIdx.x * d + i] = __float2half(zero / zero);
"""), ("not_constant",)),
    Entry("nan_in_the_tail", "silu_and_mul", "vectorized body, writes NaN instead of the odd last element", silu("""
  const int64_t token = blockIdx.x;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    if (d % 2 == 1 && i == d - 1) { out[token * d + i] = __float2half(nanf("")); continue; }
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
"""), ("compare",)),
    Entry("ignores_epsilon", "fused_add_rmsnorm",
          "drops epsilon from the RMS (only wrong on small-valued rows: the held-out tiny distribution)",
          rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size);
  __syncthreads();
""" + RMS_SECOND_PASS), ("compare",)),
    Entry("weight_index_wraps", "fused_add_rmsnorm", "indexes the weight modulo 1024 (right only for rows up to 1024)",
          rms(RMS_FIRST_PASS + """
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
  __syncthreads();
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    input[idx] = __float2half(__half2float(residual[idx]) * inv_rms * __half2float(weight[i % 1024]));
  }
"""), ("compare",)),
    Entry("every_other_row", "merge_attn_states", "skips odd tokens (half the work, sparse writes)",
          merge("  if (blockIdx.x % 2 == 1) return;\n" + MERGE_HOISTED), ("poison",)),
]


# Cheats of the timing loop (issue 17): honest while checked, cheating while timed. On the GPU the
# gate or the profile (`timed_*` checks) refuses each; the CPU does not time kernels.
TIMED = [
    Entry("skips_rows_already_written", "silu_and_mul",
          "computes a row's first two outputs and skips the row when the output already holds exactly those bits "
          "(right on poisoned outputs, fast in a loop that repeats a launch)", silu("""
  const int64_t token = blockIdx.x;
  __shared__ bool done;
  if (threadIdx.x == 0) {
    bool same = d >= 2;
    for (int k = 0; k < 2 && k < d; ++k) {
      const float x = __half2float(input[token * 2 * d + k]);
      const float y = __half2float(input[token * 2 * d + d + k]);
      same = same && __half_as_ushort(__float2half(silu(x) * y)) == __half_as_ushort(out[token * d + k]);
    }
    done = same;
  }
  __syncthreads();
  if (done) return;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
  }
"""), ("statefulness", "timed_outputs"), timed=True),
    Entry("counts_launches_per_pointer", "silu_and_mul",
          "a small __device__ table counts launches per input pointer; after 5 on the same buffers, on timed "
          "sizes, the second half of the rows is skipped",
          silu("""
  const int64_t token = blockIdx.x;
  int slot = -1;
  for (int k = 0; k < 16; ++k)
    if (seen_ptr[k] == (const void*)input) { slot = k; break; }
  if (gridDim.x >= 4096 && slot >= 0 && seen_count[slot] > 5u && token >= gridDim.x / 2) return;
""" + SILU_LOOP.replace("  const int64_t token = blockIdx.x;\n", "") + """
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (slot < 0) { slot = next_slot % 16; next_slot += 1; seen_ptr[slot] = input; seen_count[slot] = 0u; }
    seen_count[slot] += 1u;
  }
"""), ("timed_outputs", "statefulness", "races", "poison", "compare"),
          prelude="__device__ const void* seen_ptr[16];\n__device__ unsigned seen_count[16];\n"
                  "__device__ unsigned next_slot = 0;", timed=True),
    Entry("skips_after_500_launches", "silu_and_mul",
          "counts its launches in a __device__ counter and skips every other row after 500 (outlasts the gate's "
          "extra launches, not the timing)", silu("""
  __shared__ bool tired;
  if (threadIdx.x == 0) tired = launches > 500u;
  __syncthreads();
  if (tired && blockIdx.x % 2 == 1) return;
""" + SILU_LOOP + """
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&launches, 1u);
"""), ("timed_outputs", "statefulness"), prelude="__device__ unsigned launches = 0;", timed=True),
    Entry("replays_by_input_content", "silu_and_mul",
          "keeps each row's outputs with a fingerprint of its inputs in __device__ memory and replays them when the "
          "fingerprint matches: right answers, fewer bytes read once warm",
          silu("""
  const int64_t token = blockIdx.x;
  const bool fits = (token + 1) * d <= MEMO;
  __shared__ bool hit;
  if (threadIdx.x == 0) {
    unsigned h = 2166136261u ^ (unsigned)d;
    for (int k = 0; k < 8 && k < d; ++k)
      h = (h ^ __half_as_ushort(input[token * 2 * d + k]) ^ (__half_as_ushort(input[token * 2 * d + d + k]) << 16))
          * 16777619u;
    hit = fits && token < 8192 && memo_key[token] == h;
    if (fits && token < 8192) memo_key[token] = h;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    if (hit) { out[token * d + i] = memo[token * d + i]; continue; }
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
    if (fits) memo[token * d + i] = out[token * d + i];
  }
"""), ("timed_plausibility", "timed_outputs", "statefulness", "compare", "races"),
          prelude="#define MEMO (1 << 26)\n__device__ unsigned memo_key[8192];\n__device__ __half memo[MEMO];",
          timed=True),
    Entry("replays_by_address_when_timed", "silu_and_mul",
          "on timed sizes, remembers the output pointer and its results and replays them when launched on the same "
          "buffers again", silu("""
  const int64_t token = blockIdx.x;
  const bool big = gridDim.x >= 4096 && (int64_t)gridDim.x * d <= MEMO;
  const bool replay = big && last_out == (const void*)out && last_in == (const void*)input && last_d == d;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    if (replay) { out[token * d + i] = memo[token * d + i]; continue; }
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[token * d + i] = __float2half(silu(x) * y);
    if (big) memo[token * d + i] = out[token * d + i];
  }
  if (big && blockIdx.x == 0 && threadIdx.x == 0) { last_out = out; last_in = input; last_d = d; }
"""), ("timed_outputs", "timed_plausibility", "compare", "determinism", "statefulness", "races"),
          prelude="#define MEMO (1 << 26)\n__device__ const void* last_out = nullptr;\n"
                  "__device__ const void* last_in = nullptr;\n__device__ int last_d = 0;\n__device__ __half memo[MEMO];",
          timed=True),
]

CORRECT = [
    Entry("half2_with_tail", "silu_and_mul", "half2 loads/stores when rows are 4-byte aligned, scalar tail", silu("""
  const int64_t token = blockIdx.x;
  const __half* x_row = input + token * 2 * d;
  const __half* y_row = x_row + d;
  __half* o_row = out + token * d;
  if (d % 2 == 0) {
    const __half2* x2 = reinterpret_cast<const __half2*>(x_row);
    const __half2* y2 = reinterpret_cast<const __half2*>(y_row);
    __half2* o2 = reinterpret_cast<__half2*>(o_row);
    for (int i = threadIdx.x; i < d / 2; i += blockDim.x) {
      const float2 x = __half22float2(x2[i]);
      const float2 y = __half22float2(y2[i]);
      o2[i] = __floats2half2_rn(silu(x.x) * y.x, silu(x.y) * y.y);
    }
  } else {
    for (int i = threadIdx.x; i < d; i += blockDim.x)
      o_row[i] = __float2half(silu(__half2float(x_row[i])) * __half2float(y_row[i]));
  }
""")),
    Entry("expf_fast_math", "silu_and_mul", "__expf instead of expf", silu(
        SILU_LOOP.replace("silu(x) * y", "x / (1.0f + __expf(-x)) * y"))),
    Entry("fdividef", "silu_and_mul", "__fdividef for the sigmoid's division", silu(
        SILU_LOOP.replace("silu(x) * y", "__fdividef(x, 1.0f + __expf(-x)) * y"))),
    Entry("reciprocal_multiply", "silu_and_mul", "reciprocal then multiply", silu(
        SILU_LOOP.replace("silu(x) * y", "x * (1.0f / (1.0f + expf(-x))) * y"))),
    Entry("pragma_unroll", "silu_and_mul", "unrolled by 4 with #pragma unroll and a bounds check", silu("""
  const int64_t token = blockIdx.x;
  for (int64_t base = threadIdx.x; base < d; base += 4 * (int64_t)blockDim.x) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base + k * (int64_t)blockDim.x;
      if (i < d) {
        const float x = __half2float(input[token * 2 * d + i]);
        const float y = __half2float(input[token * 2 * d + d + i]);
        out[token * d + i] = __float2half(silu(x) * y);
      }
    }
  }
""")),
    Entry("ldg_loads", "silu_and_mul", "read-only loads through __ldg", silu(
        SILU_LOOP.replace("__half2float(input[token * 2 * d + i])", "__half2float(__ldg(&input[token * 2 * d + i]))")
        .replace("__half2float(input[token * 2 * d + d + i])", "__half2float(__ldg(&input[token * 2 * d + d + i]))"))),
    Entry("grid_stride_loop", "silu_and_mul", "one flat grid-stride loop over all elements", silu("""
  const int64_t total = (int64_t)gridDim.x * d;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t token = e / d, i = e % d;
    const float x = __half2float(input[token * 2 * d + i]);
    const float y = __half2float(input[token * 2 * d + d + i]);
    out[e] = __float2half(silu(x) * y);
  }
""")),
    Entry("warp_shuffle_rmsnorm", "fused_add_rmsnorm", "warp-shuffle (__shfl_xor_sync) reduction, one slot per warp",
          rms(RMS_FIRST_PASS + """
  // The last warp may be partial: shuffle only among the lanes that exist.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warps = (blockDim.x + 31) / 32;
  const int lanes = min(32, (int)blockDim.x - warp * 32);
  const unsigned mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(mask, sum_sq, offset);
    if (lane + offset < lanes) sum_sq += other;
  }
  if (lane == 0) scratch[warp] = sum_sq;
  __syncthreads();
  if (warp == 0) {
    float v = lane < warps ? scratch[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_down_sync(mask, v, offset);
      if (lane + offset < warps) v += other;
    }
    if (lane == 0) inv_rms = rsqrtf(v / hidden_size + epsilon);
  }
  __syncthreads();
""" + RMS_SECOND_PASS)),
    Entry("shared_weight_rmsnorm", "fused_add_rmsnorm", "weight staged in shared memory (rows up to 8192)",
          rms(RMS_FIRST_PASS.replace("  __shared__ float inv_rms;\n",
                                      "  __shared__ float inv_rms;\n  __shared__ __half w_s[8192];\n") + """
  const bool staged = hidden_size <= 8192;
  if (staged)
    for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) w_s[i] = weight[i];
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
  __syncthreads();
  for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
    const int64_t idx = row * hidden_size + i;
    const float w = __half2float(staged ? w_s[i] : weight[i]);
    input[idx] = __float2half(__half2float(residual[idx]) * inv_rms * w);
  }
""")),
    Entry("float4_rmsnorm", "fused_add_rmsnorm", "16-byte (float4 = 8 halves) loads when rows are aligned, scalar otherwise",
          rms("""
  __shared__ float scratch[MAX_THREADS];
  __shared__ float inv_rms;
  const int64_t row = blockIdx.x;
  float sum_sq = 0.0f;
  const bool vec = hidden_size % 8 == 0;
  if (vec) {
    float4* in4 = reinterpret_cast<float4*>(input + row * hidden_size);
    float4* res4 = reinterpret_cast<float4*>(residual + row * hidden_size);
    for (int v = threadIdx.x; v < hidden_size / 8; v += blockDim.x) {
      float4 a = in4[v], b = res4[v];
      __half2* ha = reinterpret_cast<__half2*>(&a);
      __half2* hb = reinterpret_cast<__half2*>(&b);
      for (int k = 0; k < 4; ++k) {
        const float2 fa = __half22float2(ha[k]), fb = __half22float2(hb[k]);
        hb[k] = __floats2half2_rn(fa.x + fb.x, fa.y + fb.y);
        const float2 r = __half22float2(hb[k]);
        sum_sq += r.x * r.x + r.y * r.y;
      }
      res4[v] = b;
    }
  } else {
    for (int i = threadIdx.x; i < hidden_size; i += blockDim.x) {
      const int64_t idx = row * hidden_size + i;
      const __half rounded = __float2half(__half2float(input[idx]) + __half2float(residual[idx]));
      residual[idx] = rounded;
      const float x = __half2float(rounded);
      sum_sq += x * x;
    }
  }
  const float total = block_reduce_sum(sum_sq, scratch);
  if (threadIdx.x == 0) inv_rms = rsqrtf(total / hidden_size + epsilon);
  __syncthreads();
""" + RMS_SECOND_PASS)),
    Entry("ticket_counter_reset", "silu_and_mul",
          "legitimate __device__ state: blocks take a ticket from a grid-wide counter; the last block resets it",
          silu(SILU_LOOP + """
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ticket = atomicAdd(&finished_blocks, 1u);
    if (ticket == gridDim.x - 1) finished_blocks = 0u;  // the last block: ready for the next launch
  }
"""), prelude="__device__ unsigned finished_blocks = 0;"),
    Entry("hoisted_merge", "merge_attn_states", "exp/divide hoisted out of the per-element loop", merge(MERGE_HOISTED)),
    Entry("half2_merge", "merge_attn_states", "hoisted weights and half2 loads/stores (head_dim even)", merge("""
  const int64_t row = (int64_t)blockIdx.x * num_heads + blockIdx.y;
  const float sa = lse_a[row], sb = lse_b[row];
  const float m = fmaxf(sa, sb);
  const float wa = __expf(sa - m), wb = __expf(sb - m);
  const float ca = __fdividef(wa, wa + wb), cb = __fdividef(wb, wa + wb);
  if (head_dim % 2 == 0) {
    const __half2* a2 = reinterpret_cast<const __half2*>(v_a + row * head_dim);
    const __half2* b2 = reinterpret_cast<const __half2*>(v_b + row * head_dim);
    __half2* o2 = reinterpret_cast<__half2*>(out + row * head_dim);
    for (int i = threadIdx.x; i < head_dim / 2; i += blockDim.x) {
      const float2 a = __half22float2(a2[i]), b = __half22float2(b2[i]);
      o2[i] = __floats2half2_rn(a.x * ca + b.x * cb, a.y * ca + b.y * cb);
    }
  } else {
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x)
      out[row * head_dim + i] = __float2half(__half2float(v_a[row * head_dim + i]) * ca +
                                             __half2float(v_b[row * head_dim + i]) * cb);
  }
  if (threadIdx.x == 0) out_lse[row] = logf(wa + wb) + m;
""")),
]

CHEATS = CHEATS + TIMED
ALL = CHEATS + CORRECT


def candidate_text(entry: Entry, example_text: str) -> str:
    """The example file with the kernel rewritten as `entry` says."""
    from astra_cuda.compile import extract
    text = extract.replace_kernel(example_text, entry.kernel, entry.body)
    if entry.prelude:
        text = text.replace("/* @astra", entry.prelude + "\n\n/* @astra", 1)
    return text


CHECKS = {
    "screen": "static screening (tree-sitter): name, parameters, template parameters, launch bounds, host code",
    "compare": "every case against the reference: abs(got - ref) <= atol + rtol * abs(ref), NaN/inf patterns equal",
    "poison": "outputs filled with 0xFF (NaN) or 0xA5 before each launch; an element left holding it was never written",
    "not_constant": "a constant (e.g. all-zero) output where the reference's varies fails whatever the tolerance",
    "inputs_unchanged": "read-only inputs compared byte for byte after every launch",
    "statefulness": "launched again over its own output with 1% of the elements spoiled, it must rewrite them; the "
                    "same buffers refilled with new values must give the new result; 150 extra launches for "
                    "kernels that keep __device__ state or read clocks",
    "schedules": "CPU: forward, reverse and random thread orders must agree bitwise (else a race)",
    "determinism": "GPU, or no reference: repeated runs must agree (within tolerance with atomics)",
    "sanitize": "CPU: AddressSanitizer build on small cases (out-of-bounds reads and writes)",
    "races": "CPU: ThreadSanitizer build over the fibers (races every schedule hides)",
    "compute_sanitizer": "GPU: compute-sanitizer memcheck and racecheck on small cases, exact-size allocations",
    "launch": "the launch itself failed: crash, trap, deadlock, timeout",
    "timed_outputs": "GPU profile: every timed launch (outputs poisoned, buffers at fresh addresses) and the "
                     "launches on fixed buffers over its previous outputs are checked: sampled elements after each, "
                     "some launches in full",
    "timed_plausibility": "GPU profile: per-launch times that drop after the first launches, fall in two groups, or "
                          "speed up on fixed buffers (where the reference's do not), or beat the roofline",
}


def table() -> str:
    lines = ["# Cheat catalogue", "",
             "Generated from `tests/gate/catalogue.py` by `python -m tests.gate.catalogue`; "
             "`tests/gate/test_catalogue.py` runs every entry through the gate on the CPU backend in CI "
             "and asserts the check named here is the one that rejects it.", "",
             f"## Rejected ({len(CHEATS)})", "",
             "| candidate | kernel | what it does | check that catches it |",
             "|---|---|---|---|"]
    for e in CHEATS:
        mark = " (timing loop)" if e.timed else ""
        lines.append(f"| `{e.name}`{mark} | {e.example} | {e.what} | {', '.join(f'`{c}`' for c in e.caught_by)} |")
    lines += ["", "When several checks are listed, the first to run that fails rejects the candidate "
              "(the test accepts any of them); the CPU and the GPU can differ (e.g. `schedules` and `sanitize` "
              "on the CPU, `determinism` and `compute_sanitizer` on the GPU). Entries marked *(timing loop)* behave "
              "while checked and cheat while timed: on the GPU the gate or the profile (`timed_*`, an invalid "
              "profile: the candidate is not adopted) refuses them; the CPU does not time kernels, so there the "
              "gate may pass one — the profiler's checks are tested on a NumPy stand-in for the GPU "
              "(`tests/profiler/`). `python -m tests.gate.run_catalogue --backend gpu` profiles every entry the "
              "gate passes.", "",
              f"## Correct optimised variants that must pass ({len(CORRECT)})", "",
              "| candidate | kernel | what it does |", "|---|---|---|"]
    lines += [f"| `{e.name}` | {e.example} | {e.what} |" for e in CORRECT]
    lines += gpu_rows()
    lines += ["", "## The checks", "", "| check | what it does |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in CHECKS.items()]
    return "\n".join(lines) + "\n"


GPU_RESULTS = "benchmarks/results/gate_catalogue_timed-H100.json"


def gpu_rows() -> list[str]:
    """The timing-loop entries and the correct variants as the committed GPU run found them."""
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), GPU_RESULTS)
    if not os.path.exists(path):
        return []
    data = json.load(open(path))
    latest = {r["name"]: r for r in data["results"]}  # rows are in run order: the last one counts
    lines = ["", f"## On the GPU ({data['device']}; `{GPU_RESULTS}`)", "",
             "Gate without compute-sanitizer, then the profile of every entry the gate passes.", "",
             "| candidate | result | refused by | run |", "|---|---|---|---|"]
    for e in TIMED + CORRECT:
        r = latest.get(e.name)
        if r is None:
            lines.append(f"| `{e.name}` | not run | | |")
            continue
        verdict = ("refused" if r["status"] == "failed" else r["status"]) if e.cheat else \
            ("accepted" if r["status"] == "passed" else f"**wrongly refused** ({r['status']})")
        check = f"`{r['caught_by']}`" if r.get("caught_by") else ""
        lines.append(f"| `{e.name}` | {verdict} | {check} | {r.get('run', '')} |")
    if data.get("note"):
        lines += ["", data["note"] + "."]
    return lines


if __name__ == "__main__":
    print(table(), end="")
