"""Propose a harness spec for a kernel that has none.

From the signature: const pointers are inputs, other pointers outputs, integer scalars are
sizes, float scalars get a value from their name. From a launch site in the same file: the
grid and block expressions, rewritten over the kernel's own parameter names. Sizes get
LLaMA-like values. Everything guessed is listed in `notes`, so the user knows what to check.

Long because each part of a proposal (launch, sizes, arguments, tolerances) reads the same launch site and body.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import ast

from . import access, dtypes, exprs, source
from .project import ProjectContext
from .source import ConfigVar, Kernel, LaunchSite, SourceModel
from .syntax import walk as _walk

# LLaMA-7B/13B/70B-like sizes: (test sizes, bench sizes) by what a size name suggests.
_SIZE_HINTS = [
    (("token", "batch", "row", "seq", "m", "rows", "num_tokens", "bs", "b"), [1, 7, 333], [4096]),
    (("t", "seq_len", "seqlen"), [1, 64, 257], [1024]),
    (("head_dim", "headdim", "hd"), [64, 128], [128]),
    (("head", "heads", "nh"), [1, 32], [32, 40, 64]),
    (("v", "vocab", "vocab_size"), [64, 1000], [50304]),
    (("hidden", "d", "dim", "n", "cols", "size", "k", "len", "numel", "count", "c", "channels"),
     [128, 1001, 4096], [4096, 11008]),
]


@dataclass
class Proposal:
    comment: str
    notes: list[str] = field(default_factory=list)


def _size_values(name: str) -> tuple[list[int], list[int]]:
    low = name.lower()
    for keys, test, bench in _SIZE_HINTS:
        if low in keys or any(low.endswith("_" + k) or low.startswith(k + "_") for k in keys):
            return test, bench
    return [1, 100, 4096], [4096]


def _strip_dim3(expr: str) -> list[str]:
    """'dim3(a, b)' -> ['a', 'b']; 'a' -> ['a']."""
    e = expr.strip()
    if e.startswith("dim3(") and e.endswith(")"):
        return exprs.split_top_level(e[5:-1])
    return [e]


_INT_WORDS = frozenset({"int", "unsigned", "signed", "long", "short", "const", "size_t", "ssize_t",
                        "int32_t", "int64_t", "uint32_t", "uint64_t", "std::size_t", "std::int64_t",
                        "std::int32_t", "std::uint32_t", "std::uint64_t"})
_MIN_MAX = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "::min": "min", "::max": "max",
            "cdiv": "cdiv", "ceil_div": "cdiv", "CEIL_DIV": "cdiv", "DIV_UP": "cdiv", "div_up": "cdiv",
            "ceildiv": "cdiv", "DIVUP": "cdiv", "divUp": "cdiv"}
_ARITH = frozenset({"+", "-", "*", "/", "%", "<<", ">>"})
_MAX_CONSTANT_DEPTH = 8  # a macro defined through macros; a cycle stops here


def _tokens(node, skip: tuple[str, ...] = ("comment",)) -> tuple[str, ...]:
    """The leaf tokens of an expression: equal for equal expressions, whatever the spacing."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.type in skip:
            continue
        if n.child_count == 0:
            out.append(n.text.decode())
        stack.extend(reversed(n.children))
    return tuple(out)


def _unparen(node):
    while node is not None and node.type == "parenthesized_expression" and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _is_int_type(node) -> bool:
    return node is not None and bool(node.text.decode().split()) and set(node.text.decode().split()) <= _INT_WORDS


