"""Structs passed by value, read through their fields (issue 25, item 6). Long because the split
is one rewrite that must stay consistent at every place a struct appears: the kernel's parameters,
its body, each launch and the launching function's own struct (passed by name or as a member).

A kernel `k(Params p)` that reads `p.out[i]` and `p.n` is the kernel `k(float* p__out, int p__n)`
for inference: `flatten` writes that kernel into a copy of the file — the parameter split into one
per field, `p.f` in the kernel's body become `p__f`, and each launch of the kernel passes the
fields of what it passed (`k<<<…>>>(q)` becomes `k<<<…>>>(q__out, q__n)`, `q.f` in the launching
function become `q__f`) — so every other part of inference (launch, shapes, roles, sizes) reads it
as it reads any kernel. `unflatten` turns the proposal back into the spec format's fields
(`p.out = {…}`, `p.n = "n"`). Only structs whose fields are plain members (pointers and numbers,
no arrays, bit-fields or nested structs) are flattened; a field's type stays as written.

A table of device pointers is read the same way: `T** t` (or 64-bit integers the kernel casts to
pointers, `reinterpret_cast<T*>(t[layer])`) becomes `T* t__row`, and each entry it takes,
`t[layer]`, becomes `t__row`: the entry's buffer is then measured like any buffer; `unflatten`
writes `t = { …, table = "<count>" }`, the count being the grid dimension whose block index picks
the entry (vLLM's copy_blocks: one block row per layer). An entry picked otherwise is not read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model import source
from ..model.source import Kernel, SourceModel
from ..model.syntax import walk
from . import constructs
from .program import launches_in
from .template_args import CANNOT

SEP = "__"   # the flattened name of field `f` of `p` is `p__f`


ROW = "row"   # the flattened name of one entry of table `t` is `t__row`
_WORDS = ("int64_t", "uint64_t", "uintptr_t", "long long", "unsigned long long", "long", "unsigned long", "size_t")


@dataclass(frozen=True)
class Flat:
    model: SourceModel
    kernel: Kernel
    fields: dict[str, tuple[str, ...]]   # struct parameter -> its fields, in order
    tables: dict[str, int] = field(default_factory=dict)   # table parameter -> the grid dimension counting it
    # fields whose type is a class of their own (`at::PhiloxCudaState philox_args`): no number or
    # buffer stands for one, so the proposal leaves them out (zero) — "struct field" -> its C++ type
    opaque: dict[str, str] = field(default_factory=dict)
    # fields of a class the host builds from a size (`constructs`), split off as that size:
    # "struct field" -> the class, qualified, whose constructor `unflatten` hands the size to
    built: dict[str, str] = field(default_factory=dict)


def plain_type(type_text: str) -> str:
    """A parameter's type without its qualifiers, word by word: `__grid_constant__ const P` is `P`
    (a head a macro writes keeps `__grid_constant__` in the type: flash-attention's
    KERNEL_PARAM_MODIFIER; replacing "const" first left `__grid_ant__ P`, no struct)."""
    return " ".join(w for w in type_text.split() if w not in ("const", "volatile", "__grid_constant__"))


def struct_fields(type_name: str, items) -> list[tuple[str, str]] | None:
    """(C++ type as written, name) of each member of the struct `type_name` defined by one of
    `items` (`struct P {…};`, `typedef struct {…} P;`), or None where it is not such a struct."""
    return _members(type_name, items)[0]


def not_flattened(type_name: str, items) -> str:
    """Why the struct `type_name` is not given field by field (for a kernel that reads its fields)."""
    return _members(type_name, items)[1]


def _members(type_name: str, items, depth: int = 0) -> tuple[list[tuple[str, str]] | None, str]:
    # an instance of a class template (`paged_kv_t<DType, IdType>`, FlashInfer's) is read from the
    # template's definition, its parameters written as the instance's arguments
    name, arguments = _instance(type_name)
    # a name qualified from the global scope (`fi::DecodeParams<float, float>`, as `instantiate`
    # writes a class of a namespace) is the class its namespaces name
    scope, _, short = name.replace(" ", "").lstrip(":").rpartition("::")
    defs = [it.text for it in items if it.kind == "type" and short in it.defines
            and ("::".join(it.namespaces) + "::").endswith(scope + "::" if scope else "::")] \
        or _typedef_after(short, items)
    if len(defs) != 1:
        return None, (f"no definition of `{type_name}` read in the file or its project headers" if not defs else
                      f"`{type_name}` is defined {len(defs)} times")
    tree = source.parser().parse(defs[0].encode())
    template = next((n for n in tree.root_node.named_children if n.type == "template_declaration"), None)
    if (template is None) != (arguments is None):
        return None, (f"`{type_name}` names no template's instance" if template is None else
                      f"`{name}` is a class template and `{type_name}` gives no arguments")
    aliases: dict[str, str] = {}
    if template is not None and arguments is not None:
        params = _template_params(template)
        if params is None or len(params) != len(arguments):
            return None, f"`{type_name}` gives {len(arguments)} template arguments to `{name}`, which Astra reads " \
                         f"with {'other' if params is None else len(params)} parameters"
        aliases = dict(zip(params, arguments))
    body = next((n for n in walk(tree.root_node) if n.type == "field_declaration_list"), None)
    if body is None or body.has_error:   # (the item's text may end without its `;`)
        return None, f"`{type_name}` is not a struct whose members Astra reads"
    out: list[tuple[str, str]] = []
    # A base's fields come first, as the compiler lays them out (`struct FwdParams : ParamsBase`).
    bases = next((c for c in (body.parent.children if body.parent is not None else []) if c.type == "base_class_clause"),
                 None)
    for base in (bases.named_children if bases is not None else []):
        if base.type == "access_specifier":
            continue
        name = base.text.decode().strip()
        if depth >= 4 or not re.fullmatch(r"[A-Za-z_]\w*", name):
            return None, f"its base `{name}` is not a struct whose members Astra reads"
        inherited, why = _members(name, items, depth + 1)
        if inherited is None:
            return None, f"its base `{name}`: {why}"
        out += inherited
    # A member type (`using index_t = uint64_t;`) is the struct's own name for a type: a field
    # declared with it is written with what it names, so the flattened parameter means the same.
    for decl in body.named_children:
        if decl.type in ("comment", "access_specifier", "friend_declaration", "function_definition",
                         "template_declaration", "declaration", "static_assert_declaration", "using_declaration"):
            continue   # no data: methods, constructors, friends, access labels
        what = decl.text.decode().split("\n")[0].strip()
        if decl.type in ("alias_declaration", "type_definition"):
            named = decl.child_by_field_name("name") if decl.type == "alias_declaration" else \
                decl.child_by_field_name("declarator")
            target = decl.child_by_field_name("type")
            if named is None or target is None or named.type != "type_identifier":
                return None, f"its member `{what}` is no plain type alias"
            aliases[named.text.decode()] = _aliased(target.text.decode(), aliases)
            continue
        if decl.type != "field_declaration" or decl.child_by_field_name("type") is None:
            return None, f"its member `{what}` is no plain field"
        if any(c.type == "storage_class_specifier" for c in decl.children) or \
                any(c.type == "function_declarator" for c in decl.children):
            continue   # a static member or a method's declaration: not in the struct's bytes
        kind = decl.child_by_field_name("type").type
        if kind in ("enum_specifier", "struct_specifier", "union_specifier") and \
                not decl.children_by_field_name("declarator"):
            continue   # a nested type's definition declares no member
        head = _aliased(decl.child_by_field_name("type").text.decode(), aliases)
        if any(c.type == "bitfield_clause" for c in decl.children) or kind in ("struct_specifier", "union_specifier"):
            return None, f"its member `{what}` is a bit-field or a nested struct"
        quals = " ".join(c.text.decode() for c in decl.children if c.type == "type_qualifier")
        for d in decl.children_by_field_name("declarator"):
            stars, node = "", d
            while node is not None and node.type == "pointer_declarator":
                stars += "*"
                node = node.child_by_field_name("declarator")
            if node is None or node.type != "field_identifier":
                return None, f"its member `{what}` is an array or a function pointer"   # not flattened
            out.append((" ".join(x for x in (quals, head) if x) + (" " + stars if stars else ""), node.text.decode()))
    return (out, "") if out else (None, f"`{type_name}` has no fields")


def _instance(type_name: str) -> tuple[str, list[str] | None]:
    """`paged_kv_t<DType, IdType>` as ("paged_kv_t", ["DType", "IdType"]); a plain name's arguments None."""
    head, sep, rest = type_name.partition("<")
    if not sep or not rest.rstrip().endswith(">"):
        return type_name.strip(), None
    args, depth, cur = [], 0, ""
    for ch in rest.rstrip()[:-1]:
        depth += (ch in "<([") - (ch in ">)]")
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return head.strip(), args + [cur.strip()] if cur.strip() else args


