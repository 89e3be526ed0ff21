"""A launcher's block made through the project's own power-of-two helper (apex's welford_kernel:
`block_y = min(h_last_pow2(batch_size), 16)`, `block_x = max(1, min(512 / block_y,
h_last_pow2(space_size)))`). Read whole, the spec's block is the launcher's; guessed, it was
`min(ss, 1024)`, a block the program never makes — one whose last partial warp the kernel's
reduction drops, so a correct rewrite was refused against it. Small cases written here."""
from astra_cuda import infer
from astra_cuda.infer import hostcalls
from astra_cuda.model import exprs, source

HELPERS = (
    "int floor_p2(unsigned int n) { n |= (n >> 1); n |= (n >> 2); n |= (n >> 4); n |= (n >> 8);\n"
    "  n |= (n >> 16); return n - (n >> 1); }\n"
    "int grow(int n) { int p = 1; while (p < n) p *= 2; return p; }\n"
    "int twice(int n) { return 2 * n; }\n"
    "int spin(int n) { while (n > 0) n++; return n; }\n")


def _helper(name):
    return next(fn for fn in (n for n in _walk(source.parser().parse(HELPERS.encode()).root_node)
                              if n.type == "function_definition") if name in fn.text.decode().split("(")[0])


def _walk(n):
    yield n
    for c in n.children:
        yield from _walk(c)


def test_a_helper_is_known_by_its_values_not_its_name():
    assert hostcalls.identify(_helper("floor_p2")) == "last_pow2"
    assert hostcalls.identify(_helper("grow")) == "next_pow2"
    assert hostcalls.identify(_helper("twice")) is None
    assert hostcalls.identify(_helper("spin")) is None   # runs past its step budget: not read


def test_last_pow2_is_a_spec_function():
    assert [exprs.evaluate_int("last_pow2(n)", {"n": n}) for n in (1, 2, 3, 100, 512, 513)] == [1, 2, 2, 64, 512, 512]


KERNEL = HELPERS + (
    "__global__ void colsum(const float* x, float* out, int bs, int fs, int ss) {\n"
    "  __shared__ float part[1024];\n  int t = threadIdx.y * blockDim.x + threadIdx.x;\n  float acc = 0.f;\n"
    "  for (int b = threadIdx.y; b < bs; b += blockDim.y)\n"
    "    for (int i = threadIdx.x; i < ss; i += blockDim.x) acc += x[(b * fs + blockIdx.x) * ss + i];\n"
    "  part[t] = acc;\n  __syncthreads();\n"
    "  if (t == 0) { float s = 0.f; for (int k = 0; k < blockDim.x * blockDim.y; k++) s += part[k]; out[blockIdx.x] = s; }\n}\n"
    "void launch(const float* x, float* out, int bs, int fs, int ss) {\n"
    "  int by = min(floor_p2(bs), int(512 / 32));\n  int bx = max(1, min(512 / by, floor_p2(ss)));\n"
    "  dim3 block(bx, by);\n  colsum<<<fs, block>>>(x, out, bs, fs, ss);\n}\n")


def test_the_block_made_through_a_helper_is_the_launchers():
    m = source.parse(KERNEL)
    prop = infer.infer(m.kernel("colsum"), m)
    assert prop.valid, prop.problems
    assert "last_pow2(ss)" in prop.comment and "last_pow2(bs)" in prop.comment, prop.comment
    assert not any("guessed a block" in n for n in prop.notes), prop.notes


def test_a_slow_helper_is_not_read_and_costs_a_bounded_time():
    # a round-up computed one step at a time: right on every probe, but thousands of statements each
    slow = source.parser().parse(
        b"int slow_up(int n) { int p = 1; int i = 0; while (i < 1000) { i++; } while (p < n) p *= 2; return p; }\n")
    fn = next(n for n in _walk(slow.root_node) if n.type == "function_definition")
    import time
    t = time.perf_counter()
    assert hostcalls.identify(fn) is None
    assert time.perf_counter() - t < 20
