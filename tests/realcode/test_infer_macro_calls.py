"""Issue 25: calls a launcher makes through a function-like macro of the file, and a value the
program passes as 0 at every call. The pattern of sgl-kernel's topkGatingSoftmax: the launch sits in a
template helper, which a `LAUNCH_SOFTMAX(T, 8, 4)` macro calls in each `case` of a switch with
`start_expert` 0. Read as a size (1, 100, 4096), no expert was ever the node's and every index was
`NUM_EXPERTS`: a constant output."""
from tests.realcode.test_infer_asm_accesses import infer

GATE = """
template <typename T, int NUM_EXPERTS>
__global__ void gate(const T* x, int* idx, int rows, int start_expert, int end_expert) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int best = 0;
  for (int e = 1; e < NUM_EXPERTS; ++e) if (x[row * NUM_EXPERTS + e] > x[row * NUM_EXPERTS + best]) best = e;
  idx[row] = best >= start_expert && best < end_expert ? best - start_expert : NUM_EXPERTS;
}
template <typename T, int EXPERTS>
void helper(const T* x, int* idx, int rows, int start_expert, int end_expert) {
  gate<T, EXPERTS><<<(rows + 127) / 128, 128>>>(x, idx, rows, start_expert, end_expert);
}
#define LAUNCH(TYPE, N) helper<TYPE, N>(x, idx, rows, 0, experts);
void launcher(const float* x, int* idx, int rows, int experts) {
  switch (experts) {
    case 8: LAUNCH(float, 8); break;
    case 16: LAUNCH(float, 16); break;
  }
}
"""


def test_a_call_written_by_a_macro_gives_the_helper_its_template_arguments_and_values(project):
    s, p = infer(project, "gate.cu", GATE, "gate")
    # the helper's caller is read through the macro: its EXPERTS is a case's (was "no launch gives
    # it") — 16, the case nearest a real MoE's expert count (`template_args.expert_count_case`)
    assert any("`NUM_EXPERTS`: `EXPERTS` of `helper` as `launcher` calls it" in n for n in p.notes), p.notes
    assert p.comment.count('instantiate = "<float, 16>"') == 1, p.comment
    # 0 at every call: the first expert, not a size drawn from 1 up
    assert 'start_expert = "0"' in p.comment, p.comment
    assert "start_expert = [" not in p.comment, p.comment


def test_a_value_only_some_calls_pass_as_0_stays_a_size(project):
    text = GATE.replace("case 16: LAUNCH(float, 16); break;",
                        "case 16: helper<float, 16>(x, idx, rows, rows / 2, experts); break;")
    s, p = infer(project, "gate.cu", text, "gate")
    assert 'start_expert = "0"' not in p.comment, p.comment


# vLLM moe_align_block_size's pattern: a helper the kernel hands the map to replaces each id by the
# map's entry at it, and counts into shared memory at the result (there the map measured no table:
# its values were drawn as small signed numbers, and the counts went past the shared array)
COUNT = """
namespace ns {
__device__ void count_ids(const unsigned char* ids, int* counts, int* expert_map, int experts, int n) {
  extern __shared__ int shared_counts[];
  if (threadIdx.x < experts) shared_counts[threadIdx.x] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    int expert_id = ids[i];
    if (expert_id >= experts) continue;
    expert_id = expert_map[expert_id];
    atomicAdd(&shared_counts[expert_id], 1);
  }
  __syncthreads();
  if (threadIdx.x < experts) counts[threadIdx.x] = shared_counts[threadIdx.x];
}
}
__global__ void count_kernel(const unsigned char* ids, int* counts, int* expert_map, int experts, int n) {
  ns::count_ids(ids, counts, expert_map, experts, n);
}
void run(const unsigned char* ids, int* counts, int* map, int experts, int n) {
  count_kernel<<<1, 1024, experts * sizeof(int)>>>(ids, counts, map, experts, n);
}
"""


def test_a_map_an_index_is_replaced_through_holds_indices_below_its_own_length(project):
    s, p = infer(project, "count.cu", COUNT, "count_kernel")
    line = next(x for x in p.comment.splitlines() if x.startswith("expert_map"))
    extent = line.split('shape = ["', 1)[1].split('"', 1)[0]   # its own length, whatever measures it
    assert f'init = "randint(0, {extent})"' in line, p.comment
    assert any(n.startswith("`expert_map` maps an index to another in its own range") for n in p.notes), p.notes
    assert "output" not in line and "inout" not in line, line   # read only: the kernel never writes it


def test_a_map_read_at_another_index_is_no_self_map(project):
    s, p = infer(project, "count.cu", COUNT.replace("expert_id = expert_map[expert_id];",
                                                    "int other = expert_map[expert_id];"), "count_kernel")
    assert any(x.startswith("expert_map") for x in p.comment.splitlines()), p.comment
    assert not any("maps an index to another" in n for n in p.notes), p.notes
