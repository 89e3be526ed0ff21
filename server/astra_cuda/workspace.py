"""The `.astra/` folder at the workspace root: pinned baselines and run logs.

The root is the nearest ancestor of the file that holds `.git`, else the file's folder. A pin
stores the whole file text as it was (content-addressed), so the reference is later cut from it
exactly as the kernel was cut then, helpers and all.

`.astra/` is Astra's own: a cloned repository may commit one, and a symbolic link there
(`.astra -> ../elsewhere`, or `runs -> ~/.config/...` inside it) would make Astra write outside
the project. Every writer gets its folder from `ensure_astra_dir`, which refuses a `.astra/` that
is a link, is not a folder, or holds a link anywhere inside; readers read nothing through one.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from typing import Any
from pathlib import Path


def root_for(path: str | os.PathLike[str]) -> Path:
    p = Path(path).resolve()
    start = p if p.is_dir() else p.parent
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return start


def astra_dir(path: str | os.PathLike[str]) -> Path:
    """Where `.astra/` is (or would be) for `path`; nothing is created."""
    return root_for(path) / ".astra"


# Pinned baselines, run logs and reports belong to this checkout, never to the repository: like
# other tools' cache folders, `.astra/` ignores itself.
GITIGNORE = "# Created by Astra: pinned baselines, run logs and reports stay out of version control.\n*\n"


def ensure_astra_dir(path: str | os.PathLike[str], *parts: str) -> Path:
    """`.astra/` for `path` (or the folder `parts` inside it), created if missing, `.astra/` with
    its own `.gitignore`. AstraError where `.astra/` is a symbolic link, not a folder, or holds a
    symbolic link: Astra then writes nothing (the user removes it; nothing is deleted for them)."""
    from .storage import writing

    top = astra_dir(path)
    d = top
    for name in ("", *parts):
        d = d / name if name else d
        try:
            with writing("Astra's folder", d):
                os.mkdir(d, 0o700)
                if d == top:
                    _atomic_write(top / ".gitignore", GITIGNORE)
        except FileExistsError:
            pass
        if d == top:
            _refuse_links(top)
        elif os.path.islink(d) or not os.path.isdir(d):
            raise _not_own(d)
    return d


def _not_own(p: Path) -> Exception:
    from .errors import AstraError

    what = f"a symbolic link to {os.readlink(p)}" if os.path.islink(p) else "not a folder"
    return AstraError(f"{p} is {what}: Astra writes only into a real folder of its own inside the project "
                      f"(a cloned repository may have committed it); remove it and run again")


def _refuse_links(top: Path) -> None:
    """`top` must be a real folder with no symbolic link anywhere inside (walked without following)."""
    if os.path.islink(top) or not os.path.isdir(top):
        raise _not_own(top)
    for folder, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            if os.path.islink(os.path.join(folder, name)):
                raise _not_own(Path(folder) / name)


def refuse_links(path: str | os.PathLike[str]) -> None:
    """AstraError where `path`'s `.astra/` is a symbolic link, not a folder, or holds a link (as
    `ensure_astra_dir` says it); nothing is created, and a missing one is no error."""
    if os.path.lexists(astra_dir(path)):
        _refuse_links(astra_dir(path))


def readable_astra_dir(path: str | os.PathLike[str]) -> Path | None:
    """`.astra/` for `path` to read a folder of (run logs, batch manifests), or None where it is
    missing, a symbolic link, not a folder, or holds a link: nothing is read through one."""
    top = astra_dir(path)
    try:
        _refuse_links(top)
    except Exception:  # noqa: BLE001 - AstraError (a link, not a folder) or OSError: nothing to read
        return None
    return top


def _read_own(path: str | os.PathLike[str], *parts: str) -> str | None:
    """The text of the file `parts` under `path`'s `.astra/`, never through a symbolic link (in
    its path or itself); None when missing or refused."""
    d = astra_dir(path)
    for part in parts[:-1]:
        if os.path.islink(d) or not os.path.isdir(d):
            return None
        d = d / part
    if os.path.islink(d):
        return None
    try:
        fd = os.open(d / parts[-1], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


@dataclass(frozen=True)
class Pin:
    kernel: str
    file: str        # path relative to the workspace root
    digest: str      # sha256 of the pinned file text
    pinned_at: float
    text: str


def _key(path: str | os.PathLike[str], kernel: str) -> str:
    rel = os.path.relpath(Path(path).resolve(), root_for(path))
    return f"{rel}::{kernel}"


def _read_index(path: str | os.PathLike[str]) -> dict[str, Any]:
    text = _read_own(path, "pins.json")
    try:
        index = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return index if isinstance(index, dict) else {}


def pinned(path: str | os.PathLike[str], kernel: str) -> Pin | None:
    entry = _read_index(path).get(_key(path, kernel))
    if not entry:
        return None
    digest = entry.get("digest") if isinstance(entry, dict) else None
    if not isinstance(digest, str) or not digest.isalnum():
        return None  # pins.json is data: a name, never a path
    text = _read_own(path, "baselines", f"{digest}.cu")
    if text is None:
        return None
    at = entry.get("pinned_at")
    return Pin(kernel, str(entry.get("file", "")), digest, float(at) if isinstance(at, (int, float)) else 0.0, text)


def pin(path: str | os.PathLike[str], kernel: str, text: str) -> Pin:
    """Pin `text` (the whole file) as the reference for `kernel`. Atomic writes only."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    blob = ensure_astra_dir(path, "baselines") / f"{digest}.cu"
    base = blob.parent.parent
    if not blob.exists():
        _atomic_write(blob, text, what="the pinned baseline")
    index = _read_index(path)
    rel = os.path.relpath(Path(path).resolve(), root_for(path))
    at = time.time()
    index[_key(path, kernel)] = {"file": rel, "kernel": kernel, "digest": digest, "pinned_at": at}
    _atomic_write(base / "pins.json", json.dumps(index, indent=2, sort_keys=True), what="the pins")
    return Pin(kernel, rel, digest, at, text)


