"""Why the GPU is not used, and the one step that makes it work.

A machine with an NVIDIA GPU but no CuPy (or a CuPy built for a newer CUDA than the driver
supports) would silently check kernels on the CPU. This module looks at what is there — the
driver (`/proc/driver/nvidia/version`, `nvidia-smi`), the CUDA version it supports, the CuPy
distribution installed for this interpreter — and says what to run. Called in a worker by the
backend probe (`jobs.BackendsJob`) when the GPU backend is not usable; never imports CuPy.

The fix installs into Astra's own environment, never into a system Python (Debian's and Ubuntu's
`python3` refuse it: PEP 668's externally-managed environments): the venv Astra is installed in
(`make setup`'s `.venv`, pipx's or uv's tool venv), else — the editor's bundled server runs on
whatever `python3` the user has — a venv Astra creates for its GPU libraries (`gpu_env`), which
`use_gpu_env` puts on the path of the server, the CLI and every worker.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import importlib.util
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

PROC_VERSION = "/proc/driver/nvidia/version"
CUPY_MIN = "14"          # the CuPy release line Astra is tested with
SUPPORTED_CUDA = (12, 13)

# The oldest Linux driver of each CUDA major (NVIDIA's CUDA toolkit release notes), used when
# nvidia-smi does not print the CUDA version itself.
_DRIVER_FOR_CUDA = ((13, 580), (12, 525), (11, 450))


@dataclass(frozen=True)
class Driver:
    version: str                       # '550.54.14'; '' when unknown
    cuda: tuple[int, int] | None       # the newest CUDA version the driver supports

    def describe(self) -> str:
        cuda = f", CUDA {self.cuda[0]}.{self.cuda[1]}" if self.cuda else ""
        return f"NVIDIA driver {self.version or '(version unknown)'}{cuda}"


@dataclass(frozen=True)
class Cupy:
    dist: str | None                   # 'cupy-cuda12x', ... None: not installed
    version: str = ""
    where: str = "own"                 # 'own': in Astra's own environment; 'other': elsewhere on the path

    @property
    def cuda_major(self) -> int | None:
        m = re.fullmatch(r"cupy-cuda(\d+)x", self.dist or "")
        return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Advice:
    problem: str    # one sentence: what is wrong
    fix: str        # one shell command that fixes it ('' when none can be given)

    def text(self) -> str:
        return f"{self.problem}: run `{self.fix}`" if self.fix else self.problem


def driver(proc_version: str = PROC_VERSION, smi: str | None = "nvidia-smi") -> Driver | None:
    """The NVIDIA driver when a GPU is visible here, else None."""
    version = ""
    try:
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", Path(proc_version).read_text())
        version = m.group(1) if m else ""
        visible = True
    except OSError:
        visible = False
    cuda = None
    exe = shutil.which(smi) if smi else None
    if exe:
        try:
            out = subprocess.run([exe], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        if (m := re.search(r"Driver Version:\s*(\d+(?:\.\d+)+)", out)) is not None:
            version, visible = version or m.group(1), True
        if (m := re.search(r"CUDA Version:\s*(\d+)\.(\d+)", out)) is not None:
            cuda = (int(m.group(1)), int(m.group(2)))
    if not visible:
        return None
    if cuda is None and version:
        major = int(version.split(".")[0])
        cuda = next(((c, 0) for c, oldest in _DRIVER_FOR_CUDA if major >= oldest), None)
    return Driver(version, cuda)


def installed_cupy() -> Cupy:
    """The CuPy distribution installed for this interpreter (None when there is none)."""
    own = Path(sys.prefix).resolve() if in_own_venv() else gpu_env().resolve()
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or re.fullmatch(r"cupy-cuda\d+x", name):
            home = Path(str(dist.locate_file(""))).resolve()
            return Cupy(name, dist.version, "own" if own in (home, *home.parents) else "other")
    return Cupy(None)


def gpu_env(version: str = "%d.%d" % sys.version_info[:2]) -> Path:
    """The venv Astra creates for CuPy and its CUDA libraries when its interpreter is not its own
    (one per Python version: native wheels differ): $ASTRA_GPU_ENV, else
    $XDG_DATA_HOME/astra/gpu-pyX.Y (~/.local/share/astra/gpu-pyX.Y)."""
    if os.environ.get("ASTRA_GPU_ENV"):
        return Path(os.environ["ASTRA_GPU_ENV"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "astra" / f"gpu-py{version}"


def _site_packages(env: Path, version: str = "%d.%d" % sys.version_info[:2]) -> Path:
    return env / "lib" / f"python{version}" / "site-packages"


def in_own_venv() -> bool:
    """Whether Astra runs from a venv it is installed in (its own environment: pip may install
    there), rather than from the extension's bundle or a system Python."""
    if sys.prefix == sys.base_prefix:
        return False
    if (Path(__file__).resolve().parents[1] / "ASTRA_BUNDLE.json").exists():
        return False           # the extension's bundled server, whatever interpreter runs it
    try:
        home = Path(str(metadata.distribution("astra-cuda").locate_file(""))).resolve()
    except metadata.PackageNotFoundError:
        return False
    return Path(sys.prefix).resolve() in (home, *home.parents)