def _template_params(template) -> list[str] | None:
    """The names of a template's parameters, in order; None where one is a pack or unnamed."""
    plist = template.child_by_field_name("parameters")
    names = []
    for p in plist.named_children if plist is not None else []:
        if p.type == "comment":
            continue
        if p.type in ("variadic_type_parameter_declaration", "variadic_parameter_declaration"):
            return None
        ident = next((c for c in walk(p) if c.type in ("type_identifier", "identifier")
                      and c.parent is not None and c.parent.type != "template_type"), None) \
            if p.type in ("type_parameter_declaration", "optional_type_parameter_declaration") else \
            p.child_by_field_name("declarator")
        if ident is None:
            return None
        names.append(ident.text.decode())
    return names


def _typedef_after(type_name: str, items) -> list[str]:
    """`struct { … } typedef P;` — C allows `typedef` after the type, as DeepSpeed's ragged
    descriptors write it — which tree-sitter reads as a variable, or, where an `#ifdef` stands
    between `struct` and its body (`__align__(8)` for nvcc only), as a body then `typedef P;`."""
    out = []
    for i, it in enumerate(items):
        text = it.text.strip()
        if it.kind == "variable" and re.fullmatch(rf"struct\s*\{{.*\}}\s*typedef\s+{re.escape(type_name)}\s*;?", text, re.S):
            out.append(text)
        elif it.kind == "type" and re.fullmatch(rf"typedef\s+{re.escape(type_name)}\s*;", text) and i > 0 and \
                items[i - 1].kind == "other" and items[i - 1].text.strip().startswith("{") and \
                items[i - 1].text.strip().endswith("}"):
            out.append("struct " + items[i - 1].text.strip() + ";")
    return out


