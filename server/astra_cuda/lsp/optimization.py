"""The optimization of one kernel in the editor: started in the background with work-done
progress (its cancel button stops the run, the best so far is kept), then offered as a
versioned edit that applies only while the text it replaces is unchanged."""
from __future__ import annotations

import asyncio
import time
import traceback
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from astra_cuda import redact
from astra_cuda.lsp import anchor as anchoring
from astra_cuda.lsp import answers
from astra_cuda.lsp import views
from astra_cuda.progress import ProgressEvent
from astra_cuda.lsp.convert import EditorSpan, lsp_range
from astra_cuda.lsp.runtime import AstraServer, is_user_error, user_message
from astra_cuda.lsp.state import Optimization

if TYPE_CHECKING:
    from astra_cuda.agents.llm import LLMConfig


# What an LLM endpoint is sent, as the first-use notice says it.
SENT = ("the kernel's source (with the device functions it calls), its harness spec's sizes and launch, "
        "Astra's own measurements and check results of each candidate, and the GPU's name; no other code "
        "of your file or project, no path and no key but the API key itself")
OPENAI = "https://api.openai.com/v1"


def llm_config(ls: AstraServer, path: str) -> tuple[LLMConfig | None, str]:
    """None (the offline team) unless a model or endpoint is configured; with where the endpoint
    came from ('settings', a project file, 'default'). The folder's settings win over the
    project's [llm], key by key; the API key is only ever the user's."""
    from astra_cuda import api
    eff = ls.effective(path)

    def v(key: str) -> Any:
        return eff[key].value
    config: LLMConfig | None = api.llm_config(
        model=v("llm.model"), base_url=v("llm.base_url"), api_key=ls.settings.llm_api_key or None,
        reasoning_effort=v("llm.reasoning_effort"), temperature=v("llm.temperature"),
        max_output_tokens=v("llm.max_tokens"), timeout_s=v("llm.timeout"))
    return config, eff["llm.base_url"].source


def consent_needed(config: LLMConfig | None, source: str, consent: str | None) -> dict[str, Any] | None:
    """The first-use notice: before anything is sent to an endpoint the client asks the user once
    (and keeps the answer per endpoint); an endpoint from a project file needs that answer every
    time it is used (the client only sends it in a trusted workspace)."""
    if config is None:
        return None
    endpoint = config.base_url or OPENAI
    if consent == endpoint:
        return None
    return answers.OptimizeAnswer("consent", endpoint=endpoint, model=config.model,
                                  from_project=source not in ("settings", "default"), source=source,
                                  sent=SENT).to_json()


def report_dir(path: str) -> str | None:
    from astra_cuda import workspace
    try:
        return str(workspace.ensure_astra_dir(path, "reports"))
    except Exception:
        return None


async def optimize(ls: AstraServer, uri: str, name: str, consent: str | None = None) -> dict[str, Any]:
    from astra_cuda import api
    doc, snap = await ls.snapshot(uri)
    k = next((k for k in snap.kernels if k.name == name), None) if snap is not None else None
    if snap is None or k is None:
        return ls.fail(f"no kernel `{name}` in this file")
    try:   # the project's configuration files are read off the loop
        llm, source = await ls.call(ls.fast, llm_config, ls, doc.path)
    except Exception as e:
        return ls.fail(f"the LLM settings are incomplete: {user_message(e)}")
    try:
        eff = await ls.call(ls.fast, ls.effective, doc.path)
    except Exception as e:
        return ls.fail(f"the project's configuration cannot be read: {user_message(e)}")
    ks = ls.state(uri).kernel(name)
    if ks.optimization and ks.optimization.status == "running":   # no await from here to its start
        return ls.fail(f"`{name}` is already being optimized")
    ask = consent_needed(llm, source, consent)
    if ask is not None:
        return ask
    opt = Optimization("running", anchoring.anchor_for(k, doc.version or 0, doc.source), doc.source)
    ks.optimization = opt
    backend, rounds = eff["backend"].value, eff["budgets.rounds"].value
    tokens, seconds = eff["budgets.tokens"].value, eff["budgets.seconds"].value
    token = await ls.progress_begin(f"Astra: optimizing {name}", opt.cancel)
    again = api.command_line("optimize", snap, name, backend=backend, rounds=rounds,
                                llm="openai" if llm is not None else "offline")
    t0 = time.monotonic()
    ls.log_info(f"optimize {name}: started ({rounds} round(s), {'model ' + llm.model if llm else 'offline team'})")
    loop = asyncio.get_running_loop()

    def progress(event: ProgressEvent) -> None:  # called from the core's thread
        loop.call_soon_threadsafe(on_progress, ls, uri, opt, token, event, rounds)

    ls.send_status(uri)
    ls.refresh_views()
    try:
        arch = await ls.call(ls.probe, ls.arch, snap.path)
        context = await ls.call(ls.fast, ls.project, doc.path)  # reads project files: off the loop
        result = await ls.call(ls.opt, api.optimize, snap.with_context(context), name,
                               rounds=rounds, llm=llm, backend=backend, arch=arch, tokens=tokens or None,
                               seconds=seconds or None,
                               progress=progress, cancel=opt.cancel, report=report_dir(doc.path),
                               session=ls.session_for(snap.path))
        if opt.cancel.is_set() or result.cancelled:
            opt.status, opt.message = "cancelled", "cancelled"
        elif result.error:
            opt.status, opt.message = "failed", redact.text(result.error)
        else:
            opt.status, opt.result = "done", result
            if opt.improved:
                opt.rewrite = anchoring.rewrite_for(opt.original, result.best, opt.anchor.span, opt.anchor.version)
    except asyncio.CancelledError:
        opt.cancel.set()
        opt.status, opt.message = "cancelled", "cancelled"
        raise
    except Exception as e:
        if opt.cancel.is_set():
            opt.status, opt.message = "cancelled", "cancelled"
        else:
            if not is_user_error(e):
                ls.log_error(f"optimizing {name} failed", traceback.format_exc())
            opt.status, opt.message = "failed", redact.text(user_message(e))
    finally:
        ls.progress_end(token, opt.status)
        result_note = ""
        if opt.result is not None:
            result_note = f": {opt.title() if opt.improved else 'no better verified version'}"
            if opt.result.run_dir:
                result_note += f"; run log {opt.result.run_dir}"
        ls.log_info(f"optimize {name}: {opt.status}{result_note} in {time.monotonic() - t0:.1f} s — reproduce: {again}")
        ls.send_status(uri)
        ls.refresh_views()
    # How the run ended is the answer's to say: the client's one ending (astra.optimizeKernel, which
    # the lens, the light bulb, the palette and the report all run) offers the preview-and-apply;
    # a message of the server's own beside it said the same thing twice, differently.
    return views.optimization_json(name, opt)


