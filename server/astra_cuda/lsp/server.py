"""The Astra language server on stdio: one small handler per LSP method and per command, as
pygls's example servers read. The work lives beside it: `analysis` (diagnostics and checks),
`optimization` (the agent team's run and its edit), `kernel_tools` (profile, pin, spec),
`views` (lenses, hover, inlay hints, code actions: pure functions of the state), `runtime`
(the server object: executors, snapshots, what is sent)."""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import traceback
from typing import Any

from lsprotocol import types
from pygls import uris

from astra_cuda import contract, redact
from astra_cuda.lsp import analysis, answers, kernel_tools, optimization, views
from astra_cuda.lsp import settings as settings_mod
from astra_cuda.lsp.runtime import DEBOUNCE_S, AstraServer, log
from astra_cuda.lsp.state import DocState

# A hover answers within its latency budget (issue 30: 100 ms). A document longer than this is
# not waited for while its snapshot is read (a hover says it is being read): about 1.2 ms of CPU
# per KB, so a shorter one is read within the budget on an idle machine and is awaited, its first
# hover the answer itself. Even a short wait per hover was too long: each hover of a file being
# read took 130-230 ms on 2 loaded cores, the reading thread holding the GIL.
HOVER_AWAITS = 64 << 10


def _version() -> str:
    """The installed package's version, else (the extension's bundled copy has no metadata) the
    package's own `__version__`; a test keeps both equal to pyproject.toml's and package.json's."""
    from importlib.metadata import PackageNotFoundError, version

    import astra_cuda
    try:
        return version("astra-cuda")
    except PackageNotFoundError:
        return astra_cuda.__version__


server = AstraServer(_version())


# ---- lifecycle and settings ---------------------------------------------------------------------

@server.feature(types.INITIALIZE)
def on_initialize(ls: AstraServer, params: types.InitializeParams) -> None:
    ls.settings = settings_mod.initial(params.initialization_options)


@server.feature(types.INITIALIZED)
def on_initialized(ls: AstraServer, params: types.InitializedParams) -> None:
    ls.spawn(_settings_then_sessions(ls))


async def _settings_then_sessions(ls: AstraServer) -> None:
    for p in await read_settings(ls):
        log.warning(p)
    s = ls.settings
    if not s.allow_execution:
        ls.log_info(f"{ls.RESTRICTED}: static diagnostics only, no kernel code is run")
    ls.log_info(f"Astra server {_version()} ready (backend={s.backend}, rounds={s.rounds}, "
                f"llm={'offline' if not s.llm_base_url else s.llm_model or 'default model'}, "
                f"python={sys.executable})")
    if ls.cluster_settings() != {""}:
        await ls.apply_sessions()


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: AstraServer, *_: Any) -> None:
    # Stop background work so nothing is sent once the client stops listening.
    for st in ls.docs.values():
        st.check_cancel.set()
        for ks in st.per_kernel.values():
            if ks.optimization is not None:
                ks.optimization.cancel.set()
    for task in list(ls.tasks):
        task.cancel()
    ls.close_sessions()  # a Ray runtime started for astra.cluster stops with the server


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_configuration(ls: AstraServer, params: types.DidChangeConfigurationParams) -> None:
    pushed = params.settings.get("astra") if isinstance(params.settings, dict) else None
    before = ls.cluster_settings()
    for p in await read_settings(ls, pushed):
        ls.show(f"Astra: {p}", types.MessageType.Warning)
    if ls.cluster_settings() != before:
        ls.spawn(ls.apply_sessions())
    ls.log_info(f"settings: backend={ls.settings.backend}, rounds={ls.settings.rounds}, "
                f"checkOnOpen={ls.settings.check_on_open}, checkOnSave={ls.settings.check_on_save}, "
                f"gpuArch={ls.settings.gpu_arch or 'the GPU’s own'}")


async def read_settings(ls: AstraServer, pushed: Any = None) -> list[str]:
    """The window's whole `astra` section, asked for with workspace/configuration (VS Code
    answers it from package.json's defaults and the user's values; the client copies none), else
    as a client that cannot be asked pushed it; then each workspace folder's. What it says
    wrong, to be shown."""
    raw = pushed
    if ls.can_ask_configuration():
        try:
            got = await asyncio.wait_for(ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="astra")])), 5)
            raw = got[0] if got else pushed
        except Exception:
            ls.log_error("could not read the astra settings", traceback.format_exc())
    problems: list[str] = []
    if isinstance(raw, dict):
        ls.settings, problems = ls.settings.defaults().updated(raw)
    return problems + await folder_settings(ls)