def _aliased(type_text: str, aliases: dict[str, str]) -> str:
    """`type_text` with the struct's member types written out (`index_t` -> `uint64_t`)."""
    return re.sub(r"(?<![\w:])[A-Za-z_]\w*", lambda m: aliases.get(m.group(0), m.group(0)), type_text) \
        if aliases else type_text


def flatten(kernel: Kernel, model: SourceModel, items, known, bound: dict[str, str] | None = None) -> Flat | None:
    """The file with the kernel's struct parameters split into their fields; None when it has
    none that can be (a parameter whose type `known` resolves is not a struct). `bound`: a
    template parameter that is a struct parameter's type -> the struct `instantiate` takes for it
    (`Params` -> `fi::DecodeParams<float>`), whose fields it is split into."""
    structs: dict[str, list[tuple[str, str]]] = {}
    for p in kernel.params:
        if p.is_pointer or known(p.base_type):
            continue
        named = plain_type(p.base_type)
        fields = struct_fields((bound or {}).get(named, named), items)
        if fields is None:
            continue
        structs[p.name] = fields
    # a field of a class the host builds from a size (`constructs`): read as that size
    built = {p: constructs.built_fields((bound or {}).get(plain_type(t.base_type), plain_type(t.base_type)), fs, items)
             for p, fs in structs.items() if (t := kernel.param(p)) is not None}
    structs = {p: [(built[p][f][1] if f in built[p] else t, f) for t, f in fs] for p, fs in structs.items()}
    text = model.text
    data = text.encode("utf-8")
    tree = source.parser().parse(data)
    edits: list[tuple[int, int, str]] = []
    kernel_fn = function_at(tree.root_node, kernel.span.start_byte, kernel.name)
    if kernel_fn is None:
        return None
    tables = _tables(kernel, kernel_fn.child_by_field_name("body"))
    # a struct the kernel also uses whole (calls it, hands it on: a functor) stays one parameter
    structs = {p: fs for p, fs in structs.items() if _only_fields(kernel_fn.child_by_field_name("body"), p)}
    if not structs and not tables:
        return None
    for p in kernel.params:
        if p.name in tables:
            entry, dim, uses = tables[p.name]
            edits.append((p.span.start_byte, p.span.end_byte, f"{entry} {p.name}{SEP}{ROW}"))
            edits += [(u.start_byte, u.end_byte, f"{p.name}{SEP}{ROW}") for u in uses]
    for p in kernel.params:
        if p.name in structs:
            edits.append((p.span.start_byte, p.span.end_byte,
                          ", ".join(f"{t} {p.name}{SEP}{f}" for t, f in structs[p.name])))
    body = kernel_fn.child_by_field_name("body")
    edits += _member_edits(body, {p: [f for _, f in fs] for p, fs in structs.items()})
    for p in kernel.params:
        if p.name in structs and body is not None and _methods_called(body, p.name, {f for _, f in structs[p.name]}) \
                and not _has_base(p.base_type.replace("const", "").strip(), items):   # (a brace list sets own fields)
            # the kernel calls the struct's methods (`paged_kv.get_k_ptr(page, head, entry, i)`): a local object
            # of its type, built from the split fields in their order, stands for it on the body's first line,
            # so the accesses inside those methods count for the fields (`access` follows a view's methods)
            edits.append((body.start_byte + 1, body.start_byte + 1,
                          f" {p.type.replace('const ', '')} {p.name}{{"
                          + ", ".join(f"{p.name}{SEP}{f}" for _, f in structs[p.name]) + "};"))
    index = {p.name: i for i, p in enumerate(kernel.params)}
    for site in launches_in(model, kernel.name):
        call = launch_call(tree.root_node, site)
        fn = enclosing_function(call) if call is not None else None
        args = call.child_by_field_name("arguments") if call is not None else None
        if fn is None or args is None:
            continue
        passed: dict[str, list[str]] = {}
        for name, fields in structs.items():
            i = index[name]
            a = args.named_children[i] if i < len(args.named_children) else None
            # the struct passed by name (`params`), or as a member of the launcher's own (flash-attention's
            # `launch_params.params`): the fields become `params__f`, `launch_params__params__f`
            if a is not None and _path(a) is not None:
                var = _path(a)
                passed[var] = [f for _, f in fields]
                edits.append((a.start_byte, a.end_byte, ", ".join(f"{_flat(var)}{SEP}{f}" for _, f in fields)))
        if passed:
            edits += _member_edits(fn.child_by_field_name("body"), passed, skip=args)
    out = bytearray(data)
    for start, end, new in sorted(set(edits), reverse=True):
        out[start:end] = new.encode("utf-8")
    flat_model = source.parse(out.decode("utf-8"), model.items[0].path if model.items else None)
    flat = next((k for k in flat_model.kernels if k.qualified_name == kernel.qualified_name), None)
    if flat is None:
        return None
    opaque = {f"{p}{SEP}{f}": t for p, fs in structs.items() for t, f in fs
              if "*" not in t and not known(t.replace("const", "").strip()) and _is_class(t, items)}
    return Flat(flat_model, flat, {p: tuple(f for _, f in fs) for p, fs in structs.items()},
                {p: dim for p, (_, dim, _) in tables.items()}, opaque,
                {f"{p}{SEP}{f}": cls for p, fs in built.items() if p in structs for f, (cls, _) in fs.items()})


