"""Issue 25: test sizes a kernel runs in seconds — a minimal case written here of what vLLM's
moeTopK showed: per row, `k` rounds over `num_experts / TPB` experts a thread, each checking the
winners so far (`prior < k_idx`), k·k·num_experts/TPB trips a thread. With k and num_experts drawn
up to 4096 a test case ran for hours and `astra spec` never finished validating its draft."""
from astra_cuda import api
from astra_cuda.infer import work
from astra_cuda.model import access, source, spec

TOPK = (
    "template <int TPB>\n"
    "__global__ void topk(const float* x, float* out, int* idx, int num_experts, int k) {\n"
    "  const int row = blockIdx.x * num_experts;\n"
    "  for (int k_idx = 0; k_idx < k; ++k_idx) {\n"
    "    float best = -1.f; int arg = 0;\n"
    "    for (int e = threadIdx.x; e < num_experts; e += TPB) {\n"
    "      float v = x[row + e];\n"
    "      for (int prior = 0; prior < k_idx; ++prior)\n"
    "        if (idx[k * blockIdx.x + prior] == e) v = -1.f;\n"
    "      if (v > best) { best = v; arg = e; }\n"
    "    }\n"
    "    if (threadIdx.x == 0) { out[k * blockIdx.x + k_idx] = best; idx[k * blockIdx.x + k_idx] = arg; }\n"
    "    __syncthreads();\n  }\n}\n"
    "void launch(const float* x, float* out, int* idx, int num_tokens, int num_experts, int k) {\n"
    "  topk<256><<<num_tokens, 256>>>(x, out, idx, num_experts, k);\n}\n")


def test_a_threads_trips_multiply_through_nested_loops():
    body = access.kernel_body(source.parse(TOPK).kernel("topk"))
    env = {"TPB": 256, "num_experts": 4096, "k": 100, "threadIdx.x": 0, "blockIdx.x": 0}
    # k rounds of 16 experts a thread, each checking up to k - 1 earlier winners
    assert work.thread_trips(body, env) == 100 * 16 * 99
    assert work.thread_trips(body, {**env, "k": 0}) == 0
    assert work.thread_trips(body, {k: v for k, v in env.items() if k != "k"}) == 16   # k unread: counted once


def test_every_test_case_runs_within_the_bound(project):
    path = project("topk.cu", TOPK)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "topk", run=False)
    assert p.valid, p.problems
    k = source.parse(TOPK).kernel("topk")
    m = source.parse(TOPK[:k.span.start_byte] + p.comment + TOPK[k.span.start_byte:])
    s = spec.load(m.kernel("topk"), m)
    body = access.kernel_body(m.kernel("topk"))
    cases = s.cases()
    assert cases
    for c in cases:
        trips = work.thread_trips(body, {"TPB": 256, **c, "threadIdx.x": 0, "blockIdx.x": 0})
        assert trips <= work.MAX_THREAD_TRIPS and trips * c["num_tokens"] * 256 <= work.MAX_CASE_TRIPS, c
    # still a real top-k: several experts and more than one round in some case
    assert max(c["k"] for c in cases) > 1 and max(c["num_experts"] for c in cases) > 1
    b = {n: v[0] for n, v in s.bench.items()}
    assert work.thread_trips(body, {"TPB": 256, **b, "threadIdx.x": 0, "blockIdx.x": 0}) <= work.MAX_THREAD_TRIPS


# A dot product whose loop starts a block in (`+` written for `*`, as cuda-samples' fp16 scalar
# product): at n up to blockDim.x no thread makes a trip, so no test size may be there.
DOT = (
    "__global__ void dot(const float* a, const float* b, float* out, unsigned long n) {\n"
    "  const int stride = gridDim.x * blockDim.x;\n"
    "  float v = 0.f;\n"
    "  for (int i = threadIdx.x + blockDim.x + blockIdx.x; i < n; i += stride) v += a[i] * b[i];\n"
    "  if (threadIdx.x == 0) out[blockIdx.x] = v;\n}\n"
    "int main() {\n  float *a, *b, *out;\n  dot<<<64, 128>>>(a, b, out, 200000);\n}\n")


def test_no_thread_trips_where_the_launch_starts_every_loop_past_the_end():
    body = access.kernel_body(source.parse(DOT).kernel("dot"))
    env = {"threadIdx.x": 0, "blockIdx.x": 0, "blockDim.x": 128, "gridDim.x": 64}
    assert [n for n in (1, 128, 129, 4096) if work.idle(body, {**env, "n": n})] == [1, 128]
    # a loop from the thread's own index works at every size; `-` may start a later thread lower
    assert not work.idle(access.kernel_body(source.parse(DOT.replace("+ blockDim.x + blockIdx.x", "")).kernel("dot")),
                         {**env, "n": 100})
    minus = DOT.replace("threadIdx.x + blockDim.x", "blockDim.x - threadIdx.x")
    assert not work.idle(access.kernel_body(source.parse(minus).kernel("dot")), {**env, "n": 100})


def test_sizes_where_no_thread_works_are_left_out(project):
    path = project("dot.cu", DOT)
    p = api.infer_spec(api.snapshot(path.read_text(), str(path)), "dot", run=False)
    assert p.valid, p.problems
    k = source.parse(DOT).kernel("dot")
    m = source.parse(DOT[:k.span.start_byte] + p.comment + DOT[k.span.start_byte:])
    s = spec.load(m.kernel("dot"), m)
    assert s.sizes["n"] and min(s.sizes["n"]) > 128, p.comment
    assert any("left out of the tests" in n for n in p.notes), p.notes
