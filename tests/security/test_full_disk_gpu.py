"""The catalogue's `full_disk_gpu`: a full disk under what the GPU backend writes — CuPy's kernel
cache (NVRTC's modules), nvcc's cache and build folder, and `.astra/` — is a clear error (exit 2,
naming what could not be written), never a verdict on the kernel or a traceback, and nothing the
user had is lost. The GPU tests run on a GPU machine (`scripts/gpu-check full-disk-gpu`); the
first test holds the one piece of it that needs no GPU (CuPy's failed cache write kept apart from
the kernel's compile errors) on every machine.

The full disk is a real one: a tmpfs filled to its last byte, in a mount namespace of the test's
own where one can be made (`unshare -m`), else /dev/shm when it is a small tmpfs (a container's:
64 MiB) — filled only while the command runs."""
from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .test_full_disk import UNSHARE

ROOT = Path(__file__).resolve().parents[2]
SILU = (ROOT / "examples" / "silu_and_mul.cu").read_text()


class _FakeCupy:
    """Just what GpuBackend.compile touches, with a kernel cache whose write fails as a full disk does."""

    class cuda:
        class compiler:
            class CompileException(Exception):
                pass

        @staticmethod
        def get_cuda_path():
            return None

    class RawModule:
        def __init__(self, code, options, name_expressions):
            pass

        def compile(self):
            from astra_cuda.backends import cupy_confinement
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(cupy_confinement.cupy_cache_dir(),
                                                                              "k.cubin"))


def test_cupy_cache_write_failure_is_no_space_not_a_compile_error(tmp_path, monkeypatch):
    """CuPy's failed write of a compiled module was caught with every other exception of the
    compile and said "could not load the compiled module" — a compile failure of the kernel."""
    from astra_cuda.backends import gpu
    from astra_cuda.compile import confine
    from astra_cuda.storage import NoSpace
    if confine.unavailable_reason():
        pytest.skip(confine.unavailable_reason())
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    b = gpu.GpuBackend.__new__(gpu.GpuBackend)
    b.cp, b.device, b.poisoned, b.sanitizer, b._modules = _FakeCupy(), contextlib.nullcontext(), None, None, {}
    with pytest.raises(NoSpace, match="cannot write CuPy's kernel cache .*no space left on the device"):
        b.compile("__global__ void k(float* x) { x[0] = 1.f; }\n", ["k"], filename=str(tmp_path / "k.cu"))


# ---- on a GPU ------------------------------------------------------------------------------

def _shm_size() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    with open("/proc/mounts") as f:
        if not any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in f):
            return None
    return st.f_blocks * st.f_frsize


def _how() -> str | None:
    if UNSHARE is not None:
        return "a tmpfs of 2 MiB in a mount namespace"
    size = _shm_size()
    if size is not None and size <= (1 << 30):
        return f"/dev/shm ({size >> 20} MiB tmpfs)"
    return None


def _gpu() -> tuple[bool, str]:
    if importlib.util.find_spec("cupy") is None:
        return False, "no CuPy"
    from astra_cuda.session import Session
    gpu = Session().statuses()["gpu"]
    return gpu.available, gpu.reason


