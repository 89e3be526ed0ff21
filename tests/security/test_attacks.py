"""Every entry of the attack catalogue, run on this machine: each must be contained."""
from __future__ import annotations

import http.server
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from astra_cuda.backends.base import CompileError, Launch, LaunchError

from . import catalogue
from .catalogue import Attack

ROOT = Path(__file__).resolve().parents[2]
SECRET_VALUE = "sk-canaryAstraSecret0123456789abcdef"
PAYLOAD_HEADERS = """#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/uio.h>
"""


def scribbler(name: str, delay_us: int = 0) -> str:
    """C++ of a host thread function `name`: after `delay_us`, every millisecond for ~4 s, 0x41
    into every buffer mapped in its process (`astra-buf` mappings): what a launch leaves behind to
    spoil the launches that map theirs in the same process."""
    return rf"""
static void* {name}(void*) {{
  usleep({delay_us});
  for (int round = 0; round < 4000; ++round) {{
    FILE* m = fopen("/proc/self/maps", "r");
    char line[512];
    while (m && fgets(line, sizeof line, m)) {{
      unsigned long lo, hi;
      if (strstr(line, "astra-buf") && strstr(line, "rw") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
        memset((void*)lo, 0x41, hi - lo);
    }}
    if (m) fclose(m);
    usleep(1000);
  }}
  return 0;
}}
"""

CLEAN = "__global__ void clean(int* x) { x[threadIdx.x] = threadIdx.x; }\n"
THREAD_CAP = 64  # what a launch may start at most, all its threads together (the runtime's included)


def by_kind(kind: str) -> list[Attack]:
    return [a for a in catalogue.ALL if a.kind == kind]


def _executor_pids(parents: set[int] | None = None) -> set[int]:
    """Processes running this checkout's executor started by one of `parents` (this process by
    default): an executor's fourth argument is the pid of the process that started it, kept by every
    fork of it (other checkouts, and the other pytest workers of this run, may be testing beside us)."""
    from astra_cuda.backends.cpu.isolation import EXECUTOR
    mark = str(EXECUTOR).encode()
    mine = {str(p).encode() for p in (parents if parents is not None else {os.getpid()})}
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    raw = f.read()
                argv = raw.split(b"\0")
                if mark in raw and len(argv) > 4 and argv[4] in mine:
                    out.add(int(d))
            except OSError:
                pass
    return out


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _leftovers(cpu, before: set[int]) -> set[int]:
    """Executor processes that are neither a live zygote nor one of its fresh launch processes,
    and the latest launch's process if it still exists."""
    zygotes = {ex.proc.pid for ex in cpu._executors.values() if ex.proc is not None}
    left = {p for p in _executor_pids() - before - zygotes if _ppid(p) not in zygotes}
    last = {ex.last_pid for ex in cpu._executors.values() if ex.last_pid}
    return left | {p for p in last if Path(f"/proc/{p}").exists() and _ppid(p) in zygotes
                   and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"}


def test_the_executors_this_process_started_are_found(cpu):
    """The leftover checks below see only what `_executor_pids` finds: it must find this process's
    own executor (an argument layout it no longer reads would make them pass on nothing)."""
    cpu.launch(cpu.compile(CLEAN, ["clean"], filename="clean.cu"), "clean", Launch((1, 1, 1), (32, 1, 1), 0),
               [cpu.upload(np.zeros(32, np.int32))])
    zygotes = {ex.proc.pid for ex in cpu._executors.values() if ex.proc is not None}
    assert zygotes and zygotes <= _executor_pids()
    assert not zygotes & _executor_pids({1})


@pytest.fixture(scope="module")
def cpu():
    from astra_cuda.backends.cpu import CpuBackend
    be = CpuBackend()
    yield be
    be.close()


@pytest.fixture
def arena(tmp_path, monkeypatch):
    """A canary folder and a secret file outside anything the sandbox may touch; the secret is
    also the parent's API key."""
    canary = tmp_path / "canary"
    canary.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET_VALUE + "\n")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_VALUE)
    return canary, secret


def _no_screen(monkeypatch):
    """The screen off: no name screen, and inline asm left as written (not refused where reached)."""
    from astra_cuda.backends.cpu import inline_asm, unit_build
    monkeypatch.setattr(unit_build, "check_source", lambda *a, **k: None)
    monkeypatch.setattr(inline_asm, "mark", lambda source, filename: inline_asm.Marked(source, "", ()))


# ---- kernel code on the host -----------------------------------------------------------------

# Every Landlock ABI from 1 to the kernel's, as older kernels offer them (README "Security
# model" says which Linux has which): the sandbox must hold on each. Entries that only resource
# limits stop do not depend on it and run once, at the kernel's own ABI.
def _kernel_abi() -> int:
    from astra_cuda.compile import sandbox
    return sandbox.kernel_landlock_abi()


ABIS = list(range(1, _kernel_abi() + 1)) or [0]
LIMITS_ONLY = {"memory_bomb", "printf_flood", "infinite_loop", "raise_limits", "thread_flood"}
SANDBOX_CASES = [(a, abi) for abi in ABIS for a in by_kind("sandbox") if abi == ABIS[-1] or a.name not in LIMITS_ONLY]


@pytest.fixture(scope="module")
def boxed():
    """A CPU backend whose sandbox uses at most the given Landlock ABI (one alive at a time:
    the cases come ordered by ABI)."""
    from astra_cuda.backends.cpu import CpuBackend
    held: dict[int, CpuBackend] = {}

    def get(abi: int) -> CpuBackend:
        if abi not in held:
            for old in held.values():
                old.close()
            held.clear()
            held[abi] = CpuBackend(landlock_abi=abi or None)
        return held[abi]

    yield get
    for be in held.values():
        be.close()


@pytest.mark.parametrize("attack, abi", SANDBOX_CASES, ids=[f"{a.name}-abi{abi}" for a, abi in SANDBOX_CASES])
def test_sandbox_contains(attack, abi, boxed, arena, monkeypatch):
    from astra_cuda.backends.cpu import toolchain
    cpu = boxed(abi)
    canary, secret = arena
    _no_screen(monkeypatch)
    listener = None
    if attack.name == "unix_socket_on_disk":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(canary / "listen.sock"))
        listener.listen(1)
        listener.setblocking(False)
    src = (PAYLOAD_HEADERS + f'#define CANARY "{canary}"\n#define SECRET "{secret}"\n'
           f'#define CACHE "{toolchain.cache_dir()}"\n' + attack.prelude + "\n"
           "__global__ void attack(long long* out) {\n"
           "  if (threadIdx.x == 0 && blockIdx.x == 0) {\n"
           "    long long r = 0; errno = 0;\n"
           f"    {attack.body}\n"
           "    out[0] = r; out[1] = errno;\n  }\n}\n")
    before = _executor_pids()
    signalled = []
    old_handler = signal.signal(signal.SIGWINCH, lambda *_: signalled.append(1))  # the attacks' signal
    mod = cpu.compile(src, ["attack"], filename=f"{attack.name}.cu")
    out = cpu.upload(np.zeros(128, np.int64))
    error = None
    t0 = time.monotonic()
    try:
        cpu.launch(mod, "attack", Launch((1, 1, 1), (1, 1, 1), 0), [out], timeout_s=4.0)
    except LaunchError as e:
        error = str(e)
    seconds = time.monotonic() - t0
    result = cpu.download(out)
    time.sleep(0.2 if abi == ABIS[-1] else 0.05)  # anything forked would have run by now
    # a message on the executor's channels now: an O_ASYNC owner set by the attack would be signalled
    cpu.launch(cpu.compile(CLEAN, ["clean"], filename="clean.cu"), "clean", Launch((1, 1, 1), (32, 1, 1), 0),
               [cpu.upload(np.zeros(32, np.int32))])
    time.sleep(0.05)
    signal.signal(signal.SIGWINCH, old_handler)
    assert not signalled, f"{attack.name} signalled the parent"
    seen = result.tobytes() + cpu.last_output.encode() + (error or "").encode()

    leftovers = sorted(p.name for p in canary.iterdir() if p.name != "listen.sock")
    assert not leftovers, f"{attack.name} wrote {leftovers} (r={result[0]}, errno={result[1]}, {error})"
    assert SECRET_VALUE.encode() not in seen, f"{attack.name} read the secret"
    assert _leftovers(cpu, before) == set(), f"{attack.name} left processes behind"
    if attack.fatal:
        assert error, f"{attack.name} should have been stopped (r={result[0]}, errno={result[1]})"
    if listener is not None:
        with pytest.raises(BlockingIOError):
            listener.accept()
        listener.close()
    if attack.name == "printf_flood":
        assert cpu._executors[""].log_path.stat().st_size <= 64 << 20
    if attack.name in ("raise_limits", "memory_bomb", "kill_parent", "fcntl_setown_sigio", "signal_parent_other_calls"):
        assert result[0] < 0, f"{attack.name} was not refused (r={result[0]})"
    if attack.name == "thread_flood":
        assert result[0] <= THREAD_CAP, f"{attack.name} started {result[0]} threads"
    if error is not None and "timed out" in error:   # stopped by the launch's own limit, which it names
        assert "timed out after 4 s" in error, error
    assert seconds < 60, f"{attack.name}: the launch ran {seconds:.0f} s, 15 times its 4 s limit: a hang"
    print(f"{attack.name}: r={result[0]} errno={result[1]} error={error}")


