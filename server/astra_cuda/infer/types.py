"""Element types: C++ names read through the file and its project headers (typedefs, `using`, the
macros that select them), and the names the dispatch macros around a launch define. The
template arguments a launch gives are `template_args`. Long because a name is read through every
way C++ spells a type — typedefs, `using`, macros, dispatch macros, class templates and their
specializations, a bound base's member types — each a short reader over the same project text."""
from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from ..model import dtypes, exprs, source
from ..compile.project import ProjectContext
from ..model.source import SourceModel
from ..model.syntax import walk as _walk

# ---- element types: typedefs and the macros that select them -----------------------------------

# project headers read for the names inference resolves: more than a unit's, since a vendored
# library a header includes first (FlashInfer's CCCL under 3rdparty/, through cp_async.cuh) fills a
# unit's 64 before the project's own dispatch macros (utils.cuh) are reached
MAX_HEADERS_READ = 512
# ... and at most this much of their text: inference reads types and macros from them, parsed in
# full at about 10 µs a byte (flash-attention's CUTLASS includes are over 4 MB)
MAX_HEADER_BYTES_READ = 2 << 20


class Types:
    """C++ names read through the unit's items (the file and its project headers, with the
    macros defined before each, `#if`/`#ifdef` branches evaluated): `floatX` behind
    `#define ENABLE_BF16` is __nv_bfloat16."""

    def __init__(self, model: SourceModel, path: str | None, context: ProjectContext | None):
        from ..compile import extract
        self.items = []
        if path is not None:
            try:
                reader = extract.header_reader(path, context or ProjectContext(), max_headers=MAX_HEADERS_READ,
                                               max_bytes=MAX_HEADER_BYTES_READ)
                self.items = reader.items(model, path)
            except Exception:  # a header that cannot be read: what the file itself says still counts
                self.items = list(model.items)
        else:
            self.items = list(model.items)
        self.macros: list[tuple[int, str, str | None]] = []  # (position, name, value or None to undefine)
        # answers of `resolve`, `vector_bytes`: items are fixed, the probes ask at every declaration
        self._resolved: dict[tuple[str, int], tuple[str | None, str]] = {}
        self._bytes: dict[tuple[str, frozenset[tuple[str, str]]], int | None] = {}
        # a conditional is decided where it opens (before its first item): an include guard's
        # `#ifndef X` / `#define X` must not switch off the rest of its own header
        self.opens: dict[tuple, int] = {}
        for pos, it in enumerate(self.items):
            for g in it.guards:
                self.opens.setdefault(g.key, pos)
        for d_name, d_value in (context.defines if context else ()):
            self.macros.append((-1, d_name, d_value if d_value is not None else "1"))
        for pos, it in enumerate(self.items):
            if it.kind == "macro" and self._active(it, pos):
                text = it.text.strip()
                if text.startswith("#undef"):
                    for n in it.defines:
                        self.macros.append((pos, n, None))
                elif text.startswith("#define") and it.defines and "(" not in text.split()[1]:
                    parts = text.split(None, 2)
                    self.macros.append((pos, next(iter(it.defines)), parts[2].split("//")[0].strip()
                                        if len(parts) > 2 else "1"))

    def constants(self) -> dict[str, str]:
        """Object-like macros of the file and its project headers in force at its end, and
        the file's and headers' integer constants: name -> value as written."""
        out: dict[str, str] = {}
        for it in self.items:
            if it.path is not None and it.kind == "variable" and len(it.defines) == 1 and "=" in it.text \
                    and ("const" in it.text.split("=")[0]):
                out[next(iter(it.defines))] = it.text.split("=", 1)[1].rstrip().rstrip(";").strip()
        out.update(self.defined_at(len(self.items) + 1))
        return out

    def defined_at(self, pos: int) -> dict[str, str]:
        out: dict[str, str] = {}
        for p, name, value in self.macros:
            if p >= pos:
                break
            if value is None:
                out.pop(name, None)
            else:
                out[name] = value
        return out

    def _cond(self, head: str, macros: dict[str, str]) -> bool | None:
        word, _, rest = head.partition(" ")
        rest = rest.strip()
        if word == "#ifdef":
            return rest in macros
        if word == "#ifndef":
            return rest not in macros
        if word == "#else":
            return True
        if word not in ("#if", "#elif"):
            return None
        node = source.parse_expression(rest)
        if node is None:
            return None
        text = self._pp_expr(node, macros)
        if text is None:
            return None
        try:
            return bool(exprs.evaluate(text, {}))
        except exprs.ExprError:
            return None

    def _pp_expr(self, node, macros: dict[str, str]) -> str | None:
        t = node.type
        if t == "call_expression" and node.child_by_field_name("function") is not None \
                and node.child_by_field_name("function").text.decode() == "defined":
            args = node.child_by_field_name("arguments")
            name = args.named_children[0].text.decode() if args is not None and args.named_children else ""
            return "1" if name in macros else "0"
        if t == "identifier":
            v = macros.get(node.text.decode(), "0")
            return v if v.strip().lstrip("-").isdigit() else ("1" if v else "0")
        if t == "number_literal":
            return node.text.decode().rstrip("uUlL")
        if node.child_count == 0:
            return {"&&": " and ", "||": " or ", "!": " not "}.get(node.text.decode(), node.text.decode())
        parts = [self._pp_expr(c, macros) for c in node.children]
        return None if any(p is None for p in parts) else " ".join(parts)

    def _active(self, item, pos: int) -> bool | None:
        for g in item.guards:
            macros = self.defined_at(self.opens.get(g.key, pos))
            for k, head in enumerate(g.heads):
                v = self._cond(head, macros)
                if v is None:
                    return None
                if k < g.branch and v:
                    return False   # an earlier branch was taken
                if k == g.branch and not v:
                    return False
        return True

    def resolve(self, name: str, depth: int = 0) -> tuple[str | None, str]:
        """(a spelling dtypes knows — a CUDA vector type too —, or None; how it was resolved /
        why not)."""
        k = (name, depth)
        return self._resolved[k] if k in self._resolved else self._resolved.setdefault(k, self._resolve(name, depth))

    def _resolve(self, name: str, depth: int) -> tuple[str | None, str]:
        if dtypes.from_cpp(name) is not None or dtypes.vector_of(name) is not None:
            return name, ""
        if depth > 8:
            return None, f"`{name}` is defined through too many typedefs"
        member = _member_of(name)
        if member is not None:
            return self._member_type(*member, depth)
        cands = [(pos, it) for pos, it in enumerate(self.items) if it.kind == "type" and name in it.defines]
        scope, _, short = name.lstrip(":").rpartition("::")
        if not cands and scope and short.isidentifier():
            # a name written from the global scope, as an instantiation names it (`transformer_engine::fp16`)
            cands = [(pos, it) for pos, it in enumerate(self.items) if it.kind == "type" and short in it.defines
                     and "::".join(ns for ns in it.namespaces if ns) == scope]
            name = short if cands else name
        live = [(pos, it) for pos, it in cands if self._active(it, pos)]
        unknown = [(pos, it) for pos, it in cands if self._active(it, pos) is None]
        if not cands:
            return None, f"no typedef of `{name}` in the file or its project headers"
        if unknown or len(live) != 1:
            return None, (f"`{name}` has {len(cands)} definitions under preprocessor conditions Astra cannot "
                          f"decide" if unknown else f"`{name}` is defined {len(live)} times")
        target = _typedef_target(live[0][1].text, name)
        if target is None:
            return None, f"`{name}` is not a plain typedef"
        spelled, why = self.resolve(target, depth + 1)
        if spelled is None:
            return None, why
        return spelled, f"`{name}` is {spelled}" + (f" ({_why_branch(live[0][1])})" if live[0][1].guards else "")

    def _member_type(self, template: str, args: list[str], member: str, depth: int) -> tuple[str | None, str]:
        """`Traits<float>::Type`: the member type of the class template's explicit specialization
        for those arguments (`template<> struct Traits<half> {using Type = half2;};`), else of
        its primary template with its parameters bound to them; never guessed past a partial
        specialization, which might be the one that matches."""
        written = f"{template}<{', '.join(args)}>::{member}"
        wanted = [self._canonical(a) for a in args]
        primary, partial = None, False
        for pos, it in enumerate(self.items):
            if it.kind != "type" or template not in it.text or not self._active(it, pos):
                continue
            for params, specialized, body in class_templates(it.text, template):
                if specialized is None:
                    primary = (params, body)
                elif not params and [self._canonical(a) for a in specialized] == wanted:
                    return self._resolved_member(member_alias(body, member), {}, written, depth)
                elif params:
                    partial = True
        if partial:
            return None, f"`{written}`: `{template}` has a partial specialization that may match"
        if primary is None:
            return None, f"no definition of the class template `{template}` in the file or its project headers"
        params, body = primary
        return self._resolved_member(member_alias(body, member), dict(zip(params, args)), written, depth)

    def _resolved_member(self, target: str | None, bound: dict[str, str], written: str,
                         depth: int) -> tuple[str | None, str]:
        if target is None:
            return None, f"`{written}` is not a plain member type"
        # a parameter bound as a word, or as the class a member is named through (`typename
        # Base::compute_t`, Base flash-attention's defaulted `Kernel_traits_base<…>`)
        target = " ".join(_bound_word(w, bound) for w in target.replace("<", " < ").replace(">", " > ").split()) \
            .replace(" < ", "<").replace(" > ", ">").replace(" >", ">")
        spelled, why = self.resolve(target, depth + 1)
        return (spelled, f"`{written}` is {spelled}") if spelled is not None else (None, why)

    def _canonical(self, name: str) -> str:
        spelled, _ = self.resolve(name.strip())
        return spelled or " ".join(name.split())

    def packet_sizes(self) -> dict[str, int]:
        """`x128::size` for typedefs of a 128-bit packet template (`Packed128<floatX>`):
        16 bytes over the element's size."""
        out = {}
        for pos, it in enumerate(self.items):
            if it.kind != "type" or not self._active(it, pos):
                continue
            for name in it.defines:
                target = _typedef_target(it.text, name)
                if target and "<" in target and "128" in target.split("<")[0]:
                    elem = target.split("<", 1)[1].rstrip("> ").strip()
                    spelled, _ = self.resolve(elem)
                    dt = dtypes.from_cpp(spelled) if spelled else None
                    if dt is not None:
                        out[f"{name}::size"] = 16 // dt.itemsize
        return out

    def vector_bytes(self, spelled: str, bound: dict[str, str]) -> int | None:
        """sizeof a type a kernel reinterprets its pointers as, with the kernel's template
        parameters `bound` to their arguments: an element or CUDA vector type (through typedefs),
        or a vector template over one — `vec_n_t<scalar_t, VEC_SIZE>`, `AlignedVector<T, 8>`:
        that many of the element, the convention of every such helper; `Packed128<T>`: 16 bytes."""
        k = (spelled, frozenset(bound.items()))
        return self._bytes[k] if k in self._bytes else self._bytes.setdefault(k, self._vector_bytes(spelled, bound))

    def scalar(self, spelled: str, bound: dict[str, str]) -> str | None:
        """The scalar type (a spelling dtypes knows, no vector) a name a kernel casts a `void*` to
        stands for in the instance: a template parameter (`T`), or a member type of one
        (`Ktraits::compute_t` with Ktraits bound to `Kernel_traits<float, …>`: flash-attention's
        layer norm, `static_cast<compute_t*>(params.mu)`), else None."""
        text = " ".join(w for w in spelled.replace("*", " ").split() if w not in ("const", "volatile", "typename"))
        name, _ = self.resolve(owner_bound(bound.get(text, text), bound))
        if name is None or dtypes.vector_of(name) is not None:
            return None
        return name if dtypes.from_cpp(name) is not None else None

    def _vector_bytes(self, spelled: str, bound: dict[str, str]) -> int | None:
        from ..model.spec import split_template_args
        text = " ".join(w for w in spelled.replace("*", " ").split() if w not in ("const", "volatile", "typename"))
        text = owner_bound(bound.get(text, text), bound)
        if "<" not in text:
            name, _ = self.resolve(text)
            dt = dtypes.from_cpp(name) if name else None
            vec = dtypes.vector_of(name) if name else None
            return dt.itemsize if dt is not None else vec[0].itemsize * vec[1] if vec is not None else None
        if not text.endswith(">"):   # a member type (`Traits<T>::NopeVec`): of the class the arguments name
            if _member_of(text) is None:
                return None
            head, _, member = text.rpartition(">::")
            template, _, args = head.partition("<")
            bound_args = ", ".join(bound.get(a.strip(), a.strip()) for a in split_template_args(f"<{args}>"))
            name, _ = self.resolve(f"{template}<{bound_args}>::{member}")
            return self.vector_bytes(name, bound) if name is not None and name != text else None
        head = text.split("<", 1)[0].split("::")[-1].strip()
        args = [bound.get(a.strip(), a.strip()) for a in split_template_args("<" + text.split("<", 1)[1])]
        elem = self.vector_bytes(args[0], bound) if args and args[0] != text else None
        if elem is None:
            return None
        if len(args) == 1 and "128" in head:
            return 16
        if len(args) != 2:
            return None
        try:
            count = exprs.evaluate_int(args[1], {})
        except exprs.ExprError:
            return None
        return elem * count if 0 < count <= 64 else None


