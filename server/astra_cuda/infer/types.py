"""Element types and template arguments: C++ names read through the file and its project headers
(typedefs, `using`, the macros that select them) and the template arguments a launch gives."""
from __future__ import annotations

from .. import dtypes, exprs, source
from ..project import ProjectContext
from ..source import Kernel, LaunchSite, SourceModel
from ..syntax import walk as _walk

# ---- element types: typedefs and the macros that select them -----------------------------------

class _Types:
    """C++ names read through the unit's items (the file and its project headers, with the
    macros defined before each, `#if`/`#ifdef` branches evaluated): `floatX` behind
    `#define ENABLE_BF16` is __nv_bfloat16."""

    def __init__(self, model: SourceModel, path: str | None, context: ProjectContext | None):
        from .. import extract
        self.items = []
        if path is not None:
            try:
                reader = extract.header_reader(path, context or ProjectContext())
                self.items = reader.items(model, path)
            except Exception:  # a header that cannot be read: what the file itself says still counts
                self.items = list(model.items)
        else:
            self.items = list(model.items)
        self.macros: list[tuple[int, str, str | None]] = []  # (position, name, value or None to undefine)
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
        if dtypes.from_cpp(name) is not None or dtypes.vector_of(name) is not None:
            return name, ""
        if depth > 8:
            return None, f"`{name}` is defined through too many typedefs"
        cands = [(pos, it) for pos, it in enumerate(self.items) if it.kind == "type" and name in it.defines]
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


def _why_branch(item) -> str:
    g = item.guards[-1]
    return f"under `{g.heads[-1]}`"


def _typedef_target(text: str, name: str) -> str | None:
    """'typedef __nv_bfloat16 floatX;' -> '__nv_bfloat16'; 'using T = float;' -> 'float'."""
    node = source.parser().parse(text.encode()).root_node
    for n in _walk(node):
        if n.type == "type_definition":
            tn = n.child_by_field_name("type")
            return " ".join(tn.text.decode().split()) if tn is not None else None
        if n.type == "alias_declaration":
            tn = n.child_by_field_name("type")
            return " ".join(tn.text.decode().split()) if tn is not None else None
    return None


# ---- template arguments -----------------------------------------------------------------------

_DISPATCH_TYPE = "float"   # what a dispatch macro's scalar_t becomes in the proposal
_DISPATCH_NAMES = ("scalar_t", "scalar_type", "input_t", "output_t")


def _dispatch_names(arg: str) -> list[str]:
    """The names in `arg` that dispatch macros give the element type (`scalar_t`, apex's
    `scalar_t_0`, `scalar_t_1`)."""
    node = source.parse_expression(f"__astra_k<{arg}>")
    names = {n.text.decode() for n in _walk(node) if n.type in ("identifier", "type_identifier")} if node else set()
    return sorted(n for n in names if n in _DISPATCH_NAMES or (n.startswith("scalar_t_") and n[9:].isdigit()))


def _template_args(kernel: Kernel, site: LaunchSite | None, notes: list[str], program=None,
                   constants: dict[str, str] | None = None, known: frozenset[str] = frozenset()) -> str | None:
    """`instantiate`: one argument per template parameter, from (in this order) the launch's own
    template arguments — a launcher's template parameter followed to its callers and explicit
    instantiations, a dispatch macro's scalar_t taken as float, names evaluated as constants —,
    the file's explicit instantiations of the kernel, the parameter's default; otherwise a
    type parameter is float and a device-function parameter the first matching device function
    of the file, each with a note."""
    if not kernel.is_template:
        return None
    given: list[str] = split(site.template_args) if site is not None and site.template_args else []
    explicit = program.instantiations(kernel.name) if program is not None else []
    if not given and explicit:
        given = list(explicit[0])
        notes.append(f"template arguments from the file's explicit instantiation `{kernel.name}<{', '.join(given)}>`")
    out: list[str] = []
    bound: dict[str, str] = {}
    for k, (param, name) in enumerate(zip(kernel.template_params, kernel.template_param_names)):
        arg = given[k].strip() if k < len(given) else None
        if arg is not None:
            arg = _resolve_arg(arg, site, program, constants or {}, notes, name, known)
        if arg is None and "=" in param:   # a default argument, over the arguments so far
            default = param.split("=", 1)[1].strip()
            for pname, value in bound.items():
                default = _replace_word(default, pname, value)
            arg = default
        if arg is None:
            arg = _fallback_arg(param, name, kernel, program, bound, notes)
        bound[name] = arg
        out.append(arg)
    if any(_dispatch_names(g) for g in given):
        notes.append(f"instantiate: the dispatch macro's scalar_t became {_DISPATCH_TYPE} "
                     f"(use __half or __nv_bfloat16 to test those)")
    return "<" + ", ".join(out) + ">"


