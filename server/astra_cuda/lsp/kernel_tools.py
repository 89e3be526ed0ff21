"""The other requests on one kernel: profile it, pin its current version as the reference,
propose a harness spec for it (as a versioned edit)."""
from __future__ import annotations

import time
import traceback
from typing import Any

from lsprotocol import types

from astra_cuda.lsp import anchor as anchoring
from astra_cuda.lsp import answers
from astra_cuda.lsp.convert import EditorSpan, span_of
from astra_cuda.model import spec_help
from astra_cuda.lsp.optimization import annotated, versioned_edit
from astra_cuda.lsp.runtime import AstraServer, is_user_error, user_message
from astra_cuda.lsp.state import Guessed, Profiled

__all__ = ["annotated", "profile", "pin", "spec_edit", "add_spec"]


async def profile(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    from astra_cuda import api
    doc, snap = await ls.snapshot(uri)
    k = anchoring.find(snap.kernels, name) if snap is not None else None
    if snap is None or k is None:
        return ls.fail(f"no kernel `{name}` in this file")
    try:
        backend = await ls.call(ls.fast, ls.backend_for, snap.path)   # reads project files: off the loop
    except Exception as e:
        return ls.fail(f"profiling `{name}` failed: {user_message(e)}")
    ks = ls.state(uri).kernel(name)
    ks.profiling = True
    ls.refresh_views()
    t0 = time.monotonic()
    again = api.command_line("profile", snap, name, backend=backend) + (" --ncu" if ls.settings.profile_ncu else "")
    try:
        arch = await ls.call(ls.probe, ls.arch, snap.path)
        context = await ls.call(ls.fast, ls.project, doc.path)  # reads project files: off the loop
        profiles = await ls.call(ls.slow, api.profile, snap.with_context(context), name, backend=backend, arch=arch,
                                 ncu=ls.settings.profile_ncu, session=ls.session_for(snap.path))
        p = profiles[0]  # one profile per selected kernel; we selected one
    except Exception as e:
        if not is_user_error(e):
            ls.log_error(f"profiling {name} failed", traceback.format_exc())
        ls.log_info(f"profile {name}: failed: {user_message(e)} — reproduce: {again}")
        return ls.fail(f"profiling `{name}` failed: {user_message(e)}")
    finally:
        ks.profiling = False
        ls.refresh_views()
    ks.profile = Profiled(p, anchoring.anchor_for(k, doc.version or 0, doc.source))
    ls.log_info(f"profile {name}: {p.summary_line()} in {time.monotonic() - t0:.1f} s"
                + (f"; Nsight Compute report kept at {p.ncu_report_path}" if p.ncu_report_path else "")
                + (f"; errors: {'; '.join(p.errors[:3])}" if p.errors else "") + f" — reproduce: {again}")
    ls.send_status(uri)   # a kept Nsight Compute report can be opened now
    ls.refresh_views()
    return answers.ProfileAnswer("done", kernel=name, summary=p.summary_line(), hot_lines=len(p.hot_lines)).to_json()


async def pin(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    from astra_cuda import api
    _, snap = await ls.snapshot(uri)
    try:
        if snap is None:
            raise ls.state(uri).snapshot_error or RuntimeError("the file could not be read")
        pinned = await ls.call(ls.fast, api.pin, snap, name)
    except Exception as e:
        return ls.fail(f"pinning `{name}` failed: {user_message(e)}")
    msg = f"pinned the current `{name}` as the reference ({pinned.digest[:12]})"
    ls.show(f"Astra: {msg}")
    return {"status": "done", "message": msg}


async def spec_edit(ls: AstraServer, uri: str, name: str) -> tuple[types.WorkspaceEdit | None, str]:
    """The proposed spec comment, inserted above the kernel of this version of the document."""
    from astra_cuda import api
    doc, snap = await ls.snapshot(uri)
    k = anchoring.find(snap.kernels, name) if snap is not None else None
    if snap is None or k is None:
        return None, f"no kernel `{name}` in this file"
    t0 = time.monotonic()
    try:
        context = await ls.call(ls.fast, ls.project, doc.path)  # reads project files: off the loop
        backend = await ls.call(ls.fast, ls.backend_for, snap.path)
        # the kernel is run under the draft before it is proposed: the pool that runs checks
        proposal = await ls.call(ls.slow, api.infer_spec, snap.with_context(context), name,
                                 backend=backend, session=ls.session_for(snap.path))
    except Exception as e:
        return None, f"could not infer a spec for `{name}`: {user_message(e)}"
    if (ls.document(uri).version or 0) != (doc.version or 0):
        return None, "the file changed while the spec was inferred; try again"
    if not proposal.valid:   # never inserted: what inference cannot know, or what Astra's own validator refuses
        return None, f"no spec proposed for `{name}`: {proposal.problems[0]}"
    start = span_of(k.kernel.span)
    at = EditorSpan(start.start_line, start.start_col, start.start_line, start.start_col)
    text = proposal.comment if proposal.comment.endswith("\n") else proposal.comment + "\n"
    # What inference guessed, on its line (with the evidence), once the comment is in the text.
    lines = proposal.comment.split("\n")
    st = ls.state(uri)
    st.guesses = [g for g in st.guesses if g.kernel != name] + [
        Guessed(name, lines[g.line], g.note) for g in spec_help.guessed_lines(proposal.comment, proposal.notes)]
    ls.log_info(f"spec for {name} inferred in {time.monotonic() - t0:.1f} s, {len(st.guesses)} line note(s) on "
                f"what was guessed — reproduce: {api.command_line('spec', snap, name)}")
    return versioned_edit(uri, doc.version, at, text), ""


async def add_spec(ls: AstraServer, uri: str, name: str) -> dict[str, Any]:
    edit, why = await spec_edit(ls, uri, name)
    if edit is None:
        return ls.fail(why)
    r = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="Astra: add harness spec"))
    await ls.snapshot(uri)   # the guessed lines are marked as soon as the text has them
    return {"status": "done" if r.applied else "declined"}