def _bound_word(word: str, bound: dict[str, str]) -> str:
    head, sep, rest = word.partition("::")
    return bound.get(word, f"{bound[head].strip()}::{rest}" if sep and head in bound else word)


def owner_bound(text: str, bound: dict[str, str]) -> str:
    """`Ktraits::compute_t` with the template parameter Ktraits bound to a class: that class's
    member (`Kernel_traits<float, …>::compute_t`), which `_member_of` reads."""
    owner, sep, member = text.rpartition("::")
    target = bound.get(owner.strip())
    return f"{target.strip()}::{member.strip()}" if sep and target and target.strip().endswith(">") else text


def _member_of(name: str) -> tuple[str, list[str], str] | None:
    """`typename ns::Traits<float, 2>::Type` -> ('Traits', ['float', '2'], 'Type'), else None."""
    from ..model.spec import split_template_args
    text = " ".join(name.split()).removeprefix("typename ").strip()
    head, sep, member = text.rpartition(">::")
    if not sep or not member.isidentifier() or "<" not in head:
        return None
    template, _, args = head.partition("<")
    template = template.strip().split("::")[-1]
    return (template, [a.strip() for a in split_template_args(f"<{args}>")], member) if template.isidentifier() else None


def class_templates(text: str, name: str) -> list[tuple[list[str], list[str] | None, object]]:
    """The class templates named `name` an item defines: (its template parameters, the
    arguments it is specialized for or None for the primary template, its body node)."""
    from ..model.spec import split_template_args
    root = source.parser().parse(text.encode()).root_node
    out = []
    for t in (n for n in _walk(root) if n.type == "template_declaration"):
        plist = t.child_by_field_name("parameters")
        params = [d.text.decode() for p in (plist.named_children if plist is not None else ())
                  for d in [p.child_by_field_name("name") or next((c for c in p.named_children if c.type in
                                                                   ("type_identifier", "identifier")), None)]
                  if d is not None]
        for spec in (c for c in t.named_children if c.type in ("struct_specifier", "class_specifier")):
            n, body = spec.child_by_field_name("name"), spec.child_by_field_name("body")
            if n is None or body is None:
                continue
            if n.type == "template_type":
                base, targs = n.child_by_field_name("name"), n.child_by_field_name("arguments")
                if base is not None and base.text.decode() == name and targs is not None:
                    out.append((params, split_template_args(targs.text.decode()), body))
            elif n.text.decode() == name:
                out.append((params, None, body))
    return out