def save_original(path: str | os.PathLike[str], text: str) -> Path:
    """Keep a copy of a file before `--write` changes it."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    f = ensure_astra_dir(path, "originals") / f"{Path(path).name}.{digest[:12]}"
    if not f.exists():
        _atomic_write(f, text, what="the copy of the original")
    return f


def save_profile_report(path: str | os.PathLike[str], kernel: str, data: bytes) -> Path:
    """Nsight Compute's report of `kernel`, kept as `.astra/profiles/<kernel>-<time>.ncu-rep` beside
    the file (the editor opens it); whole or not at all."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", kernel)
    dest = ensure_astra_dir(path, "profiles") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.ncu-rep"
    _atomic_write(dest, data, what="the Nsight Compute report")
    return dest


def write_own(path: Path, text: str, what: str = "Astra's records") -> None:
    """`text` into the file `path` of a folder `ensure_astra_dir` gave (atomically, never
    through a link): for the agents' own records, such as `.astra/tuning/`."""
    _atomic_write(path, text, what=what)


def _atomic_write(path: Path, text: str | bytes, mode: int = 0o600, what: str = "Astra's folder") -> None:
    """Write `text` (or bytes) to a fresh temporary file beside `path` (never through a link planted at the
    temporary name), then rename it over `path`: a full disk leaves `path` as it was
    (storage.NoSpace naming `what`)."""
    from .storage import writing

    tmp = path.with_name(f".{path.name}.astra-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    with writing(what, path):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode("utf-8") if isinstance(text, str) else text)
                f.flush()
                os.fchmod(f.fileno(), mode)  # the umask must not narrow or widen what the file had
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def replace_if_unchanged(path: str | os.PathLike[str], expected: str, new_text: str) -> Path:
    """Put `new_text` into the file at `path` only if it still holds `expected`. A symbolic link
    is followed (the real file changes, the link stays), the file keeps its permission bits (and
    owner, where allowed), and the new content appears at once by a rename in the real file's
    folder, right after a last check that the file was not touched since it was compared."""
    from . import files
    from .errors import AstraError
    from .storage import writing

    real = Path(os.path.realpath(path))
    before = os.stat(real)
    if files.read_source(str(real)) != expected:
        raise AstraError(f"{path} changed on disk; not writing (nothing you typed is lost)")
    mode = stat.S_IMODE(before.st_mode)
    tmp = real.with_name(f".{real.name}.astra-{os.getpid()}-{secrets.token_hex(4)}.tmp")
    with writing("the new text", path):  # a full disk: the file stays as it was
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(new_text.encode("utf-8"))
                f.flush()
                try:
                    os.fchown(f.fileno(), before.st_uid, before.st_gid)
                except PermissionError:
                    pass
                os.fchmod(f.fileno(), mode)
                os.fsync(f.fileno())
            now = os.stat(real)
            if (now.st_ino, now.st_size, now.st_mtime_ns) != (before.st_ino, before.st_size, before.st_mtime_ns):
                raise AstraError(f"{path} changed on disk while writing; not written (nothing you typed is lost)")
            os.replace(tmp, real)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return real