def _is_class(type_text: str, items) -> bool:
    """A qualified name (`at::PhiloxCudaState`) or a type the project defines that is not a plain
    alias of a number: a class of its own."""
    name = " ".join(w for w in type_text.split() if w not in ("const", "volatile"))
    return "::" in name or any(it.kind == "type" and name in it.defines and "{" in it.text for it in items) \
        or bool(_typedef_after(name, items))


def unflatten(comment: str, notes: list[str], fields: dict[str, tuple[str, ...]],
              tables: dict[str, int] | None = None, opaque: dict[str, str] | None = None,
              built: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """The proposal in the spec format's terms: `p__f = …` keys become `p.f = …`; a size named
    `p__f` becomes `f` where no other name of the proposal is `f`; `t__row = {…}` becomes
    `t = {…, table = "<count>"}` (its shape's first dimension, which `proposal` made the grid's
    dimension that counts the entries). An `opaque` field is left out (zero), with a note."""
    tables = tables or {}
    opaque = opaque or {}
    rows = {f"{t}{SEP}{ROW}": t for t in tables}
    flat = {f"{p}{SEP}{f}": (p, f) for p, fs in fields.items() for f in fs}
    taken = set(re.findall(r"\w+", comment)) - set(flat)
    renames: dict[str, str] = {}
    for name, (_, f) in flat.items():
        renames[name] = f if f not in taken and f not in renames.values() else name
    lines, table, dropped = comment.split("\n"), "", set()
    for i, line in enumerate(lines):
        if line.startswith("["):
            table = line.strip()
        m = re.match(r"(\w+)\s*=", line)
        if table == "[args]" and m is not None and m.group(1) in opaque:
            dropped.add(i)
            notes = [n for n in notes if f"`{m.group(1)}`" not in n or n.startswith(CANNOT)] + [
                f"`{'.'.join(flat[m.group(1)])}` (a `{opaque[m.group(1)]}`) left out: zero, as no number or buffer "
                f"stands for a class — CHECK that the kernel needs it only where the template arguments switch it off"]
        elif table == "[args]" and m is not None and m.group(1) in (built or {}):
            # the size the draft gave the field, handed to the class's constructor (`construct`)
            value = line.split("=", 1)[1].strip().strip('"')
            p, f = flat[m.group(1)]
            lines[i] = f"{p}.{f} " + line[len(m.group(1)):].split("=", 1)[0] + \
                f'= {{ construct = "{(built or {})[m.group(1)]}({value})" }}'
        elif table == "[args]" and m is not None and m.group(1) in flat:
            p, f = flat[m.group(1)]
            lines[i] = f"{p}.{f} " + line[len(m.group(1)):]   # as wide as `p__f`: the columns stay
        elif table == "[args]" and m is not None and m.group(1) in rows and line.rstrip().endswith("}"):
            # the entry's buffer was proposed with the table's count as its first dimension
            t, body = rows[m.group(1)], line[len(m.group(1)):].rstrip()[:-1].rstrip()
            first = re.search(r'shape = \[("[^"]*")(, )?', body)
            if first is not None and first.group(2):
                body = body[:first.start(1)] + body[first.end(2):] + f", table = {first.group(1)}"
                lines[i] = f"{t}{' ' * (len(m.group(1)) - len(t))}{body} }}"
    comment = "\n".join(ln for i, ln in enumerate(lines) if i not in dropped)

    def sub(s: str) -> str:
        return re.sub(r"\w+", lambda m: renames.get(m.group(0), m.group(0)), s)
    named = [re.sub(r"`(\w+)`", lambda m: f"`{'.'.join(flat[m.group(1)])}`" if m.group(1) in flat else
                    f"`{rows[m.group(1)]}`'s entries" if m.group(1) in rows else m.group(0), n) for n in notes]
    return sub(comment), [sub(n) for n in named]


def _tables(kernel: Kernel, body) -> dict[str, tuple[str, int, list]]:
    """Each table of device pointers the kernel reads: parameter -> (the C++ type of one entry,
    the grid dimension whose block index picks it, the `t[i]` expressions that take one)."""
    out: dict[str, tuple[str, int, list]] = {}
    if body is None:
        return out
    params = {p.name: p for p in kernel.params if p.is_pointer}
    found: dict[str, list[tuple[str, int | None, object]]] = {}
    for n in walk(body):
        arg = n.child_by_field_name("argument") if n.type == "subscript_expression" else None
        if arg is None or arg.type != "identifier" or arg.text.decode() not in params:
            continue
        p = params[arg.text.decode()]
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        dim = block_dim(idx.text.decode().strip("[] ") if idx is not None else "", body)
        if p.type.count("*") == 2:
            entry = p.type.rsplit("*", 1)[0].replace("__restrict__", "").strip()
            found.setdefault(p.name, []).append((entry, dim, n))
        elif p.type.count("*") == 1 and " ".join(p.base_type.replace("const", "").split()) in _WORDS:
            cast = _cast_to_pointer(n)
            if cast is None:
                found.setdefault(p.name, []).append(("", None, n))   # read as a number too: not a table
                continue
            found.setdefault(p.name, []).append((cast, dim, n))
    for name, uses in found.items():
        entries = {e for e, _, _ in uses}
        dims = {d for _, d, _ in uses}
        if len(entries) == 1 and "" not in entries and len(dims) == 1 and None not in dims:
            out[name] = (entries.pop(), dims.pop(), [u for _, _, u in uses])
    return out


def _cast_to_pointer(n) -> str | None:
    """`reinterpret_cast<T*>(n)` or `(T*)n`: the pointer type `T*`."""
    up = n.parent
    while up is not None and up.type == "parenthesized_expression":
        up = up.parent
    if up is not None and up.type == "argument_list" and up.parent is not None and up.parent.type == "call_expression":
        fn = up.parent.child_by_field_name("function")
        if fn is not None and fn.type == "template_function" and fn.child_by_field_name("name") is not None \
                and fn.child_by_field_name("name").text == b"reinterpret_cast":
            targs = fn.child_by_field_name("arguments")
            t = targs.text.decode().strip()[1:-1].strip() if targs is not None else ""
            return t if t.endswith("*") else None
    if up is not None and up.type == "cast_expression":
        t = up.child_by_field_name("type")
        text = t.text.decode().strip() if t is not None else ""
        return text if text.endswith("*") else None
    return None


def block_dim(index: str, body) -> int | None:
    """The grid dimension a block index picks: `blockIdx.y`, or a local initialised with it."""
    dims = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2}
    if index in dims:
        return dims[index]
    for n in walk(body):
        if n.type == "init_declarator" and n.child_by_field_name("declarator") is not None \
                and n.child_by_field_name("declarator").text.decode() == index:
            value = n.child_by_field_name("value")
            return dims.get(value.text.decode().strip() if value is not None else "")
    return None


