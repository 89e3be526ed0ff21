"""The cheat catalogue on a real GPU (skipped elsewhere): every cheat rejected, every correct
variant passed, each in its own worker job (a fault loses only that worker's context)."""
import functools

import pytest

from astra import worker

from . import catalogue
from .run_catalogue import run

pytestmark = pytest.mark.gpu


@functools.lru_cache(maxsize=1)
def _gpu() -> tuple[bool, str]:
    try:
        info = worker.run("astra.jobs:backends_job", None, timeout=120)["gpu"]
        return bool(info["available"]), info.get("reason", "")
    except Exception as e:  # noqa: BLE001
        return False, str(e)


@pytest.fixture(scope="module", autouse=True)
def need_gpu():
    ok, why = _gpu()
    if not ok:
        pytest.skip(f"no GPU: {why}")


@pytest.mark.parametrize("entry", catalogue.ALL, ids=lambda e: e.name)
def test_catalogue_on_gpu(entry):
    row = run("gpu", [entry.name], None, 600)[0]
    assert row["ok"], row