def on_full_disk(staging: Path, command: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """`command` (shell; FULL names the full folder, ASTRA this checkout's CLI) where FULL holds
    a copy of `staging` on a file system filled to its last byte."""
    how = _how()
    assert how is not None
    astra = f"{shlex.quote(sys.executable)} -m astra_cuda"
    if UNSHARE is not None:
        full = staging.parent / "full"
        setup = f"mkdir -p {full}; mount -t tmpfs -o size=2m tmpfs {full}\n"
        wrap = list(UNSHARE)
    else:
        full = Path("/dev/shm") / f"astra-full-{uuid.uuid4().hex[:8]}"
        setup = f"mkdir -p {full}\n"
        wrap = []
    run = re.sub(r"\bASTRA\b", lambda _: astra, command)  # not ASTRA_CUDA_TOOLKIT's prefix
    script = (f"set -e\n{setup}cp -a {shlex.quote(str(staging))}/. {full}/\n"
              f"head -c 2G /dev/zero > {full}/.filler 2>/dev/null || true\nset +e\n"
              f"export FULL={full}\n{run}\nrm -f {full}/.filler\n")
    try:
        r = subprocess.run([*wrap, "sh", "-c", script], capture_output=True, text=True, timeout=400,
                           env={**os.environ, **env}, cwd=ROOT)
    finally:
        if UNSHARE is None:
            shutil.rmtree(full, ignore_errors=True)
    print(f"[{how}] exit {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    return r, how


@pytest.fixture
def gpu_disk():
    ok, why = _gpu()
    if not ok:
        pytest.skip(f"no GPU: {why}")
    if _how() is None:
        pytest.skip("no small file system to fill here (no mount namespace, /dev/shm large or absent)")


def _project(where: Path, text: str) -> Path:
    (where / ".git").mkdir(parents=True)
    f = where / "k.cu"
    f.write_text(text)
    return f


def _fresh(text: str = SILU) -> str:
    """A kernel no cache holds yet."""
    return text.replace("1.0f", f"1.0f + 0.0f * {uuid.uuid4().int % 100000}", 1)


@pytest.mark.gpu
def test_cupy_kernel_cache_full_on_the_gpu(tmp_path, gpu_disk):
    """NVRTC through CuPy (as where no toolkit is installed), CuPy's kernel cache on a full disk."""
    f = _project(tmp_path / "p", _fresh())
    staging = tmp_path / "stage"
    (staging / "cupy").mkdir(parents=True)
    r, _ = on_full_disk(staging, f"ASTRA_CUDA_TOOLKIT=none CUPY_CACHE_DIR=$FULL/cupy ASTRA check {f} --backend gpu; "
                          "echo rc=$?", {})
    said = r.stdout + r.stderr
    assert "Traceback" not in said, said[-3000:]
    assert "rc=2" in r.stdout and "CuPy's kernel cache" in said and "no space left on the device" in said, said[-3000:]
    assert f.read_text().startswith(SILU[:40])


@pytest.mark.gpu
def test_nvcc_cache_and_scratch_full_on_the_gpu(tmp_path, gpu_disk):
    """nvcc's whole-file compile for the GPU backend with Astra's caches (XDG_CACHE_HOME) and the
    scratch folder (TMPDIR) on a full disk: a cache that only saves time carries on (a verdict),
    a write the check needs is a clear error; never a traceback, never a compile failure of the
    kernel."""
    from astra_cuda.compile import toolkit
    if toolkit.find() is None:
        pytest.skip("no CUDA toolkit (nvcc)")
    f = _project(tmp_path / "p", _fresh())
    staging = tmp_path / "stage"
    (staging / "xdg").mkdir(parents=True)
    (staging / "tmp").mkdir()
    r, _ = on_full_disk(staging, f"XDG_CACHE_HOME=$FULL/xdg TMPDIR=$FULL/tmp ASTRA check {f} --backend gpu; "
                          "echo rc=$?", {})
    said = r.stdout + r.stderr
    assert "Traceback" not in said, said[-3000:]
    assert ("rc=2" in r.stdout and "no space left on the device" in said) or \
        ("rc=0" in r.stdout and "silu_and_mul" in r.stdout), said[-3000:]


@pytest.mark.gpu
def test_astra_folder_full_on_the_gpu(tmp_path, gpu_disk):
    """The project on a full disk: the GPU check's verdict stands, unpinned, nothing half-written;
    `optimize --write` stops before any round and the file is unchanged (no lost data)."""
    staging = tmp_path / "stage"
    text = _fresh()
    _project(staging, text)
    r, _ = on_full_disk(staging, "ASTRA check $FULL/k.cu --backend gpu; echo rc=$?; ls -A $FULL/.astra; "
                          "ASTRA optimize $FULL/k.cu --kernel silu_and_mul --backend gpu --rounds 1 --write; "
                          "echo rc=$?; cmp $FULL/k.cu " + shlex.quote(str(staging / "k.cu")) + " && echo unchanged", {})
    said = r.stdout + r.stderr
    assert "Traceback" not in said, said[-3000:]
    assert r.stdout.count("rc=") == 2 and r.stdout.split("rc=")[1].startswith("0"), said[-3000:]
    assert "not pinned (cannot write" in r.stdout and "no space left on the device" in said, said[-3000:]
    assert ".tmp" not in r.stdout.split("rc=")[1], "a half-written file stayed behind: " + r.stdout[-500:]
    assert r.stdout.split("rc=")[2].startswith("2") and "unchanged" in r.stdout, said[-3000:]
