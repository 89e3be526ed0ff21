"""Building the test suite from a spec: which sizes, which value distributions, which seeds,
and which of them the agents may see.

- the spec's own cases, each with every seed, inputs drawn as the spec's `init` says;
- edge sizes made here, within `require`: 1 and values that are not multiples of 2/4/8/32
  (33, 127, the largest test value +-1), one size name at a time from the smallest case;
- the timed (bench) sizes: in full where the backend times kernels, and on backends that do not
  (the CPU) reduced to fit, keeping each timed value of the inner dimensions;
- other value distributions (normal, wide, tiny, large, negative) on a mid-size case, for the
  arguments whose values the spec leaves free (default `normal` init);
- a held-out part: only the spec's cases with the first seed and the spec's distribution, and
  every other edge case, are visible to the agents; the gate checks all.

Inputs are fresh on every gate run: case seeds derive from a per-run nonce recorded in the
verdict. Host arrays are generated with NumPy's PCG64.
"""
from __future__ import annotations

import dataclasses

import os
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import exprs
from ..model.spec import ArgSpec, Spec
from .verdict import CaseInfo

# Distributions for free floating-point inputs: name -> sampler(rng, shape).
# Generated in float32 (the GPU's timed sizes reach hundreds of millions of elements), in float64
# for double arguments (float32-representable inputs would hide a double->float downgrade).
F32 = np.float32


def draw_uniform(rng: np.random.Generator, lo: float, hi: float, shape: Any, ft: Any = F32) -> Any:
    return rng.random(shape, dtype=ft) * ft(hi - lo) + ft(lo)


def draw_normal(rng: np.random.Generator, shape: Any, ft: Any = F32) -> Any:
    return rng.standard_normal(shape, dtype=ft)


DISTRIBUTIONS = {
    "normal": lambda rng, shape, ft: draw_normal(rng, shape, ft),
    "wide": lambda rng, shape, ft: draw_uniform(rng, -20.0, 20.0, shape, ft),
    "tiny": lambda rng, shape, ft: draw_normal(rng, shape, ft) * ft(1e-3),
    "large": lambda rng, shape, ft: np.where(rng.random(shape, dtype=ft) < 0.5, ft(-1), ft(1)) * draw_uniform(
        rng, 10.0, 100.0, shape, ft),
    "negative": lambda rng, shape, ft: -np.abs(draw_normal(rng, shape, ft) * ft(2.0)),
}
SPEC_DIST = "spec"
EDGE_VALUES = (1, 33, 127)
CPU_MAX_ELEMENTS = 1 << 22      # per case, all arguments together (the CPU runs ~10-20 M elements/s)
GPU_MAX_ELEMENTS = 1 << 29


@dataclass(frozen=True)
class Case:
    sizes: dict[str, int] = field(hash=False)
    distribution: str
    seed: int
    visible: bool
    label: str  # 'spec' | 'added' (by the rewrite's spec) | 'edge' | 'bench' | 'distribution'

    def info(self) -> CaseInfo:
        return CaseInfo(dict(self.sizes), self.distribution, self.seed, self.visible, self.label)


@dataclass
class Suite:
    cases: list[Case]
    notes: list[str]
    bench_note: str

    @property
    def held_out(self) -> int:
        return sum(not c.visible for c in self.cases)


def _valid(spec: Spec, sizes: dict[str, int], max_elements: int) -> bool:
    try:
        if not spec.satisfies(sizes):
            return False
        grid, block, shared = spec.launch_dims(sizes)
        if min(grid) < 1 or min(block) < 1 or block[0] * block[1] * block[2] > 1024 or shared < 0:
            return False
        for a in spec.args.values():
            if a.pointer and min(spec.shape(a.name, sizes), default=1) < 1:
                return False
        return drawable(spec, sizes) and spec.elements(sizes) <= max_elements
    except (exprs.ExprError, ZeroDivisionError, ValueError, OverflowError):
        return False


