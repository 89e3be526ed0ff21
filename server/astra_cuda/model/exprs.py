"""Safe evaluation of the spec's size expressions: 'num_tokens', 'min(d, 1024)', 'cdiv(n, 256)',
'2 * d', 'd % 2 == 0'. Python's own parser reads them; only arithmetic, comparisons, boolean
operators, size names and min/max/cdiv are allowed.

Division follows C: an integer divided by an integer truncates toward zero.

Bounded, so that a spec in an open document can never stall the language server: an expression
has at most MAX_CHARS characters, MAX_NODES syntax nodes and MAX_DEPTH nesting (checked when it
is parsed), and every intermediate integer stays within MAX_BITS bits — a power or shift is
refused *before* it is computed when its result would not (`10**10**10`, `1 << 10**12`).
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any


class ExprError(ValueError):
    pass


MAX_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_BITS = 64  # sizes, shapes, byte counts: nothing real needs more


def _bounded(v):
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v.bit_length() > MAX_BITS:
        raise ExprError(f"a value exceeds {MAX_BITS} bits (|value| >= 2**{MAX_BITS})")
    if isinstance(v, float) and not math.isfinite(v):
        raise ExprError("a value is not finite (overflow?)")
    return v


def _pow(a, b):
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        if b < 0:
            raise ExprError("a negative integer exponent")
        if abs(a) > 1 and (b > MAX_BITS or (abs(a).bit_length() - 1) * b > MAX_BITS):
            raise ExprError(f"{a} ** {b} exceeds {MAX_BITS} bits")
        return a ** b
    try:
        return math.pow(a, b)
    except (OverflowError, ValueError) as e:
        raise ExprError(f"{a} ** {b}: {e}") from None


def _lshift(a, b):
    if b < 0:
        raise ExprError("a negative shift count")
    if a and b + int(a).bit_length() > MAX_BITS:
        raise ExprError(f"{a} << {b} exceeds {MAX_BITS} bits")
    return a << b


def _rshift(a, b):
    if b < 0:
        raise ExprError("a negative shift count")
    return a >> min(b, MAX_BITS + 1)


def _math(f):
    def call(*args):
        try:
            return f(*args)
        except (ValueError, OverflowError) as e:
            raise ExprError(f"{f.__name__}{args}: {e}") from None
    call.__name__ = f.__name__
    return call


def _cdiv(a, b):
    return -((-a) // b)


def _next_pow2(a):
    """The least power of two >= a (0 for a <= 0, as the usual bit-smearing host helper gives)."""
    a = int(a)
    return 0 if a <= 0 else 1 << (a - 1).bit_length()


def _last_pow2(a):
    """The greatest power of two <= a (0 for a <= 0, as the usual bit-smearing host helper gives)."""
    a = int(a)
    return 0 if a <= 0 else 1 << (a.bit_length() - 1)


FUNCTIONS = {"min": min, "max": max, "cdiv": _cdiv, "ceil_div": _cdiv, "abs": abs, "gcd": _math(math.gcd),
             "sqrt": _math(math.sqrt), "log2": _math(math.log2), "next_pow2": _next_pow2, "last_pow2": _last_pow2}


def _div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ExprError("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _mod(a, b):
    if b == 0:
        raise ExprError("modulo by zero")
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)  # C: the sign of the dividend (exact, unlike fmod on big integers)
        return r if a >= 0 else -r
    return math.fmod(a, b)


def _floordiv(a, b):
    if b == 0:
        raise ExprError("division by zero")
    return a // b


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div,
        ast.FloorDiv: _floordiv, ast.Mod: _mod, ast.Pow: _pow,
        ast.LShift: _lshift, ast.RShift: _rshift, ast.BitAnd: operator.and_,
        ast.BitOr: operator.or_, ast.BitXor: operator.xor}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}


def _c_syntax(expr: str) -> str:
    # Accept C spellings for boolean operators in `require`.
    return expr.replace("&&", " and ").replace("||", " or ").replace("!=", "\x00").replace(
        "!", " not ").replace("\x00", "!=")


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """'a, min(b, c), T<x, y>' -> ['a', 'min(b, c)', 'T<x, y>']: commas inside brackets stay."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "(<[{"
        depth -= ch in ")>]}"
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse(expr: str | int | float) -> ast.AST:
    """The checked tree of `expr`: a fresh one, which the caller may change."""
    if isinstance(expr, bool):
        raise ExprError("expected a number or an expression, got a boolean")
    if isinstance(expr, (int, float)):
        return ast.Constant(expr)
    if not isinstance(expr, str):
        raise ExprError(f"expected an expression string, got {type(expr).__name__}")
    if len(expr) > MAX_CHARS:
        raise ExprError(f"expression too long ({len(expr)} characters; at most {MAX_CHARS})")
    try:
        tree = ast.parse(_c_syntax(expr.strip()), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"bad expression {_short(expr)}: {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExprError(f"bad expression {_short(expr)}: too complex") from None
    _check_size(tree, expr)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ExprError(f"bad expression {expr!r}: only {', '.join(sorted(FUNCTIONS))} may be called")
        elif not isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name,
                                   ast.Constant, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
                                   ast.IfExp)):
            raise ExprError(f"bad expression {expr!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise ExprError(f"bad expression {expr!r}: only numbers are allowed as constants")
    return tree


@lru_cache(maxsize=1024)
def _parsed_str(expr: str) -> ast.AST:
    return parse(expr)


def _parsed(expr: str | int | float) -> ast.AST:
    """`parse(expr)` for readers that never change the tree (`names`, `evaluate`): one tree per
    text, shared. A spec's sizes, grid, block and shapes are evaluated once per case, and a file
    of many kernels repeats the same few texts: parsing each again was most of loading the specs
    (1,825 specs of a file at the token limit: 104 parses each). Bounded: at most 1,024 texts of
    at most MAX_CHARS characters and MAX_NODES nodes each; errors are not kept (raised again)."""
    return _parsed_str(expr) if isinstance(expr, str) else parse(expr)


def _short(expr: str) -> str:
    return repr(expr) if len(expr) <= 80 else repr(expr[:77] + "...")


def _check_size(tree: ast.AST, expr: str) -> None:
    """At most MAX_NODES nodes, nested at most MAX_DEPTH deep (iteratively: no recursion)."""
    stack, count = [(tree, 0)], 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ExprError(f"expression {_short(expr)} is too large (more than {MAX_NODES} terms)")
        if depth > MAX_DEPTH:
            raise ExprError(f"expression {_short(expr)} is nested too deeply (more than {MAX_DEPTH} levels)")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def names(expr: str | int | float) -> set[str]:
    """The size names an expression refers to: a name called is a function, any other is a size
    (a kernel's `int min, int max` parameters are sizes named like the functions)."""
    tree = _parsed(expr)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}



def names_read(exprs_: Iterable[str]) -> set[str]:
    """The size names any of `exprs_` refers to (a launch's grid: the counts it covers); an
    expression that cannot be read names nothing."""
    out: set[str] = set()
    for e in exprs_:
        try:
            out |= names(e)
        except Exception:  # noqa: BLE001 - a hint only: an unreadable expression decides nothing
            continue
    return out

def evaluate(expr: str | int | float, env: Mapping[str, int | float]) -> Any:
    tree = _parsed(expr)

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return _bounded(n.value)
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise ExprError(f"unknown size {n.id!r} in {_short(str(expr))}")
            return _bounded(env[n.id])
        if isinstance(n, ast.BinOp):
            return _bounded(_BIN[type(n.op)](ev(n.left), ev(n.right)))
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return _bounded({ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                             ast.Invert: operator.invert}[type(n.op)](v))
        if isinstance(n, ast.BoolOp):
            vals = [ev(v) for v in n.values]
            return all(vals) if isinstance(n.op, ast.And) else any(vals)
        if isinstance(n, ast.Compare):
            left = ev(n.left)
            for op, right in zip(n.ops, n.comparators):
                r = ev(right)
                if not _CMP[type(op)](left, r):
                    return False
                left = r
            return True
        if isinstance(n, ast.IfExp):
            return ev(n.body) if ev(n.test) else ev(n.orelse)
        if isinstance(n, ast.Call):
            return _bounded(FUNCTIONS[n.func.id](*[ev(a) for a in n.args]))
        raise ExprError(f"cannot evaluate {_short(str(expr))}")

    try:
        return ev(tree)
    except ExprError as e:
        raise ExprError(f"{e} in {_short(str(expr))}") from None
    except ZeroDivisionError:
        raise ExprError(f"division by zero in {_short(str(expr))}") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise ExprError(f"bad expression {_short(str(expr))}: {e}") from None


def evaluate_int(expr: str | int, env: Mapping[str, int | float]) -> int:
    v = evaluate(expr, env)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"{expr!r} = {v} is not an integer")
        v = int(v)
    return int(v)


_NEGATED = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}