async def folder_settings(ls: AstraServer) -> list[str]:
    """Each workspace folder's own `astra` settings (resource scope: multi-root workspaces), asked
    with the folder as scope; over the window's, so an unset folder value reads as the window's."""
    folders = list(ls.workspace.folders.values())
    if len(folders) < 2 or not ls.can_ask_configuration():
        ls.folder_settings = {}
        ls.settings_read.set()
        return []
    try:
        got = await asyncio.wait_for(ls.workspace_configuration_async(types.ConfigurationParams(
            items=[types.ConfigurationItem(scope_uri=f.uri, section="astra") for f in folders])), 5)
    except Exception:
        ls.log_error("could not read the folders' astra settings", traceback.format_exc())
        return []
    finally:
        ls.settings_read.set()
    out: dict[str, Any] = {}
    problems: list[str] = []
    for f, raw in zip(folders, got or []):
        s, p = ls.settings.updated(raw)
        out[os.path.realpath(uris.to_fs_path(f.uri) or "")] = s
        problems += [f"{f.name}: {x}" for x in p]
    ls.folder_settings = out
    return problems


@server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
async def on_folders(ls: AstraServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    # pygls has added or removed the folders already; their settings are read again.
    for p in await folder_settings(ls):
        ls.show(f"Astra: {p}", types.MessageType.Warning)
    await ls.apply_sessions()   # a folder's own session; a folder gone, its session (and Ray connection)


# ---- documents ----------------------------------------------------------------------------------

@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: AstraServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.docs[params.text_document.uri] = DocState()
    uri = params.text_document.uri
    analysis.schedule(ls, uri, check="open")


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: AstraServer, params: types.DidSaveTextDocumentParams) -> None:
    uri = params.text_document.uri
    analysis.schedule(ls, uri, check="save")


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: AstraServer, params: types.DidChangeTextDocumentParams) -> None:
    # Read the new version soon after typing stops, so lenses and hovers are ready when asked for.
    uri = params.text_document.uri
    gen = ls.change_gen[uri] = ls.change_gen.get(uri, 0) + 1

    async def reread() -> None:
        await asyncio.sleep(DEBOUNCE_S)
        if ls.change_gen.get(uri) == gen and uri in ls.docs:
            await ls.snapshot(uri)

    ls.spawn(reread())


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: AstraServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.lens_cache.pop(uri, None)
    st = ls.docs.pop(uri, None)
    if st is not None:
        st.check_cancel.set()
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


# ---- code actions -------------------------------------------------------------------------------

