"""The source model: what is in a `.cu` file, read with tree-sitter-cuda.

`parse(text)` finds every `__global__` kernel (name, template parameters, parameters,
launch bounds, spec comment, exact ranges), every `<<<...>>>` launch site, and the top-level
items (device functions, types, constants, macros, includes) with the identifiers each one
uses — what `astra_cuda.compile.extract` needs to cut a stand-alone compilation unit.

Positions are 0-based lines and character columns (LSP's convention for ASCII text).

Long because the model is built in one pass over the tree: kernels, launch sites, items, constants.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

import tree_sitter_cuda
from tree_sitter import Language, Node, Tree

from . import parse_time
from .syntax import walk as _walk

SPEC_MARK = "@astra"
# `using namespace X;` for these is kept in every unit that keeps their header (device code uses
# the names unqualified); other using-directives are host code's business.
# Nested namespace / extern "C" blocks read (real code nests a handful; 5,000 ran Python's
# recursion out): deeper ones are a syntax problem, and the cut refuses them (compile.declarations.MAX_NAMESPACES).
MAX_BLOCKS = 100
MAX_MACRO_NESTING = 4          # launch macros used inside launch macros, levels expanded
MAX_EXPANSION = 1 << 16        # bytes of one expanded launch macro (a hostile file's nesting blows up)
DEVICE_NAMESPACES = ("cooperative_groups", "cg", "nvcuda", "cub", "cuda", "cute", "cutlass")


@lru_cache(maxsize=1)
def language() -> Language:
    return Language(tree_sitter_cuda.language())


def parser() -> parse_time.Parser:
    """tree-sitter-cuda's parser, within its CPU-time limit (`parse_time`: a hostile text is refused)."""
    return parse_time.Parser(language())


@dataclass(frozen=True)
class Span:
    start_line: int
    start_col: int
    end_line: int
    end_col: int
    start_byte: int
    end_byte: int

    def contains_line(self, line: int) -> bool:
        return self.start_line <= line <= self.end_line

    def to_json(self) -> dict:
        """[line, column] pairs counted from 1, as a user reads them (the end column exclusive)."""
        return {"start": [self.start_line + 1, self.start_col + 1], "end": [self.end_line + 1, self.end_col + 1]}


@dataclass(frozen=True)
class Param:
    index: int
    name: str
    type: str          # as written, without the name: 'const __half* __restrict__'
    base_type: str     # element or value type: '__half', 'int64_t', 'T'
    is_pointer: bool
    is_const: bool     # the pointee is const (or the scalar is const)
    restrict: bool
    span: Span

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "type": self.type, "base_type": self.base_type,
                "pointer": self.is_pointer, "const": self.is_const, "restrict": self.restrict}


@dataclass(frozen=True)
class SpecComment:
    text: str   # the whole comment, '/* @astra ... */'
    span: Span

    @property
    def body(self) -> str:
        """The TOML between the marker line and the closing '*/'."""
        inner = self.text[2:-2] if self.text.endswith("*/") else self.text[2:]
        head, _, rest = inner.partition(SPEC_MARK)
        return rest

    @property
    def body_first_line(self) -> int:
        """0-based file line of the body's first line (the marker line itself)."""
        return self.span.start_line + self.text[: self.text.index(SPEC_MARK)].count("\n")

    @property
    def body_first_col(self) -> int:
        """Column where the body starts on its first line (just after the marker)."""
        before = self.text[: self.text.index(SPEC_MARK)]
        last_nl = before.rfind("\n")
        col = len(before) - (last_nl + 1)
        if last_nl < 0:
            col += self.span.start_col
        return col + len(SPEC_MARK)


@dataclass(frozen=True)
class ConfigVar:
    """A launch-configuration argument that is a plain name of a `dim3` variable.

    `dims` are the dim3's constructor arguments as written, when its one declaration in the
    launching host function precedes the launch, encloses it and nothing may change it after;
    otherwise `dims` is None and `problem` says why it was not followed."""
    name: str
    dims: tuple[str, ...] | None
    line: int | None        # 0-based line of the declaration, when there is one in the function
    problem: str | None = None


@dataclass(frozen=True)
class LaunchSite:
    kernel: str
    template_args: str | None
    grid: str
    block: str
    shared_mem: str | None
    stream: str | None
    args: tuple[str, ...]
    span: Span
    function: str | None  # the enclosing host function
    grid_var: ConfigVar | None = None   # set when `grid` is the name of a dim3 variable
    block_var: ConfigVar | None = None  # likewise for `block`
    via_macro: str | None = None        # the launch is written in this macro's body, used here
    conditions: tuple[str, ...] = ()    # host conditions it is launched under that its span does not show

    def to_json(self) -> dict:
        out = {"kernel": self.kernel, "template_args": self.template_args, "grid": self.grid,
               "block": self.block, "shared_mem": self.shared_mem, "stream": self.stream,
               "args": list(self.args), "line": self.span.start_line + 1, "function": self.function}
        return {**out, "via_macro": self.via_macro} if self.via_macro else out


@dataclass(frozen=True)
class Kernel:
    name: str
    qualified_name: str             # with enclosing namespaces: 'ns::kernel'
    params: tuple[Param, ...]
    template_params: tuple[str, ...]       # as written: 'typename T', 'int N = 4'
    template_param_names: tuple[str, ...]  # 'T', 'N'
    launch_bounds: str | None
    extern_c: bool
    span: Span              # the whole definition, from `template<` (or the first specifier) to `}`
    name_span: Span
    signature_span: Span    # from the start of the definition to the end of the parameter list
    body_span: Span
    spec: SpecComment | None
    text: str               # source text of `span`
    uses: frozenset[str]    # identifiers the kernel refers to
    overloads: tuple[Span, ...] = ()  # further definitions of the same name (enable_if overloads)

    @property
    def is_template(self) -> bool:
        return bool(self.template_params)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def instantiated(self, targs: dict[str, str]) -> "Kernel":
        """The kernel with each parameter whose type is a template parameter instantiated with a
        pointer type (`scale_type scale` with `at::Half *`) a pointer parameter to that pointee."""
        params = []
        for p in self.params:
            arg = " ".join(targs.get(p.base_type, "").split())
            if p.is_pointer or not arg.endswith("*") or arg.count("*") != 1:
                params.append(p)
                continue
            words = arg[:-1].split()
            pointee = " ".join(w for w in words if w not in ("const", "volatile", "__restrict__"))
            params.append(replace(p, type=arg, base_type=pointee, is_pointer=True,
                                              is_const="const" in words))
        return replace(self, params=tuple(params)) if params != list(self.params) else self

    def to_json(self) -> dict:
        return {"name": self.name, "qualified_name": self.qualified_name,
                "params": [p.to_json() for p in self.params],
                "template_params": list(self.template_params), "launch_bounds": self.launch_bounds,
                "extern_c": self.extern_c, "range": self.span.to_json(),
                "name_range": self.name_span.to_json(), "has_spec": self.spec is not None}