def _has_base(type_name: str, items) -> bool:
    """Whether the struct's definition names a base class (whose fields a brace list would not set first)."""
    name = _instance(type_name)[0]
    defs = [it.text for it in items if it.kind == "type" and name in it.defines]
    return any(n.type == "base_class_clause" for d in defs for n in walk(source.parser().parse(d.encode()).root_node))


def _methods_called(body, name: str, fields: set[str]) -> bool:
    """Whether the body calls a method of `name` (`name.m(…)`, m no field)."""
    for n in walk(body):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            arg = fn.child_by_field_name("argument") if fn is not None and fn.type == "field_expression" else None
            field = fn.child_by_field_name("field") if arg is not None else None
            if arg is not None and field is not None and arg.type == "identifier" and arg.text.decode() == name \
                    and field.text.decode() not in fields:
                return True
    return False


def handed_whole(kernel: Kernel, name: str, type_name: str, items) -> str | None:
    """Why no float stands for parameter `name`, a struct of the project passed by value that was
    not split into its fields, where the kernel hands it whole to a helper (flash-attention's
    `flash_fwd_kernel(const Flash_fwd_params params)`, its head a macro writes, calls
    `compute_attn<…>(params)`: given a 4-byte float, every pointer the helper read of it was
    garbage, cudaErrorIllegalAddress on an H200), or None."""
    if _members(plain_type(type_name), items)[1].startswith("no definition"):
        return None
    root = source.parser().parse(kernel.text.encode()).root_node
    call = next((n.parent.parent for n in walk(root) if n.type == "identifier" and n.text.decode() == name
                 and n.parent is not None and n.parent.type == "argument_list" and n.parent.parent is not None), None)
    if call is None:
        return None
    why = not_flattened(plain_type(type_name), items)
    return (f"{CANNOT}`{name}` is a `{type_name}` passed by value that the kernel hands whole to "
            f"`{' '.join(call.text.decode().split())[:60]}`: Astra gives a struct only field by field, where the "
            f"kernel reads the fields itself{f' ({why})' if why else ''} — no float stands for it")


