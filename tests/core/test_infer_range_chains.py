"""range_chains.range_thresholds where the kernel's body cannot be read again: no thresholds, as a
list (draft.py adds it to a list; a dict there raised TypeError)."""
from dataclasses import replace

from astra_cuda.infer import range_chains
from astra_cuda.model import source

KERNEL = """__global__ void k(float* out, const float* in, int n, int rows_8) {
    int k = 0;
    while (k < rows_8 && k < n) { out[k] = in[k]; ++k; }
    while (k < n) { out[k] = 2.0f * in[k]; ++k; }
}
"""


def test_no_body_gives_an_empty_list() -> None:
    kernel = source.parse(KERNEL).kernels[0]
    unreadable = replace(kernel, text="int not_a_function;")
    found = range_chains.range_thresholds(unreadable, ["n"])
    assert found == [] and isinstance(found, list)
    assert [] + found == []   # what draft.py does with it
