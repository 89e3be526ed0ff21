"""The top-level declarations of the project's code (the preprocessed file's project lines, read
by tree-sitter), in order, under their namespaces and `extern "C"` blocks: for each, what kind it
is, the names it defines, the names its code uses (not its own parameters and locals) and those
it belongs with (a specialization with its template, a member defined outside its class), and
whether device code can use it — what the cut chooses by. Code nested past `MAX_DEPTH` levels or
`MAX_NAMESPACES` blocks is `TooDeep`."""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from ..model import source
from ..errors import AstraError

_IDENTS = ("identifier", "type_identifier", "namespace_identifier")

# Levels of C++ structure below one top-level declaration, after macro expansion. Real code stays
# far below (82 at most in the 1,352 files of the real-world suite, headers included); a
# macro-made 2**16-term expression is 2**16 levels deep, and g++'s front end takes minutes on
# 2**14 (time grows with the square of the length). Checked before any compiler sees the unit.
MAX_DEPTH = 1000
MAX_NAMESPACES = source.MAX_BLOCKS  # nested namespace / extern "C" blocks (each a level of the reader's recursion)
_TYPES = ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier")
_DEVICE_SPECS = {"__device__", "__global__", "constexpr", "__constant__", "__managed__", "__shared__", "consteval"}


@dataclass
class Item:
    start: int                    # byte offsets in the project text
    end: int
    kind: str                     # directive | include | kernel | function | type | variable | using | other
    defines: frozenset[str] = frozenset()
    uses: frozenset[str] = frozenset()
    attach: frozenset[str] = frozenset()  # kept with any of these names (specializations, members)
    device: bool = False          # device code can use it
    scope: tuple[str, ...] = ()   # enclosing `namespace x {` / `extern "C" {` heads
    header: str = ""              # includes: the directive as written
    label: str = ""               # how a user names it in a message


def _text(n: Node | None) -> str:
    return (n.text or b"").decode("utf-8", errors="replace") if n is not None else ""


class TooDeep(AstraError):
    """The project's code nests deeper than any compiler should be asked to read (MAX_DEPTH)."""


class Deep(Exception):
    def __init__(self, byte: int, what: str):  # where, and what is wrong there
        self.byte, self.what = byte, what


def _idents(node: Node) -> set[str]:
    """The names under `node` but those of its own parameters and local variables where they stand
    for them (a kernel's parameter `C` is not CuTe's `C<N>`: names are all the cut goes by);
    raises Deep where it nests past MAX_DEPTH."""
    out: set[str] = set()
    plain: set[str] = set()
    local: set[str] = set()
    stack: list[tuple[Node, int, str]] = [(node, 0, "")]
    while stack:
        n, depth, parent = stack.pop()
        if n.type in _IDENTS:
            (plain if n.type == "identifier" and parent not in _NAMING else out).add(_text(n))
        elif depth and n.type in _LOCALS:
            for d in n.children_by_field_name("declarator"):
                name = _declarator_name(d)
                if name is not None and name.type == "identifier":
                    local.add(_text(name))
        if depth >= MAX_DEPTH and n.child_count:
            raise Deep(n.start_byte, f"the code nests more than {MAX_DEPTH} levels deep once macros are expanded "
                        "(an expression or macro that explodes? compilers take minutes on such code)")
        stack.extend((c, depth + 1, n.type) for c in n.children)
    return out | (plain - local)


# Where a plain identifier is a name of something else than a local: `C<3>{}`, `cute::C`.
_NAMING = ("template_function", "qualified_identifier")
# Declarations of names local to an item (below its top).
_LOCALS = ("parameter_declaration", "optional_parameter_declaration", "declaration")


def _base(name_node: Node | None) -> str:
    """The template's own name of `vec_t<float, N>` (or a plain name)."""
    if name_node is None:
        return ""
    if name_node.type in ("template_type", "template_function"):
        return _text(name_node.child_by_field_name("name"))
    if name_node.type == "qualified_identifier":
        return _base(name_node.child_by_field_name("name"))
    return _text(name_node)


def _specifiers(node: Node) -> set[str]:
    out = set()
    for c in node.children:
        t = _text(c)
        if c.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier", "virtual"):
            out.update(t.split())
        elif c.type.startswith("__") or (not c.is_named and t.startswith("__")):
            out.add(c.type if c.type.startswith("__") else t)
        elif c.type == "launch_bounds":
            out.add("__launch_bounds__")
    return out


def _declarator_name(d: Node | None) -> Node | None:
    while d is not None:
        if d.type in ("identifier", "field_identifier", "type_identifier", "operator_name", "destructor_name",
                      "qualified_identifier", "template_function", "template_type"):
            return d
        nxt = d.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in d.named_children if c.type in (
                "identifier", "qualified_identifier", "function_declarator", "pointer_declarator",
                "reference_declarator", "array_declarator", "init_declarator", "parenthesized_declarator",
                "template_function", "operator_name")), None)
        d = nxt
    return None


