"""Size values: test sizes (the name's usual values and the program's own) and the repair that
keeps every proposed case valid; the checks a case is judged by (`problem`, `require`, the
buffers' bytes), shared with the bench sizes (`bench_sizes`)."""
from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field

from tree_sitter import Node

from ..model import exprs
from . import work

# LLaMA-7B/13B/70B-like sizes: (test sizes, bench sizes) by what a size name suggests.
_SIZE_HINTS = [
    (("token", "batch", "row", "seq", "m", "rows", "num_tokens", "bs", "b"), [1, 7, 333], [4096]),
    (("t", "seq_len", "seqlen"), [1, 64, 257], [1024]),
    # a head's own length and its rotated part (rope's `rot_dim`) are 64 or 128, not a hidden size's
    # 11008 (which `_dim` suggests) nor a head count (which `head_` suggests)
    (("head_dim", "headdim", "hd", "head_size", "headsize", "rot_dim", "rotary_dim", "rope_dim"), [64, 128], [128]),
    (("head", "heads", "nh"), [1, 32], [32, 40, 64]),
    (("v", "vocab", "vocab_size"), [64, 1000], [50304]),
    (("hidden", "d", "dim", "n", "cols", "size", "k", "len", "numel", "count", "c", "channels"),
     [128, 1001, 4096], [4096, 11008]),
]


def _hinted(name: str) -> bool:
    """The name says what it counts (tokens, rows, a hidden size...)."""
    low = name.lower()
    return any(low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys)
               for keys, _, _ in _SIZE_HINTS)


def usual_values(name: str) -> tuple[list[int], list[int]]:
    low = name.lower()
    for keys, test, bench in _SIZE_HINTS:
        if low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys):
            return test, bench
    return [1, 100, 4096], [4096]


# ---- the sizes of one proposal ----------------------------------------------------------------

SETTING_MAX = 64              # a value the program fixes at or below this is a setting (a warp width)
TEST_CAP = 8192               # a program's own value above this is timed, not tested (the CPU runs tests)
MAX_TEST_COMBINATIONS = 192   # [sizes]' cartesian product before `require` (cases are sampled from it)
TEST_BYTES = 1 << 30          # bytes of all buffers of one test case (they run on the CPU too)
MAX_DIM = 1 << 31             # CUDA's grid.x limit; a size is kept below it


@dataclass
class Draft:
    """What a proposal says, before it is written as TOML: enough to evaluate every case."""
    grid: list[str]
    block: list[str]
    shared: str | None
    require: list[str]
    sizes: dict[str, list[int]]
    bench: dict[str, list[int]]
    buffers: dict[str, tuple[list[str], int, bool]]   # pointer -> (shape, bytes per element, read and written)
    scalars: dict[str, str] = field(default_factory=dict)  # integer scalar parameter -> its expression
    # the kernel's body and the numbers its names take (template arguments, the project's
    # constants): the loop trips of a case (`work`)
    body: Node | None = None
    constants: dict[str, int] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)   # each argument's TOML value, as proposed
    # a block count the caller chooses over a grid-stride loop: moves no more bytes however large,
    # so it is not grown for traffic but timed at MIN_BLOCKS (a few blocks an SM)
    grid_counts: list[str] = field(default_factory=list)
    # a size the launcher reads off a tensor its caller lays out (vLLM's `block_size = key_cache.size(3)`):
    # the value it is timed at (`layout_value`), tested too, and never grown or shrunk for traffic
    layouts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for n, v in self.layouts.items():
            if n in self.sizes:
                self.sizes[n] = sorted(set(self.sizes[n]) | {v})


# tokens a block of a paged KV cache holds: vLLM's default `--block-size` (its CUDA kernels take 8,
# 16 or 32; SGLang's and FlashInfer's pages are as small)
PAGED_BLOCK = 16
_PAGE_NAMES = ("block_size", "page_size", "blocksize", "pagesize", "tokens_per_block", "tokens_per_page")


