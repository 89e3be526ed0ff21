"""Objects of a class the host builds, on a real GPU (issue 25, item 6): `{ construct = ... }` for
a struct's field and for a parameter (tests/cpu/constructed_fastdiv.cu: FlashInfer's
`paged_kv.page_size`, a `uint_fastdiv`), the constructor program built by nvcc with the unit and
run confined, its bytes passed by value. A rewrite that divides plainly (`i / p.page.d`) agrees
with the divisor object's multiply-and-shift only where those bytes are the constructor's."""
from __future__ import annotations

from pathlib import Path

import pytest

from astra_cuda.compile import extract
from astra_cuda.execution import jobs, worker
from astra_cuda.model import source, spec as spec_mod

pytestmark = pytest.mark.gpu

FILE = Path(__file__).parents[1] / "cpu" / "constructed_fastdiv.cu"


@pytest.fixture(scope="module")
def pool():
    p = worker.Pool(1, name="gpu-constructed-test")
    yield p
    p.close()


def _unit(tmp_path: Path, kernel: str, old: str = "", new: str = ""):
    text = FILE.read_text().replace(old, new) if old else FILE.read_text()
    path = tmp_path / "constructed.cu"
    path.write_text(text)
    m = source.parse(text)
    spec = spec_mod.load(m.kernel(kernel), m)
    return extract.spec_unit(m, str(path), kernel, spec), spec


@pytest.mark.parametrize("kernel,old,new", [
    ("paged", "uint32_t q = p.page.div(i);", "uint32_t q = i / p.page.d;"),
    ("row_of", "out[i] = (int)by.div((uint32_t)i);", "out[i] = i / (int)by.d;"),
])
def test_the_constructed_divisor_divides_as_plain_division(pool, tmp_path, kernel, old, new):
    ref, spec = _unit(tmp_path, kernel)
    v = pool.run(jobs.CheckJob("gpu", ref, ref, spec, quick=True), timeout=600)
    assert v.passed, v.human()
    cand, _ = _unit(tmp_path, kernel, old, new)
    v = pool.run(jobs.CheckJob("gpu", ref, cand, spec, quick=True), timeout=600)
    assert v.passed and v.compared, v.human()
    bad, _ = _unit(tmp_path, kernel, old, new.replace(".d;", ".d + 1;"))
    v = pool.run(jobs.CheckJob("gpu", ref, bad, spec, quick=True), timeout=600)
    assert v.status == "failed", v.human()
