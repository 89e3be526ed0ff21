"""On a GPU with Nsight Compute: a profile's hot lines become inlay hints in the kernel."""
from __future__ import annotations

import shutil

import pytest
from lsprotocol import types

from conftest import Doc, configure

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("ncu") is None, reason="needs ncu")]


def _gpu() -> bool:
    from astra_cuda.session import Session
    try:
        return Session().statuses()["gpu"].available
    except Exception:  # noqa: BLE001 - any failure means no GPU here
        return False


async def test_hot_lines_become_inlay_hints_after_an_ncu_profile(client, example):
    if not _gpu():
        pytest.skip("no GPU")
    await configure(client, backend="gpu", profile={"ncu": True})
    doc = Doc(client, example())
    result = await doc.command("astra_cuda.lsp.profile", "silu_and_mul", timeout=600)
    assert result["status"] == "done", result
    if not result["hotLines"]:
        pytest.skip("ncu gave no source counters on this machine (profiling permissions?)")
    end = len(doc.text.splitlines())
    hints = await client.text_document_inlay_hint_async(types.InlayHintParams(
        text_document=types.TextDocumentIdentifier(uri=doc.uri),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=end, character=0))))
    # Hot lines are the kernel's or those of the device functions it calls: never host code.
    last = doc.line_of("int main()")
    assert hints and all(h.position.line < last for h in hints)
    assert any(h.position.line > doc.line_of("__global__ void silu_and_mul") for h in hints)
    assert all("%" in h.label for h in hints)
