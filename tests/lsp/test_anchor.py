"""Where a verified rewrite goes after concurrent edits (pure logic)."""
from astra_cuda.lsp.anchor import place, rewrite_for
from astra_cuda.lsp.convert import EditorSpan, text_in

ORIGINAL = """#include <x.h>
__device__ float f(float x) { return x / 2.0f; }

__global__ void k(float* o, const float* i) {
  o[threadIdx.x] = f(i[threadIdx.x]);
}

int main() { return 0; }
"""
BEST = ORIGINAL.replace("x / 2.0f", "x * 0.5f").replace("o[threadIdx.x] =", "o[threadIdx.x] = /*v*/")
KERNEL = EditorSpan(3, 0, 5, 1)


def apply(text, span, new):
    lines = text.splitlines(keepends=True)
    off = lambda l, c: sum(len(x) for x in lines[:l]) + c  # noqa: E731
    return text[:off(span.start_line, span.start_col)] + new + text[off(span.end_line, span.end_col):]


def test_the_region_covers_helpers_and_the_kernel_and_gives_the_verified_file():
    rw = rewrite_for(ORIGINAL, BEST, KERNEL, version=3)
    assert rw.span.start_line == 1 and rw.span.end_line == 6 and rw.span.end_col == 0
    assert text_in(ORIGINAL, rw.span) == rw.old
    assert apply(ORIGINAL, place(rw, 3, ORIGINAL).span, rw.new) == BEST
    assert rw.applied(BEST) and not rw.applied(ORIGINAL)


def test_edits_outside_the_region_re_anchor_it():
    rw = rewrite_for(ORIGINAL, BEST, KERNEL, version=3)
    moved = "// note\n// more\n" + ORIGINAL + "// after\n"
    p = place(rw, 4, moved)
    assert p.how == "re-anchored"
    assert apply(moved, p.span, rw.new) == "// note\n// more\n" + BEST + "// after\n"


def test_edits_inside_the_region_or_a_duplicate_decline_it():
    rw = rewrite_for(ORIGINAL, BEST, KERNEL, version=3)
    assert place(rw, 4, ORIGINAL.replace("o[threadIdx.x] =", "o[threadIdx.x + 0] =")).how == "declined"
    assert place(rw, 4, ORIGINAL + ORIGINAL).how == "declined"
