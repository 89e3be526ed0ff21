"""The Astra language server: pygls on stdio, every answer from `astra.api`.

Threads: the core is blocking, so every call into it runs in an executor and the event loop
only ever touches cached state. Hovers, lenses and code-action lists are answered from that
cache while checks and optimizations run. Everything the protocol sends is sent from the loop.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import sys
import time
import traceback
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from astra.lsp import anchor as anchoring
from astra.lsp import settings as settings_mod
from astra.lsp.convert import Span, line_range, lsp_diagnostic, lsp_range, span_of, text_in
from astra.lsp.state import DocState, Optimization, Profiled, verified_cases

log = logging.getLogger("astra.lsp")

DEBOUNCE_S = 0.25  # saves closer together than this start one check
APPLY_KIND = types.CodeActionKind.RefactorRewrite
OPTIMIZE_KIND = types.CodeActionKind.Refactor
SPEC_KIND = types.CodeActionKind.QuickFix
MAX_FAILURES_SHOWN = 5  # per kernel: enough to act on without burying the file in squiggles


def _api():
    """The core, imported on first use: a broken core becomes a message, not a dead server."""
    import astra.api as api

    return api


def has_spec(k: Any) -> bool:
    """The kernel has a spec comment (loaded or not: a broken one still counts)."""
    return getattr(k, "spec", None) is not None or _spec_comment(k) is not None


def _spec_comment(k: Any) -> Any:
    return getattr(getattr(k, "kernel", None), "spec", None)


def full_span(k: Any) -> Span:
    """The kernel with its spec comment: where its lens sits and what 'in the kernel' means."""
    s = span_of(k.kernel.span)
    c = _spec_comment(k)
    if c is not None:
        cs = span_of(c.span)
        if (cs.start_line, cs.start_col) < (s.start_line, s.start_col):
            return Span(cs.start_line, cs.start_col, s.end_line, s.end_col)
    return s


def _user_message(e: BaseException) -> str:
    """AstraError carries a message fit to show; anything else is a bug worth its type name."""
    msg = getattr(e, "message", None)
    return msg if isinstance(msg, str) and msg else f"{type(e).__name__}: {e}"


class AstraServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("astra", _version())
        self.settings = settings_mod.Settings()
        self.docs: dict[str, DocState] = {}
        # Separate pools, so quick core calls (parse, spec inference, pin) never queue behind
        # compiles or checks, and checks never queue behind an optimization.
        self.fast = ThreadPoolExecutor(2, "astra-fast")
        self.static = ThreadPoolExecutor(1, "astra-static")  # compiles every kernel: seconds
        self.slow = ThreadPoolExecutor(1, "astra-check")
        self.opt = ThreadPoolExecutor(2, "astra-optimize")
        self._index_tasks: dict[tuple[str, int], asyncio.Future] = {}
        self._change_gen: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._last_refresh = 0.0
        # Lenses are rebuilt only when the document or what we know about it changed.
        self.view_gen = 0
        self._lens_cache: dict[str, tuple[tuple, list]] = {}

    # ---- plumbing -------------------------------------------------------------------------

    async def call(self, pool: ThreadPoolExecutor, fn: Callable, *args, **kwargs) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, functools.partial(fn, *args, **kwargs))

    def spawn(self, coro) -> None:
        """Run a background coroutine whose failure is logged, never fatal."""
        task = asyncio.ensure_future(self._guard(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coro) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            pass
        except Exception:
            self.log_error("background task failed", traceback.format_exc())

    def log_info(self, msg: str) -> None:
        self.window_log_message(types.LogMessageParams(types.MessageType.Info, msg))

    def log_error(self, msg: str, detail: str = "") -> None:
        log.error("%s\n%s", msg, detail)
        self.window_log_message(types.LogMessageParams(types.MessageType.Error, f"{msg}\n{detail}".strip()))

    def show(self, msg: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(kind, msg))

    def state(self, uri: str) -> DocState:
        return self.docs.setdefault(uri, DocState())

    def caps(self, *path: str) -> Any:
        """A client capability by attribute path, or None."""
        node: Any = self.client_capabilities
        for p in path:
            node = getattr(node, p, None) if node is not None else None
        return node

    def refresh_views(self) -> None:
        self.view_gen += 1
        if self.caps("workspace", "code_lens", "refresh_support"):
            self.spawn(self.workspace_code_lens_refresh_async(None))
        if self.caps("workspace", "inlay_hint", "refresh_support"):
            self.spawn(self.workspace_inlay_hint_refresh_async(None))

    # ---- the kernel index -----------------------------------------------------------------

    async def index(self, uri: str) -> tuple[Any, list]:
        """(document, kernels of its current version)."""
        doc, snap = await self.snapshot(uri)
        return doc, list(snap.kernels) if snap is not None else []

    async def snapshot(self, uri: str) -> tuple[Any, Any]:
        """(document, the snapshot of its current version or None when it could not be read);
        built once per version, off the loop."""
        doc = self.workspace.get_text_document(uri)
        st = self.state(uri)
        version = doc.version or 0
        if st.snapshot_version == version:
            return doc, st.snapshot
        key = (uri, version)
        fut = self._index_tasks.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._parse(doc.source, doc.path))
            self._index_tasks[key] = fut
            fut.add_done_callback(lambda _f: self._index_tasks.pop(key, None))
        snap, error = await fut
        if (self.workspace.get_text_document(uri).version or 0) == version:
            st.snapshot, st.snapshot_version, st.snapshot_error = snap, version, error
        return doc, snap

    async def _parse(self, text: str, path: str) -> tuple[Any, str]:
        try:
            # A file without kernels (a header, a host file) is normal here, not an error.
            return await self.call(self.fast, _api().snapshot, text, path), ""
        except Exception as e:
            if not hasattr(e, "message"):
                self.log_error(f"could not list the kernels of {path}", traceback.format_exc())
            return None, _user_message(e)

    async def kernel_at(self, uri: str, line: int) -> tuple[Any, Any]:
        doc, kernels = await self.index(uri)
        k = next((k for k in kernels if full_span(k).contains_line(line)), None)
        return doc, k

    # ---- diagnostics and the on-save check --------------------------------------------------

    def schedule_analysis(self, uri: str, *, check: bool) -> None:
        st = self.state(uri)
        st.check_cancel.set()  # a newer save cancels an older check
        st.check_cancel = type(st.check_cancel)()
        st.check_generation += 1
        self.spawn(self.analyze(uri, st.check_generation, st.check_cancel, check))

    async def analyze(self, uri: str, gen: int, cancel, check: bool) -> None:
        await asyncio.sleep(DEBOUNCE_S)
        st = self.docs.get(uri)
        if st is None or st.check_generation != gen:
            return
        stale = lambda: self.docs.get(uri) is not st or st.check_generation != gen  # noqa: E731
        doc, snap = await self.snapshot(uri)
        text, version, path = doc.source, doc.version, doc.path
        lines = text.splitlines()
        try:
            if snap is None:
                raise _api().AstraError(st.snapshot_error)
            snap = snap.with_context(self.project(path))
            found = await self.call(self.static, _api().diagnostics, snap, arch=self.settings.gpu_arch)
            static = [lsp_diagnostic(d, lines) for d in found]
        except Exception as e:
            self.log_error(f"static diagnostics of {path} failed", traceback.format_exc())
            static = [self._error_diag(e, lines, "Astra could not analyse this file")]
        if stale():
            return
        st.static_diags = static
        kernels = list(snap.kernels) if snap is not None else []
        names = {k.name for k in kernels}
        st.check_diags = {n: d for n, d in st.check_diags.items() if n in names}
        self.publish(uri, version)
        has_errors = any(d.severity == types.DiagnosticSeverity.Error for d in static)
        todo = [k for k in kernels if getattr(k, "spec", None) is not None]  # loaded without errors
        if not (check and self.settings.check_on_save) or has_errors or not todo:
            self.send_status(uri)
            return
        st.checking = True
        self.send_status(uri)
        try:
            for k in todo:
                if cancel.is_set() or stale():
                    return
                diags = await self.check_one(st, snap, k, cancel, lines)
                if diags is None or cancel.is_set() or stale():
                    self.log_info(f"the check of {k.name} was cancelled: a newer save supersedes it")
                    return  # a newer save owns the diagnostics now
                st.check_diags[k.name] = diags
                self.publish(uri, version)
        finally:
            if not stale():
                st.checking = False
                self.send_status(uri)
                self.refresh_views()

    async def check_one(self, st, snap, k, cancel, lines) -> list[types.Diagnostic] | None:
        """Diagnostics of one kernel's check; None when a newer save cancelled it (then the
        newer check owns the state, and this one changes nothing)."""
        ks = st.kernel(k.name)
        where = lsp_range(span_of(k.kernel.name_span))
        try:
            verdicts = await self.call(self.slow, _api().check, snap, k.name,
                                       backend=self.settings.backend, arch=self.settings.gpu_arch, cancel=cancel)
        except Exception as e:
            if cancel.is_set():
                return None
            if not hasattr(e, "message"):
                self.log_error(f"checking {k.name} failed", traceback.format_exc())
            ks.verdict, ks.verdict_error = None, _user_message(e)
            return [self._error_diag(e, lines, f"{k.name}: the check could not run", where)]
        if cancel.is_set():
            return None
        diags = []
        for v in verdicts:
            kst = st.kernel(v.kernel)
            kst.verdict, kst.verdict_error = v, ""
            if v.passed:
                continue
            status = getattr(v, "status", "failed")
            failures = list(getattr(v, "failures", None) or []) if status == "failed" else []
            shown, rest = failures[:MAX_FAILURES_SHOWN], len(failures) - MAX_FAILURES_SHOWN
            for f in shown:
                line = getattr(f, "line", None)  # 1-based in the gate's failures
                rng = line_range(line - 1, lines) if isinstance(line, int) and 1 <= line <= len(lines) else where
                text_of = getattr(f, "text", None)
                detail = text_of() if callable(text_of) else f.message
                diags.append(types.Diagnostic(
                    range=rng, severity=types.DiagnosticSeverity.Error, source="astra", code="check",
                    message=f"{v.kernel}: check failed ({v.backend} backend): {detail}"))
            if rest > 0:
                diags.append(types.Diagnostic(
                    range=where, severity=types.DiagnosticSeverity.Error, source="astra", code="check",
                    message=f"{v.kernel}: … and {rest} more failure(s); see the hover report"))
            if not failures:
                severity = (types.DiagnosticSeverity.Warning if status == "unsupported"
                            else types.DiagnosticSeverity.Error)
                diags.append(types.Diagnostic(
                    range=where, severity=severity, source="astra", code="check",
                    message=f"{v.summary} ({v.backend} backend)"))
        return diags

    def _error_diag(self, e: BaseException, lines, prefix: str, where: types.Range | None = None):
        line = getattr(e, "line", None)
        rng = line_range(line, lines) if isinstance(line, int) else (where or line_range(0, lines))
        return types.Diagnostic(range=rng, severity=types.DiagnosticSeverity.Error, source="astra",
                                code="astra", message=f"{prefix}: {_user_message(e)}")

    def publish(self, uri: str, version: int | None) -> None:
        self.view_gen += 1  # verdicts changed too
        st = self.docs.get(uri)
        diags = [] if st is None else st.static_diags + [d for ds in st.check_diags.values() for d in ds]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=version))

    def send_status(self, uri: str) -> None:
        """`astra/status` drives the client's status bar item."""
        st = self.docs.get(uri)
        if st is None:
            return
        self.view_gen += 1  # every status change is also a lens change
        verdicts = [ks.verdict for ks in st.per_kernel.values() if ks.verdict is not None]
        running = [(n, ks.optimization) for n, ks in st.per_kernel.items()
                   if ks.optimization and ks.optimization.status == "running"]
        self.protocol.notify("astra/status", {
            "uri": uri,
            "checking": st.checking,
            "errors": sum(1 for d in st.static_diags if d.severity == types.DiagnosticSeverity.Error),
            "verified": sum(1 for v in verdicts if v.passed),
            "failing": sum(1 for v in verdicts if not v.passed)
                       + sum(1 for ks in st.per_kernel.values() if ks.verdict_error),
            "optimizing": [{"kernel": n, "message": o.message, "bestSpeedup": o.best_speedup}
                           for n, o in running],
        })

    # ---- commands ---------------------------------------------------------------------------

    async def optimize(self, uri: str, name: str) -> dict:
        doc, snap = await self.snapshot(uri)
        k = anchoring.find(snap.kernels if snap is not None else [], name)
        if k is None:
            return self._fail(f"no kernel `{name}` in this file")
        st = self.state(uri)
        ks = st.kernel(name)
        if ks.optimization and ks.optimization.status == "running":
            return self._fail(f"`{name}` is already being optimized")
        opt = Optimization("running", anchoring.anchor_for(k, doc.version or 0, doc.source), doc.source)
        ks.optimization = opt
        s = self.settings
        try:
            llm = self.llm_config()
        except Exception as e:
            ks.optimization = None
            return self._fail(f"the LLM settings are incomplete: {_user_message(e)}")
        token = await self._progress_begin(f"Astra: optimizing {name}", opt.cancel)
        loop = asyncio.get_running_loop()

        def progress(event: dict) -> None:  # called from the core's thread
            loop.call_soon_threadsafe(self._on_progress, uri, opt, token, event, s.rounds)

        self.send_status(uri)
        self.refresh_views()
        try:
            result = await self.call(self.opt, _api().optimize, snap.with_context(self.project(doc.path)), name,
                                     rounds=s.rounds, llm=llm, backend=s.backend, arch=s.gpu_arch,
                                     progress=progress, cancel=opt.cancel, report=self.report_dir(doc.path))
            if opt.cancel.is_set() or getattr(result, "cancelled", False):
                opt.status, opt.message = "cancelled", "cancelled"
            elif getattr(result, "error", None):
                opt.status, opt.message = "failed", result.error
            else:
                opt.status, opt.result = "done", result
                if opt.improved:
                    opt.rewrite = anchoring.rewrite_for(opt.original, result.best, opt.anchor.span,
                                                        opt.anchor.version)
        except asyncio.CancelledError:
            opt.cancel.set()
            opt.status, opt.message = "cancelled", "cancelled"
            raise
        except Exception as e:
            if opt.cancel.is_set():
                opt.status, opt.message = "cancelled", "cancelled"
            else:
                if not hasattr(e, "message"):
                    self.log_error(f"optimizing {name} failed", traceback.format_exc())
                opt.status, opt.message = "failed", _user_message(e)
        finally:
            self._progress_end(token, opt.status)
            self.send_status(uri)
            self.refresh_views()
        if opt.status == "done":
            if opt.improved:
                self.show(f"Astra: `{name}` optimized ({opt.title()}). "
                          "Apply it from the code lens or the lightbulb.")
            else:
                self.show(f"Astra: no better verified version of `{name}` found; the original is kept.")
        elif opt.status == "failed":
            self.show(f"Astra: optimizing `{name}` failed: {opt.message}", types.MessageType.Error)
        return self.optimization_json(name, opt)

    def optimization_json(self, name: str, opt: Optimization) -> dict:
        out = {"kernel": name, "status": opt.status, "message": opt.message}
        if opt.result is not None:
            out.update(speedup=opt.result.speedup, verifiedCases=verified_cases(opt.result),
                       improved=opt.improved, title=opt.title(),
                       reportPath=str(getattr(opt.result, "report_path", "") or ""))
        return out

    def _fail(self, message: str) -> dict:
        self.show(f"Astra: {message}", types.MessageType.Warning)
        return {"status": "error", "message": message}

    def _on_progress(self, uri: str, opt: Optimization, token: str | None, event: Any, rounds: int) -> None:
        ev = event if isinstance(event, dict) else {"message": str(event)}
        best = ev.get("best_speedup", ev.get("best"))
        if isinstance(best, (int, float)):
            opt.best_speedup = float(best)
        msg = ev.get("message") or " · ".join(f"{k} {v}" for k, v in ev.items() if v is not None)
        opt.message = str(msg)
        if token is not None:
            pct = None
            if isinstance(ev.get("round"), int) and rounds:
                pct = max(0, min(100, int(100 * (ev["round"] - 1) / rounds)))
            self.work_done_progress.report(token, types.WorkDoneProgressReport(message=opt.message, percentage=pct))
        self.send_status(uri)
        now = time.monotonic()
        if now - self._last_refresh > 1.0:  # the lens shows the round; at most one refresh a second
            self._last_refresh = now
            self.refresh_views()

    async def _progress_begin(self, title: str, cancel) -> str | None:
        """Server-initiated work-done progress whose cancel button sets `cancel`."""
        if not self.caps("window", "work_done_progress"):
            return None
        token = f"astra-{uuid.uuid4()}"
        try:
            await asyncio.wait_for(self.work_done_progress.create_async(token), 10)
        except Exception:
            return None
        self.work_done_progress.tokens[token].add_done_callback(lambda _f: cancel.set())
        self.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, cancellable=True,
                                                                         percentage=0))
        return token

    def _progress_end(self, token: str | None, message: str) -> None:
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            self.work_done_progress.tokens.pop(token, None)

    def llm_config(self) -> Any:
        """None (the offline team) unless a model or endpoint is configured."""
        s = self.settings
        return _api().llm_config(model=s.llm_model or None, base_url=s.llm_base_url or None,
                                 api_key=s.llm_api_key or None)

    def project(self, path: str):
        """The project context of `path`: the settings' include paths, macros and standard, then
        the configured or nearest compile_commands.json. Raises AstraError for a bad setting."""
        root = str(_api().workspace.root_for(path))
        ctx, cc = self.settings.project(root)
        return _api().project_context(path, settings=ctx, compile_commands=cc)

    def report_dir(self, path: str) -> str | None:
        try:
            return str(_api().workspace.astra_dir(path) / "reports")
        except Exception:
            return None

    async def profile(self, uri: str, name: str) -> dict:
        doc, snap = await self.snapshot(uri)
        k = anchoring.find(snap.kernels if snap is not None else [], name)
        if k is None:
            return self._fail(f"no kernel `{name}` in this file")
        ks = self.state(uri).kernel(name)
        ks.profiling = True
        self.refresh_views()
        try:
            p = await self.call(self.slow, _api().profile, snap.with_context(self.project(doc.path)), name,
                                backend=self.settings.backend, arch=self.settings.gpu_arch,
                                ncu=self.settings.profile_ncu)
            if isinstance(p, list):  # one profile per selected kernel; we selected one
                p = p[0]
        except Exception as e:
            if not hasattr(e, "message"):
                self.log_error(f"profiling {name} failed", traceback.format_exc())
            return self._fail(f"profiling `{name}` failed: {_user_message(e)}")
        finally:
            ks.profiling = False
            self.refresh_views()
        ks.profile = Profiled(p, anchoring.anchor_for(k, doc.version or 0, doc.source))
        self.refresh_views()
        return {"status": "done", "kernel": name, "summary": p.summary_line(),
                "hotLines": len(getattr(p, "hot_lines", None) or [])}

    async def pin(self, uri: str, name: str) -> dict:
        _, snap = await self.snapshot(uri)
        try:
            if snap is None:
                raise _api().AstraError(self.state(uri).snapshot_error)
            pinned = await self.call(self.fast, _api().pin, snap, name)
        except Exception as e:
            return self._fail(f"pinning `{name}` failed: {_user_message(e)}")
        digest = getattr(pinned, "digest", "")
        msg = f"pinned the current `{name}` as the reference" + (f" ({digest[:12]})" if digest else "")
        self.show(f"Astra: {msg}")
        return {"status": "done", "message": msg}

    async def rewrite_edit(self, uri: str, name: str) -> tuple[types.WorkspaceEdit | None, str]:
        """The edit that applies the optimized kernel to the document as it is now, or None
        and the reason it cannot be applied safely."""
        opt = self.state(uri).kernel(name).optimization
        if opt is None or opt.status != "done":
            return None, f"no finished optimization of `{name}`"
        if opt.rewrite is None:
            return None, f"the optimization found no better verified version of `{name}`"
        doc = self.workspace.get_text_document(uri)
        if opt.rewrite.applied(doc.source):
            return None, f"the optimized `{name}` is already in place"
        placed = anchoring.place(opt.rewrite, doc.version or 0, doc.source)
        if placed.span is None:
            return None, placed.reason
        if placed.how == "re-anchored":
            self.log_info(f"applying the optimized `{name}` at its new place (the file changed around it)")
        return self._edit(uri, doc.version, placed.span, opt.rewrite.new), ""

    def _edit(self, uri: str, version: int | None, span: Span, new_text: str) -> types.WorkspaceEdit:
        """A versioned edit: the client refuses it if the document moved on since. (VS Code's
        code action menu previews it as a diff on request; the client's Apply command shows
        the diff first.)"""
        ident = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        edit = types.TextEdit(range=lsp_range(span), new_text=new_text)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=ident, edits=[edit])])

    async def spec_edit(self, uri: str, name: str) -> tuple[types.WorkspaceEdit | None, str]:
        doc, snap = await self.snapshot(uri)
        k = anchoring.find(snap.kernels if snap is not None else [], name)
        if k is None:
            return None, f"no kernel `{name}` in this file"
        try:
            proposal = await self.call(self.fast, _api().infer_spec, snap.with_context(self.project(doc.path)),
                                       name)
            comment = getattr(proposal, "comment", proposal)
        except Exception as e:
            return None, f"could not infer a spec for `{name}`: {_user_message(e)}"
        if (self.workspace.get_text_document(uri).version or 0) != (doc.version or 0):
            return None, "the file changed while the spec was inferred; try again"
        start = span_of(k.kernel.span)
        at = Span(start.start_line, start.start_col, start.start_line, start.start_col)
        text = comment if comment.endswith("\n") else comment + "\n"
        ident = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=doc.version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            text_document=ident, edits=[types.TextEdit(range=lsp_range(at), new_text=text)])]), ""

    # ---- views from the cache ---------------------------------------------------------------

    def report_markdown(self, uri: str, k: Any) -> str:
        ks = self.state(uri).per_kernel.get(k.name)
        out = [f"### Astra · `{k.name}`"]
        if not has_spec(k):
            out.append("No harness spec yet: use the quick fix **Add harness spec**.")
        elif getattr(k, "spec", None) is None:
            out.append("The harness spec has errors (see the diagnostics in the comment).")
        if ks and ks.verdict is not None:
            v = ks.verdict
            mark = "✅ verified" if v.passed else "❌ not verified"
            out.append(f"**Check** ({v.backend} backend): {mark} — {v.summary}")
            ref = getattr(v, "reference", "")
            if ref:
                out.append(f"Reference: {ref}")
        elif ks and ks.verdict_error:
            out.append(f"**Check**: could not run — {ks.verdict_error}")
        if ks and ks.profile is not None:
            out.append(f"**Profile**: {ks.profile.profile.summary_line()}")
        opt = ks.optimization if ks else None
        if opt is not None:
            if opt.status == "done":
                out.append(opt.result.summary_markdown())
                rp = getattr(opt.result, "report_path", None)
                if rp:
                    out.append(f"[Open the full report](file://{rp})")
            elif opt.status == "running":
                out.append(f"**Optimizing…** {opt.message}")
            else:
                out.append(f"**Last optimization** {opt.status}: {opt.message}")
        if len(out) == 1 or (len(out) == 2 and getattr(k, "spec", None) is None):
            out.append("Not checked or optimized yet: save to check, or use **Optimize kernel**.")
        return "\n\n".join(out)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("astra-cuda")
    except Exception:
        return "0"


