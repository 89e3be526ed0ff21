"""Sizes a kernel masks with (`i & (n - 1)`, the modulo by a power of two) or divides by with a
shift (`i >> (31 - __clz(n))`, bitsandbytes' blocks): `n` must be a power of two, or the lanes the
mask groups overlap (cuda-samples scan: `threadIdx.x & (size / 4 - 1)` two helpers deep, and its
launcher's power-of-two check is a call no spec expression reads), and sizes used only as a factor of
an offset (`factors_only`: strides by their use). Followed through the device
helpers the kernel calls, their parameters bound to the caller's arguments."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access, exprs, source
from .program import param_names

MAX_DEPTH = 6   # helper calls followed from the kernel's body


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _spelled(n: Node, env: dict[str, str]) -> str | None:
    """`n` in the kernel's terms: every identifier one of `env` (a helper's parameter bound to its
    argument), numbers and arithmetic only; None for anything else (a local, a call, a member)."""
    n = _bare(n)
    if n is None:
        return None
    if n.type == "number_literal":
        text = n.text.decode().rstrip("uUlL")
        return text if text.isdigit() else None
    if n.type == "identifier":
        return env.get(n.text.decode())
    if n.type == "binary_expression":
        op = n.child_by_field_name("operator").type
        if op not in ("+", "-", "*", "/", "<<", ">>"):
            return None
        left, right = _spelled(n.child_by_field_name("left"), env), _spelled(n.child_by_field_name("right"), env)
        return None if left is None or right is None else f"({left} {op} {right})"
    return None


def _masked(n: Node, env: dict[str, str]) -> str | None:
    """The size `x` of a mask `… & (x - 1)` (either operand), in the kernel's terms."""
    for side in ("left", "right"):
        m = _bare(n.child_by_field_name(side))
        if m is None or m.type != "binary_expression" or m.child_by_field_name("operator").type != "-":
            continue
        one = _bare(m.child_by_field_name("right"))
        if one is None or one.type != "number_literal" or one.text.decode().rstrip("uUlL") != "1":
            continue
        x = _spelled(m.child_by_field_name("left"), env)
        if x is not None and exprs.names(x):   # a constant mask (`i & (32 - 1)`) says nothing of a size
            return x
    return None


def log2_of(n: Node | None, env: dict[str, str]) -> str | None:
    """The size `b` of a shift count `31 - __clz(b)` (`63 - __clzll(b)`), in the kernel's terms."""
    n = _bare(n)
    if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type != "-":
        return None
    width, call = _bare(n.child_by_field_name("left")), _bare(n.child_by_field_name("right"))
    if width is None or call is None or call.type != "call_expression" or width.type != "number_literal":
        return None
    fn, args = call.child_by_field_name("function"), call.child_by_field_name("arguments")
    name = fn.text.decode() if fn is not None else ""
    if (name, width.text.decode()) not in (("__clz", "31"), ("__clzll", "63")) or args is None \
            or len(args.named_children) != 1:
        return None
    x = _spelled(args.named_children[0], env)
    return x if x is not None and exprs.names(x) else None


def _strip(x: str) -> str:
    return x[1:-1] if x.startswith("(") and x.endswith(")") else x