@dataclass(frozen=True)
class Item:
    """A top-level item of the file, with what it defines and what it uses."""

    kind: str          # 'include' | 'macro' | 'kernel' | 'device_function' | 'host_function'
                       # | 'type' | 'variable' | 'other'
    defines: frozenset[str]
    uses: frozenset[str]
    span: Span
    text: str
    namespaces: tuple[str, ...] = ()  # enclosing namespaces, outermost first
    extern_c: bool = False
    header: str | None = None          # for includes: the header name
    device: bool = False               # device-side code or data (or usable on both sides)
    guards: tuple["Guard", ...] = ()   # the preprocessor conditionals around it, outermost first
    path: str | None = None            # the file it comes from (None: the file being modelled)


@dataclass(frozen=True)
class Guard:
    """One branch of a preprocessor conditional: `heads` are the directive lines of the
    conditional's branches up to and including this one ('#ifdef X', '#else'), so that an
    item of a later branch can be emitted under the same conditions. `key` tells one
    conditional from another."""
    key: tuple[str | None, int]
    heads: tuple[str, ...]

    @property
    def branch(self) -> int:
        return len(self.heads) - 1


@dataclass
class SourceModel:
    text: str
    kernels: list[Kernel] = field(default_factory=list)
    launches: list[LaunchSite] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    syntax_errors: list[Span] = field(default_factory=list)
    # Names with one constant value in the file: object-like macros and file-scope const/constexpr
    # integers, name -> value as written ('MAX_THREADS' -> '1024').
    constants: dict[str, str] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel | None:
        """The kernel of that name; of overloads, the first with a spec above it."""
        hits = [k for k in self.kernels if name in (k.name, k.qualified_name)]
        return next((k for k in hits if k.spec is not None), hits[0] if hits else None)

    def launches_of(self, name: str) -> list[LaunchSite]:
        short = name.split("::")[-1]
        return [site for site in self.launches if site.kernel.split("::")[-1] == short]

    @property
    def includes(self) -> list[Item]:
        return [i for i in self.items if i.kind == "include"]

    @property
    def device_functions(self) -> list[Item]:
        return [i for i in self.items if i.kind == "device_function"]


class _Text:
    """Byte <-> (line, char column) conversion for one source text."""

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for m in re.finditer(b"\n", self.data):
            self.line_starts.append(m.end())
        # UTF-8's continuation bytes: a column counts the bytes before it less these, so it is
        # found without decoding the line (decoding made a 4 MB line of `a;` quadratic: minutes)
        self.continuations = [m.start() for m in re.finditer(rb"[\x80-\xbf]", self.data)]

    def col(self, line: int, byte_col: int) -> int:
        start = self.line_starts[line] if line < len(self.line_starts) else len(self.data)
        end = min(start + byte_col, len(self.data))
        if not self.continuations:
            return end - start
        return end - start - (bisect.bisect_left(self.continuations, end) - bisect.bisect_left(self.continuations, start))

    def span(self, node: Node, start: Node | None = None) -> Span:
        s = start or node
        (sl, sc), (el, ec) = s.start_point, node.end_point
        return Span(sl, self.col(sl, sc), el, self.col(el, ec), s.start_byte, node.end_byte)

    def slice(self, start_byte: int, end_byte: int) -> str:
        return self.data[start_byte:end_byte].decode("utf-8", errors="replace")


_IDENT_TYPES = {"identifier", "type_identifier", "namespace_identifier"}
_WORD = re.compile(r"[A-Za-z_]\w*")  # lexing an opaque macro body; C++ structure comes from the tree


def _idents(node: Node) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in _IDENT_TYPES:
            out.add(n.text.decode("utf-8", errors="replace"))
        elif n.type in ("preproc_arg",):
            out.update(_WORD.findall(n.text.decode("utf-8", errors="replace")))
        stack.extend(n.children)
    return out


def _specifiers(fn: Node) -> set[str]:
    """CUDA execution-space and storage specifiers written on a definition/declaration."""
    out = set()
    for c in fn.children:
        t = c.text.decode("utf-8", errors="replace")
        if c.type in ("__global__", "__device__", "__host__", "__forceinline__", "__noinline__"):
            out.add(c.type)
        elif c.type in ("storage_class_specifier", "type_qualifier", "attribute_specifier",
                        "attribute_declaration", "ms_declspec_modifier"):
            out.update(t.split())
        elif not c.is_named and t.startswith("__") and t.endswith("__"):
            out.add(t)
    return out


def _declarator_name(decl: Node | None) -> tuple[str | None, Node | None]:
    """The declared name (and its node) inside a possibly nested declarator."""
    while decl is not None:
        if decl.type in ("identifier", "field_identifier", "type_identifier", "operator_name",
                         "destructor_name"):
            return decl.text.decode("utf-8", errors="replace"), decl
        if decl.type == "qualified_identifier":
            name = decl.child_by_field_name("name")
            return decl.text.decode("utf-8", errors="replace"), name
        nxt = decl.child_by_field_name("declarator")
        if nxt is None:
            for c in decl.named_children:
                if c.type in ("identifier", "qualified_identifier", "field_identifier",
                              "function_declarator", "pointer_declarator", "reference_declarator",
                              "array_declarator", "init_declarator"):
                    nxt = c
                    break
        decl = nxt
    return None, None


def _function_declarator(decl: Node | None) -> Node | None:
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    return decl


def _param(index: int, node: Node, txt: _Text) -> Param | None:
    decl = node.child_by_field_name("declarator")
    name, _ = _declarator_name(decl)
    if name is None:
        return None
    type_node = node.child_by_field_name("type")
    base_type = type_node.text.decode("utf-8", errors="replace") if type_node else ""
    # Qualifiers before the type (const) and inside the declarator (__restrict__, *).
    pre_quals = [c.text.decode() for c in node.children if c.type == "type_qualifier"]
    is_pointer = False
    restrict = False
    d = decl
    while d is not None and d.type not in ("identifier",):
        if d.type in ("pointer_declarator", "array_declarator", "abstract_pointer_declarator"):
            is_pointer = True
        for c in d.children:
            if c.type == "type_qualifier" and "restrict" in c.text.decode():
                restrict = True
        d = d.child_by_field_name("declarator")
    full = txt.slice(node.start_byte, node.end_byte)
    name_start = full.rfind(name)
    type_text = " ".join(full[:name_start].split()) if name_start >= 0 else base_type
    if "__restrict__" in " ".join(pre_quals) or "__restrict__" in type_text:
        restrict = True
    is_const = "const" in pre_quals or type_text.split("*")[0].strip().startswith("const") or \
        " const" in type_text.split("*")[0]
    return Param(index=index, name=name, type=type_text, base_type=base_type, is_pointer=is_pointer,
                 is_const=is_const, restrict=restrict, span=txt.span(node))


def _is_spec_comment(node: Node | None) -> bool:
    return (node is not None and node.type == "comment"
            and node.text.decode("utf-8", errors="replace").lstrip("/*").lstrip().startswith(SPEC_MARK))