server = AstraServer()


# ---- lifecycle and documents -------------------------------------------------------------------

@server.feature(types.INITIALIZE)
def on_initialize(ls: AstraServer, params: types.InitializeParams) -> None:
    ls.settings, problems = settings_mod.initial(params.initialization_options)
    for p in problems:
        log.warning(p)


@server.feature(types.INITIALIZED)
def on_initialized(ls: AstraServer, params: types.InitializedParams) -> None:
    s = ls.settings
    ls.log_info(f"Astra server {_version()} ready (backend={s.backend}, rounds={s.rounds}, "
                f"llm={'offline' if not s.llm_base_url else s.llm_model or 'default model'}, "
                f"python={sys.executable})")


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: AstraServer, *_) -> None:
    # Stop background work so nothing is sent once the client stops listening.
    for st in ls.docs.values():
        st.check_cancel.set()
        for ks in st.per_kernel.values():
            if ks.optimization is not None:
                ks.optimization.cancel.set()
    for task in list(ls._tasks):
        task.cancel()


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_configuration(ls: AstraServer, params: types.DidChangeConfigurationParams) -> None:
    raw = params.settings.get("astra") if isinstance(params.settings, dict) else None
    if raw is None and ls.caps("workspace", "configuration"):
        try:
            got = await asyncio.wait_for(ls.workspace_configuration_async(
                types.ConfigurationParams(items=[types.ConfigurationItem(section="astra")])), 5)
            raw = got[0] if got else None
        except Exception:
            ls.log_error("could not read the astra settings", traceback.format_exc())
    ls.settings, problems = ls.settings.updated(raw)
    for p in problems:
        ls.show(f"Astra: {p}", types.MessageType.Warning)
    ls.log_info(f"settings: backend={ls.settings.backend}, rounds={ls.settings.rounds}, "
                f"checkOnSave={ls.settings.check_on_save}, gpuArch={ls.settings.gpu_arch}")


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: AstraServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.docs[params.text_document.uri] = DocState()
    ls.schedule_analysis(params.text_document.uri, check=True)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: AstraServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.schedule_analysis(params.text_document.uri, check=True)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: AstraServer, params: types.DidChangeTextDocumentParams) -> None:
    # Re-index soon after typing stops, so lenses and hovers are ready when asked for.
    uri = params.text_document.uri
    gen = ls._change_gen[uri] = ls._change_gen.get(uri, 0) + 1

    async def reindex():
        await asyncio.sleep(DEBOUNCE_S)
        if ls._change_gen.get(uri) == gen and uri in ls.docs:
            await ls.index(uri)

    ls.spawn(reindex())


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: AstraServer, params: types.DidCloseTextDocumentParams) -> None:
    ls._lens_cache.pop(params.text_document.uri, None)
    st = ls.docs.pop(params.text_document.uri, None)
    if st is not None:
        st.check_cancel.set()
    ls.text_document_publish_diagnostics(
        types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))


