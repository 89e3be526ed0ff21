"""Parent side of the executor (runtime/astra_executor.cpp): start its zygote (an empty
environment, a session of its own; the zygote sets its limits and namespace itself), and give each
launch to a fresh launch process the zygote has ready and sandboxed: send it the request, the
module and the buffers as memfds, wait for its reply with a timeout and a watch on its resident
memory and thread count, and return only once every thread of it has ended — nothing writes the
buffers any more when anyone reads them. A crash or a hang becomes a LaunchError with the
launch's own last words (fault location, ASan report, assert).

Kernel code shares the launch's process with the runtime that replies, so it can write a reply of
its own on the socket. A reply counts only as the runtime sends it: the one message on the
socket, from a process that then exited with status 0 (the runtime's `_exit(0)` after replying);
a second message, or a death by signal after a reply, is a LaunchError (a forged `{"ok": true}`
ahead of a trap or of the runtime's own failure hid the fault)."""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path

from astra_cuda.backends.base import CompileError, LaunchError

from ...compile import sandbox
from .sanitizer_summary import asan_summary, tsan_summary

# A word on the executor's command line naming this checkout (tests find its processes by it;
# argv[0] stays the program's path: the sanitizers' symbolizer reads the program through it).
EXECUTOR = f"astra-executor@{Path(__file__).resolve().parent}"
# What a launch may read and execute (besides the executor itself and its own /proc entries):
# the system's libraries, which every module links.
LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib",
                "/etc/ld.so.cache")
FILE_LIMIT = 64 << 20  # the child writes only its log (the child sets its limits itself)
WATCH_S = 0.1          # how often a running launch's resident memory and threads are looked at
SANDBOX_EXIT = 71      # the child's exit status when it could not sandbox itself
CHILD_FAILED = 70      # the launch's own Python failed (not the kernel)
MAX_REPLY = 16 << 10   # a launch's reply: {"ok": bool, "error": str}
MAX_ERROR = 8 << 10
MAX_BUFFERS = 250      # descriptors in one message (SCM_RIGHTS carries at most 253)
ZYGOTE_TIMEOUT_S = 60.0  # how long the zygote may take to have a launch process ready
MODULE_FDS = 16        # sealed module memfds kept for the next launches


@dataclass
class _Spare:
    """A launch process the zygote has ready: its pid, the parent's end of its socket, a pidfd."""

    pid: int
    sock: socket.socket
    pidfd: int

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)  # never another process: a pidfd
        except ProcessLookupError:
            pass

    def close(self) -> None:
        self.sock.close()
        os.close(self.pidfd)


def memory_limit() -> int:
    """Resident memory one executor may use: half the machine, at most 16 GiB. Watched from
    outside (the sanitizers' shadow memory rules out an address-space limit for those)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 32 << 30
    return min(16 << 30, total // 2)


def thread_limit(workers: int) -> int:
    """Threads a launch may run, the runtime's workers (one per block at a time) and its own
    included, plus the zygote: RLIMIT_NPROC in the executor's user namespace, and the parent's
    watch where there is no such namespace."""
    return workers + 16


def usage(pid: int) -> tuple[int, int]:
    """(resident bytes, threads) of a process; (0, 0) when it is gone."""
    rss = threads = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return rss, threads


def resident_bytes(pid: int) -> int:
    return usage(pid)[0]


_program: list[bytes] = []
_program_lock = threading.Lock()


def seccomp_program() -> bytes | None:
    """The launch processes' seccomp program, compiled once per process (libseccomp: ~40 ms);
    None where libseccomp is not usable and the user opted out of the sandbox."""
    with _program_lock:
        if not _program:
            try:
                _program.append(sandbox.compiled_filter())
            except sandbox.SandboxError:
                if not sandbox.opted_out():
                    raise
                _program.append(b"")
    return _program[0] or None


def request(msg: dict, nbytes: list[int]) -> bytes:
    """The launch request in the executor's layout (astra_executor.cpp, run_launch)."""
    ranges = msg.get("state_ranges", [])
    out = [b"ASTR", struct.pack("<III3I3IQiiQiiiidiiQI", len(msg["args"]), len(nbytes), msg["entry"], *msg["grid"],
                                *msg["block"], msg["shmem"], msg["order"], msg["rounding"], msg["seed"],
                                msg["workers"], msg["stack_kib"], msg["handlers"], msg["copy_buffers"], msg["cpu_s"],
                                msg.get("state", -1), msg.get("load_state", 0), msg.get("image_bytes", 0),
                                len(ranges))]
    out += [struct.pack("<QQ", at, n) for at, n in ranges]
    addresses = msg.get("addresses") or [0] * len(nbytes)
    out += [struct.pack("<QQ", n, a) for n, a in zip(nbytes, addresses)]
    for a in msg["args"]:
        if a[0] in ("buf", "hidden"):
            out.append(struct.pack("<BI", 1 if a[0] == "buf" else 2, a[1]))
        else:
            raw = bytes.fromhex(a[1])
            out.append(struct.pack("<BI", 0, len(raw)) + raw)
    relocs = msg.get("relocs", [])
    out.append(struct.pack("<I", len(relocs)))
    out += [struct.pack("<IQIQ", *r) for r in relocs]
    return b"".join(out)


