"""PyTorch-extension files: `<torch/extension.h>`, `<torch/all.h>`, ATen and c10 headers.

Such a file compiles with torch's include folders and the flags torch's own extension builder
gives nvcc (`torch.utils.cpp_extension`: the `__CUDA_NO_HALF_*` defines, so c10's `Half`
operators are the ones used, and `--expt-relaxed-constexpr`). The folders come from the
project's include paths when they hold torch's headers, else from the torch installed beside
Astra — found without importing it (its package folder's `include/`), with Python's own include
folder for pybind11's `<Python.h>`. Its element types (`at::Half`, `c10::BFloat16`,
`c10::Float8_e4m3fn`) are the spec's `half`, `bfloat16`, `float8_e4m3fn` (`astra_cuda.model.dtypes`).
"""
from __future__ import annotations

import dataclasses
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from . import confine
from .headers import HeaderBytes, includes_in
from .project import ProjectContext

TORCH_HEADERS = ("torch/", "ATen/", "c10/")   # the header folders torch installs

# torch.utils.cpp_extension's COMMON_NVCC_FLAGS, and the defines its builder adds.
DEFINES = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
           "-D__CUDA_NO_HALF2_OPERATORS__", "-DTORCH_API_INCLUDE_EXTENSION_H")
FLAGS = ("--expt-relaxed-constexpr",)
# The least standard a PyTorch extension compiles with: torch's headers require C++20 since 2.10
# (`#error C++20 or later compatible compiler is required`) and older ones compile under it too.
# A project that names an older one still builds with C++20, as torch's CMake target requires it
# (compile features: CMake takes the higher) — vLLM sets CMAKE_CXX_STANDARD 17 and pins torch 2.10.
STD = "c++20"
_ORDER = ("c++03", "c++11", "c++14", "c++17", "c++20", "c++23")
MAX_HEADERS = 64


@dataclass(frozen=True)
class TorchFlags:
    include_dirs: tuple[str, ...]   # torch's folders, when the project does not give them
    system_dirs: tuple[str, ...]    # Python's include folder (pybind11 includes <Python.h>)
    defines: tuple[str, ...]
    flags: tuple[str, ...]
    std: str = STD


# Where the installed torch's headers are is confine's to know (its compile budgets depend on it).
installed_include_dirs = confine.installed_torch_include_dirs


def python_include_dir() -> str | None:
    inc = sysconfig.get_paths().get("include")
    return inc if inc and os.path.isfile(os.path.join(inc, "Python.h")) else None


def given(context: ProjectContext) -> bool:
    """Whether the project's include paths already hold torch's headers."""
    return any((Path(d) / "torch" / "extension.h").is_file() or (Path(d) / "torch" / "all.h").is_file()
               for d in (*context.include_dirs, *context.system_dirs))


def available(context: ProjectContext) -> bool:
    """Whether a PyTorch extension can compile here: torch's headers given or installed."""
    return given(context) or bool(installed_include_dirs())


def standard(project_std: str | None) -> str:
    """The standard a PyTorch extension compiles with: the project's, raised to `STD`."""
    std = (project_std or "").lower().replace("gnu++", "c++")
    return std if std in _ORDER and _ORDER.index(std) > _ORDER.index(STD) else STD


def nvcc_flags(context: ProjectContext) -> TorchFlags:
    include = () if given(context) else installed_include_dirs()
    py = python_include_dir()
    return TorchFlags(include, (py,) if py else (), defines(context), FLAGS, standard(context.std))


def defines(context: ProjectContext) -> tuple[str, ...]:
    """torch's defines less those the project's build undefines (`-U__CUDA_NO_HALF_OPERATORS__`:
    DeepSpeed's and apex's setup.py; vLLM's CMake removes them for CUDA >= 12)."""
    return tuple(d for d in DEFINES if d[2:].split("=", 1)[0] not in context.undefines)


def with_defines(context: ProjectContext, text: str, path: str) -> ProjectContext:
    """The context with torch's defines where the file is a PyTorch extension: the device pass,
    the cut and the CPU build see the macros nvcc sees (a branch on `__CUDA_NO_HALF_OPERATORS__`
    takes the same side everywhere). Where torch's headers are not found the file goes to NVRTC,
    which never sees torch's defines (`toolkit.for_file`), so neither does the rest."""
    if not uses_torch(text, path, context) or not available(context):
        return context
    have = {n for n, _ in context.defines}
    extra = tuple((d[2:], None) for d in defines(context) if d[2:] not in have)
    return dataclasses.replace(context, defines=context.defines + extra) if extra else context


def read_dirs() -> tuple[str, ...]:
    """What a compile of a PyTorch extension reads beyond the project: torch's and Python's headers."""
    py = python_include_dir()
    return (*installed_include_dirs(), *((py,) if py else ()))


def uses_torch(text: str, path: str, context: ProjectContext) -> bool:
    """Whether the file, or a project header it includes (transitively), includes torch's."""
    here = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    dirs = list(context.include_dirs)
    policy = confine.for_unit([f"-I{here}", *context.options()])  # what the compiler may read
    todo, seen = [(text, here, os.path.basename(path) if path else "the file")], set[str]()
    budget = HeaderBytes(todo[0][2])
    while todo and len(seen) < MAX_HEADERS:
        body, folder, name = todo.pop()
        for header, quoted in includes_in(body, name):
            if header.startswith(TORCH_HEADERS):
                return True
            for d in ([folder] if quoted else []) + dirs:
                f = Path(d) / header
                if f.is_file():
                    real = str(f.resolve())
                    if real not in seen and policy.allows(real):
                        seen.add(real)
                        try:
                            data = f.read_text(errors="replace")[:1 << 22]
                        except OSError:
                            break
                        budget.add(len(data), header)
                        todo.append((data, str(Path(real).parent), header))
                    break
    return False