def member_alias(body, member: str) -> str | None:
    """The type a class body's `using member = T;` or `typedef T member;` names."""
    for n in body.named_children:
        if n.type == "alias_declaration" and n.child_by_field_name("name") is not None \
                and n.child_by_field_name("name").text.decode() == member:
            tn = n.child_by_field_name("type")
            return " ".join(tn.text.decode().split()) if tn is not None else None
        if n.type == "type_definition" and any(d.text.decode() == member for d in n.children_by_field_name("declarator")):
            tn = n.child_by_field_name("type")
            return " ".join(tn.text.decode().split()) if tn is not None else None
    return None


def _why_branch(item) -> str:
    g = item.guards[-1]
    return f"under `{g.heads[-1]}`"


def _typedef_target(text: str, name: str) -> str | None:
    """'typedef __nv_bfloat16 floatX;' -> '__nv_bfloat16'; 'using T = float;' -> 'float'. Only the
    declaration of `name` itself: a struct's member type (`struct P { using index_t = uint64_t; …}`,
    mamba's SSMParamsBase) says nothing of what P is."""
    node = source.parser().parse(text.encode()).root_node
    for n in _walk(node):
        if n.type == "type_definition":
            declared = {d.text.decode().lstrip("*& ") for d in n.children_by_field_name("declarator")}
            tn = n.child_by_field_name("type")
            if name in declared or not declared:
                return " ".join(tn.text.decode().split()) if tn is not None else None
        if n.type == "alias_declaration":
            tn, alias = n.child_by_field_name("type"), n.child_by_field_name("name")
            if alias is None or alias.text.decode() == name:
                return " ".join(tn.text.decode().split()) if tn is not None else None
    return None


