"""The numbers a class template's instance holds, for a kernel whose template parameter is bound
to one (issue 25): flash-attention's layer norm `ln_fwd_kernel<Ktraits, …>` with Ktraits the
project's `Kernel_traits<float, …, 1024, 1, 4, 1, 16, Kernel_traits_base<…>>` reads
`Ktraits::THREADS_PER_CTA` (its `__launch_bounds__`, the block), `Ktraits::ELTS_PER_LDG` (its
indices), and names them again in enums of its own body (`enum { LDGS = Ktraits::LDGS };`).

`instance_numbers` gives `P::NAME` for each such name the kernel reads, and each enumerator of
the kernel's body, where the class's enumerator or `static constexpr` integer evaluates with the
class's template parameters bound to the instance's arguments — a number, or a type whose
`sizeof` is known — through its other members and its base classes (a base named by a bound
parameter: `typename Base = Kernel_traits_base<…>`). A member of an explicit or partial
specialization, or an expression of anything else, is no number: never guessed."""
from __future__ import annotations

from typing import Callable

from tree_sitter import Node

from ..model import dtypes, source, syntax
from ..model.syntax import walk
from ..model.source import LaunchSite, SourceModel
from ..model.template_list import split_template_args
from .launch_locals import host_functions
from .program import function_nodes
from .types import Types, member_alias, owner_bound, class_templates

MAX_DEPTH = 16
_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "/": lambda a, b: int(a / b) if b else None, "%": lambda a, b: a - b * int(a / b) if b else None,
           "<<": lambda a, b: a << b if 0 <= b < 63 else None, ">>": lambda a, b: a >> b if 0 <= b < 63 else None,
           "<": lambda a, b: int(a < b), ">": lambda a, b: int(a > b), "<=": lambda a, b: int(a <= b),
           ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
           "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b)),
           "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b}


def instance_numbers(kernel: source.Kernel, targs: dict[str, str], types: Types) -> dict[str, int]:
    """`P::NAME` -> its value for each class-bound template parameter P the kernel reads a number
    of, and `NAME` -> its value for each enumerator of the kernel's own body that evaluates."""
    classes = {p: v.strip() for p, v in targs.items() if v.strip().endswith(">")}
    if not classes:
        return {}
    numbers = _Numbers(types)
    root = source.parser().parse(((kernel.launch_bounds or "") + "\n" + kernel.text).encode()).root_node
    out: dict[str, int] = _qualified(root, classes, numbers)
    for name, value in _body_constants(root):
        # the body's own `enum { ROWS_PER_CTA = Ktraits::ROWS_PER_CTA };`, and mamba's selective scan's
        # `constexpr int kNRows = Ktraits::kNRows;` then `constexpr int kChunkSize = kNThreads * kNItems;`
        # (read in order: each may name the ones before it)
        v = numbers.value(value, "", {**classes, **{k: str(x) for k, x in out.items() if "::" not in k}}, 0)
        if v is not None:
            out[name] = v
    return out


def launcher_numbers(model: SourceModel | None, site: LaunchSite | None, written: list[str], instance: list[str],
                     types: Types, macros: dict[str, str] | None = None) -> dict[str, str]:
    """`A::NAME` -> its value for each name A the launch hands the kernel as a template argument
    bound to a class instance (`written`, as the launch spells them, against the `instance`'s
    arguments), where the launcher reads `A::NAME`: mamba's selective scan launches
    `selective_scan_fwd_kernel<Ktraits><<<grid, Ktraits::kNThreads, …>>>` with `using Ktraits =
    Selective_Scan_fwd_kernel_traits<…>;` a local alias of its dispatch lambda — the block is the
    instance's number. Also A a local alias of the launcher over names the launch binds (sgl-kernel's
    `using Constants = detail::TopkConstants<T, EXPERTS, BYTES_PER_LDG>;` then `ROWS_PER_WARP =
    Constants::ROWS_PER_WARP` sizing the grid, EXPERTS the kernel's NUM_EXPERTS in this instance).
    `macros`: the project's object-like and function-like macros (`hostexprs.function_macros`'s keys)
    the class's constants are written with (`MAX(1, EXPERTS / (ELTS_PER_LDG * WARP_SIZE))`)."""
    pairs = [(w.strip(), v.strip()) for w, v in zip(written, instance) if w.strip().isidentifier()]
    fn = next(iter(host_functions(model, site.function)), None) \
        if pairs and model is not None and site is not None and site.function else None
    if fn is None:
        return {}
    classes = {w: v for w, v in pairs if v.endswith(">")}
    classes.update(_local_aliases(fn, dict(pairs)))
    return {k: str(v) for k, v in _qualified(fn, classes, _Numbers(types, macros)).items()} if classes else {}