# experts a MoE router sends each token to (`topk = topk_weights.size(-1)`): DeepSeek-V3 and Qwen3's
# MoE route to 8 (Mixtral to 2); a top-k kernel timed choosing 172 of 256 is no launch of a model's
MOE_TOP_K = 8
# the routed experts a MoE router chooses among: DeepSeek-V3's 256 (Qwen3's MoE 128, Mixtral 8);
# where a launcher's `switch` sends those to other kernels, DeepSeek-V2's 160, Qwen1.5-MoE's 60
MOE_EXPERTS = 256
MOE_EXPERT_COUNTS = (MOE_EXPERTS, 128, 160, 60)


# a head's dim: Llama's, Qwen's, Mistral's and DeepSeek's attention heads hold 128 elements
HEAD_DIM = 128
# the dimension of an extent read that is a head's dim: the fourth, the innermost of the 4-D layouts
# attention's activations take ([s, b, h, d], [b, s, h, d], [b, h, s, d]: apex's fused rope reads
# `d = input.size(3)` and `d2 = freqs.size(3)`)
HEAD_DIM_AXIS = 3
# names that say only "a dimension" (hinted as a hidden size otherwise): read off that axis, a head's dim
# (llm-awq's rope reads `d = input.size(3)` of [s, b, h, d])
_BARE_DIMS = ("d", "dim")


def layout_value(name: str, *more: str, ruled_out: frozenset[int] = frozenset(),
                 dim: int | None = None) -> tuple[int, str] | None:
    """The value of a size the launcher reads off an extent of a tensor its caller passes (`int
    block_size = key_cache.size(3)`, or handed down from such a read through the launchers'
    parameters: `more`, the names it went by and the tensor's), which no C++ here fixes, with what it
    is: named as a paged cache's block or page, the block a paged KV cache holds (PAGED_BLOCK) — not
    the hidden size (4096, 11008) the `_size` of its name otherwise suggests; any of its names a
    MoE's top-k (`topk`, `top_k`, `topk_weights`), the experts a token is routed to (MOE_TOP_K) — not
    the hidden size a bare `k` suggests; named as a count of experts (`num_experts`), the routed
    experts of a MoE (MOE_EXPERT_COUNTS: the first the launch can take, not one `ruled_out` by the
    cases of a `switch` whose `default:` it stands in); read off a tensor's fourth dimension (`dim`
    HEAD_DIM_AXIS), a head's dim (HEAD_DIM) — not the hidden size or the 1 and 100 a name such as `d2`
    otherwise gets, where a rotary loop's vector path is never reached; else None (the name's usual
    values)."""
    low = name.lower()
    if any(low == w or low.endswith("_" + w) for w in _PAGE_NAMES):
        return PAGED_BLOCK, f"a paged cache's block: timed at {PAGED_BLOCK} tokens, the block a paged KV cache holds"
    if any("topk" in n.lower().replace("_", "") for n in (name, *more)):
        return MOE_TOP_K, f"a MoE's top-k: timed at {MOE_TOP_K}, the experts a router sends each token to"
    count = next((v for v in MOE_EXPERT_COUNTS if v not in ruled_out), None)
    if low.endswith("experts") and count is not None:
        return count, f"a MoE's expert count: timed at {count}, a real model's routed experts" + (
            " (a count no `case` of the launcher's `switch` takes)" if ruled_out else "")
    if dim == HEAD_DIM_AXIS and (not _hinted(name) or name.lower() in _BARE_DIMS):
        # a name that says what it counts keeps its values (apex softmax's `key_seq_len = input.size(3)`
        # is a sequence, not a head); a bare `d` says only that it is a dimension: there, a head's
        return HEAD_DIM, (f"the innermost extent of a 4-D tensor, as attention lays out its activations "
                          f"([s, b, h, d]): timed at {HEAD_DIM}, a head's dim")
    return None


# a rotary embedding's layout flag, by the name's words: the rotate-half layout (GPT-NeoX's) that
# Llama, Qwen, Mistral and DeepSeek take, not GPT-J's interleaved pairs — `interleaved` off (false by
# default in TransformerEngine's Python API), `neox`/`is_neox`/`neox_style` on
ROTATE_HALF_FLAGS = {"interleaved": 0, "neox": 1}


