"""The sandbox for host code that Astra did not write: the CPU backend's launch processes
(which load compiled kernel modules: their static constructors run at dlopen) and the compiler
runs over a user's source. Linux only, unprivileged, no setuid helper:

- Landlock (kernel >= 5.13, through its three system calls via ctypes here, and in the executor,
  backends/cpu/runtime/astra_executor.cpp, with the same rights) confines the filesystem: a launch may open
  nothing but the system's libraries, its own /proc entries (the sanitizers read their maps) and
  the module it is handed as a memfd; a compiler run may read the system's and CUDA's headers and
  libraries and write only its build directory. Where the kernel has them (Landlock ABI >= 4 and
  >= 6), TCP, abstract Unix sockets and signals to other processes are refused too.
  $ASTRA_LANDLOCK_ABI caps the ABI asked for, as an older kernel would offer (the tests).
- seccomp-bpf (libseccomp through `pyseccomp`, compiled here once; each launch process loads
  it): a system-call allow-list. No execve, no new processes (clone only for threads), no
  sockets, no opening for writing, no ptrace, signals only to itself — on every kernel, since
  Landlock scopes signals only from ABI 6 on; anything not listed fails with EPERM.
- no_new_privs, resource limits (address space, CPU time, file size, open files, threads, no
  core dumps), an empty environment, a process group of its own.

Where the kernel lacks Landlock or seccomp, `probe()` says why and the CPU backend refuses to
run kernel code, unless the user opts out explicitly with ASTRA_UNSAFE_NO_SANDBOX=1.

This file is also run as a script (stdlib only),
`python sandbox.py --parent PID --read DIR ... --write DIR ... -- PROGRAM ARGS`, to confine a
compiler run, or with `--seccomp HEX --memory N --file-size N` a host program of the user's (the
constructor program: compile/hostprog.py), whose system-call filter it loads just before the
program runs (`exec_filtered`). Long because the script must stand alone: run with `-S -I`, it
cannot import its neighbours.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import stat
import sys
from typing import Any

OPT_OUT_ENV = "ASTRA_UNSAFE_NO_SANDBOX"
ABI_CAP_ENV = "ASTRA_LANDLOCK_ABI"
WRAPPER_FAILED = 126  # the compiler wrapper's exit status when it could not confine the run

# ---- Landlock (linux/landlock.h) -----------------------------------------------------------

_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_WRITES_V1 = sum(1 << i for i in range(4, 13))  # remove dir/file, make char/dir/reg/sock/fifo/block/sym
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
READ = FS_READ_FILE | FS_READ_DIR
READ_EXEC = READ | FS_EXECUTE
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
PR_SET_NO_NEW_PRIVS = 38


class SandboxError(OSError):
    """The sandbox could not be applied: nothing may run."""


_LIBC: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    """libc through ctypes, made once (a CDLL object costs ~0.1 ms: every launch process
    confines itself with a few calls)."""
    if not _LIBC:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _LIBC.append(libc)
    return _LIBC[0]


def _syscall_numbers() -> tuple[int, int, int] | None:
    return _SYS.get(platform.machine())


def kernel_landlock_abi() -> int:
    """The Landlock ABI version the kernel offers (0: none)."""
    nums = _syscall_numbers()
    if nums is None:
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(nums[0]), None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(v) if v > 0 else 0


def abi_cap() -> int | None:
    """$ASTRA_LANDLOCK_ABI: use at most this Landlock ABI, as an older kernel would offer (the
    tests run the sandbox under every ABI from 1 on); None when unset or not a number >= 1."""
    v = os.environ.get(ABI_CAP_ENV, "")
    return int(v) if v.isdigit() and int(v) >= 1 else None


def landlock_abi() -> int:
    """The Landlock ABI the sandbox uses: the kernel's, capped by $ASTRA_LANDLOCK_ABI (0: none)."""
    abi = kernel_landlock_abi()
    cap = abi_cap()
    return min(abi, cap) if cap is not None else abi


