"""What the kernel's body says that the draft turns into requirements, values or notes: a warp's
width by name, a scatter's index array, rows several blocks split, whole groups, pointers
tested against null, shift counts, modes, status outputs, an earlier version of the kernel,
functions bound as template arguments, the constants its code names, a `void*` buffer's type.
Separate because each is a reading of the tree, none needs the draft's state. Long because each
of those readings is one short function over the same kernel tree, and they are many."""
from __future__ import annotations

import ast
from collections.abc import Callable

from ..model import access, dtypes, exprs, source
from ..model.source import Kernel, SourceModel
from ..model.syntax import walk as _walk
from tree_sitter import Node
from .launch_callers import value_of
from .program import param_names
from .roles import InferredShapes
from .shape_fits import TABLE
from .requirements import prod


_NULL_HELPER_DEPTH = 4   # device helpers followed for a pointer's null test
WARP_WIDTH = 32   # threads of a warp on every NVIDIA GPU


def warp_width_names(kernel: Kernel, site_model: SourceModel | None, constants: dict[str, str]) -> list[str]:
    """Macros named for the warp's width (`C10_WARP_SIZE`, defined by torch's headers, which
    inference does not read) that the kernel or its launcher uses and the project does not define."""
    texts = [kernel.text] + ([site_model.text] if site_model is not None else [])
    nodes = [n for t in texts for n in _walk(source.parser().parse(t.encode("utf-8")).root_node)]
    # `dim3 threads(C10_WARP_SIZE, warps)` parses as a function declaration whose parameter types
    # are the names: a type_identifier there is the same macro
    found = {n.text.decode() for n in nodes if n.type in ("identifier", "type_identifier")}
    # a name the code declares itself (the kernel's own `constexpr int WARP_SIZE = ...`) is its own
    declared = {d.text.decode() for n in nodes if n.type in ("init_declarator", "preproc_def", "preproc_function_def")
                if (d := n.child_by_field_name("declarator") or n.child_by_field_name("name")) is not None}
    return sorted(n for n in found - declared if n.isupper() and n.endswith("WARP_SIZE") and n not in constants)

def class_argument(arg: str) -> str | None:
    """The template argument when it names an object of a class template (`cute::Shape<int, int>`,
    `TensorListMetadata<3>`), which no number stands for; None for anything else."""
    arg = " ".join(arg.split())
    return arg if "<" in arg and not arg.endswith("*") else None


def scatter_of(found: InferredShapes) -> tuple[str, str] | None:
    """(the index array, its element count) where the kernel's one index array places rows of
    outputs it never reads (`out[idx[row] * cols + i] = x`): a scatter, whose destinations are
    distinct — drawn with repeats, two rows would race for one destination and others stay unwritten.
    A CSR `indptr` (`boundaries`) holds segment starts, not destinations (FlashInfer's rotary `indptr`
    once `offsets`, which indexes nothing, is no table beside it)."""
    def placed(p: str) -> bool:   # written, never read: a window of a larger buffer is read-and-written only as kept
        return p not in found.read_only and (p not in found.inout or p in found.windows)
    if len(found.tables) > 1:
        # several index arrays (sgl-kernel's KV transfer: `src_indices` read, `dst_indices` written):
        # the one whose values place only rows of outputs
        placing = [t for t in sorted(found.tables) if found.indexes.get(t) and all(map(placed, found.indexes[t]))]
        table = placing[0] if len(placing) == 1 and not found.boundaries & found.tables else None
    else:
        table = next(iter(found.tables)) if found.tables and not found.tables & found.boundaries else None
    shape = found.shapes.get(table) if found.uses_table and table is not None else None
    users = [p for p, s in found.shapes.items() if any(TABLE in exprs.names(d) for d in s)]
    if len(found.tables) > 1 and table is not None:
        users = sorted(found.indexes[table] & set(found.shapes))
    if not shape or any(TABLE in exprs.names(d) for d in shape) or not users or not all(map(placed, users)):
        return None
    return table, " * ".join(d if d.isidentifier() or d.isdigit() else f"({d})" for d in shape)


