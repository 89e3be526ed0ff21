"""Diagnostics on open and save: the static ones (parse, spec, compiler), then the check of each
kernel with a spec. A newer save cancels an older check; a debounce merges quick saves.
Turning verdicts into diagnostics is a pure function."""
from __future__ import annotations

import asyncio
import threading
import time
import traceback
from typing import TYPE_CHECKING

from lsprotocol import types

from astra_cuda.lsp.convert import diagnostic, line_range, lsp_diagnostic, lsp_range, span_of
from astra_cuda.lsp.runtime import DEBOUNCE_S, AstraServer, is_user_error, user_message

if TYPE_CHECKING:
    from astra_cuda.gate.verdict import Verdict
    from astra_cuda.lsp.state import DocState
    from astra_cuda.snapshot import KernelInfo, Snapshot

MAX_FAILURES_SHOWN = 5  # per kernel: enough to act on without burying the file in squiggles



def _on(v: Verdict) -> str:
    """', ran on NODE, GPU …; compiled by nvcc 13.0, …': where the check ran (a cluster's node,
    or this machine) and the compiler that judged."""
    return (f", ran {v.ran_on}" if v.ran_on else "") + (f"; compiled by {v.compiler}" if v.compiler else "")

def verdict_diagnostics(verdicts: list[Verdict], lines: list[str], where: types.Range) -> list[types.Diagnostic]:
    """The failures of the verdicts at their lines (else at the kernel's name, `where`)."""
    diags = []
    for v in verdicts:
        if v.passed:
            continue
        failures = list(v.failures) if v.status == "failed" else []
        shown, rest = failures[:MAX_FAILURES_SHOWN], len(failures) - MAX_FAILURES_SHOWN
        for f in shown:
            line = f.line  # 1-based in the gate's failures
            rng = line_range(line - 1, lines) if line is not None and 1 <= line <= len(lines) else where
            diags.append(diagnostic(rng, f"{v.kernel}: check failed ({v.backend} backend{_on(v)}): {f.text()}",
                                    "check", types.DiagnosticSeverity.Error))
        if rest > 0:
            diags.append(diagnostic(where, f"{v.kernel}: … and {rest} more failure(s); see the hover report",
                                    "check", types.DiagnosticSeverity.Error))
        if not failures:
            severity = types.DiagnosticSeverity.Warning if v.status == "unsupported" else types.DiagnosticSeverity.Error
            diags.append(diagnostic(where, f"{v.summary} ({v.backend} backend{_on(v)})", "check", severity))
    return diags


def error_diagnostic(e: BaseException, lines: list[str], prefix: str,
                     where: types.Range | None = None) -> types.Diagnostic:
    """A step that could not run, at the line the error names (else `where`, else the top)."""
    from astra_cuda.errors import AstraError

    line = e.line if isinstance(e, AstraError) else None
    rng = line_range(line, lines) if line is not None else (where or line_range(0, lines))
    return diagnostic(rng, f"{prefix}: {user_message(e)}", "astra", types.DiagnosticSeverity.Error)


def schedule(ls: AstraServer, uri: str, *, check: bool | str) -> None:
    """Analyse `uri` soon; `check`: run its kernels' checks, or 'open' / 'save' to follow the
    checkOnOpen / checkOnSave setting of the file's workspace folder."""
    st = ls.state(uri)
    st.check_cancel.set()  # a newer save cancels an older check
    st.check_cancel = threading.Event()
    st.check_generation += 1
    ls.spawn(analyze(ls, uri, st.check_generation, st.check_cancel, check))