# ---- code actions ------------------------------------------------------------------------------

def _wanted(kind: str, only) -> bool:
    return not only or any(kind == o or kind.startswith(o + ".") for o in only)


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[APPLY_KIND, OPTIMIZE_KIND, SPEC_KIND], resolve_provider=True))
async def code_actions(ls: AstraServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    doc, k = await ls.kernel_at(uri, params.range.start.line)
    if k is None:
        return []
    only = params.context.only
    ks = ls.state(uri).per_kernel.get(k.name)
    opt = ks.optimization if ks else None
    version = doc.version or 0
    actions = []
    rw = opt.rewrite if opt is not None and opt.status == "done" else None
    if rw is not None and not rw.applied(doc.source):
        placed = anchoring.place(rw, version, doc.source)
        action = types.CodeAction(title=f"Apply optimized kernel ({opt.title()})", kind=APPLY_KIND,
                                  is_preferred=True, data={"action": "apply", "uri": uri, "kernel": k.name})
        if placed.span is None:
            action.disabled = types.CodeActionDisabled(reason=placed.reason)
        actions.append(action)
    if opt is not None and opt.status == "running":
        actions.append(types.CodeAction(
            title=f"Cancel optimizing `{k.name}` ({opt.message or 'starting'})", kind=OPTIMIZE_KIND,
            command=types.Command(title="Cancel optimization", command="astra.lsp.cancelOptimize", arguments=[uri, k.name])))
    else:
        actions.append(types.CodeAction(
            title=f"Optimize kernel `{k.name}`", kind=OPTIMIZE_KIND,
            command=types.Command(title="Optimize kernel", command="astra.lsp.optimize", arguments=[uri, k.name])))
    if not has_spec(k):
        actions.append(types.CodeAction(title=f"Add harness spec for `{k.name}`", kind=SPEC_KIND,
                                        data={"action": "spec", "uri": uri, "kernel": k.name}))
    else:
        actions.append(types.CodeAction(
            title=f"Pin current version of `{k.name}` as reference", kind=OPTIMIZE_KIND,
            command=types.Command(title="Pin as reference", command="astra.lsp.pin", arguments=[uri, k.name])))
    return [a for a in actions if _wanted(a.kind, only)]


@server.feature(types.CODE_ACTION_RESOLVE)
async def resolve_code_action(ls: AstraServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    uri, name = data.get("uri"), data.get("kernel")
    if not uri or not name:
        return action
    if data.get("action") == "apply":
        edit, why = await ls.rewrite_edit(uri, name)
    elif data.get("action") == "spec":
        edit, why = await ls.spec_edit(uri, name)
    else:
        return action
    if edit is None:
        ls.show(f"Astra: not applied — {why}", types.MessageType.Warning)
    action.edit = edit
    return action


# ---- code lens, hover, inlay hints ---------------------------------------------------------------

@server.feature(types.TEXT_DOCUMENT_CODE_LENS)
async def code_lens(ls: AstraServer, params: types.CodeLensParams) -> list[types.CodeLens]:
    uri = params.text_document.uri
    doc, kernels = await ls.index(uri)
    key = (doc.version, ls.view_gen, id(kernels))
    cached = ls._lens_cache.get(uri)
    if cached is not None and cached[0] == key:
        return cached[1]
    lenses = _lenses(ls, uri, doc, kernels)
    ls._lens_cache[uri] = (key, lenses)
    return lenses


def _lenses(ls: AstraServer, uri: str, doc: Any, kernels: list) -> list[types.CodeLens]:
    st = ls.state(uri)
    lenses = []
    for k in kernels:
        s = full_span(k)
        at = types.Range(start=types.Position(line=s.start_line, character=0),
                         end=types.Position(line=s.start_line, character=0))
        ks = st.per_kernel.get(k.name)
        lens = lambda title, cmd, *args: lenses.append(  # noqa: E731
            types.CodeLens(range=at, command=types.Command(title=title, command=cmd, arguments=[uri, k.name, *args])))
        if not has_spec(k):
            # Checking, profiling and optimizing all need a spec: offer the one step that helps.
            lens("Astra: add a harness spec", "astra.lsp.addSpec")
            continue
        if ks and ks.verdict is not None:
            v = ks.verdict
            cases = getattr(getattr(v, "coverage", None), "cases", 0)
            if v.passed:
                title = f"✓ verified ({v.backend}, {cases} cases)"
            else:
                title = {"unsupported": "? needs a GPU to verify", "error": "✗ check could not run"}.get(
                    getattr(v, "status", ""), f"✗ check failed ({v.backend})")
            lens(title, "astra.showReport")
        elif ks and ks.verdict_error:
            lens("✗ check could not run", "astra.showReport")
        elif st.checking and has_spec(k):
            lens("checking…", "astra.showReport")
        if ks and ks.profiling:
            lens("profiling…", "astra.showReport")
        elif ks and ks.profile is not None:
            lens(ks.profile.profile.summary_line(), "astra.lsp.profile")
        else:
            lens("Profile", "astra.lsp.profile")
        opt = ks.optimization if ks else None
        if opt is None or opt.status in ("failed", "cancelled"):
            suffix = f" (last: {opt.status})" if opt else ""
            lens(f"Optimize{suffix}", "astra.lsp.optimize")
        elif opt.status == "running":
            best = f", best {opt.best_speedup:.2f}×" if opt.best_speedup else ""
            lens(f"Optimizing… {opt.message}{best} (cancel)", "astra.lsp.cancelOptimize")
        elif opt.rewrite is not None:
            if opt.rewrite.applied(doc.source):
                lens(f"✓ optimized version in place ({opt.title()})", "astra.showReport")
            elif opt.rewrite.old not in doc.source:
                lens("Optimization result is stale (kernel edited): Optimize again", "astra.lsp.optimize")
            else:
                lens(f"Apply optimized kernel ({opt.title()})", "astra.applyOptimized")
        else:
            lens("No better version found (Optimize again)", "astra.lsp.optimize")
    return lenses


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def hover(ls: AstraServer, params: types.HoverParams) -> types.Hover | None:
    _, kernels = await ls.index(params.text_document.uri)
    p = params.position
    for k in kernels:
        s = span_of(k.kernel.name_span)
        if s.start_line <= p.line <= s.end_line and s.start_col <= p.character <= s.end_col:
            return types.Hover(contents=types.MarkupContent(types.MarkupKind.Markdown,
                                                            ls.report_markdown(params.text_document.uri, k)),
                               range=lsp_range(s))
    return None


@server.feature(types.TEXT_DOCUMENT_INLAY_HINT)
async def inlay_hints(ls: AstraServer, params: types.InlayHintParams) -> list[types.InlayHint]:
    uri = params.text_document.uri
    doc, kernels = await ls.index(uri)
    st = ls.state(uri)
    lines = doc.lines
    hints = []
    for k in kernels:
        ks = st.per_kernel.get(k.name)
        prof = ks.profile if ks else None
        hot = list(getattr(prof.profile, "hot_lines", None) or []) if prof else []
        if not hot:
            continue
        span = span_of(k.kernel.span)
        if text_in(doc.source, span) != prof.anchor.kernel_text:
            continue  # the kernel changed since it was profiled: the lines mean nothing now
        shift = span.start_line - prof.anchor.span.start_line
        for line, share, label in hot:
            n = line + shift
            if params.range.start.line <= n <= params.range.end.line and 0 <= n < len(lines):
                text = lines[n].rstrip("\r\n")
                hints.append(types.InlayHint(position=types.Position(line=n, character=len(text)),
                                             label=label or f"{share:.0%}", padding_left=True,
                                             kind=None))
    return hints


# ---- commands (arguments arrive unpacked: uri, kernel) ----------------------------------------

@server.command("astra.lsp.optimize")
async def cmd_optimize(ls: AstraServer, uri: str, kernel: str, *_):
    return await ls.optimize(uri, kernel)


@server.command("astra.lsp.cancelOptimize")
def cmd_cancel(ls: AstraServer, uri: str, kernel: str, *_):
    ks = ls.docs.get(uri) and ls.state(uri).per_kernel.get(kernel)
    if ks and ks.optimization and ks.optimization.status == "running":
        ks.optimization.cancel.set()
        return {"status": "cancelling"}
    return {"status": "idle"}


@server.command("astra.lsp.profile")
async def cmd_profile(ls: AstraServer, uri: str, kernel: str, *_):
    return await ls.profile(uri, kernel)


@server.command("astra.lsp.pin")
async def cmd_pin(ls: AstraServer, uri: str, kernel: str, *_):
    return await ls.pin(uri, kernel)


@server.command("astra.lsp.addSpec")
async def cmd_add_spec(ls: AstraServer, uri: str, kernel: str, *_):
    edit, why = await ls.spec_edit(uri, kernel)
    if edit is None:
        return ls._fail(why)
    r = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="Astra: add harness spec"))
    return {"status": "done" if r.applied else "declined"}


