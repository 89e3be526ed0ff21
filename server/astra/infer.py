"""Propose a harness spec for a kernel that has none.

From the signature: const pointers are inputs, other pointers outputs, integer scalars are
sizes, float scalars get a value from their name. From a launch site in the same file: the
grid and block expressions, rewritten over the kernel's own parameter names. Sizes get
LLaMA-like values. Everything guessed is listed in `notes`, so the user knows what to check.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ast

from . import dtypes, exprs, source
from .project import ProjectContext
from .source import ConfigVar, Kernel, LaunchSite, SourceModel

# LLaMA-7B/13B/70B-like sizes: (test sizes, bench sizes) by what a size name suggests.
_SIZE_HINTS = [
    (("token", "batch", "row", "seq", "m", "rows", "num_tokens", "bs"), [1, 7, 333], [4096]),
    (("head_dim", "headdim", "hd"), [64, 128], [128]),
    (("head", "heads", "nh"), [1, 32], [32, 40, 64]),
    (("hidden", "d", "dim", "n", "cols", "size", "k", "len", "numel", "count"), [128, 1001, 4096],
     [4096, 11008]),
]


@dataclass
class Proposal:
    comment: str
    notes: list[str] = field(default_factory=list)


def _size_values(name: str) -> tuple[list[int], list[int]]:
    low = name.lower()
    for keys, test, bench in _SIZE_HINTS:
        if low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys):
            return test, bench
    return [1, 100, 4096], [4096]


def _strip_dim3(expr: str) -> list[str]:
    """'dim3(a, b)' -> ['a', 'b']; 'a' -> ['a']."""
    e = expr.strip()
    if e.startswith("dim3(") and e.endswith(")"):
        return exprs.split_top_level(e[5:-1])
    return [e]


_INT_WORDS = frozenset({"int", "unsigned", "signed", "long", "short", "const", "size_t", "ssize_t",
                        "int32_t", "int64_t", "uint32_t", "uint64_t", "std::size_t", "std::int64_t",
                        "std::int32_t", "std::uint32_t", "std::uint64_t"})
_MIN_MAX = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "::min": "min", "::max": "max",
            "cdiv": "cdiv", "ceil_div": "ceil_div"}
_ARITH = frozenset({"+", "-", "*", "/", "%", "<<", ">>"})
_MAX_CONSTANT_DEPTH = 8  # a macro defined through macros; a cycle stops here


def _tokens(node, skip: tuple[str, ...] = ("comment",)) -> tuple[str, ...]:
    """The leaf tokens of an expression: equal for equal expressions, whatever the spacing."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.type in skip:
            continue
        if n.child_count == 0:
            out.append(n.text.decode())
        stack.extend(reversed(n.children))
    return tuple(out)


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _unparen(node):
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _is_int_type(node) -> bool:
    return node is not None and bool(node.text.decode().split()) and set(node.text.decode().split()) <= _INT_WORDS


