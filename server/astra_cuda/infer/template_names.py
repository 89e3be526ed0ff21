"""How a template argument is spelled and whether the spec can use it: the names the program
defines (types, device functions, enumerators), a constant's value, a name qualified from the
global scope, a template's parameter names and defaults, a word replaced inside an argument,
and an `instantiate` list split into its arguments. Separate because every source of an
argument (`template_args`) and its callers check and spell names the same way."""
from __future__ import annotations

from ..model import dtypes, exprs, source
from ..model import syntax
from ..model.syntax import walk as _walk


def acceptable(arg: str, known: frozenset[str] | set[str]) -> bool:
    """An argument the spec's `instantiate` accepts and that names only what the program
    defines (types, device functions, enumerators) — never a template parameter or a local of
    the launcher left to resolve."""
    from ..model.spec import parse_template_args
    if arg.rstrip().endswith("*"):   # a pointer type (`at::Half *`): the kernel's parameter of it is a buffer
        pointee = " ".join(w for w in arg.rstrip()[:-1].split() if w != "const")
        return bool(pointee) and "*" not in pointee and acceptable(pointee, known)
    try:
        parse_template_args(f"<{arg}>")
    except ValueError:
        return False
    if dtypes.from_cpp(arg) is not None:   # an element type however spelled (`c10::Float8_e4m3fn`)
        return True
    node = source.parse_expression(f"__astra_k<{arg}>")
    if node is None:
        return False
    for n in _walk(node):
        if n.type not in ("identifier", "type_identifier") or n.text.decode() == "__astra_k":
            continue
        parent = n.parent
        if parent is not None and parent.type == "qualified_identifier" and parent.child_by_field_name("name") == n \
                and parent.child_by_field_name("scope") is not None \
                and parent.child_by_field_name("scope").type == "template_type":
            continue   # `Traits<float>::Type`: the member of a type that is itself checked
        name = n.text.decode()
        if name not in known and dtypes.from_cpp(name) is None and name not in dtypes.VECTORS:
            return False
    return True


def enumerators(texts) -> dict[str, str]:
    """Enumerator -> its integer value, from the enums in these source texts."""
    out: dict[str, str] = {}
    for text in texts:
        if "enum" not in text:
            continue
        root = source.parser().parse(text.encode("utf-8")).root_node
        for lst in (n for n in _walk(root) if n.type == "enumerator_list"):
            nxt = 0
            for e in (c for c in lst.named_children if c.type == "enumerator"):
                name, value = e.child_by_field_name("name"), e.child_by_field_name("value")
                if name is None:
                    continue
                if value is not None:
                    try:
                        nxt = int(value.text.decode().rstrip("uUlL"), 0)
                    except ValueError:
                        out.pop(name.text.decode(), None)
                        continue
                out[name.text.decode()] = str(nxt)
                nxt += 1
    return out


def known_names(items) -> frozenset[str]:
    """What the file and its project headers define, enumerators included."""
    out: set[str] = set()
    for it in items:
        out |= it.defines
        if it.kind == "type" and "enum" in it.text:
            root = source.parser().parse(it.text.encode()).root_node
            out |= {e.child_by_field_name("name").text.decode() for e in _walk(root)
                    if e.type == "enumerator" and e.child_by_field_name("name") is not None}
    return frozenset(out)


def usable_arg(arg: str, known: frozenset[str], constants: dict[str, str]) -> str | None:
    """`arg` as the spec can name it: as it is, or the value of the constant it names (an
    enumerator of a header beside the file: `General8bit` -> 0)."""
    return arg if acceptable(arg, known) else constant_value(arg, constants)


def constant_value(arg: str, constants: dict[str, str]) -> str | None:
    """An integer template argument written over constants (`1 * internal_unRoll`), evaluated."""
    from .hostexprs import HostExprs
    expr = HostExprs({}, constants).spec(arg)
    if expr is None:
        return None
    try:
        return str(exprs.evaluate_int(expr, {}))
    except exprs.ExprError:
        return None