class _Builder:
    def __init__(self, text: str, path: str | None = None):
        self.txt = _Text(text)
        self.model = SourceModel(text=text)
        self._ambiguous: set[str] = set()  # names given two different constant values
        self.path = path
        self.guards: tuple[Guard, ...] = ()  # the conditionals around what is being read now
        self._blocks = 0  # namespace / extern "C" blocks around what is being read now

    def _add(self, item: Item) -> None:
        if self.guards or self.path is not None:
            item = replace(item, guards=self.guards, path=self.path)
        self.model.items.append(item)

    def _constant(self, name: str, value: str) -> None:
        value = value.strip()
        if not value or name in self._ambiguous:
            return
        if self.model.constants.get(name, value) != value:
            del self.model.constants[name]
            self._ambiguous.add(name)
            return
        self.model.constants[name] = value

    def run(self, root: Node) -> SourceModel:
        self._collect_errors(root)
        self._kernel_macros, self._object_macros = _macros(root)
        self._items(root.children, namespaces=(), extern_c=False)
        self._launches(root)
        self._macro_launches(root)
        return self.model

    def _macro_launches(self, root: Node) -> None:
        """Launches written in a function-like macro's body (`#define LAUNCH(ACT) ...
        k<scalar_t, ACT<scalar_t>><<<grid, block>>>(...)`) are found where the macro is used:
        the using function is parsed again with the macro expanded there, so its dim3
        variables are followed as for a launch written in place. Each such launch is placed at
        the macro's use and says which macro it came through."""
        every: dict[str, tuple[list[str], str]] = {}
        for n in _walk(root):
            if n.type == "preproc_function_def":
                name, params, value = (n.child_by_field_name(f) for f in ("name", "parameters", "value"))
                body = value.text.decode().replace("\\\n", "\n") if value is not None else ""
                if name is not None:
                    every[name.text.decode()] = ([c.text.decode() for c in params.named_children
                                                  if c.type == "identifier"] if params is not None else [], body)
        macros = _launch_macros(every)
        if not macros:
            return
        for fn in (n for n in _walk(root) if n.type == "function_definition"):
            for call in (c for c in _walk(fn) if c.type == "call_expression"):
                callee = call.child_by_field_name("function")
                args_node = call.child_by_field_name("arguments")
                args = [a.text.decode() for a in args_node.named_children if a.type != "comment"] \
                    if args_node is not None else []
                if callee is not None and callee.type == "identifier" and callee.text.decode() in macros:
                    params, body = macros[callee.text.decode()]
                    expanded = _substitute(body, dict(zip(params, args)))
                else:
                    # a launch macro handed to a dispatch macro (`DISPATCH_BY_KV_CACHE_DTYPE(dt, name,
                    # CALL_RESHAPE_AND_CACHE)`), which calls it with each case's types: the launch
                    # read with the macro's own parameter names, which template inference resolves
                    passed = next((a for a in args if a in macros), None)
                    if passed is None:
                        continue
                    callee, body = args_node.named_children[args.index(passed)], macros[passed][1]
                    expanded = _substitute(body, {})
                start, end = call.start_byte - fn.start_byte, call.end_byte - fn.start_byte
                fn_bytes = fn.text
                text = (fn_bytes[:start] + b"{ " + expanded.encode() + b"; }" + fn_bytes[end:]).decode(
                    "utf-8", errors="replace")
                sub = parser().parse(text.encode()).root_node
                sub_builder = _Builder(text)
                sub_builder._launches(sub)
                shift = fn.start_point[0]  # the function's own lines start here in the file

                def moved(var: ConfigVar | None) -> ConfigVar | None:
                    return replace(var, line=var.line + shift) if var is not None and var.line is not None else var
                for site in sub_builder.model.launches:
                    self.model.launches.append(replace(site, span=self.txt.span(call), via_macro=callee.text.decode(),
                                                       grid_var=moved(site.grid_var), block_var=moved(site.block_var)))

    def _collect_errors(self, root: Node) -> None:
        stack = [root]
        while stack:
            n = stack.pop()
            if n.type == "ERROR" or n.is_missing:
                self.model.syntax_errors.append(self.txt.span(n))
                continue
            if n.has_error:
                stack.extend(n.children)

    def _items(self, nodes: list[Node], namespaces: tuple[str, ...], extern_c: bool) -> None:
        if self._blocks >= MAX_BLOCKS:  # read no deeper (each block is a level of this recursion)
            if nodes:
                self.model.syntax_errors.append(self.txt.span(nodes[0]))
            return
        self._blocks += 1
        try:
            self._items_in(nodes, namespaces, extern_c)
        finally:
            self._blocks -= 1

    def _items_in(self, nodes: list[Node], namespaces: tuple[str, ...], extern_c: bool) -> None:
        prev: Node | None = None
        for node in nodes:
            self._item(node, prev, namespaces, extern_c)
            # A macro invocation with no `;` (`INSTANTIATE(__half)`) is parsed as a statement that
            # runs on, takes the comments after it as its last children and ends in a missing `;`:
            # the last of those comments is still the one right above the next item.
            kids = [c for c in node.children if not c.is_missing] if node.type != "comment" else []
            last = kids[-1] if kids else None
            prev = last if last is not None and last.type == "comment" else node

    def _item(self, node: Node, prev: Node | None, namespaces: tuple[str, ...], extern_c: bool) -> None:
        t = node.type
        span = self.txt.span(node)
        text = self.txt.slice(node.start_byte, node.end_byte)
        add = self._add
        if t == "preproc_include":
            path = node.child_by_field_name("path")
            header = path.text.decode().strip('<>"') if path is not None else ""
            add(Item("include", frozenset(), frozenset(), span, text, namespaces, extern_c, header=header,
                     device=True))
        elif t in ("preproc_def", "preproc_function_def"):
            name = node.child_by_field_name("name")
            uses = _idents(node) - {name.text.decode()} if name is not None else _idents(node)
            add(Item("macro", frozenset({name.text.decode()}) if name is not None else frozenset(),
                     frozenset(uses), span, text, namespaces, extern_c, device=True))
            value = node.child_by_field_name("value")
            if t == "preproc_def" and name is not None and value is not None:
                self._constant(name.text.decode(), value.text.decode())
        elif t == "namespace_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            ns = name.text.decode() if name is not None else ""
            if body is not None:
                self._items(body.children, namespaces + (ns,), extern_c)
        elif t == "linkage_specification":
            body = node.child_by_field_name("body")
            if body is not None and body.type == "declaration_list":
                self._items(body.children, namespaces, True)
            elif body is not None and body.type in ("function_definition", "template_declaration"):
                self._function(body, prev, namespaces, True, wrapper=node)
            elif body is not None:
                self._item(body, prev, namespaces, True)
        elif t in ("function_definition", "template_declaration"):
            self._function(node, prev, namespaces, extern_c)
        elif t in ("struct_specifier", "class_specifier", "union_specifier", "enum_specifier",
                   "type_definition", "alias_declaration"):
            names = self._defined_names(node)
            add(Item("type", frozenset(names), frozenset(_idents(node) - names), span, text, namespaces,
                     extern_c, device=True))
        elif t == "namespace_alias_definition":  # namespace cg = cooperative_groups;
            names = [c.text.decode() for c in node.named_children if c.type == "namespace_identifier"]
            add(Item("type", frozenset(names[:1]), frozenset(names[1:]), span, text, namespaces, extern_c,
                     device=True))
        elif t == "using_declaration":
            target = node.named_children[-1].text.decode() if node.named_children else ""
            if any(c.type == "namespace" for c in node.children):  # using namespace X;
                kind = "using" if target.split("::")[0] in DEVICE_NAMESPACES else "other"
                add(Item(kind, frozenset(), frozenset(_idents(node)), span, text, namespaces, extern_c,
                         device=kind == "using"))
            else:                                                 # using std::min;
                short = target.split("::")[-1]
                add(Item("type", frozenset({short}), frozenset(_idents(node)) - {short}, span, text, namespaces,
                         extern_c, device=True))
        elif t == "declaration":
            self._declaration(node, namespaces, extern_c)
        elif t in ("preproc_if", "preproc_ifdef"):
            self._conditional(node, (), (self.path, node.start_byte), namespaces, extern_c)
        elif t == "preproc_call":
            directive = node.child_by_field_name("directive")
            if directive is not None and directive.text.decode() in ("#undef", "#error"):
                arg = node.child_by_field_name("argument")
                names = frozenset(_WORD.findall(arg.text.decode())[:1]) if arg is not None and \
                    directive.text.decode() == "#undef" else frozenset()
                add(Item("macro", names, frozenset(), span, text.rstrip("\n"), namespaces, extern_c, device=True))
        elif t in ("comment", ";", "{", "}", "#endif"):
            return
        elif t == "expression_statement" or t == "ERROR":
            return
        else:
            add(Item("other", frozenset(), frozenset(_idents(node)), span, text, namespaces, extern_c))

    def _conditional(self, node: Node, heads: tuple[str, ...], key, namespaces, extern_c) -> None:
        """One branch of `#if/#ifdef/#elif/#else`: its items carry the branch as a guard; the
        next branch (the `alternative`) follows with this one's head kept."""
        t = node.type
        if t == "preproc_else":
            head = "#else"
        elif t == "preproc_ifdef":
            name = node.child_by_field_name("name")
            head = f"{node.children[0].text.decode()} {name.text.decode() if name is not None else ''}".strip()
        else:  # preproc_if, preproc_elif (and #elifdef, read as written)
            cond = node.child_by_field_name("condition")
            head = f"{node.children[0].text.decode()} {' '.join(cond.text.decode().split()) if cond else ''}".strip()
        heads = heads + (head,)
        skip = {(c.start_byte, c.end_byte) for c in (node.child_by_field_name("condition"),
                                                     node.child_by_field_name("name"),
                                                     node.child_by_field_name("alternative")) if c is not None}
        saved = self.guards
        self.guards = saved + (Guard(key, heads),)
        try:
            self._items([c for c in node.children if c.is_named and (c.start_byte, c.end_byte) not in skip],
                        namespaces, extern_c)
        finally:
            self.guards = saved
        alt = node.child_by_field_name("alternative")
        if alt is not None:
            self._conditional(alt, heads, key, namespaces, extern_c)

    def _defined_names(self, node: Node) -> set[str]:
        names: set[str] = set()
        n = node.child_by_field_name("name")
        if n is not None:
            names.add(n.text.decode())
        if node.type == "type_definition":
            for d in node.children_by_field_name("declarator"):
                nm, _ = _declarator_name(d)
                if nm:
                    names.add(nm)
        if node.type == "alias_declaration":
            n = node.child_by_field_name("name")
            if n is not None:
                names.add(n.text.decode())
        if node.type == "enum_specifier":
            body = node.child_by_field_name("body")
            if body is not None:
                for e in body.named_children:
                    en = e.child_by_field_name("name")
                    if en is not None:
                        names.add(en.text.decode())
        # `struct Foo {...} foo;` is a declaration, handled elsewhere.
        return names

    def _declaration(self, node: Node, namespaces: tuple[str, ...], extern_c: bool) -> None:
        span = self.txt.span(node)
        text = self.txt.slice(node.start_byte, node.end_byte)
        specs = _specifiers(node)
        names: set[str] = set()
        is_fn_decl = False
        for d in node.children_by_field_name("declarator"):
            nm, _ = _declarator_name(d)
            if nm:
                names.add(nm)
            if _function_declarator(d) is not None and d.type == "function_declarator":
                is_fn_decl = True
        type_node = node.child_by_field_name("type")
        if type_node is not None and type_node.type in ("struct_specifier", "class_specifier", "enum_specifier"):
            names |= self._defined_names(type_node)
        device = bool(specs & {"__device__", "__constant__", "__managed__", "__global__", "__host__",
                               "constexpr", "const"}) or (type_node is not None and type_node.type in (
                                   "struct_specifier", "class_specifier", "enum_specifier"))
        kind = "variable"
        if is_fn_decl:
            kind = "device_function" if specs & {"__device__", "__global__"} else "host_function"
            if "__global__" in specs:
                kind = "kernel_decl"
        self._add(Item(kind, frozenset(names), frozenset(_idents(node) - names), span, text,
                                     namespaces, extern_c, device=device or kind == "device_function"))
        if kind == "variable" and specs & {"const", "constexpr"}:
            for d in node.children_by_field_name("declarator"):
                target, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if d.type == "init_declarator" and target is not None and target.type == "identifier" \
                        and value is not None:
                    self._constant(target.text.decode(), value.text.decode())
                    if namespaces:   # `gated_act::threads` too, which a launcher's local `threads` cannot hide
                        self._constant("::".join((*namespaces, target.text.decode())), value.text.decode())

    def _function(self, node: Node, prev: Node | None, namespaces: tuple[str, ...], extern_c: bool,
                  wrapper: Node | None = None) -> None:
        outer = wrapper or node  # `extern "C" __global__ ...` starts at `extern`
        template_params: list[str] = []
        template_names: list[str] = []
        fn = node
        while fn.type == "template_declaration":
            plist = fn.child_by_field_name("parameters")
            if plist is not None:
                for p in plist.named_children:
                    template_params.append(" ".join(p.text.decode().split()))
                    # a non-type parameter (`int N`, `T (*F)(const T&)`) is named by its declarator;
                    # `typename T` by its identifier
                    decl = p.child_by_field_name("declarator")
                    nm = _declarator_name(decl)[0] if decl is not None else None
                    # `template <typename> class Epilogue`: the name is in its last part
                    named = p.named_children[-1:] if p.type == "template_template_parameter_declaration" \
                        else p.named_children
                    if nm is None:
                        nm = next((c.text.decode() for n in named for c in [n, *n.named_children]
                                   if c.type in ("type_identifier", "identifier")), None)
                    if nm:
                        template_names.append(nm)
            inner = next((c for c in fn.named_children
                          if c.type in ("function_definition", "template_declaration", "declaration",
                                        "struct_specifier", "class_specifier", "alias_declaration")), None)
            if inner is None:
                break
            fn = inner
        span = self.txt.span(outer)
        text = self.txt.slice(outer.start_byte, outer.end_byte)
        if fn.type != "function_definition":
            # A templated type, variable or declaration.
            names = self._defined_names(fn) if fn.type != "declaration" else {
                n for d in fn.children_by_field_name("declarator") for n in [_declarator_name(d)[0]] if n}
            specs = _specifiers(fn)
            kind = "type" if fn.type in ("struct_specifier", "class_specifier", "alias_declaration") else (
                "kernel_decl" if "__global__" in specs else
                "device_function" if "__device__" in specs else "variable")
            self._add(Item(kind, frozenset(names), frozenset(_idents(outer) - set(names)), span,
                                         text, namespaces, extern_c, device=True))
            return
        specs = _specifiers(fn)
        declarator = fn.child_by_field_name("declarator")
        fdecl = _function_declarator(declarator)
        name, name_node = _declarator_name(fdecl.child_by_field_name("declarator") if fdecl else None)
        if name is None:
            return
        uses = frozenset(_idents(outer) - {name} - set(template_names))
        if name in self._kernel_macros and not template_params and fdecl is not None \
                and self._macro_kernel(outer, fn, fdecl, prev, namespaces, extern_c):
            return
        if "__global__" not in specs:
            kind = "device_function" if "__device__" in specs else "host_function"
            # a constexpr function is usable on both sides (nvcc compiles it for the device too
            # under --expt-relaxed-constexpr): CUTLASS's exponent_bias_cxx17 is device code
            self._add(Item(kind, frozenset({name}), uses, span, text, namespaces, extern_c,
                                         device=kind == "device_function" or "constexpr" in specs))
            return
        params = []
        plist = fdecl.child_by_field_name("parameters") if fdecl else None
        if plist is not None:
            for p in plist.named_children:
                if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                    param = _param(len(params), p, self.txt)
                    if param is not None:
                        params.append(param)
        lb = next((c for c in fn.named_children if c.type == "launch_bounds"), None)
        body = fn.child_by_field_name("body")
        spec = None
        if _is_spec_comment(prev) and self._only_space_between(prev, outer):
            spec = SpecComment(self.txt.slice(prev.start_byte, prev.end_byte), self.txt.span(prev))
        qualified = "::".join(namespaces + (name,)) if namespaces else name
        kernel = Kernel(
            name=name, qualified_name=qualified, params=tuple(params),
            template_params=tuple(template_params), template_param_names=tuple(template_names),
            launch_bounds=lb.text.decode() if lb is not None else None, extern_c=extern_c,
            span=span, name_span=self.txt.span(name_node),
            signature_span=self.txt.span(plist if plist is not None else name_node, start=outer),
            body_span=self.txt.span(body) if body is not None else span, spec=spec, text=text, uses=uses)
        # the same name with the same parameters is one kernel with several definitions (enable_if on
        # its template arguments); other parameters make another kernel of that name (an overload,
        # named by its parameter list: `extract.name_expression`)
        first = next((i for i, k in enumerate(self.model.kernels) if k.qualified_name == qualified
                      and [q.type for q in k.params] == [q.type for q in params]), None)
        if first is None:
            self.model.kernels.append(kernel)
        else:
            k0 = self.model.kernels[first]
            self.model.kernels[first] = replace(k0, overloads=k0.overloads + (span,),
                                                uses=k0.uses | uses, spec=k0.spec or spec)
        self._add(Item("kernel", frozenset({name}), uses, span, text, namespaces, extern_c,
                                     device=True))

    def _macro_kernel(self, outer: Node, fn: Node, fdecl: Node, prev: Node | None, namespaces: tuple[str, ...],
                      extern_c: bool) -> bool:
        """A kernel whose head is written by a macro of this file: `DEFINE_KERNEL(name, bool A) {...}`
        with `#define DEFINE_KERNEL(k, ...) template <typename T, __VA_ARGS__> __global__ void k(P p)`
        (flash-attention's flash_fwd_launch_template.h), which tree-sitter reads as a host function
        named after the macro. The use is expanded (its arguments, then the file's object-like
        macros in the result, first definition) and parsed with the body; the kernel keeps the
        spans of the user's text: its head is the macro's use, its name the argument that names it."""
        callee = fdecl.child_by_field_name("declarator")
        plist = fdecl.child_by_field_name("parameters")
        body = fn.child_by_field_name("body")
        if callee is None or plist is None or body is None:
            return False
        params, variadic, value = self._kernel_macros[callee.text.decode()]
        args = [a for a in plist.named_children if a.type != "comment"]
        if len(args) < len(params) or (len(args) > len(params) and not variadic):
            return False
        given = {p: a.text.decode() for p, a in zip(params, args)}
        if variadic:
            given["__VA_ARGS__"] = ", ".join(a.text.decode() for a in args[len(params):])
        head = _substitute(_substitute(value, given), self._object_macros)
        sub_text = " ".join(head.split()) + " " + body.text.decode("utf-8", errors="replace")
        found = _Builder(sub_text).run(parser().parse(sub_text.encode()).root_node).kernels
        if len(found) != 1:
            return False
        k = found[0]
        where = self.txt.span(plist, start=outer)
        named = next((a for a in args if a.text.decode() == k.name), callee)
        spec = None
        if _is_spec_comment(prev) and self._only_space_between(prev, outer):
            spec = SpecComment(self.txt.slice(prev.start_byte, prev.end_byte), self.txt.span(prev))
        span, text = self.txt.span(outer), self.txt.slice(outer.start_byte, outer.end_byte)
        kernel = replace(k, qualified_name="::".join(namespaces + (k.name,)), extern_c=extern_c, span=span,
                         name_span=self.txt.span(named), signature_span=where, body_span=self.txt.span(body),
                         params=tuple(replace(q, span=where) for q in k.params), spec=spec, text=text,
                         uses=k.uses | frozenset(_idents(outer) - {k.name}))
        self.model.kernels.append(kernel)
        self._add(Item("kernel", frozenset({k.name}), kernel.uses, span, text, namespaces, extern_c, device=True))
        return True

    def _only_space_between(self, a: Node, b: Node) -> bool:
        return self.txt.slice(a.end_byte, b.start_byte).strip() == ""  # blank lines are fine

    def _launches(self, root: Node) -> None:
        stack: list[tuple[Node, Node | None]] = [(root, None)]
        while stack:
            n, fn = stack.pop()
            if n.type == "function_definition":  # lambdas are no function_definition: they share its locals
                fn = n
            if n.type == "call_expression":
                kcs = next((c for c in n.children if c.type == "kernel_call_syntax"), None)
                if kcs is not None:
                    self._launch(n, kcs, fn, root)
            stack.extend((c, fn) for c in reversed(n.children))

    def _launch(self, call: Node, kcs: Node, fn: Node | None, root: Node) -> None:
        fn_name = _declarator_name(_function_declarator(fn.child_by_field_name("declarator")))[0] \
            if fn is not None else None
        func = call.child_by_field_name("function")
        targs = None
        prefix = ""
        while func is not None and func.type == "qualified_identifier":
            scope = func.child_by_field_name("scope")
            prefix += (scope.text.decode() + "::") if scope is not None else "::"
            func = func.child_by_field_name("name")
        if func is not None and func.type == "template_function":
            targs_node = func.child_by_field_name("arguments")
            targs = targs_node.text.decode() if targs_node is not None else None
            func = func.child_by_field_name("name")
        name = prefix + func.text.decode() if func is not None else "?"
        cfg_nodes = [c for c in kcs.named_children if c.type != "comment"]
        cfg = [c.text.decode() for c in cfg_nodes]
        cfg += [None] * (4 - len(cfg))
        grid_var, block_var = (_dim3_var(cfg_nodes[i], fn, fn_name, call, root)
                               if i < len(cfg_nodes) and cfg_nodes[i].type == "identifier" else None
                               for i in (0, 1))
        args_node = call.child_by_field_name("arguments")
        args = tuple(a.text.decode() for a in args_node.named_children if a.type != "comment") \
            if args_node is not None else ()
        self.model.launches.append(LaunchSite(
            kernel=name, template_args=targs, grid=cfg[0] or "", block=cfg[1] or "", shared_mem=cfg[2],
            stream=cfg[3], args=args, span=self.txt.span(call), function=fn_name, grid_var=grid_var,
            block_var=block_var))