class _HostExprs:
    """Host C++ launch expressions -> spec expressions over the sizes, read by their tree-sitter
    structure: host names become sizes through `mapping` (host expression text -> size name),
    macro and const names their value; `std::min`, integer casts and `a < b ? a : b` become
    `min`, nothing and `min(a, b)`."""

    def __init__(self, mapping: dict[str, str], constants: dict[str, str]):
        self.mapping: dict[tuple[str, ...], str] = {}
        for host, size in mapping.items():
            node = source.parse_expression(host)
            if node is not None:
                self.mapping[_tokens(node)] = size
        self.constants = constants

    def spec(self, text: str, free: list[str] | None = None) -> str | None:
        """The spec expression for `text`, or None. With `free`, unknown plain names are kept
        as they are and listed there (they become sizes of their own)."""
        node = source.parse_expression(text)
        found: list[str] = []
        out = self._expr(node, found if free is not None else None, 0) if node is not None else None
        if out is None:
            return None
        try:
            out = ast.unparse(exprs.parse(out).body)
        except exprs.ExprError:
            return None
        if free is not None:
            free.extend(n for n in found if n not in free)
        return out

    def _expr(self, node, free: list[str] | None, depth: int) -> str | None:
        size = self.mapping.get(_tokens(node))
        if size is not None:
            return size
        t = node.type

        def ex(n):
            return self._expr(n, free, depth) if n is not None else None

        if t == "identifier":
            name = node.text.decode()
            value = self.constants.get(name)
            if value is not None and depth < _MAX_CONSTANT_DEPTH:
                inner = source.parse_expression(value)
                r = self._expr(inner, None, depth + 1) if inner is not None else None
                return f"({r})" if r is not None else None
            if free is not None and value is None:
                free.append(name)
                return name
            return None
        if t == "number_literal":
            digits = node.text.decode().replace("'", "").rstrip("uUlL")
            try:
                return str(int(digits, 0))
            except ValueError:
                return None  # a float or an octal literal: not a size
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            r = ex(inner[0]) if len(inner) == 1 else None
            return f"({r})" if r is not None else None
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            if op is None or op.type not in _ARITH:
                return None
            left, right = ex(node.child_by_field_name("left")), ex(node.child_by_field_name("right"))
            return f"{left} {op.type} {right}" if left is not None and right is not None else None
        if t == "unary_expression":
            op = node.child_by_field_name("operator")
            r = ex(node.child_by_field_name("argument"))
            return f"{op.type}{r}" if op is not None and op.type in ("-", "+") and r is not None else None
        if t == "cast_expression":
            return ex(node.child_by_field_name("value")) if _is_int_type(node.child_by_field_name("type")) else None
        if t == "call_expression":
            return self._call(node, ex)
        if t == "conditional_expression":
            return self._min_max(node, ex)
        return None

    def _call(self, node, ex) -> str | None:
        fn = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        if fn is None:
            return None
        # `static_cast<int>`, `std::max<int>`: the name without its template arguments, and those.
        name = "".join(_tokens(fn, skip=("comment", "template_argument_list")))
        targs = next((n for n in _walk(fn) if n.type == "template_argument_list"), None)
        if name == "static_cast" and targs is not None and len(args) == 1:
            types = [c for c in targs.named_children if c.type != "comment"]
            return ex(args[0]) if len(types) == 1 and _is_int_type(types[0]) else None
        if name in _MIN_MAX and len(args) == 2:
            a, b = ex(args[0]), ex(args[1])
            return f"{_MIN_MAX[name]}({a}, {b})" if a is not None and b is not None else None
        return None

    def _min_max(self, node, ex) -> str | None:
        """`a < b ? a : b` is min(a, b), `a > b ? a : b` max(a, b) (also with <=, >= and the
        branches swapped): exactly, since with a == b both branches agree. Other conditionals
        are not sizes we can write."""
        cond = _unparen(node.child_by_field_name("condition"))
        yes = _unparen(node.child_by_field_name("consequence"))
        no = _unparen(node.child_by_field_name("alternative"))
        if cond is None or yes is None or no is None or cond.type != "binary_expression":
            return None
        op = cond.child_by_field_name("operator")
        a, b = _unparen(cond.child_by_field_name("left")), _unparen(cond.child_by_field_name("right"))
        if op is None or op.type not in ("<", "<=", ">", ">=") or a is None or b is None:
            return None
        ta, tb, ty, tn = _tokens(a), _tokens(b), _tokens(yes), _tokens(no)
        less = op.type in ("<", "<=")
        if (ty, tn) == (ta, tb):
            fn = "min" if less else "max"
        elif (ty, tn) == (tb, ta):
            fn = "max" if less else "min"
        else:
            return None
        ra, rb = ex(a), ex(b)
        return f"{fn}({ra}, {rb})" if ra is not None and rb is not None else None


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
        if p.name in size_names:
            mapping[arg.strip()] = p.name
    # Host variables named like a size are taken as that size.
    return mapping