def _function_declarator(d: Node | None) -> Node | None:
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator") or next(
            (c for c in d.named_children if c.type.endswith("declarator")), None)
    return d


def _typedef(it: Item, inner: Node, names: set[str]) -> None:
    """A typedef's item: the names it declares and those of the struct/enum it defines inline."""
    spec = inner.child_by_field_name("type")
    if spec is not None and spec.type in _TYPES:
        names |= _type_names(spec)[0]
    it.kind, it.device, it.defines = "type", True, frozenset(n for n in names if n)
    it.label = next(iter(sorted(it.defines)), it.label)


def _type_names(spec: Node) -> tuple[set[str], set[str]]:
    """(names a struct/class/union/enum specifier defines, names it attaches to): a
    specialization `vec_t<float, N>` defines nothing new and belongs with `vec_t`."""
    defines, attach = set(), set()
    name = spec.child_by_field_name("name")
    if name is not None and name.type == "template_type":
        attach.add(_base(name))
    elif name is not None and name.type == "qualified_identifier":
        attach.add(_base(name))
    elif name is not None:
        defines.add(_text(name))
    if spec.type == "enum_specifier":
        body = spec.child_by_field_name("body")
        for e in body.named_children if body is not None else ():
            if e.type == "enumerator" and e.child_by_field_name("name") is not None:
                defines.add(_text(e.child_by_field_name("name")))
    return defines, attach