def split_row_requires(kernel: Kernel, size_names: list[str], block: list[str], values: dict[str, int]) -> list[tuple[str, int]]:
    """(`n >= S`, line) for a loop over size `n` that several blocks split (FasterTransformer's
    topk_stage1: `for (e = tid + lane * BLOCK; e < vocab; e += BLOCK * BLOCKS_PER_BEAM)`, `lane`
    read from blockIdx): it starts at a block's own offset and steps a constant S wider than the
    block. Below S elements some block has none, and its partial result is empty (an index of -1
    the kernel writes through): the program's rows are far longer, so that is no edge to test."""
    body = access.kernel_body(kernel)
    threads = [int(b) for b in block if b.strip().isdigit()]
    if body is None or len(threads) != len(block) or not threads:
        return []
    width = prod(threads)
    from_block: set[str] = {"blockIdx"}   # locals computed from the block's index, transitively
    for d in _walk(body):
        if d.type == "init_declarator" and d.child_by_field_name("value") is not None:
            name = d.child_by_field_name("declarator")
            used = {n.text.decode() for n in _walk(d.child_by_field_name("value")) if n.type == "identifier"}
            if name is not None and name.type == "identifier" and used & from_block:
                from_block.add(name.text.decode())
    out: list[tuple[str, int]] = []
    for loop in _walk(body):
        if loop.type != "for_statement":
            continue
        init, cond, step = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
        if init is None or cond is None or step is None or step.type != "assignment_expression" \
                or step.child_by_field_name("operator").type != "+=":
            continue
        if not {n.text.decode() for n in _walk(init) if n.type == "identifier"} & from_block:
            continue
        op, bound = cond.child_by_field_name("operator"), cond.child_by_field_name("right")
        if op is None or op.type != "<" or bound is None or bound.text.decode() not in size_names:
            continue
        try:
            stride = exprs.evaluate_int(step.child_by_field_name("right").text.decode(), values)
        except exprs.ExprError:
            continue
        if stride >= 2 * width:
            out.append((f"{bound.text.decode()} >= {stride}", kernel.span.start_line + loop.start_point[0] + 1))
    return list(dict.fromkeys(out))


def whole_groups(kernel: Kernel, size_names: list[str], derived: dict[str, str], grid: list[str] = (),
                 block: list[str] = (), helpers: dict[str, Node] | None = None) -> list[str]:
    """`hidden * rows % groups == 0` where the kernel's body computes, once and before any loop,
    a product of sizes divided by a size (`stride = (hidden * rows) / groups`): each of that many
    parts is taken whole, so its launcher passes a divisor (a remainder's elements would be read
    from past the parts' table). Read in the helpers the kernel hands its sizes to too, a local
    copying the grid's size as that size (vLLM paged attention: `num_heads = gridDim.x;
    num_queries_per_kv = num_heads / num_kv_heads`, then `head_idx / num_queries_per_kv`)."""
    from .lengths import bodies, launch_locals
    out: list[str] = []
    for i, (body, given) in enumerate(bodies(kernel, helpers)):
        names = {n: n for n in size_names} if i == 0 else {k: v for k, v in given.items() if v in size_names}
        names.update(launch_locals(body, list(grid), list(block), size_names))
        out += [r for r in _whole_groups_in(body, names, size_names, derived) if r not in out]
    return out


