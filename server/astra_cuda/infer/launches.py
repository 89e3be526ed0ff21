"""Where and how a kernel is launched: its grid, block and shared memory rewritten over the
kernel's sizes (dim3 variables and the launcher's locals followed, macros and constants by value,
a block size the caller chooses taken as a default), the relations between sizes the launch
states, and the strides a contiguous layout gives. What it reads of the launcher is in
`launch_locals` (its locals), `launch_conditions` (its checks and branches) and `launch_callers`
(the site picked, the callers' values). Long because `launch_of` reads grid, block, shared memory,
new sizes and the launcher's requirements from one set of the launcher's locals and mappings."""
from __future__ import annotations

import ast
from functools import partial
from dataclasses import dataclass, field

from ..model import exprs, source
from ..model.source import ConfigVar, Kernel, LaunchSite, SourceModel
from ..model.syntax import walk as _walk
from . import hostcalls
from .grid_stride import strides_over_grid
from .hostexprs import HostExprs
from .program import Program
from .roles import is_stride
from .sizes import layout_value
from .structs import SEP
from .template_names import split
from .launch_callers import caller_values, case_template_param, extent_chain, extent_dim, extent_object, extent_read, launcher_params, \
    later_dim, same_at_callers
from .launch_conditions import (branch_conditions, chain_conditions, helper_ranges, host_condition, launcher_checks, negated,
                                range_requires)
from .launch_locals import (BLOCK_DEFAULT, RUNTIME, auto_zero, compile_time_names, constexpr_names, declared_names, fixed_by_branches,
                            ruled_out_by_default,
                            host_locals, launch_byte, site_locals)


def _strip_dim3(expr: str) -> list[str]:
    """'dim3(a, b)' -> ['a', 'b']; '{a, b, 1}' (a braced dim3, apex's index_mul launches) ->
    ['a', 'b']; 'a' -> ['a']."""
    e = expr.strip()
    if e.startswith("dim3(") and e.endswith(")"):
        return exprs.split_top_level(e[5:-1])
    if e.startswith(("{", "dim3{")) and e.endswith("}"):
        parts = [x.strip() for x in exprs.split_top_level(e[e.index("{") + 1:-1])]
        while len(parts) > 1 and parts[-1] == "1":
            parts.pop()
        return parts if 1 <= len(parts) <= 3 and all(parts) else [e]
    return [e]


def _config_parts(what: str, text: str, var: ConfigVar | None, line: int, notes: list[str]) -> list[str]:
    """The host expressions of a launch's grid or block: a local dim3's constructor arguments
    when the launch names one we could follow, else the text as written."""
    if var is not None and var.dims is not None:
        return list(var.dims)
    if var is not None:
        notes.append(f"{what} `{var.name}` (line {line}) is a dim3 that {var.problem}: "
                     f"its value was not followed")
    return _strip_dim3(text)


def _site_mapping(kernel: Kernel, site: LaunchSite, size_names: list[str]) -> dict[str, str]:
    """Host expression -> size name, from the launch's argument list."""
    mapping = {n: n for n in size_names}
    # a field of a struct passed by value, its fields the kernel's sizes (`paged_kv__num_heads`): the
    # launcher's `paged_kv.num_heads` (read there where the launch hands the struct through an array of
    # argument pointers, `cudaLaunchKernel(k, grid, block, args)`, which the split does not rewrite)
    mapping.update({n.replace(SEP, "."): n for n in size_names if SEP in n.strip(SEP)})
    for p, arg in zip(kernel.params, site.args):
        node = source.parse_expression(arg.strip())
        # a literal argument (`32`) says nothing of other 32s in the launch: it is no size's name
        if p.name in size_names and (node is None or node.type != "number_literal"):
            mapping[arg.strip()] = p.name
            mapping.update(_scaled_host(p.name, arg))
    return mapping