def fs_rights(abi: int) -> int:
    """Every filesystem right the ABI can restrict."""
    rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | _FS_WRITES_V1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def write_rights(abi: int) -> int:
    return fs_rights(abi) & ~(FS_EXECUTE | READ)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def open_rules(rules: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """(path, rights) -> (O_PATH descriptor, rights) for `restrict_opened`, dropping paths that
    do not exist; a file (not a folder) keeps only the rights a file can have. Opening them
    early lets a process confine itself later without the right to reach these paths by name."""
    out = []
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
        out.append((fd, rights))
    return out


def restrict_files(rules: list[tuple[str, int]], *, net: bool = True, scope: bool = True) -> int:
    """Confine this process (and what it starts) to `rules` — (path, rights) pairs; a path that
    does not exist is skipped — and, where the ABI allows, refuse TCP (`net`) and abstract Unix
    sockets and signals to processes outside the sandbox (`scope`). Returns the ABI used."""
    opened = open_rules(rules)
    try:
        return restrict_opened(opened, net=net, scope=scope)
    finally:
        for fd, _ in opened:
            os.close(fd)


def restrict_opened(opened: list[tuple[int, int]], *, net: bool = True, scope: bool = True) -> int:
    """`restrict_files` over folders and files already opened (`open_rules`)."""
    abi = landlock_abi()
    if abi < 1:
        raise SandboxError(errno.ENOSYS, "Landlock is not available in this kernel")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    create, add_rule, restrict_self = _syscall_numbers()  # type: ignore[misc]
    handled = fs_rights(abi)
    attr = (ctypes.c_uint64 * 3)(handled, 0, 0)
    size = 8
    if abi >= 4 and net:
        attr[1] = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if abi >= 6 and scope:
        attr[2] = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    fd = libc.syscall(ctypes.c_long(create), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        e = ctypes.get_errno()
        raise SandboxError(e, f"landlock_create_ruleset: {os.strerror(e)}")
    try:
        for pfd, rights in opened:
            rule = _PathBeneath(rights & handled, pfd)
            if libc.syscall(ctypes.c_long(add_rule), ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                            ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                e = ctypes.get_errno()
                raise SandboxError(e, f"landlock_add_rule({os.readlink(f'/proc/self/fd/{pfd}')}): {os.strerror(e)}")
        no_new_privs()
        if libc.syscall(ctypes.c_long(restrict_self), ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            e = ctypes.get_errno()
            raise SandboxError(e, f"landlock_restrict_self: {os.strerror(e)}")
    finally:
        os.close(fd)
    return abi


def no_new_privs() -> None:
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise SandboxError(e, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(e)}")


# ---- seccomp (the executor's system-call allow-list) -------------------------------------

# Allowed as they are: memory, threads' synchronisation, time, signals to itself, I/O on the
# descriptors it already holds (its socket to the parent, its log, buffer and module memfds).
ALLOWED = (
    "read", "write", "readv", "writev", "pread64", "pwrite64", "lseek", "close", "fstat",
    "mmap", "munmap", "mprotect", "mremap", "madvise", "brk", "msync", "mincore",
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq", "set_tid_address",
    "sched_yield", "sched_getaffinity", "getcpu", "getpid", "gettid", "getppid", "getuid", "geteuid",
    "getgid", "getegid", "getrusage", "getrlimit", "uname", "sysinfo",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigtimedwait",
    "sigaltstack", "restart_syscall", "exit", "exit_group", "getrandom",
    "recvmsg", "sendmsg", "recvfrom", "sendto", "poll", "ppoll", "select", "pselect6",
    "dup", "dup3", "arch_prctl", "membarrier", "getcwd",
)
# Refused outright, so that the attempt is fatal rather than a quiet EPERM a kernel might
# ignore: running programs, processes, debugging other processes.
FATAL = ("execve", "execveat", "fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev")

CLONE_THREAD = 0x00010000
# With CLONE_THREAD, still refused: a parent other than its own, tracing, and new namespaces.
CLONE_REFUSED = (0x00008000 | 0x00002000 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                 | 0x20000000 | 0x40000000)  # PARENT, PTRACE, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
# fcntl: descriptor flags, duplicates, status flags and seals may be read; nothing that makes the
# kernel signal a process (F_SETOWN/_EX, F_SETSIG, F_SETLEASE, F_NOTIFY, O_ASYNC) — Landlock scopes
# signals only from ABI 6 (Linux 6.12) on — and no locks or seals on descriptors it shares.
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC, F_GET_SEALS = 0, 1, 2, 3, 4, 1030, 1034
O_ASYNC = 0o20000
AT_EMPTY_PATH = 0x1000
O_WRITE_MASK = 0o3 | 0o100 | 0o1000 | 0o2000 | 0o20000000  # O_ACCMODE, CREAT, TRUNC, APPEND, __O_TMPFILE


def seccomp_library() -> Any:
    """pyseccomp (it finds libseccomp with ldconfig: import it before the filesystem is closed)."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as e:
        raise SandboxError(errno.ENOSYS, f"libseccomp is not usable ({e})")
    return pyseccomp


# A host program (the constructor program of compile/hostprog.py) computes and prints: besides the
# executor's refusals, any socket is fatal — it has no use for one, and a kill says so clearly.
NETWORK = ("socket", "socketpair", "connect", "bind", "listen", "accept", "accept4")


def syscall_filter(pid: int, exec_address: int | None = None) -> Any:
    """The executor's allow-list for the process `pid` (a libseccomp filter, not loaded). With
    `exec_address`, a host program's: the same list, sockets fatal, and one execve allowed — of
    the path at that address (the loader's, `exec_filtered`; any other kills)."""
    sc = seccomp_library()
    f = sc.SyscallFilter(sc.ERRNO(errno.EPERM))

    def rule(action: Any, name: str, *args: Any) -> None:
        try:
            f.add_rule(action, name, *args)
        except (OSError, RuntimeError, ValueError):
            pass  # a system call this architecture does not have

    for name in ALLOWED:
        rule(sc.ALLOW, name)
    fatal = FATAL if exec_address is None else (*(n for n in FATAL if n != "execve"), *NETWORK)
    for name in fatal:
        rule(sc.KILL_PROCESS, name)
    if exec_address is not None:
        rule(sc.ALLOW, "execve", sc.Arg(0, sc.EQ, exec_address))
        rule(sc.KILL_PROCESS, "execve", sc.Arg(0, sc.NE, exec_address))
    # threads, never processes (glibc falls back from clone3 to clone on ENOSYS)
    rule(sc.ALLOW, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD | CLONE_REFUSED, CLONE_THREAD))
    rule(sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    for cmd in (F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_DUPFD_CLOEXEC, F_GET_SEALS):
        rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, cmd))
    rule(sc.ALLOW, "fcntl", sc.Arg(1, sc.EQ, F_SETFL), sc.Arg(2, sc.MASKED_EQ, O_ASYNC, 0))
    rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # opening read-only (dlopen of a module memfd through /proc/self/fd); Landlock decides what
    rule(sc.ALLOW, "openat", sc.Arg(2, sc.MASKED_EQ, O_WRITE_MASK, 0))
    rule(sc.ALLOW, "open", sc.Arg(1, sc.MASKED_EQ, O_WRITE_MASK, 0))  # the sanitizers' own open
    rule(sc.ALLOW, "newfstatat", sc.Arg(3, sc.MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH))
    rule(sc.ALLOW, "statx", sc.Arg(2, sc.MASKED_EQ, AT_EMPTY_PATH, AT_EMPTY_PATH))
    rule(sc.ALLOW, "readlinkat")  # the sanitizers resolve /proc/self/exe; Landlock does not gate it
    # limits and signals: its own only
    rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, 0))
    rule(sc.ALLOW, "prlimit64", sc.Arg(0, sc.EQ, pid))
    rule(sc.ALLOW, "tgkill", sc.Arg(0, sc.EQ, pid))
    rule(sc.ALLOW, "kill", sc.Arg(0, sc.EQ, pid))
    rule(sc.ALLOW, "kill", sc.Arg(0, sc.EQ, 0))  # its own group: the executor is the only process in it
    rule(sc.ALLOW, "prctl", sc.Arg(0, sc.EQ, 15))  # PR_SET_NAME (thread names)
    return f


# Compiled once, by the parent, for every launch process, which fills in its own pid when it
# loads the program (astra_executor.cpp): a number that is never a pid (pid_max is at most
# 2**22) stands in for it.
PID_SENTINEL = 0x7EADBEEF


def compiled_filter() -> bytes:
    """The allow-list as a BPF program (struct sock_filter[]) for any launch process."""
    f = syscall_filter(PID_SENTINEL)
    fd = os.memfd_create("astra-seccomp", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


# A host program's filter, compiled once by the parent (`host_program_filter`), is loaded by the
# wrapper's child just before it runs the program (`exec_filtered`): it fills in its own pid
# (PID_SENTINEL) and the address of the program's path, a page at a random address of its own
# (EXEC_SENTINEL: both halves, as the filter compares a 64-bit argument in two). The program
# cannot run another: it would need to know that address, and one wrong guess kills it.
EXEC_SENTINEL = 0x5EC07E57_AB1EF00D


def host_program_filter() -> bytes:
    """The host programs' allow-list as a BPF program (struct sock_filter[])."""
    f = syscall_filter(PID_SENTINEL, EXEC_SENTINEL)
    fd = os.memfd_create("astra-seccomp", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def seccomp_in_kernel() -> bool:
    try:
        with open("/proc/self/status") as fh:
            return any(line.startswith("Seccomp:") for line in fh)
    except OSError:
        return False


def problems() -> list[str]:
    """Why kernel code cannot be sandboxed here (empty: it can)."""
    out = []
    abi = landlock_abi()
    if abi < 1:
        out.append("Landlock is not available (Linux 5.13 or newer with Landlock among the enabled "
                   "security modules, e.g. lsm=landlock,... on the kernel command line)")
    if not seccomp_in_kernel():
        out.append("seccomp is not available in this kernel")
    try:
        seccomp_library()
    except SandboxError as e:
        out.append(e.strerror or str(e))
    return out


def opted_out() -> bool:
    return os.environ.get(OPT_OUT_ENV) == "1"


def unavailable_reason() -> str | None:
    """A sentence for the user when the CPU backend must refuse to run kernel code, else None."""
    found = problems()
    if not found or opted_out():
        return None
    return ("the CPU backend runs kernel code only inside a sandbox, and this system cannot provide "
            "one: " + "; ".join(found) + f" (set {OPT_OUT_ENV}=1 to run kernels unsandboxed, at your own risk)")


# ---- resource limits -----------------------------------------------------------------------

def limit(resource_id: int, value: int) -> None:
    soft, hard = resource.getrlimit(resource_id)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(resource_id, (value, value))


# ---- the compiler wrapper ------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = 9) -> None:
    """Have the kernel send `sig` to this process when the thread that started it ends (set after
    any change of credentials, which clears it); if that parent is already gone, exit now."""
    if _libc().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        e = ctypes.get_errno()
        raise SandboxError(e, f"prctl(PR_SET_PDEATHSIG): {os.strerror(e)}")
    if os.getppid() != parent:
        os._exit(WRAPPER_FAILED)


PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
PROT_RW, MAP_ANON_PRIVATE = 0x3, 0x22


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _fill_in(program: bytes, values: dict[int, int]) -> bytes:
    """`program` with each sentinel constant of its comparisons replaced (all must be there)."""
    out, seen = bytearray(program), set()
    for i in range(0, len(out) - 7, 8):
        k = int.from_bytes(out[i + 4:i + 8], "little")
        if out[i] & 0x07 == 0x05 and k in values:  # BPF_JMP
            out[i + 4:i + 8] = values[k].to_bytes(4, "little")
            seen.add(k)
    if seen != set(values):
        raise SandboxError(errno.EINVAL, "seccomp: the filter has no place for the pid or the program's path")
    return bytes(out)


def _random_page(libc: ctypes.CDLL) -> int:
    """A page mapped at an address nothing else could guess: a random one between 4 GiB and
    64 TiB, asked for as a hint (where it is taken, the kernel's own choice, itself randomised)."""
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    want = (int.from_bytes(os.urandom(8), "little") % ((1 << 46) - (1 << 32)) + (1 << 32)) & ~0xFFF
    got = libc.mmap(want, 4096, PROT_RW, MAP_ANON_PRIVATE, -1, 0)
    if got is None or got == ctypes.c_void_p(-1).value:
        raise SandboxError(ctypes.get_errno(), "seccomp: no page for the program's path")
    return int(got)


def exec_filtered(program_hex: str, cmd: list[str]) -> None:
    """Load a host program's filter (`host_program_filter`, its sentinels filled in) and run
    `cmd` in this process; returns only by raising SandboxError."""
    libc = _libc()
    path = os.fsencode(cmd[0])
    if len(path) >= 4096:
        raise SandboxError(errno.ENAMETOOLONG, "seccomp: the program's path is too long")
    page = _random_page(libc)
    ctypes.memmove(page, path + b"\0", len(path) + 1)
    program = _fill_in(bytes.fromhex(program_hex), {PID_SENTINEL: os.getpid(), EXEC_SENTINEL >> 32: page >> 32,
                                                    EXEC_SENTINEL & 0xFFFFFFFF: page & 0xFFFFFFFF})
    args = (ctypes.c_char_p * (len(cmd) + 1))(*[os.fsencode(a) for a in cmd], None)
    env = (ctypes.c_char_p * (len(os.environb) + 1))(*[k + b"=" + v for k, v in os.environb.items()], None)
    filt = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(filt))
    libc.execve.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    no_new_privs()
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise SandboxError(e, f"seccomp: the filter could not be loaded ({os.strerror(e)})")
    libc.execve(page, args, env)
    e = ctypes.get_errno()
    raise SandboxError(e, f"cannot run {cmd[0]}: {os.strerror(e)}")


def _child_limits(limits: dict[str, int]) -> None:
    """The limits the shell's `ulimit` sets for a compiler, for a program run without a shell."""
    if "--memory" in limits:
        limit(resource.RLIMIT_AS, limits["--memory"])
    if "--file-size" in limits:
        hard = max(limits["--file-size"], limits.get("--file-size-room", 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["--file-size"], min(hard, resource.getrlimit(
            resource.RLIMIT_FSIZE)[1])))


def _confine_and_run(argv: list[str]) -> int:
    """`--parent PID --read P --exec P --write P ... -- PROGRAM ARGS`: limits, Landlock, then
    PROGRAM as a child in this process group (the caller made it a new one), waited for. When the
    caller ends (killed, or its thread gone) the whole group is killed, so no cc1plus, as or ld
    outlives the compile; the caller kills the group on its time limit."""
    rules: list[tuple[str, int]] = []
    abi = landlock_abi()
    parent = os.getppid()
    filter_hex, limits = "", {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag, path = argv[i], argv[i + 1]
        if flag == "--parent":
            parent = int(path)
        elif flag == "--seccomp":
            filter_hex = path
        elif flag in ("--memory", "--file-size", "--file-size-room"):
            limits[flag] = int(path)
        else:
            rights = {"--read": READ, "--exec": READ_EXEC, "--write": READ | write_rights(abi)}[flag]
            rules.append((path, rights))
        i += 2
    cmd = argv[i + 1:]
    import signal
    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
    die_with_parent(parent, signal.SIGTERM)
    limit(resource.RLIMIT_CORE, 0)
    limit(resource.RLIMIT_FSIZE, COMPILER_FILE_LIMIT)
    limit(resource.RLIMIT_CPU, COMPILER_CPU_S)
    limit(resource.RLIMIT_AS, COMPILER_MEMORY)
    try:
        restrict_files(rules)
    except SandboxError as e:
        if os.environ.get(OPT_OUT_ENV) != "1":
            raise
        sys.stderr.write(f"astra: compiling WITHOUT the sandbox ({OPT_OUT_ENV}=1): {e}\n")
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if filter_hex:
                _child_limits(limits)
                try:
                    exec_filtered(filter_hex, cmd)
                except SandboxError as e:
                    if os.environ.get(OPT_OUT_ENV) != "1":
                        sys.stderr.write(f"astra sandbox: {e.strerror}\n")
                        os._exit(WRAPPER_FAILED)
                    sys.stderr.write(f"astra: running WITHOUT the system-call filter ({OPT_OUT_ENV}=1): {e.strerror}\n")
            os.execv(cmd[0], cmd)
        except OSError as e:
            sys.stderr.write(f"astra sandbox: cannot run {cmd[0]}: {e}\n")
        os._exit(WRAPPER_FAILED)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):  # the same death for the caller to see
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


COMPILER_FILE_LIMIT = 1 << 30
COMPILER_CPU_S = 300
COMPILER_MEMORY = 8 << 30  # address space of each compiler process (a template bomb stops here)


if __name__ == "__main__":
    try:
        sys.exit(_confine_and_run(sys.argv[1:]))
    except (SandboxError, OSError) as exc:
        sys.stderr.write(f"astra sandbox: {exc}\n")
        sys.exit(WRAPPER_FAILED)
