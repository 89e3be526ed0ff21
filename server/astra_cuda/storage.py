"""Writes that fail for lack of room — a full disk, a quota, a read-only file system — made a
clear error (`NoSpace`, exit 2) instead of a traceback, with nothing half-written left behind.

Every file Astra writes (the module and precompiled-header caches, `.astra/` pins, run logs,
reports, tuning memory, `--write`) goes through `writing`; caches that are only there to save
time go on without saving (`cache_write`). A compiler that failed to write its output says so
only in its messages, which the compiled code can fake (`#error No space left on device`):
`confirm_room` asks the file system itself before such a failure becomes a NoSpace.
"""
from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import AstraError

REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
}
# How compilers and the C library spell them in messages.
MESSAGES = ("No space left on device", "Disk quota exceeded", "Read-only file system")


class NoSpace(AstraError):
    """A write Astra needed could not be made for lack of room."""


def is_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in REASONS


def no_space(e: OSError, what: str, where: str | os.PathLike[str] | None = None) -> NoSpace:
    at = f" ({where})" if where is not None else (f" ({e.filename})" if e.filename else "")
    assert e.errno is not None
    return NoSpace(f"cannot write {what}{at}: {REASONS[e.errno]} — free some space or choose another folder "
                   "(ASTRA_CACHE_DIR for Astra's caches); nothing was changed")


@contextmanager
def writing(what: str, where: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Around a write: a full disk, quota or read-only file system becomes NoSpace naming `what`."""
    try:
        yield
    except OSError as e:
        if not is_full(e):
            raise
        raise no_space(e, what, where) from None


def confirm_room(folder: str | os.PathLike[str], need: int, what: str) -> None:
    """NoSpace if `folder` cannot hold `need` more bytes (asked of the file system: a real
    allocation, released at once). Nothing happens where it can."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".astra-room-", suffix=".tmp")
    except OSError as e:
        if is_full(e):
            raise no_space(e, what, folder) from None
        return
    try:
        os.posix_fallocate(fd, 0, need)
    except OSError as e:
        if is_full(e):
            raise no_space(e, what, folder) from None
    finally:
        os.close(fd)
        os.unlink(tmp)


def said_full(log: str) -> bool:
    """Whether a tool's messages say a write failed for lack of room (to be confirmed)."""
    return any(m in log for m in MESSAGES)


def after_compiler(log: str, folder: str | os.PathLike[str], what: str, need: int = 64 << 20) -> None:
    """After a compiler failed writing into `folder`: NoSpace when its messages say the disk is
    full and the file system confirms it cannot hold `need` bytes (a compiler of user code
    writes at most 64 MiB); else nothing, and the failure is the compiler's."""
    if said_full(log):
        confirm_room(folder, need, what)
