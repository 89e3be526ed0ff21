"""The catalogue's `exec` entries: what a launch or a compile leaves behind — threads, exit
handlers, forged replies, compiler processes — must reach no other launch, outlive no caller and
no time limit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from astra_cuda.backends.base import CompileError, Launch, LaunchError, Scalar
from astra_cuda.backends.cpu import toolchain

from .test_attacks import CLEAN, PAYLOAD_HEADERS, _executor_pids, _no_screen, by_kind, scribbler

ROOT = Path(__file__).resolve().parents[2]
ONE = Launch((1, 1, 1), (1, 1, 1), 0)
WARP = Launch((1, 1, 1), (32, 1, 1), 0)
EXPECTED = {a.name for a in by_kind("exec")}

# A thread left behind by a launch: every millisecond for ~4 s, 0x41 into every buffer mapped in
# this process (the launches after it map theirs here when the process is shared).
SCRIBBLE = PAYLOAD_HEADERS + scribbler("astra_scribble") + r"""
__global__ void scribble(long long* out) {
  if (threadIdx.x == 0) { pthread_t t; pthread_create(&t, 0, astra_scribble, 0); pthread_detach(t); out[0] = 1; }
}
"""

# A detached thread that spins on a core and holds memory after the launch returned.
BACKGROUND = PAYLOAD_HEADERS + r"""
static void* astra_hold(void*) {
  size_t n = (size_t)256 << 20; volatile char* p = (volatile char*)malloc(n);
  for (size_t i = 0; p && i < n; i += 4096) p[i] = 1;
  for (;;) (void)p[0];
  return 0;
}
__global__ void background(long long* out) {
  if (threadIdx.x == 0) { pthread_t t; pthread_create(&t, 0, astra_hold, 0); pthread_detach(t); out[0] = getpid(); }
}
"""

# A thread that writes a forged failure onto every socket it holds, for ~3 s.
FORGE = PAYLOAD_HEADERS + r"""
static void* astra_forge(void*) {
  const char m[] = "{\"ok\": false, \"error\": \"FORGED by another launch\"}";
  for (int i = 0; i < 3000; ++i) {
    for (int fd = 0; fd < 64; ++fd) {
      struct stat st;
      if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) send(fd, m, sizeof m - 1, MSG_DONTWAIT);
    }
    usleep(1000);
  }
  return 0;
}
__global__ void forge(long long* out) {
  if (threadIdx.x == 0) { pthread_t t; pthread_create(&t, 0, astra_forge, 0); pthread_detach(t); out[0] = 1; }
}
"""

MALFORMED = PAYLOAD_HEADERS + r"""
__global__ void malformed(long long* out) {
  if (threadIdx.x == 0) {
    const char m[] = "{\"ok\": tru";
    for (int fd = 0; fd < 64; ++fd) {
      struct stat st;
      if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) send(fd, m, sizeof m - 1, MSG_DONTWAIT);
    }
    out[0] = 1;
  }
}
"""

# The launch's own reply forged ahead of a fault: `{"ok": true}` on every socket it holds, then a
# trap (the process dies by SIGABRT) or a barrier the runtime refuses (its own failure, a second
# message). Either fault was hidden: the first message was taken as the launch's reply.
SAY_OK = r"""
static void astra_say_ok() {
  const char m[] = "{\"ok\": true}";
  for (int fd = 0; fd < 64; ++fd) {
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) send(fd, m, sizeof m - 1, MSG_DONTWAIT);
  }
}
"""
FORGED_OK = {
    "trap": PAYLOAD_HEADERS + SAY_OK + r"""
__global__ void forged_ok(int* out) { out[threadIdx.x] = threadIdx.x; if (threadIdx.x == 0) { astra_say_ok(); __trap(); } }
""",
    "divergent_barrier": PAYLOAD_HEADERS + SAY_OK + r"""