@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[views.APPLY_KIND, views.OPTIMIZE_KIND, views.SPEC_KIND], resolve_provider=True))
async def code_actions(ls: AstraServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    doc, _ = await ls.snapshot(uri)
    st = ls.state(uri)
    k = views.kernel_at(st.kernels, params.range.start.line)
    if k is None:
        return []
    return views.code_actions(uri, doc.version or 0, doc.source, k, st.per_kernel.get(k.name), params.context.only,
                              params.context.diagnostics)


@server.feature(types.CODE_ACTION_RESOLVE)
async def resolve_code_action(ls: AstraServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    uri, name = data.get("uri"), data.get("kernel")
    if not isinstance(uri, str) or not isinstance(name, str):
        return action
    if data.get("action") == "apply":
        edit, why = optimization.rewrite_edit(ls, uri, name)
    elif data.get("action") == "spec":
        edit, why = await kernel_tools.spec_edit(ls, uri, name)
        if edit is not None:
            action.edit = kernel_tools.annotated(edit, "Astra: add harness spec", "Inferred from the program; "
                                                 "the lines it guessed are marked", confirm=False)
            return action
    else:
        return action
    if edit is None:
        ls.show(f"Astra: not applied — {why}", types.MessageType.Warning)
    action.edit = edit
    return action


# ---- code lens, hover, inlay hints --------------------------------------------------------------

@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
async def code_lens(ls: AstraServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    doc, snap = await ls.snapshot(uri)
    key = (doc.version, ls.view_gen, id(snap))
    cached = ls.lens_cache.get(uri)
    if cached is not None and cached[0] == key:
        return cached[1]
    lenses = views.lenses(uri, doc.source, ls.state(uri).kernels, ls.state(uri), ls.why_not_run())
    ls.lens_cache[uri] = (key, lenses)
    return lenses


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def hover(ls: AstraServer, params: types.HoverParams) -> types.Hover | None:
    uri = params.text_document.uri
    # built once per version, off the loop; a large file's is not waited for (3 s of CPU at the
    # token limit): until it is read the hover says so instead of hanging the editor's tooltip
    text = ls.document(uri).source
    if not await ls.read_within(uri, None if len(text) <= HOVER_AWAITS else 0):
        return views.reading_hover(text)
    st = ls.state(uri)
    # the kernels on the hovered line, from the snapshot's index (built with it): never a look at every kernel
    return views.hover(uri, st.kernels_on(params.position.line), st, params.position)


@server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=['"', "[", "=", ",", " "]))
async def completion(ls: AstraServer, params: types.CompletionParams) -> types.CompletionList | None:
    """Inside a spec comment only: keys, tables, element types, the kernel's names."""
    await ls.snapshot(params.text_document.uri)
    items = views.completion(ls.state(params.text_document.uri).kernels, params.position)
    return types.CompletionList(is_incomplete=False, items=items) if items else None


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
async def inlay_hints(ls: AstraServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    uri = params.text_document.uri
    doc, _ = await ls.snapshot(uri)
    st = ls.state(uri)
    return views.inlay_hints(doc.source, st.kernels, st, params.range)


# ---- commands (arguments arrive unpacked: uri, kernel) ------------------------------------------

@server.command(contract.command("optimize"))
async def cmd_optimize(ls: AstraServer, uri: str, kernel: str, *rest: Any) -> dict[str, Any]:
    # rest[0]: the endpoint the user agreed to send the kernel to (the first-use notice)
    consent = rest[0] if rest and isinstance(rest[0], str) else None
    return await optimization.optimize(ls, uri, kernel, consent)


@server.command(contract.command("cancelOptimize"))
def cmd_cancel(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, str]:
    return optimization.cancel(ls, uri, kernel)


@server.command(contract.command("optimizedEdit"))
def cmd_optimized_edit(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, Any]:
    return optimization.edit_preview(ls, uri, kernel)


@server.command(contract.command("profile"))
async def cmd_profile(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, Any]:
    return await kernel_tools.profile(ls, uri, kernel)


@server.command(contract.command("pin"))
async def cmd_pin(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, Any]:
    return await kernel_tools.pin(ls, uri, kernel)


@server.command(contract.command("addSpec"))
async def cmd_add_spec(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, Any]:
    return await kernel_tools.add_spec(ls, uri, kernel)


@server.command(contract.command("report"))
async def cmd_report(ls: AstraServer, uri: str, kernel: str, *_: Any) -> dict[str, Any]:
    await ls.snapshot(uri)
    st = ls.state(uri)
    k = next((k for k in st.kernels if k.name == kernel), None)
    if k is None:
        return answers.ReportAnswer("error", message=f"no kernel `{kernel}` in this file").to_json()
    ks = st.per_kernel.get(kernel)
    kept = ks.profile.profile.ncu_report_path if ks is not None and ks.profile is not None else ""
    return answers.ReportAnswer("ok", html=views.report_page(uri, k, ks), profiler_report=kept or None).to_json()


@server.command(contract.command("kernels"))
async def cmd_kernels(ls: AstraServer, uri: str, *_: Any) -> list[dict[str, Any]]:
    await ls.snapshot(uri)
    return views.kernel_list(ls.state(uri).kernels)


@server.command(contract.command("check"))
def cmd_check(ls: AstraServer, uri: str, *_: Any) -> dict[str, str]:
    analysis.schedule(ls, uri, check=True)
    return {"status": "scheduled"}


def main() -> None:
    # Info goes to the client's log channel (window/logMessage); stderr, which editors show as
    # errors, gets only warnings and worse.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="astra-lsp %(levelname)s %(message)s")
    redact.install_log_filter()
    from astra_cuda.lsp import parse_apart
    from astra_cuda.model import parse_time
    with parse_time.apart_first(parse_apart.check_data):   # no large parse frees its tree in this process
        server.start_io()   # the loop's tasks copy this context, and `AstraServer.call` hands it to the pools
    # stdout belonged to the protocol and is closed now; later flushes must not fail.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - held for the life of the process


if __name__ == "__main__":
    main()
