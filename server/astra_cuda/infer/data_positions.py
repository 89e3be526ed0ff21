"""Outputs the kernel stores to at positions it computed from its own results: an index (or the
bound of the loop that makes it) read back from memory the kernel itself wrote — its shared
memory, or a parameter it stored to earlier (`cumsum[e]` after `cumsum[e] = scan`). vLLM's and
sgl-kernel's moe_align_block_size write `expert_ids[i / block_size]` for `i` up to a prefix sum of
the block-rounded counts of their input's values: how far that reaches depends on the data, and
how long the caller makes the output (a padding rule of its Python wrapper) is stated by no C++.
A draft that sized such an output from the stores that could be bounded, or from names, was
wrong (the stores ran past it into the next buffer): `draft` refuses it with this evidence.
Separate because it is a reading of the tree (the kernel's body and the device helpers it hands
its pointers to), none of the draft's state."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access
from ..model.source import Kernel
from ..model.syntax import walk
from .program import param_names
from .template_args import CANNOT

_HELPER_DEPTH = 3   # device helpers followed, nested


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type in ("parenthesized_expression", "condition_clause") and n.named_child_count == 1:
        n = n.named_children[0]
    return n


def _stored(n: Node) -> Node | None:
    """The subscript an assignment or update stores to (`p[i] = x`, `p[i] += x`, `++p[i]`)."""
    if n.type == "assignment_expression":
        left = _bare(n.child_by_field_name("left"))
    elif n.type == "update_expression":
        left = _bare(n.child_by_field_name("argument"))
    else:
        return None
    return left if left is not None and left.type == "subscript_expression" else None


def _base(sub: Node) -> str:
    arg = _bare(sub.child_by_field_name("argument"))
    return arg.text.decode() if arg is not None and arg.type == "identifier" else ""


def _index(sub: Node) -> Node | None:
    idx = sub.child_by_field_name("indices") or sub.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = next((c for c in idx.named_children if c.type != "comment"), None)
    return idx


def _declared(d: Node) -> tuple[str, bool]:
    """A declarator's name and whether it declares a pointer or an array."""
    table = False
    while d is not None and d.type not in ("identifier", "field_identifier"):
        table = table or d.type in ("pointer_declarator", "array_declarator")
        d = d.child_by_field_name("declarator")
    return (d.text.decode() if d is not None else ""), table


class _Function:
    """One function's body read for stores at self-made positions; `env`: its names of the
    kernel's pointers (a helper's parameters bound to the arguments it is handed)."""

    def __init__(self, body: Node, env: dict[str, str]):
        self.body, self.env = body, env
        self.tables: set[str] = set()     # shared arrays and local pointers into them
        self.scalars: set[str] = set()    # shared scalars (`__shared__ int total;`)
        self.first_write: dict[str, int] = {}   # a pointer parameter -> where the function first stores to it
        self.made: dict[str, set[str]] = {}     # a local -> the own buffers its value was read from
        for n in walk(body):
            sub = _stored(n)
            if sub is not None and _base(sub) in env:
                self.first_write.setdefault(_base(sub), n.start_byte)
            if n.type == "declaration" and any(c.type == "type_qualifier" and c.text == b"__shared__"
                                               for c in n.children):
                for d in n.children_by_field_name("declarator"):
                    name, table = _declared(d.child_by_field_name("declarator") if d.type == "init_declarator" else d)
                    (self.tables if table else self.scalars).add(name)
        for n in walk(body):   # locals in order: a pointer into a shared array is one; a value read from one is made
            if n.type == "declaration" and (n.parent is None or n.parent.type != "for_statement"):
                for d in n.children_by_field_name("declarator"):
                    if d.type == "init_declarator":
                        name, table = _declared(d.child_by_field_name("declarator"))
                        self._assign(name, table, d.child_by_field_name("value"))
            elif n.type == "assignment_expression":
                left = _bare(n.child_by_field_name("left"))
                if left is not None and left.type == "identifier":
                    self._assign(left.text.decode(), left.text.decode() in self.tables, n.child_by_field_name("right"))

    def _assign(self, name: str, table: bool, value: Node | None) -> None:
        if value is None or not name:
            return
        if table and any(i.type == "identifier" and i.text.decode() in self.tables for i in walk(value)):
            self.tables.add(name)   # `int* prefix = shared_counts + num_experts`
            return
        origins = self.origins(value)
        if origins:
            self.made[name] = self.made.get(name, set()) | origins

    def origins(self, e: Node | None) -> set[str]:
        """The own buffers `e`'s value was read from (none: it is not the kernel's own result)."""
        out: set[str] = set()
        for n in walk(e) if e is not None else ():
            if n.type == "subscript_expression":
                b = _base(n)
                if b in self.tables or b in self.env and self.first_write.get(b, n.start_byte) < n.start_byte:
                    out.add(self.env.get(b, b))
            elif n.type == "identifier" and (n.parent is None or n.parent.type != "argument_list"):
                name = n.text.decode()
                if name in self.scalars:
                    out.add(name)
                loop = self._loop_of(n, name)
                if loop is not None:
                    out |= self.origins(loop.child_by_field_name("condition"))
                elif name in self.made:
                    out |= self.made[name]
        return out

    @staticmethod
    def _loop_of(n: Node, name: str) -> Node | None:
        """The nearest `for` around `n` that declares `name` (its value is bounded by that loop's condition)."""
        p = n.parent
        while p is not None:
            init = p.child_by_field_name("initializer") if p.type == "for_statement" else None
            if init is not None and init.type == "declaration" and any(
                    _declared(d.child_by_field_name("declarator") if d.type == "init_declarator" else d)[0] == name
                    for d in init.children_by_field_name("declarator")):
                cond = p.child_by_field_name("condition")
                return None if cond is not None and n.start_byte >= cond.start_byte and \
                    n.end_byte <= cond.end_byte else p   # (the condition itself names it: no recursion)
            p = p.parent
        return None