def is_type_param(param: str) -> bool:
    """`typename T`, `class T = float` (not a template template parameter)."""
    return param.split()[0] in ("typename", "class") if param.split() else False


def is_pack(param: str) -> bool:
    """`typename... Args`, `int... Ns`: a template parameter pack."""
    return "..." in param.split("=", 1)[0]


def qualify(arg: str, qualified: dict[str, str] | None) -> str:
    """`arg` with each name that is not already qualified written from the global scope
    (`GeluActivation` -> `fastertransformer::GeluActivation`)."""
    if not qualified:
        return arg
    node = source.parse_expression(f"__astra_k<{arg}>")
    if node is None:
        return arg
    code = f"__astra_k<{arg}>"
    base = node.start_byte
    edits = []
    for n in _walk(node):
        if n.type not in ("identifier", "type_identifier", "namespace_identifier"):
            continue
        word = n.text.decode()
        if word not in qualified or code[:n.start_byte - base].rstrip().endswith("::"):
            continue   # already named through a scope
        edits.append((n.start_byte - base, n.end_byte - base, qualified[word]))
    for s_, e_, by in sorted(edits, reverse=True):
        code = code[:s_] + by + code[e_:]
    return code[len("__astra_k<"):-1]


def qualified_names(items) -> dict[str, str]:
    """Each name a namespace of the file or its headers defines -> that name qualified, where
    the name is defined in one namespace only (a name also defined at global scope stays)."""
    where: dict[str, set[tuple[str, ...]]] = {}
    for it in items:
        if it.kind in ("type", "device_function", "kernel", "variable", "host_function"):
            for n in it.defines:
                where.setdefault(n, set()).add(tuple(ns for ns in it.namespaces if ns))
    return {n: "::".join([*next(iter(nss)), n]) for n, nss in where.items()
            if len(nss) == 1 and next(iter(nss))}


def template_param_defaults(fn) -> dict[str, str]:
    """The default argument of each template parameter of a function definition that has one."""
    parent = fn.parent
    if parent is None or parent.type != "template_declaration":
        return {}
    params = parent.child_by_field_name("parameters")
    names = template_param_names_of(fn)
    out = {}
    for name, p in zip(names, params.named_children if params is not None else []):
        default = p.child_by_field_name("default_value") or p.child_by_field_name("default_type")
        if default is not None:
            out[name] = " ".join(default.text.decode().split())
    return out


def template_param_names_of(fn) -> list[str]:
    """The template parameter names of a function definition's `template <...>` (or [])."""
    parent = fn.parent
    if parent is None or parent.type != "template_declaration":
        return []
    params = parent.child_by_field_name("parameters")
    out = []
    for p in (params.named_children if params is not None else []):
        name = p.child_by_field_name("name") or p.child_by_field_name("declarator")
        if name is None:
            ids = [c for c in _walk(p) if c.type in ("type_identifier", "identifier")]
            name = ids[-1] if ids else None
        if name is not None:
            out.append(syntax.declarator_name(name)[0] or name.text.decode())
    return out


def replace_word(text: str, word: str, by: str) -> str:
    node = source.parse_expression("__astra_k<" + text + ">")
    if node is None:
        return text
    code = ("__astra_k<" + text + ">").encode()
    edits = [(n.start_byte, n.end_byte) for n in _walk(node)
             if n.type in ("type_identifier", "identifier") and n.text.decode() == word]
    # parse_expression wraps the text: map its offsets back
    base = node.start_byte
    for s_, e_ in sorted(edits, reverse=True):
        code = code[:s_ - base] + by.encode() + code[e_ - base:]
    return code.decode()[len("__astra_k<"):-1]


def split(instantiate: str) -> list[str]:
    from ..model.spec import split_template_args
    return split_template_args(instantiate)


# What `infer_template_args` writes in the notes when nothing gave an argument (a dispatch macro's
# scalar_t taken as float is a choice among the types it offers, not a guess).