def on_progress(ls: AstraServer, uri: str, opt: Optimization, token: str | None, event: ProgressEvent,
                rounds: int) -> None:
    if event.best_speedup is not None:
        opt.best_speedup = float(event.best_speedup)
    opt.message = redact.text(event.message or f"round {event.round} · {event.step}")
    ls.log_info(f"optimize: {opt.message}")
    if token is not None:
        pct = None
        if event.round is not None and rounds:
            pct = max(0, min(100, int(100 * (event.round - 1) / rounds)))
        ls.progress_report(token, opt.message, pct)
    ls.send_status(uri)
    now = time.monotonic()
    if now - ls.last_refresh > 1.0:  # the lens shows the round; at most one refresh a second
        ls.last_refresh = now
        ls.refresh_views()


def cancel(ls: AstraServer, uri: str, name: str) -> dict[str, str]:
    st = ls.docs.get(uri)
    ks = st.per_kernel.get(name) if st is not None else None
    if ks and ks.optimization and ks.optimization.status == "running":
        ks.optimization.cancel.set()
        return answers.OptimizeAnswer("cancelling").to_json()
    return answers.OptimizeAnswer("idle").to_json()


def versioned_edit(uri: str, version: int | None, span: EditorSpan, new_text: str) -> types.WorkspaceEdit:
    """A versioned edit: the client refuses it if the document moved on since."""
    ident = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
    edit = types.TextEdit(range=lsp_range(span), new_text=new_text)
    return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=ident, edits=[edit])])


def annotated(edit: types.WorkspaceEdit, label: str, description: str, *, confirm: bool) -> types.WorkspaceEdit:
    """The edit under one change annotation: with `confirm`, VS Code shows it in its refactor
    preview (a diff with Apply and Discard) before anything changes."""
    changes = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit):
            change = types.TextDocumentEdit(text_document=change.text_document, edits=[
                types.AnnotatedTextEdit(range=e.range, new_text=e.new_text, annotation_id="astra")
                for e in change.edits if isinstance(e, types.TextEdit)])
        changes.append(change)
    return types.WorkspaceEdit(document_changes=changes, change_annotations={"astra": types.ChangeAnnotation(
        label=label, needs_confirmation=confirm, description=description)})


def rewrite_edit(ls: AstraServer, uri: str, name: str) -> tuple[types.WorkspaceEdit | None, str]:
    """The edit that applies the optimized kernel to the document as it is now, or None and
    the reason it cannot be applied safely."""
    opt = ls.state(uri).kernel(name).optimization
    if opt is None or opt.status != "done":
        return None, f"no finished optimization of `{name}`"
    if opt.rewrite is None:
        return None, f"the optimization found no better verified version of `{name}`"
    doc = ls.document(uri)
    if opt.rewrite.applied(doc.source):
        return None, f"the optimized `{name}` is already in place"
    placed = anchoring.place(opt.rewrite, doc.version or 0, doc.source)
    if placed.span is None:
        return None, placed.reason
    if placed.how == "re-anchored":
        ls.log_info(f"applying the optimized `{name}` at its new place (the file changed around it)")
    edit = versioned_edit(uri, doc.version, placed.span, opt.rewrite.new)
    return annotated(edit, f"Astra: optimized {name}", opt.title(), confirm=True), ""


def edit_preview(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    """For the client's diff preview: the edit as it would apply now, or why it cannot
    (client/src/contract.ts: EditAnswer)."""
    edit, why = rewrite_edit(ls, uri, name)
    opt = ls.state(uri).kernel(name).optimization
    if edit is None or opt is None or opt.rewrite is None:
        return answers.EditAnswer("declined", message=why).to_json()
    return answers.EditAnswer("ok", edit=edit, new_text=opt.rewrite.new, title=opt.title(),
                              measured=opt.measured).to_json()