def _resolve_arg(arg: str, site: LaunchSite | None, program, constants: dict[str, str], notes: list[str],
                 name: str, known: frozenset[str]) -> str | None:
    """One template argument of a launch as something the spec can name, or None."""
    for host in _dispatch_names(arg):   # the type a dispatch macro's lambda names
        arg = _replace_word(arg, host, _DISPATCH_TYPE)
    arg = " ".join(w for w in arg.split() if w != "typename")   # not needed outside a template
    if _acceptable(arg, known):
        return arg
    # a template parameter of the launching function: what its callers give it
    if site is not None and program is not None and site.function:
        fn = program.function(site.function)
        params = _template_param_names(fn[0]) if fn is not None else []
        if arg in params:
            idx = params.index(arg)
            for inst in program.instantiations(site.function):
                given = _usable(inst[idx], known, constants) if idx < len(inst) else None
                if given is not None:
                    notes.append(f"template parameter `{name}`: `{arg}` of `{site.function}` from its explicit "
                                 f"instantiation `{site.function}<{', '.join(inst)}>`")
                    return given
            for call in program.calls(site.function):
                given = _usable(call.template_args[idx], known, constants) if idx < len(call.template_args) else None
                if given is not None:
                    notes.append(f"template parameter `{name}`: `{arg}` of `{site.function}` as "
                                 f"`{call.caller or 'its caller'}` calls it (`{site.function}<"
                                 f"{', '.join(call.template_args)}>`)")
                    return given
    value = _constant_value(arg, constants)
    if value is not None:
        return value
    return None


def _acceptable(arg: str, known: frozenset[str] | set[str]) -> bool:
    """An argument the spec's `instantiate` accepts and that names only what the program
    defines (types, device functions, enumerators) — never a template parameter or a local of
    the launcher left to resolve."""
    from ..spec import parse_template_args
    try:
        parse_template_args(f"<{arg}>")
    except ValueError:
        return False
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


def _usable(arg: str, known: frozenset[str], constants: dict[str, str]) -> str | None:
    """`arg` as the spec can name it: as it is, or the value of the constant it names (an
    enumerator of a header beside the file: `General8bit` -> 0)."""
    return arg if _acceptable(arg, known) else _constant_value(arg, constants)


def _constant_value(arg: str, constants: dict[str, str]) -> str | None:
    """An integer template argument written over constants (`1 * internal_unRoll`), evaluated."""
    from .hostexprs import _HostExprs
    expr = _HostExprs({}, constants).spec(arg)
    if expr is None:
        return None
    try:
        return str(exprs.evaluate_int(expr, {}))
    except exprs.ExprError:
        return None


def _template_param_names(fn) -> list[str]:
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
            out.append(source._declarator_name(name)[0] or name.text.decode())
    return out


_INDEX_WORDS = ("indices", "index", "idx", "ids", "offsets", "positions", "indptr")


