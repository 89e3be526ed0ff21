"""The GPU backend's host programs (`Backend.build_host`): the unit its module was compiled from,
with Astra's `main`, built by nvcc with the project's flags (`compile.hostprog.build_nvcc`), so a
class the kernel takes by value is laid out as nvcc lays out the kernel's parameter. Where no CUDA
toolkit is installed (the module is NVRTC's) there is no host compiler of CUDA to build one."""
from __future__ import annotations

from pathlib import Path

from .base import LaunchError, Module


def build_host(arch: str, module: Module, main: str) -> Path:
    from ..compile import hostprog, toolkit
    u = module.unit
    if u is None:
        raise LaunchError("the module was not compiled from a unit: no host program can be built of it")
    tk, why = toolkit.for_file(u.file_text or u.source, u.path, u.context)
    if tk is None:
        raise LaunchError(f"an object a constructor builds needs nvcc to build its host program: {why}")
    return hostprog.build_nvcc(u.source + u.appendix, main, u.path, u.context, tk, arch)
