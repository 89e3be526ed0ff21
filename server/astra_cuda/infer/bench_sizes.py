"""Bench sizes: the sizes a timed launch runs at, sized by the bytes it touches (`bench_traffic`)
and shaped like the launches the program makes — its blocks full, its grid wide, no thread looping
serially over what blocks would share (issue 29: a kernel's share of the copy ceiling is measured
there, and at sizes no program launches it is no measure of the kernel)."""
from __future__ import annotations

import tomllib
from collections.abc import Callable

from ..model import exprs
from ..model.syntax import walk
from . import bench_traffic, sizes, work

BENCH_TARGET = 256 << 20      # bytes a timed launch should move: far past launch latency and the L2
BENCH_ENOUGH = 64 << 20       # the program's own sizes moving this much are timed as they are (issue 25's line)
BENCH_CAP = 2 << 30           # bytes of all buffers of one bench case (the profiler holds several sets)


def size_bench(d: sizes.Draft, program: dict[str, list[int]], notes: list[str]) -> None:
    """Bench sizes whose launch touches about BENCH_TARGET bytes (`traffic`: of a table reached
    through indices, only the rows they reach): the program's own sizes (else the name's usual
    bench size) — kept as they are when they give every size and touch BENCH_ENOUGH —, shrunk
    where they break a launch limit (the out-of-range dimension's sizes) or the buffers' cap (first
    a size whose halving keeps the most traffic: a cache the tokens reach a few rows of), then
    grown until the traffic is there: first the sizes that drive the grid, in turn (more blocks:
    parallel work), then the one that scales the work (a row or token count), the other outer
    sizes, the inner ones; a block of fewer than FULL_BLOCK threads filled by the sizes that shape
    it alone (`_fuller_blocks`); where the launch still has fewer than MIN_BLOCKS blocks or a thread
    loops more than SERIAL_TRIPS times, per-block work traded for blocks (`_more_blocks`) — within
    BENCH_CAP and CUDA's grid limits."""
    bench = {n: [max(program[n])] if program.get(n) else [max(sizes.usual_values(n)[1])] for n in d.sizes}
    bench.update({n: [max([MIN_BLOCKS, *program.get(n, [])])] for n in d.grid_counts if n in bench})
    bench.update({n: [v] for n, v in d.layouts.items() if n in bench})   # the caller's layout: as it is
    for name in d.sizes:
        bench[name] = sizes.fit_requirements(d, name, bench[name])
    scalable = _scalable(d)
    view = bench_traffic.view(d.buffers, d.args, list(d.sizes), d.grid, d.block)

    def moved(b: dict[str, list[int]]) -> int | None:
        c = {n: v[0] for n, v in b.items()}
        return sizes.bytes_moved(d, c) if view is None or sizes.bytes_moved(d, c) is None else bench_traffic.touched(view, c)

    def own(b: dict[str, list[int]], name: str) -> int | None:   # a table's and its indices' bytes, where `name` is its rows
        part = bench_traffic.drawn_part(view, name) if view is not None else None
        return None if part is None else bench_traffic.touched(part, {n: v[0] for n, v in b.items()})

    def ok(b: dict[str, list[int]]) -> bool:
        c = {n: v[0] for n, v in b.items()}
        return sizes.satisfies(d, c) and sizes.problem(d, c, bench=True) is None and moved(b) is not None and \
            sizes.buffer_bytes(d, c) <= BENCH_CAP
    for _ in range(40):   # first shrink what is too large (a table of 50304 rows times a 11008 hidden size)
        if ok(bench) or not any(bench[n][0] > 1 for n in bench):
            break
        c = {n: v[0] for n, v in bench.items()}
        why = sizes.problem(d, c, bench=True)
        if sizes.buffer_bytes(d, c) <= BENCH_CAP and why is None:
            break
        name = _to_shrink(d, bench, why, moved, own)
        if name is None:
            break
        bench[name] = sizes.fit_requirements(d, name, [max(1, bench[name][0] // 2)])
    if not ok(bench):   # a launcher's bounds (`n <= 1024`) the usual values break: grow from the largest test case
        valid = [c for c in sizes.cases_of(d.sizes, d) if sizes.problem(d, c) is None]
        if valid:
            bench = {n: [v] for n, v in max(valid, key=lambda c: sizes.bytes_moved(d, c) or 0).items()}
    c = {n: v[0] for n, v in bench.items()}
    own = bool(d.sizes) and all(program.get(n) and c[n] == max(program[n]) for n in d.sizes)
    if own and ok(bench) and (moved(bench) or 0) >= BENCH_ENOUGH:
        scalable = None   # the program's own sizes already time the memory system: timed as they are
    order = _growth_order(d, scalable, c)
    bench = _grow(d, bench, order, ok, moved)
    if order and ok(bench):
        bench = _fuller_blocks(d, bench, ok, moved, notes)
        bench = _more_blocks(d, bench, order, ok, moved, notes)
    if not ok(bench):
        bench = {n: [max(v)] for n, v in d.sizes.items()}
    for name in sorted(_unread(d)):   # moves nothing and runs nothing: its smallest test value, no model's 11008
        bench[name] = sizes.fit_requirements(d, name, [min(d.sizes[name])])
        notes.append(f"size `{name}` is read by nothing the launch runs (no shape, launch or `require`, and the "
                     f"kernel never reads the parameters it is passed as): timed at its smallest test value")
    d.bench = bench
    total = moved(bench)
    scaled = [n for n in order if program.get(n) and bench[n][0] > max(program[n])]
    if total is not None:
        notes.append(f"bench sizes move {total / 2**20:.0f} MiB per launch" +
                     (f" (`{scaled[0]}` scaled from the program's own value to reach that)" if scaled else ""))


_Measure = Callable[[dict[str, list[int]]], 'int | None']   # bench sizes -> the bytes touched there
KEEPS_MOST = 0.75   # a halving that keeps this share of the traffic barely shrinks what the launch touches
MIN_BLOCKS = 1024   # a timed launch of fewer blocks leaves most of a GPU's SMs (132 on an H200) idle
SERIAL_TRIPS = 1024  # a thread looping more at a bench size does serially what a launch of more blocks spreads
FULL_BLOCK = 256    # threads of a block whose size the sizes choose: the block most programs launch (vLLM's cache
# copy at 16 bytes a thread: 512), where a bench of 64-thread blocks, each thread copying 64 floats, is no launch of theirs


def _unread(d: sizes.Draft) -> set[str]:
    """Sizes nothing the launch runs reads: in no buffer's shape or init, grid, block, shared memory
    or `require`, and handed only as parameters the kernel's body never names (bitsandbytes' gemv
    `kgemm_4bit_inference_naive` takes `N`, `lda` and `ldc` and reads none of them)."""
    if d.body is None:
        return set()
    # a field's name too: a struct split into parameters (`params.N`) names them so
    in_body = {n.text.decode() for n in walk(d.body) if n.type in ("identifier", "field_identifier") and n.text is not None}
    texts = [*d.grid, *d.block, *([d.shared] if d.shared else []), *d.require,
             *(e for shape, _, _ in d.buffers.values() for e in shape)]
    for param, value in d.args.items():
        try:
            v = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            return set()   # an argument not read here: nothing is known unread
        if isinstance(v, str) and param in in_body:
            texts.append(v)
        elif isinstance(v, dict):   # a buffer's shape and how it is drawn (`randint(0, num_experts)`)
            texts += [x for x in [*v.get("shape", []), v.get("init", "")] if isinstance(x, str) and x]
    used: set[str] = set()
    for t in texts:
        try:
            used |= exprs.names(t)
        except exprs.ExprError:
            used |= {n for n in d.sizes if n in t}   # unreadable: every size it mentions counts as read
    return {n for n in d.sizes if n not in used and d.sizes[n]}


def _blocks(d: sizes.Draft, case: dict[str, int]) -> int | None:
    total = 1
    for e in d.grid:
        v = sizes.value_at(e, case)
        if v is None or v < 1:
            return None
        total *= v
    return total


def _drives_grid(d: sizes.Draft, name: str, case: dict[str, int]) -> bool:
    """A larger `name` launches more blocks (`num_groups` in `num_groups / groups_per_block`)."""
    now, more = _blocks(d, case), _blocks(d, {**case, name: case[name] * 64})
    return now is not None and more is not None and more > now


def _grow(d: sizes.Draft, bench: dict[str, list[int]], order: list[str], ok: Callable[[dict[str, list[int]]], bool],
          moved: _Measure) -> dict[str, list[int]]:
    """Double sizes in `order` until the launch touches BENCH_TARGET bytes: the sizes that drive the
    grid in turn, one doubling each a round (the proportions of a real launch kept: apex rope's
    `s` and `b` grow together, not `s` to its limit first), then each other size as far as it helps."""
    c = {n: v[0] for n, v in bench.items()}
    drivers = [n for n in order if _drives_grid(d, n, c)]
    groups = ([drivers] if drivers else []) + [[n] for n in order if n not in drivers]
    for group in groups:
        active = list(group)
        for _ in range(40 * len(group)):
            before = moved(bench)
            if before is None or before >= BENCH_TARGET:
                return bench
            if not active:
                break
            name = active.pop(0)
            trial = {**bench, name: sizes.fit_requirements(d, name, [bench[name][0] * 2])}
            grown = moved(trial)
            if not ok(trial) or grown is None or grown <= before or trial[name][0] >= sizes.MAX_DIM:
                continue   # a size that moves no more bytes (or may not grow) is not grown again
            bench = trial
            active.append(name)
    return bench


def _to_shrink(d: sizes.Draft, bench: dict[str, list[int]], why: str | None, moved: _Measure,
               own: Callable[[dict[str, list[int]], str], 'int | None']) -> str | None:
    """The size to halve while a bench case is too large: of a launch dimension out of range, one
    of its sizes; of buffers too large, the one whose halving shrinks them and keeps the most
    traffic, of the launch and of the table whose rows it counts (`own`: a cache's rows the tokens
    never reach before the tokens — not past them, to a table of one row every token reads) — never one that leaves the
    launch fewer than MIN_BLOCKS blocks where halving another would not (a CSR's segment count keeps
    the traffic as it halves, but at one segment FlashInfer's batched rope ran 65 blocks on 132 SMs);
    else the largest."""
    c = {n: v[0] for n, v in bench.items()}
    blocks = _blocks(d, c)

    def starves(n: str) -> bool:   # the halving takes the grid below what a GPU needs
        after = _blocks(d, {**c, n: max(1, c[n] // 2)})
        return blocks is not None and after is not None and after < min(blocks, MIN_BLOCKS)
    names = [n for n in bench if c[n] > 1 and n not in d.layouts]
    if why in ("grid", "block"):
        dims = d.grid if why == "grid" else d.block
        launch = [n for n in names if n in sizes.launch_names(d, c, why)] or \
            [n for n in names if any(n in exprs.names(e) for e in dims)]
        names = launch or names
    elif why in (None, "bytes"):
        size = sizes.buffer_bytes(d, c)
        halved = {n: {**bench, n: [max(1, c[n] // 2)]} for n in names}
        smaller = [n for n in names if sizes.buffer_bytes(d, {k: v[0] for k, v in halved[n].items()}) < size]
        if smaller:   # a size whose halving keeps most of the traffic first (a cache's untouched rows), else
            # the largest: halving one size to its floor before the next made apex rope's bench 4096 x 2 x 2 x 4096
            now = moved(bench) or 0

            def kept(n: str) -> float:
                after, mine, mine_after = moved(halved[n]) or 0, own(bench, n), own(halved[n], n) or 0
                share = min(after / now if now else 0.0, mine_after / mine if mine else 1.0)
                return share if share >= KEEPS_MOST else 0.0
            return max(smaller, key=lambda n: (sizes.satisfies(d, {k: v[0] for k, v in halved[n].items()}),
                                               not starves(n), kept(n), c[n]))
    return max(names, key=lambda n: c[n]) if names else None


def _fuller_blocks(d: sizes.Draft, bench: dict[str, list[int]], ok: Callable[[dict[str, list[int]]], bool],
                   moved: _Measure, notes: list[str]) -> dict[str, list[int]]:
    """A block of fewer than FULL_BLOCK threads made fuller by a size that shapes the block but not
    the traffic (vLLM reshape_and_cache's `min(num_heads * (head_size / x), 512)`: at x = 64, 64
    threads each copying 64 elements; the program's x is 16 bytes' worth) — halved where it divides
    the block, doubled where it multiplies it — while the case stays valid and touches as many bytes."""
    start = dict(bench)
    shaping = sorted(set().union(*(exprs.names(e) for e in d.block)) & set(bench)) if d.block else []
    for _ in range(40):
        c = {n: v[0] for n, v in bench.items()}
        threads, before, blocks = sizes.block_threads(d, c), moved(bench), _blocks(d, c) or 0
        if threads >= FULL_BLOCK or not before:
            break
        fuller = []
        for n in shaping:
            for v in (c[n] // 2, c[n] * 2):
                trial = {**bench, n: sizes.fit_requirements(d, n, [max(1, v)])}
                t = {k: x[0] for k, x in trial.items()}
                after = moved(trial)
                if sizes.block_threads(d, t) > threads and after and abs(after - before) <= before * 0.1 and ok(trial) \
                        and (_blocks(d, t) or 0) >= min(blocks, MIN_BLOCKS):   # not fewer blocks than a GPU needs
                    fuller.append((sizes.block_threads(d, t), trial))
        if not fuller:
            break
        bench = max(fuller, key=lambda f: f[0])[1]
    if bench != start:
        changed = [n for n in bench if bench[n] != start[n]]
        notes.append(f"bench sizes: {', '.join(f'`{n}` {start[n][0]} -> {bench[n][0]}' for n in changed)} — "
                     f"the block had fewer than {FULL_BLOCK} threads, shaped by a size the traffic does not grow with")
    return bench


def _more_blocks(d: sizes.Draft, bench: dict[str, list[int]], order: list[str], ok: Callable[[dict[str, list[int]]], bool],
                 moved: _Measure, notes: list[str]) -> dict[str, list[int]]:
    """Per-block work traded for blocks while the launch has fewer than MIN_BLOCKS, or a thread
    loops more than SERIAL_TRIPS times: a size that drives no grid dimension, nor the block's threads, but
    grows what each block touches (a group's length done by 16 threads; the `k` winners one
    thread a row finds in turn, sgl-kernel's topkGatingSoftmax) halved, down to its smallest test
    value, and a size that drives the grid (the groups, the rows) doubled — the traffic kept, the
    parallel work the program runs at restored."""
    start = dict(bench)
    for _ in range(40):
        c = {n: v[0] for n, v in bench.items()}
        blocks, before, trips = _blocks(d, c), moved(bench), _trips(d, c)
        serial = trips > SERIAL_TRIPS
        if blocks is None or blocks >= MIN_BLOCKS and not serial or not before:
            break
        drivers = [n for n in order if _drives_grid(d, n, c)]
        threads = min(sizes.block_threads(d, c), FULL_BLOCK)   # a size of the block's that keeps its threads may
        # shrink too (apex welford's `ss` in `min(512 / 16, last_pow2(ss))`: 32 threads at 512 as at 256)
        work_sizes = [n for n in bench if n not in drivers and n not in _held(d) and c[n] // 2 >= min(d.sizes[n])
                      and sizes.block_threads(d, {**c, n: c[n] // 2}) >= threads
                      and (moved({**bench, n: [c[n] // 2]}) or before) < before
                      and (blocks < MIN_BLOCKS or _trips(d, {**c, n: c[n] // 2}) < trips)]
        if not drivers or not work_sizes:
            break
        # one work size halved, or all of them where only that keeps the traffic (vLLM moeTopK's experts
        # and k: the scores [tokens, experts] and the winners [tokens, k] both stay as the tokens double)
        trials = []
        for less in [[n] for n in work_sizes] + ([work_sizes] if len(work_sizes) > 1 else []):
            trial = {**bench, **{n: sizes.fit_requirements(d, n, [c[n] // 2]) for n in less},
                     drivers[0]: sizes.fit_requirements(d, drivers[0], [c[drivers[0]] * 2])}
            more, after = _blocks(d, {n: v[0] for n, v in trial.items()}), moved(trial) or 0
            if ok(trial) and more is not None and more > blocks and before * 0.9 <= after <= before * 1.1:
                trials.append((-max(c[n] for n in less), len(less), trial))
        if not trials:
            break
        bench = min(trials, key=lambda t: t[:2])[2]
    if bench != start:
        changed = [n for n in bench if bench[n] != start[n]]
        notes.append(f"bench sizes: {', '.join(f'`{n}` {start[n][0]} -> {bench[n][0]}' for n in changed)} — "
                     f"per-block work traded for blocks (the launch had fewer than {MIN_BLOCKS}, or a thread "
                     f"looped more than {SERIAL_TRIPS} times)")
    return bench


def _trips(d: sizes.Draft, case: dict[str, int]) -> int:
    """A thread's loop trips at `case` (`work`), 0 where the launch cannot be read there."""
    g = [sizes.value_at(e, case) for e in d.grid]
    b = [sizes.value_at(e, case) for e in d.block]
    if d.body is None or None in g + b:
        return 0
    return work.thread_trips(d.body, sizes.thread_env(d, case, ([*g, 1, 1, 1])[:3], ([*b, 1, 1, 1])[:3]))  # type: ignore[list-item]


_SCALE_WORDS = ("token", "batch", "row", "rows", "n", "num", "count", "size", "len", "elements", "b", "m", "t")


def _growth_order(d: sizes.Draft, scalable: str | None, case: dict[str, int]) -> list[str]:
    """The sizes to grow, in turn, while a bench case moves too little: those that drive the grid
    (more blocks: the parallel work a GPU's bandwidth needs), then the one that scales the work,
    the other outer sizes, the inner ones (a row length) — per-thread work and buffers last."""
    if scalable is None:
        return []
    rest = [n for n in d.sizes if n != scalable and n not in _held(d)]
    order = [scalable] + [n for n in rest if not _is_inner(n)] + [n for n in rest if _is_inner(n)]
    return [n for n in order if _drives_grid(d, n, case)] + [n for n in order if not _drives_grid(d, n, case)]


def _scalable(d: sizes.Draft) -> str | None:
    """The size to grow for timing: one named like a count of rows or items, else the first size
    of the grid's first dimension, else the first size."""
    names = [n for n in d.sizes if n not in _held(d)]
    hinted = [n for n in names if any(w == n.lower() or n.lower().startswith(w) or n.lower().endswith(w)
                                      for w in _SCALE_WORDS) and not _is_inner(n)]
    if hinted:
        return hinted[0]
    in_grid = [n for n in names if d.grid and n in exprs.names(d.grid[0])]
    return in_grid[0] if in_grid else (names[0] if names else None)


def _held(d: sizes.Draft) -> set[str]:
    """Sizes never grown or traded for traffic: a grid-stride loop's block count, a caller's layout."""
    return {*d.grid_counts, *d.layouts}


def _is_inner(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in ("head_dim", "headdim", "hidden", "dim", "width", "stride", "vocab", "channels"))


