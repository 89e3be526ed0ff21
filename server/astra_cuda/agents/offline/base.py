"""The offline coder's building blocks: a Transform turns a whole file text into a rewritten
whole file text (a Rewrite), or None when its pattern is not found in the kernel."""
from __future__ import annotations

import difflib

from dataclasses import dataclass, field, replace

from tree_sitter import Node

from ...model import source
from ...model.candidate import Candidate
from ...model.spec import Spec
from . import tree, types
from .tree import Edit, txt, walk

FLOAT_FUNCS = {"expf", "__expf", "exp2f", "exp10f", "logf", "__logf", "log2f", "sqrtf", "rsqrtf", "fmaxf",
               "fminf", "fabsf", "tanhf", "sinf", "cosf", "__sinf", "__cosf", "powf", "__powf",
               "__half2float", "__bfloat162float", "__fdividef", "__frcp_rn", "__fmul_rn", "__fadd_rn",
               "fmaf", "__fmaf_rn", "erff", "floorf", "ceilf", "truncf", "roundf", "__saturatef",
               "__shfl_xor_sync", "__shfl_down_sync", "__shfl_sync", "__shfl_up_sync", "__int2float_rn",
               "__ldg"}
INT_TYPES = {"int", "unsigned", "long", "short", "char", "int64_t", "int32_t", "uint32_t", "uint64_t", "size_t",
             "unsigned int", "long long", "int16_t", "uint16_t", "int8_t", "uint8_t", "ptrdiff_t"}
ELEM_SIZES = types.SIZES


@dataclass(frozen=True)
class Context:
    """What a transform may know besides the text: the kernel and, when the spec loads, the
    launch at the largest bench size (to pick a vector width that keeps threads busy), the
    element types the spec gives the buffers and the values it gives the scalars."""

    kernel: str
    block_threads: int | None = None        # threads per block at the largest bench size
    row_elements: dict[str, int] = field(default_factory=dict)  # integer scalar arg -> value there
    grid_blocks: int | None = None          # blocks in the grid there
    template_args: dict[str, str] = field(default_factory=dict)  # template parameter -> argument
    arg_bytes: dict[str, int] = field(default_factory=dict)      # pointer arg -> element bytes (spec)
    scalar_exprs: dict[str, str] = field(default_factory=dict)   # scalar arg -> its spec expression
    headers: tuple[str, ...] = ()   # the texts of the project headers the file includes (their helpers)


@dataclass(frozen=True)
class Rewrite:
    transform: str
    text: str
    changes: tuple[str, ...]
    params: dict = field(default_factory=dict)   # the parameters this rewrite used (for tuning)
    # the rewritten version read once (`Transform.apply` sets it): what the plan, the round and the best carry
    candidate: Candidate | None = field(default=None, compare=False, repr=False)