SELF_REPORT = PAYLOAD_HEADERS + r"""
__global__ void report(char* out) {
  if (threadIdx.x) return;
  const char* files[4] = {"/proc/self/status", "/proc/self/limits", "/proc/self/environ", "/proc/self/stat"};
  for (int i = 0; i < 4; ++i) {
    int fd = open(files[i], O_RDONLY);
    long n = fd >= 0 ? read(fd, out + i * 8192, 8191) : -1;
    if (n < 0) snprintf(out + i * 8192, 64, "unreadable (%d)", errno);
  }
}
"""


def test_the_executor_is_sandboxed(cpu, monkeypatch):
    """What a launch's process looks like from inside: seccomp on, no_new_privs, limits (threads
    included), an empty environment, a process group of its own."""
    from astra_cuda.backends.cpu import isolation
    _no_screen(monkeypatch)
    mod = cpu.compile(SELF_REPORT, ["report"], filename="report.cu")
    out = cpu.upload(np.zeros(4 * 8192, np.uint8))
    cpu.launch(mod, "report", Launch((1, 1, 1), (1, 1, 1), 0), [out])
    status, limits, environ, stat = (bytes(cpu.download(out)[i * 8192:(i + 1) * 8192]).split(b"\0")[0].decode()
                                     for i in range(4))
    assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status, status
    assert "Max address space         17179869184" in limits
    assert "Max core file size        0" in limits
    assert f"Max processes             {isolation.thread_limit(cpu.workers)}" in limits, limits
    assert environ in ("", "unreadable (13)")  # empty; unreadable where it gave up root (not dumpable)
    pid, fields = stat.split(" ", 1)[0], stat.rsplit(")", 1)[1].split()
    assert fields[2] == pid  # its own process group: its kill(0) reaches itself only
    assert cpu._executors[""].last_pid == int(pid)
    assert _gone_or_zombie(int(pid))


def _gone_or_zombie(pid: int) -> bool:
    """The launch's process has exited: absent, or a zombie not yet reaped. Read once, since it may
    be reaped between a check and a read (ProcessLookupError on /proc/PID/status)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_the_abi_cap_reaches_every_sandbox(monkeypatch, tmp_path):
    """$ASTRA_LANDLOCK_ABI (and CpuBackend(landlock_abi=)) make the sandbox ask for no newer ABI
    than an older kernel would have: what the ABI-parametrized entries above rely on."""
    from astra_cuda.backends.cpu import CpuBackend
    from astra_cuda.compile import sandbox
    monkeypatch.setenv(sandbox.ABI_CAP_ENV, "2")
    assert sandbox.landlock_abi() == min(2, sandbox.kernel_landlock_abi())
    monkeypatch.delenv(sandbox.ABI_CAP_ENV)
    be = CpuBackend(landlock_abi=3)
    try:
        mod = be.compile("__global__ void k(int* x) { x[0] = 1; }", ["k"], filename="k.cu")
        be.launch(mod, "k", Launch((1, 1, 1), (1, 1, 1), 0), [be.upload(np.zeros(1, np.int32))])
        env = Path(f"/proc/{be._executors[''].proc.pid}/environ").read_bytes().split(b"\0")
        assert f"{sandbox.ABI_CAP_ENV}=3".encode() in env
    finally:
        be.close()


def test_memory_watchdog_stops_a_sanitizer_executor(cpu, monkeypatch):
    """ASan reserves terabytes of shadow, so its executor has no address-space limit: the parent
    watches its resident memory instead (here with a small cap)."""
    from astra_cuda.backends.cpu import isolation
    _no_screen(monkeypatch)
    monkeypatch.setattr(isolation, "memory_limit", lambda: 256 << 20)
    src = PAYLOAD_HEADERS + """
__global__ void hog(long long* out) {
  if (threadIdx.x == 0) { size_t n = (size_t)1 << 30; volatile char* p = (volatile char*)malloc(n);
    for (int pass = 0; pass < 50; ++pass)  // holds it for seconds: the watch looks every 0.1 s
      for (size_t i = 0; p && i < n; i += 4096) p[i] = (char)pass;
    out[0] = p != 0; }
}
"""
    mod = cpu.compile(src, ["hog"], filename="hog.cu", sanitize=True)
    with pytest.raises(LaunchError, match="more than 0.2 GiB of memory"):
        cpu.launch(mod, "hog", Launch((1, 1, 1), (1, 1, 1), 0), [cpu.upload(np.zeros(2, np.int64))],
                   timeout_s=30)


def test_refuses_loudly_without_a_sandbox(monkeypatch):
    from astra_cuda.backends.base import BackendUnavailable
    from astra_cuda.backends.cpu import CpuBackend
    from astra_cuda.compile import sandbox
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    monkeypatch.delenv(sandbox.OPT_OUT_ENV, raising=False)
    with pytest.raises(BackendUnavailable, match="only inside a sandbox.*Landlock"):
        CpuBackend()
    monkeypatch.setenv(sandbox.OPT_OUT_ENV, "1")  # the informed user's explicit choice
    CpuBackend().close()


# ---- memory and time before anything runs --------------------------------------------------------

SMALL_KERNEL = """/* @astra
grid = [1]
block = [32]
[sizes]
n = [1, 7]
[args]
x = {{ type = "float", shape = ["n"], output = true }}
n = "n"
*/
__global__ void k(float* x, int n) {{
  int i = threadIdx.x; if (i < n) x[i] = {value};
}}
"""


def _bounded_cli(*args, env=None, timeout=240, memory=6 << 30) -> subprocess.CompletedProcess:
    """The CLI under a 6 GiB address-space limit of its own (or `memory`): should a bound fail,
    the machine does not (the attacks took up to 22.5 GB)."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "astra_cuda", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, preexec_fn=limit)


