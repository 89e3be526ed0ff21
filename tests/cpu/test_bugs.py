"""Bug finding and safety: races, deadlocks, divergent barriers, out-of-bounds, crashes, hangs,
forbidden host APIs, features the CPU cannot run."""
import numpy as np
import pytest
from cpu_helpers import i32, run, unit

from astra_cuda.backends.base import CompileError, Launch, LaunchError, Schedule, Unsupported
from astra_cuda.backends.cpu import run_schedules
from astra_cuda.backends.cpu.screen import fast_math_swaps

RACY = r'''
__global__ void shift(const float* x, float* y) {
  __shared__ float s[256];
  int t = threadIdx.x;
  s[t] = x[t] * 2.0f;
#ifdef WITH_BARRIER
  __syncthreads();
#endif
  y[t] = s[(t + 1) % blockDim.x];   // reads a neighbour's value
}
'''


def test_missing_barrier_race_shows_between_schedules(cpu):
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    m = cpu.compile(unit(RACY), ["shift"], filename="user.cu")
    fwd, rev = run_schedules(cpu, m, "shift", Launch((1, 1, 1), (256, 1, 1), 0),
                             [x, np.zeros(256, np.float32)], outputs=[1])
    want = np.roll(x * 2, -1)
    # forward: each thread reads its neighbour's slot before the neighbour wrote it (poison)
    assert np.isnan(fwd[0][:-1]).all() and fwd[0][-1] == want[-1]
    # reverse: the neighbour already ran, except for the wrap-around read of thread 0's slot
    np.testing.assert_array_equal(rev[0][:-1], want[:-1])
    assert np.isnan(rev[0][-1])

    fixed = cpu.compile(unit("#define WITH_BARRIER\n" + RACY.lstrip()), ["shift"], filename="user.cu")
    runs = run_schedules(cpu, fixed, "shift", Launch((1, 1, 1), (256, 1, 1), 0), [x, np.zeros(256, np.float32)],
                         outputs=[1], schedules=[Schedule("forward"), Schedule("reverse"), Schedule("random", 7)])
    for r in runs:
        np.testing.assert_array_equal(r[0], want)


def test_barrier_in_loop_others_left_is_reported(cpu):
    src = r'''
__global__ void k(float* x) {
  for (int i = 0; i < (int)(threadIdx.x % 2) + 1; ++i) {
    __syncthreads();
  }
  __syncthreads();
  x[threadIdx.x] = 1.0f;
}
'''
    with pytest.raises(LaunchError) as e:
        run(cpu, src, "k", (1,), (64,), [np.zeros(64, np.float32)])
    msg = str(e.value)
    assert "divergent barrier" in msg and "user.cu:3" in msg and "user.cu:5" in msg


def test_deadlock_between_barrier_and_shuffle(cpu):
    src = r'''
__global__ void k(float* x) {
  float v = x[threadIdx.x];
  if (threadIdx.x == 0) __syncthreads();
  else v = __shfl_sync(0xffffffff, v, 0);
  x[threadIdx.x] = v;
}
'''
    with pytest.raises(LaunchError) as e:
        run(cpu, src, "k", (1,), (32,), [np.zeros(32, np.float32)])
    msg = str(e.value)
    assert "deadlock" in msg and "thread 0 at __syncthreads (user.cu:3)" in msg
    assert "threads 1-31 at __shfl*_sync (user.cu:4)" in msg


def test_divergent_barriers(cpu):
    src = r'''
__global__ void k(float* x) {
  if (threadIdx.x < 16) { x[threadIdx.x] = 1; __syncthreads(); }
  else { __syncthreads(); x[threadIdx.x] = 2; }
}
'''
    with pytest.raises(LaunchError, match=r"divergent barrier.*user.cu:2.*user.cu:3"):
        run(cpu, src, "k", (1,), (64,), [np.zeros(64, np.float32)])


def test_out_of_bounds_read_found_with_sanitize(cpu):
    src = r'''
__global__ void k(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i + 1];   // off by one
}
'''
    x = np.ones(64, np.float32)
    run(cpu, src, "k", (1,), (64,), [x, np.zeros(64, np.float32), i32(64)])  # silently "works"
    with pytest.raises(LaunchError) as e:
        run(cpu, src, "k", (1,), (64,), [x, np.zeros(64, np.float32), i32(64)], sanitize=True)
    msg = str(e.value)
    assert "out-of-bounds read of 4 bytes at user.cu:3" in msg
    assert "thread (63,0,0)" in msg


