"""Pointers to records the way DeepSpeed's ragged `logits_gather_kernel` takes them (issue 25):
descriptors declared as anonymous structs named by a typedef (`struct { ... } typedef Name;`),
fixed-width fields, each given as its own kernel parameter (never through a struct by value),
and the gathered row copied 16 bytes at a time. The layout comes from the compiler's probe of
the pointee; a kernel that reads the wrong field or record is caught."""
import pytest

GATHER = """#include <stdint.h>
struct { int32_t n_tokens; int32_t n_sequences; } typedef Batch;
struct { int32_t start_idx; int32_t n_tokens; int32_t seen_tokens; int32_t unused; } typedef Seq;
/* @astra
grid = ["cdiv(d, 256)", "seqs"]
block = [64]
require = ["d % 4 == 0"]
[sizes]
seqs = [1, 7, 130]
d = [4, 256, 1000]
V = [64, 1000]
[args]
out = { type = "float", shape = ["seqs", "d"], output = true }
acts = { type = "float", shape = ["V", "d"] }
batch = { records = 1, n_sequences = "seqs" }
seqs_ = { records = "seqs", start_idx = { init = "randint(1, V / 2 + 1)" }, n_tokens = { init = "randint(1, V / 2 + 1)" } }
d = "d"
*/
__global__ void k(float* out, const float* acts, const Batch* batch, const Seq* seqs_, const int32_t d) {
    const int32_t s = blockIdx.y;
    if (s >= batch->n_sequences) return;
    const Seq q = seqs_[s];
    const int row = q.start_idx + q.n_tokens - 1;
    const int i = 4 * (threadIdx.x + blockIdx.x * 64);
    if (i < d) *(uint4*)(out + s * d + i) = *(const uint4*)(acts + row * d + i);
}
"""


@pytest.mark.parametrize("old,new,verdict", [
    ("", "", "passed"),
    ("const Seq q = seqs_[s];", "const Seq q = seqs_[0];", "compare"),              # every sequence reads the first
    ("q.start_idx + q.n_tokens - 1", "q.start_idx + q.seen_tokens", "compare")])   # a field misread
def test_typedef_named_records_given_as_parameters_pass_the_gate(cpu, tmp_path, old, new, verdict):
    from astra_cuda import gate
    from astra_cuda.compile import extract
    from astra_cuda.model import source, spec as spec_mod
    path = str(tmp_path / "gather.cu")

    def unit_of(text):
        model = source.parse(text)
        s = spec_mod.load(model.kernel("k"), model)
        return extract.spec_unit(model, path, "k", s), s

    ref, s = unit_of(GATHER)
    cand, _ = unit_of(GATHER.replace(old, new) if old else GATHER)
    v = gate.check(ref, cand, s, cpu, quick=True)
    if verdict == "passed":
        assert v.passed and v.compared, v.human()
    else:
        assert v.status == "failed" and v.failures[0].check == verdict, v.human()


def test_with_no_reference_its_runs_agree(cpu, tmp_path):
    """No pinned baseline yet (the suite's check stage): the kernel's own runs, each with other
    poison bytes, must agree and write every output — where the suite's GPU run disagreed."""
    from astra_cuda import gate
    from astra_cuda.compile import extract
    from astra_cuda.model import source, spec as spec_mod
    model = source.parse(GATHER)
    s = spec_mod.load(model.kernel("k"), model)
    v = gate.check(None, extract.spec_unit(model, str(tmp_path / "gather.cu"), "k", s), s, cpu, quick=True)
    assert v.passed, v.human()
