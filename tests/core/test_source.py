"""Discovery of kernels, parameters, ranges and launch sites on tricky sources."""
from astra_cuda.model import file_model, source

TRICKY = r'''
#include <cuda_fp16.h>
#define BLOCK 256
// __global__ void in_a_comment(float* x) {}
const char* s = "__global__ void in_a_string(float* x) {}";
namespace outer { namespace inner {
template <typename T, int VEC = 4>
__global__ void __launch_bounds__(BLOCK, 2) tmpl(T* __restrict__ out, const T* __restrict__ in, int64_t n) {
  out[0] = in[0];
}
} }
extern "C" __global__ void plain_c(float* out, const float* const in, unsigned n) { out[0] = in[0]; }
extern "C" {
__global__ void in_block(int* a) { a[0] = 1; }
}
static __global__ void with_static(const __half* a, __half* b) { b[0] = a[0]; }
void host(float* o, const float* i, int n, cudaStream_t st) {
  outer::inner::tmpl<float><<<dim3((n + 255) / 256), BLOCK, 0, st>>>(o, i, n);
  plain_c<<<1, 32>>>(o, i, n);
}
'''


def test_finds_every_kernel_and_ignores_comments_and_strings():
    m = source.parse(TRICKY)
    assert [k.name for k in m.kernels] == ["tmpl", "plain_c", "in_block", "with_static"]
    assert not m.syntax_errors


def test_template_namespace_launch_bounds():
    k = source.parse(TRICKY).kernel("tmpl")
    assert k.qualified_name == "outer::inner::tmpl"
    assert k.template_param_names == ("T", "VEC")
    assert k.launch_bounds == "__launch_bounds__(BLOCK, 2)"
    out, inp, n = k.params
    assert (out.name, out.is_pointer, out.is_const, out.restrict, out.base_type) == ("out", True, False, True, "T")
    assert (inp.is_const, inp.restrict) == (True, True)
    assert (n.name, n.is_pointer, n.base_type) == ("n", False, "int64_t")
    # The range starts at the template line and the name range is exact.
    assert TRICKY.splitlines()[k.span.start_line].startswith("template <typename T")
    line = TRICKY.splitlines()[k.name_span.start_line]
    assert line[k.name_span.start_col:k.name_span.end_col] == "tmpl"


def test_extern_c_forms():
    m = source.parse(TRICKY)
    assert m.kernel("plain_c").extern_c and m.kernel("in_block").extern_c
    assert not m.kernel("with_static").extern_c
    assert TRICKY.splitlines()[m.kernel("plain_c").span.start_line].startswith('extern "C"')
    assert m.kernel("plain_c").params[1].is_const


def test_launch_sites():
    m = source.parse(TRICKY)
    (t,) = m.launches_of("tmpl")
    assert t.template_args == "<float>" and t.grid == "dim3((n + 255) / 256)" and t.block == "BLOCK"
    assert t.shared_mem == "0" and t.stream == "st" and t.args == ("o", "i", "n") and t.function == "host"
    (p,) = m.launches_of("plain_c")
    assert p.shared_mem is None and p.grid == "1"


def test_items_and_uses():
    m = source.parse(TRICKY)
    kinds = {(i.kind, next(iter(i.defines), None)) for i in m.items}
    assert ("macro", "BLOCK") in kinds and ("host_function", "host") in kinds
    assert "BLOCK" in m.kernel("tmpl").uses


def test_spec_comment_attached_across_blank_lines_but_not_across_code():
    src = ("/* @astra\ngrid=[1]\n*/\n__global__ void a(float* x) {}\n/* @astra\ngrid=[1]\n*/\n\n\n"
           "__global__ void b(float* x) {}\n/* @astra\ngrid=[1]\n*/\nint n = 3;\n__global__ void c(float* x) {}\n"
           "/* @astra\ngrid=[1]\n*/\n// a note\n__global__ void d(float* x) {}\n")
    m = source.parse(src)
    assert m.kernel("a").spec is not None
    assert m.kernel("b").spec is not None   # issue 10: a blank line used to hide the spec
    assert m.kernel("c").spec is None and m.kernel("d").spec is None


def test_malformed_source_never_raises():
    m = source.parse("__global__ void broken(float* x { x[0] = ; }\n@@@@\n")
    assert m.syntax_errors


def test_columns_count_characters_without_decoding_each_line():
    """A column is the characters before it on its line, a part of a character counted as one (as
    decoding with replacement counts it); found from the continuation bytes, so a 4 MB line of
    items is linear, not quadratic."""
    text = "a\u00e9b\u4e2dc\U0001f600d\n\u00e9\u00e9 x\n\nplain ascii\n\U0001f600"
    t = file_model.Positions(text)
    data = text.encode()
    for line, start in enumerate(t.line_starts):
        for byte_col in range(len(data) - start + 1):
            want = len(data[start:start + byte_col].decode("utf-8", errors="replace"))
            assert t.col(line, byte_col) == want, (line, byte_col)
    ascii_only = file_model.Positions("a;" * 1000)
    assert not ascii_only.continuations and ascii_only.col(0, 1500) == 1500