def _whole_groups_in(body: Node, names: dict[str, str], size_names: list[str], derived: dict[str, str]) -> list[str]:
    from .hostexprs import HostExprs
    local: dict[str, str] = dict(derived)
    out: list[str] = []
    for st in body.named_children:
        if st.type != "declaration":
            continue
        for d in st.children_by_field_name("declarator"):
            target, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if d.type != "init_declarator" or target is None or target.type != "identifier" or value is None:
                continue
            v = value
            while v.type == "parenthesized_expression" and v.named_child_count == 1:
                v = v.named_children[0]
            hx = HostExprs(names, local)
            if v.type == "binary_expression" and v.child_by_field_name("operator").type == "/":
                num, den = v.child_by_field_name("left"), v.child_by_field_name("right")
                a, b = hx.spec(num.text.decode()), hx.spec(den.text.decode())
                if a is not None and b in size_names and exprs.names(a) and b not in exprs.names(a) \
                        and (a in size_names or any(isinstance(x, ast.BinOp) for x in ast.walk(exprs.parse(a)))):
                    out.append(f"{exprs.simplify(a, [])} % {b} == 0")
            if hx.spec(value.text.decode()) is not None:
                local[target.text.decode()] = value.text.decode()
    return out


def member_read(kernel: Kernel, name: str) -> str | None:
    """The first `name.member` (or `name.method(…)`) of the kernel's body, or None."""
    return first_use(kernel, name, "field_expression")


def first_use(kernel: Kernel, name: str, kind: str) -> str | None:
    """The first expression of type `kind` (`field_expression`, `subscript_expression`) of the kernel's
    body applied to `name` (`name.member`, `name[i][j]`), or None."""
    root = source.parser().parse(kernel.text.encode()).root_node
    for n in _walk(root):
        if n.type == kind and (arg := n.child_by_field_name("argument")) is not None \
                and arg.type == "identifier" and arg.text == name.encode():
            while n.parent is not None and n.parent.type == kind:   # `a[i][j]`, whole
                n = n.parent
            return " ".join(n.text.decode().split())[:60]
    return None


def null_tested(kernel: Kernel, helpers: dict[str, Node] | None = None) -> set[str]:
    """Pointer parameters the kernel compares with null (`p != nullptr`, `p == NULL`, `!p`, `if (p)`,
    `p ? p[i] : x`), itself or in a device helper it hands them to (exllamav2's rope tests
    `past_lens` in the helper it calls): optional inputs its caller may leave out, a layout or a
    feature chosen by their absence (TransformerEngine rope's `cu_seqlens`: THD when given, SBHD when null)."""
    body = access.kernel_body(kernel)
    pointers = {p.name for p in kernel.params if p.is_pointer}
    if body is None or not pointers:
        return set()

    def bare(n, env):
        while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        return env.get(n.text.decode()) if n is not None and n.type == "identifier" else None

    def is_null(n) -> bool:
        return n is not None and (n.type == "null" or (n.type == "number_literal" and n.text.decode() == "0"))

    out: set[str] = set()

    def walk(node, env: dict[str, str], depth: int) -> None:
        for n in _walk(node):
            if n.type == "binary_expression" and n.child_by_field_name("operator").type in ("==", "!="):
                left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                name = bare(left, env) if is_null(right) else bare(right, env) if is_null(left) else None
            elif n.type == "unary_expression" and n.child_by_field_name("operator").type == "!":
                name = bare(n.child_by_field_name("argument"), env)
            elif n.type in ("condition_clause", "conditional_expression"):
                name = bare(n.child_by_field_name("value") if n.type == "condition_clause"
                            else n.child_by_field_name("condition"), env)
            elif n.type == "call_expression" and depth < _NULL_HELPER_DEPTH:
                fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
                target = (helpers or {}).get(fn.text.decode().split("<")[0].split("::")[-1].strip()) \
                    if fn is not None else None
                if target is not None and target.type == "function_definition" and args is not None:
                    given = [a for a in args.named_children if a.type != "comment"]
                    bound = {h: k for h, a in zip(param_names(target), given) if h and (k := bare(a, env))}
                    inner = target.child_by_field_name("body")
                    if bound and inner is not None:
                        walk(inner, bound, depth + 1)
                continue
            else:
                continue
            if name is not None:
                out.add(name)
    walk(body, {p: p for p in pointers}, 0)
    return out


