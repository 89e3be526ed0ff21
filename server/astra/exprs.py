"""Safe evaluation of the spec's size expressions: 'num_tokens', 'min(d, 1024)', 'cdiv(n, 256)',
'2 * d', 'd % 2 == 0'. Python's own parser reads them; only arithmetic, comparisons, boolean
operators, size names and min/max/cdiv are allowed.

Division follows C: an integer divided by an integer truncates toward zero.
"""
from __future__ import annotations

import ast
import math
import operator


class ExprError(ValueError):
    pass


def _cdiv(a, b):
    return -((-a) // b)


FUNCTIONS = {"min": min, "max": max, "cdiv": _cdiv, "ceil_div": _cdiv, "abs": abs,
             "sqrt": math.sqrt, "log2": math.log2}


def _div(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ExprError("division by zero")
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


def _mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        if b == 0:
            raise ExprError("modulo by zero")
        return int(math.fmod(a, b))
    return math.fmod(a, b)


_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _div,
        ast.FloorDiv: operator.floordiv, ast.Mod: _mod, ast.Pow: operator.pow,
        ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
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
    if isinstance(expr, bool):
        raise ExprError("expected a number or an expression, got a boolean")
    if isinstance(expr, (int, float)):
        return ast.Constant(expr)
    if not isinstance(expr, str):
        raise ExprError(f"expected an expression string, got {type(expr).__name__}")
    try:
        tree = ast.parse(_c_syntax(expr.strip()), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"bad expression {expr!r}: {e.msg}") from None
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


def names(expr: str | int | float) -> set[str]:
    """The size names an expression refers to."""
    return {n.id for n in ast.walk(parse(expr)) if isinstance(n, ast.Name) and n.id not in FUNCTIONS}


def evaluate(expr: str | int | float, env: dict[str, int | float]):
    tree = parse(expr)

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise ExprError(f"unknown size {n.id!r} in {expr!r}")
            return env[n.id]
        if isinstance(n, ast.BinOp):
            return _BIN[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_,
                    ast.Invert: operator.invert}[type(n.op)](v)
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
            return FUNCTIONS[n.func.id](*[ev(a) for a in n.args])
        raise ExprError(f"cannot evaluate {expr!r}")

    try:
        return ev(tree)
    except ZeroDivisionError:
        raise ExprError(f"division by zero in {expr!r}") from None
    except TypeError as e:
        raise ExprError(f"bad expression {expr!r}: {e}") from None


def evaluate_int(expr: str | int, env: dict[str, int | float]) -> int:
    v = evaluate(expr, env)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"{expr!r} = {v} is not an integer")
        v = int(v)
    return int(v)
