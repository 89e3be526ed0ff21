"""Checks of whole device arrays that need no copy back, for any array module with NumPy's
interface (CuPy in the GPU backend, NumPy in the tests and the base Backend's host defaults):

- `digest`: a keyed checksum of an array's bytes. The gate takes it of a case's inputs (and of
  the reference's outputs) before the candidate runs and holds it on the host; the same digest
  after the launch says whether the bytes are unchanged. The key is random per case and never
  given to a kernel, so a candidate that changes the bytes cannot choose changes that keep the
  digest (each word's term is a keyed mix of its value and position, summed mod 2^64).
- `holds_pattern`: whether any element still holds a poison byte in every one of its bytes (an
  element never written)."""
from __future__ import annotations

from typing import Any

import numpy as np

CHUNK = 1 << 24   # words per step (bounded temporaries: 128 MiB of uint64 each)
MASK = (1 << 64) - 1
_M1, _M2, _GOLDEN = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB), np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _mix(z: Any) -> Any:
    """splitmix64's finaliser: every output bit depends on every input bit."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


def _words(xp: Any, arr: Any) -> tuple[Any, int]:
    raw = arr.reshape(-1).view(xp.uint8)
    n = int(raw.size)
    width = next(w for w in (8, 4, 2, 1) if n % w == 0)
    return raw.view(getattr(xp, f"uint{8 * width}")), n


def digest(xp: Any, arr: Any, key: tuple[int, int]) -> int:
    """Σ_i mix(mix((w_i ^ k1) + i·φ) ^ k2) mod 2^64 over the array's words w_i, plus its byte
    length: any change of any bytes changes it except with odds ~2^-64 for one who does not
    know the key (k1, k2)."""
    words, n = _words(xp, arr)
    k1, k2 = np.uint64(key[0] & MASK), np.uint64(key[1] & MASK)
    total = n
    for s in range(0, int(words.size), CHUNK):
        w = words[s:s + CHUNK].astype(xp.uint64)
        i = xp.arange(s, s + int(w.size), dtype=xp.uint64)
        z = _mix(_mix((w ^ k1) + i * _GOLDEN) ^ k2)
        total = (total + int(z.sum(dtype=xp.uint64))) & MASK
    return total


def holds_pattern(xp: Any, arr: Any, itemsize: int, byte: int) -> bool:
    """Whether some element (of `itemsize` bytes) has every byte equal to `byte`."""
    raw = arr.reshape(-1).view(xp.uint8)
    if itemsize in (1, 2, 4, 8):
        v = raw.view(getattr(xp, f"uint{8 * itemsize}"))
        pattern = getattr(np, f"uint{8 * itemsize}")(int.from_bytes(bytes([byte & 0xFF]) * itemsize, "little"))
        return any(bool((v[s:s + CHUNK] == pattern).any()) for s in range(0, int(v.size), CHUNK))
    rows = raw.reshape(-1, itemsize)
    return bool((rows == np.uint8(byte & 0xFF)).all(axis=1).any())