@server.command("astra.lsp.optimizedEdit")
async def cmd_optimized_edit(ls: AstraServer, uri: str, kernel: str, *_):
    """For the client's diff preview: the edit as it would apply now, or why it cannot."""
    edit, why = await ls.rewrite_edit(uri, kernel)
    if edit is None:
        return {"status": "declined", "message": why}
    opt = ls.state(uri).kernel(kernel).optimization
    return {"status": "ok", "edit": edit, "newText": opt.rewrite.new, "title": opt.title()}


@server.command("astra.lsp.report")
async def cmd_report(ls: AstraServer, uri: str, kernel: str, *_):
    _, kernels = await ls.index(uri)
    k = anchoring.find(kernels, kernel)
    if k is None:
        return {"status": "error", "message": f"no kernel `{kernel}` in this file"}
    ks = ls.state(uri).per_kernel.get(kernel)
    opt = ks.optimization if ks else None
    rp = getattr(opt.result, "report_path", None) if opt and opt.result is not None else None
    return {"status": "ok", "markdown": ls.report_markdown(uri, k), "reportPath": str(rp or "")}


@server.command("astra.lsp.kernels")
async def cmd_kernels(ls: AstraServer, uri: str, *_):
    _, kernels = await ls.index(uri)
    return [{"name": k.name, "startLine": span_of(k.kernel.span).start_line, "endLine": span_of(k.kernel.span).end_line,
             "hasSpec": has_spec(k)} for k in kernels]


@server.command("astra.lsp.check")
def cmd_check(ls: AstraServer, uri: str, *_):
    ls.schedule_analysis(uri, check=True)
    return {"status": "scheduled"}


def main() -> None:
    # Info goes to the client's log channel (window/logMessage); stderr, which editors show as
    # errors, gets only warnings and worse.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="astra-lsp %(levelname)s %(message)s")
    server.start_io()
    # stdout belonged to the protocol and is closed now; later flushes must not fail.
    sys.stdout = open(os.devnull, "w")


if __name__ == "__main__":
    main()
