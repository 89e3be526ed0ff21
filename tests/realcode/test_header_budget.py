"""Inference reads types and macros from the project's headers, each parsed in full: CUTLASS's
cute headers that flash-attention's launch template includes (over 4 MB, one generated table of
MMA atoms 1 MB alone) kept `astra spec` past the suite's 167 s. The headers it reads are held to a
budget of bytes; a header past it is left out with a note, and smaller ones after it are still
read. Written here."""
from __future__ import annotations

from astra_cuda.compile import extract
from astra_cuda.compile.project import ProjectContext
from astra_cuda.model import source


def _project(tmp_path):
    (tmp_path / "big.h").write_text("#define BIG_ONE 1\n" + "// filler\n" * 3000)   # ~30 KB
    (tmp_path / "small.h").write_text("#define SMALL_ONE 2\ntypedef float small_t;\n")
    main = tmp_path / "k.cu"
    text = '#include "big.h"\n#include "small.h"\n__global__ void k(small_t* x) { x[0] = SMALL_ONE; }\n'
    main.write_text(text)
    return str(main), text


def test_a_header_past_the_budget_is_left_out_and_later_ones_read(tmp_path):
    path, text = _project(tmp_path)
    r = extract.header_reader(path, ProjectContext(), max_bytes=8 << 10)
    items = r.items(source.parse(text, path=path), path)
    defined = {n for it in items for n in it.defines}
    assert "SMALL_ONE" in defined and "small_t" in defined and "BIG_ONE" not in defined
    assert [h.rsplit("/", 1)[-1] for h in r.headers] == ["small.h"]
    assert any('"big.h" not read' in n and "MiB of project headers read" in n for n in r.notes), r.notes


def test_without_a_budget_every_header_is_read(tmp_path):
    path, text = _project(tmp_path)
    r = extract.header_reader(path, ProjectContext())
    items = r.items(source.parse(text, path=path), path)
    assert {"BIG_ONE", "SMALL_ONE"} <= {n for it in items for n in it.defines}

