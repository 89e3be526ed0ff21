"""The CPU backend's executor: a small process that keeps one fresh, sandboxed process ready
for the next launch and starts another when it has served one, so that nothing of one launch —
a thread it left running, a mapping, an exit handler, a forged reply — meets another launch, and
a segfault, assert, __trap() or infinite loop ends only that launch.

Run as a script (stdlib only, plus pyseccomp from the path the parent gives). The long-lived
process (the *zygote*) never loads kernel code and reads nothing from anyone. Once, at start:
resource limits, the libraries every module links, libseccomp's bindings, the folders the
sandbox lets a launch read (opened here, before it gives up root where it has it), a user
namespace of its own (a private network, and RLIMIT_NPROC counted within it: a thread flood stops
at a few dozen), and a parent-death signal. Then, in a loop, it forks a *launch process*, tells
the parent {"spare": pid} with the parent's end of that process's socket and a pidfd for it,
waits for it to end and tells {"pid": pid, "status": wait status}.

A launch process puts itself in a process group of its own, dies with the zygote, applies
Landlock and the seccomp allow-list (sandbox.py) — all before it is needed, so none of it costs
a launch any time — then takes one request {"op": "launch", ...} with descriptors [module memfd,
buffer memfds...], maps the buffers, loads the module (its static constructors run inside the
sandbox), launches, answers {"ok": true} or {"ok": false, "error": "..."} and ends with `_exit`
(no exit handler of the module runs). The answer is the launch's word about itself, which the
parent validates and trusts no more than the launch's outputs.
"""
from __future__ import annotations

import array  # noqa: F401 - socket.recv_fds needs it; imported while the interpreter's files are readable
import ctypes
import gc
import json
import mmap
import os
import resource
import signal
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's own folder out
import sandbox  # noqa: E402

MAX_MSG = 1 << 20
MAX_FDS = 250             # descriptors per launch (SCM_RIGHTS carries at most 253)
MEMORY_LIMIT = 16 << 30   # address space (not with a sanitizer: they reserve terabytes of
                          # shadow; the parent watches those executors' resident memory instead)
FILE_LIMIT = 64 << 20     # kernel printf output goes to the log
OPEN_FILES = 1024         # buffers and the module arrive as descriptors
CPU_LIFETIME_S = 3600     # hard CPU limit of a launch; each launch gets its own limit within it
NOBODY = 65534            # the user a root-started executor runs as (RLIMIT_NPROC does not bind root)
SANDBOX_EXIT = 71         # could not sandbox itself
CHILD_FAILED = 70         # the launch's own Python failed (not the kernel): never a reply
# Libraries every module links: loaded before the sandbox, so loading a module opens no file
# but its own memfd. Anything else is read from the system's library directories.
PRELOAD = ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6")
LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib",
                "/etc/ld.so.cache")
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def _python_files() -> tuple[str, ...]:
    """The interpreter and its extension modules: the sanitizers' symbolizer reads every loaded
    object (it gives up on all frames when it cannot open the main executable)."""
    import _ctypes
    import sysconfig

    out = [os.path.realpath(sys.executable), os.path.dirname(os.path.realpath(_ctypes.__file__))]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        out.append(os.path.realpath(sysconfig.get_config_var("LIBDIR") or ""))
    return tuple(p for p in out if p)


def _own_namespace(threads: int) -> list[str]:
    """A user namespace of its own with an empty network, and at most `threads` threads in it
    (zygote, launch and the launch's threads together): RLIMIT_NPROC counts per user and user
    namespace (Linux >= 5.14) and never binds root, so a root-started executor becomes `nobody`
    first. Returns what could not be had (the parent then watches the thread count alone)."""
    libc = ctypes.CDLL(None, use_errno=True)
    missing = []
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        sandbox.limit(resource.RLIMIT_NPROC, threads)
        return missing
    if libc.unshare(CLONE_NEWUSER) == 0:
        sandbox.limit(resource.RLIMIT_NPROC, threads)
    else:
        missing.append(f"no user namespace ({os.strerror(ctypes.get_errno())}): threads are only watched")
    if libc.unshare(CLONE_NEWNET) != 0:
        missing.append("no private network namespace (seccomp refuses sockets anyway)")
    return missing


class Prepared:
    """What the zygote readies once for every launch process: the sandbox's folders, opened, and
    the seccomp program (None where the user opted out of a part that is not available)."""

    def __init__(self, opened: list[tuple[int, int]], program: bytes | None):
        self.opened = opened
        self.program = program