def _macros(root: Node) -> tuple[dict[str, tuple[list[str], bool, str]], dict[str, str]]:
    """The file's function-like macros that write a kernel's head (`__global__` in the body):
    name -> (parameters, variadic, body); and its object-like macros: name -> the first
    definition's value."""
    kernels: dict[str, tuple[list[str], bool, str]] = {}
    objects: dict[str, str] = {}
    for n in _walk(root):
        name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
        if name is None:
            continue
        body = value.text.decode("utf-8", errors="replace").replace("\\\n", " ") if value is not None else ""
        if n.type == "preproc_function_def" and "__global__" in body:
            ps = n.child_by_field_name("parameters")
            kids = ps.children if ps is not None else []
            kernels[name.text.decode()] = ([c.text.decode() for c in kids if c.type == "identifier"],
                                           any(c.type == "..." for c in kids), body)
        elif n.type == "preproc_def":
            objects.setdefault(name.text.decode(), body.strip())
    return kernels, objects


def _launch_macros(every: dict[str, tuple[list[str], str]]) -> dict[str, tuple[list[str], str]]:
    """The function-like macros that launch a kernel, with their bodies expanded: one whose body
    writes `<<<`, and one whose body uses such a macro (`#define LAUNCH_ALL(U) if (pre) { LAUNCH_PRE(U) }
    else { LAUNCH(U) }`), its uses of them replaced by their expansions, as the preprocessor would."""
    launching = {name: m for name, m in every.items() if "<<<" in m[1]}
    for _ in range(MAX_MACRO_NESTING):
        grown = False
        for name, (params, body) in every.items():
            expanded = _expand_uses(body, launching)
            if expanded != body and len(expanded) <= MAX_EXPANSION and launching.get(name, (None, body))[1] != expanded:
                launching[name], grown = (params, expanded), True
        if not grown:
            break
    return launching


