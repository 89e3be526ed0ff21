import shutil
from pathlib import Path

import pytest


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