class _HostExprs:
    """Host C++ launch expressions -> spec expressions over the sizes, read by their tree-sitter
    structure: host names become sizes through `mapping` (host expression text -> size name),
    macro and const names their value; `std::min`, integer casts and `a < b ? a : b` become
    `min`, nothing and `min(a, b)`."""

    def __init__(self, mapping: dict[str, str], constants: dict[str, str]):
        self.mapping: dict[tuple[str, ...], str] = {}
        for host, size in mapping.items():
            node = source.parse_expression(host)
            if node is not None:
                self.mapping[_tokens(node)] = size
        self.constants = constants

    def spec(self, text: str, free: list[str] | None = None) -> str | None:
        """The spec expression for `text`, or None. With `free`, unknown plain names are kept
        as they are and listed there (they become sizes of their own)."""
        node = source.parse_expression(text)
        found: list[str] = []
        out = self._expr(node, found if free is not None else None, 0) if node is not None else None
        if out is None:
            return None
        try:
            out = ast.unparse(exprs.parse(out).body)
        except exprs.ExprError:
            return None
        if free is not None:
            free.extend(n for n in found if n not in free)
        return out

    def _expr(self, node, free: list[str] | None, depth: int) -> str | None:
        size = self.mapping.get(_tokens(node))
        if size is not None:
            return size
        t = node.type

        def ex(n):
            return self._expr(n, free, depth) if n is not None else None

        if t == "identifier":
            name = node.text.decode()
            value = self.constants.get(name)
            if value is not None and depth < _MAX_CONSTANT_DEPTH:
                inner = source.parse_expression(value)
                r = self._expr(inner, free, depth + 1) if inner is not None else None
                return f"({r})" if r is not None else None
            if free is not None and value is None:
                free.append(name)
                return name
            return None
        if t == "number_literal":
            digits = node.text.decode().replace("'", "").rstrip("uUlL")
            try:
                return str(int(digits, 0))
            except ValueError:
                return None  # a float or an octal literal: not a size
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            r = ex(inner[0]) if len(inner) == 1 else None
            return f"({r})" if r is not None else None
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            if op is None or op.type not in _ARITH:
                return None
            left, right = ex(node.child_by_field_name("left")), ex(node.child_by_field_name("right"))
            return f"{left} {op.type} {right}" if left is not None and right is not None else None
        if t == "unary_expression":
            op = node.child_by_field_name("operator")
            r = ex(node.child_by_field_name("argument"))
            return f"{op.type}{r}" if op is not None and op.type in ("-", "+") and r is not None else None
        if t == "cast_expression":
            return ex(node.child_by_field_name("value")) if _is_int_type(node.child_by_field_name("type")) else None
        if t == "sizeof_expression":   # sizeof(float): the element sizes the spec knows
            inner = node.child_by_field_name("type") or node.child_by_field_name("value")
            text = inner.text.decode().strip("() ") if inner is not None else ""
            dt = dtypes.from_cpp(text)
            return str(dt.itemsize) if dt is not None else None
        if t == "call_expression":
            return self._call(node, ex)
        if t == "conditional_expression":
            return self._min_max(node, ex)
        return None

    def _call(self, node, ex) -> str | None:
        fn = node.child_by_field_name("function")
        args_node = node.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        if fn is None:
            return None
        # `static_cast<int>`, `std::max<int>`: the name without its template arguments, and those.
        name = "".join(_tokens(fn, skip=("comment", "template_argument_list")))
        targs = next((n for n in _walk(fn) if n.type == "template_argument_list"), None)
        if name == "static_cast" and targs is not None and len(args) == 1:
            types = [c for c in targs.named_children if c.type != "comment"]
            return ex(args[0]) if len(types) == 1 and _is_int_type(types[0]) else None
        if name in _MIN_MAX and len(args) == 2:
            a, b = ex(args[0]), ex(args[1])
            return f"{_MIN_MAX[name]}({a}, {b})" if a is not None and b is not None else None
        return None

    def _min_max(self, node, ex) -> str | None:
        """`a < b ? a : b` is min(a, b), `a > b ? a : b` max(a, b) (also with <=, >= and the
        branches swapped): exactly, since with a == b both branches agree. Other conditionals
        are not sizes we can write."""
        cond = _unparen(node.child_by_field_name("condition"))
        yes = _unparen(node.child_by_field_name("consequence"))
        no = _unparen(node.child_by_field_name("alternative"))
        if cond is None or yes is None or no is None or cond.type != "binary_expression":
            return None
        op = cond.child_by_field_name("operator")
        a, b = _unparen(cond.child_by_field_name("left")), _unparen(cond.child_by_field_name("right"))
        if op is None or op.type not in ("<", "<=", ">", ">=") or a is None or b is None:
            return None
        ta, tb, ty, tn = _tokens(a), _tokens(b), _tokens(yes), _tokens(no)
        less = op.type in ("<", "<=")
        if (ty, tn) == (ta, tb):
            fn = "min" if less else "max"
        elif (ty, tn) == (tb, ta):
            fn = "max" if less else "min"
        else:
            return None
        ra, rb = ex(a), ex(b)
        return f"{fn}({ra}, {rb})" if ra is not None and rb is not None else None