class Reader:
    """Top-level items of the project text, in order."""

    def __init__(self, data: bytes):
        self.data = data
        self.items: list[Item] = []
        self.nodes: list[Node] = []   # each item's node (the cut rewrites some members of types for NVRTC)

    def read(self, nodes: list[Node], scope: tuple[str, ...]) -> None:
        for node in nodes:
            t = node.type
            if t == ";" or t == "expression_statement" and node.child_count == 1 and node.children[0].type == ";":
                # an empty statement is the `;` of the item before it that tree-sitter's recovery
                # from a construct it misreads (`cute::tuple<T...>> &&>`) left outside it; never of
                # an item inside the namespace this `;` follows (`namespace detail {...};`)
                if self.items and self.items[-1].kind not in ("directive", "include") and self.items[-1].scope == scope:
                    self.items[-1].end = node.end_byte  # `struct S {...};` ends at its `;`
                continue
            if t in ("comment", "{", "}"):
                continue
            if t in ("namespace_definition", "linkage_specification") and len(scope) >= MAX_NAMESPACES:
                raise Deep(node.start_byte, f"more than {MAX_NAMESPACES} nested namespace or extern blocks")
            if t == "namespace_definition":
                body = node.child_by_field_name("body")
                head = self.data[node.start_byte:body.start_byte].decode(errors="replace") if body else ""
                if body is not None:
                    self.read(body.children, scope + (" ".join(head.split()) + " {",))
                continue
            if t == "linkage_specification":
                body = node.child_by_field_name("body")
                lang = _text(node.child_by_field_name("value"))
                if body is not None and body.type == "declaration_list":
                    self.read(body.children, scope + (f"extern {lang} {{",))
                elif body is not None:
                    self.read([body], scope + (f"extern {lang} {{",))
                continue
            self.items.append(self.item(node, scope))
            self.nodes.append(node)

    def item(self, node: Node, scope: tuple[str, ...]) -> Item:
        t = node.type
        it = Item(node.start_byte, node.end_byte, "other", scope=scope)
        if t in ("preproc_def", "preproc_function_def"):
            it.kind = "directive"
        elif t == "preproc_call":
            directive = _text(node.child_by_field_name("directive")).strip()
            arg = _text(node.child_by_field_name("argument")).strip()
            it.kind = "directive" if directive in ("#undef", "#pragma") and arg != "once" else "other"
        elif t == "preproc_include":
            it.kind, it.header = "include", _text(node.child_by_field_name("path"))
        elif t == "using_declaration":
            named = node.named_children[-1] if node.named_children else None
            if any(c.type == "namespace" for c in node.children):
                it.kind, it.header = "using", _text(named)
            else:
                it.kind, it.device, it.defines = "type", True, frozenset({_base(named)})
        elif t in ("alias_declaration", "namespace_alias_definition"):
            name = node.child_by_field_name("name") or (node.named_children[0] if node.named_children else None)
            it.kind, it.device, it.defines = "type", True, frozenset({_text(name)})
        else:
            self.declaration(node, it)
        if it.kind not in ("directive", "include"):
            it.uses = frozenset(_idents(node) - it.defines)
        return it

    def declaration(self, node: Node, it: Item) -> None:
        inner = node
        while inner.type == "template_declaration":
            # an ERROR beside the parameter list is tree-sitter's misreading of a default argument
            # with `>` in it (`bool RegisterSized = sizeof_bits<T>::value >= 32`: CUTLASS's Array)
            nxt = next((c for c in inner.named_children if c.type not in ("template_parameter_list", "comment", "ERROR")),
                       None)
            if nxt is None:
                return
            inner = nxt
        t = inner.type
        it.label = " ".join(_text(inner).split("{")[0].split())[:60]
        if t == "template_instantiation":  # `template __global__ void k<float>(float*);`, `template struct X<int>;`
            target = _declarator_name(inner.child_by_field_name("declarator"))
            spec = next((c for c in inner.named_children if c.type in _TYPES), None)
            it.kind, it.attach = "instantiation", frozenset({_base(target) if target is not None else _base(
                spec.child_by_field_name("name") if spec is not None else None)})
            it.device = True
            return
        if t == "alias_declaration":   # an alias template: `template <typename T> using vec4_t = vec_n_t<T, 4>;`
            name = inner.child_by_field_name("name")
            it.kind, it.device, it.defines = "type", True, frozenset({_text(name)} if name is not None else ())
            it.label = _text(name) or it.label
            return
        if t in _TYPES:
            declared, attach = _type_names(inner)
            it.kind, it.device, it.defines, it.attach = "type", True, frozenset(declared), frozenset(attach)
            it.label = next(iter(declared | attach), it.label)
            return
        if t == "type_definition":
            _typedef(it, inner, {_base(_declarator_name(d)) for d in inner.children_by_field_name("declarator")})
            return
        if t == "declaration" and "typedef" in {_text(inner.child_by_field_name("declarator"))} | {
                _text(e).strip() for e in inner.children if e.type == "ERROR"}:
            # `struct {...} typedef Name;` (DeepSpeed ragged_dtypes.h): tree-sitter reads the keyword as
            # the declarator and the name as an error, or the keyword as an error and the name as the
            # declarator (after a multi-line `struct`); it is a type definition all the same
            names = {_text(c) for e in inner.children if e.type == "ERROR" for c in e.named_children
                     if c.type == "identifier"} | {_base(_declarator_name(d)) for d in
                                                   inner.children_by_field_name("declarator")}
            _typedef(it, inner, names - {"typedef", ""})
            return
        if t not in ("function_definition", "declaration", "field_declaration"):
            return
        specs = _specifiers(inner)
        spec = inner.child_by_field_name("type")
        defines: set[str] = set()
        if spec is not None and spec.type in _TYPES and spec.child_by_field_name("body") is not None:
            defines |= _type_names(spec)[0]   # `struct S {...} s;`
        fdecl = _function_declarator(inner.child_by_field_name("declarator"))
        if fdecl is not None and (t == "function_definition" or inner.child_by_field_name("declarator") == fdecl  # `is`: never (a new Node each call)
                                  or fdecl.parent is not None and fdecl.parent.type in (
                                      "pointer_declarator", "reference_declarator")):
            name = _declarator_name(fdecl.child_by_field_name("declarator"))
            it.label = _text(name) or it.label
            if name is not None and name.type == "qualified_identifier":
                scopes = set()
                q: Node | None = name
                while q is not None and q.type == "qualified_identifier":
                    scopes.add(_base(q.child_by_field_name("scope")))
                    q = q.child_by_field_name("name")
                it.attach = frozenset(s for s in scopes if s)
            base = _base(name)
            if "__global__" in specs:
                it.kind, it.defines = "kernel", frozenset({base})
                return
            it.kind = "function"
            # a declaration alone has no code to leave out: device code may name it where nothing
            # runs (CuTe's `decltype(detail::has_tuple_size((T*)0))`); not an operator's, which
            # nothing names (the host's `operator<<(std::ostream&, half_t)` would come with its type)
            it.device = bool(specs & _DEVICE_SPECS) or t == "declaration"
            if name is not None and name.type == "operator_name" or base.startswith("operator"):
                it.kind = "operator"
                it.device = bool(specs & _DEVICE_SPECS)
            it.defines = frozenset({base} | defines) if base else frozenset(defines)
            return
        names = {_base(_declarator_name(d)) for d in inner.children_by_field_name("declarator")}
        it.kind, it.defines = ("type" if defines and not names - {""} else "variable"), frozenset((names | defines) - {""})
        it.device = bool(defines) or bool(specs & (_DEVICE_SPECS | {"const"}))
        it.label = next(iter(sorted(it.defines)), it.label)