def usual_flag(name: str) -> tuple[int, str] | None:
    """A `bool` parameter's usual value where its name says what it switches (a word of it in
    ROTATE_HALF_FLAGS), with why; None otherwise."""
    words = name.lower().split("_")
    hit = next((w for w in ROTATE_HALF_FLAGS if w in words), None)
    if hit is None:
        return None
    value = ROTATE_HALF_FLAGS[hit]
    return value, (f"a rotary embedding's layout flag, {'on' if value else 'off'} for the rotate-half layout most "
                   f"models take (Llama, Qwen, Mistral, DeepSeek), not GPT-J's interleaved pairs")


GRID_COUNT_TESTS = [1, 3, 16]   # a grid-stride loop's block count: one block, several trips, one trip a thread


def test_values(name: str, program: list[int], grid_count: bool = False) -> list[int]:
    """A size's test values: the name's usual ones and the program's own (small enough to run
    on the CPU). A small value the program fixes (a shuffle width of 32, 4 heads) is a setting,
    not a problem size: only the program's own values are tested. A block count over a
    grid-stride loop (`grid_count`) is tested at a few blocks, so each thread makes several trips."""
    own = [v for v in program if 0 < v <= TEST_CAP]
    if grid_count:
        return sorted(set(GRID_COUNT_TESTS) | {v for v in own if v <= max(GRID_COUNT_TESTS)})
    if own and max(own) <= SETTING_MAX and not _hinted(name):
        return sorted(set(own))
    return sorted(set(usual_values(name)[0]) | set(own))


def value_at(expr: str, case: dict[str, int]) -> int | None:
    try:
        return exprs.evaluate_int(expr, case)
    except exprs.ExprError:
        return None


def bytes_moved(d: Draft, case: dict[str, int]) -> int | None:
    total = 0
    for shape, itemsize, both in d.buffers.values():
        n = itemsize
        for e in shape:
            v = value_at(e, case)
            if v is None or v < 0:
                return None
            n *= v
        total += n * (2 if both else 1)
    return total


def problem(d: Draft, case: dict[str, int], bench: bool = False) -> str | None:
    """Why the spec's validator would refuse this case (as `spec.check_cases` does), or None; or
    why it would run too long (`work`: for a bench size, timed on a GPU, each thread's trips only)."""
    g = [value_at(e, case) for e in d.grid]
    b = [value_at(e, case) for e in d.block]
    if any(v is None for v in g + b) or (d.shared and value_at(d.shared, case) is None):
        return "launch"
    if any(value_at(e, case) is None for e in d.scalars.values()):
        return "scalar"
    g3, b3 = (g + [1, 1, 1])[:3], (b + [1, 1, 1])[:3]
    if min(b3) < 1 or b3[0] * b3[1] * b3[2] > 1024:
        return "block"
    if min(g3) < 1 or g3[0] >= MAX_DIM or g3[1] > 65535 or g3[2] > 65535:
        return "grid"
    moved = bytes_moved(d, case)
    if moved is None:
        return "shape"
    if buffer_bytes(d, case) > TEST_BYTES:
        return "bytes"
    if d.body is not None and _too_long(d, case, g3, b3, bench):
        return "work"
    return None


def _too_long(d: Draft, case: dict[str, int], grid: list[int], block: list[int], bench: bool) -> bool:
    """Whether the case asks more loop trips than a test runs in seconds (`work`)."""
    env = thread_env(d, case, grid, block)
    trips = work.thread_trips(d.body, env)
    threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
    return trips > work.MAX_THREAD_TRIPS or not bench and trips * threads > work.MAX_CASE_TRIPS


def thread_env(d: Draft, case: dict[str, int], grid: list[int], block: list[int]) -> dict[str, int]:
    """The names a loop bound reads at `case`, as thread 0 of block 0 sees them."""
    env = {**d.constants, **case}
    for name, e in d.scalars.items():
        v = value_at(e, case)
        if v is not None:
            env[name] = v
    for dim, i in (("x", 0), ("y", 1), ("z", 2)):
        env.update({f"blockDim.{dim}": block[i], f"gridDim.{dim}": grid[i], f"threadIdx.{dim}": 0,
                    f"blockIdx.{dim}": 0})
    return env