def _scaled_host(size: str, host: str) -> dict[str, str]:
    """A launcher's value passed divided (`size_per_head / 2` to a half2 kernel, `seq_length4 =
    sequence_length / 4`): that host name is the kernel's size times as much wherever the
    launch's grid and block name it."""
    node = source.parse_expression(host.strip())
    if node is None or node.type != "binary_expression":
        return {}
    op = node.child_by_field_name("operator").type
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if op in ("/", ">>") and left is not None and left.type == "identifier" and right is not None \
            and right.type == "number_literal" and right.text.decode().isdigit():
        k = int(right.text.decode())
        return {left.text.decode(): f"({size} * {k if op == '/' else 2 ** k})"}
    return {}


SHARED_PER_THREAD = 16      # dynamic shared memory the launch sets in a way not read: a 16-byte slot per thread
RUNTIME_DEFAULT = 4         # such a value in a grid: a grid-stride kernel covers its sizes with any grid
_BLOCK_WORDS = ("block", "thread", "tpb", "nthreads", "num_threads", "bs")
_GRID_WORDS = ("blocks", "grid", "nblk", "num_blocks", "numblocks", "ctas")


def _bound_size(kernel: Kernel, size_names: list[str]) -> str:
    """The size the kernel compares its indices against most (`i < n`), else the first size."""
    from collections import Counter
    root = source.parser().parse(kernel.text.encode("utf-8")).root_node
    seen: Counter[str] = Counter()
    for n in _walk(root):
        if n.type == "binary_expression" and n.child_by_field_name("operator").type in ("<", "<=", ">", ">="):
            for side in (n.child_by_field_name("left"), n.child_by_field_name("right")):
                if side is not None and side.type == "identifier" and side.text.decode() in size_names:
                    seen[side.text.decode()] += 1
    return seen.most_common(1)[0][0] if seen else size_names[0]


def _folded(expr: str | None) -> str | None:
    """An expression over no size written as its value (`6 * (1 << 5)` -> `192`)."""
    if expr is None:
        return None
    try:
        return str(exprs.evaluate_int(expr, {})) if not exprs.names(expr) else expr
    except exprs.ExprError:
        return expr


def _threads(block: list[str], size_names: list[str]) -> int:
    """Threads of a block at modest sizes (every size 128), or 0 when it cannot be evaluated."""
    total = 1
    for x in block:
        try:
            total *= exprs.evaluate_int(x, {n: 128 for n in size_names} | {n: 128 for n in exprs.names(x)})
        except exprs.ExprError:
            return 0
    return total


def _names(expr: str) -> list[str]:
    node = source.parse_expression(expr)
    return [n.text.decode() for n in _walk(node) if n.type == "identifier"] if node is not None else []


@dataclass
class Launch:
    grid: list[str] | None
    block: list[str] | None
    shared: str | None
    new_sizes: list[str]                  # sizes the launch names that are no kernel parameter
    program_sizes: dict[str, list[int]]   # size -> the values the program itself uses
    derived: dict[str, str] = field(default_factory=dict)   # parameter -> its contiguous value (a stride)
    relations: dict[str, str] = field(default_factory=dict)  # parameter -> the sizes the launcher computes it from
    require: list[str] = field(default_factory=list)         # the launcher's own checks over the sizes
    grid_counts: list[str] = field(default_factory=list)     # a caller's block count over a grid-stride loop
    layouts: dict[str, int] = field(default_factory=dict)    # a size read off a tensor's extent -> its value (`sizes.layout_value`)


