"""The files a command works on: CUDA sources named as files, folders (walked, skipping build and
tool folders) and globs (`'src/**/*.cu'`, expanded here, so a quoted pattern works the same in
every shell and in CI)."""
from __future__ import annotations

import glob
import os

from ..errors import AstraError

SUFFIXES = (".cu", ".cuh")
SKIP_DIRS = {".astra", ".git", "node_modules", "build", ".venv", "__pycache__"}
GLOB_CHARS = "*?["


def expand(paths: list[str]) -> list[tuple[str, bool]]:
    """(file, named) for every CUDA source the arguments name, in order, each once; `named`
    when the argument was the file itself (a folder's or a glob's files may be skipped when
    they hold no kernel; a named one may not). AstraError for a path that does not exist or a
    glob that matches nothing."""
    out: dict[str, tuple[str, bool]] = {}
    for p in paths:
        if any(c in p for c in GLOB_CHARS) and not os.path.exists(p):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise AstraError(f"{p}: no file matches")
            files = [f for m in matches for f in ([m] if os.path.isfile(m) else walk(m))
                     if f.endswith(SUFFIXES) or os.path.isfile(m) and m == f]
            named = False
        elif os.path.isdir(p):
            files, named = walk(p), False
        elif os.path.exists(p):
            files, named = [p], True
        else:
            raise AstraError(f"{p}: no such file" + ("" if p.endswith(SUFFIXES) else " or folder"))
        for f in files:
            key = os.path.realpath(f)
            if key not in out or named:
                out[key] = (f, named)
    return list(out.values())


def walk(folder: str) -> list[str]:
    """The CUDA sources under `folder`, sorted; hidden, build and tool folders skipped, and a
    symbolic link whose file lies outside `folder`: a cloned repository may commit `k.cu ->
    ../../other/k.cu`, and a check or optimize of the folder then wrote pins, run logs (and with
    --write the rewrite) into that other project. A file named on the command line is followed."""
    found = []
    top = os.path.realpath(folder)
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found += [f for f in (os.path.join(root, n) for n in sorted(names) if n.endswith(SUFFIXES))
                  if os.path.commonpath([top, os.path.realpath(f)]) == top]
    return sorted(found)
