"""Rewrites that change the launch configuration: the pack_rows transformation (spec, kernel and
launch site edited together), and the evaluator's rule that a launch may change only with a launch
site in the same file — with the reference always launched its own way."""
import dataclasses

import pytest

from astra_cuda.compile import extract, static
from astra_cuda.model import launch_change, source
from astra_cuda.agents.offline import TRANSFORMS, Context, context_from_text
from astra_cuda.execution.evaluator import local_evaluator

from agent_helpers import example

NAME = "merge_attn_states"


def packed():
    text, path, kernel = example(NAME)
    rw = TRANSFORMS["pack_rows"].apply(text, context_from_text(kernel, text))
    assert rw is not None
    return text, path, kernel, rw


def test_pack_rows_edits_spec_kernel_and_launch_site_together():
    text, path, kernel, rw = packed()
    new = launch_change.spec_in(source.parse(rw.text), kernel)
    old = launch_change.spec_in(source.parse(text), kernel)
    assert new.grid == ("num_tokens", "cdiv(num_heads, 8)") and new.block == ("min(head_dim, 16)", "8")
    assert not old.changed_beyond_launch(new)
    k = source.parse(rw.text).kernel(kernel).text
    assert "blockIdx.y * blockDim.y + threadIdx.y" in k and "return;" in k and "= blockIdx.y;" not in k
    site = source.parse(rw.text).launches_of(kernel)[0]
    assert site.grid == "dim3(dim3(grid).x, (dim3(grid).y + 7) / 8, dim3(grid).z)"
    assert site.block == "dim3(dim3(block).x < 16 ? dim3(block).x : 16, 8)"
    # the context for the next rounds follows the new launch: 16 threads along x
    assert context_from_text(kernel, rw.text).block_threads == 16
    assert launch_change.candidate_spec(old, source.parse(text), source.parse(rw.text), kernel) == \
        (old.with_launch(new), "")
    if static.available() is not None:
        r = static.compile_unit(extract.unit(rw.text, path, kernel))
        assert r.ok, r.log[-2000:]


def _without_host_launch(text):
    return text[:text.index("void merge_attn_states_launch")]


@pytest.mark.parametrize("case", ["silu", "rmsnorm", "no_launch_site", "blockdim_in_index", "launch_bounds",
                                  "long_rows"])
def test_pack_rows_declines(case):
    if case == "silu":        # one row per block, but the grid's row count is not a kernel parameter
        text, _, kernel = example("silu_and_mul")
    elif case == "rmsnorm":   # barriers and shared memory
        text, _, kernel = example("fused_add_rmsnorm")
    else:
        text, _, kernel = example(NAME)
        if case == "no_launch_site":
            text = _without_host_launch(text)
        elif case == "blockdim_in_index":
            text = text.replace("out[row * head_dim + i] =", "out[row * head_dim + i + 0 * blockDim.x] =")
        elif case == "launch_bounds":
            text = text.replace("__global__ void merge_attn_states(", "__global__ void __launch_bounds__(128) "
                                                                      "merge_attn_states(")
    ctx = context_from_text(kernel, text)
    if case == "long_rows":
        ctx = Context(kernel, ctx.block_threads, {**ctx.row_elements, "head_dim": 4096})
    assert TRANSFORMS["pack_rows"].apply(text, ctx) is None


def test_candidate_spec_rules():
    text, _, kernel, rw = packed()
    ref = launch_change.spec_in(source.parse(text), kernel)
    site = source.parse(rw.text).launches_of(kernel)[0]
    # the spec's launch changed but the launch site was left as it was
    stale = rw.text.replace(site.grid, "grid").replace(site.block, "block")
    _, why = launch_change.candidate_spec(ref, source.parse(text), source.parse(stale), kernel)
    assert "still uses the old one" in why
    # no launch site in the file at all
    _, why = launch_change.candidate_spec(ref, source.parse(_without_host_launch(text)),
                                          source.parse(_without_host_launch(rw.text)), kernel)
    assert "no launch of `merge_attn_states`" in why
    # anything but the launch moved: the test harness itself
    _, why = launch_change.candidate_spec(ref, source.parse(text),
                                          source.parse(rw.text.replace("num_heads = [1, 32]", "num_heads = [32]")),
                                          kernel)
    assert "sizes" in why and "only the launch" in why
    # unchanged launch: fine, and the reference's spec is used
    assert launch_change.candidate_spec(ref, source.parse(text), source.parse(text), kernel) == (ref, "")


@pytest.fixture(scope="module")
def evaluate():
    from astra_cuda.model import spec as spec_mod
    try:
        from astra_cuda.backends.cpu import CpuBackend
        cpu = CpuBackend()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")
    text, path, kernel = example(NAME)
    m = source.parse(text)
    return local_evaluator(path, kernel, spec_mod.load(m.kernel(kernel), m), cpu, text, quick=True)


def test_packed_candidate_passes_against_the_original_launched_its_own_way(evaluate):
    _, _, _, rw = packed()
    ev = evaluate(rw.text)
    assert ev.passed, ev.check.feedback


