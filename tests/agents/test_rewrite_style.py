"""Rewrites a reviewer can read (issue 26): for every offline transformation, on a kernel it
applies to, the offered text (`offline.style.polish`) uses ordinary names (the `astra_` prefix only
on a real clash), says what it did and why in a plain comment, keeps the spec's grid simple, and
still parses; the grid arithmetic and the project's .clang-format on their own."""
import difflib
import re
from pathlib import Path

import pytest

from astra_cuda.model import source
from astra_cuda.agents.offline import TRANSFORMS, context_from_text, style, tree

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "examples").glob("*.cu")) + sorted((ROOT / "tests" / "agents" / "kernels").glob("*.cu"))


AFTER = {"unroll_vector": "vectorize"}   # works on another transformation's output


def first_application(name):
    """(original, rewritten) of the transformation on the first kernel it applies to."""
    for f in FILES:
        original = f.read_text()
        for k in source.parse(original).kernels:
            text = original
            if name in AFTER:
                first = TRANSFORMS[AFTER[name]].apply(text, context_from_text(k.name, text))
                if first is None:
                    continue
                text = first.text
            rw = TRANSFORMS[name].apply(text, context_from_text(k.name, text))
            if rw is not None:
                return original, rw.text
    return None


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_every_transformation_reads_like_a_person_wrote_it(name):
    found = first_application(name)
    assert found is not None, f"{name} applies to none of {len(FILES)} kernels: nothing to judge its style on"
    original, text = found
    polished = style.polish(text, original)
    ours = set(re.findall(r"\bastra_\w+", polished)) - set(re.findall(r"\bastra_\w+", original))
    taken = set(re.findall(r"[A-Za-z_]\w*", original)) | style.RESERVED
    assert all(n[len("astra_"):] in taken or n[len("astra_"):] in re.findall(r"[A-Za-z_]\w*", polished)
               for n in ours), f"{name}: prefixed names with a free plain name: {sorted(ours)}"
    kept = set(original.split("\n"))
    added_comments = [line.strip() for line in polished.split("\n") if line not in kept and line.strip().startswith("//")]
    assert added_comments, f"{name}: no comment says what changed"
    assert not any("astra:" in c for c in added_comments)
    assert "cdiv(cdiv(" not in polished and ".x).x" not in polished
    rows = polished.split("\n")
    assert not any(a.strip().endswith("{") and b.strip() == "{" and b not in kept
                   for a, b in zip(rows, rows[1:])), f"{name}: a block directly inside a block"
    tree = source.parser().parse(polished.encode())
    assert not tree.root_node.has_error and source.parse(polished).kernels


def test_names_stay_prefixed_only_on_a_real_clash():
    assert style.plain_names("int astra_i0 = 0; int astra_n = n; int astra_int = 1;", "int n;") == \
        "int i0 = 0; int astra_n = n; int astra_int = 1;"
    # a word in a comment or a string is no clash; a macro's body is
    assert style.plain_names('int astra_n = 1; // n\nconst char* s = "%d\\n";', "// n") == \
        'int n = 1; // n\nconst char* s = "%d\\n";'
    assert style.plain_names("#define AT(p) p[n]\nint astra_n = 1;", "#define AT(p) p[n]\n").endswith("astra_n = 1;")


def test_a_pasted_loop_body_loses_its_extra_braces():
    original = "void f() {\n  for (int i = 0; i < n; ++i) {\n    g(i);\n  }\n}\n"
    text = ("void f() {\n  for (int k = 0; k < 4; ++k) {\n    {\n      g(k);\n      h(k);\n    }\n  }\n"
            "  for (int i = 0; i < n; ++i) {\n    g(i);\n  }\n}\n")
    assert style.flat_blocks(text, original) == ("void f() {\n  for (int k = 0; k < 4; ++k) {\n    g(k);\n    h(k);\n"
                                                 "  }\n  for (int i = 0; i < n; ++i) {\n    g(i);\n  }\n}\n")
    # beside other statements, only a block that declares nothing (else its names would leak)
    two = "void f() {\n  for (;;) {\n    int j = 0;\n    {\n      g(j);\n    }\n    {\n      int j = 1;\n    }\n  }\n}\n"
    assert style.flat_blocks(two, "") == "void f() {\n  for (;;) {\n    int j = 0;\n    g(j);\n    {\n      int j = 1;\n    }\n  }\n}\n"
    kept = "void f() {\n  for (;;) {\n    {\n      g();\n    }\n  }\n}\n"   # the user's own braces stay
    assert style.flat_blocks(kept, kept) == kept


def test_the_note_sits_at_the_change_and_blocks_no_later_transformation():
    text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    rw = TRANSFORMS["restrict_ldg"].apply(text, context_from_text("silu_and_mul", text))
    rows = rw.text.split("\n")
    at = next(i for i, r in enumerate(rows) if "astra-note:" in r)
    assert "__ldg" in rows[at + 1] and "read-only cache" in rows[at]
    # a note above a loop is not the `astra:` marker of generated code: later transformations take the loop
    loop = ("__global__ void k(float* __restrict__ o, const float* __restrict__ x, int n) {\n"
            "  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)"
            " o[i] = expf(x[i]);\n}\n")
    spec = '/* @astra\ngrid = ["cdiv(n, 256)"]\nblock = ["256"]\n[sizes]\nn = [1000]\n[args]\n' \
           'o = { type = "float", shape = ["n"], output = true }\nx = { type = "float", shape = ["n"] }\nn = "n"\n*/\n'
    fast = TRANSFORMS["fast_math"].apply(spec + loop, context_from_text("k", spec + loop))
    assert fast is not None and "astra-note:" in fast.text.split("\n")[-4]   # right above the loop
    loop_node = next(n for n in tree.walk(tree.root(fast.text)) if n.type == "for_statement")
    assert not tree.preceded_by_marker(loop_node)   # what vectorize asks before it takes a loop