def _idle(d: Draft, case: dict[str, int]) -> bool:
    g = [value_at(e, case) for e in d.grid]
    b = [value_at(e, case) for e in d.block]
    if d.body is None or problem(d, case) is not None or None in g + b:
        return False
    return work.idle(d.body, thread_env(d, case, ([*g, 1, 1, 1])[:3], ([*b, 1, 1, 1])[:3]))  # type: ignore[list-item]


def drop_idle(d: Draft, program: dict[str, list[int]], notes: list[str]) -> None:
    """Leave out of [sizes] a value at which the launch's own dimensions start every loop of the
    kernel past its end (`for (i = threadIdx.x + blockDim.x; i < n; …)` with n ≤ blockDim.x): no
    thread does the kernel's work there, so its output cannot depend on its inputs — a size the
    program does not use (one it uses itself stays, and the check says what the kernel does
    there). Only where the size keeps a value at which the kernel works."""
    if any(problem(d, c) is not None for c in cases_of(d.sizes, d)):   # sizes left unrepaired: no judgement
        return
    for name in list(d.sizes):
        if len(d.sizes[name]) < 2:
            continue
        cases = cases_of(d.sizes, d)
        idle = [v for v in d.sizes[name] if v not in program.get(name, [])
                and (at := [c for c in cases if c[name] == v]) and all(_idle(d, c) for c in at)]
        kept = [v for v in d.sizes[name] if v not in idle]
        if idle and kept and any(not _idle(d, c) for c in cases if c[name] in kept):
            d.sizes[name] = kept
            notes.append(f"size `{name}`: {', '.join(map(str, idle))} left out of the tests — the launch starts "
                         f"every loop of the kernel past its end there (no thread works: the output could not "
                         f"depend on the inputs)")


def block_threads(d: Draft, case: dict[str, int]) -> int:
    total = 1
    for e in d.block:
        total *= value_at(e, case) or 0
    return total


def satisfies(d: Draft, case: dict[str, int]) -> bool:
    try:
        return all(bool(exprs.evaluate(r, case)) for r in d.require)
    except exprs.ExprError:
        return False


def cases_of(table: dict[str, list[int]], d: Draft) -> list[dict[str, int]]:
    names = list(table)
    return [c for c in (dict(zip(names, vals)) for vals in itertools.product(*(table[n] for n in names)))
            if satisfies(d, c)]


def repair(d: Draft, notes: list[str]) -> bool:
    """Make every test case valid (positive launch dimensions, at most 1024 threads, readable
    shapes) by dropping or raising the size values that break it, and keep [sizes] small.
    True when every case is valid and one remains; otherwise the sizes are left as they were
    (values raised in vain, to 524288 each, made sgl-kernel transfer_kernel_impl's buffers 512 GiB)."""
    before = {n: list(v) for n, v in d.sizes.items()}
    if _repair(d, notes):
        return True
    d.sizes = before
    return False


