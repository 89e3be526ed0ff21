"""The server object the handlers share: executors for the blocking core, per-document state
with one snapshot per document version, and what it sends to the client (diagnostics, status,
refresh requests, progress, messages).

Threads: the core is blocking, so every call into it runs in an executor and the event loop
only ever touches cached state. Everything the protocol sends is sent from the loop.
"""
from __future__ import annotations

import asyncio
import os
import contextvars
import functools
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.workspace import TextDocument

from astra_cuda import contract, redact
from astra_cuda.lsp import settings as settings_mod
from astra_cuda.lsp import views
from astra_cuda.lsp.state import DocState, hover_lines

if TYPE_CHECKING:
    from astra_cuda.compile.project import ProjectContext
    from astra_cuda.execution.executors import Executor
    from astra_cuda.session import Session
    from astra_cuda.snapshot import KernelInfo, Snapshot

log = logging.getLogger("astra_cuda.lsp")
T = TypeVar("T")
P = ParamSpec("P")

DEBOUNCE_S = 0.25  # saves closer together than this start one check
LARGE_TEXT = 256 << 10  # characters: a document this long is read in the pool for large ones


def user_message(e: BaseException) -> str:
    """An AstraError carries a message fit to show; anything else is a bug worth its type name."""
    from astra_cuda.errors import AstraError
    from astra_cuda.storage import is_full, no_space

    if isinstance(e, OSError) and is_full(e):   # a full disk where no writer said which
        return no_space(e, "a file").message
    return e.message if isinstance(e, AstraError) and e.message else f"{type(e).__name__}: {e}"


def is_user_error(e: BaseException) -> bool:
    """A problem with the user's input (reported as such), not a bug in Astra (logged)."""
    from astra_cuda.errors import AstraError
    from astra_cuda.storage import is_full

    return isinstance(e, AstraError) or is_full(e)


class Protocol(LanguageServerProtocol):
    """pygls's protocol, except that a request whose parameters cannot be read (`"uri": 5`) is
    answered with the error (InvalidParams) instead of only logged: the editor never waits
    for a reply that will not come."""

    def structure_message(self, data: dict[str, Any]) -> Any:
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            if not (isinstance(data.get("id"), (int, str)) and isinstance(data.get("method"), str)):
                raise  # a notification or a response: there is no one to answer
            why = e.__cause__ if e.__cause__ is not None else e
            error = type(e)(message=f"{e.message} for {data['method']}: {redact.text(str(why))[:300]}")
            self._send_response(data["id"], None, error.to_response_error())
            return _ANSWERED

    def handle_message(self, message: Any) -> None:
        if message is not _ANSWERED:
            super().handle_message(message)


_ANSWERED = object()  # a request already answered with its error while it was read