def _expand_uses(body: str, macros: dict[str, tuple[list[str], str]]) -> str:
    """`body` with its uses of `macros` replaced by their expansions (one level)."""
    code = ("void __astra_m() { " + body + "; }").encode()
    tree = parser().parse(code).root_node
    edits: list[tuple[int, int, str]] = []
    for call in (n for n in _walk(tree) if n.type == "call_expression"):
        callee = call.child_by_field_name("function")
        args_node = call.child_by_field_name("arguments")
        if callee is None or callee.type != "identifier" or callee.text.decode() not in macros or args_node is None \
                or any(s <= call.start_byte and call.end_byte <= e for s, e, _ in edits):
            continue
        params, inner = macros[callee.text.decode()]
        args = [a.text.decode() for a in args_node.named_children if a.type != "comment"]
        edits.append((call.start_byte, call.end_byte, "{ " + _substitute(inner, dict(zip(params, args))) + "; }"))
    for start, end, value in sorted(edits, reverse=True):
        code = code[:start] + value.encode() + code[end:]
    text = code.decode("utf-8", errors="replace")
    return text[len("void __astra_m() { "):-len("; }")]


def _substitute(body: str, args: dict[str, str]) -> str:
    """A macro body with its parameters replaced by the arguments of one use (identifier
    tokens only, as the preprocessor does; `#p` and `a##b` are left as written)."""
    code = ("void __astra_m() { " + body + "; }").encode()
    tree = parser().parse(code).root_node
    edits = [(n.start_byte, n.end_byte, args[n.text.decode()]) for n in _walk(tree)
             if n.type in _IDENT_TYPES and n.text.decode() in args]
    for start, end, value in sorted(edits, reverse=True):
        code = code[:start] + value.encode() + code[end:]
    text = code.decode("utf-8", errors="replace")
    return text[len("void __astra_m() { "):-len("; }")]