def sanitizer_runtime(sanitize: str) -> str | None:
    from .toolchain import compiler

    lib = {"address": "libasan.so", "thread": "libtsan.so"}[sanitize]
    r = subprocess.run([compiler(), f"-print-file-name={lib}"], capture_output=True, text=True)
    p = r.stdout.strip()
    return p if p and os.path.isabs(p) and os.path.exists(p) else None


def parse_reply(data: bytes) -> dict:
    """A launch's reply, checked: its process holds kernel code, which may write anything on its
    socket. Anything but {"ok": true} or {"ok": false, "error": "<text>"} is a LaunchError."""
    try:
        reply = json.loads(data.decode()) if len(data) <= MAX_REPLY else None
    except (UnicodeDecodeError, ValueError):
        reply = None
    if (not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool)
            or not set(reply) <= {"ok", "error"} or not isinstance(reply.get("error", ""), str)):
        raise LaunchError("the launch's reply is malformed (kernel code wrote on the executor's socket?)")
    return {"ok": reply["ok"], "error": reply.get("error", "")[:MAX_ERROR]}


def _with_report_hook(tsan: str) -> str:
    """LD_PRELOAD for the race checker: the report hook ahead of libtsan (a weak symbol of
    libtsan is replaced only from an object loaded before it). Without the hook every report
    stands: stricter, never laxer."""
    from .toolchain import tsan_hook

    try:
        return f"{tsan_hook()}:{tsan}"
    except CompileError:
        return tsan