BOUNDED = [a for a in by_kind("bounds") if a.name not in ("module_cache_flood", "torch_budget_claimed", "header_byte_flood")]
READ_REFUSES = {"slow_parse": "takes too long to parse", "slow_parse_macros": "takes too long to parse",
                "syntax_node_flood": "too large to read", "token_flood": "too large to read"}   # refused as the file is read


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
@pytest.mark.parametrize("attack", BOUNDED, ids=lambda a: a.name)
def test_bounded_before_anything_runs(attack, compiler, tmp_path):
    """`astra check --backend static` on each file: NVRTC (as where no CUDA toolkit is installed)
    and nvcc (where one is) stop at their memory, output and time bounds with a clear error. The
    device pass's preprocessor (g++ emulating nvcc's, or nvcc's own) meets the macro explosion
    first; g++'s 45 s for the expression is test_compile_timeout_leaves_cc1plus's limit."""
    from astra_cuda.compile import static
    from astra_cuda.compile import toolkit
    if compiler == "nvrtc" and static._nvrtc() is None:
        pytest.skip("no NVRTC here")
    if compiler == "nvcc" and toolkit.find() is None:
        pytest.skip("no CUDA toolkit here")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text(attack.body + SMALL_KERNEL.format(value=attack.arg))
    if attack.name in READ_REFUSES and compiler == "nvcc":
        pytest.skip("refused by the source model before any compiler: the NVRTC run is the same run")
    env = {**os.environ, **({"ASTRA_CUDA_TOOLKIT": "none"} if compiler == "nvrtc" else {})}
    t0 = time.monotonic()
    # the node flood within the 2 GiB of address space (resident memory is less): a
    # walk of its tree would have needed 1.4 GB resident, and more address space
    r = _bounded_cli("check", str(f), "--backend", "static", env=env,
                     **({"memory": 2 << 30} if attack.name == "syntax_node_flood" else {}))
    seconds = time.monotonic() - t0
    said = r.stdout + r.stderr
    print(f"{attack.name} ({compiler}): {seconds:.1f} s, exit {r.returncode}: {said[-400:]}")
    assert "Traceback" not in said, said[-3000:]
    if attack.name == "macro_explosion_screen":  # the device pass refuses the file: exit 2, said why
        assert r.returncode == 2 and "needed more than 1024 MiB of memory" in said, said[-3000:]
    elif attack.name == "expression_explosion":  # refused by the cut, at the line of the expression
        line = f.read_text().splitlines().index(f"  int i = threadIdx.x; if (i < n) x[i] = {attack.arg};") + 1
        assert r.returncode == 2 and f"k.cu:{line}:" in said and "once macros are expanded" in said, said[-3000:]
    elif attack.name == "initializer_explosion":  # refused by the cut before it reads the unit, at the list's line
        line = f.read_text().splitlines().index("__device__ int astra_table[] = {C20 1};") + 1
        assert r.returncode == 2 and f"k.cu:{line}:" in said and "once macros are expanded" in said, said[-3000:]
    elif attack.name == "comment_padding":  # the padding earns nothing: refused as the list alone is
        line = f.read_text().splitlines().index("__device__ int astra_table[] = {C18 1};") + 1
        assert r.returncode == 2 and f"k.cu:{line}:" in said and "once macros are expanded" in said, said[-3000:]
    elif attack.name == "namespace_nesting":
        assert r.returncode == 2 and "k.cu:1:" in said and "more than 100 nested namespace" in said, said[-3000:]
    elif attack.name == "slow_parse":   # refused by the source model, before any compiler, where it stopped
        assert r.returncode == 2 and "k.cu:1:" in said and "takes too long to parse" in said, said[-3000:]
    elif attack.name == "slow_parse_macros":   # the macro bodies' parses add up to the file's limit
        assert r.returncode == 2 and "the file takes too long to parse" in said, said[-3000:]
    elif attack.name in ("syntax_node_flood", "token_flood"):   # refused by its tokens, before any parse
        assert r.returncode == 2 and "k.cu:1:" in said and "tokens, more than the 800,000" in said, said[-3000:]
    elif attack.name == "static_array_module":
        assert r.returncode == 1, said[-3000:]
        assert ("short of its 2048 MiB budget" if compiler == "nvrtc" else "needed more than 2048 MiB") in said, said[-3000:]
    else:
        pytest.fail(f"no expectation written for {attack.name}")


def test_header_byte_flood(tmp_path):
    """Ten project headers of 3.9 MB, each within every per-file bound, included by a small file:
    refused by name once the walk of its includes has read 32 MiB, before it parses them."""
    from astra_cuda.compile import headers
    attack = next(a for a in by_kind("bounds") if a.name == "header_byte_flood")
    (tmp_path / ".git").mkdir()
    n = headers.MAX_HEADER_BYTES // len(attack.body) + 2
    for i in range(n):
        (tmp_path / f"h{i}.cuh").write_text(attack.body)
    f = tmp_path / "k.cu"
    f.write_text("".join(f'#include "h{i}.cuh"\n' for i in range(n)) + SMALL_KERNEL.format(value=attack.arg))
    r = _bounded_cli("check", str(f), "--backend", "static", memory=2 << 30)
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "the project headers k.cu includes come to more than 32 MiB" in said, said[-3000:]
    assert "Traceback" not in said


def test_torch_budget_claimed(tmp_path):
    """A project cannot buy a PyTorch extension's compile budgets (6 GiB, 240 s) by saying it is
    one: torch's define and a torch/include folder of its own in compile_commands.json leave
    nvcc at 2 GiB (the 300 MB array stops there, as without them)."""
    from astra_cuda.compile import toolkit
    if toolkit.find() is None:
        pytest.skip("no CUDA toolkit here")
    attack = next(a for a in by_kind("bounds") if a.name == "torch_budget_claimed")
    proj = tmp_path / "proj"
    fake = proj / "third_party" / "torch" / "include"
    (fake / "torch").mkdir(parents=True)
    (proj / ".git").mkdir()
    (fake / "torch" / "extension.h").write_text("#pragma once\n")
    f = proj / "k.cu"
    f.write_text(attack.body + SMALL_KERNEL.format(value=attack.arg))
    (proj / "compile_commands.json").write_text(json.dumps([{"directory": str(proj), "file": "k.cu", "arguments": [
        "nvcc", f"-I{fake}", "-DTORCH_API_INCLUDE_EXTENSION_H", "-c", "k.cu"]}]))
    env = {k: v for k, v in os.environ.items() if k not in ("ASTRA_COMPILER_MEMORY", "ASTRA_COMPILER_TIMEOUT")}
    r = _bounded_cli("check", str(f), "--backend", "static", env=env)
    said = r.stdout + r.stderr
    assert r.returncode == 1 and "needed more than 2048 MiB" in said and "Traceback" not in said, said[-3000:]


def test_expression_explosion_on_the_cpu_backend(tmp_path):
    """The 2**16-term expression through `astra check` on the CPU backend (74 s to a g++ timeout
    before the cut's bounds): refused before any compiler, within seconds — its 131,000 nodes by
    the growth bound, before the depth walk (which tests/realcode/test_cut.py holds to 1,000)."""
    attack = next(a for a in BOUNDED if a.name == "expression_explosion")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text(attack.body + SMALL_KERNEL.format(value=attack.arg))
    r = _bounded_cli("check", str(f), "--backend", "cpu")
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "once macros are expanded" in said and "Traceback" not in said, said[-3000:]


def test_initializer_explosion_on_the_cpu_backend(tmp_path):
    """The 2**20-element initialiser list through `astra check` on the CPU backend (6 minutes to a
    verdict before the cut's bound on expanded code): refused before any walk, within seconds."""
    attack = next(a for a in BOUNDED if a.name == "initializer_explosion")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text(attack.body + SMALL_KERNEL.format(value=attack.arg))
    r = _bounded_cli("check", str(f), "--backend", "cpu")
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "once macros are expanded" in said and "Traceback" not in said, said[-3000:]


