"""What a session learns (which backends its executor offers) stays in that session: two sessions
of one process — two workspace folders, two commands, two tests — never answer from each other's
probe, so no test's result depends on which test ran before it (issue 28)."""
from __future__ import annotations

from typing import Any

import pytest

from astra_cuda.errors import AstraError
from astra_cuda.execution.jobs import BackendStatus
from astra_cuda.session import Session


class Probed:
    """An executor whose probe answers `gpu` and counts how often it was asked."""

    def __init__(self, gpu: bool) -> None:
        self.gpu, self.asked = gpu, 0

    def statuses(self) -> dict[str, BackendStatus]:
        self.asked += 1
        return {"gpu": BackendStatus(self.gpu, "fake", arch="sm_90a" if self.gpu else ""),
                "cpu": BackendStatus(True)}

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": "fake"}


def test_a_session_probes_once_and_keeps_what_it_learned():
    ex = Probed(gpu=True)
    s = Session(ex)
    assert [s.resolve_backend("auto"), s.device_arch("sm_80"), s.resolve_backend("gpu")] == ["gpu", "sm_90a", "gpu"]
    assert ex.asked == 1
    off = s.restricted("not trusted")
    assert off.resolve_backend("auto") == "static" and off.restricted(None).resolve_backend("auto") == "gpu"
    assert ex.asked == 1   # trust changed, the machine did not: the probe is kept


def test_two_sessions_never_answer_from_each_others_probe():
    with_gpu, without = Session(Probed(gpu=True)), Session(Probed(gpu=False))
    assert with_gpu.resolve_backend("auto") == "gpu"
    assert without.resolve_backend("auto") == "cpu"
    with pytest.raises(AstraError, match="gpu backend is not available"):
        without.resolve_backend("gpu")
    assert with_gpu.resolve_backend("auto") == "gpu"
    assert Session().backends is not Session().backends   # a fresh session knows nothing yet


def test_an_unknown_backend_is_refused_before_any_probe():
    ex = Probed(gpu=True)
    with pytest.raises(AstraError, match="unknown backend"):
        Session(ex).resolve_backend("tpu")
    assert ex.asked == 0
