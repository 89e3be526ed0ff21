"""Where and how a kernel is launched: the launch site to read, its grid, block and shared memory
rewritten over the kernel's sizes (dim3 variables and the launcher's locals followed, macros and
constants by value, a block size the caller chooses taken as a default).

Long because the grid, block and shared memory, the branch conditions, the launcher's checks and
the relations between sizes are all read from one launch site and its launcher's locals
(`launch_of`), and the callers' values and contiguous strides read the same ones."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ..model import exprs, source
from ..model import dim3
from ..model import syntax
from ..model.source import ConfigVar, Kernel, LaunchSite, SourceModel
from ..model.syntax import walk as _walk
from tree_sitter import Node
from . import hostcalls
from .hostexprs import HostExprs, raises
from .program import Program, function_nodes, param_names
from .roles import is_stride
from .template_args import split


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


# ---- reading the launching function ---------------------------------------------------------

BLOCK_DEFAULT = 256
SHARED_PER_THREAD = 16      # dynamic shared memory the launch sets in a way not read: a 16-byte slot per thread
RUNTIME = "<runtime>"       # a host local set through its address by a call (a device query)
RUNTIME_DEFAULT = 4         # such a value in a grid: a grid-stride kernel covers its sizes with any grid
_BLOCK_WORDS = ("block", "thread", "tpb", "nthreads", "num_threads", "bs")
_DEVICE_QUERIES = ("Properties", "maxGridSize", "multiProcessorCount", "maxThreadsPerBlock", "sharedMemPerBlock",
                   "getDevice", "num_sms", "sm_count")
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


def _host_functions(model: SourceModel, function: str) -> list[Node]:
    """The definitions of the host function `function` (by its last name) in `model`, in order."""
    short = function.split("::")[-1]
    return [n for n in function_nodes(model.text) if (syntax.declarator_name(
        syntax.function_declarator(n.child_by_field_name("declarator")))[0] or "").split("::")[-1] == short]


def declared_names(model: SourceModel, function: str | None) -> set[str]:
    """Every name the host function declares (locals and parameters)."""
    if function is None:
        return set()
    fn = next(iter(_host_functions(model, function)), None)
    if fn is None:
        return set()
    out = {syntax.declarator_name(d)[0] for n in _walk(fn) if n.type == "declaration"
           for d in n.children_by_field_name("declarator")}
    return {n for n in out if n} - set(param_names(fn))


def constexpr_names(model: SourceModel, function: str | None) -> set[str]:
    """The locals the host function declares `constexpr`: compile-time choices (`constexpr int
    tile_size = 512`), never a size of the problem."""
    if function is None:
        return set()
    fn = next(iter(_host_functions(model, function)), None)
    if fn is None:
        return set()
    return {name for n in _walk(fn) if n.type == "declaration"
            and any(c.type == "type_qualifier" and c.text.decode() == "constexpr" for c in n.children)
            for d in n.children_by_field_name("declarator") if (name := syntax.declarator_name(d)[0])}


def _host_locals(model: SourceModel, site: LaunchSite, macros: dict[str, str] | None = None) -> dict[str, str]:
    local = host_locals(model, site.function, launch_byte(model, site), macros)
    # a guard fixes a name the caller chooses (`if (block_size == 16)`), not one the launcher
    # computes from the sizes (`if (unroll == 1)`, unroll = cdiv(width, step)): that one stays an
    # expression, and the guard a condition on the sizes (`branch_conditions`)
    # ... unless the spec cannot write what it is computed with (`log2_ceil(n)`, a helper of the
    # project): inside `case 12:` of `switch (log2_elements)` the launch sees 12, and the sizes that
    # reach that case are required (`helper_ranges`)
    computed = {k for k, v in local.items() if (e := source.parse_expression(v)) is not None
                and e.type != "number_literal" and HostExprs({}, macros or {}).spec(v, []) is not None}
    return {**local, **{k: v for k, v in _guards(model, site).items() if k not in computed}}


def _guards(model: SourceModel, site: LaunchSite) -> dict[str, str]:
    """Names an enclosing `if (block_size == 16)` fixes where the launch is written: inside that
    branch the launch is `k<16><<<..., dim3(block_size, block_size)>>>` with block_size 16."""
    tree = source.parser().parse(model.text.encode()).root_node
    node = tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    out: dict[str, str] = {}
    while node is not None:
        parent = node.parent
        if node.type == "case_statement" and parent is not None and parent.parent is not None \
                and parent.parent.type == "switch_statement":   # `case 12:` of `switch (log2_elements)`
            value, subject = node.child_by_field_name("value"), parent.parent.child_by_field_name("condition")
            while subject is not None and subject.type in ("condition_clause", "parenthesized_expression") \
                    and len(subject.named_children) == 1:
                subject = subject.named_children[0]
            if value is not None and value.type == "number_literal" and subject is not None \
                    and subject.type == "identifier":
                out.setdefault(subject.text.decode(), value.text.decode())
        if parent is not None and parent.type == "if_statement" and parent.child_by_field_name("consequence") == node:
            cond = parent.child_by_field_name("condition")
            while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") \
                    and len(cond.named_children) == 1:
                cond = cond.named_children[0]
            op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
            if op is not None and op.type == "==":
                a, b = cond.child_by_field_name("left"), cond.child_by_field_name("right")
                if b.type == "identifier" and a.type == "number_literal":
                    a, b = b, a
                if a.type == "identifier" and b.type == "number_literal":
                    out.setdefault(a.text.decode(), b.text.decode())
        node = parent
    return out


# Device properties every CUDA GPU since compute capability 3.0 reports alike: read as the number,
# not as a run-time value (apex launches one block per row up to `maxGridSize[1]` rows; taken as
# RUNTIME_DEFAULT, its bench launch had 4 blocks and every rewrite that raised them looked like a win).
_FIXED_LIMITS = {("maxGridSize", "0"): "2147483647", ("maxGridSize", "1"): "65535", ("maxGridSize", "2"): "65535",
                 ("maxThreadsPerBlock", None): "1024", ("warpSize", None): "32"}


def _device_limit(value) -> str | None:
    """The number a device property that is the same on every GPU stands for
    (`props->maxGridSize[1]` -> '65535'), else None."""
    index = None
    if value.type == "subscript_expression":
        idx = value.child_by_field_name("indices") or value.child_by_field_name("index")
        nums = [c for c in (idx.named_children if idx is not None else []) if c.type == "number_literal"]
        if idx is None or (idx.type != "number_literal" and len(nums) != 1):
            return None
        index = (idx if idx.type == "number_literal" else nums[0]).text.decode()
        value = value.child_by_field_name("argument")
    if value is None or value.type != "field_expression":
        return None
    field_name = value.child_by_field_name("field")
    return _FIXED_LIMITS.get((field_name.text.decode(), index)) if field_name is not None else None


def launch_byte(model: SourceModel, site: LaunchSite) -> int:
    """Where the launch starts in the model's text. A launch inside a macro's argument (a lambda
    in vLLM's `VLLM_DISPATCH_…(…, [&] { … align_kernel<<<…>>>(…); })`) has its line right and the
    bytes of the function around it: its line's first character then."""
    text, at, line = model.text, site.span.start_byte, site.span.start_line
    if text.count("\n", 0, at) == line:
        return at
    start = 0
    for _ in range(line):
        start = text.find("\n", start) + 1
        if start == 0:
            return at
    return start + len(text[start:].split("\n", 1)[0]) - len(text[start:].split("\n", 1)[0].lstrip())


def host_locals(model: SourceModel, function: str | None, at: int | None = None,
                macros: dict[str, str] | None = None) -> dict[str, str]:
    """Plain local variables of a host function with one initialised declaration and no
    later assignment (`const int grid_size = ceil_div(N, block_size);`): name -> initializer.
    With `at` (a launch's byte offset), the function that holds it, and each name as the launch
    sees it: the declaration C++ name lookup finds there (`int threads = 32;` of its own branch,
    where another branch declares its own), unless a change reaches the launch. `macros`: what
    decides the function's own `#if`s (a change under `#if BNB_HIP` with BNB_HIP 0 is none)."""
    if function is None:
        return {}
    whole = _function_locals(model, function, None, macros)
    # over what the whole function says, what the launch's own scope says (a launch site read
    # from a rewritten launcher, cudaLaunchKernelEx's, may fall outside it: then the whole's)
    return whole if at is None else {**whole, **_function_locals(model, function, at, macros)}


def _dead_branches(fn, macros: dict[str, str] | None) -> list[tuple[int, int]]:
    """Byte ranges of the function's `#if` branches its macros rule out (each name in the
    condition a known number; `defined(X)` decided only by a known X)."""
    out: list[tuple[int, int]] = []
    for n in _walk(fn) if macros else ():
        if n.type not in ("preproc_if", "preproc_elif"):
            continue
        cond = n.child_by_field_name("condition")
        text = cond.text.decode() if cond is not None else ""
        text = re.sub(r"\bdefined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m.group(1) in macros else "X_", text)
        names = set(re.findall(r"[A-Za-z_]\w*", text))
        if not names <= {k for k, v in macros.items() if re.fullmatch(r"-?\d+[uUlL]*", v.strip())}:
            continue
        try:
            taken = bool(exprs.evaluate(text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
                                        .replace(" not =", "!="),
                                        {k: int(macros[k].strip().rstrip("uUlL")) for k in names}))
        except (exprs.ExprError, ValueError):
            continue
        alt = n.child_by_field_name("alternative")
        body_end = alt.start_byte if alt is not None else n.end_byte
        if not taken:
            out.append((cond.end_byte, body_end))
        elif alt is not None:
            out.append((alt.start_byte, alt.end_byte))
    return out


def _function_locals(model: SourceModel, function: str, at: int | None,
                     macros: dict[str, str] | None = None) -> dict[str, str]:
    fns = _host_functions(model, function)
    fn = next((n for n in fns if at is not None and n.start_byte <= at < n.end_byte), fns[0] if fns else None)
    if fn is None:
        return {}
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    changed: set[str] = set()
    launch = fn.descendant_for_byte_range(at, at) if at is not None and fn.start_byte <= at < fn.end_byte else None
    seen: dict[str, object] = {}   # name -> the scope of the declaration the launch sees
    for n in _walk(fn):
        if n.type == "declaration":
            scope = n.parent
            visible = launch is not None and scope is not None and n.end_byte <= at <= scope.end_byte \
                and scope.start_byte <= at   # type: ignore[operator]
            for d in n.children_by_field_name("declarator"):
                name = syntax.declarator_name(d)[0]
                if name is None:
                    continue
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if launch is not None:
                    if not visible or (name in seen and seen[name].start_byte > scope.start_byte):  # type: ignore[attr-defined]
                        counts.setdefault(name, 0)
                        continue
                    seen[name] = scope
                    counts[name] = 1
                    out.pop(name, None)
                else:
                    counts[name] = counts.get(name, 0) + 1
                if value is not None and value.type not in ("initializer_list", "argument_list"):
                    out[name] = _device_limit(value) or value.text.decode()
    dead = _dead_branches(fn, macros)
    folded: set[str] = set()
    for n in _walk(fn):
        if n.type in ("assignment_expression", "update_expression") \
                and not any(a <= n.start_byte < b for a, b in dead):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is None or target.type != "identifier":
                continue
            name = target.text.decode()
            scope = seen.get(name)
            # `threads = ((threads + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;` once, in the scope that
            # declares it, over itself and the program's constants: its value from there on
            if (at is None or n.start_byte < at) and _self_update(n, name, out, folded):
                out[name] = _replace_word(n.child_by_field_name("right").text.decode(), name, f"({out[name]})")
                folded.add(name)
                continue
            if launch is None or scope is None:
                changed.add(name)
            elif scope.start_byte <= n.start_byte < scope.end_byte and dim3.reaches(n, launch, scope):
                changed.add(name)
    for k, v in list(out.items()):   # `props->multiProcessorCount`, `getCurrentDeviceProperties()->...`
        if any(w in v for w in _DEVICE_QUERIES):
            out[k] = RUNTIME
    for n in _walk(fn):   # `cudaDeviceGetAttribute(&sms, ...)`: a value the host reads at run time
        if n.type == "pointer_expression" and n.child_by_field_name("operator") is not None \
                and n.child_by_field_name("operator").type == "&":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and arg.text.decode() in out:
                out[arg.text.decode()] = RUNTIME
    return {k: v for k, v in out.items() if counts.get(k) == 1 and (k not in changed or v == RUNTIME)}


def _self_update(n, name: str, values: dict[str, str], folded: set[str]) -> bool:
    """Whether `n` is `name = expr` of its own value and upper-case constants (`WARP_SIZE`) only, a
    statement of the block that declares `name` (run whenever the declaration is), changing a
    value read from its declaration (not already changed once)."""
    right = n.child_by_field_name("right")
    op = n.child_by_field_name("operator")
    if n.type != "assignment_expression" or right is None or op is None or op.type != "=" or name not in values \
            or name in folded or n.parent is None or n.parent.type != "expression_statement":
        return False
    words = {w.text.decode() for w in _walk(right) if w.type == "identifier"}
    if name not in words or any(w != name and not w.isupper() for w in words):
        return False
    block = n.parent.parent
    return block is not None and any(c.type == "declaration" and any(
        syntax.declarator_name(d)[0] == name for d in c.children_by_field_name("declarator"))
        for c in block.named_children if c.start_byte < n.start_byte)


def _replace_word(text: str, word: str, by: str) -> str:
    return re.sub(rf"\b{re.escape(word)}\b", lambda _: by, text)


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


_CHECKS = ("assert", "TORCH_CHECK", "TORCH_INTERNAL_ASSERT")
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def launcher_checks(model: SourceModel, function: str | None, before: int,
                    raising: dict[str, int | None] | None = None) -> list[str]:
    """The conditions a launcher asserts before it launches (`assert(n % 4 == 0)`,
    `TORCH_CHECK(a >= 4 && a <= 1024, ...)`, a project check macro `raising` names), split at
    `&&`, and those an `if` that throws rules out (`if (head_dim < rotary_dim) { ...; throw ...; }`:
    `head_dim >= rotary_dim`, split at `||`): the sizes it accepts. Only checks on the launch's own
    path: written in a block that encloses it, not in another branch."""
    if function is None:
        return []
    fn = next(iter(_host_functions(model, function)), None)
    if fn is None:
        return []
    raising = raising or {}
    checks = {**{c: 0 for c in _CHECKS}, **{m: i for m, i in raising.items() if i is not None}}
    out: list[str] = []
    for n in _walk(fn):
        if n.start_byte >= before:
            continue
        held = None   # (the condition, whether the launcher needs it true)
        if n.type == "call_expression" and n.child_by_field_name("function").text.decode() in checks:
            args = n.child_by_field_name("arguments")
            given = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            i = checks[n.child_by_field_name("function").text.decode()]
            held = (given[i], True) if i < len(given) else None
        elif n.type == "if_statement" and n.child_by_field_name("alternative") is None and \
                raises(n.child_by_field_name("consequence"), raising):
            cond = n.child_by_field_name("condition")
            held = (cond.named_children[0], False) if cond is not None and cond.named_children else None
        if held is None:
            continue
        block = n.parent
        while block is not None and block.type != "compound_statement":
            block = block.parent
        if block is None or not block.start_byte <= before < block.end_byte:
            continue   # in a branch the launch is not in
        stack = [held]
        while stack:
            c, true = stack.pop()
            while c.type == "parenthesized_expression" and len(c.named_children) == 1:
                c = c.named_children[0]
            if c.type == "unary_expression" and c.child_by_field_name("operator").type == "!":
                stack.append((c.child_by_field_name("argument"), not true))
                continue
            op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
            if op is not None and op.type == ("&&" if true else "||"):
                stack += [(c.child_by_field_name("right"), true), (c.child_by_field_name("left"), true)]
            elif op is not None and op.type in _COMPARISONS:
                left, right = (c.child_by_field_name(f).text.decode() for f in ("left", "right"))
                out.append(c.text.decode() if true else f"{left} {_NEGATED[op.type]} {right}")
    return out


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _negated(cond: str) -> str | None:
    """`a % 8 != 0` for `a % 8 == 0`: a spec comparison with its operator reversed."""
    import ast
    try:
        tree = exprs.parse(cond).body
    except exprs.ExprError:
        return None
    if not isinstance(tree, ast.Compare) or len(tree.ops) != 1:
        return None
    op = next((o for o, cls in (("<", ast.Lt), ("<=", ast.LtE), (">", ast.Gt), (">=", ast.GtE), ("==", ast.Eq),
                                ("!=", ast.NotEq)) if isinstance(tree.ops[0], cls)), None)
    return f"{ast.unparse(tree.left)} {_NEGATED[op]} {ast.unparse(tree.comparators[0])}" if op else None


def branch_conditions(model: SourceModel, site: LaunchSite, local: dict[str, str]) -> list[tuple[str, bool]]:
    """(condition, taken) of each `if` the launch is written under: True in its `then` branch,
    False in its `else` — the sizes the launcher sends this launch (`if (width % 8 == 0) k8<<<..>>>
    else k<<<..>>>`: k sees only widths that are not multiples of 8). A `then` condition is split at
    `&&`; a local flag (`use_vec = (d % 4 == 0)`) read as its value."""
    tree = source.parser().parse(model.text.encode()).root_node
    node = tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    out: list[tuple[str, bool]] = [(c, True) for c in _case_conditions(tree, node, site)]
    while node is not None:
        parent = node.parent
        if parent is not None and parent.type in ("if_statement", "else_clause") and parent.type == "else_clause":
            node = parent   # `else { ... }`: the if_statement above decides
            continue
        if parent is not None and parent.type == "if_statement" and node in (
                parent.child_by_field_name("consequence"), parent.child_by_field_name("alternative")):
            taken = node == parent.child_by_field_name("consequence")
            cond = parent.child_by_field_name("condition")
            while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") \
                    and len(cond.named_children) == 1:
                cond = cond.named_children[0]
            if cond is not None and cond.type == "identifier" and cond.text.decode() in local:
                cond = _flag(source.parse_expression(local[cond.text.decode()]))
            stack = [cond] if cond is not None else []
            while stack:
                c = stack.pop()
                while c.type == "parenthesized_expression" and len(c.named_children) == 1:
                    c = c.named_children[0]
                op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
                if taken and op is not None and op.type == "&&":
                    stack += [c.child_by_field_name("right"), c.child_by_field_name("left")]
                elif op is not None and op.type in _COMPARISONS:
                    out.append((c.text.decode(), taken))
        node = parent
    return out


def _case_conditions(tree, node, site: LaunchSite) -> list[str]:
    """`k >= 1`, `k <= 16` where the launch stands under `case 1 ... 16:` (a GNU case range) or
    `k == 20` under `case 20:` of a `switch (k)` — written in place, or in the body of the launch
    macro the switch's body uses (FasterTransformer's `CASE_K(1, 16, ...)`: `case K_MIN ... K_MAX:`)."""
    label = None
    at = node
    while at is not None and at.type not in ("case_statement", "switch_statement", "function_definition"):
        at = at.parent
    if at is not None and at.type == "case_statement":
        text = at.text.decode()
        label = text[len("case"):text.index(":")] if text.startswith("case") and ":" in text else None
    elif site.via_macro:
        macro = next((n for n in syntax.walk(tree) if n.type == "preproc_function_def"
                      and n.child_by_field_name("name") is not None
                      and n.child_by_field_name("name").text.decode() == site.via_macro), None)
        call = node
        while call is not None and call.type != "call_expression":
            call = call.parent
        value = macro.child_by_field_name("value") if macro is not None else None
        body = value.text.decode().replace("\\\n", " ").strip() if value is not None else ""
        if call is not None and body.startswith("case") and ":" in body:
            params = [c.text.decode() for c in macro.child_by_field_name("parameters").named_children
                      if c.type == "identifier"]
            args = [a.text.decode() for a in call.child_by_field_name("arguments").named_children
                    if a.type != "comment"]
            words = dict(zip(params, args))
            label = " ".join(words.get(w, w) for w in body[len("case"):body.index(":")].split())
        at = call
    if label is None:
        return []
    while at is not None and at.type != "switch_statement":
        at = at.parent
    cond = at.child_by_field_name("condition") if at is not None else None
    if cond is None:
        return []
    subject = cond.text.decode().strip().strip("()").strip()
    lo, dots, hi = label.partition("...")
    return [f"{subject} >= {lo.strip()}", f"{subject} <= {hi.strip()}"] if dots else [f"{subject} == {label.strip()}"]


def helper_ranges(model: SourceModel, site: LaunchSite, program: Program,
                  mapping: dict[str, str]) -> list[tuple[str, int, int, str]]:
    """(size, lo, hi, the local) for each condition the launch is written under (`case 12:` of `switch
    (log2_elements)`, `if (log2_elements == 12)`) on a local the launcher computes with a helper of
    the project the spec cannot write (`log2_elements = log2_ceil(key_seq_len)`): the sizes that
    reach this launch, found by running the helper (`hostcalls`) — 2049 … 4096."""
    raw = host_locals(model, site.function, launch_byte(model, site))
    out: list[tuple[str, int, int, str]] = []
    for text, taken in branch_conditions(model, site, {}):
        node = source.parse_expression(text)
        if not taken or node is None or node.type != "binary_expression":
            continue
        left, right, op = (node.child_by_field_name(f) for f in ("left", "right", "operator"))
        if left.type != "identifier" or right.type != "number_literal" or left.text.decode() not in raw:
            continue
        call = source.parse_expression(raw[left.text.decode()])
        fn = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"] \
            if fn is not None else []
        found = program.function(fn.text.decode()) if fn is not None and fn.type == "identifier" else None
        size = HostExprs(mapping, {}).spec(args[0].text.decode()) if len(args) == 1 else None
        if found is None or size is None or not size.isidentifier():
            continue
        try:
            value = int(right.text.decode().rstrip("uUlL"), 0)
        except ValueError:
            continue
        rng = hostcalls.range_where(found[0], op.type, value)
        if rng is not None:
            out.append((size, *rng, left.text.decode()))
    return out


def _range_requires(ranges: list[tuple[str, int, int, str]]) -> list[str]:
    return [c for size, lo, hi, _ in ranges
            for c in ([f"{size} >= {lo}"] if lo > 1 else []) + ([f"{size} <= {hi}"] if hi < hostcalls.LIMIT else [])]


def _flag(cond):
    """A local flag's value as the comparison it holds: `(n <= 128)`, `(n <= 128) ? true : false`."""
    while cond is not None and cond.type == "parenthesized_expression" and len(cond.named_children) == 1:
        cond = cond.named_children[0]
    if cond is not None and cond.type == "conditional_expression" and \
            (cond.child_by_field_name("consequence").type, cond.child_by_field_name("alternative").type) == ("true", "false"):
        return _flag(cond.child_by_field_name("condition"))
    return cond


def _condition(text: str, hx: HostExprs) -> str | None:
    """A host comparison over the sizes as a spec condition, or None where a side is not a size."""
    node = source.parse_expression(text)
    op = node.child_by_field_name("operator") if node is not None and node.type == "binary_expression" else None
    if op is None or op.type not in _COMPARISONS:
        return None
    left, right = hx.spec(node.child_by_field_name("left").text.decode()), \
        hx.spec(node.child_by_field_name("right").text.decode())
    if left is None or right is None or not (exprs.names(left) or exprs.names(right)):
        return None
    return f"{left} {op.type} {right}"


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
    constants = {**(constants or {}), **model.constants}
    line = site.span.start_line + 1
    where = f"line {line}" + (f", through macro {site.via_macro}" if site.via_macro else "")
    mapping = _site_mapping(kernel, site, size_names)
    grid_parts = _config_parts("grid", site.grid, site.grid_var, line, notes)
    block_parts = _config_parts("block", site.block, site.block_var, line, notes)
    local = _host_locals(model, site, constants)
    raw = host_locals(model, site.function, launch_byte(model, site), constants)
    # a case's value stands for a helper's result only where the helper was read (its range required)
    ranged = {r[3] for r in helper_ranges(model, site, program, mapping)}
    local.update({k: raw[k] for k in _guards(model, site) if k in raw and raw[k] != local.get(k) and k not in ranged})
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
    literal -= {k for k in _guards(model, site) if k in raw and raw[k] != local.get(k)}
    for var in (site.grid_var, site.block_var):   # `threads.x` in the grid is the block's first dimension
        if var is not None and var.dims is not None:
            for axis, dim in zip("xyz", list(var.dims) + ["1", "1"]):
                local[f"{var.name}.{axis}"] = dim
    block_values = {**constants, **local}
    runtime = {k for k, v in local.items() if v == str(RUNTIME_DEFAULT) and k in literal}
    grid_values = {**constants, **{k: v for k, v in local.items()
                                   if k not in literal or k in runtime or any(w in k.lower() for w in _BLOCK_WORDS)}}
    free: list[str] = []
    for x in grid_parts:   # a grid's local the host computes unreadably (`x.numel() / d`) is a problem size
        HostExprs(mapping, grid_values, keep_locals=True).spec(x, free)
    for x in block_parts:
        HostExprs(mapping, block_values).spec(x, free)
    if site.shared_mem:
        HostExprs(mapping, block_values).spec(site.shared_mem, free)
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
    b = [HostExprs(mapping, block_values).spec(x) for x in block_parts]
    for _ in range(8):   # a chosen block size times a constant (`num_warps * 32`) stays within 1024 threads
        if not (chosen and b and all(b)) or _threads(b, size_names) <= 1024:
            break
        for f in chosen:
            if f in in_block:
                block_values[f] = grid_values[f] = str(max(1, int(block_values[f]) // 2))
        b = [HostExprs(mapping, block_values).spec(x) for x in block_parts]
    for f in chosen:
        notes.append(f"block size `{f}` is chosen by the caller ({where}): took {block_values[f]}" +
                     (", as the program passes it" if f in passed else ""))
    g = [HostExprs(mapping, grid_values, keep_locals=True).spec(x) for x in grid_parts]
    if grid_counts and b and all(b) and size_names and not any(set(_names(x)) - set(grid_counts) for x in grid_parts[:1]):
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
        shared = HostExprs(mapping, block_values).spec(site.shared_mem)
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
    # the launcher's asserts that read over the sizes (`batch * n % 1024 == 0`, `n <= 1024`)
    hx = HostExprs(mapping, grid_values)
    known = set(size_names) | set(new)
    require = [c for c in (_condition(x, hx) for x in launcher_checks(model, site.function, launch_byte(model, site), raising))
               if c is not None and set(exprs.names(c)) <= known]
    for c in require:
        notes.append(f"`{c}`: the launcher checks it before it launches ({where}): required")
    # a picker's `if` the instance launched is returned under (`blocks_per_warp == 1`), then the launch's own
    for text, taken in [(c, True) for c in site.conditions] + branch_conditions(model, site, local):
        c = _condition(text, hx)
        c = c if c is None or taken else _negated(c)
        if c is not None and set(exprs.names(c)) <= known and c not in require:
            require.append(c)
            notes.append(f"`{c}`: the launch is written where the launcher's `if` has it so ({where}): required")
    for c in _range_requires(helper_ranges(model, site, program, mapping)):
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
    for name in more:
        if name not in new:
            new.append(name)
            vals = [v for v, _ in caller_values(program, site.function, name, constants) if v > 0]
            if vals:
                program_sizes[name] = sorted(set(vals))[:4]
    return Launch(grid, block, shared, new, program_sizes, strides, relations, list(dict.fromkeys(require)))


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
        if not (alias or unit or schedule or rounded) and (not ops or not ops <= {ast.Add, ast.Sub, ast.Mult}
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


def same_at_callers(program: Program, function: str | None) -> dict[str, str]:
    """Parameter -> an earlier parameter of `function` that every call of it passes the same
    argument as (apex's `dispatch_…(dst, src, scale, seq_len, seq_len, attn_batches)`)."""
    found = program.function(function) if function is not None else None
    calls = program.calls_beside(function) if found is not None else []
    if found is None or not calls:
        return {}
    params = param_names(found[0])
    out: dict[str, str] = {}
    for j, b in enumerate(params):
        for i, a in enumerate(params[:j]):
            if a and b and a not in out and all(len(c.args) > j and " ".join(c.args[i].split()) == " ".join(
                    c.args[j].split()) for c in calls):
                out[b] = a
                break
    return out


def launcher_params(model: SourceModel, function: str | None) -> list[str]:
    """The parameter names of the host function `function` in `model` ([] when not found)."""
    if function is None:
        return []
    fn = next(iter(_host_functions(model, function)), None)
    return param_names(fn) if fn is not None else []


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


def pick_site(kernel: Kernel, program: Program) -> tuple[LaunchSite, SourceModel] | tuple[None, None]:
    """The launch to read: in the kernel's own file first, one outside `main` first (a launcher
    function says what the kernel expects; `main` often loops over block sizes)."""
    sites = program.launches(kernel.name)
    if not sites:
        return None, None
    # outside main first; among launches that differ in template arguments, the general one
    # (`<scalar_t, 1>` rather than the `<scalar_t, 8>` a launcher takes only for aligned widths;
    # `<scalar_t, false>` rather than the `use_vec = true` or `use_256b = true` it takes only for
    # aligned rows or a newer GPU: a switched-on feature counts one)
    trees: dict[int, object] = {}

    def rank(pair: tuple[LaunchSite, SourceModel]):
        s, m = pair
        args = [t.strip() for t in split(s.template_args or "<>")]
        numbers = [int(t) for t in args if t.isdigit()] + [1 for t in args if t == "true"]
        if id(m) not in trees:
            trees[id(m)] = source.parser().parse(m.text.encode("utf-8")).root_node
        case = _block_case(trees[id(m)], s)
        # of the cases a helper of the launcher's sizes picks (`switch (log2_ceil(n))`), the one the
        # most sizes reach (`case 0` takes n = 1 alone)
        mapping = {arg.strip(): p.name for p, arg in zip(kernel.params, s.args) if not p.is_pointer}
        reached = [max(0, min(hi, TESTED_SIZES) - lo + 1) for _, lo, hi, _ in helper_ranges(m, s, program, mapping)]
        # a launch under `switch (threads) case 256:` is the one for the block it takes by default
        return (program.original(m) is not program.model, s.function == "main", case is not None and case != BLOCK_DEFAULT,
                hostcalls.LIMIT - min(reached) if reached else 0, sum(numbers))
    return min(sites, key=rank)


def _identifiers(node) -> set[str]:
    return {n.text.decode() for n in _walk(node) if n.type == "identifier"} if node is not None else set()


def _block_case(root, site: LaunchSite) -> int | None:
    """V where the launch stands in `case V:` of a `switch` over a name its block is sized by
    (cuda-samples' `switch (threads) { case 512: reduce6<T, 512, false><<<grid, dimBlock>>>`)."""
    node = root.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    parts = [site.block, *(site.block_var.dims or ())] if site.block_var is not None else [site.block]
    block_names = {n for x in parts for n in _identifiers(source.parse_expression(x))}
    while node is not None:
        if node.type == "case_statement":
            value = node.child_by_field_name("value")
            switch = node.parent.parent if node.parent is not None else None
            cond = switch.child_by_field_name("condition") if switch is not None else None
            if value is None or switch is None or switch.type != "switch_statement" or cond is None:
                return None
            subject = _identifiers(cond)
            digits = value.text.decode().rstrip("uUlL")
            return int(digits) if digits.isdigit() and subject & block_names else None
        node = node.parent
    return None


MAX_CALLER_DEPTH = 3   # callers followed up from a launcher for the value of one of its parameters
TESTED_SIZES = 4096    # sizes up to this are what tests draw: a case reached only above it is barely testable


def value_of(expr: str, values: dict[str, str]) -> int | None:
    """A host expression's integer value over constants and locals (name -> expression), or None."""
    spec_expr = HostExprs({}, values).spec(expr)
    if spec_expr is None:
        return None
    try:
        return exprs.evaluate_int(spec_expr, {})
    except exprs.ExprError:
        return None


def caller_values(program: Program, function: str | None, expr: str, constants: dict[str, str],
                  depth: int = 0) -> list[tuple[int, str]]:
    """(value, where) for a host expression of `function` that its callers fix: a literal, a
    local of the function, or one of its parameters followed to the calls of the function
    (`runTest<float>(argc, argv, 32)`, `int block_size = 32; MatrixMultiply(..., block_size, ...)`)."""
    if function is None or depth > MAX_CALLER_DEPTH:
        return []
    found = program.function(function)
    if found is None:
        return []
    fn, model = found
    values = {**constants, **host_locals(model, function)}
    v = value_of(expr, values)
    if v is not None:
        return [(v, function)]
    params = param_names(fn)
    if expr.strip() not in params:
        return []
    idx = params.index(expr.strip())
    out: list[tuple[int, str]] = []
    for call in program.calls(function):
        if idx < len(call.args):
            out += caller_values(program, call.caller, call.args[idx], constants, depth + 1)
    return list(dict.fromkeys(out))


def zero_at_every_call(program: Program, function: str | None, expr: str, constants: dict[str, str],
                       depth: int = 0) -> bool:
    """Whether a host expression of `function` is 0 however the program reaches it: a literal or
    local 0, or a parameter every call of the function passes 0 for (sgl-kernel's
    `LAUNCH_SOFTMAX` hands its helper `0` as `start_expert` in every case of its switch)."""
    found = program.function(function) if function is not None and depth <= MAX_CALLER_DEPTH else None
    if found is None:
        return False
    fn, model = found
    v = value_of(expr, {**constants, **host_locals(model, function)})
    if v is not None:
        return v == 0
    params = param_names(fn)
    if expr.strip() not in params:
        return False
    idx = params.index(expr.strip())
    calls = program.calls(function)   # type: ignore[arg-type]
    return bool(calls) and all(idx < len(c.args) and zero_at_every_call(program, c.caller, c.args[idx], constants,
                                                                        depth + 1) for c in calls)


def program_inits(kernel: Kernel, model: SourceModel, site: LaunchSite) -> dict[str, tuple[str, str]]:
    """Parameter -> (low, high) where the program fills the host array it copies to the launch's
    argument with a random draw in a range (`h_S[i] = RandFloat(5.0f, 30.0f); cudaMemcpy(d_S, h_S, ..)`):
    the values the kernel expects (BlackScholes' prices and years are positive; a normal draw gives NaN)."""
    def bare(n):
        while n is not None and n.type in ("cast_expression", "parenthesized_expression", "pointer_expression"):
            n = n.child_by_field_name("value") or n.child_by_field_name("argument") or \
                (n.named_children[-1] if n.named_children else None)
        return n.text.decode() if n is not None and n.type == "identifier" else None
    root = source.parser().parse(model.text.encode()).root_node
    hosts: dict[str, str] = {}    # device array -> the host array copied into it
    ranges: dict[str, tuple[str, str]] = {}
    for n in _walk(root):
        if n.type == "call_expression":
            fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
            a = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if fn is not None and "Memcpy" in fn.text.decode() and len(a) >= 2 and bare(a[0]) and bare(a[1]):
                hosts[bare(a[0])] = bare(a[1])
        elif n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or right is None or left.type != "subscript_expression" or right.type != "call_expression":
                continue
            fn, args = right.child_by_field_name("function"), right.child_by_field_name("arguments")
            a = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            nums = [c.text.decode().rstrip("fF") for c in a if c.type == "number_literal"]
            name = bare(left.child_by_field_name("argument"))
            if name and fn is not None and "rand" in fn.text.decode().lower() and len(a) == 2 and len(nums) == 2:
                ranges.setdefault(name, (nums[0], nums[1]))
    out = {}
    for p, arg in zip(kernel.params, site.args):
        device = bare(source.parse_expression(arg.strip()))
        host = hosts.get(device or "")
        if p.is_pointer and host in ranges:
            out[p.name] = ranges[host]
    return out