def test_comment_padding_on_the_cpu_backend(tmp_path):
    """The 2**18-element list behind 280 KB of comments and blank lines through `astra check` on
    the CPU backend (2 min 8 s to a verdict while padding earned allowance): refused within
    seconds, as the list alone is."""
    attack = next(a for a in BOUNDED if a.name == "comment_padding")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k.cu"
    f.write_text(attack.body + SMALL_KERNEL.format(value=attack.arg))
    r = _bounded_cli("check", str(f), "--backend", "cpu")
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "once macros are expanded" in said and "Traceback" not in said, said[-3000:]


def test_no_module_over_the_file_bound(cpu):
    """The CPU build of a unit with a 300 MB static array (screened, then built by g++): the
    compiler may write at most 64 MiB, so no such module reaches the cache."""
    from astra_cuda.backends.cpu import toolchain
    before = {p.name for p in toolchain.cache_dir().glob("mod-*.so")}
    src = "__device__ char astra_big[300 << 20] = {1};\n__global__ void k(char* x) { x[0] = astra_big[1]; }\n"
    with pytest.raises(CompileError, match="larger than 64 MiB"):
        cpu.compile(src, ["k"], filename="big.cu")
    new = [p for p in toolchain.cache_dir().glob("mod-*.so") if p.name not in before]
    assert not [p for p in new if p.stat().st_size > 64 << 20], new


def test_module_cache_flood_is_pruned_to_its_quota(tmp_path, monkeypatch):
    from astra_cuda.backends.cpu import toolchain
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "MAX_MODULE_BYTES", 100 << 20)
    d = toolchain.cache_dir()
    now = time.time()
    for i in range(40):  # 40 modules of 60 MiB (sparse: no disk used), the first the oldest
        p = d / f"mod-{i:024x}.so"
        with open(p, "wb") as fh:
            fh.truncate(60 << 20)
        os.utime(p, (now - 3600 + i * 60, now - 3600 + i * 60))
    toolchain.prune_cache()
    left = sorted(p.name for p in d.glob("mod-*.so"))
    total = sum(p.stat().st_size for p in d.glob("mod-*.so"))
    assert total <= 100 << 20 and left == [f"mod-{39:024x}.so"], (left, total)


# ---- the compiler ----------------------------------------------------------------------------

EDGE_ABIS = sorted({ABIS[0], ABIS[-1]})  # the oldest and the kernel's: the compilers' sandbox is Landlock's alone


@pytest.mark.parametrize("abi", EDGE_ABIS, ids=[f"abi{a}" for a in EDGE_ABIS])
@pytest.mark.parametrize("attack", by_kind("compile"), ids=lambda a: a.name)
def test_compiler_sandbox_contains(attack, abi, cpu, arena, monkeypatch, tmp_path):
    from astra_cuda.compile import sandbox
    canary, secret = arena
    _no_screen(monkeypatch)
    monkeypatch.setenv(sandbox.ABI_CAP_ENV, str(abi))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    src = (attack.body.replace("SECRET_Q", f'"{secret}"').replace("FIFO_Q", f'"{fifo}"')
           + "__global__ void k(int* x) { x[0] = 1; }\n")
    with pytest.raises(CompileError) as e:
        cpu.compile(src, ["k"], filename=f"{attack.name}.cu")
    said = str(e.value) + (e.value.log or "")
    assert "Permission denied" in said, said
    assert SECRET_VALUE not in said and "root:" not in said


# ---- NVRTC in this process (static checks; the GPU backend's run in tests/gpu) ------------------

def _unblock(fifo: Path) -> None:
    """Let a compile stuck on `fifo` read end-of-file (a writer that opens and closes it)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader: nothing is stuck
        pass


@pytest.mark.parametrize("abi", EDGE_ABIS, ids=[f"abi{a}" for a in EDGE_ABIS])
@pytest.mark.parametrize("attack", by_kind("nvrtc"), ids=lambda a: a.name)
def test_nvrtc_reads_nothing_private(attack, abi, arena, tmp_path, monkeypatch):
    """Where no toolkit is installed: the device pass's preprocessor (confined as every compiler)
    refuses a header it may not read, clearly and before any compile; NVRTC compiles only what
    the cut unit holds."""
    from astra_cuda.compile import devicepp, extract, static
    from astra_cuda.execution import worker
    from astra_cuda.compile import sandbox
    if static._nvrtc() is None:
        pytest.skip("no NVRTC here")
    monkeypatch.setenv("ASTRA_CUDA_TOOLKIT", "none")  # NVRTC on the cut unit: nvcc's test is below
    monkeypatch.setenv(sandbox.ABI_CAP_ENV, str(abi))
    _, secret = arena
    proj, subs = catalogue.stage_nvrtc(tmp_path, secret)
    text = catalogue.nvrtc_source(attack, subs)
    path = proj / f"{attack.name}.cu"
    path.write_text(text)
    retired: list[bool] = []
    monkeypatch.setattr(worker, "retire_after_reply", lambda: retired.append(True))
    monkeypatch.setenv("ASTRA_COMPILER_TIMEOUT", "4")  # every compiler of user code: NVRTC, the device pass
    unit, r, refused = None, None, ""
    try:
        unit = extract.unit(text, str(path), "k")
        r = static.compile_unit(unit)
    except devicepp.PreprocessError as e:
        refused = str(e)
    finally:
        _unblock(proj / "fifo.h")
    said = refused
    if unit is not None and r is not None:
        said += unit.source + r.log + "\n".join(d.message for d in r.diagnostics) + "\n".join(unit.notes)
    assert SECRET_VALUE not in said and "root:" not in said and "PATH=" not in said, said
    assert "astra-pp-" not in said, said  # the preprocessor's own folder is named as the user's
    assert not retired  # the preprocessor is a process, killed at its time limit
    if attack.name == "huge_header":
        assert r is not None and r.ok and unit is not None and "x\n// x" not in unit.source, said
    elif attack.name == "fifo_in_project":
        assert unit is None and "took more than 4 s" in refused, said
    elif attack.name == "device_header_traversal":
        assert unit is None and "does not preprocess for the device" in refused, said
    else:
        assert unit is None and "cannot read" in refused and "outside" in refused, said


@pytest.mark.parametrize("attack", by_kind("nvrtc"), ids=lambda a: a.name)
def test_nvcc_reads_nothing_private(attack, arena, tmp_path, monkeypatch):
    """The same hostile files through nvcc on the whole file (where a CUDA toolkit is
    installed): its preprocessor and front end run under the same Landlock policy."""
    from astra_cuda.compile import nvcc, toolkit
    from astra_cuda.compile.project import ProjectContext
    if toolkit.find() is None:
        pytest.skip("no CUDA toolkit here")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ASTRA_COMPILER_TIMEOUT", "6")
    _, secret = arena
    proj, subs = catalogue.stage_nvrtc(tmp_path, secret)
    text = catalogue.nvrtc_source(attack, subs)
    path = proj / f"{attack.name}.cu"
    path.write_text(text)
    r = nvcc.compile(text, str(path), ProjectContext(), "sm_90", ["k"], toolkit=toolkit.find())
    said = r.log + "\n".join(d.message for d in r.diagnostics)
    assert r.compiler.startswith("nvcc "), r.compiler
    assert SECRET_VALUE not in said and "root:" not in said and "PATH=" not in said, said
    if attack.name == "fifo_in_project":   # stopped by the compiler's time limit, which it names
        assert not r.ok and "did not finish within 6 s" in said, said
    elif attack.name == "huge_header":
        assert r.ok, said
    else:
        assert not r.ok and ("Permission denied" in said or "No such file" in said), said


def test_nvrtc_refuses_loudly_without_landlock(monkeypatch, tmp_path):
    """No Landlock: no NVRTC compile of user code (the reason shown); the opt-out compiles."""
    from astra_cuda.compile import extract, static
    from astra_cuda.compile import sandbox
    if static._nvrtc() is None:
        pytest.skip("no NVRTC here")
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    monkeypatch.delenv(sandbox.OPT_OUT_ENV, raising=False)
    f = tmp_path / "k.cu"
    text = "__global__ void k(float* x) { x[0] = 2.0f; }\n"
    r = static.compile_unit(extract.unit(text, str(f), "k"))
    assert not r.ok and r.diagnostics[0].code == "sandbox", r.diagnostics
    assert "Landlock" in r.diagnostics[0].message and sandbox.OPT_OUT_ENV in r.diagnostics[0].message
    monkeypatch.setenv(sandbox.OPT_OUT_ENV, "1")
    assert static.compile_unit(extract.unit(text, str(f), "k")).ok


def test_the_confined_thread_is_fresh_and_confined(tmp_path):
    """Each confined call runs on a new thread that can read only what the policy allows; the
    caller's thread keeps its rights."""
    import threading
    from astra_cuda.compile import confine
    inside, outside = tmp_path / "proj", tmp_path / "outside.txt"
    (inside / ".git").mkdir(parents=True)
    (inside / "a.h").write_text("ok")
    outside.write_text("private")
    policy = confine.for_unit([f"-I{inside}"])

    def read(p: Path) -> tuple[str, int]:
        try:
            return p.read_text(), threading.get_ident()
        except PermissionError:
            return "denied", threading.get_ident()

    a = confine.call(policy, read, inside / "a.h")
    b = confine.call(policy, read, outside)
    assert a[0] == "ok" and b[0] == "denied"
    assert outside.read_text() == "private"  # this thread is not confined
    assert threading.get_ident() not in (a[1], b[1])


