"""Guard bytes after every buffer a backend uploads: a kernel that writes past the end of one
argument changes them, and the gate says so, naming the buffer — a verdict that does not depend
on what happened to lie after the buffer.

Without them, a write past the end lands in whatever the allocator placed next (on a GPU another
argument, often; on the CPU the unused tail of a page): the same kernel then fails one way in one
run and another way, or not at all, in the next (TGI's column_remap: a draft spec's `x_new` too
small, its tail written into `x_map`). So each buffer is one allocation of its bytes and
`GUARD_BYTES` more, the guard filled with a pseudo-random pattern; after a launch the gate
compares each guard with the pattern where the memory lives (a device-side comparison of `GUARD_BYTES`, whatever the buffer's
size). A write further than the guard still lands elsewhere, as before: most overruns are a tail
of a row or a tile, well inside it.

Each upload's guard is the base pattern XOR a byte of its own (`keyed`, from the backend's count
of uploads): what a *read* past the end sees then differs between two runs of the same inputs, so
the determinism check (and inference's validation, which takes two runs that disagree as a read
past a buffer) sees such a read, as it did before guards, instead of one constant every run
(cuda-samples' matrixMul read whole 16-wide tiles past `wA` and passed the draft without
`wA % 16 == 0`). The keys follow the order of uploads, so a run's verdict still repeats. The
CPU backend keeps the base pattern: its sanitizer build names such a read itself, with its line.

Builds whose allocations are exact for a sanitizer (compute-sanitizer's worker, the CPU's
AddressSanitizer build, which copies each buffer into its own heap block) place no guard there:
the sanitizer reports the access itself, with its line.

Works on any array module with NumPy's interface (CuPy on the device, NumPy for the CPU's shared
memory and for tests)."""
from __future__ import annotations

from typing import Any

import numpy as np

GUARD_BYTES = 1024   # a fixed size: the check's cost does not grow with the buffer
PATTERN = np.random.default_rng(0x4A57_2A5D).integers(0, 256, GUARD_BYTES, dtype=np.uint8)


def key_byte(count: int) -> int:
    """The byte the `count`-th upload's guard is XORed with: never 0 twice in a row, and
    consecutive uploads differ in every byte of their guards."""
    return 1 + count % 255


def keyed(base: Any, count: int) -> Any:
    """The guard pattern of the `count`-th upload (`base`: PATTERN, or its copy where the memory
    lives: the XOR is computed there)."""
    return base ^ base.dtype.type(key_byte(count))


def fill(xp: Any, raw: Any, nbytes: int, pattern: Any = None) -> None:
    """Write the pattern into the guard of `raw` (uint8, `nbytes` + GUARD_BYTES long);
    `pattern`: the pattern already where `raw` lives (a device copy, made once)."""
    raw[nbytes:nbytes + GUARD_BYTES] = PATTERN if pattern is None else pattern


def placed(xp: Any, data: np.ndarray, pattern: Any = None) -> tuple[Any, Any]:
    """(array, raw): `data` (host, contiguous) copied into one allocation of `xp` that holds its
    bytes and then the guard — the array a view of the first bytes, so a write past its end
    reaches the guard first; `raw` the whole allocation (uint8), for `first_changed`."""
    raw = xp.empty(data.nbytes + GUARD_BYTES, dtype=xp.uint8)
    fill(xp, raw, data.nbytes, pattern)
    array = raw[:data.nbytes].view(data.dtype).reshape(data.shape)
    if hasattr(array, "set"):
        array.set(data)     # CuPy: host to device, no device temporary
    else:
        array[...] = data
    return array, raw


def first_changed(xp: Any, raw: Any, nbytes: int, pattern: Any = None) -> tuple[int, int] | None:
    """(offset past the end of the first guard byte changed, bytes changed), or None when the
    guard holds the pattern. Compared where `raw` lives; only the verdict comes back."""
    diff = raw[nbytes:nbytes + GUARD_BYTES] != (PATTERN if pattern is None else pattern)
    changed = int(xp.count_nonzero(diff))
    if not changed:
        return None
    return int(xp.argmax(diff)), changed


def message(name: str, nbytes: int, itemsize: int, at: int) -> str:
    """What the gate says of a buffer whose guard changed: the same words on every backend and in
    every run (how many guard bytes changed is left out: a written byte can equal its guard's, and
    each upload's guard is another, so that count can differ by one between runs)."""
    size = nbytes // max(itemsize, 1)
    element = (nbytes + at) // max(itemsize, 1)
    return (f"`{name}`: the kernel wrote past its end: element {element} of a buffer of {size} "
            f"(byte {at} past its end, in the guard after it)")