def _is_dim3_type(node: Node | None) -> bool:
    return node is not None and node.text.decode() in ("dim3", "::dim3")


def _dim3_call(value: Node | None) -> Node | None:
    """The argument list of `dim3(a, b)` or `dim3{a, b}`."""
    if value is None:
        return None
    if value.type == "call_expression" and _is_dim3_type(value.child_by_field_name("function")):
        return value.child_by_field_name("arguments")
    if value.type == "compound_literal_expression" and _is_dim3_type(value.child_by_field_name("type")):
        return value.child_by_field_name("value")
    return None


def _local_declarations(name: str, fn: Node) -> list[tuple[Node, Node]]:
    """(declaration, declarator) for every declaration of `name` in a function, parameters included."""
    out = []
    for n in _walk(fn):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                if _declarator_name(d)[0] == name:
                    out.append((n, d))
        elif n.type in ("parameter_declaration", "optional_parameter_declaration"):
            d = n.child_by_field_name("declarator")
            if d is not None and _declarator_name(d)[0] == name:
                out.append((n, d))
    return out


def _declares_dim3(decl: Node, declarator: Node) -> bool:
    type_node = decl.child_by_field_name("type")
    if _is_dim3_type(type_node):
        return True
    # `auto g = dim3(...)`
    return (type_node is not None and type_node.type == "placeholder_type_specifier"
            and declarator.type == "init_declarator"
            and _dim3_call(declarator.child_by_field_name("value")) is not None)


def _dim3_args(decl: Node, declarator: Node) -> tuple[str, ...] | None:
    """The constructor arguments of a dim3 declaration, or None for a form we do not follow."""
    args: list[Node]
    if declarator.type == "identifier":                       # dim3 g;  -> (1, 1, 1)
        args = []
    elif declarator.type == "function_declarator":            # dim3 g(a, b): parsed as a declaration
        params = declarator.child_by_field_name("parameters")
        args = [p for p in params.named_children if p.type != "comment"] if params is not None else []
        # Each argument must be a bare name read as a type; `dim3 g(int a)` or `dim3 g()` declare functions.
        if not args or any(p.type != "parameter_declaration" or p.child_by_field_name("declarator") is not None
                           for p in args):
            return None
    elif declarator.type == "init_declarator":
        target = declarator.child_by_field_name("declarator")
        value = declarator.child_by_field_name("value")
        if target is None or target.type != "identifier" or value is None:
            return None                                        # a reference or pointer to a dim3
        call = _dim3_call(value)
        if call is not None:                                   # = dim3(a, b)  /  = dim3{a, b}
            value = call
        elif not _is_dim3_type(decl.child_by_field_name("type")):
            return None                                        # auto g = <something else>
        if value.type in ("argument_list", "initializer_list"):   # g(a, b)  g{a, b}  g = {a, b}
            args = [a for a in value.named_children if a.type != "comment"]
        else:                                                  # dim3 g = n;
            args = [value]
    else:
        return None
    if len(args) > 3:
        return None
    return tuple(a.text.decode() for a in args) or ("1",)


