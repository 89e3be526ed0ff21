"""Issue 25: what no reading of the project's C++ gives is said, and no draft is proposed — a
class chosen by the caller (FlashInfer's `Params`, flash-attention's `Kernel_traits`, xformers'
`KT`), a device function a JIT template supplies (FlashInfer's act_and_mul `Activation`), a
struct passed by value whose field is a class the host builds (FlashInfer's `paged_kv_t` `page_size`).
Before, float or 1 stood for them and the failure was a compiler error or a fault far from the cause."""
import pytest

from astra_cuda import api
from astra_cuda.infer.template_args import CANNOT

CASES = {
    "decode": ("template <typename Params>\n"
               "__global__ void decode(const __grid_constant__ Params params) {\n"
               "  using DTypeQ = typename Params::DTypeQ;\n"
               "  params.o[threadIdx.x] = params.q[threadIdx.x];\n}\n",
               "template parameter `Params`: no launch gives it, and it is a class the kernel reads members of "
               "(`Params::DTypeQ`)"),
    "act": ("template <typename T, float (*Act)(const float&)>\n"
            "__global__ void act(T* out, const T* in, int d) {\n"
            "  out[blockIdx.x * d + threadIdx.x] = Act(in[blockIdx.x * 2 * d + threadIdx.x]);\n}\n",
            "template parameter `Act`: no launch gives it, and it is a device function `float (*Act)(const float&)`"),
    "append": ("struct fastdiv { unsigned d; __host__ fastdiv(unsigned d) : d(d) {}\n"
               "  __device__ unsigned div(unsigned x) const { return x / d; } };\n"
               "template <typename T> struct cache_t { fastdiv page; T* data;\n"
               "  __device__ T* at(unsigned i) const { return data + page.div(i); } };\n"
               "template <typename T>\n"
               "__global__ void append(cache_t<T> cache, const T* x, unsigned n) {\n"
               "  if (threadIdx.x < n) *cache.at(threadIdx.x) = x[threadIdx.x];\n}\n",
               # the struct and its method are read (test_infer_struct_params); its divisor is no number
               "`cache.page` is a `fastdiv` (a class of its own, whose value the host builds) that this instance"),
}


@pytest.mark.parametrize("kernel", sorted(CASES))
def test_what_the_caller_alone_knows_is_said_and_nothing_is_proposed(project, kernel):
    text, why = CASES[kernel]
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), kernel, run=False)
    assert not p.valid and p.problems[0] == p.notes[0] and p.problems[0].startswith(CANNOT + why), p.problems


def test_a_plain_element_type_and_a_device_function_of_the_file_are_still_taken(project):
    text = ("__device__ float twice(const float& x) { return 2 * x; }\n"
            "template <typename T, float (*Act)(const float&)>\n"
            "__global__ void act(T* out, const T* in, int n) {\n"
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) out[i] = Act(in[i]);\n}\n")
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "act", run=False)
    assert p.valid and 'instantiate = "<float, twice>"' in p.comment, (p.problems, p.comment)
