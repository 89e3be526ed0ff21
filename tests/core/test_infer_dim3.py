"""Spec proposals for launches through local dim3 variables, and host expressions read by their
structure (`std::min`, macros, `a < b ? a : b`)."""
from pathlib import Path

import pytest

from astra_cuda import infer
from astra_cuda.model import source, spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

KERNEL = "__global__ void k(float* out, const float* in, int n, int d) {}\n"


def without_spec(text: str) -> str:
    i = text.index("/* @astra")
    j = text.index("*/", i) + 3
    return text[:i] + text[j:]


def propose(text: str, kernel: str = "k") -> infer.Proposal:
    m = source.parse(text)
    return infer.infer(m.kernel(kernel), m)


def with_proposal(bare: str, kernel: str, proposal: infer.Proposal) -> spec.Spec:
    """Paste the proposal above the kernel and load it as the spec."""
    k = source.parse(bare).kernel(kernel)
    new = bare[:k.span.start_byte] + proposal.comment + bare[k.span.start_byte:]
    m = source.parse(new)
    return spec.load(m.kernel(kernel), m)


def launch(body: str, params: str = "int n, int d") -> str:
    return KERNEL + f"void host(float* out, const float* in, {params}) {{\n{body}\n}}\n"


def site(body: str, params: str = "int n, int d") -> source.LaunchSite:
    (s,) = source.parse(launch(body, params)).launches
    return s


def grid_block(body: str, params: str = "int n, int d") -> tuple[str, str, list[str]]:
    p = propose(launch(body, params))
    lines = p.comment.splitlines()
    return lines[1], lines[2], p.notes


# --- the examples: the proposal's launch is the hand-written one, and it loads -------------------

@pytest.mark.parametrize("example, kernel", [("merge_attn_states", "merge_attn_states"),
                                             ("fused_add_rmsnorm", "fused_add_rmsnorm_kernel")])
def test_example_proposal_matches_hand_written_launch(example, kernel):
    text = (EXAMPLES / f"{example}.cu").read_text()
    m = source.parse(text)
    hand = spec.load(m.kernel(kernel), m)
    bare = without_spec(text)
    proposal = propose(bare, kernel)
    proposed = with_proposal(bare, kernel, proposal)
    assert set(proposed.sizes) == set(hand.sizes)
    cases = hand.cases() + hand.bench_cases()
    assert len(cases) > 3
    for sizes in cases:
        assert proposed.launch_dims(sizes)[:2] == hand.launch_dims(sizes)[:2], sizes
    assert not any("guessed" in n or "not followed" in n for n in proposal.notes), proposal.notes


def test_merge_proposal_text():
    p = propose(without_spec((EXAMPLES / "merge_attn_states.cu").read_text()), "merge_attn_states")
    assert 'grid = ["num_tokens", "num_heads"]' in p.comment
    assert 'block = ["min(head_dim, 128)"]' in p.comment
    assert '"grid"' not in p.comment


def test_fused_rmsnorm_block_reads_the_macro():
    p = propose(without_spec((EXAMPLES / "fused_add_rmsnorm.cu").read_text()), "fused_add_rmsnorm_kernel")
    assert 'grid = ["num_tokens"]' in p.comment
    assert 'block = ["min(hidden_size, 1024)"]' in p.comment


def test_silu_and_mul_launch_unchanged():
    bare = without_spec((EXAMPLES / "silu_and_mul.cu").read_text())
    (s,) = source.parse(bare).launches_of("silu_and_mul")
    assert s.grid_var is None and s.block_var is None
    p = propose(bare, "silu_and_mul")
    assert 'grid = ["num_tokens"]' in p.comment and 'block = ["min(d, 1024)"]' in p.comment
    # the usual test sizes and the program's own (main's num_tokens = 16)
    assert "[sizes]\nnum_tokens = [1, 7, 16, 333]\nd = [128, 1001, 4096]\n" in p.comment
    s = with_proposal(bare, "silu_and_mul", p)
    assert s.bytes_moved(s.bench_cases()[0]) >= 256 << 20   # timed where launch latency does not dominate


# --- the dim3 forms -------------------------------------------------------------------------------

