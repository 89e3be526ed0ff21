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
        macros = self.defined_at(pos)
        for g in item.guards:
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
        """(a spelling dtypes knows, or None; how it was resolved / why not)."""
        if dtypes.from_cpp(name) is not None:
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


def _template_args(kernel: Kernel, site: LaunchSite | None, notes: list[str]) -> str | None:
    """`instantiate` from the launch's template arguments (scalar_t of a dispatch macro becomes
    float), one per template parameter, or None."""
    if not kernel.is_template:
        return None
    given = []
    if site is not None and site.template_args:
        from ..spec import split_template_args
        given = split_template_args(site.template_args)
    out = []
    for k, (param, name) in enumerate(zip(kernel.template_params, kernel.template_param_names)):
        arg = given[k].strip() if k < len(given) else None
        is_type = param.split()[0] in ("typename", "class")
        if arg is not None:
            for host in _DISPATCH_NAMES:   # the type a dispatch macro's lambda names
                arg = _replace_word(arg, host, _DISPATCH_TYPE)
            out.append(arg)
            continue
        if "=" in param:   # a default argument
            break
        if is_type:
            out.append(_DISPATCH_TYPE)
            notes.append(f"template parameter `{name}`: no launch gives it; took {_DISPATCH_TYPE}")
        else:
            out.append("1")
            notes.append(f"template parameter `{name}`: no launch gives it; took 1")
    if any(_replace_word(g, h, "") != g for g in given for h in _DISPATCH_NAMES):
        notes.append(f"instantiate: the dispatch macro's scalar_t became {_DISPATCH_TYPE} "
                     f"(use __half or __nv_bfloat16 to test those)")
    return "<" + ", ".join(out) + ">"


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