def prepare(address_limit: bool, threads: int, parent: int, required: bool) -> Prepared:
    """The zygote's one-time set-up (see the module docstring)."""
    if address_limit:
        sandbox.limit(resource.RLIMIT_AS, MEMORY_LIMIT)
    sandbox.limit(resource.RLIMIT_FSIZE, FILE_LIMIT)
    sandbox.limit(resource.RLIMIT_CORE, 0)
    sandbox.limit(resource.RLIMIT_NOFILE, OPEN_FILES)
    sandbox.limit(resource.RLIMIT_CPU, CPU_LIFETIME_S)
    for lib in PRELOAD:
        try:
            ctypes.CDLL(lib)
        except OSError:
            pass  # then it is found in LIBRARY_DIRS when a module needs it
    program = None
    try:
        program = sandbox.compiled_filter()  # pyseccomp looks libseccomp up with ldconfig: now
    except sandbox.SandboxError as e:
        if required:
            raise
        _unsandboxed(e)
    opened = sandbox.open_rules([(p, sandbox.READ_EXEC) for p in LIBRARY_DIRS + _python_files()])
    sandbox.landlock_abi()  # its ctypes calls made once here, not in every launch process
    for m in _own_namespace(threads):
        sys.stderr.write(f"astra: executor: {m}\n")
    sandbox.die_with_parent(parent)  # after the last change of credentials, which clears it
    return Prepared(opened, program)


def _unsandboxed(e: Exception) -> None:
    sys.stderr.write(f"astra: running WITHOUT part of the sandbox ({sandbox.OPT_OUT_ENV}=1): {e}\n")


def confine_launch(ready: Prepared, zygote: int, required: bool) -> None:
    """In a launch process, before it takes its request: its own process group (its kill(0)
    reaches itself only), death with the zygote, Landlock (the system's libraries, the
    interpreter, its own /proc entries for the sanitizers' reports), seccomp."""
    os.setpgid(0, 0)
    sandbox.die_with_parent(zygote)
    pid = os.getpid()
    rules = ready.opened + sandbox.open_rules([(f"/proc/{pid}", sandbox.READ)])

    def seccomp() -> None:
        if ready.program is None:
            raise sandbox.SandboxError(1, "no seccomp filter (libseccomp is not usable)")
        sandbox.load_compiled(ready.program, pid)

    for step in (lambda: sandbox.restrict_opened(rules), seccomp):
        try:
            step()
        except sandbox.SandboxError as e:
            if required:
                raise
            _unsandboxed(e)
    for fd, _ in rules:
        os.close(fd)


