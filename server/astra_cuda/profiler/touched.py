"""The bytes a kernel must move, seen on the trusted kernel (the spec's reference, or the original
timed against itself): where the spec's arrays overstate them, the share of the copy ceiling would
be a number the kernel never moved (an inferred array twice as long as the launch reaches, an
output the spec calls read-write counted as read and written).

At a timed size, on the timing's own input sets (the second is the first rotated, so every
element of a random input has another value there): the kernel runs once on set 0 and its written
arrays are kept; a second run must give the same bytes (else nothing is concluded). Then, per
input, its tail from element k on is taken from set 1 and the kernel runs again: when every
written array comes out the same (a read-write array itself: at the elements the kernel changed),
the results do not depend on that tail. A bisection finds the first such k to `STEP` of the array
(the count errs high by at most that); k = 0 means the input's initial content does not matter (a
read-write array only written). Of a read-write array, the elements the kernel changed from what
it was given, in either set, are what it writes (none: it is only read). `model.floor_bytes` takes these counts where they are below the
spec's.

Only the trusted kernel is run, after the timing loop (nothing is warmed before it is timed; a
rewrite never runs here), only inputs drawn at random are probed (a constant or `arange` input has
no other value to take), only ones with `MIN_ELEMENTS`, and the bisection only on values that
vary enough for a changed read not to go unseen (floats, integers drawn from a wide range; a
bool's or a small integer's whole array is tried, not a part of it).
"""
from __future__ import annotations

import numpy as np

from ..backends.base import Backend, Buffer
from ..gate import checks
from ..gate.timed import ROTATED, TimedSet, fresh_run
from ..model.spec import Spec
from .model import Touched

STEP = 64                 # the bisection stops at 1/STEP of an array
MIN_ELEMENTS = 4 * STEP   # smaller arrays are counted whole (their bytes hardly matter)
MIN_SPAN = 1 << 16        # integer inputs drawn from fewer values are not probed (a changed read may keep its value)
_cache: dict[tuple, Touched | None] = {}   # per worker: what was seen, by the kernel's code, spec and sizes


def measure(spec: Spec, backend: Backend, kernel: checks.Compiled, sets: list[TimedSet], ctypes: dict,
            code: str = "") -> Touched | None:
    """What `kernel` (launched as `spec` says) needs of its arguments at the sets' size; None
    where it cannot be told (one set, results that vary between identical runs). `code`: what
    identifies the kernel's code (its unit's digest), so that each later evaluation of a run,
    which compiles the reference again, finds it seen ('' : measured every time)."""
    if len(sets) < 2:
        return None
    key = (code, kernel.name, tuple(sorted(sets[0].sizes.items())), _spec_key(spec))
    if code and key in _cache:
        return _cache[key]
    if len(_cache) > 64:
        _cache.clear()
    seen = _measure(spec, backend, kernel, sets, ctypes)
    if code:
        _cache[key] = seen
    return seen


def _spec_key(spec: Spec) -> tuple:
    return tuple((a.name, a.shape, a.output, a.inout, str(a.init)) for a in spec.args.values()) + \
        (tuple(spec.grid), tuple(spec.block))


def _measure(spec: Spec, backend: Backend, kernel: checks.Compiled, sets: list[TimedSet], ctypes: dict) -> Touched | None:
    base, alt = sets[0], sets[1]
    sizes = base.sizes
    launch = checks.launch_of(spec, sizes)
    written = checks.written(spec)

    def run(name: str | None = None, k: int = 0):
        r = fresh_run(spec, backend, base, ctypes, checks.POISONS[0])
        if name is not None:
            buf, src = r.buffers[name], alt.pristine[name]
            n, item = int(np.prod(buf.shape)), buf.dtype.itemsize
            if k < n:
                backend.copy(backend.view(buf, k * item, buf.dtype, (n - k,)),
                             backend.view(src, k * item, src.dtype, (n - k,)))
        backend.launch(kernel.module, kernel.name, launch, r.args, timeout_s=checks.LAUNCH_TIMEOUT_S)
        return r

    first = run()
    kept: dict[str, Buffer] = {}
    for name in written:
        buf = first.buffers[name]
        kept[name] = backend.view(backend.allocate(buf.nbytes), 0, buf.dtype, buf.shape)
        backend.copy(kept[name], buf)
    again = run()
    if not all(backend.same_bytes(again.buffers[w], kept[w]) for w in written):
        return None   # results vary between identical runs (atomics in another order): nothing to conclude
    read: dict[str, int] = {}
    changed: dict[str, int] = {}   # read-write arrays: the elements the kernel writes
    for a in spec.args.values():
        if not _probed(a, alt, sizes, spec):
            continue
        others = [w for w in written if w != a.name]
        mask = None
        if a.inout:   # written where it changed from what it was given in either run (a value may recur)
            own = _elements(backend.download(first.buffers[a.name]))
            whole = run(a.name, 0)
            theirs = _elements(backend.download(whole.buffers[a.name]))
            mask = (own != _elements(base.host[a.name])) | (theirs != _elements(backend.download(alt.pristine[a.name])))
            # few distinct values (a bool, a small integer): a written value often equals the old one, so
            # any change counts the whole array
            changed[a.name] = int(mask.sum()) if _varied(a, sizes) or not mask.any() else mask.size

        def depends(k: int) -> bool:
            r = run(a.name, k)
            if not all(backend.same_bytes(r.buffers[w], kept[w]) for w in others):
                return True
            # the array itself, where the kernel writes it (elsewhere it keeps what it was given)
            return mask is not None and bool((_elements(backend.download(r.buffers[a.name]))[mask] != own[mask]).any())

        n = int(np.prod(spec.shape(a.name, sizes)))
        if not depends(0):
            read[a.name] = 0
            continue
        lo, hi = 0, n          # depends(lo), not depends(hi)
        while _varied(a, sizes) and hi - lo > max(1, n // STEP):
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if depends(mid) else (lo, mid)
        read[a.name] = hi
    return Touched(read, changed)


def _elements(a: np.ndarray) -> np.ndarray:
    """Each element's bytes as one comparable value (NaNs and -0.0 compare by their bits)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    return flat.view(np.dtype(f"V{flat.dtype.itemsize}")) if flat.dtype.itemsize not in (1, 2, 4, 8) \
        else flat.view(np.dtype(f"u{flat.dtype.itemsize}"))


def _probed(a, alt: TimedSet, sizes: dict[str, int], spec: Spec) -> bool:
    """Whether the whole array is tried with other values (whether its initial content matters)."""
    return (a.pointer and a.param and not a.output and not a.table and a.name in alt.rolls
            and a.init.kind in ROTATED and int(np.prod(spec.shape(a.name, sizes))) >= MIN_ELEMENTS)


def _varied(a, sizes: dict[str, int]) -> bool:
    """Whether its values vary enough to bisect on a part of it: floats, integers drawn from a wide
    range (not bools or a 'normal' integer's small values, where a changed read may keep its value)."""
    if a.dtype.is_float:
        return True
    if a.dtype.np == np.bool_ or a.init.kind not in ("randint", "uniform"):
        return False
    lo, hi = a.init.at(sizes).params
    return hi - lo >= MIN_SPAN