def test_crash_is_a_launch_error_and_the_backend_recovers(cpu):
    src = r'''
__global__ void k(int* x) {
  if (threadIdx.x == 5) *(int*)0 = 1;
  x[threadIdx.x] = 1;
}
'''
    with pytest.raises(LaunchError, match=r"crashed \(SIGSEGV\).*block \(0,0,0\) thread \(5,0,0\)"):
        run(cpu, src, "k", (1,), (32,), [np.zeros(32, np.int32)])
    # the executor is replaced: the next launch works
    ok = r'''__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }'''
    np.testing.assert_array_equal(run(cpu, ok, "k", (1,), (32,), [np.zeros(32, np.int32)])[0], np.arange(32))


def test_trap_and_assert(cpu):
    src = r'''
__global__ void k(int* x) {
  if (x[threadIdx.x] < 0) __trap();
  assert(x[threadIdx.x] != 7);
}
'''
    a = np.zeros(32, np.int32)
    a[3] = -1
    with pytest.raises(LaunchError, match=r"__trap\(\) at user.cu:2 in block \(0,0,0\) thread \(3,0,0\)"):
        run(cpu, src, "k", (1,), (32,), [a])
    a[3], a[9] = 0, 7
    with pytest.raises(LaunchError, match=r"user.cu:3.*Assertion"):
        run(cpu, src, "k", (1,), (32,), [a])


def test_infinite_loop_times_out(cpu):
    src = r'''
__global__ void k(volatile int* flag) {
  if (threadIdx.x == 0) while (flag[0] == 0) {}   // waits for a thread that never runs
  else flag[0] = 1;
}
'''
    src_spin = src.replace("else flag[0] = 1;", "")
    with pytest.raises(LaunchError, match="timed out after 1.5 s"):
        run(cpu, src_spin, "k", (1,), (32,), [np.zeros(1, np.int32)], timeout=1.5)


@pytest.mark.parametrize("body, what", [
    ('system("rm -rf /tmp/x");', "system at user.cu:3"),
    ('FILE* f = fopen("/etc/passwd", "r"); (void)f;', "fopen at user.cu:3"),
    ('CALL(sys, tem)("id");', "system at user.cu:3"),          # hidden behind token pasting
    ('void* h = dlopen("libc.so.6", 2); (void)h;', "dlopen at user.cu:3"),
    ('syscall(59, 0, 0, 0);', "syscall at user.cu:3"),
])
def test_forbidden_host_apis_are_refused(cpu, body, what):
    src = ('#include <cstdio>\n#define CALL(a, b) a##b\n'
           f'__global__ void k(int* x) {{ {body} }}\n')
    src = src.replace("#define CALL", "#include <dlfcn.h>\n#include <unistd.h>\n#define CALL")
    src = '#line 1 "user.cu"\n' + src.replace("#include <cstdio>\n#include <dlfcn.h>\n#include <unistd.h>\n",
                                               "#include <cstdio>\n#include <dlfcn.h>\n#include <unistd.h>\n#line 2\n")
    with pytest.raises(CompileError, match="refused.*" + what.replace("(", r"\(")):
        cpu.compile(src, ["k"], filename="user.cu")


def test_local_names_like_read_are_not_refused(cpu):
    src = r'''
__device__ float write(float v) { return v * 2; }
__global__ void k(float* x) { float read = x[threadIdx.x]; x[threadIdx.x] = write(read); }
'''
    out = run(cpu, src, "k", (1,), (4,), [np.ones(4, np.float32)])[0]
    np.testing.assert_array_equal(out, 2)


@pytest.mark.parametrize("src, what", [
    ('__global__ void k(int* x) {\n  asm volatile("trap;");\n}\n', "inline PTX (asm) at user.cu:2"),
    ('#include <cub/device/device_scan.cuh>\n__global__ void k(int* x) {\n  size_t n = 0;\n'
     '  cub::DeviceScan::ExclusiveSum(nullptr, n, x, x, 4);\n}\n', "CUB (cub::DeviceScan) at user.cu:4"),
    ('#include <cub/cub.cuh>\n__global__ void k(int* x) {\n'
     '  __shared__ typename cub::BlockDiscontinuity<int, 128>::TempStorage t;\n}\n',
     "CUB (cub::BlockDiscontinuity) at user.cu:3"),
    ('#include <cooperative_groups.h>\n__global__ void k(int* x) {\n  cooperative_groups::this_grid().sync();\n}\n',
     "grid-wide cooperative sync (this_grid) at user.cu:3"),
    ('#include <cooperative_groups/memcpy_async.h>\n__global__ void k(int* x) {}\n', "memcpy_async"),
    ('namespace cg { struct G { void sync(); }; G this_grid(); }\n__global__ void k(int* x) {\n  cg::this_grid().sync();\n}\n',
     "grid-wide cooperative sync (this_grid) at user.cu:3"),
    ('__global__ void k(int* x) {\n  __pipeline_memcpy_async(x, x, 4);\n}\n', "cp.async"),
])
def test_unsupported_features_need_a_gpu(cpu, src, what):
    with pytest.raises(Unsupported, match="needs a GPU to verify.*" + what.replace("(", r"\(").replace(")", r"\)")):
        cpu.compile(unit(src), ["k"], filename="user.cu")


