"""The access walk's conditions: how an `if`, a `?:` or an early return narrows the intervals of the
indices it tests, a scaled index, a guarded sum of terms (`tid + it * 32 < n`), a segment's
length. Separate because narrowing is its own set of rules (a mixin of `access.Analyzer`).
Long because each form of condition narrows its own way, over the walk's one state."""
from __future__ import annotations

import ast

from tree_sitter import Node

from . import source, syntax
from .access_residues import ResidueWalk
from .access_nodes import functional_cast, is_condition, subscript_of, unparen
from .access_values import (BUILTINS, GUARD, Iv, MAX_GUARD_TERMS, Poly, Ptr, SEGMENT, UNKNOWN, guard_key,
    iv_add, iv_mul, poly_add, poly_mul)


class ConditionWalk(ResidueWalk):
    """How a condition narrows the walk's intervals."""

    def refine_feasible(self, cond: Node, truth: bool) -> bool:
        """Narrow by `cond` being `truth`; False when that leaves a variable no value."""
        before = {k: v for k, v in self.env.items() if isinstance(v, Iv)}
        self.refine(cond, truth)
        return not any(isinstance(v, Iv) and v.lo is not None and v.hi is not None and v.lo > v.hi
                       and (k not in before or before[k] != v) for k, v in self.env.items())

    def refine(self, cond: Node, truth: bool) -> None:
        cond = unparen(cond)
        if cond is None:
            return
        if cond.type == "unary_expression" and cond.child_by_field_name("operator") is not None \
                and cond.child_by_field_name("operator").type == "!":
            self.refine(cond.child_by_field_name("argument"), not truth)
            return
        if cond.type == "identifier" and cond.text.decode() in self.defs \
                and is_condition(self.defs[cond.text.decode()][0]):   # `bool ok = i < n && ...; if (ok)`
            self.refine(self.defs[cond.text.decode()][0], truth)
            return
        if cond.type != "binary_expression":
            return
        op = cond.child_by_field_name("operator").type
        left, right = unparen(cond.child_by_field_name("left")), unparen(cond.child_by_field_name("right"))
        if op == "&&" and truth or op == "||" and not truth:
            self.refine(left, truth)
            self.refine(right, truth)
            return
        if op in ("&&", "||") and left is not None and right is not None:
            # `Is_even_cols || it < n` with the instance's flag false (or `flag && i < n` false with
            # it true): the other side alone decides, and narrows as it would written alone
            absorbing = 0 if op == "||" else 1
            for side, other in ((left, right), (right, left)):
                v = self.expr(side, evaluate_only=True)
                if isinstance(v, Iv) and v.lo is not None and v.lo == v.hi and (v.lo != 0) == bool(absorbing):
                    self.refine(other, truth)
                    return
            return
        if op in ("==", "!=") and left is not None and right is not None:
            self._residue(left, right, op == "==" if truth else op == "!=")
            return
        if op not in ("<", "<=", ">", ">=") or left is None or right is None:
            return
        if not truth:
            op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
        for side in (left, right):   # `if (threadIdx.x < BINS)` narrows the index itself
            if side.text.decode() in BUILTINS and side.text.decode() not in self.env:
                self.env[side.text.decode()] = self.field(side)
        self._guard(left, op, right)
        self._ceil_count(left, op, right)
        start = self._segment_start(right) if op == "<" else None
        poly = self._poly(left) if start is not None else None
        if start is not None and poly is not None:
            self.env[SEGMENT + repr(sorted(poly.items()))] = start
        if left.type == "binary_expression" and left.child_by_field_name("operator").type == "+":
            # `i + half < n`: i < n - half (the offset taken at its largest: a bound that holds)
            x, c = unparen(left.child_by_field_name("left")), unparen(left.child_by_field_name("right"))
            if x is not None and x.type != "identifier":
                x, c = c, x
            off, bound = self.expr(c, evaluate_only=True), self.expr(right, evaluate_only=True)
            if x is not None and x.type == "identifier" and isinstance(self.env.get(x.text.decode()), Iv) \
                    and isinstance(off, Iv) and isinstance(bound, Iv) and off.lo is not None and off.lo == off.hi:
                self._bound(x.text.decode(), op, Iv(None if bound.lo is None else bound.lo - off.lo,
                                                    None if bound.hi is None else bound.hi - off.lo))
            return
        if left.type == "binary_expression" and left.child_by_field_name("operator").type == "*":
            self._scaled_bound(left, op, right)
        if left.type in ("identifier", "field_expression") and isinstance(self.env.get(left.text.decode()), Iv):
            bound = self.expr(right, evaluate_only=True)
            whole = self._whole_steps_end(right) if op in ("<", "<=") else None
            if whole is not None and whole.hi is not None:
                bound = Iv(bound.lo if isinstance(bound, Iv) else None,
                           whole.hi if not isinstance(bound, Iv) or bound.hi is None else min(bound.hi, whole.hi))
            self._bound(left.text.decode(), op, bound)
        if right.type in ("identifier", "field_expression") and isinstance(self.env.get(right.text.decode()), Iv):
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
            self._bound(right.text.decode(), flip, self.expr(left, evaluate_only=True))

    def _whole_steps_end(self, n: Node | None) -> Iv | None:
        """A bound `start + steps * s` where the local `steps` is `(end - start) / s`, s a positive
        number (exllama's q4_matmul_kernel: `k < x_column + iterations * 8`, iterations =
        (x_column_end - x_column) / 8, x_column_end = min(dim, ...)): whole steps of s from start
        stay at or below end where there is at least one (and at or below start where there is
        none: C's division truncates), so the bound is at most the larger of end and start. The
        intervals alone forget that both `start`s are one value and reach a block of s past end."""
        n = unparen(n)
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type != "+":
            return None
        a, b = unparen(n.child_by_field_name("left")), unparen(n.child_by_field_name("right"))
        for start, m in ((a, b), (b, a)):
            if m is None or m.type != "binary_expression" or m.child_by_field_name("operator").type != "*":
                continue
            x, y = unparen(m.child_by_field_name("left")), unparen(m.child_by_field_name("right"))
            for q, s in ((x, y), (y, x)):
                # its one value (kept in `assigned` also where the intervals could not evaluate it)
                given = self.assigned.get(q.text.decode(), []) if q is not None and q.type == "identifier" else []
                if len(given) != 1:
                    continue
                d = unparen(given[0])
                step = self.expr(s, evaluate_only=True)
                if d is None or d.type != "binary_expression" or d.child_by_field_name("operator").type != "/" \
                        or _flat(unparen(d.child_by_field_name("right"))) != _flat(s) \
                        or not isinstance(step, Iv) or step.lo is None or step.lo < 1:
                    continue
                diff = unparen(d.child_by_field_name("left"))
                if diff is None or diff.type != "binary_expression" or diff.child_by_field_name("operator").type != "-" \
                        or _flat(unparen(diff.child_by_field_name("right"))) != _flat(start):
                    continue
                # each local in start and end set once (one value since `steps` was computed from them)
                names = {x.text.decode() for part in (diff, start) for x in syntax.walk(part) if x.type == "identifier"}
                if any(x in self.declared_at and len(self.assigned.get(x, [])) != 1 for x in names):
                    continue
                end, first = self.expr(diff.child_by_field_name("left"), evaluate_only=True), \
                    self.expr(start, evaluate_only=True)
                if isinstance(end, Iv) and isinstance(first, Iv) and end.hi is not None and first.hi is not None:
                    return Iv(None, max(end.hi, first.hi))
        return None

    def _ceil_count(self, left: Node, op: str, right: Node) -> None:
        """`it < num_valid`, num_valid = `(n - 1 - c + V) / V` (the trips from c in steps of V that
        stay below n: flash-attention layer norm's `num_valid_ldgs`, c the thread's column): the
        same as `c + V * it <= n - 1`, kept as a guard on that sum (`stepped_within` reads it for
        an index started at `… + c` and stepped by V a trip). The intervals alone take the trips at
        the smallest c and the index at the largest: up to a step of V past the row."""
        q = self.defs.get(right.text.decode()) if right.type == "identifier" else None
        d = unparen(q[0]) if q is not None and len(self.assigned.get(right.text.decode(), [])) <= 1 else None
        if op not in ("<", "<=") or left.type != "identifier" or not isinstance(self.env.get(left.text.decode()), Iv) \
                or d is None or d.type != "binary_expression" or d.child_by_field_name("operator").type != "/":
            return
        v = self.expr(d.child_by_field_name("right"), evaluate_only=True)
        if not isinstance(v, Iv) or v.lo is None or v.lo != v.hi or v.lo < 1:
            return
        part, bound, const = self._poly(left), Iv.point(0), 0
        if part is None:
            return
        part = {m: c * v.lo for m, c in part.items()}
        for t, sign in self._terms(d.child_by_field_name("left")):
            x = self.expr(t, evaluate_only=True)
            if isinstance(x, Iv) and x.lo is not None and x.lo == x.hi:
                const += sign * x.lo
            elif sign > 0 and isinstance(x, Iv):
                bound = iv_add(bound, x)
            elif sign < 0 and (p := self._poly(t)) is not None:
                part = poly_add(part, p)
            else:
                return
        if len(part) < 2 or bound.hi is None:
            return
        # it < (b - c + k) / V  <=>  V * it + V <= b - c + k;  it <= …  <=>  V * it <= b - c + k
        key = guard_key(part)
        if not isinstance(self.env.get(key), Iv):
            self.env[key] = UNKNOWN
        self._bound(key, "<=", Iv(None, bound.hi + const - (v.lo if op == "<" else 0)))

    def stepped_within(self, name: str, var: str, first: int, step: int, by: int) -> int | None:
        """The largest value of an integer index `name` started at `r + c` and stepped by `step`
        once a trip of `var` (from `first`, by 1), where a guard bounds `c + step * var`
        (`_ceil_count`): r at its largest plus that bound, less the trips before `first`."""
        q = self.defs.get(name)
        if q is None or by != 1:
            return None
        terms = self._terms(q[0])
        if len(terms) > MAX_GUARD_TERMS:
            return None
        polys = [self._poly(t) for t, _ in terms]
        best = None
        for key, g in self.env.items():
            if not (key.startswith(GUARD) and isinstance(g, Iv) and g.hi is not None):
                continue
            part: Poly = dict(ast.literal_eval(key[len(GUARD):]))
            if part.pop((var,), None) != step or not part:
                continue
            for mask in range(1, 1 << len(terms)):
                chosen = [i for i in range(len(terms)) if mask >> i & 1]
                if any(polys[i] is None for i in chosen):
                    continue
                total: Poly = {}
                for i in chosen:
                    total = poly_add(total, polys[i], terms[i][1])   # type: ignore[arg-type]
                if {m: c for m, c in total.items() if c} != part:
                    continue
                rest = Iv.point(g.hi - step * first)
                for i in (i for i in range(len(terms)) if i not in chosen):
                    x = self.expr(terms[i][0], evaluate_only=True)
                    rest = iv_add(rest, iv_mul(x, Iv.point(terms[i][1]))) if isinstance(x, Iv) else UNKNOWN
                if rest.hi is not None and (best is None or rest.hi < best):
                    best = rest.hi
        return best

    def _scaled_bound(self, left: Node, op: str, right: Node) -> None:
        """`threadIdx.x * vec_size < rotary_dim / 2`: the index itself below the bound divided by
        the (positive, constant) scale, so a branch taken under it reaches no further."""
        x, c = unparen(left.child_by_field_name("left")), unparen(left.child_by_field_name("right"))
        if x is not None and x.type not in ("identifier", "field_expression"):
            x, c = c, x
        if x is None or c is None or x.type not in ("identifier", "field_expression"):
            return
        if x.text.decode() in BUILTINS and x.text.decode() not in self.env:
            self.env[x.text.decode()] = self.field(x)
        scale, bound = self.expr(c, evaluate_only=True), self.expr(right, evaluate_only=True)
        if not isinstance(self.env.get(x.text.decode()), Iv) or not isinstance(scale, Iv) or \
                scale.lo is None or scale.lo != scale.hi or scale.lo <= 0 or not isinstance(bound, Iv):
            return
        s, lo, hi = scale.lo, bound.lo, bound.hi
        if op == "<" and hi is not None:      # x * s < hi: x <= (hi - 1) // s
            self._bound(x.text.decode(), "<=", Iv(None, (hi - 1) // s))
        elif op == "<=" and hi is not None:
            self._bound(x.text.decode(), "<=", Iv(None, hi // s))
        elif op == ">" and lo is not None:    # x * s > lo: x >= lo // s + 1
            self._bound(x.text.decode(), ">=", Iv(lo // s + 1, None))
        elif op == ">=" and lo is not None:
            self._bound(x.text.decode(), ">=", Iv(-(-lo // s), None))

    def _guard(self, left: Node, op: str, right: Node) -> None:
        """`(i * num_threads + tid) * VEC < d`: the bound held by that compound expression, for
        an access whose offset sums to it however it is spelled (`i * num_threads * VEC + tid * VEC`)."""
        if left.type == "identifier" and left.text.decode() in self.defs:
            # `element_index < count`, element_index = tid + it * 32: what it is made of is bounded,
            # for an address that adds those terms apart (`src += tid; src[it * 32]`)
            poly = self._expanded(left)
            if poly is not None and (len(poly) > 1 or any(len(m) > 1 for m in poly)):
                key = guard_key(poly)
                cur = self.expr(left, evaluate_only=True)
                if not isinstance(self.env.get(key), Iv):
                    self.env[key] = cur if isinstance(cur, Iv) else UNKNOWN
                self._bound(key, op, self.expr(right, evaluate_only=True))
            return
        if left.type in ("identifier", "field_expression"):
            return
        poly = self._poly(left)
        if poly is None or len(poly) < 2 and all(len(m) < 2 for m in poly):
            return   # a single name (times a number) narrows through that name already
        cur, bound = self.expr(left, evaluate_only=True), self.expr(right, evaluate_only=True)
        key = guard_key(poly)
        if not isinstance(self.env.get(key), Iv):
            self.env[key] = cur if isinstance(cur, Iv) else UNKNOWN
        self._bound(key, op, bound)
        c = poly.get((), 0)
        rest = {m: v for m, v in poly.items() if m != ()}
        if c and isinstance(bound, Iv) and (len(rest) > 1 or any(len(m) > 1 for m in rest)):
            # its constant moved to the bound (`k + 8 + 8 * i < K`: `k + 8 * i` below K - 8), for an
            # address that adds the same terms without it (`(k / 8 + i) * 8`, a vector's first element)
            key = guard_key(rest)
            if not isinstance(self.env.get(key), Iv):
                self.env[key] = iv_add(cur, Iv.point(-c)) if isinstance(cur, Iv) else UNKNOWN
            self._bound(key, op, iv_add(bound, Iv.point(-c)))

    def _picks_smaller(self, choice: Node) -> bool:
        """`c ? a : b` where c holds exactly when a < b (`n - i >= T ? T : n - i`, `o + T < m ? T : m - o`):
        the smaller of a and b, compared as polynomials (c's sides' difference that of a and b, or its negation)."""
        c, yes, no = (unparen(choice.child_by_field_name(f)) for f in ("condition", "consequence", "alternative"))
        op = c.child_by_field_name("operator").type if c is not None and c.type == "binary_expression" else ""
        if op not in ("<", "<=", ">", ">="):
            return False
        polys = [self._poly(x) for x in (c.child_by_field_name("left"), c.child_by_field_name("right"), yes, no)]
        if None in polys:
            return False
        d, e = poly_add(polys[0], polys[1], -1), poly_add(polys[2], polys[3], -1)   # type: ignore[arg-type]
        d, e = {m: v for m, v in d.items() if v}, {m: v for m, v in e.items() if v}
        return e == d and op in ("<", "<=") or e == {m: -v for m, v in d.items()} and op in (">", ">=")

    def _poly(self, n: Node | None) -> Poly | None:
        """The expression as a polynomial over the names it reads (the launch's constants and
        template arguments by value), or None for anything else."""
        n = unparen(n)
        if n is None:
            return None
        t = n.type
        if t == "number_literal":
            v = self.expr(n, evaluate_only=True)
            return ({(): v.lo} if v.lo else {}) if isinstance(v, Iv) and v.lo is not None and v.lo == v.hi else None
        if t in ("identifier", "field_expression", "qualified_identifier", "sizeof_expression"):
            name = n.text.decode().replace(" ", "")
            if t != "field_expression" and name not in self.env:
                v = self.expr(n, evaluate_only=True)
                if isinstance(v, Iv) and v.lo is not None and v.lo == v.hi:   # VEC_SIZE, sizeof(T)
                    return {(): v.lo} if v.lo else {}
            return {(name,): 1} if t != "sizeof_expression" else None
        if t == "cast_expression":
            return self._poly(n.child_by_field_name("value"))
        if t == "call_expression" and functional_cast(n.child_by_field_name("function")):
            inner = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
            return self._poly(inner[0]) if len(inner) == 1 else None
        if t == "binary_expression":
            op = n.child_by_field_name("operator").type
            a, b = self._poly(n.child_by_field_name("left")), self._poly(n.child_by_field_name("right"))
            if a is None or b is None:
                return None
            if op in ("+", "-"):
                return poly_add(a, b, 1 if op == "+" else -1)
            if op == "*":
                return poly_mul(a, b)
            if op == "/" and set(b) == {()} and b[()] > 0 and all(v % b[()] == 0 for v in a.values()):
                # an exact quotient by a constant (`num_values_4bit / 4`, a macro's 32 / 4; `i * 32 / 4`)
                return {m: v // b[()] for m, v in a.items()}
        return None

    def _compared(self, cond: Node | None) -> bool | None:
        """A comparison its sides' intervals decide (`1024 <= 128`), else None."""
        cond = unparen(cond)
        op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
        if op is None or op.type not in ("<", "<=", ">", ">=", "==", "!="):
            return None
        if any(n.type == "identifier" and n.text.decode() in self.sizes for n in syntax.walk(cond)):
            return None   # a parameter's value is the probe's, not the instance's: both sides stay walked
        a = self.expr(cond.child_by_field_name("left"), evaluate_only=True)
        b = self.expr(cond.child_by_field_name("right"), evaluate_only=True)
        if not isinstance(a, Iv) or not isinstance(b, Iv) or None in (a.lo, a.hi, b.lo, b.hi):
            return None
        lt, le = (a.hi < b.lo, a.lo >= b.hi), (a.hi <= b.lo, a.lo > b.hi)   # (surely, surely not)
        yes_no = {"<": lt, "<=": le, ">": (le[1], le[0]), ">=": (lt[1], lt[0]),
                  "==": (a.lo == a.hi == b.lo == b.hi, a.hi < b.lo or a.lo > b.hi),
                  "!=": (a.hi < b.lo or a.lo > b.hi, a.lo == a.hi == b.lo == b.hi)}[op.type]
        return True if yes_no[0] else False if yes_no[1] else None

    def _expanded(self, n: Node | None, depth: int = 0) -> Poly | None:
        """The expression as a polynomial with each local that a definition still holds for
        replaced by that definition's own (`element_index` -> `threadIdx.x + it * 32`)."""
        poly = self._poly(n)
        if poly is None or depth > 4:
            return poly
        out: Poly = {}
        for mono, coef in poly.items():
            term: Poly = {(): coef}
            for name in mono:
                d = self.defs.get(name)
                # only while the definition still holds its value, narrowed by conditions perhaps (not a
                # loop's `int it = 0`, stepped since)
                cur, was = self.env.get(name), self.expr(d[0], evaluate_only=True) if d is not None else None
                held = d is not None and name not in self.stepped and isinstance(cur, Iv) and isinstance(was, Iv) \
                    and (was.lo is None or cur.lo is not None and cur.lo >= was.lo) \
                    and (was.hi is None or cur.hi is not None and cur.hi <= was.hi)
                sub = self._expanded(d[0], depth + 1) if held else None
                term = poly_mul(term, sub if sub is not None else {(name,): 1})
            out = poly_add(out, term)
        return out

    def _monomial(self, names: tuple[str, ...], coef: int) -> Iv:
        value: Iv = Iv.point(coef)
        for name in names:
            node = source.parse_expression(name)
            v = self.field(node) if node is not None and node.type == "field_expression" else \
                self.env.get(name) if isinstance(self.env.get(name), Iv) else \
                self.expr(node, evaluate_only=True) if node is not None else None
            if not isinstance(v, Iv):
                return UNKNOWN
            value = iv_mul(value, v)
        return value

    def _guarded_address(self, terms: list[tuple[Node, int]]) -> Ptr | None:
        """`src + itr_idx` where `src` was moved by `first * n + tid` and a condition bounds
        `tid + it * 32`, which `itr_idx = i * n + it * 32` completes: the pointer with that part
        taken at its bound, the rest at its own value. None where no guard applies."""
        guards = {k: v for k, v in self.env.items() if k.startswith(GUARD) and isinstance(v, Iv) and v.hi is not None}
        if not guards:
            return None
        base: Ptr | None = None
        total: Poly = {}
        for t, sign in terms:
            t = unparen(t)
            v = self.expr(t, evaluate_only=True)
            if isinstance(v, Ptr):
                name = t.text.decode() if t is not None and t.type == "identifier" else None
                if base is not None or sign < 0 or name is None or name not in self.moved or v.base != name:
                    return None
                base, poly = v, self.moved[name]
            else:
                poly = self._expanded(t)
            if poly is None:
                return None
            total = poly_add(total, poly, sign)
        if base is None:
            return None
        best: Ptr | None = None
        for key, bound in guards.items():
            part: Poly = dict(ast.literal_eval(key[len(GUARD):]))   # the key is the polynomial's repr
            if not part or any(total.get(m) != c for m, c in part.items()):
                continue
            rest = bound
            for m, c in poly_add(total, part, -1).items():
                rest = iv_add(rest, self._monomial(m, c))
            if rest.hi is None:
                continue
            offset = iv_mul(rest, Iv.point(base.scale))
            if best is None or offset.hi < best.offset.hi:   # type: ignore[operator]
                best = Ptr(base.base, offset, base.scale)
        return best

    def _terms(self, n: Node, sign: int = 1) -> list[tuple[Node, int]]:
        """The terms of a sum (`p + a + b - c`), each with its sign."""
        n = unparen(n)
        if n is not None and n.type == "binary_expression" and n.child_by_field_name("operator").type in ("+", "-"):
            right_sign = sign if n.child_by_field_name("operator").type == "+" else -sign
            return self._terms(n.child_by_field_name("left"), sign) + self._terms(n.child_by_field_name("right"),
                                                                                   right_sign)
        return [(n, sign)]

    def _guarded_sum(self, n: Node, value):
        """A sum (an offset into a pointer or an index) part of which a condition bounds: that
        part takes the bound, the rest its own value."""
        value = self._within_segment(n, value)
        if isinstance(value, Ptr) and value.offset.hi is not None:
            tight = self._guarded_address(self._terms(n))
            if tight is not None and tight.base == value.base and tight.scale == value.scale \
                    and tight.offset.hi is not None and tight.offset.hi < value.offset.hi:
                value = Ptr(value.base, Iv(value.offset.lo, tight.offset.hi), value.scale)
        guards = {k: v for k, v in self.env.items() if k.startswith(GUARD) and isinstance(v, Iv)}
        if not guards or not isinstance(value, (Iv, Ptr)):
            return value
        terms = self._terms(n)
        if len(terms) < 2 or len(terms) > MAX_GUARD_TERMS:
            return value
        vals = [self.expr(t, evaluate_only=True) for t, _ in terms]
        polys = [None if isinstance(v, Ptr) else self._poly(t) for (t, _), v in zip(terms, vals)]
        quotients = [self._quotient_term(t, sign) for t, sign in terms]
        best = value
        for mask in range(1, 1 << len(terms)):
            part = [i for i in range(len(terms)) if mask >> i & 1]
            # an exact quotient (`i * 32 / 4`, a macro's multiple) is its polynomial (8 * i) already:
            # taken as `x / c` it would scale the other terms by c and miss the guard that names 8 * i
            divisors = {quotients[i][0] for i in part if quotients[i] is not None and polys[i] is None}
            if len(divisors) == 1:
                # `k / 8 + i` (a vector's index) under `k + 8 * i < K`: c times the part is at most
                # k + 8 * i (each `x / c` times c at most x, for x >= 0), so the part is below K / c
                c = divisors.pop()
                total = {}
                for i in part:
                    q = quotients[i]
                    term = q[1] if q is not None else (None if polys[i] is None else
                                                       {m: v * c * terms[i][1] for m, v in polys[i].items()})
                    total = None if term is None or total is None else poly_add(total, term)
                scaled = guards.get(guard_key(total)) if total is not None else None
                bound = Iv(None, scaled.hi // c) if scaled is not None and scaled.hi is not None else None
            elif any(polys[i] is None for i in part):
                continue
            else:
                total = {}
                for i in part:
                    total = poly_add(total, polys[i], terms[i][1])
                bound = guards.get(guard_key(total))
            if bound is None:
                continue
            acc: Iv | Ptr = bound
            for i in (i for i in range(len(terms)) if i not in part):
                v = vals[i]
                if isinstance(v, Ptr) and isinstance(acc, Iv) and terms[i][1] > 0:
                    acc = Ptr(v.base, iv_add(v.offset, iv_mul(acc, Iv.point(v.scale))), v.scale)
                elif isinstance(v, Iv) and isinstance(acc, Ptr):
                    acc = Ptr(acc.base, iv_add(acc.offset, iv_mul(v, Iv.point(acc.scale * terms[i][1]))), acc.scale)
                elif isinstance(v, Iv) and isinstance(acc, Iv):
                    acc = iv_add(acc, iv_mul(v, Iv.point(terms[i][1])))
                else:
                    acc = None
                    break
            if acc is None or type(acc) is not type(best):
                continue
            old, new = (best.offset, acc.offset) if isinstance(best, Ptr) else (best, acc)
            if isinstance(best, Ptr) and (best.base, best.scale) != (acc.base, acc.scale):
                continue
            if new.hi is not None and (old.hi is None or new.hi < old.hi):
                tighter = Iv(old.lo if old.lo is not None else new.lo, new.hi)
                best = Ptr(best.base, tighter, best.scale) if isinstance(best, Ptr) else tighter
        return best

    def _quotient_term(self, t: Node | None, sign: int) -> tuple[int, Poly] | None:
        """`x / c` added (c a positive constant, x never negative): (c, x's polynomial), else None."""
        t = unparen(t)
        if sign != 1 or t is None or t.type != "binary_expression" or t.child_by_field_name("operator").type != "/":
            return None
        c, x = self._poly(t.child_by_field_name("right")), t.child_by_field_name("left")
        num, xv = self._poly(x), self.expr(x, evaluate_only=True)
        if c is None or set(c) != {()} or c[()] <= 0 or num is None or not isinstance(xv, Iv) or xv.lo is None \
                or xv.lo < 0:
            return None
        return c[()], num

    def _segment_start(self, n: Node | None) -> str | None:
        """`indptr[b]` where `n` is the length of that segment, `indptr[b + 1] - indptr[b]` (or a
        local set to it) of an array of segment boundaries; else None."""
        n = unparen(n)
        for _ in range(2):
            if n is not None and n.type == "identifier" and n.text.decode() in self.defs:
                n = unparen(self.defs[n.text.decode()][0])
            elif n is not None and n.type == "cast_expression":
                n = unparen(n.child_by_field_name("value"))
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type != "-":
            return None
        end, start = (subscript_of(unparen(n.child_by_field_name(side)), self.boundaries) for side in ("left", "right"))
        if end is None or start is None or end[0] != start[0] or end[1] not in (f"{start[1]}+1", f"1+{start[1]}",
                                                                                f"({start[1]})+1"):
            return None
        return f"{start[0]}[{start[1]}]"

    def _within_segment(self, n: Node, value):
        """`indptr[b] + i` where a condition keeps `i` below the segment's length: an index below
        the segment's end, so below the size the boundaries end at (the table's size)."""
        segments = {k: v for k, v in self.env.items() if k.startswith(SEGMENT) and isinstance(v, str)}
        if not segments or not isinstance(value, Iv):
            return value
        terms = self._terms(n)
        for k, (t, sign) in enumerate(terms):
            at = subscript_of(unparen(t), self.boundaries)
            if sign != 1 or at is None or f"{at[0]}[{at[1]}]" not in segments.values():
                continue
            rest: Poly | None = {}
            for j, (u, s) in enumerate(terms):
                poly = self._poly(u) if j != k else {}
                rest = None if poly is None or rest is None else poly_add(rest, poly, s)
            if rest is not None and segments.get(SEGMENT + repr(sorted(rest.items()))) == f"{at[0]}[{at[1]}]":
                hi = self.table_size - 1
                return Iv(value.lo, hi if value.hi is None else min(value.hi, hi))
        return value

    def _bound(self, name: str, op: str, other) -> None:
        cur = self.env[name]
        if not isinstance(other, Iv):
            return
        lo, hi = cur.lo, cur.hi
        if op == "<" and other.hi is not None:
            hi = other.hi - 1 if hi is None else min(hi, other.hi - 1)
        elif op == "<=" and other.hi is not None:
            hi = other.hi if hi is None else min(hi, other.hi)
        elif op == ">" and other.lo is not None:
            lo = other.lo + 1 if lo is None else max(lo, other.lo + 1)
        elif op == ">=" and other.lo is not None:
            lo = other.lo if lo is None else max(lo, other.lo)
        self.env[name] = Iv(lo, hi)
        self._narrow_defs(name)

    def _forget(self, name: str) -> None:
        """`name` changed: what was set from it no longer follows from it."""
        self.defs.pop(name, None)
        for d in [d for d, (_, ids) in self.defs.items() if name in ids]:
            self.defs.pop(d, None)
        for g in [g for g in self.env if g.startswith(GUARD) and f"'{name}'" in g]:
            del self.env[g]

    def _narrow_defs(self, name: str) -> None:
        if self.narrowing:   # re-evaluating a definition narrows nothing further (a conditional in it)
            return
        self.narrowing = True
        try:
            self._narrow_defs_of(name)
        finally:
            self.narrowing = False

    def _narrow_defs_of(self, name: str) -> None:
        changed = {name}
        for d, (node, ids) in list(self.defs.items()):
            if not ids & changed:
                continue
            cur, new = self.env.get(d), self.expr(node, evaluate_only=True)
            if isinstance(cur, Iv) and isinstance(new, Iv):
                lo = new.lo if cur.lo is None else (cur.lo if new.lo is None else max(cur.lo, new.lo))
                hi = new.hi if cur.hi is None else (cur.hi if new.hi is None else min(cur.hi, new.hi))
                self.env[d] = Iv(lo, hi)
                changed.add(d)


def _flat(n: Node | None) -> str:
    """An expression's text without its spacing (two spellings of one expression compared)."""
    return "".join(n.text.decode().split()) if n is not None else ""