class Executor:
    """One zygote (per sanitizer mode) and a fresh process for every launch; the zygote is
    replaced when it is gone."""

    def __init__(self, sanitize: str = "", workers: int = 1, landlock_abi: int | None = None):
        self.sanitize = sanitize  # '', 'address' or 'thread': the sanitizer runtime to preload
        self.threads = thread_limit(workers)
        self.landlock_abi = landlock_abi  # at most this ABI (None: the kernel's or $ASTRA_LANDLOCK_ABI)
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self.spares: deque[_Spare] = deque()  # announced by the zygote, not used yet
        self.statuses: dict[int, int] = {}     # pid -> wait status, as the zygote reports them
        self._awaiting = 0                     # the launch process whose status is wanted
        self.last_pid = 0                 # the process of the latest launch (gone when launch returns)
        self._modules: OrderedDict[str, int] = OrderedDict()  # module path -> sealed memfd
        self.tmp = tempfile.TemporaryDirectory(prefix="astra-cpu-")
        self.log_path = Path(self.tmp.name) / "child.log"

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {}  # nothing inherited: no keys, no paths, no settings
        if os.environ.get(sandbox.OPT_OUT_ENV) == "1":
            env[sandbox.OPT_OUT_ENV] = "1"
        caps = [c for c in (self.landlock_abi, sandbox.abi_cap()) if c is not None]
        if caps:
            env[sandbox.ABI_CAP_ENV] = str(min(caps))
        if self.sanitize:
            lib = sanitizer_runtime(self.sanitize)
            if lib is None:
                raise LaunchError(f"the {self.sanitize} sanitizer's runtime library was not found")
            env["LD_PRELOAD"] = _with_report_hook(lib) if self.sanitize == "thread" else lib
            env["ASAN_OPTIONS"] = ("detect_leaks=0:abort_on_error=0:print_summary=1:"
                                   "allocator_may_return_null=1:detect_stack_use_after_return=0")
            env["TSAN_OPTIONS"] = ("halt_on_error=1:report_signal_unsafe=0:history_size=4:exitcode=66:"
                                   "suppress_equal_addresses=0:suppress_equal_stacks=0")

        from .toolchain import executor_program

        program = executor_program()
        filt = seccomp_program()
        log = open(self.log_path, "ab")
        workdir = Path(self.tmp.name) / "work"
        workdir.mkdir(exist_ok=True)
        fds = [child.fileno()]
        filt_fd = -1
        if filt is not None:
            filt_fd = os.memfd_create("astra-seccomp")
            os.write(filt_fd, filt)
            os.lseek(filt_fd, 0, os.SEEK_SET)
            fds.append(filt_fd)
        try:
            self.proc = subprocess.Popen(
                [str(program), str(child.fileno()), "0" if self.sanitize else "1", str(self.threads), str(os.getpid()),
                 str(filt_fd), EXECUTOR, *LIBRARY_DIRS],
                pass_fds=fds, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                cwd=workdir, env=env, start_new_session=True)
        finally:
            log.close()
            child.close()
            if filt_fd >= 0:
                os.close(filt_fd)
        self.ctl = parent

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read(200_000).decode(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """The zygote and, through their parent-death signal, its launch processes."""
        while self.spares:
            spare = self.spares.popleft()
            spare.kill()
            spare.close()
        self.statuses.clear()
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
            self.proc = None
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None

    def ensure_started(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self._start()

    def _from_zygote(self, timeout_s: float) -> None:
        """Take the zygote's next message (it runs no kernel code): a launch process ready, or
        one reaped. LaunchError when the zygote is gone or silent."""
        assert self.ctl is not None and self.proc is not None
        ready, _, _ = select.select([self.ctl], [], [], timeout_s)
        if not ready:
            self.kill()
            raise LaunchError(f"the CPU executor had no launch process ready within {timeout_s:g} s (stopped)")
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.ctl, 1 << 16, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            rc = self.proc.wait()
            out = self._log_since(0)
            self.kill()
            raise LaunchError(crash_message(rc, out))
        msg = json.loads(data.decode())
        if "spare" in msg:
            self.spares.append(_Spare(int(msg["spare"]), socket.socket(fileno=fds[0]), fds[1]))
        elif int(msg["pid"]) == self._awaiting:  # the others ended after their reply: no news
            self.statuses[int(msg["pid"])] = int(msg["status"])

    def _take_spare(self) -> _Spare:
        self.ensure_started()
        while not self.spares:
            self._from_zygote(ZYGOTE_TIMEOUT_S)
        return self.spares.popleft()

    def launch(self, msg: dict, module: Path, buffer_fds: list[int], nbytes: list[int], timeout_s: float,
               filename: str = "") -> tuple[dict, str]:
        """Run one launch in a fresh process; returns (reply, what it printed). When this
        returns or raises, the launch's process is gone: nothing writes the buffers any more."""
        if len(buffer_fds) > MAX_BUFFERS:
            raise LaunchError(f"{len(buffer_fds)} buffers in one launch: the CPU backend takes at most {MAX_BUFFERS}")
        spare = self._take_spare()
        self.last_pid = spare.pid
        # Every launch process writes the one log its zygote was given, up to RLIMIT_FSIZE (a
        # file's size, not a process's share): each launch starts it empty, so a launch that
        # printed up to the limit does not kill the next one (another document's) at its first line
        # with SIGXFSZ. The previous launch's process is gone: nothing writes it meanwhile.
        try:
            os.truncate(self.log_path, 0)
        except OSError:
            pass
        offset = self._log_size()
        try:
            try:
                socket.send_fds(spare.sock, [request(msg, nbytes)], [self.module_fd(module), *buffer_fds])
            except OSError:
                pass  # it is gone already: its status says why
            reply, why, status = self._wait(spare, timeout_s)
        finally:
            spare.close()
        out = self._log_since(offset)
        if why is not None:
            raise LaunchError(why)
        if reply is None or status != 0:  # no reply, or it died after one (by a signal, a sanitizer's exit)
            raise LaunchError(crash_message(os.waitstatus_to_exitcode(status), out, filename))
        report = asan_summary(out, filename) or tsan_summary(out, filename)
        if report:  # a sanitizer's report after a reply (kernel code may reply for itself)
            raise LaunchError(report)
        return reply, out

    def _wait(self, spare: _Spare, timeout_s: float) -> tuple[dict | None, str | None, int]:
        """Until the launch process is gone (its pidfd says so: every thread of it has ended):
        (its reply or None, why it was stopped or None, its wait status as the zygote reports it;
        -1 when it was stopped). Its socket is read to the end: a second message is kernel code's."""
        deadline = time.monotonic() + timeout_s
        cap = memory_limit()
        self._awaiting = spare.pid
        reply, why, exited, sock_open = None, None, False, True
        next_watch = time.monotonic() + WATCH_S
        while True:
            now = time.monotonic()
            if now > deadline + ZYGOTE_TIMEOUT_S:  # killed long ago, never reported reaped
                self.kill()
                return None, "the CPU executor stopped answering (stopped)", -1
            if exited and why is not None:
                return reply, why, -1
            if spare.pid in self.statuses and not sock_open:
                return reply, why, self.statuses.pop(spare.pid)
            watching = not exited and why is None
            # The zygote's messages are read only once the process is gone (its status says
            # whether a reply was the runtime's): each wake-up of this process costs the launch time.
            ready, _, _ = select.select([*([self.ctl] if exited else []), *([spare.sock] if sock_open else []),
                                         *([] if exited else [spare.pidfd])], [], [],
                                        min(WATCH_S, max(0.0, deadline - now)) if watching else WATCH_S)
            if spare.sock in ready:
                try:
                    data = spare.sock.recv(MAX_REPLY + 1)
                except OSError:
                    data = b""
                if data and reply is None and why is None:
                    try:
                        reply = parse_reply(data)
                    except LaunchError as e:
                        why = str(e)
                        spare.kill()
                elif data and why is None:  # the runtime replies once, then exits: this is kernel code's
                    why = ("the launch replied more than once: kernel code wrote on the executor's socket, "
                           "so no reply of it is believed")
                    spare.kill()
                elif not data:
                    sock_open = False  # closed: the process is ending
            if self.ctl in ready:
                self._from_zygote(0)
            if spare.pidfd in ready:
                exited = True
            if not watching or time.monotonic() < next_watch:
                continue
            next_watch = time.monotonic() + WATCH_S
            rss, threads = usage(spare.pid)
            if rss > cap:
                why = f"the kernel used more than {cap / 2**30:.1f} GiB of memory (stopped)"
            elif threads > self.threads:
                why = f"the kernel started more than {self.threads} threads (stopped)"
            elif time.monotonic() >= deadline:
                why = (f"timed out after {timeout_s:g} s (an infinite loop, or threads of a block "
                       "spin-waiting on each other, which the CPU backend cannot run)")
            if why is not None:
                spare.kill()

    def module_fd(self, path: Path) -> int:
        """A sealed memfd with the compiled module (the sandboxed launch cannot open the cache),
        kept for the next launches of it."""
        key = str(path)
        fd = self._modules.get(key)
        if fd is not None:
            self._modules.move_to_end(key)
            return fd
        fd = os.memfd_create("astra-module", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            with open(path, "rb") as f:
                view = memoryview(f.read())
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
                        | fcntl.F_SEAL_SEAL)
        except OSError:
            os.close(fd)
            raise
        self._modules[key] = fd
        while len(self._modules) > MODULE_FDS:
            os.close(self._modules.popitem(last=False)[1])
        return fd

    def close(self) -> None:
        self.kill()
        for fd in self._modules.values():
            os.close(fd)
        self._modules.clear()
        self.tmp.cleanup()


def crash_message(rc: int, output: str, filename: str = "") -> str:
    if rc < 0:
        try:
            what = signal.Signals(-rc).name
        except ValueError:
            what = f"signal {-rc}"
    else:
        what = f"exit status {rc}"
    if rc == -signal.SIGXCPU:
        return "CPU time limit exceeded (an infinite loop?)"
    if rc == -signal.SIGSYS:
        return ("stopped by the sandbox: the kernel code tried to start a program or a process, or to "
                "debug another process (kernel code may not)")
    if rc == CHILD_FAILED:
        said = [l for l in output.splitlines() if l.startswith("astra: executor:")]
        return "the CPU executor failed: " + (said[-1][len("astra: executor: "):] if said else "unknown reason")
    if rc == SANDBOX_EXIT:
        said = [l for l in output.splitlines() if l.startswith("astra: sandbox:")]
        return ("the CPU backend cannot sandbox kernel code on this system, so it runs none: "
                + (said[-1][len("astra: sandbox: "):] if said else "unknown reason")
                + f" (set {sandbox.OPT_OUT_ENV}=1 to run kernels unsandboxed, at your own risk)")
    if rc == -signal.SIGXFSZ:
        return f"the kernel printed more than {FILE_LIMIT >> 20} MiB (printf in a loop?)"
    report = asan_summary(output, filename) or tsan_summary(output, filename)
    if report:
        return report
    lines = output.splitlines()
    notes = [l.strip() for l in lines if l.startswith("astra:") or "Assertion" in l]
    printed = [l for l in lines if l.strip() and l not in notes and not l.startswith("astra:")]
    detail = "; ".join(notes[-4:]) if notes else output.strip()[-600:]
    msg = f"the kernel crashed ({what})" + (f": {detail}" if detail else "")
    if notes and printed:
        msg += " — the kernel printed before: " + " | ".join(printed[-3:])[-300:]
    return msg
