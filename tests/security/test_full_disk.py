"""The catalogue's `full_disk_*` entries, for real: each command runs in a mount namespace of its
own (`unshare -m`) where a folder Astra writes is a tiny tmpfs filled to the last byte (the
kernel's ENOSPC) or a read-only bind of itself (EROFS), so nothing on this machine fills up.
A full disk is a clear error (exit 2, never a traceback), nothing half-written stays behind,
and nothing the user had is lost."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SILU = (ROOT / "examples" / "silu_and_mul.cu").read_text()


def _unshare() -> list[str] | None:
    if shutil.which("unshare") is None:
        return None
    for cmd in (["unshare", "-m"], ["unshare", "-r", "-m"]):  # root, else a user namespace's root
        if subprocess.run([*cmd, "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt 2>/dev/null || "
                           "mount -t tmpfs -o size=4k tmpfs /tmp"], capture_output=True).returncode == 0:
            return cmd
    return None


UNSHARE = _unshare()
pytestmark = pytest.mark.skipif(UNSHARE is None, reason="no mount namespace here (unshare -m) for a real full disk")


def full(folder: Path, size: str = "64k") -> str:
    """Shell lines: `folder` becomes a tmpfs of `size`, filled to the last byte."""
    q = shlex.quote(str(folder))
    return (f"mkdir -p {q}; mount -t tmpfs -o size={size} tmpfs {q}; "
            f"head -c 64M /dev/zero > {q}/.filler 2>/dev/null || true\n")


def read_only(folder: Path) -> str:
    q = shlex.quote(str(folder))
    return f"mkdir -p {q}; mount --bind {q} {q}; mount -o remount,ro,bind {q}\n"


def mounted(setup: str, command: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """`command` (shell) after `setup` in a mount namespace of its own; `astra` is this checkout's CLI."""
    assert UNSHARE is not None
    astra = f"{shlex.quote(sys.executable)} -m astra_cuda"
    script = f"set -e\n{setup}set +e\n{command.replace('ASTRA', astra)}"
    return subprocess.run([*UNSHARE, "sh", "-c", script], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


def _project(tmp_path: Path, text: str = SILU) -> Path:
    (tmp_path / ".git").mkdir(parents=True)
    f = tmp_path / "k.cu"
    f.write_text(text)
    return f


def test_check_on_a_full_disk_keeps_its_verdict_unpinned(tmp_path):
    """`.astra/` on a full disk: the check's verdict stands, the pin is not written and says why."""
    f = _project(tmp_path)
    r = mounted(full(tmp_path / ".astra"), f"ASTRA check {f} --backend cpu; echo rc=$?; ls -AR {tmp_path / '.astra'}")
    said = r.stdout + r.stderr
    assert "rc=0" in r.stdout and "Traceback" not in said, said[-3000:]
    assert "not pinned (cannot write" in r.stdout and "no space left on the device" in r.stdout, r.stdout[-2000:]
    assert ".tmp" not in r.stdout.split("rc=0")[-1], "a half-written file stayed behind: " + r.stdout[-300:]


def test_optimize_with_a_read_only_astra_folder_is_refused_before_it_starts(tmp_path):
    """`astra optimize --write` where `.astra/` is read-only: exit 2 before any round, the file unchanged."""
    f = _project(tmp_path)
    r = mounted(read_only(tmp_path / ".astra"),
                f"ASTRA optimize {f} --kernel silu_and_mul --backend cpu --rounds 1 --write; echo rc=$?")
    said = r.stdout + r.stderr
    assert "rc=2" in r.stdout and "Traceback" not in said, said[-3000:]
    assert "the file system is read-only" in r.stderr, said[-2000:]
    assert f.read_text() == SILU


def test_run_log_on_a_disk_that_fills_mid_run(tmp_path):
    """The run log's first writes fail as a clear error; a later one is noted and the run goes on,
    with nothing half-written left."""
    runs = tmp_path / "runs"
    code = ("from pathlib import Path\n"
            "from astra_cuda.agents.runlog import RunLog\n"
            "from astra_cuda.storage import NoSpace\n"
            f"log = RunLog(Path({str(runs / 'r1')!r}))\n"
            "log.start({'kernel': 'k'}, 'x' * 1000)\n"
            f"open({str(runs / 'filler')!r}, 'wb').write(b'\\0' * (200 << 10)) if False else None\n"
            "import os\n"
            "try:\n"
            f"    with open({str(runs / '.fill')!r}, 'wb') as fh: fh.write(b'\\0' * (1 << 20))\n"
            "except OSError: pass\n"
            "log.best('y' * 100000)\n"
            "print('unsaved:', log.unsaved)\n"
            "try:\n"
            f"    RunLog(Path({str(runs / 'r2')!r})).start({{'kernel': 'k'}}, 'x' * 100000)\n"
            "except NoSpace as e: print('refused:', e.message)\n")
    r = mounted(f"mkdir -p {runs}; mount -t tmpfs -o size=128k tmpfs {runs}\n",
                f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}; ls -A {runs}/r1 {runs}/r2",
                env={"PYTHONPATH": str(ROOT / "server")})
    said = r.stdout + r.stderr
    assert "Traceback" not in said, said[-3000:]
    assert "unsaved: cannot write the run log" in r.stdout and "no space left on the device" in r.stdout, said
    assert "refused: cannot write the run log" in r.stdout, said
    assert ".tmp" not in r.stdout.split("refused:")[-1], "a half-written file stayed behind: " + r.stdout