def compile_time_value(fn: Node, spelled: str, bound: dict[str, str], types: Types,
                       macros: dict[str, str] | None = None) -> int | None:
    """The number a host function's integer expression `spelled` (a launch's template argument)
    is, where it names the function's compile-time locals (`constexpr`/`const` ones, and local
    aliases of class templates), with the function's template parameters `bound` (name -> the
    argument: a number or a type) as one instance binds them: sgl-kernel's launcher hands its
    kernel `VPT`, `static constexpr int VPT = Constants::VPT;` of `using Constants =
    detail::TopkConstants<T, EXPERTS, BYTES_PER_LDG>;` and `BYTES_PER_LDG = MIN(16, sizeof(T) *
    EXPERTS)`. The same evaluation `launcher_numbers` reads the grid's constants with; a local
    declared more than once (in two branches) is no number, nor is anything of the run time."""
    expr = syntax.parse_expression(spelled)
    if expr is None or expr.has_error:
        return None
    numbers = _Numbers(types, macros)
    scope = dict(bound)
    for name, value in compile_time_locals(fn, bound, numbers).items():
        scope[name] = str(value)
    scope.update(_local_aliases(fn, scope))
    return numbers.value(expr, "", scope, 0)


def compile_time_locals(fn: Node, bound: dict[str, str], numbers: "_Numbers") -> dict[str, int]:
    """Each `constexpr` or `const` local of the host function whose initialiser evaluates with
    its template parameters `bound`, through the locals and local aliases before it (read until
    none more evaluates, as each may name others)."""
    declared: dict[str, int] = {}
    found: list[tuple[str, Node]] = []
    for n in walk(fn):
        if n.type not in ("declaration", "parameter_declaration"):
            continue
        fixed = any(c.type == "type_qualifier" and c.text.decode() in ("constexpr", "const") for c in n.children)
        for d in n.children_by_field_name("declarator"):
            name = syntax.declarator_name(d)[0]
            if not name:
                continue
            declared[name] = declared.get(name, 0) + 1
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if fixed and n.type == "declaration" and value is not None:
                found.append((name, value))
    found = [(k, v) for k, v in found if declared[k] == 1 and k not in bound]
    out: dict[str, int] = {}
    grew = True
    while grew:
        grew = False
        scope = {**bound, **{k: str(v) for k, v in out.items()}}
        scope.update(_local_aliases(fn, scope))
        for name, value in found:
            if name not in out and (v := numbers.value(value, "", scope, 0)) is not None:
                out[name] = v
                grew = True
    return out


def _local_aliases(fn: Node, bound: dict[str, str]) -> dict[str, str]:
    """The launcher's `using A = Cls<…>;` (or `typedef Cls<…> A;`) -> the class with each argument
    the launch binds (`bound`: a name as the launch spells it -> the instance's argument) written
    as its value; an alias over any other name of the launcher is left out (no number is guessed)."""
    out = {}
    for n in walk(fn):
        if n.type == "alias_declaration":
            name, target = n.child_by_field_name("name"), n.child_by_field_name("type")
        elif n.type == "type_definition":
            name, target = n.child_by_field_name("declarator"), n.child_by_field_name("type")
        else:
            continue
        if name is None or target is None or name.type != "type_identifier":
            continue
        lists = [t for t in walk(target) if t.type == "template_argument_list"]
        if len(lists) != 1:
            continue
        args = [a.text.decode().strip() for a in lists[0].named_children]
        if not all(a in bound or a.lstrip("-").isdigit() or a in ("true", "false") for a in args):
            continue
        head = target.text.decode()[:lists[0].start_byte - target.start_byte]
        out[name.text.decode()] = " ".join(head.split()) + "<" + ", ".join(bound.get(a, a) for a in args) + ">"
    return out


