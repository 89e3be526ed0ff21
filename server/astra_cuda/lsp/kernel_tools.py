"""The other requests on one kernel: profile it, pin its current version as the reference,
propose a harness spec for it (as a versioned edit)."""
from __future__ import annotations

import traceback
from typing import Any

from lsprotocol import types

from astra_cuda.lsp import anchor as anchoring
from astra_cuda.lsp.convert import EditorSpan, span_of
from astra_cuda.lsp.optimization import versioned_edit
from astra_cuda.lsp.runtime import AstraServer, core, is_user_error, user_message
from astra_cuda.lsp.state import Profiled


async def profile(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    doc, snap = await ls.snapshot(uri)
    k = anchoring.find(snap.kernels, name) if snap is not None else None
    if snap is None or k is None:
        return ls.fail(f"no kernel `{name}` in this file")
    ks = ls.state(uri).kernel(name)
    ks.profiling = True
    ls.refresh_views()
    try:
        arch = await ls.call(ls.fast, ls.arch)
        profiles = await ls.call(ls.slow, core().profile, snap.with_context(ls.project(doc.path)), name,
                                 backend=ls.settings.backend, arch=arch,
                                 ncu=ls.settings.profile_ncu)
        p = profiles[0]  # one profile per selected kernel; we selected one
    except Exception as e:
        if not is_user_error(e):
            ls.log_error(f"profiling {name} failed", traceback.format_exc())
        return ls.fail(f"profiling `{name}` failed: {user_message(e)}")
    finally:
        ks.profiling = False
        ls.refresh_views()
    ks.profile = Profiled(p, anchoring.anchor_for(k, doc.version or 0, doc.source))
    ls.refresh_views()
    return {"status": "done", "kernel": name, "summary": p.summary_line(), "hotLines": len(p.hot_lines)}


async def pin(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    _, snap = await ls.snapshot(uri)
    try:
        if snap is None:
            raise RuntimeError(ls.state(uri).snapshot_error)
        pinned = await ls.call(ls.fast, core().pin, snap, name)
    except Exception as e:
        return ls.fail(f"pinning `{name}` failed: {user_message(e)}")
    msg = f"pinned the current `{name}` as the reference ({pinned.digest[:12]})"
    ls.show(f"Astra: {msg}")
    return {"status": "done", "message": msg}


async def spec_edit(ls: AstraServer, uri: str, name: str) -> tuple[types.WorkspaceEdit | None, str]:
    """The proposed spec comment, inserted above the kernel of this version of the document."""
    doc, snap = await ls.snapshot(uri)
    k = anchoring.find(snap.kernels, name) if snap is not None else None
    if snap is None or k is None:
        return None, f"no kernel `{name}` in this file"
    try:
        # the kernel is run under the draft before it is proposed: the pool that runs checks
        proposal = await ls.call(ls.slow, core().infer_spec, snap.with_context(ls.project(doc.path)), name,
                                 backend=ls.settings.backend)
    except Exception as e:
        return None, f"could not infer a spec for `{name}`: {user_message(e)}"
    if (ls.document(uri).version or 0) != (doc.version or 0):
        return None, "the file changed while the spec was inferred; try again"
    if not proposal.valid:   # never inserted: what Astra's own validator refuses
        return None, f"no spec proposed for `{name}`: Astra's validator refuses the draft ({proposal.problems[0]})"
    start = span_of(k.kernel.span)
    at = EditorSpan(start.start_line, start.start_col, start.start_line, start.start_col)
    text = proposal.comment if proposal.comment.endswith("\n") else proposal.comment + "\n"
    return versioned_edit(uri, doc.version, at, text), ""


async def add_spec(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    edit, why = await spec_edit(ls, uri, name)
    if edit is None:
        return ls.fail(why)
    r = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="Astra: add harness spec"))
    return {"status": "done" if r.applied else "declined"}