# ---- a hostile compile_commands.json ------------------------------------------------------------

@pytest.mark.parametrize("attack", by_kind("project"), ids=lambda a: a.name)
def test_hostile_compile_commands(attack, tmp_path):
    from astra_cuda.compile import devicepp, extract, project, static
    proj = tmp_path / "proj"
    (proj / ".git").mkdir(parents=True)
    args = {"-I/root": ["-I/root", f"-I{Path.home()}"],
            "-I/etc": ["-I/etc", "-isystem", "/etc", "--include-path=/etc"],
            "flags": catalogue.HOSTILE_FLAGS, "define": ['-DH="/etc/shadow"']}[attack.arg]
    inner = {"-I/etc": '#include "shadow"\n', "define": "#include H\n"}.get(attack.arg, "")
    text = f"__global__ void k(float* x) {{\n{inner}  x[0] = 1.0f;\n}}\n"
    f = proj / "k.cu"
    f.write_text(text)
    (proj / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(proj), "file": "k.cu", "arguments": ["nvcc", *args, "-c", "k.cu"]}]))
    ctx = project.resolve(str(f), root=str(proj))
    if attack.arg == "define":
        assert ctx.options() == ['-DH="/etc/shadow"']
    else:
        assert ctx.options() == [], ctx.options()  # nothing of it reaches a compiler
        assert ctx.ignored, ctx
    if attack.arg.startswith("-I"):
        assert all("(outside the project)" in i for i in ctx.ignored if i != "-c"), ctx.ignored
    if attack.arg == "flags":
        assert {"-include", "--pre-include=/etc/shadow", "-Xcompiler", "-ccbin", "--split-compile=0"} <= set(ctx.ignored)
    if inner and static.available() is not None:
        # The device pass's preprocessor refuses a header its confinement keeps it from ("cannot
        # read"); one not in the folders it searches is read as empty, and the compile refuses it
        # (NVRTC's front end: "cannot open source file"; nvcc's preprocessor: "No such file").
        try:
            r = static.compile_unit(extract.unit(text, str(f), "k", context=ctx))
            said, ok = r.log + "\n".join(d.message for d in r.diagnostics), r.ok
        except devicepp.PreprocessError as e:
            said, ok = str(e), False
        assert not ok and "root:" not in said, said
        assert any(w in said for w in ("cannot read", "cannot open source file", "No such file or directory")), said


# ---- the name screen --------------------------------------------------------------------------

@pytest.mark.parametrize("attack", by_kind("screen"), ids=lambda a: a.name)
def test_screen_refuses_known_bypasses(attack, cpu, tmp_path):
    (tmp_path / "evil.cuh").write_text('#pragma GCC system_header\n#include <cstdio>\n'
                                       'static int astra_evil() { FILE* p = popen("id", "r"); return p != 0; }\n')
    with pytest.raises(CompileError, match="refused"):
        cpu.compile(attack.body, ["k"], filename=str(tmp_path / f"{attack.name}.cu"), options=[f"-I{tmp_path}"])


def test_a_header_that_declares_itself_a_system_header_is_screened_not_refused(cpu, tmp_path):
    # CCCL's nv/target vendored in FlashInfer's 3rdparty/: the pragma flags the header's lines, and
    # lines outside the trusted folders are screened whatever the flag (the popen case above)
    (tmp_path / "lib.cuh").write_text("#pragma GCC system_header\nstatic __device__ int twice(int v) { return 2 * v; }\n")
    cpu.compile('#include "lib.cuh"\n__global__ void k(int* x) { x[0] = twice(x[0]); }\n', ["k"],
                filename=str(tmp_path / "k.cu"), options=[f"-I{tmp_path}"])
    with pytest.raises(CompileError, match="system_header"):   # in the unit itself it is still refused
        cpu.compile('#pragma GCC system_header\n__global__ void k(int* x) { x[0] = 1; }\n', ["k"],
                    filename=str(tmp_path / "own.cu"), options=[f"-I{tmp_path}"])


# ---- files and candidates through the gate ----------------------------------------------------

SILU = (ROOT / "examples" / "silu_and_mul.cu").read_text()


