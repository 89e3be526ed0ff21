"""A build cache keyed by the content of a file and of every header it read.

An entry is a folder under the cache root named by the key of everything known before the
compile (compiler, flags, the text compiled); it holds the outputs, the result's data and the
headers the compiler read with a digest of each (from its dependency list, nvcc `-MD`). A
lookup finds the folder and checks each header's digest again: editing a header invalidates,
and a repeated compile costs a few `stat` calls — a header's digest is remembered for as long as
its size, modification time and inode stay the same.

Entries are written into a temporary folder and renamed into place, so a reader never sees half
of one; two processes writing the same entry race harmlessly. The oldest entries beyond
`MAX_ENTRIES` are removed.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_ENTRIES = 512
META = "meta.json"

_digests: dict[str, tuple[tuple[int, int, int], str]] = {}
_lock = threading.Lock()


def file_digest(path: str) -> str | None:
    """The SHA-256 of a file's bytes (None when it cannot be read), remembered per version."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_size, st.st_mtime_ns, st.st_ino)
    with _lock:
        known = _digests.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    digest = h.hexdigest()
    with _lock:
        _digests[path] = (stamp, digest)
    return digest


def key_of(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Entry:
    folder: Path
    data: dict[str, Any]      # what `put` stored

    def path(self, name: str) -> str:
        return str(self.folder / name)


class DepCache:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def get(self, key: str) -> Entry | None:
        """The entry for `key` when every header it read is unchanged, else None."""
        folder = self.root / key
        try:
            meta = json.loads((folder / META).read_text())
        except (OSError, ValueError):
            return None
        for path, digest in meta.get("deps", []):
            if file_digest(path) != digest:
                return None
        try:
            os.utime(folder / META)  # recently used: pruned last
        except OSError:
            pass
        return Entry(folder, meta.get("data", {}))

    def put(self, key: str, deps: list[str], data: dict[str, Any], files: dict[str, str]) -> Entry | None:
        """Store `data` and copies of `files` (name -> path) under `key`, with the digest of each
        header in `deps`. None when the cache cannot be written (the result is still good)."""
        digests = [(p, d) for p in dict.fromkeys(deps) if (d := file_digest(p)) is not None]
        tmp: Path | None = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
            for name, src in files.items():
                shutil.copyfile(src, tmp / name)
            (tmp / META).write_text(json.dumps({"deps": digests, "data": data}))
            folder = self.root / key
            shutil.rmtree(folder, ignore_errors=True)
            try:
                os.rename(tmp, folder)
            except OSError:  # another process stored it meanwhile
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:  # a full disk: nothing half-copied stays behind
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            return None
        self.prune()
        return Entry(folder, data) if (folder / META).is_file() else None

    def prune(self, keep: int = MAX_ENTRIES) -> None:
        try:
            entries = [(p / META).stat().st_mtime for p in self.root.iterdir() if (p / META).is_file()]
            if len(entries) <= keep:
                return
            by_age = sorted((p for p in self.root.iterdir() if (p / META).is_file()),
                            key=lambda p: (p / META).stat().st_mtime)
        except OSError:
            return
        for p in by_age[:len(by_age) - keep]:
            shutil.rmtree(p, ignore_errors=True)