def limit_cpu(seconds: float) -> None:
    """The launch's CPU time (the process is fresh: what it used so far is its start-up)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    want = int(used.ru_utime + used.ru_stime + seconds) + 2
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (want, want))


class _Buffer:
    def __init__(self, fd: int, nbytes: int):
        self.map = mmap.mmap(fd, max(nbytes, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        os.close(fd)
        self.view = ctypes.c_char.from_buffer(self.map)
        self.address = ctypes.addressof(self.view)


def _check_signature(lib: ctypes.CDLL, req: dict) -> str | None:
    sizes = (ctypes.c_ulonglong * 64)()
    kinds = (ctypes.c_int * 64)()
    n = getattr(lib, req["sig"])(sizes, kinds, 64)
    args = req["args"]
    if n != len(args):
        return f"the kernel takes {n} argument(s), {len(args)} given"
    for i, a in enumerate(args):
        if a[0] == "buf" and kinds[i] != 1:
            return f"argument {i + 1}: the kernel takes a value ({sizes[i]} bytes) here, a buffer was given"
        if a[0] == "val" and kinds[i] == 1:
            return f"argument {i + 1}: the kernel takes a pointer here, a scalar was given"
        if a[0] == "val" and len(a[1]) // 2 != sizes[i]:
            return (f"argument {i + 1}: the kernel parameter is {sizes[i]} bytes, "
                    f"the scalar given is {len(a[1]) // 2} bytes")
    return None


def run_launch(req: dict, module_fd: int, buffer_fds: list[int]) -> dict:
    """Map the buffers, load the module (its constructors run now, sandboxed), launch."""
    bufs = {bid: _Buffer(fd, nbytes) for (bid, nbytes), fd in zip(req["buffers"], buffer_fds)}
    # The descriptor stays open: the sanitizers' symbolizers read the module through it.
    try:
        lib = ctypes.CDLL(f"/proc/self/fd/{module_fd}")
    except OSError as e:
        return {"ok": False, "error": f"cannot load the compiled module ({e}); compile again"}
    lib.astra_launch.restype = ctypes.c_int
    problem = _check_signature(lib, req)
    if problem:
        return {"ok": False, "error": problem}
    holders = []
    argv = (ctypes.c_void_p * max(1, len(req["args"])))()
    sizes = (ctypes.c_ulonglong * max(1, len(req["args"])))()
    for i, a in enumerate(req["args"]):
        if a[0] == "buf":
            h = ctypes.c_void_p(bufs[a[1]].address)
            sizes[i] = a[2]
        else:
            raw = bytes.fromhex(a[1])
            h = ctypes.create_string_buffer(raw, max(len(raw), 16))
            sizes[i] = 0
        holders.append(h)
        argv[i] = ctypes.addressof(h)
    entry = ctypes.cast(getattr(lib, req["entry"]), ctypes.c_void_p)
    grid = (ctypes.c_uint * 3)(*req["grid"])
    block = (ctypes.c_uint * 3)(*req["block"])
    err = ctypes.create_string_buffer(8192)
    rc = lib.astra_launch(entry, argv, ctypes.c_int(len(req["args"])), sizes,
                          ctypes.c_int(req["copy_buffers"]), grid, block,
                          ctypes.c_ulonglong(req["shmem"]), ctypes.c_int(req["order"]),
                          ctypes.c_int(req["rounding"]), ctypes.c_ulonglong(req["seed"]),
                          ctypes.c_int(req["workers"]),
                          ctypes.c_int(req["stack_kib"]), ctypes.c_int(req["handlers"]),
                          err, ctypes.c_int(len(err)))
    if rc == 0:
        return {"ok": True}
    return {"ok": False, "error": err.value.decode(errors="replace")}


def _launch_process(ctl: socket.socket, sock: socket.socket, ready: Prepared, zygote: int,
                    required: bool) -> None:
    """A launch process (see the module docstring): serves one launch, never returns."""
    code = CHILD_FAILED
    try:
        ctl.close()  # the zygote's channel is the parent's only
        try:
            confine_launch(ready, zygote, required)
        except sandbox.SandboxError as e:
            sys.stderr.write(f"astra: sandbox: {e}\n")
            code = SANDBOX_EXIT
            raise
        msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, MAX_FDS + 1)
        if not msg:
            code = 0
            return  # the parent closed: no launch
        req = json.loads(msg.decode())
        limit_cpu(req["cpu_s"])
        reply = run_launch(req, fds[0], fds[1:])
        sys.stdout.flush()
        sock.sendall(json.dumps(reply).encode())
        code = 0
    except BaseException as e:  # noqa: BLE001 - the launch's own failure, reported by its status
        if code == CHILD_FAILED:
            sys.stderr.write(f"astra: executor: {type(e).__name__}: {e}\n")
    finally:
        os._exit(code)  # never through exit handlers (a module's may never return)


def _spawn(ctl: socket.socket, ready: Prepared, required: bool) -> int:
    """Fork a launch process and announce it to the parent; its pid (0: the parent is gone)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        mine.close()
        _launch_process(ctl, theirs, ready, zygote, required)
    theirs.close()
    pidfd = os.pidfd_open(pid)
    try:
        socket.send_fds(ctl, [json.dumps({"spare": pid}).encode()], [mine.fileno(), pidfd])
    except OSError:
        os.kill(pid, signal.SIGKILL)
        return 0
    finally:
        mine.close()
        os.close(pidfd)
    return pid


def serve(ctl: socket.socket, ready: Prepared, required: bool) -> None:
    """The zygote's loop: two launch processes ready or in use at a time, the older one reaped
    and reported before the next is started — so the next launch never waits for a fork."""
    gc.disable()  # nothing here makes cycles; a collection in a launch process would touch (copy) every page
    gc.freeze()
    current = _spawn(ctl, ready, required)
    while current:
        following = _spawn(ctl, ready, required)
        _, status = os.waitpid(current, 0)
        try:
            ctl.sendall(json.dumps({"pid": current, "status": status}).encode())
        except OSError:
            return
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == SANDBOX_EXIT:
            os._exit(SANDBOX_EXIT)  # the next one cannot sandbox itself either
        current = following


def main() -> None:
    fd, limit_mode, threads, parent = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sys.path.extend(sys.argv[5:])  # where pyseccomp is (the child runs with -S -I)
    ctl = socket.socket(fileno=fd)
    required = os.environ.get(sandbox.OPT_OUT_ENV) != "1"
    try:
        ready = prepare(limit_mode != "--no-address-limit", threads, parent, required)
    except (sandbox.SandboxError, OSError) as e:
        sys.stderr.write(f"astra: sandbox: {e}\n")
        sys.exit(SANDBOX_EXIT)
    serve(ctl, ready, required)
    os._exit(0)


if __name__ == "__main__":
    main()
