"""Host C++ expressions of a launch (`ceil_div(N, block_size * 8)`, `std::min(d, 1024)`, casts,
`a < b ? a : b`) read by their tree-sitter structure into spec expressions over the sizes."""
from __future__ import annotations

import ast
import re
from collections.abc import Callable

from ..model import dtypes, exprs, macros, source
from ..model.syntax import walk as _walk

_INT_WORDS = frozenset({"int", "unsigned", "signed", "long", "short", "const", "size_t", "ssize_t",
                        "int32_t", "int64_t", "uint32_t", "uint64_t", "std::size_t", "std::int64_t",
                        "std::int32_t", "std::uint32_t", "std::uint64_t"})
_MIN_MAX = {"min": "min", "max": "max", "std::min": "min", "std::max": "max", "::min": "min", "::max": "max",
            "cdiv": "cdiv", "ceil_div": "cdiv", "CEIL_DIV": "cdiv", "DIV_UP": "cdiv", "div_up": "cdiv",
            "ceildiv": "cdiv", "DIVUP": "cdiv", "divUp": "cdiv",
            "gcd": "gcd", "std::gcd": "gcd"}   # `std::gcd(16 / sizeof(T), d)`: the widest vector dividing a row
# a launcher's block size rounded up to a power of two, however the project spells the helper
_NEXT_POW2 = frozenset({"next_pow2", "nextPow2", "next_power_of_2", "next_power_of_two", "nextPowerOf2",
                        "next_pow_2", "roundUpPow2"})
_ARITH = frozenset({"+", "-", "*", "/", "%", "<<", ">>"})
_COMPARE = frozenset({"<", "<=", ">", ">=", "==", "!="})
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


def function_macros(texts: list[str]) -> dict[str, str]:
    """The project's function-like macros whose body is one expression (`#define DIVIDE(x, size)
    (((x) + (size) - 1) / (size))`), keyed `NAME(x, size)` so they travel with the constants."""
    out: dict[str, str] = {}
    for text in texts:
        root = source.parser().parse(text.encode("utf-8")).root_node
        for d in (n for n in _walk(root) if n.type == "preproc_function_def"):
            name, params, value = (d.child_by_field_name(f) for f in ("name", "parameters", "value"))
            if name is None or params is None or value is None:
                continue
            body = value.text.decode().replace("\\\n", " ").strip()
            expr = source.parse_expression(body)
            if expr is None or expr.has_error or "#" in body:
                continue
            names = [c.text.decode() for c in params.named_children if c.type == "identifier"]
            out.setdefault(f"{name.text.decode()}({', '.join(names)})", body)
    return out


def raises(node, raising: dict[str, int | None]) -> bool:
    """Whether a statement always ends in an exception: a `throw`, a call of a project macro that
    always throws (`raising[name]` None), a block with such a statement, an `if` whose branches
    both throw, a `do { ... } while (0)` whose body does."""
    if node is None:
        return False
    if node.type == "throw_statement":
        return True
    if node.type == "expression_statement" and node.named_children:
        call = node.named_children[0]
        fn = call.child_by_field_name("function") if call.type == "call_expression" else None
        return fn is not None and fn.type == "identifier" and fn.text.decode() in raising \
            and raising[fn.text.decode()] is None
    if node.type in ("compound_statement", "else_clause"):
        return any(raises(c, raising) for c in node.named_children)
    if node.type == "if_statement":
        return raises(node.child_by_field_name("consequence"), raising) and \
            raises(node.child_by_field_name("alternative"), raising)
    if node.type == "do_statement":
        return raises(node.child_by_field_name("body"), raising)
    return False


def _checked_param(body, params: list[str], raising: dict[str, int | None]) -> int | None:
    """The parameter a macro body throws unless it holds (`if (!(condition)) { ...; throw ...; }`)."""
    for n in _walk(body):
        cond = n.child_by_field_name("condition") if n.type == "if_statement" else None
        cond = _unparen(cond.named_children[0]) if cond is not None and cond.named_children else None
        if cond is None or cond.type != "unary_expression" or cond.child_by_field_name("operator").type != "!":
            continue
        held = _unparen(cond.child_by_field_name("argument")).text.decode()
        if held in params and raises(n.child_by_field_name("consequence"), raising):
            return params.index(held)
    return None


