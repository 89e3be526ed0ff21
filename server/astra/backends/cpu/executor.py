"""The CPU backend's executor: a child process that loads compiled kernel modules and runs
launches, so that a segfault, assert, __trap() or infinite loop kills only it.

Run as a script (stdlib only, fast to start). It talks JSON over a Unix socket inherited as a
file descriptor; buffer memory arrives as memfd file descriptors (SCM_RIGHTS) and is mapped
shared, so results written by the kernel are visible to the parent without copies.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import resource
import socket
import sys

MAX_MSG = 1 << 20
MEMORY_LIMIT = 16 << 30  # address space (not with ASan, which reserves terabytes of shadow)
FILE_LIMIT = 64 << 20    # kernel printf output goes to the log
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000


def restrict(address_limit: bool) -> None:
    """Before any kernel code is loaded: resource limits, and no network where the OS lets
    an unprivileged or root process have a private network namespace."""
    if address_limit:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            libc.unshare(CLONE_NEWUSER | CLONE_NEWNET)
    except (OSError, AttributeError):
        pass


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
        path = req["module"]
        lib = libs.get(path)
        if lib is None:
            try:
                lib = libs[path] = ctypes.CDLL(path)
            except OSError as e:
                _send(sock, {"ok": False, "error": f"cannot load the compiled module ({e}); compile again"})
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
                              ctypes.c_ulonglong(req["seed"]), ctypes.c_int(req["workers"]),
                              ctypes.c_int(req["stack_kib"]), ctypes.c_int(req["handlers"]),
                              err, ctypes.c_int(len(err)))
        sys.stdout.flush()
        if rc == 0:
            _send(sock, {"ok": True})
        else:
            _send(sock, {"ok": False, "error": err.value.decode(errors="replace")})


def main() -> None:
    restrict(address_limit=sys.argv[2] != "--no-address-limit")
    fd = int(sys.argv[1])
    sock = socket.socket(fileno=fd)
    serve(sock)


if __name__ == "__main__":
    main()