__global__ void forged_ok(int* out) {
  if (threadIdx.x == 0) astra_say_ok();
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = threadIdx.x;
}
""",
}

# Output up to the executor's file limit (64 MiB), into the log every launch process writes.
FILL_LOG = PAYLOAD_HEADERS + r"""
__global__ void fill_log(long long* out) {
  if (threadIdx.x == 0) {
    static char b[1 << 20]; memset(b, 97, sizeof b - 1);
    for (int i = 0; i < 80; ++i) printf("%s\n", b);
    out[0] = 1;
  }
}
"""
SAYS_HELLO = "#include <cstdio>\n__global__ void hello(int* x) { x[threadIdx.x] = threadIdx.x; " \
             "if (threadIdx.x == 0) printf(\"hello from the next launch\\n\"); }\n"

# Exit handlers that never return: a launch's process that exits through them lingers.
ATEXIT = PAYLOAD_HEADERS + r"""
extern "C" int __cxa_atexit(void (*)(void*), void*, void*);
extern "C" void* __dso_handle;
static void astra_hang() { for (;;) sleep(1); }
static void astra_hang_arg(void*) { for (;;) sleep(1); }
__global__ void linger(long long* out) {
  if (threadIdx.x == 0) { out[0] = atexit(astra_hang) + __cxa_atexit(astra_hang_arg, 0, &__dso_handle); }
}
"""

# constexpr evaluation that takes minutes (each static_assert a few seconds, up to GCC's limit).
SLOW_COMPILE = "constexpr long astra_spin(long k) { long s = k; for (long i = 0; i < 3000; ++i) " \
               "for (long j = 0; j < 3000; ++j) s += i ^ j; return s; }\n" + \
               "".join(f'static_assert(astra_spin({k}) != 1, "");\n' for k in range(100)) + \
               "__global__ void k(int* x) { x[0] = 1; }\n"


@pytest.fixture(scope="module")
def cpu():
    from astra_cuda.backends.cpu import CpuBackend
    be = CpuBackend()
    yield be
    be.close()


def _clean_launch(cpu) -> np.ndarray:
    out = cpu.upload(np.zeros(32, np.int32))
    cpu.launch(cpu.compile(CLEAN, ["clean"], filename="clean.cu"), "clean", WARP, [out])
    return out


# How long a process that should be gone may take to go: a hang guard (it returns as soon as they
# are gone), far beyond what a kill takes on a loaded machine. Every process these tests leave
# behind would otherwise run on for minutes or forever (a spinning thread, a handler that never
# returns, a constexpr loop of minutes), so waiting longer masks nothing.
GONE_S = 30.0


def _wait_gone(pids: set[int], seconds: float = GONE_S) -> set[int]:
    """The pids of `pids` still alive (not zombies) after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        alive = set()
        for p in pids:
            try:
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                alive.add(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _cmdline(pid: int | str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _pids_with(mark: str) -> set[int]:
    return {int(d) for d in os.listdir("/proc") if d.isdigit() and mark.encode() in _cmdline(d)}


def test_leftover_thread_scribbles(cpu, monkeypatch):
    _no_screen(monkeypatch)
    mod = cpu.compile(SCRIBBLE, ["scribble"], filename="scribble.cu")
    cpu.launch(mod, "scribble", ONE, [cpu.upload(np.zeros(4, np.int64))])
    out = _clean_launch(cpu)
    time.sleep(0.3)  # the leftover thread, if any, has had 300 rounds
    assert (cpu.download(out) == np.arange(32)).all(), cpu.download(out)


def test_background_thread_after_launch(cpu, monkeypatch):
    _no_screen(monkeypatch)
    mod = cpu.compile(BACKGROUND, ["background"], filename="background.cu")
    out = cpu.upload(np.zeros(4, np.int64))
    cpu.launch(mod, "background", ONE, [out])
    pid = int(cpu.download(out)[0])
    assert pid > 0
    assert not _wait_gone({pid}), "the launch's process still runs after the launch returned"


def test_forged_reply_other_launch(cpu, monkeypatch):
    _no_screen(monkeypatch)
    mod = cpu.compile(FORGE, ["forge"], filename="forge.cu")
    try:
        cpu.launch(mod, "forge", ONE, [cpu.upload(np.zeros(4, np.int64))])
    except LaunchError as e:  # its own forged failure (or its replies refused): it may fail itself, nothing else
        assert "FORGED" in str(e) or "more than once" in str(e), e
    for _ in range(3):
        out = _clean_launch(cpu)  # raises LaunchError('FORGED ...') if it reads the forger's reply
        assert (cpu.download(out) == np.arange(32)).all()


def test_printf_flood_next_launch(cpu, monkeypatch):
    """A launch printed up to the file limit into the log its executor's launches share; the next
    launch (another document's in `astra serve`) prints a line: it passes, with its own output."""
    _no_screen(monkeypatch)
    flood = cpu.compile(FILL_LOG, ["fill_log"], filename="fill_log.cu")
    with pytest.raises(LaunchError, match="printed more than"):
        cpu.launch(flood, "fill_log", ONE, [cpu.upload(np.zeros(4, np.int64))])
    hello = cpu.compile(SAYS_HELLO, ["hello"], filename="hello.cu")
    out = cpu.upload(np.zeros(32, np.int32))
    cpu.launch(hello, "hello", WARP, [out])  # main: LaunchError 'the kernel printed more than 64 MiB'
    assert (cpu.download(out) == np.arange(32)).all()
    assert cpu.last_output.strip() == "hello from the next launch", cpu.last_output[:200]


@pytest.mark.parametrize("fault", sorted(FORGED_OK))
def test_forged_ok_hides_fault(fault, cpu, monkeypatch):
    """The kernel's own `{"ok": true}` ahead of its fault is not the launch's reply: the launch fails
    (the outputs are all right, so only the reply could have hidden the fault)."""
    _no_screen(monkeypatch)
    mod = cpu.compile(FORGED_OK[fault], ["forged_ok"], filename="forged_ok.cu")
    out = cpu.upload(np.zeros(32, np.int32))
    with pytest.raises(LaunchError, match="__trap|more than once"):
        cpu.launch(mod, "forged_ok", WARP, [out])
    assert (cpu.download(_clean_launch(cpu)) == np.arange(32)).all()


# Thread 16 of block 0 replies `{"ok": true}` for the runtime and ends the launch's process at once
# with the status the runtime's own reply ends with: the reply counts, the other threads never ran.
EXIT_SPEC = """/* @astra
grid = ["cdiv(n, 32)"]
block = [32]
[sizes]
n = [32, 100]
[args]
x = { type = "int", shape = ["n"], output = true }
n = "n"
*/
"""
EXIT_BODY = """__global__ void k(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  %s
  if (i < n) x[i] = i;
}
"""
EXIT_AFTER_OK = r"""extern "C" __device__ long send(int, const void*, unsigned long, int);
extern "C" __device__ void _exit(int);
__device__ static void astra_ok_then_exit() {
  const char m[] = "{\"ok\": true}";
  for (int fd = 0; fd < 64; ++fd) send(fd, m, sizeof m - 1, 0x40 /* MSG_DONTWAIT */);
  _exit(0);
}
""" + EXIT_SPEC + EXIT_BODY % "if (i == 16) astra_ok_then_exit();"


@pytest.mark.parametrize("build", ["every", "races", "sanitize"])
@pytest.mark.parametrize("reference", ["reference", "none"])
def test_exit_after_forged_ok(reference, build, cpu, monkeypatch, tmp_path):
    """Through the whole gate on the CPU backend, the name screen and the GPU-first compile off
    (host calls in a kernel: only the executor stands): the forged reply is taken — the process
    exited with status 0 after one message — but what the launch left is judged, and the outputs
    the other threads never wrote fail it, against a reference and by self-consistency alike.
    `races`/`sanitize`: only the race checker's (or AddressSanitizer's) build dies so, as a kernel
    that tells the instrumented build apart at run time (its speed, its addresses) could make it:
    that launch's clean report was a pass of its check on main, its outputs never looked at (the
    race build's at all, the sanitizer build's without a reference)."""
    from astra_cuda import gate
    from astra_cuda.compile import extract
    from astra_cuda.gate.building import Building
    from astra_cuda.gate.instrumented import Instrumented
    from astra_cuda.model import source, spec as spec_mod
    _no_screen(monkeypatch)
    monkeypatch.setattr(Building, "device_compile", lambda self: True)
    clean = EXIT_SPEC + EXIT_BODY % ""
    model = source.parse(clean)
    spec = spec_mod.load(model.kernel("k"), model)
    (tmp_path / "clean.cu").write_text(clean)
    (tmp_path / "exit.cu").write_text(EXIT_AFTER_OK)
    ref = extract.unit(clean, str(tmp_path / "clean.cu"), "k") if reference == "reference" else None
    hostile = extract.unit(EXIT_AFTER_OK, str(tmp_path / "exit.cu"), "k")
    assert "astra_ok_then_exit();" in hostile.source
    cand = hostile if build == "every" else extract.unit(clean, str(tmp_path / "clean.cu"), "k")
    if build != "every":
        plain_variant = Instrumented.compile_variant

        def variant(self, **kw):
            return self.compile(hostile, "candidate", **kw) if kw.get(build) else plain_variant(self, **kw)
        monkeypatch.setattr(Instrumented, "compile_variant", variant)
    v = gate.check(ref, cand, spec, cpu)
    assert v.status == "failed", v.human()
    said = [(f.check, f.message) for f in v.failures]
    assert any("never written" in m or "unwritten" in m for _, m in said), said
    if build != "every":
        assert all(c in (build, "poison") for c, _ in said), said
    # the mechanism: the launch itself was accepted (one message, status 0), its outputs half-written
    mod = cpu.compile(EXIT_AFTER_OK, ["k"], filename=str(tmp_path / "exit.cu"))
    out = cpu.upload(np.full(32, -7, np.int32))
    try:
        cpu.launch(mod, "k", WARP, [out, Scalar("int", 32, "int32")])
    except LaunchError:
        pass  # an executor that refuses the forged reply outright holds too
    else:
        assert (cpu.download(out) == np.where(np.arange(32) < 16, np.arange(32), -7)).all(), cpu.download(out)
    assert (cpu.download(_clean_launch(cpu)) == np.arange(32)).all()


@pytest.mark.parametrize("size", [1, 2])
def test_gpu_context_shared_across_documents(size):
    """`astra serve` sends every open document's jobs to one pool, and a GPU job's launches run in
    its worker's own process (CUDA context). Here jobs stand in for two documents' (`Job.owner`,
    as a GPU CheckJob names its file), each leaving a thread behind in its process: a worker that
    ran a.cu's job never runs b.cu's, so no job of one document sees what the other's left; a pool
    of one gives each document a fresh worker (the other's killed), a pool of two keeps both warm;
    a job of no document (a probe) may run in any. Which process the GPU launches themselves run in
    is tests/gpu/test_documents_apart_gpu.py's (a GPU run)."""
    from astra_cuda.execution import worker

    from .owned_jobs import Owned
    pool = worker.Pool(size, name=f"owned-{size}")
    try:
        a1, _ = pool.run(Owned("a.cu"), timeout=120)
        b1, seen_b1 = pool.run(Owned("b.cu"), timeout=120)
        probe, _ = pool.run(Owned(None), timeout=120)
        a2, seen_a2 = pool.run(Owned("a.cu"), timeout=120)
        b2, seen_b2 = pool.run(Owned("b.cu"), timeout=120)
    finally:
        pool.close()
    assert a1 != b1 and a2 != b1 and b2 != a2 and b2 != a1, (a1, b1, a2, b2)
    assert "a.cu" not in seen_b1 + seen_b2 and "b.cu" not in seen_a2, (seen_b1, seen_a2, seen_b2)
    assert probe in (a1, b1)   # a probe took a warm worker, whosever
    if size == 2:
        assert (a2, b2) == (a1, b1) and seen_a2 == ["a.cu"] and seen_b2 == ["b.cu"]  # each document's worker kept warm
    else:
        assert a2 not in (a1, b1) and b2 not in (a1, b1)  # each document change: a fresh worker
        assert not _wait_gone({a1, b1}), "a worker of the other document still runs"


def test_jobs_name_the_document_they_run_on_the_gpu():
    """The jobs that launch a document's kernels on the GPU name it (`owner`), so the pool keeps
    their worker to it; on the CPU a launch runs in a fresh process of its own, and a static
    profile or a probe runs none: no owner, any worker."""
    from astra_cuda.backends.gpu import GpuBackend
    from astra_cuda.compile import extract
    from astra_cuda.execution import jobs
    from astra_cuda.gate.sanitizer import SanitizeJob
    from astra_cuda.model import source, spec as spec_mod
    text = (ROOT / "examples" / "silu_and_mul.cu").read_text()
    path = "/project/silu_and_mul.cu"
    model = source.parse(text)
    spec = spec_mod.load(model.kernel("silu_and_mul"), model)
    unit = extract.unit(text, path, "silu_and_mul")
    assert jobs.CheckJob("gpu", unit, unit, spec).owner == path
    assert jobs.CheckJob("gpu", None, unit, spec, quick=True).owner == path
    assert jobs.ProfileJob("gpu", unit, unit, spec).owner == path
    assert jobs.EvaluateJob("gpu", path, "silu_and_mul", spec, text, "silu_and_mul", text=text).owner == path
    assert SanitizeJob(unit, spec, (), 1, GpuBackend).owner == path
    assert jobs.CheckJob("cpu", unit, unit, spec).owner is None
    assert jobs.EvaluateJob("cpu", path, "silu_and_mul", spec, text, "silu_and_mul").owner is None
    assert jobs.ProfileJob("static", None, unit, spec).owner is None
    assert jobs.BackendsJob().owner is None and jobs.DeviceJob().owner is None and jobs.StaticJob((unit,)).owner is None


def test_malformed_reply(cpu, monkeypatch):
    _no_screen(monkeypatch)
    mod = cpu.compile(MALFORMED, ["malformed"], filename="malformed.cu")
    with pytest.raises(LaunchError, match="reply"):
        cpu.launch(mod, "malformed", ONE, [cpu.upload(np.zeros(4, np.int64))])
    assert (cpu.download(_clean_launch(cpu)) == np.arange(32)).all()


CALLER = """
import sys
from astra_cuda.backends.base import Launch
from astra_cuda.backends.cpu import CpuBackend, toolchain
import numpy as np

from astra_cuda.backends.cpu import unit_build
unit_build.check_source = lambda *a, **k: None
be = CpuBackend()
mod = be.compile(open(sys.argv[2]).read(), ["linger"], filename="linger.cu")
be.launch(mod, "linger", Launch((1, 1, 1), (1, 1, 1), 0), [be.upload(np.zeros(4, np.int64))])
print("PASS", flush=True)
sys.stdin.readline()  # then exits, or is killed, without closing its backend
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_atexit_handler_lingers(how, tmp_path):
    """The caller prints PASS and exits without closing its backend, or is killed: none of the
    executor's processes may stay behind."""
    src = tmp_path / "linger.cu"
    src.write_text(ATEXIT)
    p = subprocess.Popen([sys.executable, "-c", CALLER, how, str(src)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "PASS", p.stderr.read()
    family = _descendants(p.pid)
    assert family, "no executor started"
    if how == "kill":
        p.kill()
    else:
        p.stdin.write("exit\n")
        p.stdin.flush()
    p.wait(timeout=60)
    left = _wait_gone(family)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"executor processes outlived their caller ({how})"


def test_compile_timeout_leaves_cc1plus(cpu, monkeypatch):
    _no_screen(monkeypatch)
    monkeypatch.setenv("ASTRA_COMPILER_TIMEOUT", "3")
    mark = f"-DASTRA_MARK_{uuid.uuid4().hex}"
    with pytest.raises(CompileError, match="timed out after 3 s"):   # stopped by its limit, which it names
        cpu.compile(SLOW_COMPILE, ["k"], filename="slow.cu", options=[mark])
    left = _wait_gone(_pids_with(mark[2:]))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the compiler kept running after its time limit"


COMPILER_CALLER = """
import sys
from astra_cuda.backends.cpu import CpuBackend, unit_build
unit_build.check_source = lambda *a, **k: None
CpuBackend().compile(sys.stdin.read(), ["k"], filename="slow.cu", options=[sys.argv[1]])
"""


def test_compile_outlives_caller(tmp_path):
    mark = f"-DASTRA_MARK_{uuid.uuid4().hex}"
    p = subprocess.Popen([sys.executable, "-c", COMPILER_CALLER, mark], stdin=subprocess.PIPE,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    p.stdin.write(SLOW_COMPILE)
    p.stdin.close()
    deadline = time.monotonic() + 60
    while not any(b"cc1plus" in _cmdline(q) for q in _pids_with(mark[2:])):
        assert time.monotonic() < deadline and p.poll() is None, "the compiler never started"
        time.sleep(0.1)
    p.kill()
    p.wait()
    left = _wait_gone(_pids_with(mark[2:]))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "the compiler kept running after its caller was killed"


def test_every_exec_entry_has_a_test():
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert EXPECTED <= tested, EXPECTED - tested


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_no_process_outlives_astra_check(how, tmp_path):
    """`astra check` on the CPU backend, run to its end or killed (SIGKILL) while it works: its
    workers, their executors and compilers are all gone within a few seconds."""
    f = tmp_path / "silu.cu"
    f.write_text((ROOT / "examples" / "silu_and_mul.cu").read_text())
    p = subprocess.Popen([sys.executable, "-m", "astra_cuda", "check", str(f), "--backend", "cpu"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    family: set[int] = set()
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        family |= _descendants(p.pid)
        if how == "kill" and _executor_pids(family):   # the executors its workers started
            family |= _descendants(p.pid)
            p.kill()
            break
        time.sleep(0.05)
    p.wait(timeout=120)
    assert family, "the check started no worker"
    left = _wait_gone(family | _executor_pids(family))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, [_cmdline(q)[:200] for q in left]


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


# ---- stale build folders ----------------------------------------------------------------------


def _folder(cache: Path, name: str, days_old: float = 0) -> Path:
    d = cache / name
    d.mkdir()
    (d / "unit.o").write_bytes(b"x" * 1024)
    if days_old:
        t = time.time() - days_old * 86400
        os.utime(d, (t, t))
    return d


def test_stale_build_folders(tmp_path, monkeypatch):
    """A process killed mid-build (SIGKILL: no cleanup of its own) left its build folder in the
    CPU backend's cache (2.5 GB of them were seen). A real owner: a process that made its build folder through `build_dir` and waits in it.
    While it lives its folder stays; once it is killed the next prune removes it
    (toolchain.prune_builds: only this user's real folders, never a link, and a name it cannot
    judge only after a day)."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom astra_cuda.backends.cpu import toolchain\n"
         "d = toolchain.build_dir()\nopen(d.name + '/unit.cpp', 'w').write('int x;')\n"
         "print(d.name, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "ASTRA_CACHE_DIR": str(tmp_path)})
    try:
        folder = Path(child.stdout.readline().strip())  # type: ignore[union-attr]
        assert folder.parent == toolchain.cache_dir() and folder.name.startswith(f"build-{child.pid}-")
        assert toolchain.prune_builds() == [] and (folder / "unit.cpp").exists()   # alive: kept
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert folder.exists()   # what a killed process leaves
    assert toolchain.prune_builds() == [folder.name] and not folder.exists()


def test_only_stale_folders_of_ours_go(tmp_path, monkeypatch):
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    cache = toolchain.cache_dir()
    where = toolchain._where()
    me = _folder(cache, f"build-{toolchain._owner()}-live1")               # this process: alive
    start = toolchain._start_time(os.getpid())
    reused = _folder(cache, f"build-{os.getpid()}-{start + 1}-{where}-re")  # this pid, another start: reused pid
    p = subprocess.Popen(["sleep", "30"])
    dead_start = toolchain._start_time(p.pid)
    p.kill()
    p.wait()
    dead = _folder(cache, f"build-{p.pid}-{dead_start}-{where}-dead")
    foreign = _folder(cache, f"build-1-1-{'0' if where[0] != '0' else '1'}{where[1:]}-ns")  # another namespace
    foreign_old = _folder(cache, "build-1-1-abcdef01-ns2", days_old=2)
    legacy = _folder(cache, "build-k3j4h5")                                 # an older Astra's name
    legacy_old = _folder(cache, "build-zz9yy8", days_old=2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    link = cache / f"build-{p.pid}-{dead_start}-{where}-link"
    link.symlink_to(outside)
    gone = set(toolchain.prune_builds())
    assert gone == {reused.name, dead.name, foreign_old.name, legacy_old.name}, gone
    for d in (me, foreign, legacy):
        assert (d / "unit.o").exists(), d
    assert link.is_symlink() and (outside / "keep.txt").read_text() == "mine"


def test_prune_cache_prunes_builds_too(tmp_path, monkeypatch):
    """`make setup` (toolchain.warm) and a full module cache run prune_cache: stale builds go there too."""
    monkeypatch.setenv("ASTRA_CACHE_DIR", str(tmp_path))
    p = subprocess.Popen(["sleep", "30"])
    start = toolchain._start_time(p.pid)
    p.kill()
    p.wait()
    dead = _folder(toolchain.cache_dir(), f"build-{p.pid}-{start}-{toolchain._where()}-x")
    toolchain.prune_cache()
    assert not dead.exists()