def test_packed_candidate_that_drops_a_row_is_caught(evaluate):
    _, _, _, rw = packed()
    bad = rw.text.replace(">= static_cast<unsigned int>(num_heads)) return;",
                          ">= static_cast<unsigned int>(num_heads) - 1) return;")
    assert bad != rw.text
    ev = evaluate(bad)
    assert not ev.passed and "never written" in ev.check.summary


def test_launch_change_without_the_launch_site_is_refused_before_running(evaluate):
    text, _, kernel, rw = packed()
    site = source.parse(rw.text).launches_of(kernel)[0]
    stale = rw.text.replace(site.grid, "grid").replace(site.block, "block")
    ev = evaluate(stale)
    assert not ev.passed and ev.check.stage == "static" and "launch site" in ev.check.summary


def test_check_against_a_pinned_baseline_launches_the_baseline_its_own_way(tmp_path):
    """After the user applies a packed rewrite, `astra check` compares it with the pinned original:
    the original must run with the launch it was written for, not the file's new one."""
    from astra_cuda import api
    text, _, kernel, rw = packed()
    (tmp_path / ".git").mkdir()  # the workspace root, where .astra/ goes
    path = tmp_path / "merge.cu"
    path.write_text(text)
    try:
        api.resolve_backend("cpu")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"CPU backend unavailable: {e}")
    first = api.check(api.snapshot(text, str(path)), kernel, backend="cpu")[0]
    assert first.passed and "pinned" in first.reference
    path.write_text(rw.text)
    again = api.check(api.snapshot(rw.text, str(path)), kernel, backend="cpu")[0]
    assert again.passed and again.reference.startswith("baseline pinned"), again.summary


@pytest.mark.gpu
def test_packed_candidate_on_the_gpu_is_verified_and_timed_against_the_original_launch():
    """On a GPU: the quick gate passes the packed rewrite, the profiler times it and the original
    (each with its own launch) side by side, and the version that drops a row is refused."""
    from astra_cuda import api
    from astra_cuda.execution import jobs, worker
    from astra_cuda.session import Session
    from astra_cuda.model import spec as spec_mod
    try:
        gpu = Session().statuses()["gpu"]
        ok, why = gpu.available, gpu.reason
    except Exception as e:  # noqa: BLE001 - any failure means no GPU here
        ok, why = False, str(e)
    if not ok:
        pytest.skip(f"no GPU: {why}")
    text, path, kernel, rw = packed()
    m = source.parse(text)
    job = jobs.EvaluateJob("gpu", path, kernel, spec_mod.load(m.kernel(kernel), m), text, kernel, arch="sm_90",
                           quick=True)
    ev = worker.run(dataclasses.replace(job, text=rw.text),
                    timeout=api.CHECK_TIMEOUT + api.PROFILE_TIMEOUT)
    assert ev.passed and ev.measured, ev.check.feedback
    assert all(t.baseline_us > 0 and t.candidate_us > 0 for t in ev.profile.sizes)
    bad = rw.text.replace(">= static_cast<unsigned int>(num_heads)) return;",
                          ">= static_cast<unsigned int>(num_heads) - 1) return;")
    ev = worker.run(dataclasses.replace(job, text=bad),
                    timeout=api.CHECK_TIMEOUT + api.PROFILE_TIMEOUT)
    assert not ev.passed


VERSIONS = """#include <cuda_fp16.h>
/* @astra
grid = ["cdiv(n, 128)"]
block = ["128"]
[sizes]
n = [1, 100, 1000]
[args]
o = { type = "float", shape = ["n"], output = true }
x = { type = "float", shape = ["n"] }
n = "n"
*/
__global__ void twice1(float* o, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = 2.0f * x[i];
}
/* @astra
grid = ["cdiv(n, 512)"]
block = ["256"]
reference = "twice1"
[sizes]
n = [1, 100, 1000]
[args]
o = { type = "float", shape = ["n"], output = true }
x = { type = "float", shape = ["n"] }
n = "n"
*/
__global__ void twice2(float* o, const float* x, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) o[i] = 2.0f * x[i];
}
void run(float* o, const float* x, int n) {
  twice1<<<(n + 127) / 128, 128>>>(o, x, n);
  twice2<<<(n + 511) / 512, 256>>>(o, x, n);
}
"""


def test_a_version_keeps_its_own_launch_while_its_reference_keeps_theirs():
    """Optimizing twice2 (reference: the earlier twice1): a rewrite that leaves twice2's launch as it
    was is not a launch change, although it differs from twice1's."""
    m = source.parse(VERSIONS)
    spec = launch_change.spec_in(m, "twice2")
    ref = launch_change.reference_spec(spec, m, "twice1")
    assert ref.launch == launch_change.spec_in(m, "twice1").launch
    rewritten = VERSIONS.replace("o[i] = 2.0f * x[i];\n}\nvoid", "o[i] = x[i] + x[i];\n}\nvoid")
    assert rewritten != VERSIONS
    cand, problem = launch_change.candidate_spec(ref, m, source.parse(rewritten), "twice2")
    assert problem == "" and cand.launch == spec.launch