def use_gpu_env() -> None:
    """Put the GPU venv's libraries on this process's path (workers inherit it), ahead of the
    interpreter's own site-packages so a CuPy installed there for another CUDA does not win; the
    extension's bundled libraries, put first by its launcher, stay first."""
    if in_own_venv():
        return
    site = _site_packages(gpu_env())
    if not site.is_dir() or str(site) in sys.path:
        return
    at = next((i for i, p in enumerate(sys.path) if p.rstrip("/").endswith(("site-packages", "dist-packages"))),
              len(sys.path))
    sys.path.insert(at, str(site))


@dataclass(frozen=True)
class Target:
    """Where the fix installs: `pip` is the command prefix that installs there."""
    pip: str
    create: str = ""      # the command that creates the environment first ('' when it exists)


def install_target(python: str = sys.executable) -> Target:
    """Astra's own environment: its venv (with its pip, else uv's), else the GPU venv."""
    py = shlex.quote(python)
    if in_own_venv():
        if importlib.util.find_spec("pip") is None and shutil.which("uv"):
            return Target(f"uv pip --python {py}")     # uv's tool venvs carry no pip
        return Target(f"{py} -m pip")
    env = gpu_env()
    envpy = shlex.quote(str(env / "bin" / "python"))
    create = "" if (env / "bin" / "python").exists() else f"{py} -m venv {shlex.quote(str(env))}"
    return Target(f"{envpy} -m pip", create)


def advise(drv: Driver | None, cupy: Cupy, probe_error: str, python: str = sys.executable,
           target: Target | None = None) -> Advice | None:
    """What to do so that the GPU backend works here; None when no GPU is visible."""
    if drv is None:
        return None
    seen = f"a GPU is visible ({drv.describe()})"
    t = target or install_target(python)
    first = f"{t.create} && " if t.create else ""
    if drv.cuda is None or drv.cuda[0] < SUPPORTED_CUDA[0]:
        return Advice(f"{seen} but Astra's GPU backend needs a driver for CUDA {SUPPORTED_CUDA[0]} or newer "
                      f"(driver {_DRIVER_FOR_CUDA[1][1]}+): update the NVIDIA driver", "")
    want = min(drv.cuda[0], SUPPORTED_CUDA[-1])
    package = f"cupy-cuda{want}x"
    install = f"{first}{t.pip} install '{package}[ctk]>={CUPY_MIN}'"
    if cupy.dist is None:
        return Advice(f"{seen} but CuPy is not installed for {python}", install)
    if cupy.cuda_major != want:
        built = f"built for CUDA {cupy.cuda_major}" if cupy.cuda_major else "not a CUDA wheel"
        # A CuPy elsewhere (a system site-packages) is shadowed by the one installed here.
        drop = f"{t.pip} uninstall -y {cupy.dist} && " if cupy.where == "own" and not t.create else ""
        return Advice(f"{seen} but the installed {cupy.dist} {cupy.version} is {built}", f"{drop}{install}")
    # The right CuPy is there and still fails: most often the CUDA libraries it loads are missing.
    return Advice(f"{seen} and {cupy.dist} {cupy.version} is installed, but it does not work ({probe_error})",
                  f"{first}{t.pip} install '{cupy.dist}[ctk]>={CUPY_MIN}'")