@pytest.mark.parametrize("decl", [
    "dim3 grid(n, d);",
    "const dim3 grid(n, d);",
    "dim3 grid = {n, d};",
    "const dim3 grid = {n, d};",
    "dim3 grid{n, d};",
    "auto grid = dim3(n, d);",
    "const auto grid = dim3(n, d);",
    "auto grid = dim3{n, d};",
    "dim3 grid = dim3(n, d);",
    "dim3 other(1), grid(n, d);",
])
def test_dim3_forms_resolved(decl):
    s = site(f"  {decl}\n  k<<<grid, 128>>>(out, in, n, d);")
    assert s.grid == "grid"  # the text as written stays for everyone else
    assert s.grid_var is not None and s.grid_var.dims == ("n", "d") and s.grid_var.problem is None
    assert s.grid_var.line == 2  # 0-based, like every position in the model
    assert grid_block(f"  {decl}\n  k<<<grid, 128>>>(out, in, n, d);")[:2] == \
        ('grid = ["n", "d"]', 'block = ["128"]')


@pytest.mark.parametrize("decl, dims", [
    ("dim3 block(d < 256 ? d : 256);", ("d < 256 ? d : 256",)),
    ("dim3 block((d + 31) / 32 * 32);", ("(d + 31) / 32 * 32",)),
    ("dim3 block = d;", ("d",)),
    ("dim3 block;", ("1",)),
    ("dim3 block{};", ("1",)),
    ("dim3 block(32, 4, 1);", ("32", "4", "1")),
    # a product of two names, which tree-sitter reads as a function declaration taking a `d*`
    ("dim3 block(d * n);", ("d * n",)),
])
def test_dim3_arguments_as_written(decl, dims):
    s = site(f"  {decl}\n  k<<<n, block>>>(out, in, n, d);")
    assert s.block_var is not None and s.block_var.dims == dims


def test_a_dim3_declaring_a_function_of_a_built_in_pointer_is_no_dim3_value():
    s = site("  dim3 block(int *d);\n  k<<<n, 128>>>(out, in, n, d);")
    assert s.block_var is None


def test_block_from_dim3_with_conditional_and_arithmetic():
    _, block, notes = grid_block("  const dim3 block(d < 256 ? d : 256, (n + 3) / 4);\n"
                                 "  k<<<n, block, 0, 0>>>(out, in, n, d);")
    assert block == 'block = ["min(d, 256)", "(n + 3) / 4"]'
    assert not any("guessed" in x for x in notes)


def test_host_names_mapped_through_the_launch_arguments():
    # The host calls its sizes differently from the kernel: the launch's arguments say which is which.
    body = "  dim3 grid(rows);\n  dim3 block(std::min(cols, 1024));\n  k<<<grid, block>>>(out, in, rows, cols);"
    g, b, _ = grid_block(body, params="int rows, int cols")
    assert (g, b) == ('grid = ["n"]', 'block = ["min(d, 1024)"]')


def test_members_assigned_once_before_the_launch_are_its_dimensions():
    s = site("  dim3 grid(n);\n  grid.x = 2 * n;\n  grid.y = d;\n  k<<<grid, 128>>>(out, in, n, d);")
    assert s.grid_var is not None and s.grid_var.dims == ("2 * n", "d")


# --- not followed: reassigned, declared elsewhere ------------------------------------------------

@pytest.mark.parametrize("body, problem", [
    ("  dim3 grid(n);\n  if (grid.x++ > d) d = 1;\n  k<<<grid, 128>>>(out, in, n, d);", "may be changed on line 4"),
    ("  dim3 grid(n);\n  grid = dim3(4);\n  k<<<grid, 128>>>(out, in, n, d);", "may be changed on line 4"),
    ("  dim3 grid(n);\n  for (int i = 0; i < d; ++i) {\n    k<<<grid, 128>>>(out, in, n, d);\n    grid.y *= 2;\n  }",
     "may be changed on line 6"),
    ("  dim3 grid(n);\n  ++grid.x;\n  k<<<grid, 128>>>(out, in, n, d);", "may be changed on line 4"),
    ("  dim3 grid(n);\n  tune(&grid);\n  k<<<grid, 128>>>(out, in, n, d);", "may be changed on line 4"),
    ("  dim3 grid(n);\n  tune(grid);\n  k<<<grid, 128>>>(out, in, n, d);", "may be changed on line 4"),
])
def test_changed_dim3_not_followed(body, problem):
    s = site(body)
    assert s.grid_var is not None and s.grid_var.dims is None and problem in s.grid_var.problem
    g, _, notes = grid_block(body)
    assert g == 'grid = ["cdiv(n, 128)"]'  # a block count not followed: one thread per element
    assert any("`grid`" in x and "not followed" in x and problem in x for x in notes), notes