def _cli(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "astra_cuda", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def test_gate_zero_click_hidden_payload(arena, tmp_path):
    canary, _ = arena
    payload = ('#ifndef __CUDACC_RTC__\n#include <cstdio>\nstatic int astra_pwn = [] { FILE* f = freopen64("'
               f'{canary}/pwned", "w", stdout); if (f) fputs("x", f); return 0; }}();\n#endif\n')
    f = tmp_path / "k.cu"
    f.write_text(payload + SILU)
    r = _cli("check", str(f), "--backend", "cpu", "--json")
    assert r.returncode in (0, 1), r.stderr
    assert not list(canary.iterdir())


def test_gate_has_include_hidden_payload(arena, tmp_path):
    """The payload behind `__has_include(<unistd.h>)`, which NVRTC answers false and a host
    compiler true: at file scope it is a host variable the cut leaves out; in the kernel, host
    I/O the GPU compile refuses. Nothing is written either way."""
    canary, _ = arena
    io = f'FILE* f = freopen64("{canary}/pwned", "w", stdout); if (f) fputs("x", f);'
    top = ("#include <cstdio>\n#if __has_include(<unistd.h>)\n"
           f"static int astra_pwn = [] {{ {io} return 0; }}();\n#endif\n")
    inner = SILU.replace("  const int64_t token = blockIdx.x;",
                         f"#if __has_include(<unistd.h>)\n  {{ {io} }}\n#endif\n  const int64_t token = blockIdx.x;")
    assert inner != SILU
    for name, text, codes in (("top.cu", top + SILU, (0,)), ("inner.cu", "#include <cstdio>\n" + inner, (1,))):
        f = tmp_path / name
        f.write_text(text)
        r = _cli("check", str(f), "--backend", "cpu")
        assert r.returncode in codes and "Traceback" not in r.stderr, (name, r.stdout[-2000:], r.stderr[-2000:])
        assert not list(canary.iterdir()), name


def test_gate_candidate_with_host_io_is_never_run(arena, cpu):
    from astra_cuda.compile import extract
    from astra_cuda import gate
    from astra_cuda.model import source, spec as spec_mod
    canary, _ = arena
    model = source.parse(SILU)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    hostile = SILU.replace("  const int64_t token = blockIdx.x;",
                           f'  {{ FILE* f = freopen64("{canary}/pwned", "w", stdout); if (f) fputs("x", f); }}\n'
                           "  const int64_t token = blockIdx.x;")
    assert hostile != SILU
    path = str(ROOT / "examples" / "silu_and_mul.cu")
    v = gate.check(extract.unit(SILU, path, "silu_and_mul"), extract.unit(hostile, path, "silu_and_mul"), spec, cpu)
    assert v.status == "failed" and v.failures[0].check == "compile", v.human()
    assert "does not compile for the GPU" in v.failures[0].message
    assert not list(canary.iterdir())


# ---- hostile specs and inputs -----------------------------------------------------------------

SPEC_FILE = """{typedef}/* @astra
grid = ["n"]
block = [32]
{top}
[sizes]
n = [1, 7]
{sizes}
[args]
x = {{ type = "float", shape = ["n"], output = true }}
n = {scalar}
*/
{template}__global__ void k(T* x, int n) {{ int i = threadIdx.x; if (i < n) x[i] = 1.0f; }}
"""


# what each hostile spec's error says (the layer that stopped it)
SPEC_SAYS = {"instantiate_injection": "template arguments only", "power_tower": "exceeds 64 bits",
             "huge_shift": "exceeds 64 bits", "term_flood": "too long", "modulo_zero": "modulo by zero",
             "seed_flood": "`seeds` must be", "terabyte_case": "GiB per case", "combination_flood": "combinations",
             "size_name_flood": "names 1501 sizes (at most 16)", "unknown_key_flood": "characters long",
             "deep_nesting": "nested too deeply"}


def _spec_file(attack: Attack, canary: Path) -> str:
    # the spec comment stands right above the kernel (or its template line): it is the kernel's
    top, sizes, scalar, template, typedef = "", "", '"n"', "", "typedef float T;\n"
    if attack.name == "instantiate_injection":
        template, typedef = "template <typename T>\n", ""
        top = attack.arg.replace("CANARY", str(canary))
    elif attack.name in ("power_tower", "huge_shift", "term_flood", "modulo_zero"):
        scalar = attack.arg
    elif attack.name in ("seed_flood", "unknown_key_flood", "deep_nesting"):
        top = attack.arg
    elif attack.name == "size_name_flood":
        sizes = attack.arg
    elif attack.name == "terabyte_case":
        sizes = "m = [70368744177664]"
        return SPEC_FILE.format(top=top, sizes=sizes, scalar=scalar, template=template, typedef=typedef).replace(
            'shape = ["n"]', 'shape = ["n * m"]')
    elif attack.name == "combination_flood":
        sizes = "\n".join(f"s{i} = [{', '.join(str(v) for v in range(1, 41))}]" for i in range(10))
    return SPEC_FILE.format(top=top, sizes=sizes, scalar=scalar, template=template, typedef=typedef)


@pytest.mark.parametrize("attack", by_kind("spec"), ids=lambda a: a.name)
def test_hostile_spec_is_exit_2(attack, arena, tmp_path):
    canary, _ = arena
    (tmp_path / ".git").mkdir()  # the workspace root: nothing may be pinned there
    f = tmp_path / "k.cu"
    f.write_text(_spec_file(attack, canary))
    r = _cli("check", str(f), "--backend", "cpu")
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert re.search(rf"{re.escape(str(f))}:\d+:\d+: error: ", r.stderr), r.stderr  # the spec error, at its line
    assert SPEC_SAYS[attack.name] in r.stderr, r.stderr
    assert not list(canary.iterdir())
    assert not (tmp_path / ".astra" / "pins.json").exists()


@pytest.mark.parametrize("attack", by_kind("input"), ids=lambda a: a.name)
def test_hostile_input_is_exit_2(attack, tmp_path):
    if attack.arg == "fifo":
        target = tmp_path / "in.cu"
        os.mkfifo(target)
        args = ["kernels", str(target)]
    elif attack.arg == "big":
        target = tmp_path / "big.cu"
        target.write_text("// x\n" * 1_500_000)
        args = ["kernels", str(target)]
    elif attack.arg.startswith("--"):
        args = ["optimize", str(ROOT / "examples" / "silu_and_mul.cu"), "--kernel", "silu_and_mul",
                *attack.arg.split()]
    else:
        args = ["kernels", attack.arg]
    r = _cli(*args, timeout=30)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip(), r.stderr


# ---- secrets ----------------------------------------------------------------------------------

def test_worker_environment_holds_no_key(monkeypatch):
    from astra_cuda.execution import worker
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_VALUE)
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRET_VALUE)
    monkeypatch.setenv("ASTRA_BASE_URL", f"https://u:{SECRET_VALUE}@h/v1")
    pool = worker.Pool(1, name="security-test")
    try:
        pid = pool.run(worker.Ping(), timeout=60)["pid"]
        env = Path(f"/proc/{pid}/environ").read_bytes()
        assert SECRET_VALUE.encode() not in env and b"PATH=" in env
    finally:
        pool.close()


def test_key_in_base_url_is_not_in_the_run_log(tmp_path):
    from astra_cuda.agents.llm import LLMConfig
    from astra_cuda.agents.runlog import RunLog
    cfg = LLMConfig(model="m", base_url=f"https://user:{SECRET_VALUE}@example.invalid/v1?api_key={SECRET_VALUE}")
    log = RunLog(tmp_path)
    log.start({"llm": cfg.to_json(), "note": f"called {cfg.base_url}"}, "original")
    text = (tmp_path / "run.json").read_text()
    assert SECRET_VALUE not in text and "example.invalid" in text