def shift_counts(kernel: Kernel, size_names: list[str]) -> list[str]:
    """The kernel's integer parameters it shifts by (`hidden_dim >> merge_count`) and uses for
    nothing else a size is used for: bit counts, which a size's values (128, 4096) would shift
    every bit out of."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    shifts: set[str] = set()
    for n in _walk(body):
        if n.type == "binary_expression" and n.child_by_field_name("operator").type in ("<<", ">>"):
            right = n.child_by_field_name("right")
            while right is not None and right.type == "parenthesized_expression" and right.named_child_count == 1:
                right = right.named_children[0]
            if right is not None and right.type == "identifier" and right.text.decode() in size_names:
                shifts.add(right.text.decode())
    return [n for n in size_names if n in shifts]


def _dead_spans(body: Node, known: dict[str, int], probed: set[str]) -> list[tuple[int, int]]:
    """(start, end) bytes of the branches `known` values rule out (`if (cu_seqlens != nullptr)` with
    the pointer passed null: its THD branch)."""
    from ..model import compiled_branches
    dead: list[tuple[int, int]] = []
    for n in _walk(body):
        cond = n.child_by_field_name("condition") if n.type == "if_statement" else None
        if cond is None or any(s <= n.start_byte < e for s, e in dead):
            continue
        taken = compiled_branches.truth_of(cond, known, probed)
        gone = n.child_by_field_name("alternative" if taken else "consequence") if taken is not None else None
        if gone is not None:
            dead.append((gone.start_byte, gone.end_byte))
    return dead


def _compared(n: Node) -> tuple[Node | None, str, str]:
    """(the comparison, its operator, the number on its other side) around the identifier `n`,
    the operator written as if `n` stood on the left (`1 < cp_size` is `cp_size > 1`)."""
    parent = n.parent
    while parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent
    op = parent.child_by_field_name("operator") if parent is not None and parent.type == "binary_expression" else None
    if op is None:
        return None, "", ""
    left, right = parent.child_by_field_name("left"), parent.child_by_field_name("right")
    other = right if left is not None and left.start_byte <= n.start_byte < left.end_byte else left
    if other is None or other.type != "number_literal" or (other is left and right is not None
                                                           and not right.start_byte <= n.start_byte < right.end_byte):
        return parent, op.type, ""
    flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<="}
    return parent, (flip.get(op.type, op.type) if other is left else op.type), other.text.decode().rstrip("uUlL")


def mode_params(kernel: Kernel, size_names: list[str],
                known: dict[str, int] | None = None) -> list[tuple[str, int, list[int]]]:
    """(name, value, the numbers it is compared with) for each integer parameter the kernel's body
    names only in `==`/`!=` comparisons with numbers (`if (int8_mode == 2)`): a mode, whose sizes'
    values would pick a path by accident; the value is the least non-negative number none of the
    comparisons names, so each of them takes its `else` (the plain path: FasterTransformer's int8_mode 0).
    A count the kernel tests against one, `if (cp_size > 1) { … }`, named otherwise only inside that
    branch, is a split that 1 turns off (TransformerEngine rope's context-parallel size: drawn as a
    size, 128, it sent every block through the branch, whose rows `cp_rank` offsets, and its
    `assert(cur_seqlens % 2 == 0)`): taken 1. Uses in branches `known` values rule out (a pointer
    passed null, `if (cu_seqlens != nullptr)`) do not count."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    dead = _dead_spans(body, known or {}, set(size_names)) if known else []
    tested: dict[str, set[int]] = {n: set() for n in size_names}
    split: dict[str, list[tuple[int, int]]] = {n: [] for n in size_names}   # `if (n > 1)` branches
    uses: dict[str, list[Node]] = {n: [] for n in size_names}
    for n in _walk(body):
        if n.type == "identifier" and n.text.decode() in tested and not any(s <= n.start_byte < e for s, e in dead):
            uses[n.text.decode()].append(n)
    plain: dict[str, list[Node]] = {n: [] for n in size_names}
    for name, found in uses.items():
        for n in found:
            cmp, op, literal = _compared(n)
            if op in ("==", "!=") and literal.isdigit():
                tested[name].add(int(literal))
            elif (op, literal) == (">", "1") and cmp is not None and cmp.parent is not None \
                    and cmp.parent.type == "condition_clause" and cmp.parent.parent is not None \
                    and cmp.parent.parent.type == "if_statement" \
                    and (then := cmp.parent.parent.child_by_field_name("consequence")) is not None:
                split[name].append((then.start_byte, then.end_byte))
            else:
                plain[name].append(n)
    out = []
    for name, values in tested.items():
        if split[name] and 1 not in values and all(any(s <= n.start_byte < e for s, e in split[name])
                                                   for n in plain[name]):
            out.append((name, 1, sorted(values | {1})))
        elif values and not plain[name]:
            out.append((name, next(v for v in range(len(values) + 1) if v not in values), sorted(values)))
    # a parameter the kernel reads only in branches those values turn off (`cp_rank` only inside
    # `if (cp_size > 1)`, cp_size taken 1; or only where a pointer passed null is tested): never read
    # under the draft, so no size — drawn as one (1 … 4096) it named a rank past the count the program has
    off = {**(known or {}), **{name: v for name, v, t in out if v in t}}
    gone = _dead_spans(body, off, set(size_names) - set(off)) if off else []
    for name in [n for n in size_names if n not in off and n not in {o[0] for o in out}]:
        named = [n for n in _walk(body) if n.type == "identifier" and n.text.decode() == name]
        if named and all(any(s <= n.start_byte < e for s, e in gone) for n in named):
            out.append((name, 0, []))
    return out


def mode_note(name: str, value: int, tested: list[int]) -> str:
    """What a draft says of a parameter `mode_params` gave a value."""
    if not tested:   # read only in branches the draft's values turn off
        return (f"`{name}` is read only in branches this draft's values turn off (a split count of 1, a "
                f"pointer passed null): took {value}, never read")
    if value in tested:   # a split count: its `> 1` branch off
        return f"`{name}` is a count the kernel tests `> 1` (a split that 1 turns off): took {value} — CHECK"
    return (f"`{name}` is a mode the kernel only compares with {', '.join(map(str, tested))}: took {value}, "
            f"the path none of those comparisons selects — CHECK the mode the program uses")


def written_as_constants(kernel: Kernel, name: str) -> bool:
    """A status output: every use of the pointer in the body stores a literal through it
    (FlashInfer sampling's `valid[bx] = true;` and `valid[bx] = false;`) — nothing it computes."""
    body = access.kernel_body(kernel)
    uses = [n for n in _walk(body) if n.type == "identifier" and n.text.decode() == name] if body is not None else []
    for u in uses:
        store = u.parent
        if store is None or store.type not in ("subscript_expression", "pointer_expression") or \
                store.child_by_field_name("argument") != u:
            return False
        assign = store.parent
        if assign is None or assign.type != "assignment_expression" or assign.child_by_field_name("left") != store \
                or assign.child_by_field_name("operator").type != "=":
            return False
        value = assign.child_by_field_name("right")
        while value is not None and value.type in ("parenthesized_expression", "unary_expression") \
                and value.named_child_count == 1:
            value = value.named_children[0]   # `(-1)`, `-1`
        if value is None or value.type not in ("true", "false", "number_literal"):
            return False
    return bool(uses)


def reduces(kernel: Kernel) -> bool:
    """The kernel combines values across threads (warp shuffles, cooperative-groups reductions,
    shared-memory partials, atomics): its rounding differs from a sequential version's."""
    body = access.kernel_body(kernel)
    calls = {n.child_by_field_name("function").text.decode().split("<")[0].split("::")[-1]
             for n in _walk(body) if n.type == "call_expression" and n.child_by_field_name("function") is not None} \
        if body is not None else set()
    return any(c.startswith(("__shfl", "atomicAdd", "warp_sum", "warp_reduce", "block_reduce", "block_sum"))
               or c in ("reduce", "__syncthreads") for c in calls)


def _version(name: str) -> tuple[str, int] | None:
    """'gelu_forward_kernel2' -> ('gelu_forward_kernel', 2)."""
    stem = name.rstrip("0123456789")
    return (stem, int(name[len(stem):])) if stem != name else None


def earlier_version(kernel: Kernel, model: SourceModel) -> str | None:
    """The closest lower-numbered version of this kernel in the file with the same parameters
    and template parameters (kernel-development files keep kernel1, kernel2, ... side by side);
    the reference is instantiated with this kernel's `instantiate`, so another template list
    (`reduce5<T, blockSize>` beside `reduce6<T, blockSize, nIsPow2>`) cannot be one."""
    mine = _version(kernel.name)
    if mine is None:
        return None
    def sig(k: Kernel) -> list[tuple[str, str]]:   # __restrict__ does not change the interface
        return [(p.name, " ".join(p.type.replace("__restrict__", " ").split())) for p in k.params]

    def kinds(k: Kernel) -> list[str]:   # `class T` and `typename U` are one kind; names and defaults aside
        out = []
        for t in k.template_params:
            words = t.split("=")[0].replace("...", " ... ").split()[:-1]
            out.append(" ".join("typename" if w == "class" else w for w in words))
        return out
    older = [(v[1], k.name) for k in model.kernels if k is not kernel and (v := _version(k.name)) is not None
             and v[0] == mine[0] and v[1] < mine[1] and sig(k) == sig(kernel) and kinds(k) == kinds(kernel)]
    return max(older)[1] if older else None


def called_template_params(kernel: Kernel) -> list[str]:
    """The kernel's template parameters its body calls as functions (`template <auto Fn>` … `Fn(p, i)`)."""
    names = set(kernel.template_param_names)
    body = access.kernel_body(kernel)
    out: list[str] = []
    for n in _walk(body) if body is not None and names else ():
        fn = n.child_by_field_name("function") if n.type == "call_expression" else None
        if fn is not None and fn.type == "identifier" and fn.text.decode() in names and fn.text.decode() not in out:
            out.append(fn.text.decode())
    return out


def bound_functions(kernel: Kernel, targs: dict[str, str], helpers: dict[str, Node]) -> dict[str, Node]:
    """Each template parameter the kernel calls as a function (`SrcOffsetFn(base, tbl, layer, ...)`,
    sgl-kernel transfer_kernel_impl) under the name of the device function `instantiate` binds it
    to (`get_global_offset_lf<const char>`), so the accesses follow the call into that function
    as into any helper: what the kernel reaches through its result is then measured."""
    out: dict[str, Node] = {}
    for name in called_template_params(kernel):
        bound = targs.get(name, "").strip().lstrip("&").strip()
        short = bound.split("<")[0].split("::")[-1].strip()
        for key, fn in helpers.items():   # the function and its overloads by their count of arguments
            if key == short or key.startswith(short + "#"):
                out[name + key[len(short):]] = fn
    return out


def launch_value(site, kernel: Kernel, name: str, constants: dict[str, str]) -> str | None:
    """A scalar argument the launch passes as a number or a constant (`RISKFREE` = 0.02)."""
    idx = next((i for i, p in enumerate(kernel.params) if p.name == name), None)
    if idx is None or idx >= len(site.args):
        return None
    text, seen = site.args[idx].strip(), 0
    while text in constants and seen < 8:
        text, seen = constants[text].strip(), seen + 1
    text = text.strip("()").rstrip("fF") if text.count("(") <= 1 else text
    if text in ("true", "false"):   # a flag the launch fixes: the spec's 1 or 0
        return repr(float(text == "true"))
    try:
        value = float(text)
    except ValueError:
        return None
    return repr(value) if value == value and abs(value) < 1e30 else None


def names_used(kernel: Kernel, items) -> set[str]:
    """The names the kernel uses, and those the device functions and classes it reaches use
    (`THREADS_X` in the helper the kernel calls, the view class's method)."""
    by_name: dict[str, list] = {}
    for it in items:
        if it.kind in ("device_function", "type"):
            for n in it.defines:
                by_name.setdefault(n, []).append(it)
    seen, todo = set(kernel.uses), list(kernel.uses)
    while todo:
        for it in by_name.pop(todo.pop(), []):
            new = set(it.uses) - seen
            seen |= new
            todo += new
    return seen


def integer_constants(constants: dict[str, str], used: set[str]) -> dict[str, int]:
    """The integer value of each constant the kernel's code names (macros through macros)."""
    out = {}
    for name in sorted(used):
        if name in constants:
            v = value_of(name, constants)
            if v is not None:
                out[name] = v
    return out


def cast_type(found: InferredShapes, name: str, shape: list[str] | None,
              scalar: Callable[[str], str | None]) -> dtypes.DType | None:
    """A `void*` buffer's element type, the widest scalar the kernel casts it to (a name of the
    instance's, `T` or `Ktraits::compute_t`, as `scalar` resolves it), or None where it is not one;
    `found` (roles' shapes) then holds its shape and vector width in those elements."""
    if name not in found.casts:
        return None
    found.casts[name] = {scalar(c) or c for c in found.casts[name]}
    typed = _cast_type(found.casts[name], shape)
    if typed is None:
        return None
    dt, found.shapes[name] = typed
    if name in found.vectors:   # its vector accesses in those elements too (one a time: none)
        found.vectors[name] //= dt.itemsize
        if found.vectors[name] <= 1:
            del found.vectors[name]
    return dt


def _cast_type(casts: set[str], shape: list[str] | None) -> tuple[dtypes.DType, list[str]] | None:
    """The widest scalar of `casts` and the buffer's shape in those elements (a row of `4 * dim`
    bytes is `dim` floats), or None."""
    types = [dt for c in casts if (dt := dtypes.BY_NAME.get(c)) is not None]
    if not types or not shape:
        return None
    widest = max(types, key=lambda t: t.itemsize)
    last = shape[-1].replace(" ", "")
    if widest.itemsize == 1:
        return widest, shape
    if last.startswith(f"{widest.itemsize}*"):
        return widest, shape[:-1] + [shape[-1].split("*", 1)[1].strip()]
    if last.isdigit() and int(last) % widest.itemsize == 0:   # a slot of 4 bytes an atomic updates: 1 float
        return widest, shape[:-1] + [str(int(last) // widest.itemsize)]
    return None



def measured(kernel: Kernel, elem_bytes: dict[str, int], int_params: set[str], shapes, scalar) -> tuple:
    """`shapes(elem_bytes, int_params)` (the draft's `infer_shapes`), measured again where a `void*`
    buffer (bytes) is cast by the kernel to one scalar type only, wider than a byte: `input_t *u =
    reinterpret_cast<input_t *>(params.u_ptr) + b * params.u_batch_stride` (mamba's selective
    scan). Its strides count those elements, so its shape is measured in them: in bytes a
    contiguous row stride would be taken `2 * seqlen` for a row of `seqlen`. `scalar`: the spelling
    dtypes knows of a type as the kernel names it (a template parameter's argument), or None.
    Returns the shapes and those buffers' types."""
    found: InferredShapes | None = shapes(elem_bytes, int_params)
    recast: dict[str, dtypes.DType] = {}
    for p in kernel.params:
        if found is None or not p.is_pointer or elem_bytes.get(p.name) != 1 \
                or p.base_type.replace("const", "").strip() != "void":
            continue
        casts = found.casts.get(p.name, set())
        types = {dt for c in casts if (dt := dtypes.BY_NAME.get(c) or dtypes.from_cpp(scalar(c) or "")) is not None}
        if len(types) == 1 and len(casts) == len({c for c in casts if c in dtypes.BY_NAME or scalar(c)}) \
                and (dt := next(iter(types))).itemsize > 1:   # every cast read, to one type
            recast[p.name] = dt
    if recast:   # a float buffer's loads are no indices
        found = shapes({**elem_bytes, **{p: dt.itemsize for p, dt in recast.items()}},
                       {p for p in int_params if p not in recast or not recast[p].is_float})
    return found, recast