def _may_change(ident: Node) -> bool:
    """Whether this use of a dim3 variable may change it: only launches and `g.x` reads may not."""
    parent = ident.parent
    if parent is None or parent.type == "kernel_call_syntax":
        return False
    if parent.type == "field_expression" and parent.child_by_field_name("argument") == ident:
        outer = parent.parent
        if outer is None:
            return False
        if outer.type == "assignment_expression" and outer.child_by_field_name("left") == parent:
            return True
        if outer.type == "update_expression":
            return True
        if outer.type == "pointer_expression" and outer.children[0].type == "&":
            return True
        return False
    return True


def _dim3_var(ident: Node, fn: Node | None, fn_name: str | None, call: Node, root: Node) -> ConfigVar | None:
    """What a launch's `grid` or `block` name holds, when it names a dim3; None when it names
    something else (a size, a macro) — those are read as they are written."""
    name = ident.text.decode()
    where = f"`{fn_name}`" if fn_name else "the launching function"
    local = _local_declarations(name, fn) if fn is not None else []
    if not local:
        at_file_scope = any(_declares_dim3(n, d) and _declarator_name(d)[0] == name
                            for n in _outside_functions(root) if n.type == "declaration"
                            for d in n.children_by_field_name("declarator"))
        return ConfigVar(name, None, None, f"is declared outside {where}") if at_file_scope else None
    if not any(_declares_dim3(d, dd) for d, dd in local):
        return None
    if len(local) > 1:
        # one name declared in several scopes (`if (use_vec) { dim3 block(d / 4); k<..>(..); } else
        # { dim3 block(d); ... }`): the launch sees the declaration C++ name lookup finds, the one
        # before it in the innermost block that encloses it
        enclosing = [(d, dd) for d, dd in local if d.type == "declaration" and d.parent is not None
                     and d.end_byte <= call.start_byte and d.parent.start_byte <= call.start_byte
                     and call.end_byte <= d.parent.end_byte]
        innermost = max((d.parent.start_byte for d, _ in enclosing), default=None)
        seen = [(d, dd) for d, dd in enclosing if d.parent.start_byte == innermost]
        if len(seen) == 1:
            local = seen
    decl, declarator = local[0]
    line = decl.start_point[0]
    if len(local) > 1:
        lines = ", ".join(str(d.start_point[0] + 1) for d, _ in local)
        return ConfigVar(name, None, line, f"is declared more than once in {where} (lines {lines})")
    if decl.type != "declaration":
        return ConfigVar(name, None, line, f"is a parameter of {where}")
    scope = decl.parent
    if decl.end_byte > call.start_byte or scope is None or not (
            scope.start_byte <= call.start_byte and call.end_byte <= scope.end_byte):
        return ConfigVar(name, None, line, "is not declared before the launch in a scope enclosing it")
    declared_at = {_declarator_name(dd)[1] for _, dd in _local_declarations(name, fn)}
    # only uses in the declaration's own scope name it (another branch's `dim3 grid` is another variable)
    changes = [n for n in _walk(scope) if n.type == "identifier" and n.text.decode() == name
               and n not in declared_at and _may_change(n) and _reaches(n, call, scope)]
    dims = _dim3_args(decl, declarator)
    if changes:   # `g.x = DIVIDE(n, 256);`, `if (c) g.x = 1024;` before the launch: its dimensions
        full = _member_values(name, changes, scope, call, list(dims or ()) + ["1"] * (3 - len(dims or ())))
        if full is None:
            changed = changes[0]
            return ConfigVar(name, None, line, f"may be changed on line {changed.start_point[0] + 1}")
        while len(full) > 1 and full[-1].strip() == "1":
            full.pop()
        dims = tuple(full) if dims is not None else None
    if dims is None:
        return ConfigVar(name, None, line, "is initialised in a form that is not a dim3 constructor call")
    return ConfigVar(name, dims, line)


_LOOPS = ("for_statement", "for_range_loop", "while_statement", "do_statement")
_LEAVES = ("break_statement", "return_statement", "continue_statement", "goto_statement")


def _reaches(change: Node, call: Node, scope: Node) -> bool:
    """Whether a change written at `change` may run before the launch `call` on some path of
    one call of the launcher (`scope`: the block that declares the variable). Not when it comes
    after the launch with no loop inside `scope` around both, nor when the two sit in the two
    branches of one `if`/`else` (or `?:`), nor in an earlier `case` of a switch that leaves it
    (`break`) before the launch's case: another branch's `grid.x /= 2` is not this launch's."""
    def up(n: Node) -> list[Node]:
        out = []
        while n is not None and n != scope:
            out.append(n)
            n = n.parent
        return out
    mine, its = up(change), up(call)
    common = next((n for n in mine if n in its), scope)
    if common == change or common == call:
        return True
    n = common
    while n is not None and n != scope:
        if n.type in _LOOPS:
            return True
        n = n.parent
    if change.start_byte > call.start_byte:
        return False
    a, b = (mine[mine.index(common) - 1], its[its.index(common) - 1]) if common != scope else (mine[-1], its[-1])
    if common.type in ("if_statement", "conditional_expression"):
        branches = {common.child_by_field_name("consequence"), common.child_by_field_name("alternative")}
        if a in branches and b in branches:
            return False
    if common.type == "compound_statement" and common.parent is not None \
            and common.parent.type == "switch_statement" and a.type == b.type == "case_statement":
        last = [c for c in a.named_children if c.type != "comment"][-1:]
        if last and last[0].type in _LEAVES:
            return False
    return True


def _member_values(name: str, changes: list[Node], scope: Node, call: Node, dims: list[str]) -> list[str] | None:
    """The dimensions at the launch of a dim3 whose members the statements before it set, on the
    launch's own path down from the dim3's block: `g.x = e;` (also `g.x /= 2`, reading the value so
    far), and such statements in the branches of an `if`/`else` before it, whose value is then the
    C conditional `(c) ? (then) : (else)`. None when a change is of any other kind (`&g`,
    `tune(g)`, in a loop, in a condition)."""
    left = set(changes)
    values = _run_until(name, scope, call, dict(zip("xyz", dims)), left)
    return [values[a] for a in "xyz"] if values is not None and not left else None


def _inside(c: Node, n: Node) -> bool:
    return n.start_byte <= c.start_byte < n.end_byte


def _run_until(name: str, node: Node, call: Node, values: dict[str, str], left: set[Node]) -> dict[str, str] | None:
    """The members when the launch `call` inside `node` runs (see `_member_values`); the
    changes read are taken out of `left`."""
    if node.type in ("compound_statement", "case_statement"):
        for s in node.named_children:
            if _inside(call, s):
                return _run_until(name, s, call, values, left)
            mine = {c for c in left if _inside(c, s)}
            out = _run_members(name, s, values, mine)
            if out is None:
                return None
            values = out
            left -= mine
        return values
    if node.type == "if_statement":
        branch = next((b for f in ("consequence", "alternative") if (b := node.child_by_field_name(f)) is not None
                       and _inside(call, b)), None)
        if branch is not None and not any(_inside(c, node.child_by_field_name("condition")) for c in left):
            return _run_until(name, branch, call, values, left)
        return None
    if node.type == "else_clause":
        inner = next((c for c in node.named_children if _inside(call, c)), None)
        return _run_until(name, inner, call, values, left) if inner is not None else None
    # the launch's own statement (or one this does not follow, such as a loop): no change inside
    return None if any(_inside(c, node) and c.start_byte < call.start_byte for c in left) else values


