"""flash-attention's layer norm guards each load of a row `if (Is_even_cols || (it < num_valid_ldgs))`:
in an instance whose flag is false the other side alone decides the branch, and it must narrow the
index as it would written alone — an `||` was not narrowed at all, so every trip of the load loop
counted and the row's vectors reached a whole block of loads past the row's end."""
from astra_cuda.model import access, source

EITHER = """template <bool Even>
__global__ void fill(float* out, int n) {
  const int i = threadIdx.x;
  if (Even || i < n) out[i] = 0.f;
}
"""


def test_an_or_whose_flag_the_instance_makes_false_narrows_by_its_other_side():
    k = source.parse(EITHER).kernel("fill")
    f = access.analyse(k, {"n": 10}, (1, 1, 1), (32, 1, 1), {"out": 4}, set(), 100, {"Even": 0})
    assert f.uses["out"].hi == 9
    # with the flag true the branch is taken by every thread: the whole block
    f = access.analyse(k, {"n": 10}, (1, 1, 1), (32, 1, 1), {"out": 4}, set(), 100, {"Even": 1})
    assert f.uses["out"].hi == 31


def test_an_and_whose_flag_the_instance_makes_true_narrows_its_else_by_the_other_side():
    k = source.parse(EITHER.replace("if (Even || i < n) out[i] = 0.f;",
                                    "if (Even && i >= n) return;\n  out[i] = 0.f;")).kernel("fill")
    f = access.analyse(k, {"n": 10}, (1, 1, 1), (32, 1, 1), {"out": 4}, set(), 100, {"Even": 1})
    assert f.uses["out"].hi == 9