def drawable(spec: Spec, sizes: dict[str, int]) -> bool:
    """Every draw whose bounds depend on the sizes has values to draw at `sizes`. A case where
    one has none is not the program's: `randint(1, V / 2 + 1)` for a row start is empty at V = 1
    (an edge size), and any value drawn there lies outside the bounds the spec states."""
    for a in spec.args.values():
        init = a.init
        if not init.exprs or not (a.drawn or (a.pointer and not a.output)):
            continue
        try:
            p = init.at(sizes).params
        except (exprs.ExprError, ZeroDivisionError, ValueError, OverflowError):
            return False
        if init.kind == "randint" and int(p[1]) <= int(p[0]):
            return False
        if init.kind == "uniform" and p[1] < p[0]:
            return False
        if init.kind == "permutation" and p and a.pointer and int(p[0]) < int(np.prod(spec.shape(a.name, sizes))):
            return False
    return True


def edge_sizes(spec: Spec, max_elements: int, limit: int = 8) -> list[dict[str, int]]:
    """Sizes the spec does not list: each size name set to 1, 33, 127 and its largest test value
    +-1, the others taken from the smallest case, kept where `require` holds."""
    cases = spec.cases()
    if not cases:
        return []
    base = min(cases, key=spec.elements)
    seen = {tuple(sorted(c.items())) for c in cases}
    out: list[dict[str, int]] = []
    all_ones = {n: 1 for n in spec.sizes}
    candidates = [all_ones]
    for name, values in spec.sizes.items():
        top = max(values)
        for v in (*EDGE_VALUES, top - 1, top + 1):
            if v >= 1:
                candidates.append({**base, name: v})
    for c in candidates:
        key = tuple(sorted(c.items()))
        if key in seen or not _valid(spec, c, max_elements):
            continue
        seen.add(key)
        out.append(c)
    if len(out) > limit:  # keep an even spread
        step = (len(out) - 1) / (limit - 1)
        out = [out[round(i * step)] for i in range(limit)]
    return out


def fit_bench(spec: Spec, sizes: dict[str, int], max_elements: int) -> dict[str, int] | None:
    """A timed size made small enough for a backend that does not time: shrink the size names
    that multiply the volume the most (outer dimensions first) towards their smallest test value,
    keeping the timed inner dimensions; None if it cannot be made to fit."""
    cur = dict(sizes)
    if _valid(spec, cur, max_elements):
        return cur
    for _ in range(4 * len(cur)):
        best = None
        for name in cur:
            lo = min(spec.sizes.get(name, [1]))
            if cur[name] <= lo:
                continue
            trial = {**cur, name: lo}
            try:
                gain = spec.elements(cur) / max(1, spec.elements(trial))
            except exprs.ExprError:
                continue
            if best is None or gain > best[0]:
                best = (gain, name, lo)
        if best is None:
            return None
        _, name, lo = best
        # Shrink as little as needed: the largest value that fits, else the smallest test value.
        hi = cur[name]
        cur[name] = lo
        if _valid(spec, cur, max_elements):
            a, b = lo, hi
            while b - a > 1:
                mid = (a + b) // 2
                if _valid(spec, {**cur, name: mid}, max_elements):
                    a = mid
                else:
                    b = mid
            cur[name] = a
            return cur
    return None


def free_args(spec: Spec) -> list[str]:
    """Floating-point inputs whose values the spec leaves free (default `normal` init)."""
    return [a.name for a in spec.args.values()
            if a.pointer and (not a.output) and a.dtype.is_float and a.init.kind == "normal" and not a.init.params]


