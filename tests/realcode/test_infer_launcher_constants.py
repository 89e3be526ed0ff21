"""A launch's template arguments that are the launcher's compile-time locals (a traits class over
its template parameters, read into `static constexpr` locals), and a caller's `constexpr` handed on
through a macro in each `case` of a switch on the expert count: the pattern of sgl-kernel's
topkGatingSoftmax. Guessed as 1 each (`<float, 1, 256, 1, 1>`), they named no instance the program
makes and failed the kernel's static_asserts; evaluated with the launcher's parameters bound as the
chosen call binds them, they are that call's instance."""
import pytest

from tests.realcode.test_infer_asm_accesses import infer

ROUTER = """
#define SMALLER(a, b) ((a) < (b) ? (a) : (b))
namespace traits {
template <typename T, int E, int BYTES>
struct Split {
  static constexpr int PER_LOAD = BYTES / sizeof(T);
  static constexpr int LOADS = E / (PER_LOAD * 32) > 1 ? E / (PER_LOAD * 32) : 1;
  static constexpr int PER_THREAD = LOADS * PER_LOAD;
  static constexpr int LANES = E / PER_THREAD;
  static constexpr int ROWS = 32 / LANES;
};
}
template <typename T, int PER_THREAD, int E, int WARPS, int BYTES>
__global__ void route(const T* x, int* idx, int rows) {
  static_assert(PER_THREAD * (BYTES / sizeof(T)) > 0 && BYTES <= 16, "one instance of the launcher");
  int row = (blockIdx.x * WARPS + threadIdx.y) * (32 / (E / PER_THREAD)) + threadIdx.x / (E / PER_THREAD);
  if (row >= rows) return;
  int best = 0;
  for (int e = 1; e < E; ++e) if (x[row * E + e] > x[row * E + best]) best = e;
  idx[row] = best;
}
template <typename T, int EXPERTS, int WARPS>
void route_helper(const T* x, int* idx, int rows) {
  static constexpr unsigned long LIMIT = 16;
  static constexpr int BYTES = SMALLER(LIMIT, sizeof(T) * EXPERTS);
  using C = traits::Split<T, EXPERTS, BYTES>;
  static constexpr int PER_THREAD = C::PER_THREAD;
  const int rows_per_block = WARPS * C::ROWS;
  const int blocks = (rows + rows_per_block - 1) / rows_per_block;
  route<T, PER_THREAD, EXPERTS, WARPS, BYTES><<<blocks, dim3(32, WARPS)>>>(x, idx, rows);
}
#define ROUTE(TYPE, N, W) route_helper<TYPE, N, W>(x, idx, rows);
void router(const float* x, int* idx, int rows, int num_experts) {
  static constexpr int WARPS = 4;
  switch (num_experts) {
    case 1: ROUTE(float, 1, WARPS); break;
    case 64: ROUTE(float, 64, WARPS); break;
    case 256: ROUTE(float, 256, WARPS); break;
  }
}
"""


@pytest.fixture(autouse=True)
def _no_toolkit(monkeypatch):
    # the project-instance step (nvcc's front end) off: the reading of the program alone decides
    monkeypatch.setenv("ASTRA_CUDA_TOOLKIT", "none")


def test_launch_arguments_that_are_launcher_constants_are_the_chosen_calls_instance(project):
    s, p = infer(project, "router.cu", ROUTER, "route")
    # 256 experts (the case nearest a real MoE's), 4 warps from the caller's constexpr, 16 bytes
    # (min(16, 4 * 256)) and 8 per thread (Split<float, 256, 16>: 2 loads of 4): one instance
    assert 'instantiate = "<float, 8, 256, 4, 16>"' in p.comment, (p.comment, p.notes)
    assert not any("no launch gives it; took 1" in n for n in p.notes), p.notes
    assert any("`PER_THREAD` of `route_helper` is 8" in n for n in p.notes), p.notes


def test_a_caller_constant_that_differs_per_case_is_the_expert_cases(project):
    # the warps written per case: those of the call the expert count chose — not the first case's,
    # nor the warps nearest 256 experts
    text = ROUTER.replace("ROUTE(float, 1, WARPS)", "ROUTE(float, 1, 8)").replace(
        "ROUTE(float, 64, WARPS)", "ROUTE(float, 64, 8)").replace("ROUTE(float, 256, WARPS)", "ROUTE(float, 256, 2)")
    s, p = infer(project, "router.cu", text, "route")
    assert 'instantiate = "<float, 8, 256, 2, 16>"' in p.comment, (p.comment, p.notes)
    assert any("`WARPS` of `route_helper` as `router` calls it (`route_helper<float, 256, 2>`) — the call whose "
               "expert count was chosen" in n for n in p.notes), p.notes


def test_a_launcher_local_of_the_run_time_is_still_a_guess(project):
    # `rows` is no compile-time number: the argument is guessed as before, never evaluated from it
    text = ROUTER.replace("static constexpr int PER_THREAD = C::PER_THREAD;", "const int PER_THREAD = rows;")
    s, p = infer(project, "router.cu", text, "route")
    assert any("`PER_THREAD`: no launch gives it; took 1" in n for n in p.notes), p.notes