def raising_macros(texts: list[str]) -> dict[str, int | None]:
    """The project's function-like macros that throw: name -> None where the macro always throws
    (`#define ERROR(msg) throw Error(msg)`), or the index of the argument it throws unless true (a
    check macro, `#define CHECK(cond, ...) if (!(cond)) { ERROR(...); }`, read like `assert`)."""
    defs = []
    for text in texts:
        root = source.parser().parse(text.encode("utf-8")).root_node
        for d in (n for n in _walk(root) if n.type == "preproc_function_def"):
            name, params, value = (d.child_by_field_name(f) for f in ("name", "parameters", "value"))
            if name is None or params is None or value is None:
                continue
            # `a ## b` pasted, `#x` a string: the statements' shape is what is read
            body = re.sub(r"\s*##\s*", "", value.text.decode().replace("\\\n", " "))
            body = re.sub(r"#\s*(\w+)", r'"\1"', body).strip()
            fn = source.parser().parse(f"void f() {{ {body}; }}".encode()).root_node
            block = next((n for n in _walk(fn) if n.type == "compound_statement"), None)
            if block is not None and not block.has_error:
                defs.append((name.text.decode(), [c.text.decode() for c in params.named_children
                                                  if c.type == "identifier"], block))
    out: dict[str, int | None] = {}
    grew = True
    while grew:   # a macro that throws through another (`CHECK` through `ERROR`)
        grew = False
        for name, params, block in defs:
            if name in out:
                continue
            if raises(block, out):
                out[name], grew = None, True
            elif (i := _checked_param(block, params, out)) is not None:
                out[name], grew = i, True
    return out


def _folded(node: ast.expr) -> ast.expr:
    """`2 if 4 == 2 and n % 2 == 0 else 1` -> `1`: a test the template's `sizeof(T)` decides is
    decided here, so the spec reads as the launch the instance makes."""
    if isinstance(node, ast.IfExp):
        test = _folded(node.test)
        if isinstance(test, ast.Constant):
            return _folded(node.body if test.value else node.orelse)
        return ast.IfExp(test, _folded(node.body), _folded(node.orelse))
    if isinstance(node, ast.BoolOp):
        values = [_folded(v) for v in node.values]
        decided = [v for v in values if isinstance(v, ast.Constant)]
        stop = isinstance(node.op, ast.Or)   # the value that decides the whole: True for or, False for and
        if any(bool(v.value) is stop for v in decided):
            return ast.Constant(stop)
        rest = [v for v in values if not isinstance(v, ast.Constant)]
        return ast.Constant(not stop) if not rest else rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
    if isinstance(node, ast.Compare) and not exprs.names(ast.unparse(node)):
        try:
            return ast.Constant(bool(exprs.evaluate(ast.unparse(node), {})))
        except exprs.ExprError:
            return node
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _folded(node.operand)
        return ast.Constant(not inner.value) if isinstance(inner, ast.Constant) else ast.UnaryOp(node.op, inner)
    if isinstance(node, ast.BinOp):
        return ast.BinOp(_folded(node.left), node.op, _folded(node.right))
    if isinstance(node, ast.Call):
        return ast.Call(node.func, [_folded(a) for a in node.args], node.keywords)
    return node