def _macro_bodies(items, words: tuple[str, ...]) -> Iterator[tuple[Node, list[str], Node]]:
    """The function-like macros among `items` whose text holds one of `words`: (the name's node, the
    parameters, the body parsed as a function's, its line continuations taken out)."""
    for it in items:
        if it.kind != "macro" or not any(w in it.text for w in words):
            continue
        root = source.parser().parse(it.text.encode()).root_node
        for d in (n for n in _walk(root) if n.type == "preproc_function_def"):
            name, params, value = (d.child_by_field_name(f) for f in ("name", "parameters", "value"))
            if name is None or value is None:
                continue
            plist = [c.text.decode() for c in params.named_children if c.type == "identifier"] if params else []
            code = value.text.decode().replace("\\\n", "\n")
            yield name, plist, source.parser().parse(f"void __astra_m() {{ {code} }}".encode()).root_node


# ---- names a dispatch macro defines ---------------------------------------------------------

def macro_constants(items) -> dict[str, list[tuple[list[str], str, list[int], str | None]]]:
    """Function-like macros that declare integer constants in their cases (`case 64: { constexpr
    size_t HEAD_DIM = 64; __VA_ARGS__ }`): macro name -> [(its parameters, the declared name,
    the values it takes, the parameter switched on where each case declares its own label)],
    read from each body's tree."""
    out: dict[str, list[tuple[list[str], str, list[int], str | None]]] = {}
    for name, plist, body in _macro_bodies(items, ("constexpr", "const ")):
        found: dict[str, list[int]] = {}
        for decl in (n for n in _walk(body) if n.type == "declaration"):
            for init in decl.children_by_field_name("declarator"):
                target, v = init.child_by_field_name("declarator"), init.child_by_field_name("value")
                if init.type == "init_declarator" and target is not None and v is not None \
                        and target.type == "identifier" and v.type == "number_literal":
                    try:
                        found.setdefault(target.text.decode(), []).append(
                            int(v.text.decode().rstrip("uUlL"), 0))
                    except ValueError:
                        continue
        # `switch (head_dim) { case 64: { constexpr size_t HEAD_DIM = 64; ...` : the constant is the
        # value of the parameter switched on (which the kernel may be passed too)
        cases = [int(c.text.decode().rstrip("uUlL"), 0) for sw in _walk(body) if sw.type == "switch_statement"
                 for c in _walk(sw) if c.type == "number_literal" and c.parent is not None
                 and c.parent.type == "case_statement"]
        subject = next((c.text.decode() for sw in _walk(body) if sw.type == "switch_statement"
                        for c in [_unparen_cond(sw.child_by_field_name("condition"))]
                        if c is not None and c.type == "identifier" and c.text.decode() in plist), None)
        for declared, values in found.items():
            switched = subject if subject is not None and values == cases else None
            out.setdefault(name.text.decode(), []).append((plist, declared, values, switched))
    return out