def _config_parts(what: str, text: str, var: ConfigVar | None, line: int, notes: list[str]) -> list[str]:
    """The host expressions of a launch's grid or block: a local dim3's constructor arguments
    when the launch names one we could follow, else the text as written."""
    if var is not None and var.dims is not None:
        return list(var.dims)
    if var is not None:
        notes.append(f"{what} `{var.name}` (line {line}) is a dim3 that {var.problem}: "
                     f"its value was not followed")
    return _strip_dim3(text)


def _site_mapping(kernel: Kernel, site: LaunchSite, size_names: list[str]) -> dict[str, str]:
    """Host expression -> size name, from the launch's argument list."""
    mapping = {n: n for n in size_names}
    for p, arg in zip(kernel.params, site.args):
        if p.name in size_names:
            mapping[arg.strip()] = p.name
    return mapping


# ---- reading the launching function ---------------------------------------------------------

BLOCK_DEFAULT = 256
RUNTIME = "<runtime>"       # a host local set through its address by a call (a device query)
RUNTIME_DEFAULT = 4         # such a value in a grid: a grid-stride kernel covers its sizes with any grid
_BLOCK_WORDS = ("block", "thread", "tpb", "nthreads", "num_threads", "bs")


def _host_locals(model: SourceModel, site: LaunchSite) -> dict[str, str]:
    """Plain local variables of the launching function with one initialised declaration and no
    later assignment (`const int grid_size = ceil_div(N, block_size);`): name -> initializer."""
    if site.function is None:
        return {}
    tree = source.parser().parse(model.text.encode("utf-8")).root_node
    fn = next((n for n in _walk(tree) if n.type == "function_definition" and source._declarator_name(
        source._function_declarator(n.child_by_field_name("declarator")))[0] == site.function), None)
    if fn is None:
        return {}
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    changed: set[str] = set()
    for n in _walk(fn):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                name = source._declarator_name(d)[0]
                if name is None:
                    continue
                counts[name] = counts.get(name, 0) + 1
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if value is not None and value.type not in ("initializer_list", "argument_list"):
                    out[name] = value.text.decode()
        elif n.type in ("assignment_expression", "update_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is not None and target.type == "identifier":
                changed.add(target.text.decode())
    for n in _walk(fn):   # `cudaDeviceGetAttribute(&sms, ...)`: a value the host reads at run time
        if n.type == "pointer_expression" and n.child_by_field_name("operator") is not None \
                and n.child_by_field_name("operator").type == "&":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and arg.text.decode() in out:
                out[arg.text.decode()] = RUNTIME
    return {k: v for k, v in out.items() if counts.get(k) == 1 and (k not in changed or v == RUNTIME)}


def _launch_of(kernel: Kernel, model: SourceModel, site: LaunchSite, size_names: list[str],
               notes: list[str]) -> tuple[list[str] | None, list[str] | None, str | None, list[str]]:
    """(grid, block, shared memory, new sizes) over the kernel's sizes, read from a launch site: dim3 variables
    and plain locals followed to their definitions, macros and constants by value; a block size
    the caller chooses (a launcher's `block_size` parameter) becomes 256, with a note."""
    line = site.span.start_line + 1
    where = f"line {line}" + (f", through macro {site.via_macro}" if site.via_macro else "")
    mapping = _site_mapping(kernel, site, size_names)
    grid_parts = _config_parts("grid", site.grid, site.grid_var, line, notes)
    block_parts = _config_parts("block", site.block, site.block_var, line, notes)
    local = _host_locals(model, site)
    for name in [k for k, v in local.items() if v == RUNTIME]:
        local[name] = str(RUNTIME_DEFAULT)
        if any(name in x for x in grid_parts + block_parts):
            notes.append(f"`{name}` is read from the device at run time ({where}): took {RUNTIME_DEFAULT}")
    # A local holding a bare number is a launch choice in a block (`const int threads = 256`)
    # but the problem's size in a grid (`const int num_tokens = 16` in main): that stays a size.
    literal = {k for k, v in local.items() if source.parse_expression(v) is not None
               and source.parse_expression(v).type == "number_literal"}
    block_values = {**model.constants, **local}
    runtime = {k for k, v in local.items() if v == str(RUNTIME_DEFAULT) and k in literal}
    grid_values = {**model.constants, **{k: v for k, v in local.items()
                                         if k not in literal or k in runtime or any(w in k.lower() for w in _BLOCK_WORDS)}}
    free: list[str] = []
    for x in grid_parts:
        _HostExprs(mapping, grid_values).spec(x, free)
    for x in block_parts:
        _HostExprs(mapping, block_values).spec(x, free)
    chosen = [f for f in free if any(w in f.lower() for w in _BLOCK_WORDS) and f not in size_names]
    for f in chosen:
        grid_values[f] = block_values[f] = str(BLOCK_DEFAULT)
        notes.append(f"block size `{f}` is chosen by the caller ({where}): took {BLOCK_DEFAULT}")
    new_sizes = [f for f in free if f not in chosen]
    for name in new_sizes:
        mapping[name] = name
    g = [_HostExprs(mapping, grid_values).spec(x) for x in grid_parts]
    b = [_HostExprs(mapping, block_values).spec(x) for x in block_parts]
    shared = None
    if site.shared_mem and site.shared_mem.strip() not in ("0", "0u"):
        shared = _HostExprs(mapping, block_values).spec(site.shared_mem)
        if shared is None:
            notes.append(f"dynamic shared memory `{site.shared_mem}` ({where}) could not be read over the sizes: "
                         f"set shared_mem")
    grid = g if g and all(g) else None
    block = b if b and all(b) else None
    if grid is None:
        notes.append(f"grid `{site.grid}` ({where}) could not be read over the sizes: guessed a grid")
    if block is None:
        notes.append(f"block `{site.block}` ({where}) could not be read over the sizes: guessed a block")
    return grid, block, shared, [n for n in new_sizes if grid is not None and any(n in exprs.names(x) for x in grid)]


def _pick_site(kernel: Kernel, model: SourceModel) -> LaunchSite | None:
    """The launch to read: one outside `main` first (a launcher function says what the kernel
    expects; `main` often loops over block sizes)."""
    sites = model.launches_of(kernel.name)
    if not sites:
        return None
    # outside main first; among launches that differ in template arguments, the general one
    # (`<scalar_t, 1>` rather than the `<scalar_t, 8>` a launcher takes only for aligned widths)
    def rank(s: LaunchSite):
        numbers = [int(t) for t in _split(s.template_args or "<>") if t.strip().isdigit()]
        return (s.function == "main", sum(numbers))
    return min(sites, key=rank)


# ---- element types: typedefs and the macros that select them -----------------------------------

class _Types:
    """C++ names read through the unit's items (the file and its project headers, with the
    macros defined before each, `#if`/`#ifdef` branches evaluated): `floatX` behind
    `#define ENABLE_BF16` is __nv_bfloat16."""

    def __init__(self, model: SourceModel, path: str | None, context: ProjectContext | None):
        from . import extract
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
        from .spec import split_template_args
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


# ---- shapes from the kernel's accesses ----------------------------------------------------------

_PROBE_VALUES = (37, 53, 29, 41, 23)
TABLE = "V"


def _fit(values: list[tuple[dict[str, int], int]], names: list[str]) -> list[str] | None:
    """A shape (a list of size names, possibly with a leading factor) whose product equals
    every measured extent: [N, C], [B, T, C], [2 * d]."""
    import itertools
    for r in range(1, min(3, len(names)) + 1):
        for combo in itertools.combinations(names, r):
            prod = [_prod(s[n] for n in combo) for s, _ in values]
            if not all(p > 0 for p in prod):
                continue
            # A vector access reaches up to a packet past the last aligned index (`i < n` on an
            # index stepping by 8): the same small overhang at every size is that, not the shape.
            for over in range(16):
                ratios = {(e - over) / p for (_, e), p in zip(values, prod)}
                if len(ratios) != 1:
                    continue
                c = ratios.pop()
                if c == 1:
                    return list(combo)
                if c == int(c) and 1 < c <= 16:
                    return list(combo[:-1]) + [f"{int(c)} * {combo[-1]}"]
    if all(e == values[0][1] for _, e in values) and values[0][1] > 0:
        return [str(values[0][1])]
    return None


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@dataclass
class _Shapes:
    shapes: dict[str, list[str]]
    inout: set[str]
    read_only: set[str]
    tables: set[str]        # integer parameters whose values index a table of TABLE rows
    uses_table: bool


def _shapes(kernel: Kernel, size_names: list[str], grid: list[str], block: list[str], elem_bytes: dict[str, int],
            int_params: set[str], constants: dict[str, int]) -> _Shapes | None:
    samples = []
    names = size_names + [TABLE]
    for k in range(3):
        # multiples of 16: a row split into packets of 8 (`hidden / 8`) is then read whole
        sizes = {n: _PROBE_VALUES[(i + k) % len(_PROBE_VALUES)] * (k + 2) * 16 for i, n in enumerate(names)}
        try:
            g = [exprs.evaluate_int(x, sizes) for x in grid]
            b = [exprs.evaluate_int(x, sizes) for x in block]
        except exprs.ExprError:
            return None
        g, b = (g + [1, 1, 1])[:3], (b + [1, 1, 1])[:3]
        if min(g + b) < 1:
            return None
        facts = access.analyse(kernel, sizes, g, b, elem_bytes, int_params, sizes[TABLE], constants)
        if facts is None:
            return None
        samples.append((sizes, facts))
    shapes: dict[str, list[str]] = {}
    for p in kernel.params:
        if not p.is_pointer:
            continue
        uses = [f.uses[p.name] for _, f in samples]
        if any(u.unknown or u.hi is None for u in uses):
            continue
        fitted = _fit([(s, u.hi + 1) for (s, _), u in zip(samples, uses)], names)
        if fitted is not None:
            shapes[p.name] = fitted
    last = samples[-1][1].uses
    uses_table = any(TABLE in " ".join(v) for v in shapes.values())
    return _Shapes(shapes, {n for n, u in last.items() if u.read and u.written},
                   {n for n, u in last.items() if u.read and not u.written},
                   {n for n, u in last.items() if u.table_loads} if uses_table else set(), uses_table)


# ---- the proposal --------------------------------------------------------------------------------

_SCALAR_GUESSES = (("eps", "1e-5"), ("epsilon", "1e-5"), ("learning_rate", "1e-3"), ("lr", "1e-3"),
                   ("beta1_correction", "0.1"), ("beta2_correction", "0.001"), ("beta1", "0.9"),
                   ("beta2", "0.999"), ("weight_decay", "0.01"), ("decay", "0.01"), ("scale", "0.5"),
                   ("alpha", "1.5"), ("momentum", "0.9"), ("temperature", "0.7"))


def _scalar_guess(name: str) -> str:
    low = name.lower()
    return next((v for k, v in _SCALAR_GUESSES if low == k or low.endswith("_" + k) or low.startswith(k)), "1.0")


def infer(kernel: Kernel, model: SourceModel, *, path: str | None = None,
          context: ProjectContext | None = None) -> Proposal:
    notes: list[str] = []
    errors: list[str] = []
    types = _Types(model, path, context)
    site = _pick_site(kernel, model)
    instantiate = _template_args(kernel, site, notes)
    targs = dict(zip(kernel.template_param_names, _split(instantiate))) if instantiate else {}

    def cpp(p) -> tuple[str | None, str]:
        base = targs.get(p.base_type, p.base_type)
        base = " ".join(w for w in base.replace("*", " ").split() if w not in ("const", "volatile", "__restrict__"))
        return types.resolve(base) if base else (None, "no type")

    resolved = {p.name: cpp(p) for p in kernel.params}
    for p in kernel.params:
        spelled, why = resolved[p.name]
        if spelled is not None and why and p.base_type not in targs:
            note = f"`{p.name}`: {why}"
            if note not in notes and not any(why in n for n in notes):
                notes.append(note)
    size_names = [p.name for p in kernel.params if not p.is_pointer and resolved[p.name][0] is not None
                  and dtypes.from_cpp(resolved[p.name][0]).name.startswith(("int", "uint"))]
    if not size_names:
        size_names = ["n"]
        notes.append("no integer parameter to take sizes from: invented a size `n`; adjust shapes")
    grid = block = shared = None
    if site is not None:
        grid, block, shared, extra = _launch_of(kernel, model, site, size_names, notes)
        for name in reversed(extra):
            size_names.insert(0, name)
    else:
        notes.append("no launch site of this kernel in the file: grid and block are guesses")
    first = size_names[0]
    if grid is None:
        grid = [f"cdiv({first}, 256)"] if len(size_names) == 1 else [size_names[0]]
    if block is None:
        block = ["256"] if len(size_names) == 1 else [f"min({size_names[-1]}, 1024)"]

    elem_bytes = {}
    int_params = set()
    for p in kernel.params:
        dt = dtypes.from_cpp(resolved[p.name][0]) if resolved[p.name][0] else None
        if p.is_pointer and dt is not None:
            elem_bytes[p.name] = dt.itemsize
            if not dt.is_float:
                int_params.add(p.name)
    constants = types.packet_sizes()
    constants.update({k: int(v) for k, v in targs.items() if v.strip().isdigit()})  # template `width = 1`
    found = _shapes(kernel, [n for n in size_names if n != TABLE], grid, block, elem_bytes, int_params, constants)
    if found is not None and found.uses_table and TABLE not in size_names:
        size_names.append(TABLE)
    require = _requirements(grid, block, found, size_names, kernel)

    lines = ["/* @astra", f"grid = {_toml_list(grid)}", f"block = {_toml_list(block)}"]
    earlier = _earlier_version(kernel, model)
    if earlier is not None:
        lines.append(f'reference = "{earlier}"')
        notes.append(f"`{earlier}` is an earlier version of this kernel (same parameters): it is the reference; "
                     f"give it a spec of its own so it runs with its own launch")
    if shared:
        lines.append(f'shared_mem = "{shared}"')
    if instantiate:
        lines.append(f'instantiate = "{instantiate}"')
    if require:
        lines.append(f"require = {_toml_list(require)}")
    lines += ["", "[sizes]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[0]}")
    lines += ["", "[bench]"]
    for n in size_names:
        lines.append(f"{n} = {_size_values(n)[1]}")
    lines += ["", "[args]"]
    fallback_shape = size_names if len(size_names) <= 2 else size_names[:2]
    width = max(len(p.name) for p in kernel.params) if kernel.params else 0
    guessed_shapes = []
    for p in kernel.params:
        spelled, why = resolved[p.name]
        dt = dtypes.from_cpp(spelled) if spelled else None
        if p.is_pointer:
            if dt is None:
                errors.append(f"`{p.name}`: the element type `{p.base_type}` could not be resolved ({why}): "
                              f"set its type (half, bfloat16, float, ...) — Astra never guesses one")
                tname = "?"
            else:
                tname = dt.name
            shape = found.shapes.get(p.name) if found is not None else None
            if shape is not None and TABLE in shape:   # a table's rows come first: [V, C]
                shape = [TABLE] + [d for d in shape if d != TABLE]
            if shape is None:
                shape = fallback_shape
                guessed_shapes.append(p.name)
            role = ""
            if not p.is_const:
                if found is not None and p.name in found.inout:
                    role = ", inout = true"
                elif found is not None and p.name in found.read_only:
                    role = ""
                    notes.append(f"`{p.name}` is not const but the kernel only reads it: taken as an input")
                else:
                    role = ", output = true"
                    if found is None:
                        notes.append(f"`{p.name}` is a non-const pointer: assumed an output (use inout = true if "
                                     f"the kernel also reads it)")
            init = ""
            if earlier is not None and tname == "float" and role and _reduces(kernel):
                init = ", atol = 1e-4, rtol = 1e-3"
                notes.append(f"`{p.name}`: this version sums in another order than `{earlier}`: float tolerance "
                             f"loosened to atol 1e-4, rtol 1e-3")
            if found is not None and p.name in found.tables:
                init = f', init = "randint(0, {TABLE})"'
                notes.append(f"`{p.name}` holds indices into a table of {TABLE} rows: drawn from randint(0, {TABLE})")
            lines.append(f'{p.name:<{width}} = {{ type = "{tname}", shape = {_toml_list(shape)}{role}{init} }}')
        elif p.name in size_names:
            lines.append(f'{p.name:<{width}} = "{p.name}"')
        else:
            value = _scalar_guess(p.name)
            if dt is None:
                lines.append(f'{p.name:<{width}} = {{ value = {value}, type = "float" }}')
                notes.append(f"`{p.name}`: type {p.type!r} unknown, assumed float")
            else:
                lines.append(f"{p.name:<{width}} = {value}")
                notes.append(f"`{p.name}` = {value} is a guess")
    for n in size_names:
        if kernel.param(n) is None and n != TABLE:
            notes.append(f"size `{n}` comes from the launch site's grid; it is not a kernel parameter")
    if guessed_shapes:
        notes.append(f"shape of {', '.join(f'`{n}`' for n in guessed_shapes)} could not be read from the kernel's "
                     f"indexing: set to {_toml_list(fallback_shape)} — CHECK each against the real extent")
    lines.append("*/")
    return Proposal("\n".join(lines) + "\n", errors + notes)


def _reduces(kernel: Kernel) -> bool:
    """The kernel combines values across threads (warp shuffles, cooperative-groups reductions,
    shared-memory partials, atomics): its rounding differs from a sequential version's."""
    body = access.kernel_body(kernel)
    calls = {n.child_by_field_name("function").text.decode().split("::")[-1].split("<")[0]
             for n in _walk(body) if n.type == "call_expression" and n.child_by_field_name("function") is not None} \
        if body is not None else set()
    return any(c.startswith(("__shfl", "atomicAdd", "warp_sum", "warp_reduce", "block_reduce", "block_sum"))
               or c in ("reduce", "__syncthreads") for c in calls)


def _version(name: str) -> tuple[str, int] | None:
    """'gelu_forward_kernel2' -> ('gelu_forward_kernel', 2)."""
    stem = name.rstrip("0123456789")
    return (stem, int(name[len(stem):])) if stem != name else None


def _earlier_version(kernel: Kernel, model: SourceModel) -> str | None:
    """The closest lower-numbered version of this kernel in the file with the same parameters
    (kernel-development files keep kernel1, kernel2, ... side by side)."""
    mine = _version(kernel.name)
    if mine is None:
        return None
    def sig(k: Kernel) -> list[tuple[str, str]]:   # __restrict__ does not change the interface
        return [(p.name, " ".join(p.type.replace("__restrict__", " ").split())) for p in k.params]
    older = [(v[1], k.name) for k in model.kernels if k is not kernel and (v := _version(k.name)) is not None
             and v[0] == mine[0] and v[1] < mine[1] and sig(k) == sig(kernel)]
    return max(older)[1] if older else None


def _split(instantiate: str) -> list[str]:
    from .spec import split_template_args
    return split_template_args(instantiate)


def _requirements(grid: list[str], block: list[str], found: _Shapes | None, size_names: list[str],
                  kernel: Kernel) -> list[str]:
    """`n % 8 == 0` when the launch gives each thread a fixed chunk (`cdiv(n, 256 * 8)`): the
    kernel then handles no tail, as its launcher assumes."""
    out = []
    # a loop over `size / 8` packets handles no tail: the size must be a multiple of 8
    body = source.parser().parse(kernel.text.encode()).root_node
    for n in _walk(body):
        if n.type == "for_statement" and n.child_by_field_name("condition") is not None:
            for d in _walk(n.child_by_field_name("condition")):
                if d.type == "binary_expression" and d.child_by_field_name("operator").type == "/":
                    a, b = d.child_by_field_name("left"), d.child_by_field_name("right")
                    if a is not None and b is not None and a.type == "identifier" and a.text.decode() in size_names \
                            and b.type == "number_literal" and b.text.decode().isdigit() and int(b.text.decode()) > 1:
                        req = f"{a.text.decode()} % {b.text.decode()} == 0"
                        if req not in out:
                            out.append(req)
    if "gridDim" in kernel.text:   # a grid-stride loop takes any size
        return out
    for g in grid:
        node = source.parse_expression(g)
        if node is None or node.type != "call_expression":
            continue
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or fn.text.decode() != "cdiv" or args is None or len(args.named_children) != 2:
            continue
        total, per = (a.text.decode() for a in args.named_children)
        if total not in size_names:
            continue
        factors = [f.strip() for f in per.split("*")]
        chunk = [f for f in factors if f.isdigit() and f not in block and int(f) > 1]
        if len(factors) > 1 and chunk:
            out.append(f"{total} % {chunk[-1]} == 0")
    return out


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"