class Transform:
    name = ""
    title = ""
    expected = ""      # the expected effect, for plans and reports
    note = ""          # the one comment the rewrite carries when it writes none: what and why, briefly
    reorders_sums = False   # float sums combined in another order: results differ by rounding
    any_grid = False        # the rewrite is right whatever grid launches it
    # ideas this rewrite makes possible, in order of preference: where it is not faster alone, the
    # first of them that applies is judged on top of it in the same round (agents/enabling.py)
    enables: tuple[str, ...] = ()

    def apply(self, base: str | Candidate, ctx: Context, params: dict | None = None) -> Rewrite | None:
        """The rewritten file, or None when the pattern is not there; the rewrite carries its
        version read once (`Rewrite.candidate`). `base`: the file, as a text or already read.
        `params` overrides the transform's own choices (the tuning stage's points); unknown keys
        are ignored. The template of every transformation: the kernel and the device functions
        it calls, then its own `rewrite` of them."""
        c = base if isinstance(base, Candidate) else Candidate.of(base, ctx.kernel)
        sc = scope(c, ctx.kernel)
        rw = None if sc is None else self.rewrite(c.text, ctx, sc, dict(params or {}))
        return None if rw is None else self.noted(c.text, rw, ctx.kernel)

    def noted(self, before: str, rw: Rewrite, kernel: str) -> Rewrite:
        """Every transformation leaves one comment saying what it did and why: a rewrite that
        wrote none gets its `note` above the first statement it changed in the kernel or a device
        function it calls (the top of the kernel's body when only a signature changed). Tagged
        `astra-note:`, not `astra:`, so later transformations do not take the statement after it
        for generated code. The result carries its version read (`candidate`)."""
        def read() -> Rewrite:
            ok = rw.candidate is not None and rw.candidate.text == rw.text
            return rw if ok else replace(rw, candidate=Candidate.of(rw.text, kernel))
        old = set(before.split("\n"))
        if any("// astra:" in line for line in rw.text.split("\n") if line not in old) or not self.note:
            return read()
        sc = _scope(tree.root(rw.text), kernel)   # only where the note goes: the noted text is what is read
        if sc is None:
            return read()
        first = _first_changed_statement(before, rw.text, sc)
        if first is None:
            b = body(sc.kernel)
            first = b.named_children[0] if b is not None and b.named_children else None
        if first is None:
            return read()
        data = rw.text.encode("utf-8")
        indent = tree.line_indent(data, first.start_byte)
        note = f"// astra-note: {self.note}\n{indent}".encode("utf-8")
        text = (data[:first.start_byte] + note + data[first.start_byte:]).decode("utf-8")
        return Rewrite(rw.transform, text, rw.changes, rw.params, Candidate.of(text, kernel))

    def rewrite(self, text: str, ctx: Context, sc: "Scope", params: dict) -> Rewrite | None:
        """The transformation proper, over the kernel's scope `sc` in `text`."""
        raise NotImplementedError

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        """Other parameter points worth timing around the one `rw` used (none by default)."""
        return []


@dataclass
class Scope:
    """A kernel and the device functions it calls (transitively) in the same file, with the
    file's version read (`file`: its source model and its own spec, so a rewrite reads neither again)."""

    root: Node
    kernel: Node
    helpers: list[Node]
    file: Candidate | None = None

    @property
    def functions(self) -> list[Node]:
        return [self.kernel] + self.helpers

    @property
    def model(self) -> source.SourceModel:
        assert self.file is not None
        return self.file.model

    @property
    def spec(self) -> Spec | None:
        """The file's own spec above the kernel, loaded (None: none, or it does not load)."""
        assert self.file is not None
        return self.file.spec


def scope(base: str | Candidate, kernel: str) -> Scope | None:
    file = base if isinstance(base, Candidate) else Candidate.of(base, kernel)
    return _scope(file.root, kernel, file)


def _scope(r: Node, kernel: str, file: Candidate | None = None) -> Scope | None:
    k = tree.find_function(r, kernel)
    if k is None or not tree.is_kernel(k):
        return None
    by_name = {tree.function_name(f): f for f in tree.functions(r) if not tree.is_kernel(f)}
    helpers: list[Node] = []
    todo = [k]
    seen = {tree.function_name(k)}
    while todo:
        fn = todo.pop()
        for c in tree.calls(fn):
            name = tree.callee(c)
            if name in by_name and name not in seen:
                seen.add(name)
                helpers.append(by_name[name])
                todo.append(by_name[name])
    return Scope(r, k, helpers, file)


def collective_helpers(sc: Scope, words: tuple[str, ...]) -> set[str]:
    """Names of the kernel's helpers that reach a call whose name holds one of `words` (a barrier,
    a warp collective), directly or through other helpers: code that calls none of them, and no
    such call itself, may be copied or reordered without changing who waits for whom."""
    by_name = {tree.function_name(f) or "": f for f in sc.helpers}
    callees = {n: {tree.callee(c) for c in tree.calls(f)} for n, f in by_name.items()}
    out = {n for n, cs in callees.items() if any(w in c for c in cs for w in words)}
    grew = True
    while grew:
        more = {n for n, cs in callees.items() if n not in out and cs & out}
        out |= more
        grew = bool(more)
    return out


def calls_collective(nodes: list[Node], reach: set[str], words: tuple[str, ...]) -> bool:
    """Whether `nodes` call such a function themselves or one of `reach` (`collective_helpers`)."""
    return any(any(w in tree.callee(c) for w in words) or tree.callee(c) in reach
               for n in nodes for c in tree.calls(n))


def body(fn: Node) -> Node:
    return fn.child_by_field_name("body")