def infer(kernel: Kernel, model: SourceModel, *, path: str | None = None,
          context: ProjectContext | None = None) -> Proposal:
    notes: list[str] = []
    size_names = [p.name for p in kernel.params if not p.is_pointer and (
        (dtypes.from_cpp(p.base_type) or dtypes.BY_NAME["float"]).name.startswith(("int", "uint")))]
    if not size_names:
        size_names = ["n"]
        notes.append("no integer parameter to take sizes from: invented a size `n`; adjust shapes")
    grid, block = None, None
    sites = model.launches_of(kernel.name)
    if sites:
        site = sites[0]
        line = site.span.start_line + 1
        mapping = _site_mapping(kernel, site, size_names)
        grid_parts = _config_parts("grid", site.grid, site.grid_var, line, notes)
        block_parts = _config_parts("block", site.block, site.block_var, line, notes)
        # Plain host variables in the grid (e.g. `num_tokens`) become sizes of their own.
        free: list[str] = []
        reader = _HostExprs(mapping, model.constants)
        for x in grid_parts:
            reader.spec(x, free)
        for name in reversed(free):
            mapping[name] = name
            size_names.insert(0, name)
        host = _HostExprs(mapping, model.constants)
        g = [host.spec(x) for x in grid_parts]
        b = [host.spec(x) for x in block_parts]
        if all(g) and g:
            grid = g
        else:
            notes.append(f"grid `{site.grid}` (line {line}) uses host values that are not "
                         f"kernel parameters: guessed a grid")
        if all(b) and b:
            block = b
        else:
            notes.append(f"block `{site.block}` (line {line}) could not be rewritten over the "
                         f"sizes: guessed a block")
    else:
        notes.append("no launch site of this kernel in the file: grid and block are guesses")
    first = size_names[0]
    if grid is None:
        grid = [f"cdiv({first}, 256)"] if len(size_names) == 1 else [size_names[0]]
    if block is None:
        block = ["256"] if len(size_names) == 1 else [f"min({size_names[-1]}, 1024)"]

    lines = ["/* @astra", f"grid = {_toml_list(grid)}", f"block = {_toml_list(block)}"]
    if kernel.is_template:
        lines.append('instantiate = "<float>"  # CHECK: template arguments to test')
        notes.append("the kernel is a template: instantiate is a guess")
    lines += ["", "[sizes]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[0]}")
    lines += ["", "[bench]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[1]}")
    lines += ["", "[args]"]
    pointer_shape = _toml_list(size_names if len(size_names) <= 2 else size_names[:2])
    width = max(len(p.name) for p in kernel.params) if kernel.params else 0
    for p in kernel.params:
        dt = dtypes.from_cpp(p.base_type)
        if p.is_pointer:
            tname = dt.name if dt else "float"
            if dt is None:
                notes.append(f"`{p.name}`: element type {p.base_type!r} unknown, assumed float")
            role = "" if p.is_const else ", output = true"
            if not p.is_const:
                notes.append(f"`{p.name}` is a non-const pointer: assumed an output (use inout = true if the "
                             f"kernel also reads it)")
            lines.append(f'{p.name:<{width}} = {{ type = "{tname}", shape = {pointer_shape}{role} }}')
        elif p.name in size_names:
            lines.append(f'{p.name:<{width}} = "{p.name}"')
        else:
            low = p.name.lower()
            value = "1e-6" if "eps" in low else "1.0"
            if dt is None:
                lines.append(f'{p.name:<{width}} = {{ value = {value}, type = "float" }}')
                notes.append(f"`{p.name}`: type {p.type!r} unknown, assumed float")
            else:
                lines.append(f"{p.name:<{width}} = {value}")
                notes.append(f"`{p.name}` = {value} is a guess")
    for n in size_names:
        if kernel.param(n) is None:
            notes.append(f"size `{n}` comes from the launch site's grid; it is not a kernel parameter")
    if any(p.is_pointer for p in kernel.params):
        notes.append(f"array shapes are guesses ({pointer_shape}): set each to the real extent")
    lines.append("*/")
    return Proposal("\n".join(lines) + "\n", notes)


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"