def _qualified(root: Node, classes: dict[str, str], numbers: "_Numbers") -> dict[str, int]:
    """`P::NAME` -> its value, for each such name under `root` whose scope P is bound in `classes`."""
    out = {}
    for n in walk(root):
        if n.type == "qualified_identifier" and (scope := n.child_by_field_name("scope")) is not None \
                and (name := n.child_by_field_name("name")) is not None and scope.text.decode() in classes:
            v = numbers.member(classes[scope.text.decode()], name.text.decode(), 0)
            if v is not None:
                out[f"{scope.text.decode()}::{name.text.decode()}"] = v
    return out


def type_bytes(types: Types, bound: dict[str, str]) -> Callable[[str], int | None]:
    """sizeof a type the kernel names, its template parameters `bound`: `Types.vector_bytes`, else
    a member vector type of a bound class (`member_vector_bytes`)."""
    return lambda t: types.vector_bytes(t, bound) or member_vector_bytes(types, t, bound)


def primary_instance(types: Types, cls: str) -> tuple[Node, dict[str, str]] | None:
    """The body of the primary template `cls` instantiates (`Traits<float, 4>`) with its parameters
    bound to the arguments, or None: no such template, or a specialization that might be the one
    instantiated."""
    template, _, args = cls.partition("<")
    template = template.strip().split("::")[-1]
    primary = None
    for it in types.items:
        if it.kind != "type" or template not in it.text:
            continue
        for params, specialized, body in class_templates(it.text, template):
            if specialized is not None:
                return None
            primary = (params, body)
    if primary is None:
        return None
    params, body = primary
    return body, dict(zip(params, (a.strip() for a in split_template_args(f"<{args.rpartition('>')[0]}>"))))


def member_vector_bytes(types: Types, spelled: str, bound: dict[str, str]) -> int | None:
    """sizeof a member type of a class template's instance that is a vector template over the
    class's own names, where `Types.vector_bytes` reads none (flash-attention's `Ktraits::Ivec`,
    Ktraits bound to `Kernel_traits<float, …>`, whose `using Ivec = layer_norm::Vec<input_t,
    NUM_ELTS>;`): the element a member type of the class (or a bound parameter), the count its
    enumerator or `static constexpr` integer, or a number — that many of the element, the convention
    `Types.vector_bytes` reads such templates by (`vec_n_t<T, N>`)."""
    text = owner_bound(" ".join(w for w in spelled.split() if w not in ("const", "volatile", "typename")), bound)
    cls, sep, member = text.rpartition(">::")
    if not sep or not member.isidentifier() or "<" not in cls:
        return None
    cls += ">"
    found = primary_instance(types, cls)
    if found is None:
        return None
    body, own = found
    target = member_alias(body, member)
    if target is None or not target.endswith(">") or "<" not in target:
        return None
    vargs = [a.strip() for a in split_template_args("<" + target.split("<", 1)[1])]
    if len(vargs) != 2:
        return None
    elem = own.get(vargs[0], vargs[0])
    spelled_elem = types.scalar(elem, {}) or types.scalar(f"{cls}::{elem}", {})
    dt = dtypes.from_cpp(spelled_elem) if spelled_elem else None
    count = own.get(vargs[1], vargs[1])
    n = int(count) if count.isdigit() else _Numbers(types).member(cls, count, 0)
    return dt.itemsize * n if dt is not None and n is not None and 0 < n <= 64 else None


def _body_constants(root: Node) -> list[tuple[str, Node]]:
    """Each enumerator of the kernel's body and each of its `constexpr` locals, with the expression
    that gives its value, in the order written."""
    found = []
    for n in walk(root):
        if n.type == "enumerator" and (value := n.child_by_field_name("value")) is not None:
            found.append((n.child_by_field_name("name").text.decode(), value))
        elif n.type == "declaration" and any(c.type == "type_qualifier" and c.text.decode() == "constexpr"
                                             for c in n.children):
            for d in n.children_by_field_name("declarator"):
                name, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if d.type == "init_declarator" and name is not None and name.type == "identifier" and value is not None:
                    found.append((name.text.decode(), value))
    return found