def test_a_loop_that_keeps_the_grid_within_a_limit_runs_no_trip_under_its_require():
    # The dim3 itself is not followed, but since 9e955ba the launcher loop is read: at the sizes a
    # spec tests it runs no trip, so the grid keeps its value and the loop's limit is required.
    body = "  dim3 grid(n);\n  while (grid.x > 1024) grid.x /= 2;\n  k<<<grid, 128>>>(out, in, n, d);"
    s = site(body)
    assert s.grid_var is not None and s.grid_var.dims is None and "may be changed on line 4" in s.grid_var.problem
    g, _, notes = grid_block(body)
    assert g == 'grid = ["n"]'
    assert any("`n <= 1024`" in x and "required" in x for x in notes), notes


@pytest.mark.parametrize("body, dims", [
    # an `if`/`else` that sets a member: the C conditional over the sizes (FasterTransformer's
    # layernorm launcher: `dim3 block(min(n, 1024)); if (n % 32 != 0) block.x = 1024;`)
    ("  dim3 grid(n);\n  if (d > 4) grid.x = 2 * n;\n  k<<<grid, 128>>>(out, in, n, d);", ("(d > 4) ? (2 * n) : (n)",)),
    ("  dim3 grid;\n  if (n <= 1024) { grid.x = d; }\n  else { grid.x = n / 4; grid.y = 2; }\n"
     "  k<<<grid, 128>>>(out, in, n, d);", ("(n <= 1024) ? (d) : (n / 4)", "(n <= 1024) ? (1) : (2)")),
    # assigned twice, and reading its own value so far
    ("  dim3 grid(n);\n  grid.x = n;\n  grid.x /= 2;\n  k<<<grid, 128>>>(out, in, n, d);", ("(n) / (2)",)),
    ("  dim3 grid(n);\n  grid.x = (grid.x + 31) / 32;\n  k<<<grid, 128>>>(out, in, n, d);", ("((n) + 31) / 32",)),
    # changes no run of the launcher makes before this launch: after it, in the other branch of
    # an `if`, in an earlier `case` that breaks, or in the launch's own branch before it
    ("  dim3 grid(n);\n  k<<<grid, 128>>>(out, in, n, d);\n  grid.y *= 2;", ("n",)),
    ("  dim3 grid(n);\n  if (d) { grid.x /= 2; k<<<grid, 64>>>(out, in, n, d); }\n"
     "  else { k<<<grid, 128>>>(out, in, n, d); }", ("n",)),
    ("  dim3 grid(n);\n  switch (d) {\n    case 1: grid.x /= 2; tune(grid); break;\n"
     "    case 2: k<<<grid, 128>>>(out, in, n, d); break;\n  }", ("n",)),
    ("  dim3 grid(n);\n  if (d > 2) {\n    grid.x /= d;\n    k<<<grid, 128>>>(out, in, n, d);\n  }", ("(n) / (d)",)),
])
def test_dim3_members_followed_along_the_launchs_path(body, dims):
    s = next(x for x in source.parse(launch(body)).launches if x.block == "128")
    assert s.grid_var is not None and s.grid_var.problem is None and s.grid_var.dims == dims


def test_dim3_read_only_uses_are_fine():
    body = "  dim3 grid(n);\n  int blocks = grid.x;\n  k<<<grid, 128>>>(out, in, n, d);\n" \
           "  k<<<grid, 64>>>(out, in, n, d);"
    assert [s.grid_var.dims for s in source.parse(launch(body)).launches] == [("n",), ("n",)]


def test_dim3_declared_at_file_scope_not_followed():
    text = KERNEL + "dim3 grid(64);\nvoid host(float* out, const float* in, int n, int d) {\n" \
        "  k<<<grid, 128>>>(out, in, n, d);\n}\n"
    (s,) = source.parse(text).launches
    assert s.grid_var.dims is None and "declared outside `host`" in s.grid_var.problem
    p = propose(text)
    assert 'grid = ["cdiv(n, 128)"]' in p.comment
    assert any("not followed" in x for x in p.notes)


def test_dim3_parameter_not_followed():
    s = site("  k<<<grid, 128>>>(out, in, n, d);", params="int n, int d, dim3 grid")
    assert s.grid_var.dims is None and "parameter of `host`" in s.grid_var.problem


