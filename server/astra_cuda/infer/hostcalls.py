"""The project's small integer host helpers run on numbers (`log2_ceil(n)`: a loop of shifts the
spec's expressions cannot name), so a launcher's choice made through one (`switch (log2_ceil(n))`)
becomes the range of sizes it sends to each case. Only integer locals, arithmetic, `if`, loops and
`return`, under a step budget: anything else (a call, a pointer, a float) is not evaluated."""
from __future__ import annotations

from collections.abc import Callable

from tree_sitter import Node

from ..model import syntax

MAX_STEPS = 4096        # statements and loop trips of one call: a helper that runs longer is not read
LIMIT = 1 << 24         # the largest size a range is searched up to
_INT_WORDS = frozenset({"int", "unsigned", "signed", "long", "short", "const", "size_t", "int32_t", "int64_t",
                        "uint32_t", "uint64_t", "constexpr", "auto"})


class _Unread(Exception):
    """A construct this evaluator does not run."""


class _Return(Exception):
    def __init__(self, value: int):
        self.value = value


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise _Unread("division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": _c_div,
           "%": lambda a, b: a - _c_div(a, b) * b, "<<": lambda a, b: a << b if 0 <= b < 64 else _bad(),
           ">>": lambda a, b: a >> b if 0 <= b < 64 else _bad(), "&": lambda a, b: a & b,
           "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "<": lambda a, b: int(a < b),
           "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
           "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b)}


def _bad() -> int:
    raise _Unread("shift out of range")


class _Run:
    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.steps, self.limit = 0, limit

    def tick(self) -> None:
        self.steps += 1
        if self.steps > self.limit:
            raise _Unread("too many steps")

    def expr(self, n: Node, env: dict[str, int]) -> int:
        t = n.type
        if t == "number_literal":
            try:
                return int(n.text.decode().replace("'", "").rstrip("uUlL"), 0)
            except ValueError:
                raise _Unread("not an integer") from None
        if t == "identifier":
            name = n.text.decode()
            if name not in env:
                raise _Unread(name)
            return env[name]
        if t in ("true", "false"):
            return int(t == "true")
        if t in ("parenthesized_expression", "condition_clause") and len(n.named_children) == 1:
            return self.expr(n.named_children[0], env)
        if t == "binary_expression":
            op = n.child_by_field_name("operator").type
            a = self.expr(n.child_by_field_name("left"), env)
            if op in ("&&", "||"):
                return int(bool(self.expr(n.child_by_field_name("right"), env))) if bool(a) == (op == "&&") \
                    else int(op == "||")
            if op not in _BINARY:
                raise _Unread(op)
            return _BINARY[op](a, self.expr(n.child_by_field_name("right"), env))
        if t == "unary_expression":
            op = n.child_by_field_name("operator").type
            v = self.expr(n.child_by_field_name("argument"), env)
            if op not in ("-", "+", "!", "~"):
                raise _Unread(op)
            return {"-": -v, "+": v, "!": int(not v), "~": ~v}[op]
        if t == "conditional_expression":
            c = self.expr(n.child_by_field_name("condition"), env)
            return self.expr(n.child_by_field_name("consequence" if c else "alternative"), env)
        if t == "update_expression":
            target = n.child_by_field_name("argument")
            name = target.text.decode() if target is not None and target.type == "identifier" else None
            if name is None or name not in env:
                raise _Unread("update")
            old = env[name]
            env[name] = old + (1 if "++" in n.text.decode() else -1)
            return env[name] if n.text.decode().startswith(("++", "--")) else old
        if t == "assignment_expression":
            target = n.child_by_field_name("left")
            if target is None or target.type != "identifier" or target.text.decode() not in env:
                raise _Unread("assignment")
            op = n.child_by_field_name("operator").type
            v = self.expr(n.child_by_field_name("right"), env)
            name = target.text.decode()
            env[name] = v if op == "=" else _BINARY[op[:-1]](env[name], v) if op[:-1] in _BINARY else _bad()
            return env[name]
        if t == "comma_expression":
            self.expr(n.child_by_field_name("left"), env)
            return self.expr(n.child_by_field_name("right"), env)
        raise _Unread(t)

    def stmt(self, n: Node, env: dict[str, int]) -> None:
        self.tick()
        t = n.type
        if t == "comment":
            return
        if t == "compound_statement":
            inner = dict(env)
            for c in n.named_children:
                self.stmt(c, inner)
            env.update({k: v for k, v in inner.items() if k in env})
            return
        if t == "declaration":
            words = set(n.child_by_field_name("type").text.decode().split()) | \
                {c.text.decode() for c in n.children if c.type == "type_qualifier"}
            if not words <= _INT_WORDS:
                raise _Unread("not an integer local")
            for d in n.children_by_field_name("declarator"):
                if d.type != "init_declarator" or d.child_by_field_name("declarator").type != "identifier":
                    raise _Unread("declaration")
                env[d.child_by_field_name("declarator").text.decode()] = self.expr(d.child_by_field_name("value"), env)
            return
        if t == "expression_statement":
            for c in n.named_children:
                self.expr(c, env)
            return
        if t == "return_statement":
            value = [c for c in n.named_children if c.type != "comment"]
            if len(value) != 1:
                raise _Unread("return")
            raise _Return(self.expr(value[0], env))
        if t == "if_statement":
            if self.expr(n.child_by_field_name("condition"), env):
                self.stmt(n.child_by_field_name("consequence"), env)
            elif n.child_by_field_name("alternative") is not None:
                alt = n.child_by_field_name("alternative")
                self.stmt(alt.named_children[-1] if alt.type == "else_clause" else alt, env)
            return
        if t == "while_statement":
            while self.expr(n.child_by_field_name("condition"), env):
                self.stmt(n.child_by_field_name("body"), env)
            return
        if t == "for_statement":
            inner = dict(env)
            init = n.child_by_field_name("initializer")
            if init is not None:
                (self.stmt if init.type == "declaration" else self.expr)(init, inner)
            cond, update = n.child_by_field_name("condition"), n.child_by_field_name("update")
            while cond is None or self.expr(cond, inner):
                self.stmt(n.child_by_field_name("body"), inner)
                if update is not None:
                    self.expr(update, inner)
            env.update({k: v for k, v in inner.items() if k in env})
            return
        raise _Unread(t)


def evaluate(fn: Node, args: list[int], run: _Run | None = None) -> int | None:
    """The value the host function `fn` returns for these integer arguments, or None where it
    does something this evaluator does not run (or `run`'s steps, shared by several calls, run out)."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    params = decl.child_by_field_name("parameters") if decl is not None else None
    names = [syntax.declarator_name(p.child_by_field_name("declarator"))[0]
             for p in (params.named_children if params is not None else [])
             if p.type == "parameter_declaration"]
    body = fn.child_by_field_name("body")
    if body is None or len(names) != len(args) or not all(names):
        return None
    try:
        (run or _Run()).stmt(body, dict(zip(names, args)))   # type: ignore[arg-type]
    except _Return as r:
        return r.value
    except (_Unread, RecursionError, AttributeError, TypeError):
        return None
    return None


def range_where(fn: Node, op: str, value: int) -> tuple[int, int] | None:
    """(lo, hi): the sizes n in 1..LIMIT with `fn(n) op value`, where they are one range and `fn` is
    nondecreasing at the probes (as a log2 or a rounding is) — its ends found by bisection."""
    if op not in ("==", "<=", "<", ">=", ">") or value is None:
        return None
    key = (fn.text, op, value)
    if key not in _RANGES:
        if len(_RANGES) >= MAX_REMEMBERED:
            _RANGES.clear()
        _RANGES[key] = _range_where(fn, op, value)
    return _RANGES[key]


# (helper text, op, value) -> its range: the same helper is asked once per launch site, then again
# for the one read
_RANGES: dict[tuple[bytes, str, int], tuple[int, int] | None] = {}
MAX_REMEMBERED = 256


def _range_where(fn: Node, op: str, value: int) -> tuple[int, int] | None:
    probes = sorted({*range(1, 65), *(1 << k for k in range(25)), *((1 << k) + 1 for k in range(24)),
                     *((1 << k) - 1 for k in range(1, 25)), LIMIT})
    f: dict[int, int] = {}
    for n in probes:   # a helper that does not run on one probe is not read (stop there: hostile loops cost steps)
        v = evaluate(fn, [n])
        if v is None:
            return None
        f[n] = v
    if any(f[a] > f[b] for a, b in zip(probes, probes[1:])):
        return None

    def first_at_least(target: int) -> int | None:   # the least n with fn(n) >= target
        if f[LIMIT] < target:   # type: ignore[operator]
            return None
        lo, hi = 1, LIMIT
        while lo < hi:
            mid = (lo + hi) // 2
            v = evaluate(fn, [mid])
            if v is None:
                return None
            lo, hi = (lo, mid) if v >= target else (mid + 1, hi)
        return lo
    low = 1 if op in ("<", "<=") else first_at_least(value + (op == ">"))
    above = first_at_least(value + (op != "<")) if op in ("==", "<=", "<") else None
    high = LIMIT if op in (">", ">=") else (above - 1 if above is not None else LIMIT)
    if low is None or high < low:
        return None
    return low, high


# The spec's one-argument functions a project's helper may compute under its own name (`h_last_pow2`,
# `roundUpPow2`): recognised by its values, so the launcher's block made through it is read whole.
def _known(n: int) -> dict[str, int]:
    return {"next_pow2": 1 << (n - 1).bit_length(), "last_pow2": 1 << (n.bit_length() - 1)}


_IDENTIFIED: dict[bytes, str | None] = {}
IDENTIFY_STEPS = 1 << 17   # statements of all of one helper's probes together (a bit-smearing helper: ~11 each)


def identify(fn: Node) -> str | None:
    """The spec function ('next_pow2', 'last_pow2') the one-argument host helper `fn` equals on every
    size it was run on (1..LIMIT at the range probes, and every n up to 1024), or None — also where
    the probes together run more than IDENTIFY_STEPS statements."""
    key = fn.text or b""
    if key not in _IDENTIFIED:
        if len(_IDENTIFIED) >= MAX_REMEMBERED:
            _IDENTIFIED.clear()
        probes = sorted({*range(1, 1025), *(1 << k for k in range(25)), *((1 << k) + 1 for k in range(24)),
                         *((1 << k) - 1 for k in range(1, 25)), LIMIT - 3})
        names = set(_known(1))
        run = _Run(IDENTIFY_STEPS)   # one budget for all the probes: a hostile helper costs at most this
        for n in probes:
            v = evaluate(fn, [n], run)
            names = {k for k in names if v is not None and _known(n)[k] == v}
            if not names:
                break
        _IDENTIFIED[key] = min(names) if len(names) == 1 else None
    return _IDENTIFIED[key]


def helper_functions(function: Callable[[str], tuple[Node, object] | None]) -> Callable[[str], str | None]:
    """Name -> the spec function (`last_pow2`) a host helper of the program computes, recognised by its
    values; `function` finds a helper's definition by name (`Program.function`). Each name looked up once."""
    seen: dict[str, str | None] = {}

    def known(name: str) -> str | None:
        if name not in seen:
            found = function(name) if name.replace("::", "").isidentifier() else None
            seen[name] = identify(found[0]) if found is not None else None
        return seen[name]
    return known