def test_fast_math_swaps():
    ref = "__global__ void k(float* x) { x[0] = sinf(x[0]) + logf(x[1]) + expf(x[2]); }"
    cand = "__global__ void k(float* x) { x[0] = __sinf(x[0]) + logf(x[1]) + __expf(x[2]); }"
    swaps = fast_math_swaps(ref, cand)
    assert len(swaps) == 2 and swaps[0].startswith("sinf -> __sinf") and swaps[1].startswith("expf -> __expf")
    assert fast_math_swaps(ref, ref) == []


def test_compile_errors_point_at_the_users_file(cpu):
    with pytest.raises(CompileError, match="user.cu:2"):
        cpu.compile('#line 1 "user.cu"\n__global__ void k(float* x) {\n  x[0] = undefined_thing;\n}\n',
                    ["k"], filename="user.cu")


def test_executor_runs_restricted(cpu):
    import os
    import subprocess

    run(cpu, "__global__ void k(int* x) { x[0] = 1; }", "k", (1,), (1,), [np.zeros(1, np.int32)])
    pid = cpu._executors[""].proc.pid
    limits = open(f"/proc/{pid}/limits").read()
    assert "Max address space         17179869184" in limits
    assert "Max file size             67108864" in limits
    assert "Max core file size        0" in limits
    can_unshare = subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    if can_unshare:  # the OS allows a private network namespace: the child must be in one
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_dynamic_shared_memory_overflow_found_with_sanitize(cpu):
    src = r'''
__global__ void k(float* y) {
  extern __shared__ float s[];
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x + 1];   // the last thread reads past the 64 floats given
}
'''
    with pytest.raises(LaunchError, match=r"out-of-bounds read of 4 bytes at user.cu:5 in block \(0,0,0\) thread \(63,0,0\)"):
        run(cpu, src, "k", (1,), (64,), [np.zeros(64, np.float32)], shmem=256, sanitize=True)


def test_static_shared_memory_overflow_found_with_sanitize(cpu):
    # ASan keeps no redzones around thread_local storage (static __shared__ on the CPU): a read past
    # one shared array landed unseen in the next (cuda-samples scan at sizes its launcher forbids)
    src = r'''
__global__ void k(const unsigned* x, unsigned* y, int size) {
  __shared__ unsigned s[64];
  __shared__ unsigned t[64];
  s[threadIdx.x] = x[threadIdx.x];
  t[threadIdx.x] = 0;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x + size] + t[threadIdx.x];
}
'''
    args = [np.ones(64, np.uint32), np.zeros(64, np.uint32)]
    run(cpu, src, "k", (1,), (64,), [*args, i32(0)], sanitize=True)   # in bounds: runs
    with pytest.raises(LaunchError) as e:
        run(cpu, src, "k", (1,), (64,), [*args, i32(8)], sanitize=True)
    msg = str(e.value)
    assert "shared memory `s` accessed at element 64, past the end of its 64 elements of 4 bytes" in msg, msg
    assert "at user.cu:7" in msg and "thread (56,0,0)" in msg, msg


def test_race_checker_names_the_racing_lines_and_threads(cpu):
    # ThreadSanitizer over the fibers: the racing accesses themselves, with lines and threads.
    src = r'''
__global__ void k(const float* x, float* y) {
  __shared__ float s[64];
  s[threadIdx.x] = x[threadIdx.x];
  y[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];
}
'''
    with pytest.raises(LaunchError, match=r"data race on shared memory: write of 4 bytes at user.cu:3 by block \(0,0,0\) "
                                          r"thread \((\d+),0,0\) and an earlier read of 4 bytes at user.cu:4"):
        run(cpu, src, "k", (2,), (64,), [np.ones(64, np.float32), np.zeros(128, np.float32)], races=True)
    fixed = src.replace("  y[blockIdx", "  __syncthreads();\n  y[blockIdx")
    out = run(cpu, fixed, "k", (2,), (64,), [np.arange(64, dtype=np.float32), np.zeros(128, np.float32)], races=True)[1]
    np.testing.assert_array_equal(out, np.tile(np.arange(64)[::-1], 2))


