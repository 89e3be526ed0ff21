"""The catalogue's `full_disk_editor` entry against the real language server: started in a mount
namespace of its own whose CPU module cache is a full tmpfs (this checkout's runtime bound in
from the real cache), it says why a check could not run and goes on answering."""
from __future__ import annotations

import asyncio
import atexit
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from .test_full_disk import SILU, UNSHARE

pytestmark = pytest.mark.skipif(UNSHARE is None, reason="no mount namespace here (unshare -m) for a real full disk")

SETTINGS = {"backend": "cpu", "rounds": 1, "checkOnOpen": True, "checkOnSave": True, "llm": {"baseUrl": "", "model": ""}}
CACHE = Path(tempfile.mkdtemp(prefix="astra-full-cache-"))  # a mount point inside the server's namespace only
atexit.register(shutil.rmtree, CACHE, True)
PY = shlex.quote(sys.executable)
# In the namespace: this checkout's runtime built in the real cache, then the cache a full tmpfs
# with those entries bound in, then the server.
SCRIPT = f"""set -e
{PY} -c "from astra_cuda.backends.cpu import toolchain as t; t.prepare(''); t.executor_program(); t.cub_header_names()"
real=$({PY} -c "from astra_cuda.backends.cpu import toolchain as t; print(t.cache_dir())")
digest=$({PY} -c "from astra_cuda.backends.cpu import toolchain as t; print(t.runtime_digest())")
mount -t tmpfs -o size=512k tmpfs {CACHE}
mkdir -p {CACHE}/cpu
for p in "$real"/*"$digest"* "$real"/cub-names-*; do
  n={CACHE}/cpu/$(basename "$p")
  if [ -d "$p" ]; then mkdir -p "$n"; else touch "$n"; fi
  mount --bind "$p" "$n"
done
head -c 64M /dev/zero > {CACHE}/cpu/.filler 2>/dev/null || true
export ASTRA_CACHE_DIR={CACHE}
exec {PY} -m astra_cuda.lsp
"""


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*(UNSHARE or ["false"]), "sh", "-c", SCRIPT]))
async def client(lsp_client: LanguageClient):
    lsp_client.feature(types.WORKSPACE_CODE_LENS_REFRESH)(lambda *_: None)
    lsp_client.feature(types.WORKSPACE_INLAY_HINT_REFRESH)(lambda *_: None)
    lsp_client.feature("astra/status")(lambda params: None)
    lsp_client.set_configuration(SETTINGS, section="astra")   # asked for after `initialized`
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
    yield
    if lsp_client._server is not None and lsp_client._server.returncode is None:
        await lsp_client.shutdown_session()


async def test_full_module_cache_in_the_editor(client: LanguageClient, tmp_path):
    (tmp_path / ".git").mkdir()
    path = tmp_path / "k.cu"
    text = SILU.replace("1.0f", f"1.0f + 0.0f * {time.time_ns() % 100000}")   # a module not cached
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="cuda-cpp", version=1, text=text)))
    said: list[str] = []
    end = time.monotonic() + 240
    while time.monotonic() < end:
        said = [d.message for d in client.diagnostics.get(uri, [])]
        if any("no space left on the device" in m for m in said):
            break
        await asyncio.sleep(0.5)
    assert any("cannot write the CPU backend's module cache" in m and "no space left on the device" in m
               for m in said), said
    assert not any("Traceback" in m or "OSError" in m for m in said), said
    # answered at all (30 s: a hang guard) and the server alive
    hover = await asyncio.wait_for(client.text_document_hover_async(types.HoverParams(
        types.TextDocumentIdentifier(uri=uri), types.Position(line=0, character=1))), 30)
    assert client._server.returncode is None, hover  # type: ignore[attr-defined]