def _first_changed_statement(before: str, after: str, sc: Scope) -> Node | None:
    """The statement of a block, in `sc`'s functions of `after`, holding the first line that
    differs from `before`."""
    a, b = before.split("\n"), after.split("\n")
    rows = [j for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag in ("replace", "insert") for j in range(j1, j2)]
    for row in rows:
        for fn in sc.functions:
            if not fn.start_point[0] <= row <= fn.end_point[0]:
                continue
            hit = None
            for n in tree.walk(fn):
                if n.parent is not None and n.parent.type == "compound_statement" and n.is_named \
                        and n.type != "comment" and n.start_point[0] <= row <= n.end_point[0]:
                    hit = n           # the innermost such statement (walk goes down)
            if hit is not None:
                return hit
    return None


@dataclass(frozen=True)
class PointerParam:
    name: str
    elem: str          # element type as written: '__half', 'float'
    const: bool
    restrict: bool
    node: Node


def element_bytes(p: "PointerParam", ctx: Context, root_node: Node) -> int | None:
    """Bytes of one element of pointer parameter `p` (through typedefs, template arguments, or
    the spec's element type for the buffer)."""
    return types.element_bytes(p.elem, types.aliases(root_node), ctx.template_args, ctx.arg_bytes.get(p.name))


def pointer_params(fn: Node) -> dict[str, PointerParam]:
    out = {}
    for p in tree.params(fn):
        name, is_ptr = tree.declared_name(p.child_by_field_name("declarator"))
        if not (name and is_ptr):
            continue
        elem = txt(p.child_by_field_name("type"))
        const = any(c.type == "type_qualifier" and txt(c) == "const" for c in p.children)
        restrict = "__restrict__" in txt(p.child_by_field_name("declarator"))
        out[name] = PointerParam(name, elem, const, restrict, p)
    return out


def variable_types(fn: Node) -> dict[str, str]:
    """Name -> declared (base) type for scalar parameters and local variables of a function.
    Names declared twice with different types map to '?' (unknown)."""
    out: dict[str, str] = {}

    def add(name, typ):
        out[name] = typ if out.get(name, typ) == typ else "?"

    for p in tree.params(fn):
        name, is_ptr = tree.declared_name(p.child_by_field_name("declarator"))
        if name:
            add(name, txt(p.child_by_field_name("type")) + ("*" if is_ptr else ""))
    for n in walk(body(fn)):
        if n.type == "declaration":
            t = txt(n.child_by_field_name("type"))
            for d in n.children_by_field_name("declarator"):
                name, is_ptr = tree.declared_name(d)
                if name:
                    add(name, t + ("*" if is_ptr else ""))
    return out


def expr_kind(node: Node | None, types: dict[str, str], pointers: dict[str, PointerParam],
              returns: dict[str, str] | None = None) -> str:
    """'float', 'int', 'double', 'half' or '?' for an expression (enough to tell a float division)."""
    if node is None:
        return "?"
    t = node.type
    if t == "number_literal":
        s = txt(node).lower()
        if s.startswith("0x"):
            return "int"
        if s.endswith("f") and ("." in s or "e" in s):
            return "float"
        if "." in s or "e" in s:
            return "double"
        return "int"
    if t == "identifier":
        typ = types.get(txt(node), "?")
        if typ == "float":
            return "float"
        if typ == "double":
            return "double"
        if typ in INT_TYPES:
            return "int"
        if typ in ("__half", "half", "__nv_bfloat16"):
            return "half"
        return "?"
    if t == "parenthesized_expression":
        return expr_kind(node.named_children[0] if node.named_children else None, types, pointers, returns)
    if t == "unary_expression":
        return expr_kind(node.child_by_field_name("argument"), types, pointers, returns)
    if t == "binary_expression":
        op = txt(node.child_by_field_name("operator"))
        if op in ("<", ">", "<=", ">=", "==", "!=", "&&", "||"):
            return "int"
        a = expr_kind(node.child_by_field_name("left"), types, pointers, returns)
        b = expr_kind(node.child_by_field_name("right"), types, pointers, returns)
        if "?" in (a, b) or "half" in (a, b):
            return "?"
        if "double" in (a, b):
            return "double"
        return "float" if "float" in (a, b) else "int"
    if t == "call_expression":
        name = tree.callee(node)
        if name in FLOAT_FUNCS:
            return "float"
        if returns and returns.get(name) == "float":
            return "float"
        return "?"
    if t == "cast_expression":
        typ = txt(node.child_by_field_name("type"))
        return "float" if typ == "float" else "int" if typ in INT_TYPES else "double" if typ == "double" else "?"
    if t == "subscript_expression":
        arr = node.child_by_field_name("argument")
        p = pointers.get(txt(arr))
        typ = p.elem if p else types.get(txt(arr), "?").rstrip("*")
        return "float" if typ == "float" else "double" if typ == "double" else "int" if typ in INT_TYPES else "?"
    if t == "conditional_expression":
        a = expr_kind(node.child_by_field_name("consequence"), types, pointers, returns)
        b = expr_kind(node.child_by_field_name("alternative"), types, pointers, returns)
        return a if a == b else "?"
    return "?"


