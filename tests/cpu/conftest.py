import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="session")
def cpu():
    from astra_cuda.backends.cpu import CpuBackend

    be = CpuBackend()
    yield be
    be.close()