def power_of_two(kernel: source.Kernel, helpers: dict[str, Node], size_names: list[str],
                 shifts_only: bool = False) -> list[tuple[str, int]]:
    """(`require` condition, line in the kernel's file) for each size expression the kernel, or a
    helper it calls, masks with minus one or shifts by the log2 of: `((size / 4) & (size / 4 - 1)) == 0`
    (`shifts_only`: the shifts alone, the sizes the kernel divides by)."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    out: dict[str, int] = {}

    def walk(node: Node, env: dict[str, str], depth: int, line: int | None) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            here = line if line is not None else kernel.span.start_line + n.start_point[0] + 1
            op = n.child_by_field_name("operator").type if n.type == "binary_expression" else ""
            if op in (">>", "<<"):   # a shift by `31 - __clz(b)`, log2 of b: a division by b, a power of two
                x = log2_of(n.child_by_field_name("right"), env)
                if x is not None and exprs.names(x) <= set(size_names):
                    x = _strip(x)
                    x = x if x.isidentifier() else f"({x})"
                    out.setdefault(f"({x} & ({_strip(x)} - 1)) == 0", here)
            if op == "&" and not shifts_only:
                x = _masked(n, env)
                if x is not None and exprs.names(x) <= set(size_names):
                    x = _strip(x)
                    x = x if x.isidentifier() else f"({x})"   # read alike in C and in the spec's syntax
                    out.setdefault(f"({x} & ({_strip(x)} - 1)) == 0", here)
            elif n.type == "call_expression" and depth < MAX_DEPTH:
                fn = n.child_by_field_name("function")
                name = fn.text.decode().split("<")[0].split("::")[-1].strip() if fn is not None else ""
                target = helpers.get(name)
                args = n.child_by_field_name("arguments")
                if target is not None and target.type == "function_definition" and args is not None:
                    given = [a for a in args.named_children if a.type != "comment"]
                    bound = {p: s for p, a in zip(param_names(target), given) if p and (s := _spelled(a, env))}
                    inner = target.child_by_field_name("body")
                    if bound and inner is not None:
                        walk(inner, bound, depth + 1, here)
            stack.extend(reversed(n.named_children))

    walk(body, {n: n for n in size_names}, 0, None)
    valid = []
    for cond, line in out.items():
        try:
            exprs.parse(cond)
        except exprs.ExprError:
            continue
        valid.append((cond, line))
    return valid


def shifted_by(kernel: source.Kernel, helpers: dict[str, Node], size_names: list[str]) -> list[str]:
    """The sizes the kernel (or a helper) shifts an index by the log2 of (`i >> (31 - __clz(n))`):
    a division by them, where they are powers of two."""
    out = []
    for cond, _ in power_of_two(kernel, helpers, size_names, shifts_only=True):
        name = cond[1:cond.index(" ")]   # `(n & (n - 1)) == 0`: a bare size, not an expression of several
        if name in size_names and name not in out:
            out.append(name)
    return out


_CHAIN = ("+", "-", "*")


def factors_only(kernel: source.Kernel, helpers: dict[str, Node], size_names: list[str]) -> list[str]:
    """The sizes the kernel (or a helper it hands them to, its parameter bound) uses only as a
    factor of an offset — `layer * layer_dim` added to a pointer, never a bound, a divisor or a
    comparison's side: a stride by its use whatever its name (sgl-kernel transfer_kernel_impl's
    `src_layout_dim`, a layer's bytes in a layer-first cache, read two calls deep). A size handed
    to a function not read counts as used otherwise."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    factor: set[str] = set()
    other: set[str] = set()
    partners: dict[str, set[str]] = {}   # size -> the sizes it is multiplied by
    env_now: list[dict[str, str]] = [{}]

    def use(n: Node, size: str) -> None:
        up = n.parent
        while up is not None and up.type == "parenthesized_expression":
            n, up = up, up.parent
        if up is not None and up.type == "binary_expression" and up.child_by_field_name("operator").type == "*":
            top = up   # the arithmetic the product sits in: an offset, not a bound or a divisor
            while top.parent is not None and (top.parent.type == "parenthesized_expression" or
                                              top.parent.type == "binary_expression" and
                                              top.parent.child_by_field_name("operator").type in _CHAIN):
                top = top.parent
            if top.parent is None or top.parent.type in ("binary_expression", "condition_clause", "for_statement",
                                                         "conditional_expression"):
                other.add(size)   # compared, divided, a loop's bound
            else:
                factor.add(size)
                left, right = up.child_by_field_name("left"), up.child_by_field_name("right")
                co = _bare(right if left is not None and n.start_byte == left.start_byte else left)
                if co is not None and co.type == "identifier" and co.text.decode() in env_now[0]:
                    partners.setdefault(size, set()).add(env_now[0][co.text.decode()])
        elif up is None or up.type != "argument_list":
            other.add(size)

    def walk(node: Node, env: dict[str, str], depth: int) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            if n.type == "identifier" and n.text.decode() in env:
                env_now[0] = env
                use(n, env[n.text.decode()])
            elif n.type == "call_expression":
                fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
                name = fn.text.decode().split("<")[0].split("::")[-1].strip() if fn is not None else ""
                given = [a for a in args.named_children if a.type != "comment"] if args is not None else []
                target = helpers.get(f"{name}#{len(given)}") or helpers.get(name)
                passed = {i: env[_bare(a).text.decode()] for i, a in enumerate(given)
                          if _bare(a) is not None and _bare(a).type == "identifier" and _bare(a).text.decode() in env}
                if passed and (target is None or target.type != "function_definition" or depth >= MAX_DEPTH):
                    other.update(passed.values())   # handed to a function not read: used otherwise
                elif passed:
                    names = param_names(target)
                    inner = target.child_by_field_name("body")
                    bound = {names[i]: s for i, s in passed.items() if i < len(names) and names[i]}
                    if inner is not None:
                        walk(inner, bound, depth + 1)
                    other.update(s for i, s in passed.items() if i >= len(names) or not names[i])
            stack.extend(reversed(n.named_children))

    walk(body, {n: n for n in size_names}, 0)
    # multiplied by a size that bounds something (an extent: `ite * local_token_num`, FasterTransformer's
    # embeddingLookupPosEncoding), it is the index of a slice, not a stride
    return [n for n in size_names if n in factor and n not in other and not (partners.get(n, set()) & other)]