def test_race_checker_is_quiet_on_correct_warp_and_block_code(cpu):
    from test_kernels import RMSNORM, rmsnorm_model
    from cpu_helpers import f32

    x = np.random.default_rng(8).standard_normal((4, 700)).astype(np.float32)
    w = np.ones(700, np.float32)
    got = run(cpu, RMSNORM, "rmsnorm", (4,), (256,), [x, w, np.zeros_like(x), i32(700), f32(1e-6)], races=True)[2]
    np.testing.assert_allclose(got, rmsnorm_model(x, w, 256, 1e-6), rtol=3e-7, atol=0)
    hist = r'''
__global__ void k(const int* b, int* h) {
  __shared__ int local[8];
  if (threadIdx.x < 8) local[threadIdx.x] = 0;
  __syncthreads();
  atomicAdd(&local[b[blockIdx.x * blockDim.x + threadIdx.x]], 1);
  __syncthreads();
  if (threadIdx.x < 8) atomicAdd(&h[threadIdx.x], local[threadIdx.x]);
}
'''
    bins = np.random.default_rng(9).integers(0, 8, 512).astype(np.int32)
    h = run(cpu, hist, "k", (4,), (128,), [bins, np.zeros(8, np.int32)], races=True)[1]
    np.testing.assert_array_equal(h, np.bincount(bins, minlength=8))


# A cooperative-groups block reduction as real code writes it: every lane of a warp stores the
# warp's sum to its slot (one instruction, one value). compute-sanitizer's racecheck reports no
# hazard there; the race checker must not either (issue 24).
CG_REDUCE = r"""
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__global__ void k(const float* x, float* y, int n) {
  __shared__ float block_result[32];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  int warp_id = threadIdx.x / 32;
  float v = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[blockIdx.x * n + i];
  v = cg::reduce(warp, v, cg::plus<float>());
  STORE
  block.sync();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < blockDim.x / 32; ++w) s += block_result[w];
    y[blockIdx.x] = s;
  }
}
"""


def _cg_reduce(cpu, store):
    x = np.random.default_rng(4).standard_normal((2, 300)).astype(np.float32)
    out = run(cpu, CG_REDUCE.replace("STORE", store), "k", (2,), (128,), [x, np.zeros(2, np.float32), i32(300)],
              races=True)[1]
    return x, out


def test_race_checker_accepts_one_warp_storing_one_value_in_one_instruction(cpu):
    x, out = _cg_reduce(cpu, "block_result[warp_id] = v;")
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("store,why", [
    # lanes of one warp, one instruction, different values: which one stays is undefined
    ("block_result[warp_id] = v + (threadIdx.x % 32);", "lanes of one warp stored different values"),
    # the same value from different warps with nothing ordering them is still a race
    ("block_result[0] = 1.0f;", "nothing orders them"),
])
def test_race_checker_still_reports_warp_stores_that_race(cpu, store, why):
    with pytest.raises(LaunchError, match=r"data race on shared memory: write of 4 bytes at user.cu:12 .* " + why):
        _cg_reduce(cpu, store)


def test_an_innocent_warp_store_does_not_hide_a_later_race_at_that_address(cpu):
    # ThreadSanitizer drops every later report at an address it has reported once (held-back
    # reports included) unless told not to: the race after the barrier must still be found.
    src = r"""
__global__ void k(float* y) {
  __shared__ float s[2];
  if (threadIdx.x < 32) s[0] = 1.0f;
  __syncthreads();
  if (threadIdx.x == 40) s[0] = 2.0f;
  if (threadIdx.x == 0) y[0] = s[0];
}
"""
    with pytest.raises(LaunchError, match=r"data race on shared memory: .*user.cu:5 .*user.cu:6"):
        run(cpu, src, "k", (1,), (64,), [np.zeros(1, np.float32)], races=True)


def test_sanitize_and_races_are_separate_builds(cpu):
    with pytest.raises(CompileError, match="separate builds"):
        cpu.compile("__global__ void k(int* x) {}", ["k"], sanitize=True, races=True)


def test_printf_before_a_crash_is_in_the_error(cpu):
    src = r'''
__global__ void k(int* x) {
  if (threadIdx.x == 0) printf("about to fail: %d\n", x[0]);
  __syncthreads();
  if (threadIdx.x == 0) __trap();
}
'''
    with pytest.raises(LaunchError, match=r"__trap\(\) at user.cu:4.*printed before: about to fail: 7"):
        run(cpu, src, "k", (1,), (32,), [np.full(1, 7, np.int32)])