def return_types(root_node: Node) -> dict[str, str]:
    out = {}
    for f in tree.functions(root_node):
        out[tree.function_name(f) or ""] = txt(f.child_by_field_name("type"))
    return out


def substitute(expr: str, mapping: dict[str, str]) -> str | None:
    """`expr` with each identifier replaced by `(mapping[name])`; None when an identifier has no
    mapping or the expression is more than arithmetic on names and numbers."""
    from ...model import source
    r = source.parser().parse(f"auto _ = {expr};".encode()).root_node
    decl = r.named_children[0] if r.named_children else None
    value = None
    if decl is not None and decl.type == "declaration":
        d = decl.child_by_field_name("declarator")
        value = d.child_by_field_name("value") if d is not None else None
    if value is None or r.has_error:
        return None
    edits = []
    for n in walk(value):
        if n.type not in ("identifier", "number_literal", "binary_expression", "parenthesized_expression",
                          "+", "-", "*", "/", "%", "(", ")"):
            return None
        if n.type == "identifier":
            if txt(n) not in mapping:
                return None
            edits.append(Edit(n.start_byte - value.start_byte, n.end_byte - value.start_byte, f"({mapping[txt(n)]})"))
    return tree.apply_edits(txt(value), edits)


# a block- or grid-stride loop's step, as a local may hold it (without spaces)
STRIDE_FORMS = frozenset({"blockDim.x", "blockDim.x*gridDim.x", "gridDim.x*blockDim.x"})


def index_aliases(fn_body: Node) -> dict[str, str]:
    """Locals that only ever hold a thread index or a loop stride: `const int tid = threadIdx.x;`
    -> {'tid': 'threadIdx.x'}, `const int stride = blockDim.x;` -> {'stride': 'blockDim.x'} (the
    value without spaces)."""
    out: dict[str, str] = {}
    changed = tree.assigned_names(fn_body)
    seen: dict[str, int] = {}
    for n in walk(fn_body):
        if n.type != "declaration":
            continue
        for d in n.children_by_field_name("declarator"):
            name, ptr = tree.declared_name(d)
            if not name:
                continue
            seen[name] = seen.get(name, 0) + 1
            v = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if ptr or v is None or name in changed:
                continue
            flat = "".join(txt(c) for c in walk(v) if c.child_count == 0 and c.type != "comment")
            if ("threadIdx" in flat or flat in STRIDE_FORMS) and all(w not in flat for w in ("[", "(")):
                out[name] = flat
    return {k: v for k, v in out.items() if seen.get(k) == 1}


def written_pointers(fn: Node, names: set[str]) -> set[str]:
    """Pointer names that may be written or escape (passed, copied, address arithmetic)."""
    out = set()
    for n in walk(body(fn)):
        if n.type != "identifier" or txt(n) not in names:
            continue
        p = n.parent
        if p is not None and p.type == "subscript_expression" and p.child_by_field_name("argument") == n:
            if tree.is_lvalue(p):
                out.add(txt(n))
            continue
        out.add(txt(n))  # any other use: be conservative
    return out


__all__ = ["Context", "Rewrite", "Transform", "Scope", "scope", "body", "PointerParam", "pointer_params",
           "variable_types", "expr_kind", "return_types", "written_pointers", "Edit", "ELEM_SIZES", "element_bytes"]
