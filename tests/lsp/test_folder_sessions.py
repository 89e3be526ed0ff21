"""Issue 28: one session per workspace folder — each folder's kernels run with its own session
(its own trust and astra.cluster, its own backend probe), a Ray connection is opened once per
address and shared by the folders naming it, and one no folder names any more is closed."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from astra_cuda.execution.jobs import BackendStatus
from astra_cuda.lsp import settings as settings_mod
from astra_cuda.lsp.runtime import AstraServer
from astra_cuda.session import Session


class FakeRay:
    """Stands for a Ray connection: what the server asks of it, and whether it was closed."""

    def __init__(self, address: str) -> None:
        self.address, self.closed = address, False

    def describe(self) -> dict[str, Any]:
        return {"kind": "ray", "address": self.address, "nodes": 1, "gpus": 1}

    def statuses(self) -> dict[str, BackendStatus]:
        return {"gpu": BackendStatus(True, "fake", arch="sm_90"), "cpu": BackendStatus(True)}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    opened: list[FakeRay] = []

    def open_(cluster: str | None = None, *, execution_off: str | None = None) -> Session:
        opened.append(FakeRay(str(cluster)))
        return Session(opened[-1], execution_off)   # type: ignore[arg-type]
    monkeypatch.setattr(Session, "open", staticmethod(open_))
    ls = AstraServer("test")
    monkeypatch.setattr(ls, "log_info", lambda *_: None)
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    return ls, opened, (a, b, c)


def folders(ls: AstraServer, **clusters: tuple[Path, str]) -> None:
    base = settings_mod.Settings()
    ls.folder_settings = {str(d.resolve()): base.updated({"cluster": cl})[0] for d, cl in clusters.values()}


def test_each_folder_has_its_own_session_and_the_window_one_for_files_in_none(server, tmp_path):
    ls, opened, (a, b, _) = server
    folders(ls, a=(a, ""), b=(b, ""))
    sa, sb = ls.session_for(str(a / "k.cu")), ls.session_for(str(b / "k.cu"))
    assert sa is not sb and sa.backends is not sb.backends          # each probes for itself
    assert ls.session_for(str(a / "sub" / "x.cu")) is sa            # the same session, call after call
    assert ls.session_for(str(tmp_path / "elsewhere.cu")) is ls.session_for(None) not in (sa, sb)
    assert not opened


def test_folders_naming_one_cluster_share_one_connection_and_a_dropped_one_is_closed(server):
    ls, opened, (a, b, c) = server
    folders(ls, a=(a, "ray://gpu-box:10001"), b=(b, "ray://gpu-box:10001"), c=(c, ""))
    before = ls.session_for(str(c / "k.cu"))
    asyncio.run(ls.apply_sessions())
    assert [r.address for r in opened] == ["ray://gpu-box:10001"]   # opened once
    sa, sb, sc = (ls.session_for(str(d / "k.cu")) for d in (a, b, c))
    assert sa.executor is sb.executor is opened[0] and sa is not sb
    assert sc is before   # its kernels still run on this machine: what it learned is kept
    assert ls.cluster_label(str(a / "k.cu")) == "Ray ray://gpu-box:10001" and ls.cluster_label(str(c / "k.cu")) == ""
    folders(ls, a=(a, ""), b=(b, ""), c=(c, ""))
    asyncio.run(ls.apply_sessions())
    assert opened[0].closed and ls.clusters == {}
    assert not isinstance(ls.session_for(str(a / "k.cu")).executor, FakeRay)


def test_trust_applies_to_every_folders_session_at_once(server):
    ls, _, (a, b, _) = server
    folders(ls, a=(a, ""), b=(b, ""))
    trusted = ls.session_for(str(a / "k.cu"))
    ls.settings = settings_mod.Settings(allow_execution=False)
    ls.folder_settings = {k: settings_mod.Settings(allow_execution=False) for k in ls.folder_settings}
    assert not any(ls.session_for(str(d / "k.cu")).runs_kernels for d in (a, b))
    assert ls.session_for(str(a / "k.cu")).backends is trusted.backends   # the machine did not change
