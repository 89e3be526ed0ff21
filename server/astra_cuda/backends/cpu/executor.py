"""The CPU backend's executor: a child process that loads compiled kernel modules and runs
launches, so that a segfault, assert, __trap() or infinite loop kills only it.

Run as a script (stdlib only, plus pyseccomp from the path the parent gives). It sandboxes
itself before it takes any request (sandbox.py: resource limits, Landlock, seccomp), so a
module's static constructors and dynamic initialisers — which run when it is loaded — run
inside the sandbox too. It talks JSON over a Unix socket inherited as a file descriptor; a
module arrives as a memfd (it cannot open the compile cache), buffers as memfds mapped shared,
so results written by the kernel are visible to the parent without copies.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import resource
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's own folder out
import sandbox  # noqa: E402

MAX_MSG = 1 << 20
MEMORY_LIMIT = 16 << 30   # address space (not with a sanitizer: they reserve terabytes of
                          # shadow; the parent watches those executors' resident memory instead)
FILE_LIMIT = 64 << 20     # kernel printf output goes to the log
OPEN_FILES = 1024         # buffers arrive as descriptors (closed once mapped), modules stay open
CPU_LIFETIME_S = 3600     # hard CPU limit of one executor; each launch gets a soft limit within it
# Libraries every module links: loaded before the sandbox, so loading a module opens no file
# but its own memfd. Anything else is read from the system's library directories.
PRELOAD = ("libstdc++.so.6", "libgcc_s.so.1", "libm.so.6")
LIBRARY_DIRS = ("/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib",
                "/etc/ld.so.cache")


def _python_files() -> tuple[str, ...]:
    """The interpreter and its extension modules: the sanitizers' symbolizer reads every loaded
    object (it gives up on all frames when it cannot open the main executable)."""
    import _ctypes
    import sysconfig

    out = [os.path.realpath(sys.executable), os.path.dirname(os.path.realpath(_ctypes.__file__))]
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        out.append(os.path.realpath(sysconfig.get_config_var("LIBDIR") or ""))
    return tuple(p for p in out if p)


CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def _private_network() -> None:
    """An empty network namespace where the OS lets us have one (seccomp refuses sockets anyway)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)


def restrict(address_limit: bool, required: bool) -> list[str]:
    """Before any kernel code is loaded: limits, then Landlock (its own /proc entries for the
    sanitizers' reports, the system libraries read-only, nothing else), then seccomp. Returns
    what could not be applied (only when the user opted out: else that raises)."""
    if address_limit:
        sandbox.limit(resource.RLIMIT_AS, MEMORY_LIMIT)
    sandbox.limit(resource.RLIMIT_FSIZE, FILE_LIMIT)
    sandbox.limit(resource.RLIMIT_CORE, 0)
    sandbox.limit(resource.RLIMIT_NOFILE, OPEN_FILES)
    sandbox.limit(resource.RLIMIT_CPU, CPU_LIFETIME_S)
    _private_network()
    for lib in PRELOAD:
        try:
            ctypes.CDLL(lib)
        except OSError:
            pass  # then it is found in LIBRARY_DIRS when a module needs it
    rules = [(p, sandbox.READ_EXEC) for p in LIBRARY_DIRS + _python_files()]
    rules.append((f"/proc/{os.getpid()}", sandbox.READ))
    missing = []
    for step in (sandbox.seccomp_library, lambda: sandbox.restrict_files(rules), sandbox.forbid_syscalls):
        try:
            step()
        except sandbox.SandboxError as e:
            if required:
                raise
            missing.append(str(e))
    return missing


def _recv(sock: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, 64)
    if not msg:
        raise EOFError
    return json.loads(msg.decode()), fds


def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj).encode())


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


def _limit_cpu(seconds: float) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    total = used.ru_utime + used.ru_stime
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    want = int(total + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (want, hard))


def serve(sock: socket.socket) -> None:
    libs: dict[str, ctypes.CDLL] = {}
    bufs: dict[int, _Buffer] = {}
    last: ctypes.CDLL | None = None  # the module launched last keeps its fiber stacks
    while True:
        try:
            req, fds = _recv(sock)
        except EOFError:
            return
        op = req["op"]
        if op == "free":
            for i in req["ids"]:
                b = bufs.pop(i, None)
                if b is not None:
                    del b.view
                    b.map.close()
            _send(sock, {"ok": True})
            continue
        if op == "ping":
            _send(sock, {"ok": True, "pid": os.getpid()})
            continue
        # op == "launch"
        for (bid, nbytes), fd in zip(req["new_buffers"], fds):
            bufs[bid] = _Buffer(fd, nbytes)
        key = req["module"]
        lib = libs.get(key)
        if lib is None:
            if len(fds) <= len(req["new_buffers"]):
                _send(sock, {"ok": False, "module_loaded": False,
                             "error": "the compiled module was not sent; compile again"})
                continue
            # The descriptor stays open: the sanitizers' symbolizers read the module through it.
            try:
                lib = libs[key] = ctypes.CDLL(f"/proc/self/fd/{fds[-1]}")
            except OSError as e:
                os.close(fds[-1])
                _send(sock, {"ok": False, "module_loaded": False,
                             "error": f"cannot load the compiled module ({e}); compile again"})
                continue
            lib.astra_launch.restype = ctypes.c_int
        if last is not None and last is not lib:
            last.astra_trim()
        last = lib
        problem = _check_signature(lib, req)
        if problem:
            _send(sock, {"ok": False, "error": problem})
            continue
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
        _limit_cpu(req["cpu_s"])
        rc = lib.astra_launch(entry, argv, ctypes.c_int(len(req["args"])), sizes,
                              ctypes.c_int(req["copy_buffers"]), grid, block,
                              ctypes.c_ulonglong(req["shmem"]), ctypes.c_int(req["order"]),
                              ctypes.c_int(req["rounding"]), ctypes.c_ulonglong(req["seed"]),
                              ctypes.c_int(req["workers"]),
                              ctypes.c_int(req["stack_kib"]), ctypes.c_int(req["handlers"]),
                              err, ctypes.c_int(len(err)))
        sys.stdout.flush()
        if rc == 0:
            _send(sock, {"ok": True})
        else:
            _send(sock, {"ok": False, "error": err.value.decode(errors="replace")})


def main() -> None:
    fd, limit_mode = int(sys.argv[1]), sys.argv[2]
    sys.path.extend(sys.argv[3:])  # where pyseccomp is (the child runs with -S -I)
    sock = socket.socket(fileno=fd)
    try:
        missing = restrict(limit_mode != "--no-address-limit", os.environ.get(sandbox.OPT_OUT_ENV) != "1")
    except sandbox.SandboxError as e:
        sys.stderr.write(f"astra: sandbox: {e}\n")
        sys.exit(71)
    for m in missing:
        sys.stderr.write(f"astra: running WITHOUT part of the sandbox ({sandbox.OPT_OUT_ENV}=1): {m}\n")
    serve(sock)


if __name__ == "__main__":
    main()
