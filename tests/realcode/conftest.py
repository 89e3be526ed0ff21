import shutil
from pathlib import Path

import pytest

from astra_cuda import api
from astra_cuda.model import source, spec


@pytest.fixture
def project(tmp_path: Path):
    """Write files into a fresh project folder (with .git, so .astra/ pins stay inside it)."""
    (tmp_path / ".git").mkdir()

    def write(rel: str, text: str) -> Path:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        return p
    write.root = tmp_path
    return write


needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def inferred(project, name: str, text: str, kernel: str):
    """The spec inference proposes for `kernel` of `text` written as `name` (static: run=False),
    and that spec as the kernel loads it once pasted above it: (proposal, Spec)."""
    path = project(name, text)
    p = api.infer_spec(api.snapshot(text, str(path)), kernel, run=False)
    assert p.valid, p.problems
    k = source.parse(text).kernel(kernel)
    m = source.parse(text[:k.span.start_byte] + p.comment + text[k.span.start_byte:])
    return p, spec.load(m.kernel(kernel), m)