def _repair(d: Draft, notes: list[str]) -> bool:
    for name in d.sizes:   # values that break `require` on their own (`N % 8 == 0`) are raised to fit
        d.sizes[name] = fit_requirements(d, name, d.sizes[name])
    while _combinations(d.sizes) > MAX_TEST_COMBINATIONS:
        widest = max(d.sizes, key=lambda n: len(d.sizes[n]))
        vals = d.sizes[widest]
        # the caller's layout kept (a rotary part timed at a head's 128, tested there too)
        kept = [v for v in vals[1:-1] if v == d.layouts.get(widest)] if len(vals) > 3 else []
        d.sizes[widest] = sorted({vals[0], vals[-1], *kept}) if len(vals) > 2 else vals[:1]
    for _ in range(64):
        bad = next(((c, why) for c in cases_of(d.sizes, d) if (why := problem(d, c)) is not None), None)
        if bad is None:
            cases = cases_of(d.sizes, d)
            for n, vals in d.sizes.items():   # a value no valid case takes (`d2` = 4096 where `d2 <= d` and
                used = [v for v in vals if any(c[n] == v for c in cases)]   # d is at most 1001): never tested
                d.sizes[n] = used or vals
            return bool(cases)
        case, why = bad
        if why in ("bytes", "work"):   # too large to test (or too long to run): drop the largest value of
            # a size that has others, or halve one
            several = [n for n in case if len(d.sizes[n]) > 1]
            if several:
                name = max(several, key=lambda n: case[n])
                d.sizes[name] = [v for v in d.sizes[name] if v != case[name]]
                continue
            # halve the largest size that `require` lets shrink (raised again to what it asks of that
            # size alone: `rows % 4 == 0`), never one it holds in a range (`n >= 2049`)
            smaller = {n: fitted for n in case if case[n] > 1
                       and (fitted := fit_requirements(d, n, [case[n] // 2])) and fitted[0] < case[n]}
            if not smaller:
                return False
            name = max(smaller, key=lambda n: case[n])
            d.sizes[name] = smaller[name]
            continue
        in_block = [n for n in case if any(n in exprs.names(b) for b in d.block)]
        if why == "block" and in_block and block_threads(d, case) > 1024:   # too many threads: shrink
            name = max(in_block, key=lambda n: case[n])
            d.sizes[name] = sorted({max(1, v // 2) if v == case[name] else v for v in d.sizes[name]})
            continue
        # drop the smallest offending value of a name that has others; else double it (a grid or
        # block dimension out of range: a name of that dimension's expression)
        suspects = launch_names(d, case, why)
        if why in ("grid", "block") and not suspects:   # a constant dimension out of range: no size fixes it
            dims = d.grid if why == "grid" else d.block
            notes.append(f"the {why} {dims} is out of CUDA's range whatever the sizes: no size changes it")
            return False
        suspects = suspects or set(case)
        name = next((n for n in sorted(case, key=lambda n: case[n]) if len(d.sizes[n]) > 1 and n in suspects), None)
        if name is not None:
            d.sizes[name] = [v for v in d.sizes[name] if v != case[name]]
        else:
            name = min(case, key=lambda n: case[n])
            if case[name] * 2 > TEST_CAP * 64:
                return False
            d.sizes[name] = [max(1, case[name]) * 2]
    return False


def launch_names(d: Draft, case: dict[str, int], why: str) -> set[str]:
    """The sizes of the grid (or block) dimensions out of range in `case`."""
    if why not in ("grid", "block"):
        return set()
    parts = d.grid if why == "grid" else d.block
    limits = (MAX_DIM - 1, 65535, 65535) if why == "grid" else (1024, 1024, 64)
    out: set[str] = set()
    for i, e in enumerate(parts):
        v = value_at(e, case)
        if v is None or v < 1 or v > limits[min(i, 2)]:
            out |= exprs.names(e) & set(case)
    return out


def fit_requirements(d: Draft, name: str, values: list[int]) -> list[int]:
    mods = [int(r.split("%")[1].split("==")[0]) for r in d.require
            if r.replace(" ", "").startswith(f"{name}%") and r.split("%")[1].split("==")[0].strip().isdigit()]
    lo, hi = _bounds(d, name)
    alone = [r for r in d.require if exprs.names(r) == {name}]   # `(n & (n - 1)) == 0`, `n >= 4`

    def meets(v: int) -> bool:
        try:
            return all(bool(exprs.evaluate(r, {name: v})) for r in alone)
        except exprs.ExprError:
            return True
    out = []
    for v in values:
        v = min(max(v, lo), hi)   # a launcher's `n <= 1024`: the value at its bound
        for m in mods:
            v = -(-v // m) * m if m > 0 else v
        if not meets(v):   # the next value that meets them (a power of two: 1001 -> 1024), else the last below
            v = next((u for u in range(v, min(2 * v, hi, v + (1 << 14)) + 1) if meets(u)),
                     next((u for u in range(v, max(lo, v // 2) - 1, -1) if meets(u)),
                          # a bound far below (`seq_length * 4 <= 8`, the launcher's first branch)
                          next((u for u in range(v // 2, max(lo, 1, v - (1 << 14)) - 1, -1) if meets(u)), v)))
        out.append(v)
    return sorted(set(out))


_FLIPPED = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}


def _bounds(d: Draft, name: str) -> tuple[int, int]:
    """The range `require` gives one size on its own (`n >= 4`, `n <= 4 * 256`)."""
    lo, hi = 0, MAX_DIM   # a 0 given (a window's start) stays
    for r in d.require:
        try:
            tree = exprs.parse(r).body
        except exprs.ExprError:
            continue
        if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1):
            continue
        op, bound = type(tree.ops[0]), tree.comparators[0]
        if isinstance(bound, ast.Name) and bound.id == name:   # `64 >= rotary_dim`: read as `rotary_dim <= 64`
            op, bound = _FLIPPED.get(op, op), tree.left
        elif not (isinstance(tree.left, ast.Name) and tree.left.id == name):
            continue
        try:
            k = exprs.evaluate_int(ast.unparse(bound), {})
        except exprs.ExprError:
            continue
        if op is ast.LtE or op is ast.Lt:
            hi = min(hi, k if op is ast.LtE else k - 1)
        elif op is ast.GtE or op is ast.Gt:
            lo = max(lo, k if op is ast.GtE else k + 1)
    return lo, max(lo, hi)


def _combinations(table: dict[str, list[int]]) -> int:
    n = 1
    for v in table.values():
        n *= max(1, len(v))
    return n


def buffer_bytes(d: Draft, case: dict[str, int]) -> int:
    total = 0
    for shape, itemsize, _ in d.buffers.values():
        n = itemsize
        for e in shape:
            n *= max(0, value_at(e, case) or 0)
        total += n
    return total


def _clamps(block: list[str], kernel_text: str, size_names: list[str],
            grid: list[str] | None = None) -> list[tuple[int, str, str]]:
    """(dimension, E, C) for each block dimension of `min(E, C)` threads (vLLM reshape_and_cache:
    `std::min(num_heads * head_div_x, 512)`) where the kernel never reads `blockDim`: each thread
    takes its own element by `threadIdx` (`if (i >= E) return;`) and none loops on to those past
    the block, so above C the launch leaves elements untouched — the launcher's program keeps E
    within C. A kernel that reads `blockDim` strides over the rest (reshape_and_cache_flash), and
    a grid that divides by the same `min(E, C)` (DeepSpeed's fused_residual_ln: `groups_per_block =
    min(rows, 1)` rows a block, `cdiv(rows, groups_per_block)` blocks) tiles E over its blocks."""
    if "blockDim" in kernel_text:
        return []
    tiled = [g.replace(" ", "").replace("std::", "") for g in grid or []]
    out = []
    for i, b in enumerate(block):
        text = b.replace(" ", "").replace("std::", "")
        if not (text.startswith("min(") and text.endswith(")")):
            continue
        if any(f"/{text}" in g or f"/({text})" in g or re.search(rf"cdiv\(.*,{re.escape(text)}\)", g) for g in tiled):
            continue
        parts = exprs.split_top_level(b.strip()[b.strip().index("(") + 1:-1])
        if len(parts) != 2:
            continue
        e, c = (x.strip() for x in parts)
        if e.isdigit():
            e, c = c, e
        if c.isdigit() and exprs.names(e) and exprs.names(e) <= set(size_names):
            out.append((i, e, c))
    return out


def clamped_block_requires(block: list[str], kernel_text: str, size_names: list[str],
                           grid: list[str] | None = None) -> list[str]:
    """`E <= C` for each block dimension of `min(E, C)` threads the kernel cannot stride past (`_clamps`)."""
    return [f"{e} <= {c}" for _, e, c in _clamps(block, kernel_text, size_names, grid)]


def unclamped_block(block: list[str], kernel_text: str, size_names: list[str],
                    grid: list[str] | None = None) -> list[str]:
    """The block as it is wherever `clamped_block_requires` holds (`min(E, C)` is then E): the
    probes of the kernel's accesses use it, their sizes drawn without that requirement — with the
    clamp the last rows' threads would be cut off and no shape would fit the extents."""
    out = list(block)
    for i, e, _ in _clamps(block, kernel_text, size_names, grid):
        out[i] = e
    return out
