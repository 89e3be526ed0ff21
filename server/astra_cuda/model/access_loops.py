"""The access walk's loops: a `for`'s and a `while`'s trips counted from their bounds, the pointers
a loop steps once per trip or moves by a fixed amount, an index stepped in lockstep. Separate
because trips and stepped pointers are their own arithmetic (a mixin of `access.Analyzer`)."""
from __future__ import annotations

from collections.abc import Collection

from tree_sitter import Node

from . import dtypes, loop_steps, syntax
from .access_nodes import unparen
from .access_values import Iv, Ptr, UNKNOWN, VECTOR_BYTES, iv_add, iv_mul
from .template_list import split_template_args


class LoopWalk:
    """How a loop's trips move the walk's indices and pointers."""

    def for_stmt(self, st: Node) -> None:
        saved = dict(self.env)
        init = st.child_by_field_name("initializer")
        if init is not None:
            if init.type == "declaration":
                self.declaration(init)
            else:
                self.expr(init)
        trips = self._for_trips(st)   # a fixed count (`j < 4`): the pointers it moves each trip, exactly
        fixed = trips if trips is not None and trips.lo == trips.hi else None
        # what the update steps (i++, i += blockDim.x) runs from its start up to the condition's bound
        update = st.child_by_field_name("update")
        starts: dict[str, tuple[Iv, Iv | None]] = {}   # stepped name -> (its start, its step)
        for n in (syntax.walk(update) if update is not None else ()):
            if n.type in ("update_expression", "assignment_expression"):
                target = n.child_by_field_name("argument") or n.child_by_field_name("left")
                cur = self.env.get(target.text.decode()) if target is not None else None
                if isinstance(cur, Iv):
                    starts[target.text.decode()] = (cur, self._step(n))
                    self.env[target.text.decode()] = Iv(cur.lo, None)
        cond = st.child_by_field_name("condition")
        dead = False
        if cond is not None:
            self._one_trip(init, cond, starts)
            self.expr(cond)
            dead = not self.refine_feasible(cond, True)
            self._lockstep(init, cond, starts)
        body = st.child_by_field_name("body")
        stepped = self._stepped_pointers(st, starts) if body is not None and not dead else []
        # the others it moves by a fixed amount a trip (several updates, one in a nested loop)
        mine = self._per_trip(st, fixed, set(stepped)) if fixed is not None and not dead else {}
        if body is not None and not dead:   # a loop that runs no iteration here is not walked
            self.loops += 1
            try:
                self.stmt(body)
            finally:
                self.loops -= 1
        for name in stepped:   # past the loop: advanced by a number of trips not followed
            _, _, start, step, _ = self.stepped.pop(name)
            if isinstance(start, Iv):   # an index: moved by up to every trip's step (some may skip it)
                self.env[name] = iv_add(start, Iv(0, fixed.lo * step) if fixed is not None and fixed.lo is not None
                                        and name in self.trip_ptrs else Iv(0, None))
                continue
            # followed where an enclosing loop's trip starts it afresh and this loop's trips are fixed
            moved = Iv.point(fixed.lo * step) if fixed is not None and fixed.lo is not None and \
                name in self.trip_ptrs else UNKNOWN
            self.env[name] = Ptr(start.base, iv_add(start.offset, moved), start.scale)
        self.env = self.merge(saved, {k: v for k, v in self.env.items() if k in saved})
        self._after_trips(mine, trips if not dead else Iv.point(0))

    def _one_trip(self, init: Node | None, cond: Node, starts: dict[str, tuple[Iv, Iv | None]]) -> None:
        """A tile loop, `for (i = blockIdx.x * TILE; i < gridDim.x * TILE; i += gridDim.x * TILE)`: its
        start the same for a block's threads and one step from the smallest start already past the
        bound, so each block runs it once, at its tile's start (taken as any value below the bound, the
        last block's i reached the grid's end: bitsandbytes' kDequantizeBlockwise read absmax 504
        elements past its tile). A start that varies by thread keeps that bound (its threads cover
        the range densely: a stride loop's last trip)."""
        cond = unparen(cond)
        if cond is None or cond.type != "binary_expression" or cond.child_by_field_name("operator").type not in ("<", "<="):
            return
        name, bound = unparen(cond.child_by_field_name("left")), cond.child_by_field_name("right")
        start, step = starts.get(name.text.decode(), (None, None)) if name is not None else (None, None)
        first = init.child_by_field_name("declarator") if init is not None and init.type == "declaration" else init
        first = first.child_by_field_name("value") or first.child_by_field_name("right") if first is not None else None
        poly = self._expanded(first) if first is not None and start is not None else None
        if poly is None or any(not n.startswith(("blockIdx.", "gridDim.", "blockDim.")) and n not in self.sizes
                               for m in poly for n in m):
            return
        end = self.expr(bound, evaluate_only=True)
        if isinstance(end, Iv) and end.hi is not None and start.lo is not None and step is not None \
                and step.lo is not None and step.lo == step.hi and step.lo > 0 \
                and start.lo + step.lo >= end.hi + (cond.child_by_field_name("operator").type == "<="):
            self.env[name.text.decode()] = start

    def _stepped_pointers(self, loop: Node, starts: dict[str, tuple[Iv, Iv | None]]) -> list[str]:
        """Pointers the loop's body steps once per trip (`src += stride;` after its last use of
        `src`): inside the body each is its start plus the trips made so far, read off the loop
        variable's current range (`stepped`), so a guard on the variable (`if (i + 1 < N)`)
        narrows it too. Returns their names."""
        var = next(((n, iv, by.lo) for n, (_, by) in starts.items() if by is not None and by.lo is not None
                    and by.lo == by.hi and by.lo > 0 and isinstance(iv := self.env.get(n), Iv)
                    and iv.lo is not None and iv.hi is not None), None)
        body = loop.child_by_field_name("body")
        if var is None or body is None:
            return []
        steps: dict[str, list[Node]] = {}
        for n in syntax.walk(body):
            if n.type not in ("assignment_expression", "update_expression"):
                continue
            enclosing = n.parent
            while enclosing is not None and enclosing.type not in ("for_statement", "while_statement", "do_statement"):
                enclosing = enclosing.parent
            target = n.child_by_field_name("argument") or n.child_by_field_name("left")
            # a pointer, or an integer index declared before the loop (flash-attention's layer norm:
            # `idx_x += VEC_COLS_PER_LDG` at the end of each trip's `if (it < num_valid_ldgs)`): a
            # single pass over the body would see only its first trip's value
            if enclosing == loop and target is not None and target.type == "identifier" \
                    and target.text.decode() not in starts \
                    and (isinstance(v := self.env.get(target.text.decode()), Ptr)
                         or isinstance(v, Iv) and v.lo is not None and v.hi is not None):
                steps.setdefault(target.text.decode(), []).append(n)
        out = []
        name, iv, by = var
        for p, incs in steps.items():
            step = Iv.point(1) if incs[0].type == "update_expression" else (
                self.expr(incs[0].child_by_field_name("right"), evaluate_only=True)
                if incs[0].child_by_field_name("operator").type == "+=" else None)
            last = max(x.end_byte for x in incs)
            used_after = any(x.type == "identifier" and x.text.decode() == p and x.start_byte >= last
                             for x in syntax.walk(body))
            if len(incs) != 1 or "++" in incs[0].text.decode()[:2] or used_after or not isinstance(step, Iv) \
                    or step.lo is None or step.lo != step.hi or step.lo < 0:
                continue
            start = self.env[p]
            self.stepped[p] = (name, iv.lo, start, step.lo * (start.scale if isinstance(start, Ptr) else 1), by)
            out.append(p)
        return out

    def _offset_of(self, n: Node | None) -> tuple[str, Iv] | None:
        """`base + e - f` as (base, the interval of e - f), base a plain integer variable."""
        n = unparen(n)
        if n is None:
            return None
        if n.type == "identifier" and isinstance(self.env.get(n.text.decode()), Iv):
            return self.offsets.get(n.text.decode(), (n.text.decode(), Iv.point(0)))
        op = n.child_by_field_name("operator") if n.type == "binary_expression" else None
        if op is None or op.type not in ("+", "-"):
            return None
        left = self._offset_of(n.child_by_field_name("left"))
        right = self.expr(n.child_by_field_name("right"), evaluate_only=True)
        if left is None or not isinstance(right, Iv):
            return None
        return left[0], iv_add(left[1], right if op.type == "+" else iv_mul(right, Iv.point(-1)))

    def _upper_offset(self, n: Node | None) -> tuple[str, Iv] | None:
        """`min(base + 128, n)`: at most base plus an offset (`_offset_of`'s, or `upper`'s for a local)."""
        n = unparen(n)
        if n is None:
            return None
        if n.type == "identifier" and n.text.decode() in self.upper:
            return self.upper[n.text.decode()]
        fn = n.child_by_field_name("function") if n.type == "call_expression" else None
        if fn is not None and fn.text.decode().split("::")[-1] in ("min", "fminf", "umin"):
            args = n.child_by_field_name("arguments")
            for a in args.named_children if args is not None else ():
                if (up := self._upper_offset(a)) is not None:
                    return up
            return None
        return self._offset_of(n)

    def _count(self, start: Node | None, op: str, bounds: list[Node], by: Iv | None) -> Iv | None:
        """Trips of `for (i = start; i < bound; i += by)` (several bounds: all must hold): exact where
        start and a bound are numbers here, at most the bound's offset from the start where both are
        one variable plus offsets (`k = offset_k; k < min(offset_k + 128, n)`), else None."""
        if by is None or by.lo is None or by.lo != by.hi or by.lo < 1:
            return None
        lo_start = self.expr(start, evaluate_only=True) if start is not None else None
        rel = self._offset_of(start) if start is not None else None
        best: Iv | None = None
        for b in bounds:
            span: Iv | None = None
            end = self.expr(b, evaluate_only=True)
            if isinstance(lo_start, Iv) and isinstance(end, Iv) and lo_start.lo is not None and \
                    lo_start.lo == lo_start.hi and end.lo is not None and end.lo == end.hi:
                span = Iv.point(end.lo - lo_start.lo)
            elif rel is not None and (up := self._upper_offset(b)) is not None and up[0] == rel[0] \
                    and up[1].hi is not None and rel[1].lo is not None:
                span = Iv(None, up[1].hi - rel[1].lo)
            if span is None or span.hi is None:
                continue
            extra = 1 if op == "<=" else 0
            hi = max(0, (span.hi + extra - 1) // by.lo + 1) if span.hi + extra > 0 else 0
            lo = (max(0, (span.lo + extra - 1) // by.lo + 1) if span.lo + extra > 0 else 0) \
                if span.lo is not None else 0
            best = Iv(lo, hi) if best is None else Iv(min(lo, best.lo), min(hi, best.hi))
        return best

    def _for_trips(self, loop: Node) -> Iv | None:
        parts = loop_steps.for_parts(loop)
        if parts is None or loop_steps.jumps(loop.child_by_field_name("body")):
            return None
        _, start, op, bound, update = parts
        return self._count(start, op, [bound], self._step(update))

    def _while_trips(self, loop: Node) -> Iv | None:
        """`int k = offset_k; while (k < end_k) { ...; k += 32; }`, end_k = min(offset_k + 128, n): at
        most 4 trips. Past the loop, k is its start plus at most that many steps."""
        found = loop_steps.while_counter(loop)
        if found is None or loop_steps.jumps(loop.child_by_field_name("body")):
            return None
        name, update, op, bounds = found
        start = self.env.get(name)
        if not isinstance(start, Iv):
            return None
        by = self._step(update)
        here = syntax.parse_expression(name)   # the counter itself: its value, or its base plus an offset
        return self._count(here, op, bounds, by) if here is not None else None

    def _counted_past(self, loop: Node, trips: Iv | None, rel: tuple[str, Iv] | None) -> None:
        """Past a `while` of at most `trips` trips: its counter is its start plus at most that many
        steps (a second loop from there, `while (k < rows_6 && k < end_k)`, is counted too)."""
        found = loop_steps.while_counter(loop)
        by = self._step(found[1]) if found is not None else None
        if found is None or trips is None or trips.hi is None or rel is None or rel[1].hi is None \
                or by is None or by.hi is None:
            return
        self.offsets[found[0]] = (rel[0], Iv(rel[1].lo, rel[1].hi + trips.hi * by.hi))

    def _per_trip(self, loop: Node, trips: Iv, taken: Collection[str] = ()) -> dict[str, tuple[Ptr, int, bool]]:
        """Pointers the loop moves by the same amount every trip (`b_ptr += size_n` four times a trip,
        in a nested `for (j = 0; j < 4; j++)`): each set to its start plus the trips before this one,
        so the body, walked once, reaches as far as the last trip does. Returns each one's start, the
        base elements it moves a trip and whether an enclosing loop had taken it already."""
        body = loop.child_by_field_name("body")
        if trips.hi is None or trips.hi < 1 or body is None or loop_steps.jumps(body):
            return {}
        out: dict[str, tuple[Ptr, int, bool]] = {}
        for name, updates in loop_steps.pointer_steps(loop, {n for n, v in self.env.items()
                                                             if isinstance(v, Ptr) and n not in taken}).items():
            total = 0
            for node, fors in updates:
                by = Iv.point(1) if node.type == "update_expression" else \
                    self.expr(node.child_by_field_name("right"), evaluate_only=True)
                inner = [self._for_trips(f) for f in fors]
                if not isinstance(by, Iv) or by.lo is None or by.lo != by.hi or by.lo < 0 or \
                        any(t is None or t.lo != t.hi for t in inner):
                    break
                for t in inner:
                    by = Iv.point(by.lo * t.lo)   # type: ignore[union-attr, operator]
                total += by.lo
            else:
                start = self.env[name]
                assert isinstance(start, Ptr)
                out[name] = (start, total * start.scale, name in self.trip_ptrs)
                self.env[name] = Ptr(start.base, iv_add(start.offset, Iv(0, (trips.hi - 1) * total * start.scale)),
                                     start.scale)
        self.trip_ptrs |= set(out)
        return out

    def _after_trips(self, taken: dict[str, tuple[Ptr, int, bool]], trips: Iv | None) -> None:
        """Past the loop: each of `_per_trip`'s pointers moved by its trips' steps."""
        for name, (start, total, outer) in taken.items():
            if not outer:
                self.trip_ptrs.discard(name)
            if trips is None or trips.hi is None:
                self.env[name] = Ptr(start.base, UNKNOWN, start.scale)
                continue
            self.env[name] = Ptr(start.base, iv_add(start.offset, Iv((trips.lo or 0) * total, trips.hi * total)),
                                 start.scale)

    def _step(self, n: Node) -> Iv | None:
        """What one update adds (`i++`: 1, `b += bStep`: bStep's value)."""
        if n.type == "update_expression":
            return Iv.point(1 if "++" in n.text.decode() else -1)
        op = n.child_by_field_name("operator")
        if op is None or op.type != "+=":
            return None
        v = self.expr(n.child_by_field_name("right"), evaluate_only=True)
        return v if isinstance(v, Iv) else None

    def _lockstep(self, init: Node | None, cond: Node, starts: dict[str, tuple[Iv, Iv | None]]) -> None:
        """`for (a = aBegin, b = bBegin; a <= aEnd; a += aStep, b += bStep)`: the trips the first
        name makes from its start to a bound that is that start plus an offset bound how far the
        names stepped with it reach."""
        cond = unparen(cond)
        op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
        if op is None or op.type not in ("<", "<=") or init is None:
            return
        left, right = unparen(cond.child_by_field_name("left")), cond.child_by_field_name("right")
        name = left.text.decode() if left is not None and left.type == "identifier" else ""
        first = {}   # each stepped name's initializer
        for n in syntax.walk(init):
            if n.type in ("init_declarator", "assignment_expression"):
                lhs = n.child_by_field_name("declarator") or n.child_by_field_name("left")
                rhs = n.child_by_field_name("value") or n.child_by_field_name("right")
                if lhs is not None and rhs is not None:
                    first[lhs.text.decode()] = rhs
        start, bound = self._offset_of(first.get(name)), self._offset_of(right)
        step = starts.get(name, (None, None))[1]
        if start is None or bound is None or start[0] != bound[0] or step is None or step.lo is None or step.lo < 1 \
                or step.lo != step.hi or bound[1].hi is None or start[1].lo is None:
            return
        span = bound[1].hi - start[1].lo - (1 if op.type == "<" else 0)
        trips = span // step.lo + 1 if span >= 0 else 0
        for other, (begin, by) in starts.items():
            if other == name or by is None or by.hi is None or by.lo is None or by.lo < 0 or begin.hi is None:
                continue
            self.env[other] = Iv(begin.lo, begin.hi + max(0, trips - 1) * by.hi)

    def _numbered(self, elem: str) -> str:
        """A template's arguments that name the body's constants written as their numbers (vLLM's
        paged attention: `constexpr int V_VEC_SIZE = MIN(16 / sizeof(scalar_t), BLOCK_SIZE)`, then
        `Vec<scalar_t, V_VEC_SIZE>::Type`), so the type's size can be looked up."""
        head, _, rest = elem.partition("<")
        inner, _, tail = rest.rpartition(">")
        args = []
        for a in split_template_args(f"<{inner}>"):
            v = self.constants.get(a.strip())
            known = self.env.get(a.strip())
            if v is None and isinstance(known, Iv) and known.lo is not None and known.lo == known.hi:
                v = known.lo
            args.append(str(v) if isinstance(v, int) else a.strip())
        return f"{head}<{', '.join(args)}>{tail}"

    def _bound_vector_bytes(self, elem: str) -> int | None:
        """sizeof a vector template over a helper's own template parameters (`vec_n_t<InT, VEC_SIZE>`
        inside vLLM's vectorize_with_alignment), from what the call bound them to: `sizeof(InT)` of
        the pointer handed in and VEC_SIZE's number — N of the element, every such template's layout."""
        args = split_template_args("<" + elem.split("<", 1)[1])
        if len(args) != 2:
            return None
        size = self.constants.get(f"sizeof({args[0].strip()})")
        count = self.constants.get(args[1].strip())
        if count is None and args[1].strip().isdigit():
            count = int(args[1].strip())
        return size * count if size is not None and count is not None and 0 < count <= 64 else None

    def _rescale(self, p: Ptr, spelled: str) -> Ptr:
        """A pointer of another element type over the same parameter (uint4* over halves)."""
        elem = " ".join(w for w in spelled.replace("*", " ").split() if w not in ("const", "volatile", "__restrict__"))
        for _ in range(4):   # through the body's own aliases, a member's class too (`Traits::NopeVec`)
            elem = " ".join(w for w in self.aliases.get(elem, elem).split() if w not in ("const", "typename"))
            owner, sep, member = elem.rpartition("::")
            if sep and owner in self.aliases:
                elem = f"{self.aliases[owner]}::{member}"
        nbytes = VECTOR_BYTES.get(elem.split()[-1] if elem else "")
        dt = dtypes.from_cpp(elem) if elem else None
        if p.base in self.facts.uses and elem and dtypes.vector_of(elem) is None:
            # a name of the instance's (`T`, `Ktraits::compute_t`, `input_t`) as written: the draft resolves it
            # with the template arguments (`types.scalar`); cast_type reads the scalar names only
            self.facts.uses[p.base].casts.add(dt.name if dt is not None else elem)
        if nbytes is None and self.type_bytes is not None and elem:
            nbytes = self.type_bytes(elem)
        if nbytes is None and self.type_bytes is not None and "<" in elem:   # `Vec<scalar_t, V_VEC_SIZE>::Type`
            nbytes = self.type_bytes(self._numbered(elem))
        if nbytes is None and elem.endswith(">"):
            nbytes = self._bound_vector_bytes(elem)
        base = self.elem_bytes.get(p.base)
        if nbytes is None and dt is None and self.type_bytes is not None and base == 1 and p.scale == 1 and elem \
                and elem.split()[-1] != "void":
            # a byte buffer (a `void*`) read as elements of a size not known here (a member type of a
            # class Astra does not read): an index through it reaches no bounded number of bytes —
            # never one byte an element (flash-attention's layer norm wrote `rows` floats through
            # `static_cast<compute_t*>(params.mu)` into a spec's `rows` bytes). Over a typed buffer
            # the scale is kept: a vector of a helper's own parameters is most often its element
            return Ptr(p.base, UNKNOWN, p.scale)
        if nbytes is None or base is None or nbytes == base * p.scale:
            return p
        if nbytes % base:
            return Ptr(p.base, p.offset, p.scale)
        return Ptr(p.base, p.offset, nbytes // base)