def test_dim3_declared_in_another_function_not_followed():
    text = KERNEL + "void setup(int n) { dim3 grid(n); }\n" \
        "void host(float* out, const float* in, int n, int d) {\n  k<<<grid, 128>>>(out, in, n, d);\n}\n"
    (s,) = source.parse(text).launches
    assert s.grid_var is None  # not a dim3 this function can see: read as written, as before
    assert 'grid = ["cdiv(n, 128)"]' in propose(text).comment


def test_dim3_in_a_closed_block_not_followed():
    body = "  {\n    dim3 grid(n);\n  }\n  k<<<grid, 128>>>(out, in, n, d);"
    s = site(body)
    assert s.grid_var.dims is None and "scope enclosing it" in s.grid_var.problem


def test_non_dim3_variables_followed_to_their_value():
    s = site("  const int threads = 256;\n  k<<<n, threads>>>(out, in, n, d);")
    assert s.block_var is None
    # issue 10: a const block size is followed (it used to be a guessed block)
    _, block, notes = grid_block("  const int threads = 256;\n  k<<<n, threads>>>(out, in, n, d);")
    assert block == 'block = ["256"]' and not any("guessed a block" in x for x in notes)


def test_launch_site_json_unchanged():
    s = site("  dim3 grid(n);\n  k<<<grid, 128>>>(out, in, n, d);")
    assert set(s.to_json()) == {"kernel", "template_args", "grid", "block", "shared_mem", "stream", "args",
                                "line", "function"}


# --- host expressions -----------------------------------------------------------------------------

@pytest.mark.parametrize("expr, want", [
    ("d < 1024 ? d : 1024", "min(d, 1024)"),
    ("d <= 1024 ? d : 1024", "min(d, 1024)"),
    ("d > 1024 ? 1024 : d", "min(d, 1024)"),
    ("d < 1024 ? 1024 : d", "max(d, 1024)"),
    ("d >= 32 ? d : 32", "max(d, 32)"),
    ("(d < 1024) ? (d) : (1024)", "min(d, 1024)"),
    ("n * 2 < d ? n*2 : d", "min(n * 2, d)"),
    ("std::min(d, 1024)", "min(d, 1024)"),
    ("std::max<int>(d, 32)", "max(d, 32)"),
    ("(int)d", "d"),
    ("static_cast<int64_t>(n) * 2", "n * 2"),
    ("(n + 255) / 256", "(n + 255) / 256"),
    ("cdiv(n, 256)", "cdiv(n, 256)"),
    ("1024u", "1024"),
    ("0x100", "256"),
])
def test_host_expressions(expr, want):
    assert infer.HostExprs({"n": "n", "d": "d"}, {}).spec(expr) == want


@pytest.mark.parametrize("expr, spec", [
    ("d < 1024 ? d : 512", "d if d < 1024 else 512"),        # not a min: the spec's own conditional
    ("d < 1024 ? n : 1024", "n if d < 1024 else 1024"),
    ("d < 1024 ? d + 1 : 1024", "d + 1 if d < 1024 else 1024"),
    ("d == 1024 ? d : 1024", "d if d == 1024 else 1024"),
    # any comparison, joined by && || ! (FasterTransformer: `if (n % 32 != 0) block.x = 1024;`)
    ("(n % 32 != 0) ? (1024) : (d)", "1024 if n % 32 != 0 else d"),
    ("n > 4 && !(d == 2) ? n : d", "n if n > 4 and (not d == 2) else d"),
])
def test_host_conditionals_by_size_are_the_specs_conditional(expr, spec):
    assert infer.HostExprs({"n": "n", "d": "d"}, {}).spec(expr) == spec


@pytest.mark.parametrize("expr, spec", [
    # a float division of whole numbers rounded up (FasterTransformer: `ceil(float(q) / 32.0f)`)
    ("ceil(float(n) / 32.0f)", "cdiv(n, 32)"),
    ("std::ceil(n * d / 1024.)", "cdiv(n * d, 1024)"),
    ("ceilf((float)n / d)", "cdiv(n, d)"),
    # a local flag read as its value, decided where the template's sizeof decides it
    ("(n / (half2 ? 2 : 1) + 31) / 32 * 32", "(n / 1 + 31) / 32 * 32"),
    ("wide ? n : d", "n if n % 2 == 0 else d"),
])
def test_host_ceilings_and_flags(expr, spec):
    consts = {"half2": "sizeof(T) == 2 && n % 2 == 0", "wide": "sizeof(T) == 4 && n % 2 == 0", "sizeof(T)": "4"}
    assert infer.HostExprs({"n": "n", "d": "d"}, consts).spec(expr) == spec


