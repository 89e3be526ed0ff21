"""Why the GPU is not used, and the one step that makes it work.

A machine with an NVIDIA GPU but no CuPy (or a CuPy built for a newer CUDA than the driver
supports) would silently check kernels on the CPU. This module looks at what is there — the
driver (`/proc/driver/nvidia/version`, `nvidia-smi`), the CUDA version it supports, the CuPy
distribution installed for this interpreter — and says what to run. Called in a worker by the
backend probe (`jobs.backends_job`) when the GPU backend is not usable; never imports CuPy.
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
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
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or re.fullmatch(r"cupy-cuda\d+x", name):
            return Cupy(name, dist.version)
    return Cupy(None)


def advise(drv: Driver | None, cupy: Cupy, probe_error: str, python: str = sys.executable) -> Advice | None:
    """What to do so that the GPU backend works here; None when no GPU is visible."""
    if drv is None:
        return None
    seen = f"a GPU is visible ({drv.describe()})"
    py = shlex.quote(python)
    if drv.cuda is None or drv.cuda[0] < SUPPORTED_CUDA[0]:
        return Advice(f"{seen} but Astra's GPU backend needs a driver for CUDA {SUPPORTED_CUDA[0]} or newer "
                      f"(driver {_DRIVER_FOR_CUDA[1][1]}+): update the NVIDIA driver", "")
    want = min(drv.cuda[0], SUPPORTED_CUDA[-1])
    package = f"cupy-cuda{want}x"
    install = f"{py} -m pip install '{package}[ctk]>={CUPY_MIN}'"
    if cupy.dist is None:
        return Advice(f"{seen} but CuPy is not installed for {python}", install)
    if cupy.cuda_major != want:
        built = f"built for CUDA {cupy.cuda_major}" if cupy.cuda_major else "not a CUDA wheel"
        return Advice(f"{seen} but the installed {cupy.dist} {cupy.version} is {built}",
                      f"{py} -m pip uninstall -y {cupy.dist} && {install}")
    # The right CuPy is there and still fails: most often the CUDA libraries it loads are missing.
    return Advice(f"{seen} and {cupy.dist} {cupy.version} is installed, but it does not work ({probe_error})",
                  f"{py} -m pip install '{cupy.dist}[ctk]>={CUPY_MIN}'")