def _only_fields(body, name: str) -> bool:
    """Whether the body uses `name` only as `name.f`."""
    for n in walk(body) if body is not None else ():
        if n.type == "identifier" and n.text.decode() == name:
            up = n.parent
            if up is None or up.type != "field_expression" or up.child_by_field_name("argument") != n:
                return False
    return True


def _path(n) -> str | None:
    """`v` or `a.b.v` (members reached with `.` only, spaces dropped), or None for anything else."""
    if n.type == "identifier":
        return n.text.decode()
    op = n.child_by_field_name("operator")
    arg, field = n.child_by_field_name("argument"), n.child_by_field_name("field")
    if n.type != "field_expression" or arg is None or field is None or op is None or op.text != b".":
        return None
    head = _path(arg)
    return f"{head}.{field.text.decode()}" if head is not None else None


def _flat(path: str) -> str:
    """The identifier standing for a path: `launch_params.params` -> `launch_params__params`."""
    return path.replace(".", SEP)


def _member_edits(body, fields: dict[str, list[str]], skip=None) -> list[tuple[int, int, str]]:
    """`v.f` -> `v__f` for each struct variable (or member path: `lp.params.f` -> `lp__params__f`)
    `v` and field `f` inside `body`."""
    out: list[tuple[int, int, str]] = []
    if body is None:
        return out
    for n in walk(body):
        if n.type != "field_expression" or (skip is not None and skip.start_byte <= n.start_byte < skip.end_byte
                                            and n.parent is skip):
            continue
        arg, op, field = n.child_by_field_name("argument"), n.child_by_field_name("operator"), \
            n.child_by_field_name("field")
        if arg is None or field is None or (op is not None and op.text != b"."):
            continue
        var, f = _path(arg), field.text.decode()
        if var is not None and f in fields.get(var, ()):
            out.append((n.start_byte, n.end_byte, f"{_flat(var)}{SEP}{f}"))
    return out


def function_at(root, start_byte: int, name: str):
    for n in walk(root):
        if n.type == "function_definition" and n.start_byte >= start_byte and name.encode() in (
                n.child_by_field_name("declarator").text if n.child_by_field_name("declarator") else b""):
            return n
    return None


def launch_call(root, site):
    """The `<<<…>>>` call of a launch site (by its position)."""
    for n in walk(root):
        if n.type == "call_expression" and n.start_point[0] == site.span.start_line and \
                any(c.type == "kernel_call_syntax" for c in n.children):
            return n
    return None


def enclosing_function(node):
    while node is not None and node.type != "function_definition":
        node = node.parent
    return node