async def analyze(ls: AstraServer, uri: str, gen: int, cancel: threading.Event, check: bool | str) -> None:
    from astra_cuda import api
    await asyncio.sleep(DEBOUNCE_S)
    await ls.settings_known()
    st = ls.docs.get(uri)
    if st is None or st.check_generation != gen:
        return

    def stale() -> bool:
        return ls.docs.get(uri) is not st or st.check_generation != gen

    doc, snap = await ls.snapshot(uri)
    version, path = doc.version, doc.path
    if isinstance(check, str):
        check = bool(getattr(ls.settings_for(path), f"check_on_{check}"))
    lines = doc.source.splitlines()
    try:
        if snap is None:
            raise st.snapshot_error or RuntimeError("the file could not be read")
        snap = snap.with_context(await ls.call(ls.fast, ls.project, path))  # reads project files: off the loop
        arch = await ls.call(ls.probe, ls.arch, snap.path)
        t0 = time.monotonic()
        found = await ls.call(ls.static, api.diagnostics, snap, arch=arch)
        static = [lsp_diagnostic(d, lines) for d in found]
        errors = sum(1 for d in found if d.severity == "error")
        ls.log_info(f"static check of {path}: {errors} error(s), {len(found) - errors} other diagnostic(s) "
                    f"in {time.monotonic() - t0:.1f} s — reproduce: "
                    f"{api.command_line('check', snap, backend='static', arch=arch)}")
    except Exception as e:
        if not is_user_error(e):  # the user's input problem is the diagnostic, not a traceback
            ls.log_error(f"static diagnostics of {path} failed", traceback.format_exc())
        static = [error_diagnostic(e, lines, "Astra could not analyse this file")]
    if stale():
        return
    st.static_diags, st.static_done = static, True
    kernels = st.kernels
    names = {k.name for k in kernels}
    st.check_diags = {n: d for n, d in st.check_diags.items() if n in names}
    ls.publish(uri, version)
    ls.refresh_views()   # the lens's words change with the compile ("not checked yet" -> "compiled only")
    has_errors = any(d.severity == types.DiagnosticSeverity.Error for d in static)
    todo = [k for k in kernels if k.spec is not None]  # loaded without errors
    try:
        await ls.call(ls.probe, ls.machine_status, path)
    except Exception:
        ls.log_error("could not tell which backends run here", traceback.format_exc())
    # A project whose astra.toml says `backend = "static"` runs no kernel code, in the editor too.
    if snap is None or not check or not ls.settings.allow_execution or has_errors or not todo or \
            await ls.call(ls.fast, ls.backend_for, path) == "static":
        ls.send_status(uri)
        return
    st.checking = True
    ls.send_status(uri)
    try:
        for k in todo:
            if cancel.is_set() or stale():
                return
            diags = await check_one(ls, st, snap, k, cancel, lines)
            if diags is None or cancel.is_set() or stale():
                ls.log_info(f"the check of {k.name} was cancelled: a newer save supersedes it")
                return  # a newer save owns the diagnostics now
            st.check_diags[k.name] = diags
            ls.publish(uri, version)
    finally:
        if not stale():
            st.checking = False
            ls.send_status(uri)
            ls.refresh_views()


async def check_one(ls: AstraServer, st: DocState, snap: Snapshot, k: KernelInfo, cancel: threading.Event,
                    lines: list[str]) -> list[types.Diagnostic] | None:
    """Diagnostics of one kernel's check; None when a newer save cancelled it (then the newer
    check owns the state, and this one changes nothing)."""
    from astra_cuda import api
    ks = st.kernel(k.name)
    where = lsp_range(span_of(k.kernel.name_span))
    backend = "auto"
    try:
        backend = await ls.call(ls.fast, ls.backend_for, snap.path)   # reads project files: off the loop
        arch = await ls.call(ls.probe, ls.arch, snap.path)
        t0 = time.monotonic()
        verdicts = await ls.call(ls.slow, api.check, snap, k.name, backend=backend,
                                 arch=arch, cancel=cancel, session=ls.session_for(snap.path))
    except Exception as e:
        if cancel.is_set():
            return None
        if not is_user_error(e):
            ls.log_error(f"checking {k.name} failed", traceback.format_exc())
        ls.log_info(f"check {k.name}: could not run: {user_message(e)} — reproduce: "
                    f"{api.command_line('check', snap, k.name, backend=backend)}")
        ks.verdict, ks.verdict_error = None, user_message(e)
        return [error_diagnostic(e, lines, f"{k.name}: the check could not run", where)]
    if cancel.is_set():
        return None
    from astra_cuda import standing
    again = api.command_line("check", snap, k.name, backend=backend)
    for v in verdicts:
        kst = st.kernel(v.kernel)
        kst.verdict, kst.verdict_error = v, ""
        steps = ", ".join(f"{name} {sec:.1f} s" for name, sec in v.timings.items())
        ls.log_info(f"check {v.kernel}: {standing.of_check(v).short} in {time.monotonic() - t0:.1f} s"
                    f"{' (' + steps + ')' if steps else ''}; reference: {v.reference or 'none'} — reproduce: {again}")
    return verdict_diagnostics(verdicts, lines, where)