def test_grids_are_folded_the_way_the_file_writes_them():
    assert style.div_up("(n + 256 - 1) / 256", 4) == "(n + 1023) / 1024"
    assert style.div_up("(n + 255) / 256", 2) == "(n + 511) / 512"
    assert style.div_up("ceil_div(n, 256)", 4) == "ceil_div(n, 1024)"
    helper = "inline int ceil_div(int a, int b) { return (a + b - 1) / b; }\n"
    assert style.div_up("blocks", 4, helper) == "ceil_div(blocks, 4)"
    assert style.div_up("grid", 4, "dim3 grid(n);") == "(dim3(grid).x + 3) / 4"
    assert style.spec_div_up("cdiv(n, 256)", 4) == "cdiv(n, 1024)"
    assert style.spec_div_up("num_tokens", 2) == "cdiv(num_tokens, 2)"
    assert style.div_up("(N + block_size - 1) / block_size", 8) == "(N + block_size * 8 - 1) / (block_size * 8)"
    assert style.spec_regrid("cdiv(n, 512)", "512", 4096) == "cdiv(n, 4096)"
    assert style.spec_regrid("cdiv(n, 512)", "512", 1000) == "cdiv(cdiv(n, 512) * 512, 1000)"   # not a multiple
    assert style.spec_regrid("f(a) + g(b)", "256", 1024) == "cdiv((f(a) + g(b)) * 256, 1024)"
    for n in (0, 1, 255, 256, 1023, 1024, 1025, 10 ** 6 + 7):   # the same number of blocks
        assert ((n + 256 - 1) // 256 + 3) // 4 == (n + 1023) // 1024


@pytest.mark.skipif(style._clang_format() is None, reason="clang-format (PyPI) not installed")
def test_changed_lines_follow_the_projects_clang_format(tmp_path):
    (tmp_path / ".clang-format").write_text("BasedOnStyle: LLVM\nIndentWidth: 4\nColumnLimit: 100\n")
    original = "__global__ void k(float* o) {\n  o[0] = 1.0f;\n}\n"
    text = "__global__ void k(float* o) {\n  o[0] = 1.0f;\n  if(true){o[1]=2.0f;}\n}\n"
    out = style.project_format(text, original, str(tmp_path / "k.cu"), str(tmp_path))
    assert "  if (true) {\n      o[1] = 2.0f;\n  }" in out and "  o[0] = 1.0f;" in out   # only the new lines, by its style
    assert style.project_format(text, original, str(tmp_path / "sub" / "k.cu"), str(tmp_path / "sub")) == text


def test_a_vectorized_loop_keeps_the_users_loop_as_its_tail():
    """The smallest diff: the vector loop goes above the user's loop, whose only change is where
    it starts; its body's lines stay as they were."""
    text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    out = style.polish(TRANSFORMS["vectorize"].apply(text, context_from_text("silu_and_mul", text)).text, text)
    removed = [ln for ln in difflib.unified_diff(text.split("\n"), out.split("\n"), lineterm="", n=0)
               if ln.startswith("-") and not ln.startswith("---")]
    assert removed == ["-  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {"]
    assert "  for (int64_t i = vec_end + threadIdx.x; i < d; i += blockDim.x) {" in out
    assert "  for (int64_t i0 = threadIdx.x * vec; i0 < vec_end; i0 += blockDim.x * vec) {" in out   # one line where it fits
    # a pragma of the user's loop stays right above it: the vector code then gets a block of its own
    pragma = text.replace("  for (int64_t i = threadIdx.x;", "  #pragma unroll 4\n  for (int64_t i = threadIdx.x;")
    out = TRANSFORMS["vectorize"].apply(pragma, context_from_text("silu_and_mul", pragma)).text
    assert "  #pragma unroll 4\n  // astra:" in out and "\n    for (int64_t i = astra_vec_end + threadIdx.x;" in out


def test_rows_writes_only_the_helpers_its_kernel_calls():
    text = (ROOT / "tests" / "agents" / "kernels" / "softmax_naive.cu").read_text()
    out = style.polish(TRANSFORMS["rows"].apply(text, context_from_text("softmax_forward_kernel1", text)).text, text)
    assert "row_max(maxval)" in out and "row_sum(sum)" in out and "row_sync();" in out
    assert "row_min" not in out   # no reduction of that kind in this kernel
    assert 'grid = ["N"]' in out and "<<<dim3(N), dim3(64, 1)>>>" in out   # no doubled parentheses
    from astra_cuda.agents.offline.rows import helpers_for
    assert helpers_for("astra_row_sync();", "").startswith("// the row's threads")   # no reduction: no reduce helper
    assert helpers_for("x = astra_row_min(x);", "T astra_row_reduce(T v, int op) {") == \
        "template <typename T> __device__ __forceinline__ T astra_row_min(T v) { return astra_row_reduce(v, 2); }\n\n"
