"""The access walk's expressions: each subscript, dereference, field, binary operation and inline
PTX evaluated to an interval or a pointer, and every access through a pointer recorded with how
far it reaches. Separate because it is the walk's evaluator (a mixin of `access.Analyzer`)."""
from __future__ import annotations

import re

from tree_sitter import Node

from . import accessors, dtypes, syntax
from .access_nodes import tile_size, unparen
from .access_values import Iv, Ptr, Table, UNKNOWN, UNSET, VECTOR_BYTES, iv_add, iv_mul, poly_add
from .compiled_branches import truth_of


class ExpressionWalk:
    """How an expression evaluates, and the accesses it makes."""

    def access(self, p: Ptr, index: Iv, *, write: bool = False, read: bool = True, width: int = 1) -> None:
        use = self.facts.uses.get(p.base)
        if use is None:
            return
        use.read |= read
        use.written |= write
        use.packet = max(use.packet, p.scale * width)
        if p.scale * width > 1 and (not self.vector_bases or self.vector_bases[-1] != p.base):
            self.vector_bases.append(p.base)
        if index.hi is None or p.offset.hi is None:
            use.reach(None)
            use.stored_unknown |= write and not read
            use.loaded_unknown |= read and not write
        else:
            use.reach(p.offset.hi + (index.hi + 1) * p.scale * width - 1)

    def expr(self, n: Node | None, *, evaluate_only: bool = False, lhs: str = "") -> Iv | Ptr | Table | str | None:
        """The value of an expression (an interval, a pointer, or None), recording accesses.
        `lhs`: '=' when it is the target of a plain assignment, '+=' of a compound one."""
        if n is None:
            return None
        t = n.type
        if t == "number_literal":
            digits = n.text.decode().replace("'", "").rstrip("uUlLfF")
            try:
                return Iv.point(int(digits, 0))
            except ValueError:
                return None
        if t in ("identifier", "field_identifier"):
            name = n.text.decode()
            if name not in self.env and name in self.constants:   # a template argument: width = 8
                return Iv.point(self.constants[name])
            if name in self.stepped:   # a pointer the loop steps: its start plus the trips made so far
                var, first, start, step, by = self.stepped[name]
                iv = self.env.get(var)
                if isinstance(iv, Iv) and iv.lo is not None and iv.hi is not None:
                    trips = Iv((iv.lo - first) // by, (iv.hi - first) // by)
                    if isinstance(start, Iv):   # an index stepped once a trip
                        value = iv_add(start, iv_mul(trips, Iv.point(step)))
                        tight = self.stepped_within(name, var, first, step, by)   # `c + V * it < n` holds
                        return value if tight is None or value.hi is None or tight >= value.hi else Iv(value.lo, tight)
                    return Ptr(start.base, iv_add(start.offset, iv_mul(trips, Iv.point(step))), start.scale)
                return UNKNOWN if isinstance(start, Iv) else Ptr(start.base, UNKNOWN, start.scale)
            value = self.env.get(name)
            return UNKNOWN if value == UNSET else value
        if t == "qualified_identifier":   # `x128::size`, or a namespace's constant `td_data::granularity`
            text = n.text.decode().replace(" ", "")
            c = self.constants.get(text)
            c = self.constants.get(text.split("::")[-1]) if c is None and "<" not in text else c
            return Iv.point(c) if c is not None else None
        if t == "parenthesized_expression":
            inner = [c for c in n.named_children if c.type != "comment"]
            return self.expr(inner[-1], evaluate_only=evaluate_only, lhs=lhs) if inner else None
        if t == "sizeof_expression":   # `16 / sizeof(T)` values per access: T as instantiated
            inner = n.child_by_field_name("type") or n.child_by_field_name("value")
            what = " ".join(inner.text.decode().strip("() ").split()) if inner is not None else ""
            known = self.constants.get(f"sizeof({what})")
            dt = dtypes.from_cpp(what) if known is None else None
            size = known if known is not None else (dt.itemsize if dt is not None else VECTOR_BYTES.get(what))
            return Iv.point(size) if size is not None else None
        if t == "field_expression":
            return self.field(n)
        if t == "cast_expression":
            v = self.expr(n.child_by_field_name("value"), evaluate_only=evaluate_only)
            tn = n.child_by_field_name("type")
            if isinstance(v, Ptr) and tn is not None and "*" in tn.text.decode():
                return self._rescale(v, tn.text.decode())
            return v
        if t == "binary_expression":
            return self.binary(n, evaluate_only)
        if t == "unary_expression":
            op = n.child_by_field_name("operator").type
            v = self.expr(n.child_by_field_name("argument"), evaluate_only=evaluate_only)
            if op == "-" and isinstance(v, Iv):
                return Iv(None if v.hi is None else -v.hi, None if v.lo is None else -v.lo)
            return v if op == "+" else None
        if t == "conditional_expression":   # `i < n ? x[i] : 0`: each branch under its side of the condition
            cond = n.child_by_field_name("condition")
            decided = truth_of(cond, self.constants, self.sizes)   # `top_ks != nullptr ? top_ks[b] : k`, top_ks null
            if decided is None:   # `(next_power_of_two <= 128) ? 2 : 1` with the instance's 1024
                decided = self._compared(cond)
            if decided is not None:
                return self.expr(n.child_by_field_name("consequence" if decided else "alternative"),
                                 evaluate_only=evaluate_only)
            self.expr(cond, evaluate_only=evaluate_only)
            before = dict(self.env)
            self.refine(cond, True)
            a = self.expr(n.child_by_field_name("consequence"), evaluate_only=evaluate_only)
            self.env = dict(before)
            self.refine(cond, False)
            b = self.expr(n.child_by_field_name("alternative"), evaluate_only=evaluate_only)
            self.env = before
            return a.join(b) if isinstance(a, Iv) and isinstance(b, Iv) else (a if a == b else None)
        if t == "subscript_expression":
            return self.subscript(n, evaluate_only, lhs)
        if t == "pointer_expression":
            return self.deref(n, evaluate_only, lhs)
        if t == "assignment_expression":
            op = n.child_by_field_name("operator").type
            rnode = n.child_by_field_name("right")
            left = n.child_by_field_name("left")
            if rnode is not None and "tiled_partition" in rnode.text.decode() and left is not None:
                # `cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);` reads as an
                # assignment to the tree-sitter grammar: the tile is what matters
                name = left.text.decode().split()[-1].split(">")[-1].strip()
                self.env[name] = f"tile:{tile_size(left.text.decode() + rnode.text.decode(), self.constants)}"
                return None
            right = self.expr(rnode, evaluate_only=evaluate_only)
            if left is not None and left.type == "identifier" and left.text.decode() in self.stepped:
                return None   # the loop's step, already counted in its value
            if left is not None and left.type == "identifier":
                self.offsets.pop(left.text.decode(), None)   # no longer its base plus an offset
                self.upper.pop(left.text.decode(), None)
                name = left.text.decode()
                if op == "=" and rnode is not None:
                    self.assigned.setdefault(name, []).append(rnode)
                else:
                    self.assigned.pop(name, None)   # `+=` and the like: no longer one of the values written
                cur = self.env.get(name)
                self._forget(name)
                moved = self.moved.pop(name, None)
                if moved is not None and isinstance(cur, Ptr) and op == "+=" and isinstance(right, Iv) \
                        and not self.loops and (by := self._expanded(rnode)) is not None:
                    self.moved[name] = poly_add(moved, by)
                if op == "=" and isinstance(right, (Iv, Ptr)):
                    # joined with what it held, except where that is nothing known (a variable
                    # declared before an earlier loop that set it, `qk_offset` reused loop after loop)
                    known = isinstance(cur, Iv) and (cur.lo is not None or cur.hi is not None)
                    self.env[name] = right.join(cur) if known and isinstance(right, Iv) else right
                elif isinstance(cur, Ptr) and op == "+=" and isinstance(right, Iv) and (
                        not self.loops or self.declared_at.get(name) == self.loops or name in self.trip_ptrs):
                    # `vals += row * n;` once, outside any loop, to a pointer of this trip (a helper's
                    # parameter, called in a loop: `in += prefix`) or where each trip of the loop starts
                    # it afresh (`_per_trip`): the pointer moves by exactly that
                    self.env[name] = Ptr(cur.base, iv_add(cur.offset, iv_mul(right, Iv.point(cur.scale))), cur.scale)
                elif isinstance(cur, Ptr) and op in ("+=", "-="):
                    self.env[name] = Ptr(cur.base, UNKNOWN, cur.scale)
                elif isinstance(cur, Iv) and isinstance(right, Iv) and op == "/=" and self.declared_at.get(name) == self.loops \
                        and cur.lo is not None and cur.lo >= 0 and right.lo is not None and right.lo > 0:
                    # `prefix /= sizeof(T)` once: a count of bytes made a count of elements
                    self.env[name] = Iv(cur.lo // right.hi if right.hi is not None else 0,
                                        None if cur.hi is None else cur.hi // right.lo)
                elif isinstance(cur, Iv) and isinstance(right, Iv) and op in ("+=", "-=", "*=") \
                        and self.declared_at.get(name) == self.loops:
                    # a local of this trip (or of no loop) updated in sequence (`step_offset -=
                    # padding[row]; step_offset *= hidden;`): each update happens once, so exactly
                    self.env[name] = iv_add(cur, right) if op == "+=" else \
                        iv_add(cur, Iv(None if right.hi is None else -right.hi, None if right.lo is None else -right.lo)) \
                        if op == "-=" else iv_mul(cur, right)
                elif not isinstance(cur, str) or cur == UNSET:
                    self.env[name] = UNKNOWN
                return None
            self.expr(left, evaluate_only=evaluate_only, lhs=op)
            return None
        if t == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                name = arg.text.decode()
                cur = self.env.get(name)
                if isinstance(cur, Ptr):
                    # `*h_ptr++` (exllama's dot_product_8_h reads its row so, eight a trip): the
                    # expression's value is the pointer before the move (after it, for `++p`), so the
                    # element it reads counts. It moves by exactly one element where each trip starts
                    # it afresh or outside any loop (as `p += 1` does), else to somewhere unknown in
                    # its buffer — its later accesses then say they could not be bounded.
                    up = "++" in n.text.decode()
                    exact = name in self.trip_ptrs or not self.loops or self.declared_at.get(name) == self.loops
                    new = Ptr(cur.base, iv_add(cur.offset, Iv.point(cur.scale if up else -cur.scale)) if exact
                              else UNKNOWN, cur.scale)
                    if not evaluate_only:
                        self.env[name] = new
                    prefix = n.children[0].type in ("++", "--")
                    return new if prefix else cur
                if not isinstance(self.env.get(arg.text.decode()), str) or self.env.get(arg.text.decode()) == UNSET:
                    if not evaluate_only:
                        self.env[arg.text.decode()] = UNKNOWN
                return None
            self.expr(arg, evaluate_only=evaluate_only, lhs="+=")
            return None
        if t == "call_expression":
            return self.call(n, evaluate_only)
        if t == "gnu_asm_expression":
            return self.asm(n, evaluate_only)
        if t in ("template_function", "sizeof_expression", "string_literal", "char_literal", "true", "false",
                 "null", "nullptr", "lambda_expression"):
            return None
        for c in n.named_children:
            self.expr(c, evaluate_only=evaluate_only)
        return None

    def asm(self, n: Node, evaluate_only: bool) -> None:
        """Inline PTX (`asm volatile("ld.global.nc.v2.s32 {%0, %1}, [%2];" : ... : "l"(p))`): each
        instruction's `[%k]` operand that points into a parameter is read by an `ld`, written by an
        `st`, read and written by an `atom`/`red`, as wide as the instruction's vector of its type."""
        code = n.child_by_field_name("assembly_code")
        text = "".join(c.text.decode() for c in syntax.walk(code) if c.type == "string_content") \
            if code is not None else ""
        operands = [op.child_by_field_name("value") for kind in ("output_operands", "input_operands")
                    for lst in [n.child_by_field_name(kind)] if lst is not None
                    for op in lst.named_children if op.type in ("gnu_asm_output_operand", "gnu_asm_input_operand")]
        vals = [self.expr(v, evaluate_only=True) for v in operands]
        for v in operands:   # what the operand expressions themselves read (`"r"(x[i])`)
            self.expr(v, evaluate_only=evaluate_only)
        if "%laneid" in text:   # `mov.u32 %0, %%laneid;`: the output is the thread's lane
            for v in operands[:1]:
                if v is not None and v.type == "identifier":
                    self.env[v.text.decode()] = Iv(0, 31)
        if evaluate_only:
            return None
        for instr in text.replace("\\n", ";").split(";"):
            words = instr.split()
            m = re.search(r"\[\s*%(\d+)\s*\]", instr)
            if not words or m is None or int(m.group(1)) >= len(vals) or not isinstance(vals[int(m.group(1))], Ptr):
                continue
            op, p = words[0], vals[int(m.group(1))]
            kind = op.split(".")[0]
            if kind not in ("ld", "st", "atom", "red"):
                continue
            parts = op.split(".")
            lanes = next((int(x[1:]) for x in parts if re.fullmatch(r"v[248]", x)), 1)
            bits = next((int(x[1:]) for x in reversed(parts) if re.fullmatch(r"[bsuf](8|16|32|64|128)", x)), 0)
            base = self.elem_bytes.get(p.base, 0) * p.scale
            width = max(1, lanes * bits // 8 // base) if bits and base else 1
            self.access(p, Iv.point(0), write=kind != "ld", read=kind != "st", width=width)
        return None

    def field(self, n: Node):
        arg, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        a, f = (arg.text.decode() if arg is not None else ""), (fld.text.decode() if fld is not None else "")
        if arg is not None and arg.type == "call_expression":   # `tb.group_index().x` of a thread_block
            fn = arg.child_by_field_name("function")
            obj = fn.child_by_field_name("argument") if fn is not None and fn.type == "field_expression" else None
            method = fn.child_by_field_name("field") if obj is not None else None
            if obj is not None and method is not None and self.env.get(obj.text.decode()) == "tile:block":
                a = {"group_index": "blockIdx", "thread_index": "threadIdx", "dim_threads": "blockDim",
                     "group_dim": "blockDim"}.get(method.text.decode(), a)
        if a == "this" and isinstance(self.env.get(f), (Iv, Ptr)):   # a view's field in its method
            return self.env[f]
        k = "xyz".find(f)
        if isinstance(self.env.get(f"{a}.{f}"), Iv):   # narrowed by a condition (`threadIdx.x < 64`)
            return self.env[f"{a}.{f}"]
        if k >= 0:
            if a == "threadIdx":
                return Iv(0, self.block[k] - 1)
            if a == "blockIdx":
                return Iv(0, self.grid[k] - 1)
            if a == "blockDim":
                return Iv.point(self.block[k])
            if a == "gridDim":
                return Iv.point(self.grid[k])
        if arg is not None:
            self.expr(arg)
        return None

    def binary(self, n: Node, evaluate_only: bool):
        out = self._binary(n, evaluate_only)
        if self.boundaries and self._segment_start(n) is not None:   # a segment's length: never negative
            return Iv(0, self.table_size)
        if n.child_by_field_name("operator").type in ("+", "-") and not self.narrowing:
            return self._guarded_sum(n, out)
        return out

    def _binary(self, n: Node, evaluate_only: bool):
        op = n.child_by_field_name("operator").type
        a = self.expr(n.child_by_field_name("left"), evaluate_only=evaluate_only)
        b = self.expr(n.child_by_field_name("right"), evaluate_only=evaluate_only)
        if isinstance(a, Ptr) and isinstance(b, Iv) and op in ("+", "-"):
            off = iv_add(a.offset, iv_mul(b, Iv.point(a.scale))) if op == "+" else a.offset
            return Ptr(a.base, off if op == "+" else UNKNOWN, a.scale)
        if isinstance(b, Ptr) and isinstance(a, Iv) and op == "+":
            return Ptr(b.base, iv_add(b.offset, iv_mul(a, Iv.point(b.scale))), b.scale)
        for side, other in ((a, b), (b, a)):
            if isinstance(side, Ptr) and not isinstance(other, Ptr) and op in ("&", "%") and side.base in self.facts.uses:
                # an address masked or taken modulo a number (vLLM's `addr & (WIDTH - 1)`): the code
                # tests this pointer's alignment itself, and picks its vector accesses' start from it
                self.facts.uses[side.base].address_tested = True
                self.address_tests.append(side.base)
        if op == "&" and not (isinstance(a, Iv) and isinstance(b, Iv)):
            # a mask's bits bound the result, whatever it masks (vLLM's `addr & (WIDTH - 1)` of an
            # address cast to an integer): 0 .. the mask where that is known and not negative
            mask = b if isinstance(b, Iv) else a if isinstance(a, Iv) else None
            return Iv(0, mask.hi) if mask is not None and mask.lo is not None and mask.lo >= 0 \
                and mask.hi is not None else None
        if not isinstance(a, Iv) or not isinstance(b, Iv):
            return None
        if op == "+":
            return iv_add(a, b)
        if op == "-":
            return Iv(None if a.lo is None or b.hi is None else a.lo - b.hi,
                      None if a.hi is None or b.lo is None else a.hi - b.lo)
        if op == "*":
            return iv_mul(a, b)
        if op in ("/", ">>") and b.lo is not None and b.hi is not None:
            d_lo, d_hi = (b.lo, b.hi) if op == "/" else (1 << b.lo, 1 << b.hi)
            if d_lo > 0 and d_hi >= d_lo and a.lo is not None and a.lo >= 0:
                return Iv(a.lo // d_hi, None if a.hi is None else a.hi // d_lo)
            return None
        if op == "<<" and b.lo is not None and b.hi is not None and b.lo >= 0:
            return iv_mul(a, Iv(1 << b.lo, 1 << b.hi))
        if op == "%" and b.hi is not None and b.lo is not None and b.lo > 0 and a.lo is not None and a.lo >= 0:
            # `bias[i % hidden]`: an index taken modulo a size addresses a table of that many
            # entries, however few of them the other sizes reach (the table is sized by the modulus)
            by_size = any(x.type == "identifier" and x.text.decode() in self.sizes
                          for x in syntax.walk(n.child_by_field_name("right")))
            return Iv(0, b.hi - 1 if a.hi is None or by_size else min(a.hi, b.hi - 1))
        if op == "&" and a.lo is not None and a.lo >= 0 and b.lo is not None and b.lo >= 0:
            return Iv(0, None if a.hi is None or b.hi is None else min(a.hi, b.hi))
        if op == "&" and (m := b if b.lo is not None and b.lo >= 0 else a).lo is not None and m.lo >= 0 \
                and m.hi is not None:   # one side a mask: the other's sign aside, 0 .. the mask
            return Iv(0, m.hi)
        return None

    def subscript(self, n: Node, evaluate_only: bool, lhs: str):
        arr = n.child_by_field_name("argument")
        idx_node = n.child_by_field_name("indices") or n.child_by_field_name("index")
        if idx_node is not None and idx_node.type == "subscript_argument_list":
            inner = [c for c in idx_node.named_children if c.type != "comment"]
            idx_node = inner[0] if inner else None
        p = self.expr(arr, evaluate_only=evaluate_only)
        i = self.expr(idx_node, evaluate_only=evaluate_only)
        if isinstance(p, accessors.Indexed):   # `scores[row][col]`: an access once every dimension has its index
            p = p.at(i if isinstance(i, Iv) else UNKNOWN)
            if len(p.indices) < p.dims:
                return p
            for d, index in enumerate(p.indices if not evaluate_only else ()):
                self.access(Ptr(accessors.dim_name(p.param, d), Iv.point(0)), index, write=bool(lhs), read=lhs != "=")
            return None
        if isinstance(p, Table) and not p.element:   # `qkv_ptr[j]`: one of the table's pointers
            return Table(p.entries, element=True)
        if isinstance(p, Table):   # `qkv_ptr[j][idx]`: any of them, at idx
            for e in p.entries if not evaluate_only else ():
                self.access(e, i if isinstance(i, Iv) else UNKNOWN, write=bool(lhs), read=lhs != "=")
            return None
        if not isinstance(p, Ptr):
            name = unparen(arr)
            if name is not None and name.type == "identifier" and name.text.decode() in self.byte_arrays:
                return Iv(0, 255)
            return None
        if not evaluate_only:
            tight = self._guarded_address([(arr, 1), (idx_node, 1)]) if isinstance(i, Iv) and i.hi is not None \
                and p.offset.hi is not None else None
            if tight is not None and tight.base == p.base and tight.scale == p.scale and tight.offset.hi is not None \
                    and tight.offset.hi < p.offset.hi + i.hi * p.scale:   # type: ignore[operator]
                self.access(Ptr(p.base, Iv(p.offset.lo, tight.offset.hi), p.scale), Iv.point(0),
                            write=bool(lhs), read=lhs != "=")
            else:
                self.access(p, i if isinstance(i, Iv) else UNKNOWN, write=bool(lhs), read=lhs != "=")
        return self.loaded(p)

    def loaded(self, p: Ptr):
        """The value read through `p`: an index below the table size when `p` is an integer
        parameter (token ids), else unknown — as is one the kernel wrote before this read (`cumsum[e]`
        after `cumsum[e] = s`): it holds the kernel's own results, not indices the spec draws."""
        if p.base in self.lengths and p.scale == 1 and not self.facts.uses[p.base].written:
            return Iv(1, self.lengths[p.base])   # a length (`seq_lens[s]`): 1 up to the longest the launch fits
        if p.base in self.int_params and p.scale == 1 and not self.facts.uses[p.base].written:
            self.facts.uses[p.base].table_loads = True
            # segment boundaries run from 0 to the table's size, that one included (the last one ends it)
            if self.shared_rows and p.base not in self.boundaries:
                return Iv(1, self.table_size // 2)
            return Iv(0, self.table_size - (p.base not in self.boundaries))
        return None

    def deref(self, n: Node, evaluate_only: bool, lhs: str):
        op = n.child_by_field_name("operator")
        arg = n.child_by_field_name("argument")
        inner = unparen(arg)
        if op is not None and op.type == "&" and inner is not None and inner.type == "subscript_expression":
            # `&data[i]` is an address, not an access: the pointer `data + i`
            idx = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                idx = next((c for c in idx.named_children if c.type != "comment"), None)
            p = self.expr(inner.child_by_field_name("argument"), evaluate_only=evaluate_only)
            i = self.expr(idx, evaluate_only=evaluate_only)
            if isinstance(p, Ptr):
                return Ptr(p.base, iv_add(p.offset, iv_mul(i if isinstance(i, Iv) else UNKNOWN, Iv.point(p.scale))),
                           p.scale)
            return None
        v = self.expr(arg, evaluate_only=evaluate_only)
        if op is not None and op.type == "*" and isinstance(v, Ptr):
            if not evaluate_only:
                self.access(v, Iv.point(0), write=bool(lhs), read=lhs != "=")
            return self.loaded(v)
        if op is not None and op.type == "&":
            return v if isinstance(v, Ptr) else None
        return None

    def _element(self, a: Node) -> tuple[Ptr, Iv] | None:
        """The pointer and index of an element argument (`out[i]`, `*(out + i)`), or None."""
        a = unparen(a)
        if a is not None and a.type == "subscript_expression":
            idx = a.child_by_field_name("indices") or a.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                inner = [c for c in idx.named_children if c.type != "comment"]
                idx = inner[0] if inner else None
            p, i = self.expr(a.child_by_field_name("argument"), evaluate_only=True), \
                self.expr(idx, evaluate_only=True)
            return (p, i if isinstance(i, Iv) else UNKNOWN) if isinstance(p, Ptr) else None
        op = a.child_by_field_name("operator") if a is not None and a.type == "pointer_expression" else None
        if op is not None and op.type == "*":
            p = self.expr(a.child_by_field_name("argument"), evaluate_only=True)
            return (p, Iv.point(0)) if isinstance(p, Ptr) else None
        return None
