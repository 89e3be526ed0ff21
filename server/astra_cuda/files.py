"""Reading a user's file safely: size limit, binary junk and encoding errors become clear
AstraErrors (exit 2), never tracebacks. Only regular files are read: a FIFO, a device
(/dev/zero) or a socket would block or never end, and is refused before it is opened for reading
(and checked again on the open descriptor, so a swap in between is caught too)."""
from __future__ import annotations

import os
import stat

from .errors import AstraError

MAX_BYTES = 4 * 1024 * 1024  # a CUDA source larger than this is almost surely not one


def check_text(data: bytes, name: str) -> str:
    if len(data) > MAX_BYTES:
        raise AstraError(f"{name}: file too large ({len(data) / 1e6:.1f} MB; the limit is "
                         f"{MAX_BYTES / 1e6:.0f} MB) — is this really a CUDA source?")
    if b"\x00" in data[:65536]:
        raise AstraError(f"{name}: this is a binary file, not CUDA source text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise AstraError(f"{name}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); "
                         f"save the file as UTF-8", line=line - 1, col=0) from None


def _kind(mode: int) -> str | None:
    """What a non-regular file is, for the message (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: str, limit: int = MAX_BYTES) -> bytes:
    """At most limit + 1 bytes of the regular file at `path` (one more than the limit, so that
    callers can tell a file that is too large)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise AstraError(f"{path}: no such file") from None
    except OSError as e:
        raise AstraError(f"{path}: cannot read ({e.strerror})") from None
    what = _kind(st.st_mode)
    if what:
        raise AstraError(f"{path}: is {what}, not a CUDA source file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise AstraError(f"{path}: cannot read ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        what = _kind(os.fstat(f.fileno()).st_mode)
        if what:
            raise AstraError(f"{path}: is {what}, not a CUDA source file")
        try:
            return f.read(limit + 1)
        except OSError as e:
            raise AstraError(f"{path}: cannot read ({e.strerror})") from None


def read_source(path: str) -> str:
    return check_text(read_bytes(path), path)
