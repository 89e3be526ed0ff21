"""`pack_stores` on a guarded run: a fixed-count loop whose one store sits under a bounds `if`
and goes through an index local (`int outIdx = base + j; if (outIdx < n) out[outIdx] = v[j];`,
bitsandbytes' int32 → half dequantizer's last loop). The run is kept in a private buffer with a
bit per trip that stored; all stored: one wide store, otherwise each stored element to its own
place. Kernels written here; the rewrite passes the CPU gate at sizes with partial tiles, and
a variant that ignores the bits is caught."""
import pytest

from agent_helpers import cpu_evaluator, loaded_kernel
from astra_cuda.agents.offline import TRANSFORMS, context_from_text

KERNELS = r'''
#include <cuda_fp16.h>

/* @astra
grid = ["cdiv(n, 64 * 4)"]
block = ["64"]

[sizes]
n = [1, 5, 300, 1027]

[bench]
n = [1048576]

[args]
a   = { type = "int32", shape = ["n"] }
out = { type = "half", shape = ["n"], output = true }
n   = "n"
*/
__global__ void dequant_tile(const int* a, half* out, int n) {
  int block_offset = blockIdx.x * 64 * 4;
  int thread_offset = threadIdx.x * 4;
  half vals[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int idx = block_offset + thread_offset + j;
    vals[j] = __float2half(idx < n ? a[idx] * 0.5f : 0.0f);
  }
#pragma unroll 4
  for (int j = 0; j < 4; j++) {
    int outIdx = block_offset + thread_offset + j;
    if (outIdx < n) {
      out[outIdx] = vals[j];
    }
  }
}

/* @astra
grid = ["cdiv(n, 64 * 4)"]
block = ["64"]

[sizes]
n = [1, 5, 300, 1027]

[bench]
n = [1048576]

[args]
a   = { type = "int32", shape = ["n"] }
out = { type = "half", shape = ["n + 1"], output = true }
n   = "n"
*/
__global__ void dequant_shifted(const int* a, half* out, int n) {
  const int e = (blockIdx.x * 64 + threadIdx.x) * 4;
  half vals[4];
  for (int j = 0; j < 4; ++j) vals[j] = __float2half(e + j < n ? a[e + j] * 0.25f : 0.0f);
  if (e == 0) out[0] = __float2half(1.0f);
  for (int j = 0; j < 4; ++j)
    if (1 + e + j < n + 1) out[1 + e + j] = vals[j];
}
'''

STORE = "    if (outIdx < n) {\n      out[outIdx] = vals[j];\n    }\n"


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "guarded.cu"
    p.write_text(KERNELS)
    return p


def rewritten(path, kernel, text=None):
    text, sp = loaded_kernel(path, kernel, text)
    return TRANSFORMS["pack_stores"].apply(text, context_from_text(kernel, text, sp))


def test_a_guarded_run_through_an_index_local_is_one_store_when_every_trip_stored(path):
    rw = rewritten(path, "dequant_tile")
    assert rw is not None, "the guarded store through `outIdx` is a run"
    assert "astra_run0[j] = vals[j], astra_run0_set |= 1ull << j;" in rw.text
    assert "astra_store_run<4>(out + ((int)(block_offset + thread_offset)), astra_run0);" in rw.text
    assert "int outIdx = block_offset + thread_offset + j; out[outIdx] = astra_run0[j];" in rw.text
    evaluate = cpu_evaluator(path, "dequant_tile")
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback
    # the partial tile's trips that did not store must stay unwritten: ignoring the bits is caught
    cheat = rw.text.replace("if (astra_run0_set == (~0ull >> (64 - (4)))) {", "if (true) {")
    assert cheat != rw.text and not evaluate(cheat).passed


def test_a_guarded_run_written_one_place_past_alignment(path):
    rw = rewritten(path, "dequant_shifted")
    assert rw is not None
    assert "astra_store_run<4>(out + (1 + e), astra_run0);" in rw.text
    ev = cpu_evaluator(path, "dequant_shifted")(rw.text)
    assert ev.passed, ev.check.summary + ev.check.feedback


@pytest.mark.parametrize("store", [
    "    if (outIdx < n) {\n      out[outIdx] = vals[j];\n    } else {\n      out[0] = vals[0];\n    }\n",   # else
    "    if (outIdx < n) {\n      out[outIdx] = vals[j];\n      outIdx += 1;\n    }\n",     # the index changes
    "    if (outIdx < n) {\n      out[outIdx] = vals[j] + out[0];\n    }\n",             # reads the output
    "    if (outIdx < n) {\n      out[outIdx] = vals[j];\n      break;\n    }\n",          # leaves early
])
def test_guarded_runs_that_are_not_one_run_are_left_alone(path, store):
    text = KERNELS
    assert STORE in text
    assert rewritten(path, "dequant_tile", text.replace(STORE, store)) is None
