"""The reference's loaded module on the GPU backend is its own, never a candidate's.

One file's reference kernel (the spec's `reference = "…"`) and its rewrite compile to one cubin
(nvcc on the whole file), and an unchanged file is the same text as its pinned baseline. CuPy
keeps one loaded module per cubin path and per NVRTC source in each process (its
`_get_raw_module` is memoized), and a module's `__device__` variables are every kernel's of it:
a candidate's writes to them reached the reference's later launches in the same worker — its
outputs in the comparison, its time beside the candidate (tests/security/catalogue.py:
device_global_rewrites_reference, device_global_slows_reference). So the reference loads a copy
of the cubin at a path of its own, and its NVRTC source ends in one more comment line: another
path or another source is another module, with `__device__` variables of its own.
"""
from __future__ import annotations

import shutil
import tempfile

REFERENCE = "reference"
MARK = "\n// astra: the reference's own module\n"   # after the code: no line number moves


def nvrtc_source(code: str, role: str) -> str:
    """The source NVRTC compiles for `role`."""
    return code + MARK if role == REFERENCE else code


def cubin_path(cubin: str, role: str) -> str:
    """The path `role` loads `cubin` from: for the reference, a copy in a folder of its own under
    the worker's private temporary folder (`cupy_confinement.private_tempdir`, removed when it exits)."""
    if role != REFERENCE:
        return cubin
    from ..storage import writing
    with writing("the reference's module", tempfile.gettempdir()):
        return shutil.copy(cubin, tempfile.mkdtemp(prefix="astra-reference-"))