def launch_of(kernel: Kernel, model: SourceModel, site: LaunchSite, size_names: list[str],
               notes: list[str], program: Program | None = None,
               constants: dict[str, str] | None = None, raising: dict[str, int | None] | None = None) -> Launch:
    """Grid, block, shared memory and new sizes over the kernel's sizes, read from a launch
    site: dim3 variables and plain locals followed to their definitions, macros and constants
    (the project's too) by value; a block size the caller chooses followed to the callers
    (`int block_size = 32` in main), else 256 with a note. With the program, the values the
    program itself gives each size (its `main`'s literals, a caller's arguments). `raising`: the
    project's macros that throw (`hostexprs.raising_macros`), read as the launcher's checks."""
    program = program or Program(model)
    read = partial(HostExprs, helpers=hostcalls.helper_functions(program.function))
    constants = {**(constants or {}), **model.constants}
    line = site.span.start_line + 1
    where = f"line {line}" + (f", through macro {site.via_macro}" if site.via_macro else "")
    mapping = _site_mapping(kernel, site, size_names)
    grid_parts = _config_parts("grid", site.grid, site.grid_var, line, notes)
    block_parts = _config_parts("block", site.block, site.block_var, line, notes)
    local = site_locals(model, site, constants)
    zeroed = auto_zero(model, site)
    for p in zeroed:
        notes.append(f"`{p}` taken as 0, the value that asks the launcher to choose the launch itself "
                     f"(`{p} == 0` tested, {where}): its other values are the caller's own launches")
    raw = host_locals(model, site.function, launch_byte(model, site), constants)
    # a case's value stands for a helper's result only where the helper was read (its range required)
    ranged = {r[3] for r in helper_ranges(model, site, program, mapping)}
    local.update({k: raw[k] for k in fixed_by_branches(model, site) if k in raw and raw[k] != local.get(k) and k not in ranged
                  and not extent_read(raw[k])})
    for p, arg in zip(kernel.params, site.args):   # a size passed through such a local (`seq_length4`)
        if p.name in size_names and arg.strip() in local:
            mapping.update(_scaled_host(p.name, local[arg.strip()]))
    for name in [k for k, v in local.items() if v == RUNTIME]:
        local[name] = str(RUNTIME_DEFAULT)
        if any(name in x for x in grid_parts + block_parts):
            notes.append(f"`{name}` is read from the device at run time ({where}): took {RUNTIME_DEFAULT}")
    # A local holding a bare number is a launch choice in a block (`const int threads = 256`)
    # but the problem's size in a grid (`const int num_tokens = 16` in main): that stays a size.
    literal = {k for k, v in local.items() if source.parse_expression(v) is not None
               and source.parse_expression(v).type == "number_literal"}
    # ... unless the launch also hands it to the kernel as a template argument (`k<T, TOKENS_PER_CTA>`):
    # a compile-time constant, not a size
    literal -= {a.strip() for a in split(site.template_args or "<>")}
    literal -= constexpr_names(model, site.function)   # nor a compile-time constant (`constexpr int tile = 512`)
    # nor a local computed by a helper the spec cannot write, fixed by the `case 12:` the launch is under
    literal -= {k for k in fixed_by_branches(model, site) if k in raw and raw[k] != local.get(k)}
    # nor a local the launcher sets in several places that the launch's own branch pins (DeepSpeed
    # rotary's `alignment`, set 16, 8 or 4 by a chain, launched under `if (alignment == 16)`)
    literal -= {k for k in fixed_by_branches(model, site) if k not in raw and k in declared_names(model, site.function)
                and k not in launcher_params(model, site.function)}
    for var in (site.grid_var, site.block_var):   # `threads.x` in the grid is the block's first dimension
        if var is not None and var.dims is not None:
            for axis, dim in zip("xyz", list(var.dims) + ["1", "1"]):
                local[f"{var.name}.{axis}"] = dim
    block_values = {**constants, **local}
    runtime = {k for k, v in local.items() if v == str(RUNTIME_DEFAULT) and k in literal}
    grid_values = {**constants, **{k: v for k, v in local.items()
                                   if k not in literal or k in runtime or any(w in k.lower() for w in _BLOCK_WORDS)}}
    fixed = compile_time_names(model, site.function, constants)
    free: list[str] = []
    for x in grid_parts:   # a grid's local the host computes unreadably (`x.numel() / d`) is a problem size
        read(mapping, grid_values, keep_locals=True, fixed=fixed).spec(x, free)
    for x in block_parts:
        read(mapping, block_values).spec(x, free)
    if site.shared_mem:
        read(mapping, block_values).spec(site.shared_mem, free)
    # the names the block is made of, also through the launcher's locals (`threads_per_block =
    # num_warps_per_block * WARP_SIZE`): a chosen count of warps is then held to 1024 threads below
    in_block = {n for x in block_parts for n in _names(x)}
    todo = list(in_block)
    while todo:
        for n in _names(local[name]) if isinstance(local.get(name := todo.pop()), str) else []:
            if n not in in_block:
                in_block.add(n)
                todo.append(n)
    grid_counts = [f for f in free if f not in in_block and f not in size_names and f not in local
                   and any(w in f.lower() for w in _GRID_WORDS)]
    chosen = [f for f in free if any(w in f.lower() for w in _BLOCK_WORDS) and f not in size_names
              and f not in grid_counts]
    # several block dimensions the caller chooses share 1024 threads (16 x 16, 8 x 8 x 8)
    default = {1: BLOCK_DEFAULT, 2: 16}.get(len([f for f in chosen if f in in_block]), 8)
    passed: set[str] = set()
    for f in chosen:
        given = [v for v, _ in caller_values(program, site.function, f, constants) if 0 < v <= 1024]
        value = given[0] if given else (default if f in in_block else BLOCK_DEFAULT)
        grid_values[f] = block_values[f] = str(value)
        passed.update({f} if given else set())
    # a local of the launcher that could not be read (`smemSize = threads <= 32 ? ... : ...`) is
    # no size of the problem: its part of the launch is guessed instead
    declared = declared_names(model, site.function)
    new_sizes = [f for f in free if f not in chosen and f not in grid_counts and (f not in declared or f in local)]
    for name in new_sizes:
        mapping[name] = name
    b = [read(mapping, block_values).spec(x) for x in block_parts]
    for _ in range(8):   # a chosen block size times a constant (`num_warps * 32`) stays within 1024 threads
        if not (chosen and b and all(b)) or _threads(b, size_names) <= 1024:
            break
        for f in chosen:
            if f in in_block:
                block_values[f] = grid_values[f] = str(max(1, int(block_values[f]) // 2))
        b = [read(mapping, block_values).spec(x) for x in block_parts]
    for f in chosen:
        notes.append(f"block size `{f}` is chosen by the caller ({where}): took {block_values[f]}" +
                     (", as the program passes it" if f in passed else ""))
    g = [read(mapping, grid_values, keep_locals=True, fixed=fixed).spec(x) for x in grid_parts]
    strided = len(grid_counts) == 1 and grid_parts[:1] and set(_names(grid_parts[0])) == set(grid_counts) \
        and grid_counts[0] in launcher_params(model, site.function) and strides_over_grid(kernel.text)
    if strided:
        # a loop over the whole grid covers the elements with any block count: the count the
        # launcher's caller passes (not one the launcher computes from the sizes, however unreadably)
        # is a size of its own, timed with enough blocks to fill a GPU (`bench_sizes.size_bench`)
        mapping[grid_counts[0]] = grid_counts[0]
        new_sizes.append(grid_counts[0])
        g = [grid_counts[0]] + g[1:]
        notes.append(f"grid `{site.grid}` ({where}) is a block count the caller chooses and the kernel strides over "
                     f"the grid: a size `{grid_counts[0]}` of its own (any count covers the elements)")
    elif grid_counts and b and all(b) and size_names and not any(set(_names(x)) - set(grid_counts) for x in grid_parts[:1]):
        # the caller computes the block count: one thread per element of the first size covers it
        # (and a grid-stride loop covers it with any count)
        parts = [x for x in b if x is not None and x.strip() != "1"] or ["1"]
        threads = parts[0] if len(parts) == 1 else " * ".join(f"({x})" for x in parts)
        total = _bound_size(kernel, size_names)
        g = [f"cdiv({total}, {threads})"] + g[1:]
        notes.append(f"grid `{site.grid}` ({where}) is a block count the caller computes: took "
                     f"cdiv({total}, {threads}), one thread per element of `{total}` — CHECK")
    shared = None
    if site.shared_mem and site.shared_mem.strip() not in ("0", "0u"):
        shared = read(mapping, block_values).spec(site.shared_mem)
        if shared is None and b and all(b):
            parts = [x for x in b if x is not None and x.strip() != "1"] or ["1"]
            shared = " * ".join([x if x.isidentifier() or x.isdigit() else f"({x})" for x in parts] +
                                [str(SHARED_PER_THREAD)])
            notes.append(f"dynamic shared memory `{site.shared_mem}` ({where}) could not be read over the sizes: "
                         f"took {SHARED_PER_THREAD} bytes per thread — CHECK")
        elif shared is None:
            notes.append(f"dynamic shared memory `{site.shared_mem}` ({where}) could not be read over the sizes: "
                         f"set shared_mem")
    g, b = [_folded(x) for x in g], [_folded(x) for x in b]
    shared = _folded(shared)
    grid = g if g and all(g) else None
    block = b if b and all(b) else None
    if grid is None:
        notes.append(f"grid `{site.grid}` ({where}) could not be read over the sizes: guessed a grid")
    if block is None:
        notes.append(f"block `{site.block}` ({where}) could not be read over the sizes: guessed a block")
    used = [x for x in (grid or []) + (block or []) + ([shared] if shared else [])]
    new = [n for n in new_sizes if any(n in exprs.names(x) for x in used)]
    # what the program itself passes for each size: the launch's argument (or the new size's
    # own name) followed to a literal through locals and callers
    by_size = {p.name: arg.strip() for p, arg in zip(kernel.params, site.args) if p.name in size_names}
    by_size |= {n: n for n in new}
    program_sizes: dict[str, list[int]] = {}
    for size, host in by_size.items():
        vals = [v for v, _ in caller_values(program, site.function, host, constants) if v > 0]
        if vals:
            program_sizes[size] = sorted(set(vals))[:4]
    # a size the launcher reads off a tensor its caller lays out (vLLM's `block_size = key_cache.size(3)`),
    # which no C++ here fixes: a paged cache's block is timed at the block such caches hold, not at the
    # hidden size the `_size` of its name suggests (a bench of 172-token blocks is no launch of vLLM's)
    # — also handed down through the launcher's parameters from the caller that reads it (the
    # top-k of `topk = topk_weights.size(-1)` two calls up: the experts a token is routed to, not 172)
    layouts: dict[str, int] = {}
    defaults = ruled_out_by_default(model, site)
    for p, arg in zip(kernel.params, site.args):
        if p.name not in size_names or p.name in program_sizes:
            continue
        a = arg.strip()   # a local set from the read, the read itself (`topk_ids.size(1)`), or a parameter
        got = (raw[a], [a]) if extent_read(raw.get(a, "")) else (a, [a]) if extent_read(a) \
            else extent_chain(program, site.function, a, constants)
        # the names it went by, and the tensor's where one later dimension is read (`topk_ids.size(1)`):
        # `topk_ids.numel()` or `.size(0)` counts tokens too, no top-k
        named = [n for n in got[1] if n.isidentifier()] + ([extent_object(got[0])] if later_dim(got[0]) else []) \
            if got is not None else []
        chosen = layout_value(p.name, *named, ruled_out=frozenset(defaults.get(arg.strip(), ())),
                              dim=extent_dim(got[0])) if got is not None else None
        if got is not None and chosen is not None:
            layouts[p.name] = chosen[0]
            notes.append(f"`{p.name}` is read off the caller's tensor (`{got[0]}`, {where}), {chosen[1]} — CHECK")
    # the launcher's asserts that read over the sizes (`batch * n % 1024 == 0`, `n <= 1024`)
    hx = read(mapping, grid_values)
    known = set(size_names) | set(new)
    require = [c for c in (host_condition(x, hx) for x in launcher_checks(model, site.function, launch_byte(model, site), raising))
               if c is not None and set(exprs.names(c)) <= known]
    for c in require:
        notes.append(f"`{c}`: the launcher checks it before it launches ({where}): required")
    # a picker's `if` the instance launched is returned under (`blocks_per_warp == 1`), then the launch's own
    for text, taken in [(c, True) for c in site.conditions] + branch_conditions(model, site, local) \
            + chain_conditions(model, site):
        c = host_condition(text, hx)
        c = c if c is None or taken else negated(c)
        if c is not None and set(exprs.names(c)) <= known and c not in require:
            require.append(c)
            notes.append(f"`{c}`: the launch is written where the launcher's `if` has it so ({where}): required")
    for c in range_requires(helper_ranges(model, site, program, mapping)):
        if c not in require:
            require.append(c)
            notes.append(f"`{c}`: the sizes the launcher sends to this launch, by the helper it chooses it with "
                         f"({where}): required")
    # what the launcher computes through its flags and helpers, written out at what this launch's
    # branch decides (`h = n <= 128 ? 4 : 16` is 16 under `n > 128`)
    # (only what holds a choice: `cdiv(N, 256 * 8)` keeps the 8 its requirement is read from)
    def simpler(x: str, given: list[str]) -> str:
        return exprs.simplify(x, given) if " if " in x else x
    plain = {c: simpler(c, [r for r in require if r != c]) for c in require}
    notes[:] = [next((n.replace(c, v) for c, v in plain.items() if c != v and f"`{c}`" in n), n) for n in notes]
    require = list(plain.values())
    grid = [simpler(x, require) for x in grid] if grid else grid
    block = [simpler(x, require) for x in block] if block else block
    shared = simpler(shared, require) if shared else shared
    strides = contiguous(kernel, site, local, size_names)
    relations, more = _relations(kernel, site, size_names, grid_values, set(strides), model, new,
                                 same_at_callers(program, site.function),
                                 {h: v for h, v in mapping.items() if h != v and not v.isidentifier()})
    for p, arg in zip(kernel.params, site.args):   # such a parameter handed on to the kernel: its 0 too
        if p.name in size_names and arg.strip() in zeroed and p.name not in relations:
            relations[p.name] = local.get(arg.strip(), "0")
    for p, arg in zip(kernel.params, site.args):   # one the `case` the launcher's call stands in fixes
        cased = case_template_param(program, site.function, arg.strip()) \
            if p.name in size_names and p.name not in relations else None
        if cased is not None and constants.get(cased[0], "").isdigit():
            relations[p.name] = constants[cased[0]]
            notes.append(f"`{p.name}` = {constants[cased[0]]}: each call of `{site.function}` stands in the `case` "
                         f"of a `switch` on `{cased[1]}` that gives `{cased[0]}` that value, as this instance's")
    for name in more:
        if name not in new:
            new.append(name)
            vals = [v for v, _ in caller_values(program, site.function, name, constants) if v > 0]
            if vals:
                program_sizes[name] = sorted(set(vals))[:4]
    return Launch(grid, block, shared, new, program_sizes, strides, relations, list(dict.fromkeys(require)),
                  [grid_counts[0]] if strided and grid_counts[0] in new else [], layouts)


def _relations(kernel: Kernel, site: LaunchSite, size_names: list[str], values: dict[str, str], taken: set[str],
               model: SourceModel, grid_sizes: list[str] = (),   # type: ignore[assignment]
               same: dict[str, str] | None = None,
               scaled: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """Size parameters the launcher computes from the others (`total_count = batch_size *
    intermediate_size` passed with `intermediate_size`): each with that expression, and the
    launcher's own parameters it names (`batch_size`), which become sizes. Only sums and products
    that name another size of the kernel, or only sizes the launch's grid is made of (`batch_count =
    batches * heads * rows` over `dim3(rows / 4, heads, batches)`): that relation is what the
    kernel's indexing assumes (a flat buffer of whole rows, the rows the grid covers), where free
    sizes would leave part of it unwritten."""
    # a launcher parameter every caller passes as another (`(..., seq_len, seq_len, ...)` for the row
    # length and its stride) is that one
    args = {p.name: arg.strip() for p, arg in zip(kernel.params, site.args) if p.name in size_names}
    launcher = set(launcher_params(model, site.function))
    out: dict[str, str] = {}
    new: list[str] = []
    for name, arg in args.items():
        arg = (same or {}).get(arg, arg)
        if name in taken or (arg == name and arg not in values):   # its namesake, no local: a size of its own
            continue
        others: dict[str, str] = {}   # argument text -> the size it passes (its namesake first: `d` is d)
        for n, a in args.items():
            node = source.parse_expression(a)
            if n != name and node is not None and node.type != "number_literal" and (a not in others or a == n):
                others[a] = n
        free: list[str] = []
        # a launcher's value passed scaled (`seq_length4 = sequence_length / 4`) reads as that size
        # times as much (`iterations = (seq_length4 + threads - 1) / threads` while `sequence_length <
        # subblock_max_workload`): a whole expression over the sizes, not a free launcher value
        expr = HostExprs({**(scaled or {}), **others}, values).spec(arg, free)
        if expr is None or not set(free) <= launcher or set(free) & set(size_names):
            continue
        tree = exprs.parse(expr)
        ops = {type(n.op) for n in ast.walk(tree) if isinstance(n, ast.BinOp)}
        names = set(exprs.names(expr))
        alias = not ops and len(names) == 1 and names <= set(others.values()) and not free   # `stride_h` passed `d`
        unit = is_stride(name) and not names and not free   # a stride passed as a number (`1`)
        # a schedule the launcher computes from the sizes alone (`reduce_width = min(max(next_pow2(
        # cdiv(seq, 4)), 32), 256)`): the kernel's partition of its block assumes exactly that value
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        schedule = bool(calls) and calls <= {"min", "max", "next_pow2", "cdiv"} and not free \
            and bool(names) and names <= set(others.values())
        # a size rounded up to a multiple of a constant (vLLM moe_align's `padded_num_experts =
        # ((num_experts + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE`): the kernel's shared counts assume it
        rounded = ops <= {ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv} and not free and bool(names) \
            and names <= set(others.values()) and all(isinstance(n.right, ast.Constant) for n in ast.walk(tree)
                                                      if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)))
        gridded = bool(names) and names <= set(grid_sizes) and set(free) <= set(grid_sizes)
        # a block's threads shared out by the sizes (TGI's `rows_per_block = MAX_THREADS_PER_SM /
        # effective_kv_length`): a number over them, which the kernel's split of its block assumes
        top = tree.body if isinstance(tree, ast.Expression) else tree
        shared_out = isinstance(top, ast.BinOp) and isinstance(top.op, (ast.Div, ast.FloorDiv)) and \
            isinstance(top.left, ast.Constant) and not free and bool(names) and names <= set(others.values())
        if not (alias or unit or schedule or rounded or shared_out) and (not ops or not ops <= {ast.Add, ast.Sub, ast.Mult}
                                                or not (names & set(others.values()) or gridded)):
            continue
        out[name] = expr
        new += [f for f in free if f not in new]
    # strides are read together: where the launch gives only some, the kernel's indexing decides them
    # all (`roles`: innermost first, each from the others at zero)
    if any(is_stride(n) and n not in out and n not in taken for n in args):
        out = {n: v for n, v in out.items() if not is_stride(n)}
        new = [f for f in new if any(f in exprs.names(v) for v in out.values())]
    return out, new


def _tensor_call(expr: str) -> tuple[str, str, int] | None:
    """('input', 'stride', -2) for `input.stride(-2)` (also `size`), else None."""
    node = source.parse_expression(expr)
    while node is not None and node.type in ("cast_expression", "parenthesized_expression"):
        node = node.child_by_field_name("value") or (node.named_children[-1] if node.named_children else None)
    if node is None or node.type != "call_expression":
        return None
    fn, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
    if fn is None or fn.type != "field_expression" or args is None or len(args.named_children) != 1:
        return None
    what = fn.child_by_field_name("field")
    obj = fn.child_by_field_name("argument")
    try:
        idx = int(args.named_children[0].text.decode())
    except ValueError:
        return None
    if what is None or obj is None or what.text.decode() not in ("size", "stride"):
        return None
    return obj.text.decode(), what.text.decode(), idx


def contiguous(kernel: Kernel, site: LaunchSite, local: dict[str, str], size_names: list[str]) -> dict[str, str]:
    """Integer parameters the launch passes as a tensor's stride (`input.stride(-2)`) or as a
    dimension only a higher-rank tensor has (`ndim >= 3 ? input.size(-2) : 0`): each with its value
    for a contiguous tensor of the lowest rank — the row stride is the row length, the last
    stride 1, the missing dimensions 0 — so a stride is never a free size."""
    passed = {p.name: local.get(arg.strip(), arg) for p, arg in zip(kernel.params, site.args)
              if p.name in size_names}
    rows = {}   # tensor -> the size that is its last dimension
    for name, init in passed.items():
        t = _tensor_call(init)
        if t is not None and t[1] == "size" and t[2] == -1:
            rows[t[0]] = name
    out: dict[str, str] = {}
    for name, init in passed.items():
        node = source.parse_expression(init)
        while node is not None and node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        if node is not None and node.type == "conditional_expression":
            yes, no = node.child_by_field_name("consequence"), node.child_by_field_name("alternative")
            if yes is not None and no is not None and _tensor_call(yes.text.decode()) is not None \
                    and no.text.decode().strip() == "0":
                out[name] = "0"
            continue
        t = _tensor_call(init)
        if t is None or t[1] != "stride":
            continue
        if t[2] == -1:
            out[name] = "1"
        elif t[2] in (-2, 0) and t[0] in rows:
            out[name] = rows[t[0]]
    return out


_BLOCK_INDEX_SUFFIXES = ("_idx", "_index", "_id", "idx", "id")


def grid_guess(kernel: Kernel, size_names: list[str], notes: list[str]) -> tuple[list[str], list[str]]:
    """A grid for a kernel no launch site shows: `cdiv(n, 256)` blocks of its one size (else one
    block per row of its first size), and a dimension more for each of `blockIdx.y` / `.z` the
    kernel reads — a size named after the local the index sets (vLLM copy_blocks: `pair_idx =
    blockIdx.y` is `num_pairs`), the kernel's size of that name or a new one; returns the grid and
    the sizes it names that `size_names` lacks. Without it the grid's y is 1
    and whatever the kernel reads at `blockIdx.y` (its block-pair table) is measured one long."""
    grid = [f"cdiv({size_names[0]}, 256)"] if len(size_names) == 1 else [size_names[0]]
    added: list[str] = []
    body = source.parser().parse(kernel.text.encode()).root_node
    read = {n.text.decode().replace(" ", "") for n in _walk(body) if n.type == "field_expression"}
    locals_of = {}
    for n in _walk(body):
        value, name = n.child_by_field_name("value"), n.child_by_field_name("declarator")
        if n.type == "init_declarator" and value is not None and name is not None and name.type == "identifier":
            locals_of.setdefault(value.text.decode().replace(" ", ""), name.text.decode())
    for dim in ("y", "z"):
        if f"blockIdx.{dim}" not in read:
            break
        local = locals_of.get(f"blockIdx.{dim}", "")
        stem = next((local[:-len(s)] for s in _BLOCK_INDEX_SUFFIXES if local.endswith(s) and len(local) > len(s)), "")
        name = f"num_{stem.rstrip('_')}s" if stem.rstrip("_").isidentifier() else f"blocks_{dim}"
        while name not in size_names and name in kernel.text:   # a name the kernel uses otherwise
            name += "_"
        grid.append(name)
        if name not in size_names:   # a size parameter of that name (`num_heads`) is the count itself
            added.append(name)
        notes.append(f"grid: the kernel reads `blockIdx.{dim}`" + (f" (`{local}`)" if local else "") +
                     f": its {dim} dimension taken as the size `{name}` — CHECK")
    return grid, added
