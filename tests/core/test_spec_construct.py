"""The spec's `construct` (issue 25, item 6): a class object passed by value — a parameter, or a
struct's field (FlashInfer's `paged_kv.page_size`, a `uint_fastdiv`) — given by a constructor or
factory call over the sizes; checked with tree-sitter before anything is built, and turned into
the host program that builds it (`model.construct`)."""
import pytest

from astra_cuda.model import construct, layout, source, spec as spec_mod
from astra_cuda.model.harness import SpecErrors

HEAD = """\
struct fastdiv { __host__ fastdiv(unsigned d); unsigned d, m, s; };
struct params_t { float* out; unsigned n; fastdiv page; };
"""


def _load(args: str, kernel: str = "__global__ void k(params_t p, fastdiv by, int n) {}"):
    text = HEAD + f"""/* @astra
grid = [1]
block = [32]
[sizes]
n = [1, 300]
page = [1, 16]
[args]
{args}
*/
{kernel}
"""
    m = source.parse(text)
    return spec_mod.load(m.kernel("k"), m)


GOOD = 'p.out = { type = "float", shape = ["n"], output = true }\np.n = "n"\n'


def test_a_field_and_a_parameter_built_by_constructors():
    s = _load(GOOD + 'p.page = { construct = "fastdiv(page)" }\nby = { construct = "fastdiv(2 * n + 1)" }\nn = "n"')
    assert s.args["p.page"].construct == "fastdiv(page)" and s.args["p.page"].member_of == "p"
    assert s.args["by"].construct == "fastdiv(2 * n + 1)" and not s.args["by"].is_scalar
    assert s.args["p"].fields == ("out", "n", "page")


@pytest.mark.parametrize("expr,why", [
    ("fastdiv(pages)", "pages, which \\[sizes\\] does not give"),
    ("fastdiv(n = 3)", "not allowed"),
    ("fastdiv(n); system(0)", "not one C\\+\\+ expression"),
    ("[]{ return fastdiv(n); }()", "not allowed"),
    ("n + 1", "constructor or a function call"),
    ("fastdiv(\\\"x\\\")", "not allowed"),
])
def test_an_expression_that_is_not_a_constructor_over_the_sizes_is_refused(expr, why):
    with pytest.raises(SpecErrors, match=why):
        _load(GOOD + f'p.page = {{ construct = "{expr}" }}\nby = {{ construct = "fastdiv(n)" }}\nn = "n"')


def test_a_number_parameter_is_not_constructed():
    with pytest.raises(SpecErrors, match="is a number"):
        _load(GOOD + 'p.page = { construct = "fastdiv(page)" }\nby = { construct = "fastdiv(n)" }\n'
              'n = { construct = "fastdiv(n)" }')


def test_sizes_read_are_the_plain_names_not_the_functions_or_types():
    assert construct.sizes_used("cute::make_shape(M, N, K)") == {"M", "N", "K"}
    assert construct.sizes_used("ns::Div<int, 4>(rows * 2, cols)") == {"rows", "cols"}
    assert construct.sizes_used("fastdiv{n}") == {"n"}


def test_the_program_builds_each_object_of_the_kernels_own_types():
    main = construct.program("k", [construct.Target(0, "page", "fastdiv(page)"), construct.Target(1, "", "fastdiv(n)")],
                             ["n", "page"], layout.HELPERS)
    assert "decltype(((astra_layout_::bare<astra_layout_::param<0, decltype(&k)>::type>::type*)0)->page)" in main
    assert "typedef astra_layout_::bare<astra_layout_::param<1, decltype(&k)>::type>::type astra_construct_t1_;" in main
    assert "const int n = (int)std::strtol(argv[1], 0, 10);" in main and "argv[2]" in main
    assert "new (astra_b_) astra_construct_t0_((fastdiv(page)));" in main
    assert construct.parse_output("0a00\nff\n", 2) == [b"\x0a\x00", b"\xff"]
    with pytest.raises(ValueError):
        construct.parse_output("0a00\n", 2)