class AstraServer(LanguageServer):
    def __init__(self, version: str) -> None:
        super().__init__("astra", version, protocol_cls=Protocol)
        self.settings = settings_mod.Settings()
        # A multi-root workspace's folders may each set their own (resource-scoped) settings.
        self.folder_settings: dict[str, settings_mod.Settings] = {}
        # set once the window's and the folders' settings were asked for after `initialized`
        self.settings_read = asyncio.Event()
        self.docs: dict[str, DocState] = {}
        # Separate pools, so quick core calls (parse, spec inference, pin) never queue behind
        # probes, compiles or checks, and checks never queue behind an optimization.
        # What kernel code runs with, one session per workspace folder ('': the window's, for a
        # file in none): its trust and its astra.cluster; made on first use, replaced when either
        # changes, passed to every core call that may run kernel code (`session_for`).
        self.sessions: dict[str, Session] = {}
        self._sessions_lock = threading.Lock()   # `session_for` is called from the pools too
        # astra.cluster value -> its Ray connection (one per address, shared by the folders naming
        # it) and its label, e.g. 'Ray ray://gpu-box:10001'
        self.clusters: dict[str, tuple[Executor, str]] = {}
        self.fast = ThreadPoolExecutor(2, "astra-fast")    # what a hover waits for: the snapshot of a version
        # the snapshot of a large document (tree-sitter and the source model take up to seconds on
        # megabytes, hostile ones up to their limit): a hover on another document never queues behind it
        self.large = ThreadPoolExecutor(1, "astra-large")
        # a large document's parse made first in a child (`parse_apart`): these threads only wait for
        # it, one document's never behind another's
        self.apart = ThreadPoolExecutor(4, "astra-apart")
        self.probe = ThreadPoolExecutor(1, "astra-probe")  # the machine's GPU, arch, cluster: may take seconds
        self.static = ThreadPoolExecutor(1, "astra-static")  # compiles every kernel: seconds
        self.slow = ThreadPoolExecutor(1, "astra-check")
        self.opt = ThreadPoolExecutor(2, "astra-optimize")
        self._snapshot_tasks: dict[tuple[str, int], asyncio.Future[tuple[Snapshot | None, Exception | None, dict[int, list[KernelInfo]]]]] = {}
        self.change_gen: dict[str, int] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.last_refresh = 0.0
        # Lenses are rebuilt only when the document or what we know about it changed.
        self.view_gen = 0
        self.lens_cache: dict[str, tuple[tuple[int | None, int, int], list[types.CodeLens]]] = {}
        # What the status bar says about where a folder's kernels run: the GPU not used and why
        # (with its fix), per folder as `sessions`.
        self.gpu_setups: dict[str, dict[str, str] | None] = {}

    # ---- plumbing -------------------------------------------------------------------------

    async def call(self, pool: ThreadPoolExecutor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` in `pool`, off the event loop (its arguments type-checked as a direct call's),
        in a copy of the caller's context: what the server chose for its work (`parse_time.apart_first`)
        holds there too."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, contextvars.copy_context().run, functools.partial(fn, *args, **kwargs))

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run a background coroutine whose failure is logged, never fatal."""
        task = asyncio.ensure_future(self._guard(coro))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _guard(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            pass
        except Exception:
            self.log_error("background task failed", traceback.format_exc())

    def session_for(self, path: str | None) -> Session:
        """The session of the workspace folder holding `path` (None, or a file in no folder: the
        window's), with the trust the client gave now: a session made before its cluster was
        connected runs kernels on this machine until `apply_sessions` connects it."""
        from astra_cuda.session import Session
        key = "" if path is None else self.folder_of(path)
        settings = self.folder_settings.get(key, self.settings)
        off = self._execution_off(settings)
        with self._sessions_lock:
            s = self.sessions.get(key)
            if s is None:
                ex = self.clusters.get(settings.cluster)
                s = Session(execution_off=off) if ex is None else Session(ex[0], off)
            elif s.execution_off != off:
                s = s.restricted(off)   # trust is applied at once, never after a probe
            self.sessions[key] = s
            return s

    def cluster_label(self, path: str | None) -> str:
        """Where the kernels of `path` run when not on this machine ('Ray ray://gpu-box:10001'), else ''.
        Cheap, for the event loop: it reads the sessions made so far and makes none (making the
        first one loads the core)."""
        s = self.sessions.get("" if path is None else self.folder_of(path))
        return "" if s is None else next((label for e, label in self.clusters.values() if e is s.executor), "")

    async def apply_sessions(self) -> None:
        """Each folder's session as its settings say now: a Ray connection opened once per
        `astra.cluster` address the window or a folder names (Ray starts in seconds: off the event
        loop) and shared by those naming it, one named no more closed. A cluster that cannot be
        reached is shown, and kernels run on this machine."""
        from astra_cuda.session import Session
        wanted = {"": self.settings, **self.folder_settings}
        named = {s.cluster for s in wanted.values()} - {""}
        for cluster in sorted(named - set(self.clusters)):
            try:
                opened = await self.call(self.probe, Session.open, cluster)
            except Exception as e:
                self.show(f"Astra: astra.cluster={cluster!r}: {getattr(e, 'message', e)}; kernels run on this machine",
                          types.MessageType.Warning)
                continue
            d = await self.call(self.probe, opened.executor.describe)
            label = f"Ray {d.get('address')}" if d.get("kind") == "ray" else ""
            self.clusters[cluster] = (opened.executor, label)
            self.log_info(f"kernels run on {label}: {d.get('nodes')} node(s), {d.get('gpus')} GPU(s)")
        sessions: dict[str, Session] = {}
        for key, settings in wanted.items():
            ex = self.clusters[settings.cluster][0] if settings.cluster in self.clusters else None
            old = self.sessions.get(key)
            on_ray = old is not None and any(old.executor is e for e, _ in self.clusters.values())
            if old is not None and (old.executor is ex if ex is not None else not on_ray):
                sessions[key] = old   # where its kernels run did not change: what it learned is kept
            else:
                off = self._execution_off(settings)
                sessions[key] = Session(execution_off=off) if ex is None else Session(ex, off)
        self.sessions = sessions
        for cluster in set(self.clusters) - named:
            ex, _ = self.clusters.pop(cluster)
            await self.call(self.probe, ex.close)
        for uri in list(self.docs):
            self.send_status(uri)

    def cluster_settings(self) -> set[str]:
        """The astra.cluster values the window and its folders name (a change means `apply_sessions`)."""
        return {s.cluster for s in (self.settings, *self.folder_settings.values())}

    def close_sessions(self) -> None:
        """End every Ray connection the sessions opened (this machine's workers stay)."""
        for ex, _ in self.clusters.values():
            ex.close()
        self.clusters, self.sessions = {}, {}

    # Everything the editor is told goes through redact.text: an endpoint's error may echo the key.
    def log_info(self, msg: str) -> None:
        self.window_log_message(types.LogMessageParams(types.MessageType.Info, redact.text(msg)))

    def log_error(self, msg: str, detail: str = "") -> None:
        log.error("%s\n%s", msg, detail)
        self.window_log_message(types.LogMessageParams(types.MessageType.Error,
                                                       redact.text(f"{msg}\n{detail}".strip())))

    def show(self, msg: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(kind, redact.text(msg)))

    def fail(self, message: str) -> dict[str, str]:
        """A command's answer when it cannot do what was asked (the user sees why)."""
        self.show(f"Astra: {message}", types.MessageType.Warning)
        return {"status": "error", "message": message}

    def state(self, uri: str) -> DocState:
        return self.docs.setdefault(uri, DocState())

    def document(self, uri: str) -> TextDocument:
        return self.workspace.get_text_document(uri)

    # ---- what the client can do -----------------------------------------------------------

    def can_refresh_lenses(self) -> bool:
        w = self.client_capabilities.workspace
        return bool(w and w.code_lens and w.code_lens.refresh_support)

    def can_refresh_hints(self) -> bool:
        w = self.client_capabilities.workspace
        return bool(w and w.inlay_hint and w.inlay_hint.refresh_support)

    def can_show_progress(self) -> bool:
        w = self.client_capabilities.window
        return bool(w and w.work_done_progress)

    def can_ask_configuration(self) -> bool:
        w = self.client_capabilities.workspace
        return bool(w and w.configuration)

    # ---- snapshots: one per document version ------------------------------------------------

    async def snapshot(self, uri: str) -> tuple[TextDocument, Snapshot | None]:
        """(document, the snapshot of its current version, or None when it could not be read);
        built once per version, off the loop."""
        doc = self.document(uri)
        st = self.state(uri)
        version = doc.version or 0
        if st.snapshot_version == version:
            return doc, st.snapshot
        key = (uri, version)
        fut = self._snapshot_tasks.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._read(doc.source, doc.path))
            self._snapshot_tasks[key] = fut
            fut.add_done_callback(lambda _f: self._snapshot_tasks.pop(key, None))
        snap, error, lines = await fut
        if (self.document(uri).version or 0) == version and st.snapshot_version != version:
            st.snapshot, st.snapshot_version, st.snapshot_error, st.hover_lines = snap, version, error, lines
            live = views.live_diagnostics(st.kernels, st, doc.source)
            if live != st.live_diags:   # spec problems and guesses follow the text as it is typed
                st.live_diags = live
                self.publish(uri, version)
        return doc, snap

    async def read_within(self, uri: str, wait: float | None) -> bool:
        """Whether the snapshot of `uri`'s current version is ready within `wait` seconds (None:
        however long it takes). Its read goes on either way (`snapshot`, in the background), so a
        later request finds it: what must answer at once (a hover) does not wait for a large
        file's source model."""
        st = self.state(uri)
        if st.snapshot_version == (self.document(uri).version or 0):
            return True
        task = asyncio.ensure_future(self._guard(self.snapshot(uri)))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        done, _ = await asyncio.wait({task}, timeout=wait)
        return bool(done)

    async def _read(self, text: str, path: str) -> tuple[Snapshot | None, Exception | None,
                                                         dict[int, list[KernelInfo]]]:
        """The snapshot of `text`, or why it could not be read, and its kernels by line for hovers
        (`state.hover_lines`): all made in a pool's thread, none of it on the loop."""
        from astra_cuda import api
        from astra_cuda.lsp import parse_apart

        def read() -> tuple[Snapshot, dict[int, list[KernelInfo]]]:
            snap = api.snapshot(text, path)
            return snap, hover_lines(snap.kernels)
        try:
            if len(text) <= LARGE_TEXT:
                snap, lines = await self.call(self.fast, read)
                return snap, None, lines
            # what tree-sitter would refuse is refused by a child's parse: freeing a stopped parse or
            # a tree past the node ceiling holds the GIL, and so this loop, for up to a second
            await self.call(self.apart, parse_apart.check, text)
            snap, lines = await self.call(self.large, read)
            return snap, None, lines
        except Exception as e:
            if not is_user_error(e):
                self.log_error(f"could not read the kernels of {path}", traceback.format_exc())
            return None, e, {}  # kept whole: a user error keeps its line for the diagnostic

    RESTRICTED = "this workspace is not trusted (Workspace Trust)"

    def _execution_off(self, settings: settings_mod.Settings) -> str | None:
        """Untrusted workspace: nothing is built into a runnable module or run (the session's policy)."""
        return None if settings.allow_execution else self.RESTRICTED

    def arch(self, path: str) -> str:
        """The architecture to compile `path` for: its folder's setting, else the project's
        configuration (astra.toml, .clangd, compile_flags.txt), else the GPU's own, else the
        default. Blocking (it may probe the backends): call it in an executor."""
        from astra_cuda import api
        return str(self.effective(path)["arch"].value or api.device_arch(contract.DEFAULT_ARCH, self.session_for(path)))

    def machine_status(self, path: str) -> None:
        """Blocking: learn whether a GPU is where `path`'s kernels run but is not used (the
        probe is remembered a while by its folder's session)."""
        from astra_cuda import api
        s = api.gpu_setup(self.session_for(path))
        self.gpu_setups[self.folder_of(path)] = None if s is None else {"problem": s.reason, "fix": s.fix}

    def folder_of(self, path: str) -> str:
        """The innermost workspace folder with settings of its own that holds `path`, else ''."""
        real = os.path.realpath(path)
        return max((f for f in self.folder_settings if real == f or real.startswith(f.rstrip(os.sep) + os.sep)),
                   key=len, default="")

    def settings_for(self, path: str) -> settings_mod.Settings:
        """The settings of the workspace folder holding `path` (the innermost), else the window's."""
        return self.folder_settings.get(self.folder_of(path), self.settings)

    def effective(self, path: str) -> dict[str, Any]:
        """Every key of the project configuration for `path` (config.Value: value and source): its
        folder's settings where the user set them, else the project's astra.toml / [tool.astra],
        else the default — the precedence of the command line, whose flags stand for the settings."""
        from astra_cuda import api
        from astra_cuda import config
        return config.effective(api.project_config(path), self.settings_for(path).over_project())

    async def settings_known(self) -> None:
        """Wait (briefly: each of the two requests gives up after 5 s) until the window's and the
        folders' settings were read once, so the first analysis of a file opened with the
        workspace already follows them (checkOnOpen, the backend, its folder's include paths)."""
        try:
            await asyncio.wait_for(self.settings_read.wait(), 11)
        except asyncio.TimeoutError:
            pass

    def backend_for(self, path: str) -> str:
        """Where `path`'s kernels run (auto, gpu, cpu, or static from a project file)."""
        return str(self.effective(path)["backend"].value)

    def project(self, path: str) -> ProjectContext:
        """The project context of `path`: its folder's settings (include paths, macros, standard),
        then the project's configuration files and the configured or nearest
        compile_commands.json. Raises AstraError for a bad setting."""
        from astra_cuda import api, workspace
        ctx, cc = self.settings_for(path).project(str(workspace.root_for(path)))
        return api.project_context(path, settings=ctx, compile_commands=cc)

    # ---- what the client is told ------------------------------------------------------------

    def refresh_views(self) -> None:
        self.view_gen += 1
        if self.can_refresh_lenses():
            self.spawn(self.workspace_code_lens_refresh_async(None))
        if self.can_refresh_hints():
            self.spawn(self.workspace_inlay_hint_refresh_async(None))

    def publish(self, uri: str, version: int | None) -> None:
        self.view_gen += 1  # verdicts changed too
        st = self.docs.get(uri)
        # spec problems come from the latest text (live), not from the last compile
        diags = [] if st is None else [d for d in st.static_diags if d.code != "spec"] + st.live_diags + \
            [d for ds in st.check_diags.values() for d in ds]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=version))

    def why_not_run(self) -> str:
        """Why no kernel code runs on a check, when that is so (the lens and status say it)."""
        if not self.settings.allow_execution:
            return self.RESTRICTED
        if not (self.settings.check_on_save or self.settings.check_on_open):
            return "checks on open and save are off: run Astra: Check file"
        return ""

    def send_status(self, uri: str) -> None:
        """The status notification drives the client's status bar item."""
        st = self.docs.get(uri)
        if st is None:
            return
        self.view_gen += 1  # every status change is also a lens change
        restricted = None if self.settings.allow_execution else self.RESTRICTED
        path = self.document(uri).path
        self.protocol.notify(contract.STATUS_NOTIFICATION,
                             views.status(uri, st, self.cluster_label(path), restricted,
                                          self.gpu_setups.get(self.folder_of(path)), self.why_not_run()))

    async def progress_begin(self, title: str, cancel: Any) -> str | None:
        """Server-initiated work-done progress whose cancel button sets `cancel`."""
        if not self.can_show_progress():
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

    def progress_report(self, token: str, message: str, percentage: int | None) -> None:
        self.work_done_progress.report(token, types.WorkDoneProgressReport(message=message, percentage=percentage))

    def progress_end(self, token: str | None, message: str) -> None:
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            self.work_done_progress.tokens.pop(token, None)