@pytest.fixture
def warm_cache():
    """This checkout's runtime, executor and precompiled shim, built in the real cache."""
    from astra_cuda.backends.cpu import toolchain
    toolchain.prepare("")
    toolchain.executor_program()
    toolchain.cub_header_names()
    return toolchain.cache_dir(), toolchain.runtime_digest()


def test_full_module_cache_is_a_clear_error(tmp_path, warm_cache):
    """The CPU backend's module cache on a full disk (this checkout's runtime bound in from the
    real cache, so only the kernel's own module is new): exit 2 naming the cache, no traceback,
    not a verdict on the kernel."""
    real, digest = warm_cache
    cache = tmp_path / "cache"
    keep = [p for p in real.iterdir() if digest in p.name or p.name.startswith("cub-names-")]
    binds = "".join(f"{'mkdir -p' if p.is_dir() else 'touch'} {shlex.quote(str(cache / 'cpu' / p.name))}; "
                    f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(cache / 'cpu' / p.name))}\n" for p in keep)
    setup = f"mkdir -p {cache}; mount -t tmpfs -o size=512k tmpfs {cache}; mkdir -p {cache}/cpu\n{binds}" \
            f"head -c 64M /dev/zero > {cache}/cpu/.filler 2>/dev/null || true\n"
    f = _project(tmp_path / "p", SILU.replace("1.0f", f"1.0f + 0.0f * {os.getpid()}"))  # a module not cached
    r = mounted(setup, f"ASTRA check {f} --backend cpu; echo rc=$?", env={"ASTRA_CACHE_DIR": str(cache)})
    said = r.stdout + r.stderr
    assert "rc=2" in r.stdout and "Traceback" not in said, said[-3000:]
    assert "cannot write the CPU backend's module cache" in r.stderr and "no space left on the device" in r.stderr, \
        said[-2000:]


def test_a_compile_error_that_claims_a_full_disk_is_the_kernel_s(tmp_path):
    """`#error No space left on device` in a kernel is its own compile error, not a full disk (the
    file system is asked before a compiler's message is believed)."""
    f = _project(tmp_path, "#error No space left on device\n" + SILU)
    r = subprocess.run([sys.executable, "-m", "astra_cuda", "check", str(f), "--backend", "cpu"],
                       capture_output=True, text=True, timeout=240, cwd=ROOT)
    said = r.stdout + r.stderr
    assert r.returncode in (1, 2) and "Traceback" not in said and "no space left on the device" not in said, said[-2000:]