def _run_members(name: str, stmt: Node, values: dict[str, str], changes: set[Node]) -> dict[str, str] | None:
    """The dim3's members after `stmt` runs (see `_member_values`)."""
    if not any(stmt.start_byte <= c.start_byte < stmt.end_byte for c in changes):
        return values
    if stmt.type in ("compound_statement", "case_statement"):
        for s in stmt.named_children:
            if s.type == "comment":
                continue
            out = _run_members(name, s, values, changes)
            if out is None:
                return None
            values = out
        return values
    if stmt.type == "if_statement":
        cond = stmt.child_by_field_name("condition")
        then, other = stmt.child_by_field_name("consequence"), stmt.child_by_field_name("alternative")
        if cond is None or then is None or any(cond.start_byte <= c.start_byte < cond.end_byte for c in changes):
            return None
        branch = next((c for c in other.named_children if c.type != "comment"), None) if other is not None else None
        a = _run_members(name, then, values, changes)
        b = _run_members(name, branch, values, changes) if branch is not None else values
        if a is None or b is None:
            return None
        test = cond.text.decode()
        test = test[1:-1].strip() if test.startswith("(") and test.endswith(")") else test
        return {k: a[k] if a[k] == b[k] else f"({test}) ? ({a[k]}) : ({b[k]})" for k in "xyz"}
    if stmt.type != "expression_statement":
        return None
    assign = next((c for c in stmt.named_children if c.type != "comment"), None)
    if assign is None or assign.type != "assignment_expression":
        return None
    target, right, op = (assign.child_by_field_name(f) for f in ("left", "right", "operator"))
    if target is None or right is None or op is None or target.type != "field_expression":
        return None
    arg, field = target.child_by_field_name("argument"), target.child_by_field_name("field")
    if arg is None or field is None or arg.text.decode() != name or field.text.decode() not in values:
        return None
    value = _members_read(right, name, values)
    if value is None:
        return None
    axis = field.text.decode()
    if op.type != "=":
        value = f"({values[axis]}) {op.type[:-1]} ({value})"
    return {**values, axis: value}


def _members_read(expr: Node, name: str, values: dict[str, str]) -> str | None:
    """`expr`'s text with each `g.x` it reads replaced by the value so far; None if it names `g`
    otherwise (`f(g)`)."""
    edits = []
    for n in _walk(expr):
        if n.type == "identifier" and n.text.decode() == name:
            fe = n.parent
            field = fe.child_by_field_name("field") if fe is not None and fe.type == "field_expression" else None
            if field is None or field.text.decode() not in values or fe.child_by_field_name("argument") != n:
                return None
            edits.append((fe.start_byte, fe.end_byte, f"({values[field.text.decode()]})"))
    text = expr.text
    for a, b, v in sorted(edits, reverse=True):
        text = text[:a - expr.start_byte] + v.encode() + text[b - expr.start_byte:]
    return text.decode()


def _outside_functions(root: Node):
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        if n.type != "function_definition":
            stack.extend(reversed(n.children))


@lru_cache(maxsize=512)
def parse_expression(text: str) -> Node | None:
    """One C++ expression as tree-sitter reads it; None unless `text` is exactly one well-formed
    expression (so a launch's `a < b ? a : b` can be read by its structure)."""
    code = f"void __astra_expr() {{ ({text}); }}".encode("utf-8")
    root = parser().parse(code).root_node
    if root.has_error:
        return None
    body = root.named_children[0].child_by_field_name("body") if root.named_children else None
    stmts = [c for c in body.named_children if c.type != "comment"] if body is not None else []
    if len(stmts) != 1 or stmts[0].type != "expression_statement" or not stmts[0].named_children:
        return None
    wrapped = stmts[0].named_children[0]
    prefix = len("void __astra_expr() { (")
    if wrapped.type != "parenthesized_expression" or wrapped.start_byte != prefix - 1 \
            or wrapped.end_byte != prefix + len(text.encode("utf-8")) + 1:
        return None
    inner = [c for c in wrapped.named_children if c.type != "comment"]
    return inner[0] if len(inner) == 1 else None


def parse(text: str, path: str | None = None) -> SourceModel:
    """Build the source model of a CUDA source text. Never raises on malformed code: syntax
    problems are listed in `syntax_errors` and the rest of the file is still modelled; only a text
    tree-sitter reads too slowly is refused (`parse_time.TooSlowToParse`, at the line it stopped),
    or one whose tree is larger than Astra walks (`parse_time.TooManyNodes`, before any walk).
    `path` is recorded on the items (for a header read into another file's unit)."""
    return parse_with_tree(text, path)[0]


def parse_with_tree(text: str, path: str | None = None, tree: Tree | None = None) -> tuple[SourceModel, Tree]:
    """The source model and the tree-sitter tree it was built from, for checks that walk the
    tree themselves (one parse for both). `tree`: the text's own parse, when the caller has it."""
    data = text.encode("utf-8")
    with parse_time.reading(path or "the file"):   # its parses and its macros' and launches' share one limit
        try:
            tree = tree or parser().parse(data)
        except parse_time.TooSlowToParse as e:
            raise placed(e, data) from None
        masks = _attribute_macros(tree.root_node, data) if tree.root_node.has_error else []
        if masks:
            buf = bytearray(data)
            for a, b in masks:
                buf[a:b] = bytes(c if c == 0x0A else 0x20 for c in buf[a:b])
            tree = parser().parse(bytes(buf))
        return _Builder(text, path).run(tree.root_node), tree


def placed(e: parse_time.TooSlowToParse, data: bytes) -> parse_time.TooSlowToParse:
    """`e`, refusing the file's own parse of `data`, at its line: where tree-sitter was stopped,
    or the file's start for a tree with too many nodes (the whole file)."""
    if isinstance(e, parse_time.TooManyNodes):
        e.line = 0
    else:
        e.line = data.count(b"\n", 0, e.offset) if e.offset is not None else None
    return e


def _attribute_macros(root: Node, data: bytes) -> list[tuple[int, int]]:
    """Byte ranges of a macro invocation written between `__global__` and the kernel's return
    type (`__global__ LAUNCH_BOUNDS(256) void k(...)`: FlashInfer's sampling kernels). Without the
    macro's definition tree-sitter reads `LAUNCH_BOUNDS` as the return type and the rest as an
    error (or a declaration missing its `;`, the kernel then a host function without its
    template). The parse reads those bytes as blanks (offsets and lines unchanged: every span
    still points into the user's text). A kernel returns void, so a type name right after
    `__global__` followed by `(` in a node that does not parse is such a macro."""
    out = []
    for n in _walk(root):
        if n.type not in ("declaration", "function_definition") or not n.has_error:
            continue
        kids = n.children
        for g, name in zip(kids, kids[1:]):
            if g.type != "__global__" or name.type != "type_identifier":
                continue
            i = name.end_byte
            while i < len(data) and data[i] in b" \t\r\n":
                i += 1
            depth, j = 0, i
            for j in range(i, len(data)):
                depth += {0x28: 1, 0x29: -1}.get(data[j], 0)
                if depth == 0:
                    break
            if i < len(data) and data[i] == 0x28 and depth == 0:
                out.append((name.start_byte, j + 1))
    return out
