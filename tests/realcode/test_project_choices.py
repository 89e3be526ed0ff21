"""Issue 25: a template parameter no launch gives, where the project itself defines what fits.
A function-pointer parameter takes a device function of the file or its project headers of the
same type (FlashInfer's act_and_mul `float (*Activation)(const float&)`, whose JIT template
defines `silu(const float&)`) and never one of another signature, which would not compile; a
class parameter takes a class of the project with every member the kernel names through it
(FlashInfer's decode kernel's `Params`, which `SingleDecodeParams<…>` of a header its file does
not include has; its `AttentionVariant` read through a local). A struct parameter whose type is
a template parameter — taken so, or given by the launch — is split into the instance's fields.
Where nothing fits, test_infer_uninferable's refusals."""
from astra_cuda import api
from astra_cuda.infer.template_args import CANNOT
from astra_cuda.model import source

from .conftest import needs_gxx

ACT = ("template <typename T, float (*Act)(const float&)>\n"
       "__global__ void act(T* out, const T* in, int d) {\n"
       "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
       "  if (i < d) out[i] = Act(in[i]);\n}\n")


def test_a_device_function_of_a_project_header_of_the_parameters_type_is_taken(project):
    project("act.cuh", "namespace ops {\n"
                       "__device__ __forceinline__ float by_value(float x) { return x * x; }\n"
                       "__device__ __forceinline__ float silu(const float& val) { return val / (1.0f + __expf(-val)); }\n"
                       "}\n")
    # the file's own device function of another type comes first, and would not compile
    text = '#include "act.cuh"\n__device__ float twice(float x) { return 2 * x; }\n' + ACT
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "act", run=False)
    assert p.valid and 'instantiate = "<float, ops::silu>"' in p.comment, (p.problems, p.comment)
    assert any("took the device function `ops::silu`" in n for n in p.notes), p.notes


def test_no_device_function_of_that_type_is_said_and_nothing_is_proposed(project):
    # by value, by a non-const reference, returning a double: none is `float (const float&)`
    text = ("__device__ float twice(float x) { return 2 * x; }\n"
            "__device__ float inc(float& x) { return x += 1; }\n"
            "__device__ double wide(const float& x) { return x; }\n") + ACT
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), "act", run=False)
    assert not p.valid and p.problems[0].startswith(CANNOT + "template parameter `Act`"), p.problems


SCALE = ('#include "traits.cuh"\n'
         "template <typename Traits, typename Variant>\n"
         "__global__ void scale(float* out, const float* in, int n) {\n"
         "  Variant variant(n);\n"
         "  int i = blockIdx.x * Traits::kThreads + threadIdx.x;\n"
         "  if (i < n) out[i] = variant.scale * in[i];\n}\n")
TRAITS = ("namespace fi {\n"
          "struct Loose { static constexpr int kWarps = 4; };\n"   # no `kThreads`: not it
          "template <typename T_> struct Narrow { static constexpr int kThreads = 256; using T = T_; };\n"
          "template <typename T_> struct Wide { static constexpr int kThreads = 128; static constexpr int kWarps = 4;\n"
          "  using T = T_; };\n"
          "struct Base { float scale; };\n"
          "template <bool use_alibi> struct Plain : Base {\n"
          "  __device__ Plain(int n) { scale = use_alibi ? 2.f : 1.f; }\n};\n"
          "}\n")


def test_a_class_of_the_project_with_every_member_the_kernel_names_is_taken(project):
    project("traits.cuh", TRAITS)
    path = project("k.cu", SCALE)
    p = api.infer_spec(api.snapshot(SCALE, str(path)), "scale", run=False)
    # the closest fit (fewest members) of the two that have them all; a base's members count
    # (`variant.scale`), a `bool` parameter is false
    assert p.valid and 'instantiate = "<fi::Narrow<float>, fi::Plain<false>>"' in p.comment, (p.problems, p.comment)
    assert any("took `fi::Narrow<float>`" in n and "fi::Wide<float> too" in n for n in p.notes), p.notes


def test_a_class_no_project_class_fits_is_said_and_nothing_is_proposed(project):
    project("traits.cuh", "struct Loose { static constexpr int kWarps = 4; };\n")
    path = project("k.cu", SCALE)
    p = api.infer_spec(api.snapshot(SCALE, str(path)), "scale", run=False)
    assert not p.valid and p.problems[0].startswith(CANNOT + "template parameter `Traits`"), p.problems


PARAMS = "namespace fi {\ntemplate <typename Q_> struct DecodeParams {\n  using DTypeQ = Q_;\n  Q_* q;\n  Q_* o;\n  unsigned n;\n};\n}\n"
DECODE = ('#include "params.cuh"\ntemplate <typename Params>\n'
          "__global__ void decode(const __grid_constant__ Params params) {\n"
          "  using DTypeQ = typename Params::DTypeQ;\n"
          "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
          "  if (i < params.n) params.o[i] = params.q[i] * 2;\n}\n")


def _proposed_and_checked(project, text: str, kernel: str):
    path = project("k.cu", text)
    p = api.infer_spec(api.snapshot(text, str(path)), kernel, run=False)
    assert p.valid, (p.problems, p.comment)
    k = source.parse(text).kernel(kernel)
    text = text[:k.span.start_byte] + p.comment + text[k.span.start_byte:]
    path.write_text(text)
    (v,) = api.check(api.snapshot(text, str(path)), kernel, backend="cpu", quick=True, pin_first=False)
    return p, v


@needs_gxx
def test_a_struct_parameter_of_a_template_parameters_type_is_split_as_the_class_taken(project):
    # FlashInfer's decode `Params`: the project's class taken for it is read field by field like a
    # struct of a named type, and the kernel runs on it (the layout as compiled)
    project("params.cuh", PARAMS)
    p, v = _proposed_and_checked(project, DECODE, "decode")
    assert 'instantiate = "<fi::DecodeParams<float>>"' in p.comment and 'params.n  = "n"' in p.comment, p.comment
    assert 'params.o  = { type = "float", shape = ["n"], output = true }' in p.comment, p.comment
    assert v.passed, [c for c in v.checks if not c.passed]


@needs_gxx
def test_a_struct_type_the_launch_gives_its_template_parameter_is_split(project):
    project("params.cuh", PARAMS)
    # (a launcher that sets the fields itself, `p.n = n`, is not linked to its sizes yet, whatever
    # the struct's type: the launcher here hands on its own)
    text = DECODE + ("void run(fi::DecodeParams<float> p) {\n"
                     "  decode<fi::DecodeParams<float>><<<(p.n + 127) / 128, 128>>>(p);\n}\n")
    p, v = _proposed_and_checked(project, text, "decode")
    assert 'instantiate = "<fi::DecodeParams<float>>"' in p.comment and 'block = ["128"]' in p.comment, p.comment
    assert 'params.n  = "n"' in p.comment and 'grid = ["(n + 127) / 128"]' in p.comment, p.comment
    assert v.passed, [c for c in v.checks if not c.passed]