def simplify(expr: str, given: list[str] = ()) -> str:
    """`expr` with what it does not need written out: every part over no size replaced by its value
    (`16 / 4 * 4` -> 16) and every conditional whose test one of `given` decides (`a if n <= 128
    else b` under `n > 128` -> b). The value is the same wherever `given` holds; an expression
    this cannot read comes back unchanged."""
    try:
        tree = parse(expr)
        known: dict[str, bool] = {}
        for g in given:
            t = parse(g).body
            if isinstance(t, ast.Compare) and len(t.ops) == 1:
                known[ast.dump(t)] = True
                known[ast.dump(ast.Compare(t.left, [_NEGATED[type(t.ops[0])]()], t.comparators))] = False
    except (ExprError, KeyError):
        return expr

    class Fold(ast.NodeTransformer):
        def visit_IfExp(self, n: ast.IfExp) -> ast.AST:
            self.generic_visit(n)
            decided = known.get(ast.dump(n.test))
            if decided is None and isinstance(n.test, ast.Constant):
                decided = bool(n.test.value)
            return n if decided is None else (n.body if decided else n.orelse)

        def generic_visit(self, n: ast.AST) -> ast.AST:
            n = super().generic_visit(n)
            if isinstance(n, ast.BinOp) and isinstance(n.right, ast.Constant) and (
                    (isinstance(n.op, (ast.LShift, ast.RShift, ast.Add, ast.Sub)) and n.right.value == 0)
                    or (isinstance(n.op, (ast.Mult, ast.Div, ast.FloorDiv)) and n.right.value == 1)):
                return n.left   # `x >> 0`, `x * 1`: x
            if isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Call, ast.Compare, ast.IfExp)) and \
                    not any(isinstance(x, ast.Name) and x.id not in FUNCTIONS for x in ast.walk(n)):
                try:
                    v = evaluate(ast.unparse(n), {})
                except ExprError:
                    return n
                if isinstance(v, bool) or (isinstance(v, (int, float)) and float(v).is_integer()):
                    return ast.Constant(int(v))
            return n
    try:
        out = ast.unparse(Fold().visit(tree).body)
        parse(out)
        return out
    except (ExprError, ValueError, RecursionError):
        return expr