class HostExprs:
    """Host C++ launch expressions -> spec expressions over the sizes, read by their tree-sitter
    structure: host names become sizes through `mapping` (host expression text -> size name),
    macro and const names their value; `std::min`, integer casts and `a < b ? a : b` become
    `min`, nothing and `min(a, b)`."""

    def __init__(self, mapping: dict[str, str], constants: dict[str, str], keep_locals: bool = False,
                 fixed: set[str] | frozenset[str] = frozenset(), helpers: Callable[[str], str | None] | None = None):
        self.helpers = helpers   # a project helper's name -> the spec function it computes (`h_last_pow2`)
        self.keep_locals = keep_locals   # a local computed in a way not read stays a size of its own
        self.fixed = fixed   # ... unless compile-time (`launch_locals.compile_time_names`): never a size
        self.blocked = False   # a fixed name was met unread in the local being read
        self.mapping: dict[tuple[str, ...], str] = {}
        for host, size in mapping.items():
            node = source.parse_expression(host)
            if node is not None:
                self.mapping[_tokens(node)] = size
        self.constants = constants
        # the project's function-like macros ride in `constants` as `NAME(a, b)` -> body (`function_macros`)
        self.macros: dict[str, tuple[list[str], str]] = {}
        for key, body in constants.items():
            if "(" in key and key.endswith(")"):
                name, _, params = key[:-1].partition("(")
                self.macros[name] = ([x.strip() for x in params.split(",") if x.strip()], body)

    def spec(self, text: str, free: list[str] | None = None) -> str | None:
        """The spec expression for `text`, or None. With `free`, unknown plain names are kept
        as they are and listed there (they become sizes of their own)."""
        node = source.parse_expression(text)
        found: list[str] = []
        out = self._expr(node, found if free is not None else None, 0) if node is not None else None
        if out is None:
            return None
        try:
            out = ast.unparse(_folded(exprs.parse(out).body))
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
                sub: list[str] = []
                blocked, self.blocked = self.blocked, False
                r = self._expr(inner, sub if free is not None else None, depth + 1) if inner is not None else None
                # a local the host computes in a way not read (`x.numel() / d`): a size — also one a
                # readable local is computed from (`x_blocks = qout_c / 8`, `qout_c = _kernel.size(1)`);
                # never a compile-time one, nor one unread only for such a one in it (`num_warps =
                # (num_rows + ROWS_PER_WARP - 1) / ROWS_PER_WARP`): a number of the instance
                self.blocked = self.blocked or name in self.fixed
                if r is None and free is not None and self.keep_locals and name.isidentifier() and not self.blocked:
                    self.blocked = blocked
                    free.append(name)
                    return name
                self.blocked = self.blocked or blocked
                if r is None:
                    return None
                if free is not None:
                    free.extend(n for n in sub if n not in free)
                return f"({r})"
            if name in self.fixed:
                self.blocked = True
                return None
            if free is not None and value is None:
                free.append(name)
                return name
            return None
        if t == "qualified_identifier":   # `td_data::granularity`: a namespace's constant
            text = node.text.decode().replace(" ", "")
            value = self.constants.get(text) or self.constants.get(text.removeprefix("::")) \
                or self.constants.get(text.split("::")[-1])
            inner = source.parse_expression(value) if value is not None and depth < _MAX_CONSTANT_DEPTH else None
            r = self._expr(inner, free, depth + 1) if inner is not None else None
            return f"({r})" if r is not None else None
        if t in ("true", "false"):   # a flag (`is_small = n <= 128 ? true : false`) as the spec's 1 or 0
            return str(int(t == "true"))
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
            if op is None or op.type not in _ARITH | _COMPARE:   # a comparison is C's 0 or 1, as in the spec
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
            if dt is None:   # `sizeof(T)` of the launcher's template parameter, as it was resolved
                return self.constants.get(f"sizeof({text})")
            return str(dt.itemsize)
        if t == "field_expression":   # `threads.x` of a dim3 the launch uses: its value
            value = self.constants.get(node.text.decode().replace(" ", ""))
            inner = source.parse_expression(value) if value is not None and depth < _MAX_CONSTANT_DEPTH else None
            r = self._expr(inner, free, depth + 1) if inner is not None else None
            if r is None and value is None:   # `dimsA.y` of the launcher's own dim3 or struct: a size `dimsA_y`
                arg, fld = node.child_by_field_name("argument"), node.child_by_field_name("field")
                if arg is not None and fld is not None and arg.type == "identifier" and \
                        node.child_by_field_name("operator") is not None and node.child_by_field_name("operator").type == ".":
                    alias = f"{arg.text.decode()}_{fld.text.decode()}"
                    if (alias,) in self.mapping:
                        return self.mapping[(alias,)]
                    if free is not None and self.keep_locals:
                        free.append(alias)
                        return alias
            return f"({r})" if r is not None else None
        if t == "call_expression":
            fn = node.child_by_field_name("function")
            macro = self.macros.get(fn.text.decode()) if fn is not None and fn.type == "identifier" else None
            args_node = node.child_by_field_name("arguments")
            args = [a.text.decode() for a in args_node.named_children if a.type != "comment"] if args_node else []
            if macro is not None and len(args) == len(macro[0]) and depth < _MAX_CONSTANT_DEPTH:
                # `DIVIDE(width, NUM_THREADS_X * 2)`: the macro's body with its parameters replaced
                inner = source.parse_expression(macros.substitute(macro[1], {
                    p: f"({a})" for p, a in zip(macro[0], args)}))
                r = self._expr(inner, free, depth + 1) if inner is not None else None
                return f"({r})" if r is not None else None
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
        if name.split("::")[-1] in _NEXT_POW2 and len(args) == 1:
            a = ex(args[0])
            return f"next_pow2({a})" if a is not None else None
        if name in _INT_WORDS and len(args) == 1:   # `int(MAX_BLOCK_SIZE / 32)`: a functional cast
            return ex(args[0])
        known = self.helpers(name) if self.helpers is not None and len(args) == 1 else None
        if known is not None:
            a = ex(args[0])
            return f"{known}({a})" if a is not None else None
        if name in ("ceil", "std::ceil", "ceilf", "::ceil") and len(args) == 1:
            return self._ceil_div(args[0], ex)
        if name in _MIN_MAX and len(args) == 2:
            a, b = ex(args[0]), ex(args[1])
            return f"{_MIN_MAX[name]}({a}, {b})" if a is not None and b is not None else None
        return None

    @staticmethod
    def _decided(op: str, a: str | None, b: str | None) -> bool | None:
        """A comparison of two constants (no size in either), decided; None otherwise."""
        if a is None or b is None or op not in ("<", "<=", ">", ">=", "==", "!=") or exprs.names(a) or exprs.names(b):
            return None
        try:
            x, y = exprs.evaluate_int(a, {}), exprs.evaluate_int(b, {})
        except exprs.ExprError:
            return None
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y}[op]

    def _choice(self, rc: str | None, yes, no, ex) -> str | None:
        """`c ? yes : no` for a condition `rc` already read: decided where it is a constant, the spec's
        conditional where it is over the sizes only, else None."""
        if rc is None:
            return None
        if not exprs.names(rc):
            try:
                return ex(yes if exprs.evaluate_int(rc, {}) else no)
            except exprs.ExprError:
                return None
        if not exprs.names(rc) <= set(self.mapping.values()):
            return None
        ry, rn = ex(yes), ex(no)
        return f"({ry} if {rc} else {rn})" if ry is not None and rn is not None else None

    def _ceil_div(self, node, ex) -> str | None:
        """`ceil(float(q) / 32.0f)`, `ceil(m * n / 1024.)`: a float division of whole numbers
        rounded up is cdiv — the float casts and a float literal with no fraction read as the
        integers. `ceil(n / d)` of two integers divides first (truncating): not read."""
        node = _unparen(node)
        op = node.child_by_field_name("operator") if node is not None and node.type == "binary_expression" else None
        if op is None or op.type != "/":
            return None
        a, b = (self._whole(node.child_by_field_name(f), ex) for f in ("left", "right"))
        if a is None or b is None or not (a[1] or b[1]):
            return None
        return f"cdiv({a[0]}, {b[0]})"

    def _whole(self, node, ex) -> tuple[str, bool] | None:
        """(an integer expression, whether C computes it as a float) under float casts
        (`float(n)`, `(float)n`) and float literals with no fraction (`1024.`, `32.0f`)."""
        node = _unparen(node)
        if node is None:
            return None
        t = node.type
        if t == "number_literal":
            text = node.text.decode().lower()
            if text.startswith("0x") or not any(c in text for c in ".ef"):
                r = ex(node)
                return (r, False) if r is not None else None
            try:
                value = float(text.rstrip("f"))
            except ValueError:
                return None
            return (str(int(value)), True) if value == int(value) else None
        cast = node.child_by_field_name("type") if t == "cast_expression" else None
        if cast is not None and cast.text.decode() in ("float", "double"):
            inner = self._whole(node.child_by_field_name("value"), ex)
            return (inner[0], True) if inner is not None else None
        fn, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        if t == "call_expression" and fn is not None and fn.text.decode() in ("float", "double") \
                and args is not None and len(args.named_children) == 1:
            inner = self._whole(args.named_children[0], ex)
            return (inner[0], True) if inner is not None else None
        op = node.child_by_field_name("operator") if t == "binary_expression" else None
        if op is not None and op.type in ("*", "+", "-"):
            a, b = (self._whole(node.child_by_field_name(f), ex) for f in ("left", "right"))
            return (f"({a[0]} {op.type} {b[0]})", a[1] or b[1]) if a is not None and b is not None else None
        r = ex(node)
        return (r, False) if r is not None else None

    def _min_max(self, node, ex) -> str | None:
        """`a < b ? a : b` is min(a, b), `a > b ? a : b` max(a, b) (also with <=, >= and the
        branches swapped): exactly, since with a == b both branches agree. Another choice by a
        comparison (`h < 16 ? 4 : 8`) is the spec's conditional, `(4 if h < 16 else 8)`."""
        cond = _unparen(node.child_by_field_name("condition"))
        yes = _unparen(node.child_by_field_name("consequence"))
        no = _unparen(node.child_by_field_name("alternative"))
        if cond is None or yes is None or no is None:
            return None
        if (yes.type, no.type) == ("true", "false"):   # `c ? true : false` is c
            return ex(cond)
        if cond.type != "binary_expression":   # `flag ? a : b`, the flag a comparison over the sizes
            rc = ex(cond)
            return self._choice(rc if rc is not None else self._condition(cond, ex), yes, no, ex)
        op = cond.child_by_field_name("operator")
        a, b = _unparen(cond.child_by_field_name("left")), _unparen(cond.child_by_field_name("right"))
        if op is None or a is None or b is None:
            return None
        decided = self._decided(op.type, ex(a), ex(b))
        if decided is not None:   # `sizeof(T) == 4 ? 4 : 2` once T is known: the branch it takes
            return ex(yes if decided else no)
        if op.type not in ("<", "<=", ">", ">="):   # `n % 32 != 0 ? 1024 : n`, `a && b ? x : y`
            return self._choice(self._condition(cond, ex), yes, no, ex)
        ta, tb, ty, tn = _tokens(a), _tokens(b), _tokens(yes), _tokens(no)
        less = op.type in ("<", "<=")
        ra, rb = ex(a), ex(b)
        if ra is None or rb is None:
            return None
        if (ty, tn) == (ta, tb):
            return f"{'min' if less else 'max'}({ra}, {rb})"
        if (ty, tn) == (tb, ta):
            return f"{'max' if less else 'min'}({ra}, {rb})"
        # a choice by a size the launch passes (`h < 16 ? 4 : 8` warps): the spec's own conditional;
        # a condition on anything else (a template parameter, a local not read) is not a size
        sizes = set(self.mapping.values())
        if not all(n in sizes for n in exprs.names(f"{ra} < {rb}")):
            return None
        ry, rn = ex(yes), ex(no)
        return f"({ry} if {ra} {op.type} {rb} else {rn})" if ry is not None and rn is not None else None

    def _condition(self, node, ex, depth: int = 0) -> str | None:
        """A host condition over sizes as the spec writes it: comparisons of arithmetic, joined by
        `&&`, `||` and `!`."""
        node = _unparen(node)
        if node is None or depth > _MAX_CONSTANT_DEPTH:
            return None
        if node.type in ("true", "false"):
            return "(1 == 1)" if node.type == "true" else "(1 == 0)"
        if node.type == "identifier" and node.text.decode() in self.constants:   # a local flag: its value
            inner = source.parse_expression(self.constants[node.text.decode()])
            cond = self._condition(inner, ex, depth + 1) if inner is not None else None
            return f"({cond})" if cond is not None else None
        if node.type == "unary_expression":
            op = node.child_by_field_name("operator")
            inner = self._condition(node.child_by_field_name("argument"), ex, depth)
            return f"(not {inner})" if op is not None and op.type == "!" and inner is not None else None
        if node.type != "binary_expression":
            return None
        op = node.child_by_field_name("operator")
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if op is not None and op.type in ("&&", "||"):
            a, b = self._condition(left, ex, depth), self._condition(right, ex, depth)
            word = "and" if op.type == "&&" else "or"
            return f"({a} {word} {b})" if a is not None and b is not None else None
        if op is None or op.type not in ("<", "<=", ">", ">=", "==", "!="):
            return None
        a, b = ex(left), ex(right)
        return f"{a} {op.type} {b}" if a is not None and b is not None else None
