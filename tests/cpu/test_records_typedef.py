"""Pointers to records the way DeepSpeed's ragged `logits_gather_kernel` takes them (issue 25):
descriptors declared as anonymous structs named by a typedef (`struct { ... } typedef Name;`),
fixed-width fields, each given as its own kernel parameter (never through a struct by value),
and the gathered row copied 16 bytes at a time. The layout comes from the compiler's probe of
the pointee; a kernel that reads the wrong field or record is caught."""
from pathlib import Path

import pytest

# the file, shared with the GPU's test of the same pattern (tests/gpu/test_packed_args_gpu.py)
GATHER = (Path(__file__).parent / "records_gather.cu").read_text()


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