def _fallback_arg(param: str, name: str, kernel: Kernel, program, bound: dict[str, str], notes: list[str]) -> str:
    """No launch, instantiation or default gives this template parameter: a type becomes float,
    a device function the first device function of the file that fits, a bool `false`, an
    integer 1 — each a guess the notes name."""
    head = param.split("=", 1)[0].strip()
    if head.split()[0] in ("typename", "class"):
        # the type of index arrays (`IdType* batch_indices`) is an integer type
        if name.lower().startswith(("id", "idx", "index", "int")) or any(
                p.base_type == name and any(w in p.name.lower() for w in _INDEX_WORDS) for p in kernel.params):
            notes.append(f"template parameter `{name}`: no launch gives it; took int32 (it types indices)")
            return "int32_t"
        notes.append(f"template parameter `{name}`: no launch gives it; took {_DISPATCH_TYPE}")
        return _DISPATCH_TYPE
    if "(" in head and "*" in head:   # a function pointer: `T (*ACT)(const T&)`
        fn = _device_function_for(head, kernel, program, bound)
        if fn is not None:
            notes.append(f"template parameter `{name}`: no launch gives it; took the device function `{fn}`")
            return fn
    if head.split()[0] == "bool":
        notes.append(f"template parameter `{name}`: no launch gives it; took false")
        return "false"
    notes.append(f"template parameter `{name}`: no launch gives it; took 1")
    return "1"


def _device_function_for(head: str, kernel: Kernel, program, bound: dict[str, str]) -> str | None:
    """The first device function of the file taking as many parameters as the function-pointer
    parameter `head` (`scalar_t (*ACT_FN)(const scalar_t&)`), instantiated with the kernel's
    first type argument when it is a template."""
    if program is None:
        return None
    wanted = head.rsplit("(", 1)[1].count(",") + 1 if head.rstrip(")").rsplit("(", 1)[1].strip() else 0
    first_type = next(iter(bound.values()), _DISPATCH_TYPE)
    for item in program.model.items:
        if item.kind != "device_function" or not item.defines:
            continue
        text = item.text.split("{", 1)[0]
        if "(" not in text or text.count("(") > 2:
            continue
        args = text.rsplit("(", 1)[1].rsplit(")", 1)[0].strip()
        if (args.count(",") + 1 if args else 0) != wanted:
            continue
        fn_name = next(iter(item.defines))
        qualified = "::".join([*item.namespaces, fn_name]) if item.namespaces else fn_name
        return f"{qualified}<{first_type}>" if text.lstrip().startswith("template") else qualified
    return None


def _replace_word(text: str, word: str, by: str) -> str:
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
    from ..spec import split_template_args
    return split_template_args(instantiate)


# ---- names a dispatch macro defines ---------------------------------------------------------

def macro_constants(items) -> dict[str, list[tuple[list[str], str, list[int]]]]:
    """Function-like macros that declare integer constants in their cases (`case 64: { constexpr
    size_t HEAD_DIM = 64; __VA_ARGS__ }`): macro name -> [(its parameters, the declared name,
    the values it takes)], read from each body's tree."""
    out: dict[str, list[tuple[list[str], str, list[int]]]] = {}
    for it in items:
        if it.kind != "macro" or "constexpr" not in it.text and "const " not in it.text:
            continue
        root = source.parser().parse(it.text.encode()).root_node
        for d in (n for n in _walk(root) if n.type == "preproc_function_def"):
            name, params, value = (d.child_by_field_name(f) for f in ("name", "parameters", "value"))
            if name is None or value is None:
                continue
            plist = [c.text.decode() for c in params.named_children if c.type == "identifier"] if params else []
            code = value.text.decode().replace("\\\n", "\n")   # the body without its line continuations
            body = source.parser().parse(f"void __astra_m() {{ {code} }}".encode()).root_node
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
            for declared, values in found.items():
                out.setdefault(name.text.decode(), []).append((plist, declared, values))
    return out


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
        for plist, declared, values in macros.get(call.function, ()):
            name = declared
            if declared in plist:   # declared through a parameter: the name the use passes there
                idx = plist.index(declared)
                name = call.args[idx].strip() if idx < len(call.args) else declared
            if not name.isidentifier() or name in out:
                continue
            vec = "vec" in name.lower() and (16 // max(1, type_size)) in values
            out[name] = str(16 // max(1, type_size) if vec else min(values))
    return out