def _unparen_cond(node):
    while node is not None and node.type in ("parenthesized_expression", "condition_clause") \
            and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def dispatch_values(program, site, items, type_size: int = 4) -> dict[str, str]:
    """Names the macros around a launch define (`tensor_rank`, `vec_size`, `HEAD_DIM`), each with
    one of its values: a vector width is 16 bytes of the element type where it offers that, any
    other the smallest it offers (the most general case: rank 2, the narrowest width)."""
    if program is None or site is None or not site.function:
        return {}
    macros = macro_constants(items)
    if not macros:
        return {}
    out: dict[str, str] = {}
    for call in program.calls_in(site.function):
        for plist, declared, values, _ in macros.get(call.function, ()):
            name = declared
            if declared in plist:   # declared through a parameter: the name the use passes there
                idx = plist.index(declared)
                name = call.args[idx].strip() if idx < len(call.args) else declared
            if not name.isidentifier() or name in out:
                continue
            vec = "vec" in name.lower() and (16 // max(1, type_size)) in values
            out[name] = str(16 // max(1, type_size) if vec else min(values))
    return out


def dispatch_subjects(program, site, items, around: dict[str, str]) -> dict[str, str]:
    """The launcher's values a dispatch macro switches on (`DISPATCH_HEAD_DIM(head_dim, HEAD_DIM,
    ...)`: `head_dim`), each equal to the constant `around` took for its case: a kernel passed
    that value runs only with it."""
    if program is None or site is None or not site.function or not around:
        return {}
    out: dict[str, str] = {}
    for call in program.calls_in(site.function):
        for plist, declared, _, switched in macro_constants(items).get(call.function, ()):
            if switched is None:
                continue
            name = call.args[plist.index(declared)].strip() if declared in plist and \
                plist.index(declared) < len(call.args) else declared
            idx = plist.index(switched)
            host = call.args[idx].strip() if idx < len(call.args) else ""
            if host.isidentifier() and name in around:
                out.setdefault(host, around[name])
    return out



def macro_types(items) -> dict[str, list[tuple[list[str], str, list[str]]]]:
    """Function-like macros that declare a type in their cases (TransformerEngine's `case
    DType::kFloat16: { using type = fp16; __VA_ARGS__ }`): macro name -> [(its parameters, the
    declared name, the types it stands for, in the body's order)], read from each body's tree."""
    out: dict[str, list[tuple[list[str], str, list[str]]]] = {}
    for name, plist, body in _macro_bodies(items, ("using", "typedef")):
        found: dict[str, list[str]] = {}
        for n in _walk(body):
            if n.type == "alias_declaration":
                target, t = n.child_by_field_name("name"), n.child_by_field_name("type")
                pairs = [(target, t)]
            elif n.type == "type_definition":
                t = n.child_by_field_name("type")
                pairs = [(d_, t) for d_ in n.children_by_field_name("declarator")]
            else:
                continue
            for target, t in pairs:
                if target is not None and t is not None and target.type in ("type_identifier", "identifier"):
                    spelled = " ".join(t.text.decode().split())
                    found.setdefault(target.text.decode(), [])
                    if spelled not in found[target.text.decode()]:
                        found[target.text.decode()].append(spelled)
        for declared, types in found.items():
            out.setdefault(name.text.decode(), []).append((plist, declared, types))
    return out


def declared_types(program, items, is_float):
    """A host function's name -> the type names the macros it uses declare (`TYPE_SWITCH(dtype,
    softmax_type, ...)` declares `softmax_type`), each -> (the one taken, all it may be): float
    where the macro offers it (`is_float`: whether a spelling is float, through the project's
    typedefs), else the first it names — a float there is an instance the program never makes
    (TransformerEngine's softmax declares `copy_vector<T, N>` and defines it for 16-bit types only).
    The macros are read once; each function's answer is kept."""
    macros: dict[str, list[tuple[list[str], str, list[str]]]] | None = None
    seen: dict[str, dict[str, tuple[str, list[str]]]] = {}

    def of(function: str | None) -> dict[str, tuple[str, list[str]]]:
        nonlocal macros
        if program is None or not function:
            return {}
        if function not in seen:
            macros = macro_types(items) if macros is None else macros
            out: dict[str, tuple[str, list[str]]] = {}
            for call in program.calls_in(function) if macros else ():
                for plist, declared, types in macros.get(call.function, ()):
                    name = declared
                    if declared in plist:   # declared through a parameter: the name the use passes there
                        idx = plist.index(declared)
                        name = call.args[idx].strip() if idx < len(call.args) else declared
                    if name.isidentifier() and name not in out:
                        out[name] = (next((t for t in types if is_float(t)), types[0]), types)
            seen[function] = out
        return seen[function]
    return of
