"""pytest-lsp harness: the real server as a subprocess, driven by a client that presents
VS Code's capabilities. Offline: CPU backend, no LLM."""
from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SETTINGS = {"backend": "cpu", "rounds": 2, "checkOnSave": True, "llm": {"baseUrl": "", "model": ""}}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def client(lsp_client: LanguageClient):
    # VS Code answers the server's refresh requests; the test client must too.
    lsp_client.lens_refreshes = 0

    def lens_refresh(*_):
        lsp_client.lens_refreshes += 1
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lens_refresh)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.statuses = []
    lsp_client.feature("astra/status")(lambda params: lsp_client.statuses.append(params))
    lsp_client.set_configuration(SETTINGS, section="astra")   # what the server asks for after `initialized`
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def example(tmp_path):
    """A fresh copy of an example (the core keeps its pinned reference next to the file)."""
    def copy(name: str = "silu_and_mul.cu") -> Path:
        dst = tmp_path / name
        shutil.copy(EXAMPLES / name, dst)
        return dst
    return copy


class Doc:
    """One open document: keeps the version and sends full-text changes like an editor."""

    def __init__(self, client: LanguageClient, path: Path, text: str | None = None):
        self.client, self.path = client, path
        self.uri = path.as_uri()
        self.text = path.read_text() if text is None else text
        self.version = 1
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=self.uri, language_id="cuda-cpp", version=self.version, text=self.text)))

    def change(self, text: str) -> None:
        self.version += 1
        self.text = text
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            [types.TextDocumentContentChangeWholeDocument(text=text)]))

    def save(self, text: str | None = None) -> None:
        if text is not None:
            self.change(text)
        self.path.write_text(self.text)
        self.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=self.uri)))

    def line_of(self, needle: str) -> int:
        return next(i for i, l in enumerate(self.text.splitlines()) if needle in l)

    def diagnostics(self) -> list[types.Diagnostic]:
        return list(self.client.diagnostics.get(self.uri, []))

    async def diagnostics_where(self, pred, timeout: float = 60) -> list[types.Diagnostic]:
        await until(lambda: pred(self.diagnostics()), timeout, lambda: f"diagnostics now: {self.diagnostics()}")
        return self.diagnostics()

    async def command(self, name: str, *args, timeout: float = 240):
        return await asyncio.wait_for(self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=[self.uri, *args])), timeout)

    async def actions(self, line: int) -> list[types.CodeAction]:
        pos = types.Position(line=line, character=0)
        got = await asyncio.wait_for(self.client.text_document_code_action_async(types.CodeActionParams(
            types.TextDocumentIdentifier(uri=self.uri), types.Range(start=pos, end=pos),
            types.CodeActionContext(diagnostics=[]))), 30)
        return list(got or [])

    async def lenses(self) -> list[types.CodeLens]:
        return list(await asyncio.wait_for(self.client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(uri=self.uri))), 30) or [])

    async def hover(self, line: int, character: int) -> types.Hover | None:
        return await asyncio.wait_for(self.client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri=self.uri), types.Position(line=line, character=character))), 30)


async def configure(client: LanguageClient, **changed) -> None:
    """The user changes settings: the editor's answer to workspace/configuration changes, and the
    notification (which carries nothing) makes the server ask again; returns once it has them."""
    def read() -> int:
        return sum(m.message.startswith("settings: ") for m in client.log_messages)
    before = read()
    client.set_configuration(dict(SETTINGS, **changed), section="astra")
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    await until(lambda: read() > before, 30, lambda: "the server did not read the changed settings")


async def until(cond, timeout: float, describe=lambda: "", step: float = 0.05):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s; {describe()}")
        await asyncio.sleep(step)


def apply_edit(text: str, edit: types.WorkspaceEdit) -> str:
    """Apply a single-document WorkspaceEdit the way the editor would."""
    lines = text.splitlines(keepends=True)
    edits = [e for dc in edit.document_changes for e in dc.edits]
    def off(p):
        return sum(len(l) for l in lines[:p.line]) + p.character
    for e in sorted(edits, key=lambda e: off(e.range.start), reverse=True):
        text = text[:off(e.range.start)] + e.new_text + text[off(e.range.end):]
    return text
