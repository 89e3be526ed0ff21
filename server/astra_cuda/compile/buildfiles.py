"""The flags a project's own build files give nvcc, where no compile_commands.json says them.

Read, never run (a cloned repository is not trusted), from the file's folder up to the project
root (`confine.project_root`):

- a `CMakeLists.txt` that finds torch (`find_package(Torch ...)`): torch's CMake configuration
  adds `--expt-relaxed-constexpr --expt-extended-lambda` to every CUDA file of the project
  (`share/cmake/Caffe2/public/cuda.cmake`): vLLM and sgl-kernel build this way, and their
  `__device__` lambdas need the second;
- a `setup.py` that builds with `torch.utils.cpp_extension` (`CUDAExtension(...,
  extra_compile_args={"nvcc": [...]})`): that nvcc list, where it is written as literals (strings,
  lists, module-level names of them, `+`); the extension whose `sources` name the file, else the
  list every extension shares. llm-awq's gives `-U__CUDA_NO_HALF_OPERATORS__ …` (the torch defines
  its half and bfloat16 code needs undone) and `--expt-extended-lambda`.

What is taken goes through `project.from_arguments` (`project.resolve` calls `flags`), as a
compile command's flags do: include
folders outside the project are dropped and flags Astra does not pass on are listed as ignored.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

from . import confine

MAX_BYTES = 1 << 20           # a build file is a few pages
TORCH_CMAKE_FLAGS = ("--expt-relaxed-constexpr", "--expt-extended-lambda")
_FIND_TORCH = re.compile(r"^[^#\n]*\bfind_package\s*\(\s*Torch\b", re.IGNORECASE | re.MULTILINE)


def _folders(path: str) -> list[Path]:
    """The file's folder and its parents up to the project root (only the folder without one)."""
    here = Path(path).resolve().parent
    root = confine.project_root(here)
    if root is None:
        return [here]
    top = Path(root)
    out = [here]
    for d in here.parents:
        if not d.is_relative_to(top):
            break
        out.append(d)
    return out if here.is_relative_to(top) else [here]


def _read(f: Path) -> str | None:
    try:
        if not f.is_file() or f.stat().st_size > MAX_BYTES:
            return None
        return f.read_text(errors="replace")
    except OSError:
        return None


def flags(path: str) -> list[tuple[list[str], Path, str]]:
    """What the nearest build files give `path`: (compiler arguments, the folder they are relative
    to, where they come from) per file, for `project.from_arguments`."""
    out: list[tuple[list[str], Path, str]] = []
    for d in _folders(path):
        text = _read(d / "CMakeLists.txt")
        if text is not None and _FIND_TORCH.search(text):
            out.append((list(TORCH_CMAKE_FLAGS), d, f"{d / 'CMakeLists.txt'} (find_package(Torch): torch's CUDA flags)"))
            break
    for d in _folders(path):
        text = _read(d / "setup.py")
        if text is None:
            continue
        given = setup_nvcc_flags(text, Path(path).resolve().relative_to(d).as_posix())
        if given:
            out.append((list(given), d, f"{d / 'setup.py'} (extra_compile_args['nvcc'])"))
        break
    return out


@lru_cache(maxsize=32)
def setup_nvcc_flags(text: str, rel: str) -> tuple[str, ...]:
    """The nvcc flags a setup.py gives the source file `rel` (relative to its folder), as far as
    they are written as literals; () where they are not, or where extensions differ and none
    lists the file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    # module-level names assigned exactly once in the whole file: one assigned again (apex's
    # `version_ge_1_1 = []`, then `= [...]` under an `if`) is computed at build time
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]
                  if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []):
            if isinstance(t, ast.Name):
                counts[t.id] = counts.get(t.id, 0) + 1
    names: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and counts.get(node.targets[0].id) == 1:
            names[node.targets[0].id] = node.value
    found: list[tuple[list[str] | None, list[str]]] = []   # (sources, nvcc flags) per extension
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        f = call.func
        if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) != "CUDAExtension":
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        args = _resolve(kw.get("extra_compile_args"), names)
        nvcc = None
        if isinstance(args, ast.Dict):
            for key, value in zip(args.keys, args.values):
                if isinstance(key, ast.Constant) and key.value == "nvcc":
                    nvcc = _strings(value, names)
        if nvcc is not None:
            sources = _strings(kw.get("sources") or (call.args[1] if len(call.args) > 1 else None), names)
            found.append((sources, nvcc))
    mine = [flags for sources, flags in found if sources and rel in {s.removeprefix("./") for s in sources}]
    if mine:
        return tuple(mine[0])
    shared = {tuple(flags) for _, flags in found}
    return shared.pop() if len(shared) == 1 else ()


def _resolve(node: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> ast.expr | None:
    while isinstance(node, ast.Name) and node.id in names and depth < 8:
        node, depth = names[node.id], depth + 1
    return node


def _strings(node: ast.expr | None, names: dict[str, ast.expr], depth: int = 0) -> list[str] | None:
    """A list of string literals, following module-level names and `+`; None where any part is
    not a literal (computed at build time: not guessed)."""
    node = _resolve(node, names)
    if node is None or depth > 16:
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if not (isinstance(e, ast.Constant) and isinstance(e.value, str)):
                return None
            out.append(e.value)
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _strings(node.left, names, depth + 1), _strings(node.right, names, depth + 1)
        return a + b if a is not None and b is not None else None
    return None


__all__ = ["flags", "setup_nvcc_flags", "TORCH_CMAKE_FLAGS"]