class _Numbers:
    def __init__(self, types: Types, macros: dict[str, str] | None = None):
        self.types = types
        self._memo: dict[tuple[str, str], int | None] = {}
        # the project's macros: `NAME` -> its value, `NAME(a, b)` -> its body (`hostexprs.function_macros`)
        self.macros = macros or {}
        self._functions = {k.split("(")[0]: (k, v) for k, v in self.macros.items() if k.endswith(")")}

    def member(self, cls: str, name: str, depth: int) -> int | None:
        k = (cls, name)
        if k not in self._memo:
            self._memo[k] = None   # a member defined through itself: no number
            self._memo[k] = self._member(cls, name, depth)
        return self._memo[k]

    def _member(self, cls: str, name: str, depth: int) -> int | None:
        if depth > MAX_DEPTH or "<" not in cls:
            return None
        instance = primary_instance(self.types, cls)
        if instance is None:
            return None
        body, bound = instance
        found = _definition(body, name)
        if found is not None:
            return self.value(found, cls, bound, depth + 1)
        clause = next((c for c in body.parent.children if c.type == "base_class_clause"), None) \
            if body.parent is not None else None
        for base in (c for c in (clause.named_children if clause is not None else ()) if c.type != "access_specifier"):
            spelled = bound.get(base.text.decode(), base.text.decode())
            v = self.member(spelled, name, depth + 1)
            if v is not None:
                return v
        return None

    def value(self, n: Node, cls: str, bound: dict[str, str], depth: int) -> int | None:
        """An integer constant expression of class `cls` (its parameters `bound`), or None."""
        t = n.type
        if depth > MAX_DEPTH:
            return None
        if t == "number_literal":
            text = n.text.decode().lower().rstrip("ul")
            try:
                return int(text, 0)
            except ValueError:
                return None
        if t in ("true", "false"):
            return int(t == "true")
        if t == "identifier":
            name = n.text.decode()
            if name in bound:
                arg = bound[name]
                return int(arg == "true") if arg in ("true", "false") else int(arg) if arg.lstrip("-").isdigit() else None
            v = self.member(cls, name, depth + 1) if cls else None
            return v if v is not None or name not in self.macros else self._macro(self.macros[name], {}, depth)
        if t == "qualified_identifier":
            scope, name = n.child_by_field_name("scope"), n.child_by_field_name("name")
            if scope is None or name is None or scope.text.decode() not in bound:
                return None
            return self.member(bound[scope.text.decode()], name.text.decode(), depth + 1)
        if t == "sizeof_expression":
            inner = n.child_by_field_name("type") or n.child_by_field_name("value")
            what = " ".join(inner.text.decode().strip("() ").split()) if inner is not None else ""
            what = bound.get(what, what)
            spelled = self.types.scalar(what, {}) or (self.types.scalar(f"{cls}::{what}", {}) if cls else None)
            dt = dtypes.from_cpp(spelled) if spelled else None
            return dt.itemsize if dt is not None else None
        if t == "parenthesized_expression" and n.named_children:
            return self.value(n.named_children[-1], cls, bound, depth + 1)
        if t == "binary_expression":
            left, right, op = n.child_by_field_name("left"), n.child_by_field_name("right"), n.child_by_field_name("operator")
            if left is None or right is None or op is None or op.type not in _BINARY:
                return None
            a, b = self.value(left, cls, bound, depth + 1), self.value(right, cls, bound, depth + 1)
            return _BINARY[op.type](a, b) if a is not None and b is not None else None
        if t == "unary_expression":
            arg, op = n.child_by_field_name("argument"), n.child_by_field_name("operator")
            a = self.value(arg, cls, bound, depth + 1) if arg is not None else None
            ops = {"-": lambda x: -x, "+": lambda x: x, "!": lambda x: int(not x), "~": lambda x: ~x}
            return ops[op.type](a) if a is not None and op is not None and op.type in ops else None
        if t == "conditional_expression":
            c = self.value(n.child_by_field_name("condition"), cls, bound, depth + 1)
            if c is None:
                return None
            return self.value(n.child_by_field_name("consequence" if c else "alternative"), cls, bound, depth + 1)
        if t == "cast_expression" and (inner := n.child_by_field_name("value")) is not None:   # `(int) X`
            return self.value(inner, cls, bound, depth + 1)
        fn, call = n.child_by_field_name("function"), n.child_by_field_name("arguments")
        if t == "call_expression" and fn is not None and call is not None and len(call.named_children) == 1 \
                and dtypes.from_cpp(fn.text.decode()) is not None:   # `int(X)`, `uint32_t(X)`
            return self.value(call.named_children[0], cls, bound, depth + 1)
        if t == "call_expression" and fn is not None and call is not None:
            args = [self.value(a, cls, bound, depth + 1) for a in call.named_children]
            return self.call(fn.text.decode(), args, depth) if None not in args else None
        return None

    def call(self, fn: str, args: list, depth: int) -> int | None:
        """A call with integer arguments: `std::min`/`std::max`, or a `constexpr` function of the
        project whose body is one `return` (mamba's `constexpr_min(8, kNItems)`, `return std::min(a,
        b);` — or `a < b ? a : b` under `USE_ROCM`), where every definition live here agrees."""
        name = fn.split("<")[0].strip()
        if name in ("std::min", "std::max") and len(args) == 2:
            return min(args) if name == "std::min" else max(args)
        if name in self._functions:   # a function-like macro of the project: its body, the arguments bound
            key, body = self._functions[name]
            params = [p.strip() for p in key[len(name) + 1:-1].split(",") if p.strip()]
            return self._macro(body, dict(zip(params, map(str, args))), depth) if len(params) == len(args) else None
        got = set()
        for pos, it in enumerate(self.types.items):
            if it.kind not in ("host_function", "device_function") or name.split("::")[-1] not in it.text \
                    or self.types._active(it, pos) is False:
                continue
            for f in function_nodes(it.text):
                d = syntax.function_declarator(f.child_by_field_name("declarator"))
                body = f.child_by_field_name("body")
                if d is None or body is None or syntax.declarator_name(d)[0] != name.split("::")[-1] \
                        or "constexpr" not in f.text.decode().split("(")[0]:
                    continue
                params = d.child_by_field_name("parameters")
                names = [syntax.declarator_name(q.child_by_field_name("declarator"))[0]
                         for q in (params.named_children if params is not None else ())]
                stmts = [c for c in body.named_children if c.type != "comment"]
                if len(names) != len(args) or None in names or len(stmts) != 1 or stmts[0].type != "return_statement" \
                        or not stmts[0].named_children:
                    return None
                got.add(self.value(stmts[0].named_children[0], "", {k: str(v) for k, v in zip(names, args)}, depth + 1))
        return got.pop() if len(got) == 1 else None

    def _macro(self, text: str, bound: dict[str, str], depth: int) -> int | None:
        """A macro's value (an object-like one's, or a function-like one's body with its parameters
        `bound` to numbers), read as an expression outside any class."""
        expr = syntax.parse_expression(text)
        return self.value(expr, "", bound, depth + 1) if expr is not None and not expr.has_error else None


def _definition(body: Node, name: str) -> Node | None:
    """The value a class body gives member `name`: an enumerator's, or a `static constexpr`
    integer's initialiser."""
    for f in body.named_children:
        if f.type != "field_declaration":
            continue
        enum = f.child_by_field_name("type")
        if enum is not None and enum.type == "enum_specifier":
            for e in walk(enum):
                nm = e.child_by_field_name("name") if e.type == "enumerator" else None
                if nm is not None and nm.text.decode() == name:
                    return e.child_by_field_name("value")
        d, v = f.child_by_field_name("declarator"), f.child_by_field_name("default_value")
        if d is not None and v is not None and d.text.decode() == name and "constexpr" in f.text.decode().split("=")[0]:
            return v
    return None
