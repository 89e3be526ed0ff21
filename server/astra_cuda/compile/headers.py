"""Which project headers a file reads: finding an `#include` as a compiler does, and a digest
of every header a text includes from the project's folders, so build and compile caches key on
the headers' contents (an edited header is never answered from a cache).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from . import confine
from .. import files
from ..model import source
from .project import ProjectContext

MAX_HEADERS = 64          # project headers read into one unit


def find_header(header: str, quoted: bool, including_dir: str, context: ProjectContext) -> tuple[Path | None, bool]:
    """(the file `#include` would open, whether it is the project's own), searching as a
    compiler does: a quoted name first next to the including file, then the include paths,
    then the system folders (whose headers are not the project's)."""
    dirs = ([including_dir] if quoted else []) + list(context.include_dirs)
    for d in dirs:
        f = Path(d) / header
        if f.is_file():
            return f.resolve(), True
    for d in context.system_dirs:
        f = Path(d) / header
        if f.is_file():
            return f.resolve(), False
    return None, False


@lru_cache(maxsize=512)
def _includes_in(text: str) -> tuple[tuple[str, bool], ...]:
    """(header, quoted) for each #include of a text, parsed once per content: the digest below
    runs before every build-cache lookup."""
    out = []
    for inc in source.parse(text).includes:
        header = inc.header or ""
        if header:
            out.append((header, '"' in inc.text.split(header)[0]))
    return tuple(out)


def header_digest(text: str, filename: str, options) -> str:
    """A digest of every header `text` includes (transitively) from the file's folder or the
    `-I` folders in `options`: build caches key on it, so editing a header is never answered
    with a build (or a verdict) of its old contents. CUDA's and the system's headers are not
    on those paths; they change with the toolkit, which the caches key on separately."""
    import hashlib
    dirs = [o[2:] for o in options if o.startswith("-I") and len(o) > 2]
    h = hashlib.sha256()
    top = os.path.dirname(os.path.abspath(filename)) if filename else os.getcwd()
    policy = confine.for_unit([f"-I{top}", *options])  # what the compiler itself may read
    todo = [(text, top)]
    seen: set[str] = set()
    while todo and len(seen) < 4 * MAX_HEADERS:
        body, here = todo.pop()
        for header, quoted in _includes_in(body):
            for d in ([here] if quoted else []) + dirs:
                f = Path(d) / header
                if f.is_file():
                    key = str(f.resolve())
                    if key not in seen and policy.allows(key):
                        seen.add(key)
                        with open(key, "rb") as fh:
                            data = fh.read(files.MAX_BYTES)
                        h.update(key.encode() + b"\0" + data + b"\0")
                        todo.append((data.decode("utf-8", errors="replace"), str(f.resolve().parent)))
                    break
    return h.hexdigest()[:16] if seen else ""