class _Echo401(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the http.server API
        key = self.headers.get("Authorization", "")
        body = json.dumps({"error": {"message": f"invalid key {key.split()[-1]} (sent as {key})"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_endpoint_echoing_the_key_is_redacted(tmp_path):
    from astra_cuda.agents.llm import LLMClient, LLMConfig
    from astra_cuda.agents.runlog import RunLog
    server = http.server.HTTPServer(("127.0.0.1", 0), _Echo401)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        key = "canary-" + SECRET_VALUE[3:]  # not sk-shaped: only remembering the key hides it
        client = LLMClient(LLMConfig(model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1",
                                     api_key=key, max_retries=0, timeout_s=10))
        reply = client.chat("system", "user")
        assert reply.error and "401" in reply.error and key not in reply.error, reply.error
        RunLog(tmp_path).start({"transcript": client.transcript, "error": f"Bearer {key}"}, "x")
        assert key not in (tmp_path / "run.json").read_text()
    finally:
        server.shutdown()


ENV_FILE = "DB_PASSWORD=hunter2secret\nOPENAI_API_KEY=sk-proj-abcdef0123456789\n"
ENV_TOKENS = ("hunter2secret", "DB_PASSWORD", "abcdef0123456789")


def _leaks(text: str) -> list[str]:
    return [t for t in ENV_TOKENS if t in text]


def test_file_includes_env(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".env").write_text(ENV_FILE)
    f = tmp_path / "k.cu"
    f.write_text(SILU.replace("  const int64_t token = blockIdx.x;", '#include ".env"\n  const int64_t token = blockIdx.x;'))
    for args in (("--backend", "static"), ("--backend", "static", "--format", "sarif"), ("--backend", "cpu", "--json")):
        r = _cli("check", str(f), *args)
        said = r.stdout + r.stderr
        assert r.returncode == 1 and ".env" in said, (args, said[-2000:])  # the error is there, at its place
        assert _leaks(said) == [], (args, _leaks(said), said[-3000:])


class _Chat(http.server.BaseHTTPRequestHandler):
    """A chat endpoint that keeps every request and answers each with the next of `server.replies`."""

    def do_POST(self):  # noqa: N802 - the http.server API
        self.server.requests.append(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
        content = self.server.replies.pop(0) if self.server.replies else "no more ideas"
        body = _completion(content)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_candidate_includes_env(tmp_path):
    from astra_cuda.model import source, spec as spec_mod
    from astra_cuda.agents import LLMConfig, optimize
    from astra_cuda.backends.cpu import CpuBackend
    from astra_cuda.execution.evaluator import local_evaluator
    (tmp_path / ".git").mkdir()
    (tmp_path / ".env").write_text(ENV_FILE)
    path = tmp_path / "silu_and_mul.cu"
    path.write_text(SILU)
    model = source.parse(SILU)
    kernel = model.kernel("silu_and_mul")
    sp = spec_mod.load(kernel, model)
    hostile = kernel.text.replace("  const int64_t token = blockIdx.x;", '#include ".env"\n  const int64_t token = blockIdx.x;')
    assert hostile != kernel.text
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    server.requests = []
    reply = f"Done.\n\n```cuda\n{hostile}\n```\n"
    server.replies = ["Plan: fast-math SiLU\nWhat to change: use __expf.\nExpected effect: faster.", reply, reply, reply]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    backend = CpuBackend()
    try:
        ev = local_evaluator(str(path), "silu_and_mul", sp, backend, SILU, quick=True)
        cfg = LLMConfig(model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="k", max_retries=0)
        r = optimize(SILU, str(path), "silu_and_mul", ev, rounds=1, llm=cfg, spec=sp, runs_dir=tmp_path / "runs",
                     repairs=1)
    finally:
        server.shutdown()
        backend.close()
    logged = "".join(p.read_text(errors="replace") for p in (tmp_path / "runs").rglob("*") if p.is_file())
    sent = "".join(server.requests)
    print([(x.outcome, x.reason) for x in r.rounds])
    assert len(server.requests) >= 3  # planner, coder, and a second ask after the refused block
    assert _leaks(sent) == [] and _leaks(logged) == [] and _leaks(r.summary_markdown()) == [], \
        (_leaks(sent), _leaks(logged))
    assert not r.improved


# ---- hostile model replies ---------------------------------------------------------------------

REPLY_KERNEL = ("__global__ void silu_and_mul(__half* __restrict__ out, const __half* __restrict__ input, "
                "const int d) {\n  // \ud800 a lone surrogate\n  out[0] = input[0];\n}")


class _Replies(http.server.BaseHTTPRequestHandler):
    """A chat-completions endpoint whose every answer is `self.server.body` (bytes, with headers)."""

    def do_POST(self):  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body, headers = self.server.answer
        self.send_response(200)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
            if v:  # no length: the body ends when the connection closes (nothing to check up front)
                self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading: what a bound does

    def log_message(self, *args):
        pass


def _completion(content: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


@pytest.mark.parametrize("attack", by_kind("reply"), ids=lambda a: a.name)
def test_hostile_reply(attack, tmp_path):
    import gzip
    import tracemalloc
    from astra_cuda.agents import LLMConfig, optimize
    from astra_cuda.evaluation import Check, Evaluation
    if attack.name == "oversized_reply":
        answer = (_completion("x" * int(attack.arg)), {"Content-Length": ""})
    elif attack.name == "gzip_bomb_reply":
        answer = (gzip.compress(_completion(" " * int(attack.arg)), 9), {"Content-Encoding": "gzip"})
    else:
        answer = (_completion(f"Done.\n\n```cuda\n{REPLY_KERNEL}\n```\n"), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replies)
    server.answer = answer
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen: list[str] = []

    def evaluate(text: str) -> Evaluation:
        seen.append(text)
        return Evaluation(Check(len(seen) == 1, "ok" if len(seen) == 1 else "wrong", cases=1))

    cfg = LLMConfig(model="m", base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key="k", max_retries=0,
                    timeout_s=30)
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        r = optimize(SILU, str(ROOT / "examples" / "silu_and_mul.cu"), "silu_and_mul", evaluate, rounds=1, llm=cfg,
                     runs_dir=tmp_path, repairs=0)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        server.shutdown()
    logged = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
    print(f"{attack.name}: peak {peak >> 20} MiB, run log {logged >> 10} KiB, {time.monotonic() - t0:.1f} s, "
          f"rounds: {[(x.outcome, x.reason) for x in r.rounds]}")
    assert not r.error, r.error
    if attack.name == "surrogate_reply":
        assert len(seen) == 2 and "a lone surrogate" in seen[1]  # the reply's kernel became the candidate
        seen[1].encode("utf-8")  # valid text
        assert (tmp_path / r.run_id / "round-01" / "llm.json").exists()
    else:
        assert len(seen) == 1 and r.rounds[0].outcome == "no candidate", r.rounds
        said = r.rounds[0].reason
        assert ("larger than 4 MiB" if attack.name == "oversized_reply" else "compressed") in said, said
        assert peak < 64 << 20 and logged < 1 << 20, (peak, logged)


# ---- writing results --------------------------------------------------------------------------

def test_write_through_symlink_and_mode(tmp_path):
    from astra_cuda import api
    real = tmp_path / "real.cu"
    real.write_text("old\n")
    real.chmod(0o600)
    link = tmp_path / "link.cu"
    link.symlink_to(real)
    (tmp_path / ".git").mkdir()
    api.write_result(str(link), "old\n", "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_write_refuses_a_changed_file(tmp_path):
    from astra_cuda import workspace
    from astra_cuda.errors import AstraError
    f = tmp_path / "k.cu"
    f.write_text("typed meanwhile\n")
    with pytest.raises(AstraError, match="changed"):
        workspace.replace_if_unchanged(f, "old\n", "new\n")
    assert f.read_text() == "typed meanwhile\n"


def _project_beside(tmp_path: Path) -> tuple[Path, Path]:
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (proj / ".git").mkdir(parents=True)
    elsewhere.mkdir()
    return proj, elsewhere


@pytest.mark.parametrize("attack", [a for a in by_kind("file") if a.name.startswith("astra_")], ids=lambda a: a.name)
def test_astra_dir_links_are_refused(attack, tmp_path):
    proj, elsewhere = _project_beside(tmp_path)
    if attack.arg == "top":
        (proj / ".astra").symlink_to("../elsewhere")
    else:
        (proj / ".astra").mkdir()
        (proj / ".astra" / "runs").symlink_to("../../elsewhere")
    f = proj / "k$(id>x).cu"
    f.write_text(SILU)
    if attack.arg == "top":  # (nvcc expands a `$(...)` in a file's name: the check runs on a plain name)
        plain = proj / "k.cu"
        plain.write_text(SILU)
        r = _cli("check", str(plain), "--backend", "cpu")
        assert r.returncode == 0 and "not pinned" in r.stdout + r.stderr and "symbolic link" in r.stdout, r.stdout
    r = _cli("optimize", str(f), "--kernel", "silu_and_mul", "--backend", "cpu", "--rounds", "1")
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(elsewhere.iterdir()) == []
    assert not list(tmp_path.rglob("x")), "a name ran as shell"


def test_a_file_name_is_not_shell_for_nvcc(tmp_path):
    """nvcc runs its steps through a shell: a `$(...)` in a file's name must never reach it (b25c0c8)."""
    from astra_cuda.compile import toolkit
    if toolkit.find() is None:
        pytest.skip("no CUDA toolkit here")
    (tmp_path / ".git").mkdir()
    f = tmp_path / "k$(touch pwned).cu"
    f.write_text(SILU)
    r = _cli("check", str(f), "--backend", "static")
    assert not list(tmp_path.rglob("pwned"))  # contained either way: only the build folder is writable
    assert r.returncode == 0, r.stdout[-2000:]


def test_batch_manifest_id_is_not_a_path(tmp_path):
    proj, elsewhere = _project_beside(tmp_path)
    (proj / ".astra" / "batches").mkdir(parents=True)
    (proj / ".astra" / "batches" / "20990101-x.json").write_text(
        json.dumps({"id": "../../../elsewhere/evil", "targets": []}))
    r = _cli("optimize", str(proj), "--resume", "last", "--backend", "cpu")
    assert r.returncode in (0, 1), r.stderr
    assert list(elsewhere.iterdir()) == []
    assert (proj / ".astra" / "batches" / "20990101-x.json").exists()


def test_batch_manifest_targets_stay_in_the_project(tmp_path):
    """A committed manifest names a kernel file of another project: `--resume last` optimized it
    and wrote its run log there (main: exit 0 after a round, elsewhere/.astra/runs/… written)."""
    proj, elsewhere = _project_beside(tmp_path)
    (elsewhere / "k.cu").write_text(SILU)
    (proj / "mine.cu").write_text(SILU)
    (proj / ".astra" / "batches").mkdir(parents=True)
    (proj / ".astra" / "batches" / "20990101-x.json").write_text(
        json.dumps({"id": "x", "targets": [{"path": str(elsewhere / "k.cu"), "kernel": "silu_and_mul"}]}))
    r = _cli("optimize", str(proj), "--resume", "last", "--backend", "cpu", "--rounds", "1", timeout=600)
    assert r.returncode == 2 and "outside" in r.stderr and "Traceback" not in r.stderr, (r.stdout, r.stderr)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["k.cu"]


def test_runs_are_not_read_through_a_link(tmp_path):
    """`.astra -> ../elsewhere` holding another place's run of a file of the same name and text:
    `--list-runs` listed it (main), `--resume` read it before refusing to write."""
    proj, elsewhere = _project_beside(tmp_path)
    f = proj / "k.cu"
    f.write_text(SILU)
    run = elsewhere / "runs" / "20990101-000000-silu_and_mul-abcdef"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"kernel": "silu_and_mul", "path": "k.cu", "mode": "offline",
                                              "rounds": 1, "started": 4.1e9, "status": "running"}))
    (run / "original.cu").write_text(SILU)
    (proj / ".astra").symlink_to("../elsewhere")
    r = _cli("optimize", str(f), "--list-runs", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == [], (r.stdout, r.stderr)
    r = _cli("optimize", str(f), "--kernel", "silu_and_mul", "--resume", "last", "--backend", "cpu", timeout=600)
    assert r.returncode == 2 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_folder_link_out_is_not_a_target(tmp_path):
    """A committed `k.cu -> ../elsewhere/k.cu`: `astra check DIR` checked the other project's file
    and pinned it there (main: elsewhere/.astra/pins.json written). A link within the folder stays."""
    from astra_cuda.cli.paths import walk
    proj, elsewhere = _project_beside(tmp_path)
    (elsewhere / "k.cu").write_text(SILU)
    (proj / "k.cu").symlink_to("../elsewhere/k.cu")
    (proj / "sub").mkdir()
    (proj / "sub" / "mine.cu").write_text(SILU)
    (proj / "alias.cu").symlink_to("sub/mine.cu")
    assert walk(str(proj)) == [str(proj / "alias.cu"), str(proj / "sub" / "mine.cu")]
    r = _cli("check", str(proj), "--backend", "cpu", timeout=600)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    assert sorted(p.name for p in elsewhere.iterdir()) == ["k.cu"]


def test_committed_run_log_is_not_resumed(tmp_path):
    """A committed run log of the user's file: round 1 'adopted' a candidate its evaluation.json
    says passed 34 cases, which no gate ever ran (here: silu's sign flipped). `--resume last
    --write` reused that verdict and wrote the candidate into the file (main: exit 0)."""
    from astra_cuda.agents.records import Plan, Round
    from astra_cuda.evaluation import Check, Evaluation, source_hash
    proj, _ = _project_beside(tmp_path)
    f = proj / "k.cu"
    f.write_text(SILU)
    injected = SILU.replace("x / (1.0f + expf(-x))", "-x / (1.0f + expf(-x))  /* injected, never gated */")
    assert injected != SILU
    passed = Evaluation(Check(True, "passed 34 cases on cpu", cases=34), speed_note="speed not measured on the CPU backend")
    run = proj / ".astra" / "runs" / "20990101-000000-silu_and_mul-abcdef"
    (run / "round-01").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"kernel": "silu_and_mul", "path": str(f), "mode": "offline",
                                              "rounds": 1, "started": 4.1e9, "status": "running"}))
    (run / "original.cu").write_text(SILU)
    (run / "baseline.json").write_text(json.dumps(passed.to_json()))
    (run / "round-01" / "candidate.cu").write_text(injected)
    (run / "round-01" / "round.json").write_text(json.dumps(Round(
        1, Plan("vectorize", "wide loads", "wide loads"), source_hash(SILU), candidate_hash=source_hash(injected),
        evaluation=passed, outcome="adopted").to_json()))
    r = _cli("optimize", str(f), "--kernel", "silu_and_mul", "--resume", "last", "--rounds", "1", "--backend", "cpu",
             "--write", timeout=600)
    assert "injected" not in f.read_text(), (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert r.returncode == 2 and "not resumed" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_catalogue_table_is_current():
    doc = (ROOT / "docs" / "attack-catalogue.md").read_text()
    assert doc == catalogue.markdown(), "run: python -m tests.security.catalogue"


def test_execution_switch_runs_nothing(tmp_path):
    """What Workspace Trust drives: in a session with execution off, nothing is compiled to run or
    run; another session of the same process is not affected."""
    from astra_cuda import api, snapshot
    from astra_cuda.errors import AstraError
    from astra_cuda.session import Session
    f = tmp_path / "k.cu"
    f.write_text(SILU)
    snap = snapshot.of(SILU, str(f))
    trusted = Session()
    untrusted = trusted.restricted("the workspace is not trusted")
    assert api.resolve_backend("cpu", untrusted) == "static"
    with pytest.raises(AstraError, match="not trusted: static checks only"):
        api.check(snap, backend="cpu", session=untrusted)
    with pytest.raises(AstraError, match="not trusted: optimizing runs kernels"):
        api.optimize(snap, "silu_and_mul", backend="cpu", session=untrusted)
    assert trusted.runs_kernels and untrusted.restricted(None).runs_kernels
    assert untrusted.backends is trusted.backends   # what the session learned of its backends is kept


def test_report_page_masks_keys():
    from astra_cuda import redact, report
    key = "canary-" + SECRET_VALUE[3:]
    redact.remember(key)
    page = report.kernel_page("k", notes=[f"the endpoint said: invalid key {key} (Bearer {key}); "
                                          f"see https://user:{key}@example.invalid/v1?api_key={key}"])
    assert key not in page and "example.invalid" in page