def data_placed(kernel: Kernel, helpers: dict[str, Node], pointers: set[str]) -> dict[str, str]:
    """Of `pointers` (the kernel's parameter names), those it stores to at positions computed from
    its own results, with the evidence: the store and the buffers its position was read from."""
    body = access.kernel_body(kernel)
    out: dict[str, str] = {}

    def visit(body: Node, env: dict[str, str], depth: int) -> None:
        f = _Function(body, env)
        for n in walk(body):
            sub = _stored(n)
            if sub is not None and env.get(_base(sub)) in pointers and env[_base(sub)] not in out:
                origins = f.origins(_index(sub))
                if origins:
                    out[env[_base(sub)]] = f"`{sub.text.decode()}` at a position read from " + \
                        ", ".join(f"`{o}`" for o in sorted(origins))
            if n.type == "call_expression" and depth < _HELPER_DEPTH:
                fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
                while fn is not None and fn.type in ("qualified_identifier", "template_function"):   # `ns::f<T>`: f
                    fn = fn.child_by_field_name("name")
                helper = helpers.get(fn.text.decode()) if fn is not None else None
                inner = helper.child_by_field_name("body") if helper is not None and \
                    helper.type == "function_definition" else None
                if inner is None or args is None:
                    continue
                given = [_bare(a) for a in args.named_children if a.type != "comment"]
                bound = {h: env[a.text.decode()] for h, a in zip(param_names(helper), given)
                         if h and a is not None and a.type == "identifier" and a.text.decode() in env}
                if bound:
                    visit(inner, bound, depth + 1)
    if body is not None and pointers:
        visit(body, {p.name: p.name for p in kernel.params if p.is_pointer}, 0)
    return out


def refusals(kernel: Kernel, helpers: dict[str, Node], unbounded: set[str]) -> list[str]:
    """`CANNOT` notes for the outputs among `unbounded` (pointers whose shape no bound on their
    accesses gave: measured by the others, or guessed from names) that the kernel stores to at
    positions it computed from its own results."""
    unbounded = {p.name for p in kernel.params if p.is_pointer and not p.is_const and p.name in unbounded}
    return [f"{CANNOT}`{p}` is written at positions the kernel computes from its own results ({why}): how "
            f"far they reach depends on the data (a total the kernel sums itself), and no C++ of the program "
            f"relates `{p}`'s length to the sizes — its caller allocates it (a padding rule outside the C++, "
            f"such as a Python wrapper's); write its shape, and the `require` that keeps those stores inside "
            f"it, by hand" for p, why in sorted(data_placed(kernel, helpers, unbounded).items())]
