"""Which project headers a file reads: finding an `#include` as a compiler does, and a digest
of every header a text includes from the project's folders, so build and compile caches key on
the headers' contents (an edited header is never answered from a cache).
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from tree_sitter import Query, QueryCursor

from . import confine
from .. import files
from ..errors import AstraError
from ..model import parse_time, source
from .project import ProjectContext

MAX_HEADERS = 64          # project headers read into one unit
# Bytes of project headers one walk of a file's includes reads (each header is parsed for its own
# #includes, both sides of every #if: ~0.2-0.7 s of CPU per MiB). The most a real file's walk
# reads: 13.6 MB (flash-attention's flash_fwd_launch_template.h, CUTLASS and CuTe as its own
# headers: 172 files, of which the preprocessor reads 6.2 MB). 16 headers of 3.9 MB, each under
# every per-file bound, took 11 s of CPU (74 s of wall time at load 13) before the cut refused them.
MAX_HEADER_BYTES = 32 << 20


class HeadersTooLarge(AstraError):
    """The project headers a file includes come to more than `MAX_HEADER_BYTES`."""


class HeaderBytes:
    """What one walk of a file's project headers has read, refused past `MAX_HEADER_BYTES`."""

    def __init__(self, name: str):
        self.name, self.read = name, 0

    def add(self, n: int, header: str) -> None:
        self.read += n
        if self.read > MAX_HEADER_BYTES:
            raise HeadersTooLarge(
                f"the project headers {self.name} includes come to more than {MAX_HEADER_BYTES >> 20} MiB at "
                f"{header} (a real file's read at most 14 MB, CUTLASS and CuTe included): not read further")


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


@lru_cache(maxsize=1)
def _include_query() -> Query:
    return Query(source.language(), "(preproc_include path: (_) @path)")


@lru_cache(maxsize=512)
def includes_in(text: str, name: str = "the file") -> tuple[tuple[str, bool], ...]:
    """(header, quoted) of each #include of a text, parsed once per content (the digest below runs
    before every build-cache lookup). A tree-sitter query (in C) rather than the source model,
    which makes an item of every comment and line: a 6 MB header of comments took 50 s, and a
    check built the file's model here a third time (1.7 million nodes of `a;`: ~5 s of CPU).
    `name`: the file as a refusal of its parse names it (a header as its #include writes it).
    No token count: a header is bounded by its walk's byte budget and the node ceiling, and a
    project's 6 MB header of comments still compiles (what nvcc does with it)."""
    with parse_time.reading(name):
        tree = source.parser().parse(text.encode("utf-8", errors="replace"), max_tokens=0)
    paths = QueryCursor(_include_query()).captures(tree.root_node).get("path", [])
    out = []
    for node in sorted(paths, key=lambda n: n.start_byte):
        header = (node.text or b"").decode("utf-8", errors="replace").strip('<>"')
        if header:
            out.append((header, node.type == "string_literal"))
    return tuple(out)


def header_digest(text: str, filename: str, options: Sequence[str]) -> str:
    """A digest of every header `text` includes (transitively) from the file's folder or the
    `-I` folders in `options`: build caches key on it, so editing a header is never answered
    with a build (or a verdict) of its old contents. CUDA's and the system's headers are not
    on those paths; they change with the toolkit, which the caches key on separately."""
    import hashlib
    dirs = [o[2:] for o in options if o.startswith("-I") and len(o) > 2]
    h = hashlib.sha256()
    top = os.path.dirname(os.path.abspath(filename)) if filename else os.getcwd()
    policy = confine.for_unit([f"-I{top}", *options])  # what the compiler itself may read
    todo = [(text, top, os.path.basename(filename) if filename else "the file")]
    seen: set[str] = set()
    budget = HeaderBytes(todo[0][2])
    while todo and len(seen) < 4 * MAX_HEADERS:
        body, here, name = todo.pop()
        for header, quoted in includes_in(body, name):
            for d in ([here] if quoted else []) + dirs:
                f = Path(d) / header
                if f.is_file():
                    key = str(f.resolve())
                    if key not in seen and policy.allows(key):
                        seen.add(key)
                        with open(key, "rb") as fh:
                            data = fh.read(files.MAX_BYTES)
                        budget.add(len(data), header)
                        h.update(key.encode() + b"\0" + data + b"\0")
                        todo.append((data.decode("utf-8", errors="replace"), str(f.resolve().parent), header))
                    break
    return h.hexdigest()[:16] if seen else ""


HEADER_SUFFIXES = (".h", ".cuh", ".hpp", ".hxx", ".hh", ".inl")
MAX_INCLUDERS = 64                 # .cu files beside a header looked at for its includer
MAX_INCLUDER_BYTES = 1 << 20


def includer(path: str, context: ProjectContext) -> tuple[str, str] | None:
    """For a header, the project's translation unit that includes it: the first `.cu` beside it
    (by name) with a top-level `#include` that opens this very header, read under the compilers'
    read policy. (its path, its text before that #include); None for a source file or a header
    no `.cu` beside it includes."""
    if not path.endswith(HEADER_SUFFIXES):
        return None
    here = os.path.dirname(os.path.abspath(path))
    me = Path(path).resolve()
    policy = confine.for_unit([f"-I{here}", *context.options()])
    try:
        names = sorted(n for n in os.listdir(here) if n.endswith(".cu"))[:MAX_INCLUDERS]
    except OSError:
        return None
    for name in names:
        full = os.path.join(here, name)
        try:
            if not policy.allows(full) or os.path.getsize(full) > MAX_INCLUDER_BYTES:
                continue
            text = files.read_source(full)
        except (OSError, AstraError):
            continue
        if me.name not in text:
            continue
        data = text.encode("utf-8", errors="surrogateescape")
        for node in source.parser().parse(data).root_node.children:   # top level: not inside an #if
            target = node.child_by_field_name("path")
            if node.type != "preproc_include" or target is None:
                continue
            written = (target.text or b"").decode(errors="replace")
            found, _ = find_header(written.strip('<>"'), written.startswith('"'), here, context)
            if found == me:
                return full, data[:node.start_byte].decode("utf-8", errors="surrogateescape")
    return None


def translation_unit(text: str, path: str, context: ProjectContext) -> str:
    """What nvcc compiles for the file `text` (at `path`): a source file as it is; a header that a
    `.cu` beside it includes, as in that `.cu` — its lines before the #include (the headers and
    macros the project's build gives the header first: apex's megatron softmax headers use
    `c10::BFloat16`, which only their `.cu` includes) ahead of the header's text, each part
    under a `#line` of its own file, so messages and the kernel's lines stay the header's."""
    found = includer(path, context)
    if found is None:
        return text
    where, before = found
    return (f'#line 1 "{_quote(where)}"\n{before}' + ("" if before.endswith("\n") or not before else "\n")
            + f'#line 1 "{_quote(os.path.abspath(path))}"\n{text}')


def _quote(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def own_text(unit_text: str, path: str) -> str:
    """The file's own text out of `translation_unit`'s (what follows its `#line 1`)."""
    mark = f'#line 1 "{_quote(os.path.abspath(path))}"\n'
    at = unit_text.find(mark) if unit_text.startswith("#line 1 ") else -1
    return unit_text[at + len(mark):] if at >= 0 else unit_text
