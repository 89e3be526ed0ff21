"""What the project itself offers for a template parameter that no launch, caller or
instantiation gives (its caller chooses it: a JIT template, a registry, another project): a
device function of the file or its project headers whose type is the function-pointer
parameter's (`float (*Act)(const float&)` takes `float silu(const float&)`, never one of another
signature, which would not compile), and a class of the project that has every member the kernel
reads through a class parameter (`Params::DTypeQ`, `params.q`, `variant.kv_len` of a local of
it) — FlashInfer's `SingleDecodeParams<…>` for its decode kernel's `Params`. Each is a choice
among what the project defines, which the notes name; none where nothing fits (then `template_args`
says why nothing is proposed). Separate from `template_args` because both read declarations of
the project's headers with tree-sitter, which the rest of that module does not."""
from __future__ import annotations

import re

from ..model import source
from ..model.syntax import walk as _walk
from .template_names import replace_word

_IGNORED = {"const", "volatile", "__restrict__", "__restrict", "struct", "class", "typename"}
_DECLARATORS = ("pointer_declarator", "reference_declarator", "abstract_pointer_declarator",
                "abstract_reference_declarator", "array_declarator", "init_declarator",
                "function_declarator")   # `Variant variant(n);` reads as a function declaration


def _canonical(text: str, name: str | None = None) -> str:
    """A type as written, comparable however spaced or ordered: `const float&` is `float const &`
    (a leading `const` moved after the type it qualifies, as C++ reads it), a `const` of the
    parameter itself (`float* const p`) dropped, as a function's type drops it; `name` (the
    declared identifier) left out."""
    words = [" ".join(w.split()) for w in re.findall(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*|\S", text)
             if w != name]
    words = [w for w in words if w not in _IGNORED or w == "const"]
    if words and words[0] == "const":
        rest = words[1:]
        cut = next((i for i, w in enumerate(rest) if w in ("*", "&", "&&")), len(rest))
        words = [*rest[:cut], "const", *rest[cut:]]
    while words and words[-1] == "const" and "*" in words:
        words.pop()
    return " ".join(words)


def _declared_name(node) -> str | None:
    """The identifier a (possibly abstract) declarator declares, if any."""
    while node is not None and node.type in _DECLARATORS + ("parenthesized_declarator",):
        node = node.child_by_field_name("declarator") or next(
            (c for c in node.named_children if c.type not in ("type_qualifier",)), None)
    return node.text.decode() if node is not None and node.type in ("identifier", "field_identifier") else None


def _signature(node) -> tuple[str, tuple[str, ...]] | None:
    """(return type, parameter types) of the first function declarator under `node` (a function
    definition, or a declaration of a function pointer)."""
    decl = next((n for n in _walk(node) if n.type == "function_declarator"), None)
    params = decl.child_by_field_name("parameters") if decl is not None else None
    typ = node.child_by_field_name("type")
    if params is None or typ is None:
        return None
    # the return type: what precedes the type field's end that is a qualifier or the type, and
    # the pointer/reference declarators wrapped around the function declarator (`float* f(…)`)
    quals = [c.text.decode() for c in node.children if c.type == "type_qualifier" and c.end_byte <= typ.start_byte]
    ret = " ".join([*quals, typ.text.decode()])
    walker = node.child_by_field_name("declarator")
    while walker is not None and walker is not decl:
        if walker.type in ("pointer_declarator", "reference_declarator"):
            ret += " " + walker.children[0].text.decode()
        if walker.type == "parenthesized_declarator":
            break   # `float (*f)(…)`: the pointer is the variable's, not the return type's
        walker = walker.child_by_field_name("declarator")
    out = []
    for p in params.named_children:
        if p.type == "variadic_parameter":
            return None
        name = _declared_name(p.child_by_field_name("declarator"))
        out.append(_canonical(p.text.decode(), name))
    return _canonical(ret), tuple(out)


def _head(text: str):
    """The first definition (or declaration) in `text`, under its template head if any: (node,
    the template's parameter names)."""
    root = source.parser().parse(text.encode("utf-8")).root_node
    for n in root.named_children:
        if n.type == "template_declaration":
            plist = n.child_by_field_name("parameters")
            names = [c.text.decode() for p in (plist.named_children if plist is not None else ())
                     for c in p.named_children if c.type == "type_identifier"]
            inner = next((c for c in n.named_children if c.type in ("function_definition", "declaration",
                                                                      "struct_specifier", "class_specifier")), None)
            return inner, names, plist
        if n.type in ("function_definition", "declaration", "struct_specifier", "class_specifier"):
            return n, [], None
    return None, [], None


def device_function_for(head: str, bound: dict[str, str], first_type: str, items) -> str | None:
    """The first device function of the file or its project headers (in that order, `items`)
    whose type is the function-pointer parameter `head` (`float (*Act)(const float&)`, its
    template parameters as `bound` so far), a template among them instantiated with `first_type`:
    its name as seen from the global scope, or None where none fits."""
    for name, value in bound.items():
        head = replace_word(head, name, value)
    node, _, _ = _head(head.strip() + ";")
    wanted = _signature(node) if node is not None else None
    if wanted is None:
        return None
    for item in items:
        if item.kind != "device_function" or not item.defines or "{" not in item.text:
            continue
        text = item.text.split("{", 1)[0] + "{}"
        fn, tparams, _ = _head(text)
        if fn is None:
            continue
        for t in tparams:
            text = replace_word(text, t, first_type)
        fn, _, _ = _head(text)
        if fn is None or _signature(fn) != wanted:
            continue
        fn_name = next(iter(item.defines))
        qualified = "::".join([*item.namespaces, fn_name])
        return f"{qualified}<{first_type}>" if tparams else qualified
    return None


def objects_of(name: str, kernel, root) -> set[str]:
    """The kernel's parameters passed by value and its locals whose type is the class `name`."""
    objects = {p.name for p in kernel.params if not p.is_pointer and
               " ".join(w for w in p.base_type.split() if w not in ("const", "__grid_constant__")) == name}
    # a local object of it (not a pointer or an array of it); a name declared in another scope
    # with another type too (vLLM's `scalar_t x` beside a vector's `x.elts`) is no evidence
    others: set[str] = set()
    for n in _walk(root):
        typ = n.child_by_field_name("type") if n.type == "declaration" else None
        for d in (n.children_by_field_name("declarator") if typ is not None else ()):
            declared = _declared_name(d)
            plain = not any(x.type in ("pointer_declarator", "array_declarator") for x in _walk(d))
            if declared and typ.text.decode().strip() == name and plain:
                objects.add(declared)
            elif declared:
                others.add(declared)
    return objects - others


def constructed_with(name: str, kernel) -> set[int]:
    """How many arguments each local of the class `name` the kernel declares is built from
    (`AttentionVariant variant(params, 0, smem)`: 3; `Variant v;`: 0)."""
    root = source.parser().parse(kernel.text.encode()).root_node
    counts: set[int] = set()
    for n in _walk(root):
        if n.type != "declaration" or n.child_by_field_name("type") is None \
                or n.child_by_field_name("type").text.decode().strip() != name:
            continue
        for d in n.children_by_field_name("declarator"):
            args = d.child_by_field_name("parameters") if d.type == "function_declarator" else \
                d.child_by_field_name("value") if d.type == "init_declarator" else None
            counts.add(len([a for a in args.named_children if a.type != "comment"]) if args is not None else 0)
    return counts


def members_used(name: str, kernel) -> set[str]:
    """Every member the kernel names through the class `name`: `name::X`, and a field or method
    of a parameter passed by value (`params.q`) or of a local (`AttentionVariant variant(…)`) of it."""
    root = source.parser().parse(kernel.text.encode()).root_node
    objects = objects_of(name, kernel, root)
    out: set[str] = set()
    for n in _walk(root):
        if n.type in ("qualified_identifier", "nested_namespace_specifier"):
            scope, member = n.child_by_field_name("scope"), n.child_by_field_name("name")
            if scope is not None and member is not None and scope.text.decode().split("<")[0].strip() == name:
                out.add(member.text.decode().split("<")[0].split("::")[0].strip())
        if n.type == "field_expression" and (arg := n.child_by_field_name("argument")) is not None \
                and arg.type == "identifier" and arg.text.decode() in objects \
                and (field := n.child_by_field_name("field")) is not None:
            out.add(field.text.decode())
    return out


def _constructors(node, short: str) -> list[tuple[int, int]]:
    """(fewest, most) arguments of each constructor the class body `node` declares."""
    out = []
    for d in (n for n in _walk(node) if n.type == "function_declarator"):
        head = d.child_by_field_name("declarator")
        params = d.child_by_field_name("parameters")
        if head is None or params is None or head.text.decode().strip() != short:
            continue
        ps = [p for p in params.named_children if p.type != "comment"]
        out.append((sum(p.type != "optional_parameter_declaration" for p in ps), len(ps)))
    return out


def _class_members(item, items, depth: int = 0) -> tuple[set[str], list[str] | None]:
    """(the member names a class item declares, its bases' included; its template arguments as
    Astra takes them — a type float, a `bool` false — or None where one is neither and has no
    default)."""
    node, _, plist = _head(item.text)
    if node is None or node.type not in ("struct_specifier", "class_specifier"):
        return set(), None
    body = node.child_by_field_name("body")
    members: set[str] = set()
    for m in (body.named_children if body is not None else ()):
        if m.type in ("field_declaration", "declaration", "function_definition"):
            for d in m.children_by_field_name("declarator"):
                found = next((x for x in _walk(d) if x.type in ("field_identifier", "identifier")), None)
                if found is not None:
                    members.add(found.text.decode())
        elif m.type in ("alias_declaration", "type_definition"):
            n = m.child_by_field_name("name") or next(iter(m.children_by_field_name("declarator")), None)
            if n is not None:
                members.add(n.text.decode())
        elif m.type == "template_declaration":
            inner = next((c for c in m.named_children if c.type in ("function_definition", "declaration",
                                                                     "field_declaration")), None)
            found = next((x for x in _walk(inner) if x.type in ("field_identifier", "identifier")), None) \
                if inner is not None else None
            if found is not None:
                members.add(found.text.decode())
    for base in (n for c in node.named_children if c.type == "base_class_clause"
                 for n in c.named_children if n.type in ("type_identifier", "qualified_identifier", "template_type")):
        short = base.text.decode().split("<")[0].split("::")[-1].strip()
        parent = next((it for it in items if it.kind == "type" and short in it.defines), None)
        if parent is not None and depth < 4:
            members |= _class_members(parent, items, depth + 1)[0]
    args: list[str] | None = []
    for p in (plist.named_children if plist is not None else ()):
        if p.type == "type_parameter_declaration":
            args.append("float")
        elif p.type in ("optional_type_parameter_declaration", "optional_parameter_declaration"):
            break   # the defaults from here on
        elif p.type == "parameter_declaration" and p.child_by_field_name("type") is not None \
                and p.child_by_field_name("type").text.decode() == "bool":
            args.append("false")
        else:
            args = None
            break
    return members, args


def project_class_for(name: str, kernel, items) -> tuple[str, str] | None:
    """(the class as seen from the global scope, a note) for the class template parameter
    `name`: of the project's classes (the file's, then its headers': `items`) that declare every
    member the kernel names through it — and, for a local the kernel builds from k arguments, a
    constructor taking k —, the one with the fewest members (the closest fit), its type
    parameters float and `bool` ones false; None where none does."""
    used = members_used(name, kernel)
    if not used:
        return None
    built = constructed_with(name, kernel)
    fits = []
    for order, item in enumerate(items):
        if item.kind != "type" or not item.defines or ("struct" not in item.text and "class" not in item.text):
            continue
        members, args = _class_members(item, items)
        if args is None or not used <= members:
            continue
        short = next(iter(item.defines))
        # a local built from k arguments needs a constructor taking k (none declared: only k = 0)
        node = _head(item.text)[0]
        ctors = _constructors(node, short) if node is not None else []
        if any(not any(lo <= k <= hi for lo, hi in ctors) and (ctors or k) for k in built):
            continue
        spelled = "::".join([*item.namespaces, short]) + (f"<{', '.join(args)}>" if args else "")
        fits.append((len(members), order, spelled))
    if not fits:
        return None
    fits.sort()
    chosen = fits[0][2]
    others = [s for _, _, s in fits[1:4]]
    note = (f"template parameter `{name}`: no launch gives it; took `{chosen}`, a class of the project that has "
            f"every member the kernel names through it ({', '.join(f'`{m}`' for m in sorted(used))})"
            + (f" — the closest of several: {', '.join(others)} too" if others else ""))
    return chosen, note