@pytest.mark.parametrize("expr", [
    "ceil(n / d)",               # integers divide first: a truncation, not a ceiling
    "ceil(n / 2.5)",
    "flag ? d : 1024",           # a condition on a name that is no size
    "d & 1 ? d : 1024",
    "(float)d",
    "foo(d)",
    "x.size(0)",
    "d); evil(",
    "",
])
def test_host_expressions_refused(expr):
    assert infer.HostExprs({"n": "n", "d": "d"}, {}).spec(expr) is None


def test_constants_from_macros_and_constexpr():
    text = "#define THREADS 256\n#define TWICE (THREADS * 2)\nconstexpr int kRows = 4;\n" \
           "#ifdef BIG\n#define TILE 64\n#else\n#define TILE 32\n#endif\n" + KERNEL
    m = source.parse(text)
    assert m.constants["THREADS"] == "256" and m.constants["kRows"] == "4"
    assert "TILE" not in m.constants  # two different values: not a constant we can rely on
    host = infer.HostExprs({"d": "d"}, m.constants)
    assert host.spec("std::min(d, TWICE)") == "min(d, 256 * 2)"
    assert host.spec("d / kRows") == "d / 4"
    assert host.spec("TILE") is None


def test_free_names_listed_only_for_readable_grids():
    free: list[str] = []
    assert infer.HostExprs({"d": "d"}, {}).spec("rows * heads", free) == "rows * heads"
    assert free == ["rows", "heads"]
    free = []
    assert infer.HostExprs({"d": "d"}, {}).spec("foo(rows)", free) is None and free == []


def test_parse_expression():
    assert source.parse_expression("a < b ? a : b").type == "conditional_expression"
    assert source.parse_expression("a); b(") is None
    assert source.parse_expression("a; b") is None


def test_a_dim3_declared_again_in_an_inner_scope_is_the_outer_one_at_an_outer_launch():
    # C++ scoping: the `if` block's own `grid` ends with the block (TransformerEngine's fused_rope
    # launcher declares `blocks` once per branch)
    body = "  dim3 grid(n);\n  if (d) { dim3 grid(1); }\n  k<<<grid, 128>>>(out, in, n, d);"
    assert site(body).grid_var.dims == ("n",)
    # a launch in a branch that declares its own sees that one (vLLM's activation launcher declares
    # `dim3 block` in each branch, each with its own launch)
    body = "  if (d) { dim3 grid(1); k<<<grid, 128>>>(out, in, n, d); }\n  else { dim3 grid(n); }"
    assert site(body).grid_var.dims == ("1",)
    # declared after the launch in its block: the outer one
    body = "  dim3 grid(n);\n  if (d) { k<<<grid, 128>>>(out, in, n, d); dim3 grid(1); }"
    assert site(body).grid_var.dims == ("n",)


def test_a_local_declared_in_each_branch_is_the_one_the_launch_sees():
    # TransformerEngine's permute launcher: `int threads = 64; int blocks = ...;` in one branch,
    # `int threads = 32; int blocks = num_rows;` in the other, where this launch is
    body = ("  if (d > 1) { int threads = 64; int blocks = 2 * n; blocks = n / 4; }\n"
            "  else { int threads = 32; int blocks = n; k<<<blocks, threads>>>(out, in, n, d); }")
    g, b, _ = grid_block(body)
    assert (g, b) == ('grid = ["n"]', 'block = ["32"]')
    # a change that reaches the launch is still not followed
    g, b, notes = grid_block("  int threads = 32;\n  if (d > 2) threads = 64;\n  k<<<n, threads>>>(out, in, n, d);")
    assert b != 'block = ["32"]' and any("`threads`" in x for x in notes)


def test_a_braced_block_is_its_dimensions():
    # apex index_mul_2d: `k<<<BLOCK_NUMS, {BLOCK_THREADS_DIMX, BLOCK_THREADS_DIMY, 1}, 0, stream>>>`
    g, b, _ = grid_block("  k<<<(n + 7) / 8, {32, 8, 1}, 0>>>(out, in, n, d);")
    assert (g, b) == ('grid = ["(n + 7) / 8"]', 'block = ["32", "8"]')
    g, b, _ = grid_block("  k<<<n, dim3{64}, 0>>>(out, in, n, d);")
    assert b == 'block = ["64"]'
