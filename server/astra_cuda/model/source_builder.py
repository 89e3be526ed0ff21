"""The one pass over tree-sitter's tree that builds a file's `SourceModel`: kernels (also those
whose head a macro writes), their parameters and spec comments, top-level items with what each
defines and uses under their namespaces and preprocessor conditionals, constants, syntax errors,
and launch sites (also those written in a launch macro's body, found where it is used).

Long because the model is built in one pass over the tree: kernels, launch sites, items,
constants share the walk and its state (the conditionals and blocks around what is read)."""
from __future__ import annotations

import bisect
from dataclasses import replace

from tree_sitter import Node

from .dim3 import dim3_var
from .file_model import (SPEC_MARK, ConfigVar, Guard, Item, Kernel, LaunchSite, Param, Positions, SourceModel,
                         SpecComment)
from .macros import conditions_within, kernel_macros, launch_macros, substitute
from .syntax import IDENT_TYPES, WORD, text as node_text, declarator_name, function_declarator, nodes_of, parser, specifiers

# Nested namespace / extern "C" blocks read (real code nests a handful; 5,000 ran Python's
# recursion out): deeper ones are a syntax problem, and the cut refuses them (compile.declarations.MAX_NAMESPACES).
MAX_BLOCKS = 100
# `using namespace X;` for these is kept in every unit that keeps their header (device code uses
# the names unqualified); other using-directives are host code's business.
DEVICE_NAMESPACES = ("cooperative_groups", "cg", "nvcuda", "cub", "cuda", "cute", "cutlass")


def param_of(index: int, node: Node, txt: Positions, data: bytes | None = None) -> Param | None:
    """Parameter `index` of a kernel, from its declaration `node`; `data`: the bytes the tree was
    parsed from (its nodes' texts sliced from them: `Builder._text`)."""
    src = data if data is not None else txt.data

    def node_text(n: Node | None) -> str:
        return src[n.start_byte:n.end_byte].decode("utf-8", errors="replace") if n is not None else ""
    decl = node.child_by_field_name("declarator")
    name, _ = declarator_name(decl)
    if name is None:
        return None
    type_node = node.child_by_field_name("type")
    base_type = node_text(type_node) if type_node else ""
    # Qualifiers before the type (const) and inside the declarator (__restrict__, *).
    pre_quals = [node_text(c) for c in node.children if c.type == "type_qualifier"]
    is_pointer = False
    restrict = False
    d = decl
    while d is not None and d.type not in ("identifier",):
        if d.type in ("pointer_declarator", "array_declarator", "abstract_pointer_declarator"):
            is_pointer = True
        for c in d.children:
            if c.type == "type_qualifier" and "restrict" in node_text(c):
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
                 is_const=is_const, restrict=restrict, span=txt.span(node),
                 pack=node.type == "variadic_parameter_declaration")


def is_spec_comment(node: Node | None) -> bool:
    return (node is not None and node.type == "comment"
            and node_text(node).lstrip("/*").lstrip().startswith(SPEC_MARK))