def build(spec: Spec, *, measures_time: bool, nonce: int, quick: bool = False,
          max_elements: int | None = None) -> Suite:
    if max_elements is None:
        max_elements = GPU_MAX_ELEMENTS if measures_time else CPU_MAX_ELEMENTS
    rng = np.random.Generator(np.random.PCG64(nonce))
    seeds = [int(s) for s in rng.integers(1, 2**31 - 1, size=max(2, spec.seeds))]
    if quick:
        seeds = seeds[:1]
    notes: list[str] = []
    cases: list[Case] = []
    spec_cases = [c for c in spec.cases() if _valid(spec, c, max_elements)]
    empty = sum(not drawable(spec, c) for c in spec.cases())
    if empty:
        notes.append(f"{empty} spec case(s) leave a bounded `init` no value to draw and were skipped")
    skipped = max(0, len(spec.cases()) - len(spec_cases) - empty)
    if skipped:
        notes.append(f"{skipped} spec case(s) exceed {max_elements} elements on this backend and were skipped")
    if quick and len(spec_cases) > 4:
        by_size = sorted(spec_cases, key=spec.elements)
        spec_cases = [by_size[0], by_size[len(by_size) // 3], by_size[2 * len(by_size) // 3], by_size[-1]]
    for i, seed in enumerate(seeds):
        for c in spec_cases:
            cases.append(Case(c, SPEC_DIST, seed, visible=(i == 0), label="spec"))
    added = [dict(c) for c in spec.added_cases]
    for k, c in enumerate(a for a in added if _valid(spec, a, max_elements)):
        cases.append(Case(c, SPEC_DIST, seeds[k % len(seeds)], visible=False, label="added"))
    if sum(_valid(spec, a, max_elements) for a in added) < len(added):
        notes.append(f"{sum(not _valid(spec, a, max_elements) for a in added)} size(s) the rewrite added exceed "
                     f"{max_elements} elements on this backend and were skipped")
    edges = edge_sizes(spec, max_elements, limit=3 if quick else 8)
    for j, c in enumerate(edges):
        cases.append(Case(c, SPEC_DIST, seeds[(j + 1) % len(seeds)], visible=(j % 2 == 0), label="edge"))
    # Timed sizes.
    bench = spec.bench_cases()
    if measures_time:
        bench_note = f"all {len(bench)} timed size(s) checked in full"
        fitted = [b for b in bench if _valid(spec, b, max_elements)]
    else:
        fitted = []
        for b in bench:
            f = fit_bench(spec, b, max_elements)
            if f is not None and f not in fitted:
                fitted.append(f)
        # Every timed value of every size name, the other names at their smallest test value:
        # a kernel keyed on any one timed dimension (many tokens, a wide row) meets it here.
        smallest = {n: min(v) for n, v in spec.sizes.items()}
        for b in bench:
            for name, value in b.items():
                p = {**smallest, name: value}
                if not any(f[name] == value for f in fitted) and _valid(spec, p, max_elements):
                    fitted.append(p)
        reduced = [f for f in fitted if f not in bench]
        bench_note = (f"speed is not measured on this backend: the {len(bench)} timed size(s) were checked "
                      f"reduced to fit ({len(reduced)} reduced), each timed dimension at its full value")
    if quick:
        fitted = fitted[:1]
    known = {tuple(sorted(c.sizes.items())) for c in cases}
    for k, b in enumerate(fitted):
        if tuple(sorted(b.items())) in known:
            continue
        cases.append(Case(b, SPEC_DIST, seeds[k % len(seeds)], visible=False, label="bench"))
    # Other value distributions, for the free inputs.
    free = free_args(spec)
    if free and spec_cases:
        by_size = sorted(spec_cases, key=spec.elements)
        mid = by_size[len(by_size) // 2]
        names = ["wide", "large"] if quick else [d for d in DISTRIBUTIONS if d != "normal"]
        for k, d in enumerate(names):
            cases.append(Case(mid, d, seeds[k % len(seeds)], visible=False, label="distribution"))
    elif not free:
        notes.append("every input has an explicit `init` in the spec, so only the spec's distributions were used")
    return Suite(cases, notes, bench_note)


# ---- inputs ------------------------------------------------------------------------------------

def sample(arg: ArgSpec, shape: tuple[int, ...], rng: np.random.Generator, distribution: str) -> np.ndarray:
    dt = arg.dtype.np
    init = arg.init
    ft = np.float64 if dt.itemsize > 4 else F32
    if distribution in DISTRIBUTIONS and arg.dtype.is_float and init.kind == "normal" and not init.params:
        vals = DISTRIBUTIONS[distribution](rng, shape, ft)
    elif init.kind == "normal":
        mean, std = init.params if init.params else (0.0, 1.0)
        vals = draw_normal(rng, shape, ft) * ft(std) + ft(mean)
        if not arg.dtype.is_float:  # integers with a 'normal' init: small signed values
            vals = np.rint(vals * (8.0 if not init.params else 1.0))
            if dt.kind == "u":
                vals = np.abs(vals)
    elif init.kind == "uniform":
        lo, hi = init.params
        vals = draw_uniform(rng, lo, hi, shape, ft)
        if not arg.dtype.is_float:
            vals = np.floor(vals)
    elif init.kind == "randint":  # [lo, hi), like NumPy and PyTorch
        lo, hi = (int(p) for p in init.params)
        vals = rng.integers(lo, max(hi, lo + 1), shape)
    elif init.kind == "arange":
        vals = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    elif init.kind == "permutation" and init.params:   # n distinct values of 0 .. V-1: a scatter into V slots
        n, total = int(np.prod(shape)), int(init.params[0])
        if total < n:
            raise ValueError(f"init permutation({total}): {n} distinct values do not fit in 0 .. {total - 1} "
                             f"(the spec needs a require that the range holds the array)")
        vals = rng.choice(total, n, replace=False).reshape(shape)
    elif init.kind == "permutation":  # 0 .. n-1 each once, shuffled: a scatter's indices (no two alike)
        vals = rng.permutation(int(np.prod(shape))).reshape(shape)
    elif init.kind == "offsets":  # segment boundaries (a CSR indptr): 0, never decreasing, the total last
        vals = _offsets(rng, int(np.prod(shape)), int(init.params[0])).reshape(shape)
    elif init.kind == "ones":
        vals = np.ones(shape)
    elif init.kind == "zeros":  # only when the spec asks for it
        vals = np.zeros(shape)
    else:
        raise ValueError(f"unknown init {init}")
    if dt == np.bool_:
        return (vals != 0) if init.kind in ("ones", "zeros", "arange") else rng.integers(0, 2, shape).astype(bool)
    if arg.dtype.is_float:
        return np.asarray(vals, dtype=ft).astype(dt)
    info = np.iinfo(dt)
    return np.asarray(np.clip(vals, info.min, info.max).astype(dt))


def _offsets(rng: np.random.Generator, n: int, total: int) -> np.ndarray:
    """n boundaries of n - 1 segments that cover 0 .. total: the first 0, the last `total` (one
    boundary: 0), in between sorted draws, so segments of every length, empty ones included."""
    if n <= 1:
        return np.zeros(n, dtype=np.int64)
    inner = np.sort(rng.integers(0, max(total, 0) + 1, n - 2))
    return np.concatenate(([0], inner, [max(total, 0)])).astype(np.int64)


PARALLEL_MIN = 1 << 22   # elements: larger arrays are drawn in chunks, one random stream each


def sample_large(arg: ArgSpec, shape: tuple[int, ...], rng: np.random.Generator, distribution: str) -> np.ndarray:
    """A timed size's ~10^8 elements, drawn chunk by chunk on all cores. Each chunk has its own
    stream spawned from `rng`, so the values depend on the seed only, not on the thread count."""
    n = int(np.prod(shape))
    out = np.empty(n, dtype=arg.dtype.np)
    bounds = [(s, min(n, s + PARALLEL_MIN)) for s in range(0, n, PARALLEL_MIN)]
    streams = rng.spawn(len(bounds))

    def draw(k: int) -> None:
        s, e = bounds[k]
        out[s:e] = sample(arg, (e - s,), streams[k], distribution)

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
        list(pool.map(draw, range(len(bounds))))  # NumPy fills and casts release the GIL
    return out.reshape(shape)


def record_values(arg: ArgSpec, n: int, sizes: dict[str, int]) -> np.ndarray:
    """The values of a field of `n` records drawn per record (`init`) at `sizes`: drawn once per
    case, the same for every seed — records describe the case (its sequences and where each
    starts), as its sizes do, so the reference and the candidate always read the same ones."""
    key = f"{arg.name}|{sorted(sizes.items())}".encode()
    rng = np.random.Generator(np.random.PCG64(zlib.crc32(key)))
    return sample(dataclasses.replace(arg, init=arg.init.at(sizes)), (n,), rng, SPEC_DIST)


def inputs(spec: Spec, sizes: dict[str, int], distribution: str, seed: int) -> dict[str, np.ndarray]:
    """Fresh host arrays for every pointer argument that is read (inputs and in-place arguments).
    Output-only arguments get no array: their buffers are poisoned instead."""
    rng = np.random.Generator(np.random.PCG64(seed))
    out = {}
    for a in spec.args.values():
        if a.pointer and not a.output:
            a = dataclasses.replace(a, init=a.init.at(sizes))  # bounds over the sizes: randint(0, V)
            shape = spec.shape(a.name, sizes)
            large = int(np.prod(shape)) >= PARALLEL_MIN and a.init.kind not in ("arange", "ones", "zeros", "permutation", "offsets")
            out[a.name] = (sample_large if large else sample)(a, shape, rng, distribution)
    return out


AHEAD_CASES = 8   # cases whose inputs are drawn ahead of their turn, at most one of them large


def stateful_case(spec: Spec, cases: list[Case]) -> Case:
    """The case the statefulness checks relaunch on: the spec's middle-sized case."""
    spec_cases = [c for c in cases if c.label == "spec"] or cases
    by_size = sorted(spec_cases, key=lambda c: spec.elements(c.sizes))
    return by_size[len(by_size) // 2]


def schedule_cases(spec: Spec, cases: list[Case], quick: bool) -> list[Case]:
    """The cases the determinism (GPU) or thread-schedule (CPU) check runs: the spec's
    middle-sized case and, unless quick, the largest edge case."""
    spec_cases = sorted([c for c in cases if c.label == "spec"], key=lambda c: spec.elements(c.sizes))
    edges = [c for c in cases if c.label == "edge"]
    picks = [spec_cases[len(spec_cases) // 2]] if spec_cases else cases[:1]
    if edges and not quick:
        picks.append(max(edges, key=lambda c: spec.elements(c.sizes)))
    return picks


class Drawn:
    """The inputs of a suite's cases (`inputs`, the same values), drawn ahead of their turn on a
    thread of their own: while the small cases run, a timed size's ~10^8 values are drawn (NumPy's
    draws release the GIL), instead of on the gate's critical path. At most one large case is held
    ahead, so memory grows by one case at most. `close` drops what is queued.

    `later`: the fresh draws the checks after the suite will ask for (`take`), in the order they
    ask, queued behind the suite's cases — their values too are drawn while the suite runs."""

    def __init__(self, spec: Spec, cases: list[Case], later: list[Case] | None = None,
                 on_device: set[int] | frozenset[int] = frozenset()):
        self.spec, self.cases = spec, cases + list(later or [])
        self.on_device = on_device   # cases drawn where they run (gate/device_case.py): nothing drawn here
        self.first_later = len(cases)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="astra-inputs")
        self.ahead: dict[int, Future[dict[str, np.ndarray]]] = {}
        self.next = 0
        self.taken = 0

    def _large(self, i: int) -> bool:
        return i not in self.on_device and self.spec.elements(self.cases[i].sizes) >= PARALLEL_MIN

    def _queue(self, upto: int) -> None:
        while self.next < len(self.cases) and (self.next <= upto or (
                len(self.ahead) < AHEAD_CASES and not (self._large(self.next) and any(self._large(i) for i in self.ahead)))):
            c = self.cases[self.next]
            if self.next in self.on_device:
                self.ahead[self.next] = Future()
                self.ahead[self.next].set_result({})
            else:
                self.ahead[self.next] = self.pool.submit(inputs, self.spec, c.sizes, c.distribution, c.seed)
            self.next += 1

    def get(self, i: int) -> dict[str, np.ndarray]:
        """Case i's inputs (cases are taken in order; a case skipped is drawn and dropped); none for a
        case drawn on the device."""
        self._queue(i)
        for k in [k for k in self.ahead if k < i]:
            self.ahead.pop(k).cancel()
        host = self.ahead.pop(i).result()
        self.taken = i + 1
        self._queue(i)
        return host

    def take(self, sizes: dict[str, int], distribution: str, seed: int) -> dict[str, np.ndarray]:
        """`inputs(spec, sizes, distribution, seed)`: a later draw if one was queued for it, else
        drawn now (a check that asks out of the announced order still gets its own values)."""
        for i in range(max(self.taken, self.first_later), len(self.cases)):
            c = self.cases[i]
            if c.sizes == sizes and c.distribution == distribution and c.seed == seed:
                return self.get(i)
        return inputs(self.spec, sizes, distribution, seed)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
