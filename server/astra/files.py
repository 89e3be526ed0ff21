"""Reading a user's file safely: size limit, binary junk and encoding errors become clear
AstraErrors (exit 2), never tracebacks."""
from __future__ import annotations

from pathlib import Path

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


def read_source(path: str) -> str:
    p = Path(path)
    if not p.exists():
        raise AstraError(f"{path}: no such file")
    if p.is_dir():
        raise AstraError(f"{path}: is a directory, not a CUDA source file")
    try:
        data = p.read_bytes() if p.stat().st_size <= MAX_BYTES else p.open("rb").read(MAX_BYTES + 1)
    except OSError as e:
        raise AstraError(f"{path}: cannot read ({e.strerror})") from None
    return check_text(data, path)