class Builder:
    def __init__(self, text: str, path: str | None = None):
        self.txt = Positions(text)
        self.model = SourceModel(text=text)
        self._ambiguous: set[str] = set()  # names given two different constant values
        self.path = path
        self.guards: tuple[Guard, ...] = ()  # the conditionals around what is being read now
        self._blocks = 0  # namespace / extern "C" blocks around what is being read now
        self._data = self.txt.data  # the bytes the tree was parsed from (`run`)
        self._root: Node | None = None   # the tree read (`run`)
        # every name of the tree (`_names`): the names' start bytes, and (end byte, lexed, text)
        self._named: tuple[list[int], list[tuple[int, bool, str]]] | None = None
        # (qualified name, parameter types) -> the first kernel of that name and parameters in
        # `model.kernels`: a scan of the list for each kernel was quadratic (12,000 kernels: minutes)
        self._kernel_at: dict[tuple[str, tuple[str, ...]], int] = {}

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

    def _text(self, node: Node | None) -> str:
        """A node's text, sliced from the bytes its tree was parsed from: as `syntax.text`, without
        the Python call per node that reading it back through the parse's source costs."""
        return self._data[node.start_byte:node.end_byte].decode("utf-8", errors="replace") if node is not None else ""

    def _names(self, node: Node) -> set[str]:
        """`syntax.identifiers(node)`, read from one query over the whole tree (`_named`) instead of
        one per item: 2 million one-line items (`a;`) made the per-item query most of the model."""
        if self._named is None:
            found = nodes_of(self._root, (*sorted(IDENT_TYPES), "preproc_arg")) if self._root is not None else []
            self._named = ([n.start_byte for n in found],
                           [(n.end_byte, n.type == "preproc_arg", self._text(n)) for n in found])
        starts, named = self._named
        out: set[str] = set()
        for i in range(bisect.bisect_left(starts, node.start_byte), bisect.bisect_left(starts, node.end_byte)):
            end, lexed, word = named[i]
            if end <= node.end_byte:
                out.update(WORD.findall(word)) if lexed else out.add(word)
        return out

    def run(self, root: Node, data: bytes | None = None) -> SourceModel:
        """The model of the text, read from its tree `root`; `data`: the bytes that tree was parsed
        from where they are not the text's own (attribute macros blanked)."""
        self._data = data if data is not None else self.txt.data
        self._root, self._named = root, None
        self._collect_errors(root)
        self._kernel_macros, self._object_macros = kernel_macros(root)
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
        for n in nodes_of(root, ("preproc_function_def",)):
            if n.type == "preproc_function_def":
                name, params, value = (n.child_by_field_name(f) for f in ("name", "parameters", "value"))
                body = self._text(value).replace("\\\n", "\n") if value is not None else ""
                if name is not None:
                    every[self._text(name)] = ([self._text(c) for c in params.named_children
                                                  if c.type == "identifier"] if params is not None else [], body)
        macros = launch_macros(every)
        if not macros:
            return
        for fn in nodes_of(root, ("function_definition",)):
            for call in nodes_of(fn, ("call_expression",)):
                callee = call.child_by_field_name("function")
                args_node = call.child_by_field_name("arguments")
                args = [self._text(a) for a in args_node.named_children if a.type != "comment"] \
                    if args_node is not None else []
                if callee is not None and callee.type == "identifier" and self._text(callee) in macros:
                    names, body = macros[self._text(callee)]
                    expanded = substitute(body, dict(zip(names, args)))
                else:
                    # a launch macro handed to a dispatch macro (`DISPATCH_BY_KV_CACHE_DTYPE(dt, name,
                    # CALL_RESHAPE_AND_CACHE)`), which calls it with each case's types: the launch
                    # read with the macro's own parameter names, which template inference resolves
                    passed = next((a for a in args if a in macros), None)
                    if passed is None or args_node is None:
                        continue
                    callee, body = args_node.named_children[args.index(passed)], macros[passed][1]
                    expanded = substitute(body, {})
                start, end = call.start_byte - fn.start_byte, call.end_byte - fn.start_byte
                fn_bytes = fn.text or b""
                text = (fn_bytes[:start] + b"{ " + expanded.encode() + b"; }" + fn_bytes[end:]).decode(
                    "utf-8", errors="replace")
                sub = parser().parse(text.encode()).root_node
                sub_builder = Builder(text)
                sub_builder._launches(sub)
                shift = fn.start_point[0]  # the function's own lines start here in the file

                def moved(var: ConfigVar | None) -> ConfigVar | None:
                    return replace(var, line=var.line + shift) if var is not None and var.line is not None else var
                for site in sub_builder.model.launches:
                    # the `if`s of the macro's own body it is launched under (`if (threads_per_head == 4)`)
                    at = sub.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
                    conds = conditions_within(at, start)
                    self.model.launches.append(replace(site, span=self.txt.span(call), via_macro=self._text(callee),
                                                       grid_var=moved(site.grid_var), block_var=moved(site.block_var),
                                                       conditions=site.conditions + conds))

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
            header = self._text(path).strip('<>"') if path is not None else ""
            add(Item("include", frozenset(), frozenset(), span, text, namespaces, extern_c, header=header,
                     device=True))
        elif t in ("preproc_def", "preproc_function_def"):
            name = node.child_by_field_name("name")
            uses = self._names(node) - {self._text(name)} if name is not None else self._names(node)
            add(Item("macro", frozenset({self._text(name)}) if name is not None else frozenset(),
                     frozenset(uses), span, text, namespaces, extern_c, device=True))
            value = node.child_by_field_name("value")
            if t == "preproc_def" and name is not None and value is not None:
                self._constant(self._text(name), self._text(value))
        elif t == "namespace_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            ns = self._text(name) if name is not None else ""
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
            add(Item("type", frozenset(names), frozenset(self._names(node) - names), span, text, namespaces,
                     extern_c, device=True))
        elif t == "namespace_alias_definition":  # namespace cg = cooperative_groups;
            aliased = [self._text(c) for c in node.named_children if c.type == "namespace_identifier"]
            add(Item("type", frozenset(aliased[:1]), frozenset(aliased[1:]), span, text, namespaces, extern_c,
                     device=True))
        elif t == "using_declaration":
            target = self._text(node.named_children[-1]) if node.named_children else ""
            if any(c.type == "namespace" for c in node.children):  # using namespace X;
                kind = "using" if target.split("::")[0] in DEVICE_NAMESPACES else "other"
                add(Item(kind, frozenset(), frozenset(self._names(node)), span, text, namespaces, extern_c,
                         device=kind == "using"))
            else:                                                 # using std::min;
                short = target.split("::")[-1]
                add(Item("type", frozenset({short}), frozenset(self._names(node)) - {short}, span, text, namespaces,
                         extern_c, device=True))
        elif t == "declaration":
            self._declaration(node, namespaces, extern_c)
        elif t in ("preproc_if", "preproc_ifdef"):
            self._conditional(node, (), (self.path, node.start_byte), namespaces, extern_c)
        elif t == "preproc_call":
            directive = node.child_by_field_name("directive")
            if directive is not None and self._text(directive) in ("#undef", "#error"):
                arg = node.child_by_field_name("argument")
                undefined = frozenset(WORD.findall(self._text(arg))[:1]) if arg is not None and \
                    self._text(directive) == "#undef" else frozenset()
                add(Item("macro", undefined, frozenset(), span, text.rstrip("\n"), namespaces, extern_c, device=True))
        elif t in ("comment", ";", "{", "}", "#endif"):
            return
        elif t == "expression_statement" or t == "ERROR":
            return
        else:
            add(Item("other", frozenset(), frozenset(self._names(node)), span, text, namespaces, extern_c))

    def _conditional(self, node: Node, heads: tuple[str, ...], key: tuple[str | None, int],
                     namespaces: tuple[str, ...], extern_c: bool) -> None:
        """One branch of `#if/#ifdef/#elif/#else`: its items carry the branch as a guard; the
        next branch (the `alternative`) follows with this one's head kept."""
        t = node.type
        if t == "preproc_else":
            head = "#else"
        elif t == "preproc_ifdef":
            name = node.child_by_field_name("name")
            head = f"{self._text(node.children[0])} {self._text(name) if name is not None else ''}".strip()
        else:  # preproc_if, preproc_elif (and #elifdef, read as written)
            cond = node.child_by_field_name("condition")
            head = f"{self._text(node.children[0])} {' '.join(self._text(cond).split()) if cond else ''}".strip()
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
            names.add(self._text(n))
        if node.type == "type_definition":
            for d in node.children_by_field_name("declarator"):
                nm, _ = declarator_name(d)
                if nm:
                    names.add(nm)
        if node.type == "alias_declaration":
            n = node.child_by_field_name("name")
            if n is not None:
                names.add(self._text(n))
        if node.type == "enum_specifier":
            body = node.child_by_field_name("body")
            if body is not None:
                for e in body.named_children:
                    en = e.child_by_field_name("name")
                    if en is not None:
                        names.add(self._text(en))
        # `struct Foo {...} foo;` is a declaration, handled elsewhere.
        return names

    def _declaration(self, node: Node, namespaces: tuple[str, ...], extern_c: bool) -> None:
        span = self.txt.span(node)
        text = self.txt.slice(node.start_byte, node.end_byte)
        specs = specifiers(node)
        names: set[str] = set()
        is_fn_decl = False
        for d in node.children_by_field_name("declarator"):
            nm, _ = declarator_name(d)
            if nm:
                names.add(nm)
            if function_declarator(d) is not None and d.type == "function_declarator":
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
        self._add(Item(kind, frozenset(names), frozenset(self._names(node) - names), span, text,
                                     namespaces, extern_c, device=device or kind == "device_function"))
        if kind == "variable" and specs & {"const", "constexpr"}:
            for d in node.children_by_field_name("declarator"):
                target, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
                if d.type == "init_declarator" and target is not None and target.type == "identifier" \
                        and value is not None:
                    self._constant(self._text(target), self._text(value))
                    if namespaces:   # `gated_act::threads` too, which a launcher's local `threads` cannot hide
                        self._constant("::".join((*namespaces, self._text(target))), self._text(value))

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
                    template_params.append(" ".join(self._text(p).split()))
                    # a non-type parameter (`int N`, `T (*F)(const T&)`) is named by its declarator;
                    # `typename T` by its identifier
                    decl = p.child_by_field_name("declarator")
                    nm = declarator_name(decl)[0] if decl is not None else None
                    # `template <typename> class Epilogue`: the name is in its last part
                    named = p.named_children[-1:] if p.type == "template_template_parameter_declaration" \
                        else p.named_children
                    if nm is None:
                        nm = next((self._text(c) for n in named for c in [n, *n.named_children]
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
                n for d in fn.children_by_field_name("declarator") for n in [declarator_name(d)[0]] if n}
            specs = specifiers(fn)
            kind = "type" if fn.type in ("struct_specifier", "class_specifier", "alias_declaration") else (
                "kernel_decl" if "__global__" in specs else
                "device_function" if "__device__" in specs else "variable")
            self._add(Item(kind, frozenset(names), frozenset(self._names(outer) - set(names)), span,
                                         text, namespaces, extern_c, device=True))
            return
        specs = specifiers(fn)
        declarator = fn.child_by_field_name("declarator")
        fdecl = function_declarator(declarator)
        name, name_node = declarator_name(fdecl.child_by_field_name("declarator") if fdecl else None)
        if name is None or name_node is None:
            return
        uses = frozenset(self._names(outer) - {name} - set(template_names))
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
        params: list[Param] = []
        plist = fdecl.child_by_field_name("parameters") if fdecl else None
        if plist is not None:
            for p in plist.named_children:
                # `ArgTypes... args` too: the launch passes one argument per element of its pack
                if p.type in ("parameter_declaration", "optional_parameter_declaration",
                              "variadic_parameter_declaration"):
                    param = param_of(len(params), p, self.txt, self._data)
                    if param is not None:
                        params.append(param)
        lb = next((c for c in fn.named_children if c.type == "launch_bounds"), None)
        body = fn.child_by_field_name("body")
        spec = None
        if prev is not None and is_spec_comment(prev) and self._only_space_between(prev, outer):
            spec = SpecComment(self.txt.slice(prev.start_byte, prev.end_byte), self.txt.span(prev))
        qualified = "::".join(namespaces + (name,)) if namespaces else name
        kernel = Kernel(
            name=name, qualified_name=qualified, params=tuple(params),
            template_params=tuple(template_params), template_param_names=tuple(template_names),
            launch_bounds=self._text(lb) if lb is not None else None, extern_c=extern_c,
            span=span, name_span=self.txt.span(name_node),
            signature_span=self.txt.span(plist if plist is not None else name_node, start=outer),
            body_span=self.txt.span(body) if body is not None else span, spec=spec, text=text, uses=uses)
        # the same name with the same parameters is one kernel with several definitions (enable_if on
        # its template arguments); other parameters make another kernel of that name (an overload,
        # named by its parameter list: `extract.name_expression`)
        first = self._kernel_at.get((qualified, tuple(q.type for q in params)))
        if first is None:
            self._kernel_at[(qualified, tuple(q.type for q in params))] = len(self.model.kernels)
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
        params, variadic, value = self._kernel_macros[self._text(callee)]
        args = [a for a in plist.named_children if a.type != "comment"]
        if len(args) < len(params) or (len(args) > len(params) and not variadic):
            return False
        given = {p: self._text(a) for p, a in zip(params, args)}
        if variadic:
            given["__VA_ARGS__"] = ", ".join(self._text(a) for a in args[len(params):])
        head = substitute(substitute(value, given), self._object_macros)
        sub_text = " ".join(head.split()) + " " + self._text(body)
        found = Builder(sub_text).run(parser().parse(sub_text.encode()).root_node).kernels
        if len(found) != 1:
            return False
        k = found[0]
        where = self.txt.span(plist, start=outer)
        named = next((a for a in args if self._text(a) == k.name), callee)
        spec = None
        if prev is not None and is_spec_comment(prev) and self._only_space_between(prev, outer):
            spec = SpecComment(self.txt.slice(prev.start_byte, prev.end_byte), self.txt.span(prev))
        span, text = self.txt.span(outer), self.txt.slice(outer.start_byte, outer.end_byte)
        kernel = replace(k, qualified_name="::".join(namespaces + (k.name,)), extern_c=extern_c, span=span,
                         name_span=self.txt.span(named), signature_span=where, body_span=self.txt.span(body),
                         params=tuple(replace(q, span=where) for q in k.params), spec=spec, text=text,
                         uses=k.uses | frozenset(self._names(outer) - {k.name}))
        self._kernel_at.setdefault((kernel.qualified_name, tuple(q.type for q in kernel.params)), len(self.model.kernels))
        self.model.kernels.append(kernel)
        self._add(Item("kernel", frozenset({k.name}), kernel.uses, span, text, namespaces, extern_c, device=True))
        return True

    def _only_space_between(self, a: Node, b: Node) -> bool:
        return self.txt.slice(a.end_byte, b.start_byte).strip() == ""  # blank lines are fine

    def _launches(self, root: Node) -> None:
        """Every `<<<...>>>` launch, with the function it is written in (the innermost around it;
        lambdas are no function_definition: they share its locals). The calls and functions are
        found by a query, in source order; the functions open around a call are a stack."""
        around: list[Node] = []
        for n in nodes_of(root, ("function_definition", "call_expression")):
            while around and around[-1].end_byte <= n.start_byte:
                around.pop()
            if n.type == "function_definition":
                around.append(n)
                continue
            kcs = next((c for c in n.children if c.type == "kernel_call_syntax"), None)
            if kcs is not None:
                self._launch(n, kcs, around[-1] if around else None, root)

    def _launch(self, call: Node, kcs: Node, fn: Node | None, root: Node) -> None:
        fn_name = declarator_name(function_declarator(fn.child_by_field_name("declarator")))[0] \
            if fn is not None else None
        func = call.child_by_field_name("function")
        targs = None
        prefix = ""
        while func is not None and func.type == "qualified_identifier":
            scope = func.child_by_field_name("scope")
            prefix += (self._text(scope) + "::") if scope is not None else "::"
            func = func.child_by_field_name("name")
        if func is not None and func.type == "template_function":
            targs_node = func.child_by_field_name("arguments")
            targs = self._text(targs_node) if targs_node is not None else None
            func = func.child_by_field_name("name")
        name = prefix + self._text(func) if func is not None else "?"
        cfg_nodes = [c for c in kcs.named_children if c.type != "comment"]
        cfg: list[str | None] = [self._text(c) for c in cfg_nodes]
        cfg += [None] * (4 - len(cfg))
        grid_var, block_var = (dim3_var(cfg_nodes[i], fn, fn_name, call, root)
                               if i < len(cfg_nodes) and cfg_nodes[i].type == "identifier" else None
                               for i in (0, 1))
        args_node = call.child_by_field_name("arguments")
        args = tuple(self._text(a) for a in args_node.named_children if a.type != "comment") \
            if args_node is not None else ()
        self.model.launches.append(LaunchSite(
            kernel=name, template_args=targs, grid=cfg[0] or "", block=cfg[1] or "", shared_mem=cfg[2],
            stream=cfg[3], args=args, span=self.txt.span(call), function=fn_name, grid_var=grid_var,
            block_var=block_var))
