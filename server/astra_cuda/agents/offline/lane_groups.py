"""Lane groups: a block-stride loop over one index d whose steps each load one element of a run and
one of its partner run (rotary embeddings in rotate-half form: `x[d]` and `x[d ± half]`) → each
thread takes V consecutive d, and each run is read with one wide load.

    for (int d = threadIdx.x; d < n; d += blockDim.x) {      if (<d's coefficient is 1 in every widened index>) {
      <pre: per-d locals (cos, sin)>                            for (long long d0 = threadIdx.x * V; d0 < n; d0 += blockDim.x * V) {
      for (int h = ...; h < ...; h += ...) {          ->          <pre, once a lane, into lane arrays>
        ... src[off] ... (c ? -src[off + half] : src[off - half]) ...  for (h ...) { <one wide load a run, then the
      }                                                                  body a lane, its loads read from the runs> }
    }                                                           }
                                                              } else { <the loop as written> }

Every d is covered exactly once: thread t takes d0 = V * (t + k * blockDim.x) and its lanes d0 + j,
j < V, each lane running the loop's body only where the original condition `d < n` holds for it.

Exact: an index is widened only where it is affine in d over names the loop never changes (locals
of the body read through their initializers), its coefficient of d checked to be 1 once before the
loop; a group then takes the wide path only where every lane is inside the loop's bound, the
condition choosing each widened load (the arm of a `?:`) is the same for all lanes, each run's
address is aligned to the whole run (so `half % V == 0` and aligned bases, tested where they
matter) and the lanes' stores do not reach the runs read; elsewhere the lanes run the body as
written, one element each. Only `const` pointer parameters the function never writes are widened;
the loop may hold no barrier, warp collective, `break`, `continue` or `return`.

The reordering is between items no two threads of the original order: the original reads and
writes each (d, h) once, and a kernel whose item reads what another item writes would race between
its threads; the stores' check covers the lanes a group runs in sequence.
"""
from __future__ import annotations

from dataclasses import dataclass

from tree_sitter import Node

from . import base, tree
from .base import Context, Rewrite, pointer_params, written_pointers
from .tree import (Edit, apply_edits, assigned_names, callee, calls, declared_name, line_indent, squashed, txt,
                   unparenthesized, walk)

COLLECTIVE = ("sync", "shfl", "ballot", "activemask", "__match", "__reduce", "barrier", "tiled_partition", "atomic")
PURE = {"identifier", "number_literal", "binary_expression", "parenthesized_expression", "unary_expression",
        "field_expression", "field_identifier", "true", "false"}
INT_CASTS = {"int", "long", "long long", "int64_t", "int32_t", "size_t", "unsigned", "unsigned int"}
RUN = ("template <typename T, int N>\nstruct alignas(sizeof(T) * N) astra_lane_run {{\n  T v[N];\n}};\n")


@dataclass
class _Load:
    node: Node          # the subscript `p[x]`
    ptr: str
    elem: str
    index: str          # the index, locals inlined, d left as `{D}`
    when: str | None    # the condition under which it is evaluated (None: always), d as `{D}`
    coef: str           # its coefficient of d


class _Affine:
    """Inlines a loop's locals and reads an expression's coefficient of the loop variable."""

    def __init__(self, var: str, env: dict[str, Node], bad: set[str]):
        self.var, self.env, self.bad = var, env, bad

    def text(self, n: Node) -> str | None:
        """The expression with locals inlined and the loop variable as `{D}`; None: not pure."""
        if n.type not in PURE and not (n.type == "cast_expression" and txt(n.child_by_field_name("type")) in INT_CASTS):
            return None
        if n.type == "identifier":
            name = txt(n)
            if name in self.bad:
                return None
            if name == self.var:
                return "({D})"
            if name in self.env:
                inner = self.text(self.env[name])
                return None if inner is None else f"({inner})"
            return name
        if n.type == "cast_expression":
            inner = self.text(n.child_by_field_name("value"))
            return None if inner is None else f"(({txt(n.child_by_field_name('type'))})({inner}))"
        if n.type == "field_expression":
            return txt(n) if squashed(n).split(".")[0] in ("threadIdx", "blockIdx", "blockDim", "gridDim") else None
        if n.type in ("number_literal", "true", "false"):
            return txt(n)
        out = []
        for c in n.children:
            if c.type == "comment":
                continue
            if c.is_named:
                t = self.text(c)
                if t is None:
                    return None
                out.append(t)
            else:
                out.append(txt(c))
        return " ".join(out)

    def coef(self, n: Node) -> str | None:
        """d's coefficient (text, "0" for none); None: not affine in d."""
        n = unparenthesized(n)
        if n.type == "identifier":
            name = txt(n)
            if name == self.var:
                return "1"
            return self.coef(self.env[name]) if name in self.env else "0"
        if n.type in ("number_literal", "field_expression"):
            return "0"
        if n.type == "unary_expression" and txt(n.child(0)) in ("-", "+"):
            c = self.coef(n.child_by_field_name("argument"))
            return None if c is None else c if c == "0" or txt(n.child(0)) == "+" else f"-({c})"
        if n.type == "binary_expression":
            op = txt(n.child_by_field_name("operator"))
            lc, rc = self.coef(n.child_by_field_name("left")), self.coef(n.child_by_field_name("right"))
            if lc is None or rc is None:
                return None
            if op in ("+", "-"):
                if rc == "0":
                    return lc
                return (f"-({rc})" if op == "-" else rc) if lc == "0" else f"({lc}) {op} ({rc})"
            if op == "*":
                if lc != "0" and rc != "0":
                    return None
                if lc == rc == "0":
                    return "0"
                c, other = (lc, n.child_by_field_name("right")) if lc != "0" else (rc, n.child_by_field_name("left"))
                t = self.text(other)
                return None if t is None else f"({c}) * ({t})"
            return "0" if lc == rc == "0" else None
        t = self.text(n)
        return None if t is None or "{D}" in t else "0"


def _stride_loop(f: Node) -> tuple[str, str, Node] | None:
    """(type, variable, bound) of `for (int d = threadIdx.x; d < n; d += blockDim.x)`."""
    init, cond, upd = f.child_by_field_name("initializer"), f.child_by_field_name("condition"), f.child_by_field_name("update")
    if init is None or cond is None or upd is None or init.type != "declaration":
        return None
    ds = init.children_by_field_name("declarator")
    if len(ds) != 1 or ds[0].type != "init_declarator":
        return None
    var, ptr = declared_name(ds[0])
    typ = txt(init.child_by_field_name("type"))
    if not var or ptr or typ not in ("int", "int32_t") or squashed(ds[0].child_by_field_name("value")) != "threadIdx.x":
        return None
    cond = unparenthesized(cond)
    if cond.type != "binary_expression" or txt(cond.child_by_field_name("operator")) != "<" \
            or squashed(cond.child_by_field_name("left")) != var:
        return None
    if squashed(upd) not in (f"{var}+=blockDim.x", f"{var}={var}+blockDim.x"):
        return None
    return typ, var, cond.child_by_field_name("right")


def _statements(block: Node) -> list[Node]:
    """The block's statements; a `#pragma` (the inner loop's `unroll`) is no statement of its own."""
    return [c for c in block.named_children if c.type not in ("comment", "preproc_call")]


def _when(n: Node, stop: Node, aff: _Affine) -> str | None | bool:
    """The condition under which `n` is evaluated inside `stop` (None: always; False: not pure,
    or under a construct other than `?:`)."""
    conds = []
    child, p = n, n.parent
    while p is not None and p != stop:
        if p.type == "conditional_expression":
            c = p.child_by_field_name("condition")
            if child != c:
                t = aff.text(c)
                if t is None:
                    return False
                conds.append(f"({t})" if child == p.child_by_field_name("consequence") else f"!({t})")
        elif p.type in ("if_statement", "while_statement", "for_statement", "do_statement", "switch_statement") \
                or (p.type == "binary_expression" and txt(p.child_by_field_name("operator")) in ("&&", "||")
                    and child == p.child_by_field_name("right")):
            return False
        child, p = p, p.parent
    return " && ".join(conds) if conds else None


class LaneGroups(base.Transform):
    name = "lane_groups"
    title = "V consecutive elements a thread with one wide load of each run (rotate-half rotary embeddings)"
    note = "each thread takes V consecutive d, reading the element run and its partner run with one wide load each"
    expected = ("a loop loading one 2- or 4-byte element and its partner a step issues one narrow load each; "
                "V consecutive elements a thread read each run as one 8- or 16-byte load")

    def rewrite(self, text: str, ctx: Context, sc: base.Scope, params: dict) -> Rewrite | None:
        lanes = int(params.get("lanes", 4))
        if lanes not in (2, 4, 8):
            return None
        edits: list[Edit] = []
        changes: list[str] = []
        firsts: list[Node] = []
        for fn in sc.functions:
            if "lane_run<" in txt(fn):
                continue        # rewritten already: its fallback keeps the loop as written
            for f in walk(base.body(fn)):
                if f.type != "for_statement":
                    continue
                got = self._one(text, fn, f, lanes)
                if got is not None:
                    edits.append(got[0])
                    changes.append(got[1])
                    firsts.append(fn.parent if fn.parent is not None and fn.parent.type == "template_declaration" else fn)
                    break       # one loop a function
        if not edits:
            return None
        if "struct alignas(sizeof(T) * N) astra_lane_run" not in text:
            top = min(firsts, key=lambda n: n.start_byte)
            edits.append(Edit(top.start_byte, top.start_byte, RUN.format()))
        return Rewrite(self.name, apply_edits(text, edits), tuple(changes), {"lanes": lanes})

    def alternatives(self, rw: Rewrite, ctx: Context) -> list[dict]:
        return [{"lanes": v} for v in (2, 4, 8) if v != rw.params.get("lanes")]

    def _one(self, text: str, fn: Node, f: Node, lanes: int) -> tuple[Edit, str] | None:
        got = _stride_loop(f)
        body = f.child_by_field_name("body")
        if got is None or body is None or body.type != "compound_statement":
            return None
        typ, var, bound = got
        for n in walk(f):
            if n.type in ("break_statement", "continue_statement", "return_statement", "goto_statement") \
                    or n.type == "reference_declarator":
                return None
        if any(w in callee(c) for c in calls(f) for w in COLLECTIVE):
            return None
        changed = assigned_names(body)
        if var in changed or any(n.type == "update_expression" and txt(n.child_by_field_name("argument")) == var
                                 for n in walk(body)):
            return None
        stmts = _statements(body)
        inner = stmts[-1] if stmts and stmts[-1].type == "for_statement" else None
        pre = stmts[:-1] if inner is not None else []
        pre_names: set[str] = set()
        for s in pre:
            if s.type == "declaration":
                for d in s.children_by_field_name("declarator"):
                    name, ptr = declared_name(d)
                    if not name or ptr or d.type not in ("identifier", "init_declarator"):
                        return None
                    pre_names.add(name)
            elif s.type != "expression_statement":
                return None
        for s in pre:                 # per-d work may write only its own locals
            for n in walk(s):
                if n.type in ("assignment_expression", "update_expression"):
                    t = n.child_by_field_name("left") or n.child_by_field_name("argument")
                    if t is None or t.type != "identifier" or txt(t) not in pre_names:
                        return None
                if n.type == "pointer_expression" and txt(n.child(0)) == "&" and \
                        txt(n.child_by_field_name("argument")) not in pre_names:
                    return None
        if inner is not None:
            header = [inner.child_by_field_name(k) for k in ("initializer", "condition", "update")]
            if any(h is not None and ({txt(i) for i in walk(h) if i.type == "identifier"} & (pre_names | {var}))
                   for h in header):
                return None
            block = inner.child_by_field_name("body")
            if block is None or block.type != "compound_statement":
                return None
            # a lane reads its per-d locals afresh each inner trip: the inner loop may not change them
            if pre_names & (assigned_names(inner) | {txt(n.child_by_field_name("argument")) for n in walk(inner)
                                                     if n.type == "pointer_expression" and txt(n.child(0)) == "&"}):
                return None
        else:
            block = body
        bound_names = {txt(i) for i in walk(bound) if i.type == "identifier"}
        if bound_names & (changed | tree.declared_names(f)):
            return None
        taken = {txt(n.child_by_field_name("argument")) for n in walk(f)
                 if n.type == "pointer_expression" and txt(n.child(0)) == "&"}
        # locals read through their initializers: declared once with a value and never changed
        env: dict[str, Node] = {}
        counts: dict[str, int] = {}
        for n in walk(body):
            if n.type == "declaration":
                for d in n.children_by_field_name("declarator"):
                    name, ptr = declared_name(d)
                    if name:
                        counts[name] = counts.get(name, 0) + 1
                        if d.type == "init_declarator" and not ptr:
                            env[name] = d.child_by_field_name("value")
        bad = {n for n in counts if counts[n] > 1 or n not in env or n in changed or n in taken}
        inner_var = None
        if inner is not None:
            init = inner.child_by_field_name("initializer")
            if init is not None and init.type == "declaration":
                inner_var = declared_name(init.children_by_field_name("declarator")[0])[0]
        for name in changed - {var}:
            if name not in counts and name != inner_var:
                bad.add(name)            # a name from outside the loop the loop changes
        env = {k: v for k, v in env.items() if k not in bad}
        if inner_var is not None:      # the inner loop's variable: the same for every lane of a group
            bad.discard(inner_var)
            env.pop(inner_var, None)
        aff = _Affine(var, env, bad)
        params = pointer_params(fn)
        written = written_pointers(fn, set(params))
        loads: list[_Load] = []
        for n in walk(block):
            if n.type != "subscript_expression":
                continue
            p = txt(n.child_by_field_name("argument"))
            idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                idx = idx.named_children[0] if len(idx.named_children) == 1 else None
            if p not in params or idx is None:
                continue
            if tree.is_lvalue(n) or not params[p].const or p in written:
                continue
            when = _when(n, block, aff)
            t = aff.text(idx)
            c = aff.coef(idx)
            if when is False or t is None or c is None or c == "0" or "{D}" in c:
                continue
            loads.append(_Load(n, p, params[p].elem, t, when if isinstance(when, str) else None, c))
        if not loads:
            return None
        # the lanes' stores: each to a parameter through an index affine in d
        stores = []
        for n in walk(block):
            if n.type == "subscript_expression" and tree.is_lvalue(n):
                p = txt(n.child_by_field_name("argument"))
                idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
                if idx is not None and idx.type == "subscript_argument_list":
                    idx = idx.named_children[0] if len(idx.named_children) == 1 else None
                if p not in params or idx is None:
                    return None
                t, c = aff.text(idx), aff.coef(idx)
                if t is None or c is None or "{D}" in c:
                    return None
                stores.append((p, t, c))
            elif n.type == "pointer_expression" and txt(n.child(0)) == "*" and tree.is_lvalue(n):
                return None
        for c in calls(block):   # a call handed a pointer parameter could write through it
            if {txt(i) for i in walk(c) if i.type == "identifier"} & set(params):
                if callee(c) not in ("static_cast",):
                    return None
        for c in {ld.coef for ld in loads} | {s[2] for s in stores}:
            r = tree.root(f"int _ = {c};")
            names = {txt(i) for i in walk(r) if i.type == "identifier"} - {"_"}
            if names & (changed | tree.declared_names(f)):
                return None
        return self._emit(text, f, typ, var, bound, pre, inner, block, loads, stores, lanes), \
            (f"`{var}` loop in `{tree.function_name(fn)}`: {lanes} consecutive `{var}` a thread, "
             f"{len(loads)} run(s) of {', '.join(dict.fromkeys(f'`{ld.ptr}`' for ld in loads))} read with one wide load each")

    def _emit(self, text: str, f: Node, typ: str, var: str, bound: Node, pre: list[Node], inner: Node | None,
              block: Node, loads: list[_Load], stores: list, lanes: int) -> Edit:
        data = text.encode("utf-8")
        ind = line_indent(data, f.start_byte)
        E = f"({txt(bound)})"
        V = lanes
        d0, dg, j = "astra_d0", "astra_dg", "astra_j"
        lane = f"({dg} + {j})"
        # pre: per-d locals computed once a lane into lane arrays
        arrays: list[tuple[str, str, str]] = []   # (qualifiers, type, name)
        for s in pre:
            if s.type == "declaration":
                q = "const " if any(c.type == "type_qualifier" and txt(c) == "const" for c in s.children) else ""
                for d in s.children_by_field_name("declarator"):
                    arrays.append((q, txt(s.child_by_field_name("type")), declared_name(d)[0] or ""))
        lane_vars = "".join(f"{q}{t} {n} = astra_{n}[{j}]; " for q, t, n in arrays)
        chk = " && ".join(f"({ld.coef}) == 1" for ld in dict((ld.coef, ld) for ld in loads).values())
        out = [f"// astra: {V} consecutive `{var}` a thread, so the element run and its partner run are read with "
               f"one wide load each,\n{ind}// where `{var}` steps by one element; the loop as written elsewhere\n"
               f"{ind}if ({chk}) {{\n"]
        out.append(f"{ind}  for (long long {d0} = (long long)threadIdx.x * {V}; {d0} < {E}; {d0} += (long long)blockDim.x * {V}) {{\n")
        out.append(f"{ind}    const {typ} {dg} = ({typ}){d0};\n")
        if arrays:
            out.append("".join(f"{ind}    {t} astra_{n}[{V}];\n" for _, t, n in arrays))
            out.append(f"{ind}#pragma unroll\n{ind}    for (int {j} = 0; {j} < {V}; ++{j}) {{\n")
            out.append(f"{ind}      if ({j} < {E} - {d0}) {{\n{ind}        const {typ} {var} = {lane};\n")
            for s in pre:
                out.append(f"{ind}        {txt(s)}\n")
            out.append("".join(f"{ind}        astra_{n}[{j}] = {n};\n" for _, _, n in arrays))
            out.append(f"{ind}      }}\n{ind}    }}\n")
        # the group: where each run starts, its checks, the runs, the lanes
        gi = ind + ("      " if inner is not None else "    ")
        group = []
        conds = [f"{V} <= {E} - {d0}"]
        for k, ld in enumerate(loads):
            run_t = f"astra_lane_run<{ld.elem}, {V}>"
            group.append(f"{gi}const {ld.elem}* astra_at{k} = {ld.ptr} + ({ld.index.format(D=dg)});\n")
            addr = f"reinterpret_cast<size_t>(astra_at{k}) % sizeof({run_t}) == 0"
            if ld.when is None:
                conds.append(addr)
            else:
                group.append(f"{gi}const bool astra_when{k} = {ld.when.format(D=dg)};\n")
                same = " && ".join(f"({ld.when.format(D=f'{dg} + {i}')}) == astra_when{k}" for i in range(1, V))
                conds.append(f"{same} &&\n{gi}    (!astra_when{k} || {addr})")
        # a lane's store must not reach a run the group read before it (the runs are read first):
        # the bytes between the group's first and last store apart from every run
        for m, (p, st, sc) in enumerate(stores):
            group.append(f"{gi}const long long astra_to{m} = (long long)({st.format(D=dg)}), "
                         f"astra_span{m} = {V - 1}LL * ({sc});\n"
                         f"{gi}const long long astra_lo{m} = (long long)reinterpret_cast<size_t>({p}) + "
                         f"(astra_to{m} + (astra_span{m} < 0 ? astra_span{m} : 0)) * (long long)sizeof(*{p});\n"
                         f"{gi}const long long astra_hi{m} = (long long)reinterpret_cast<size_t>({p}) + "
                         f"(astra_to{m} + (astra_span{m} < 0 ? 0 : astra_span{m}) + 1) * (long long)sizeof(*{p});\n")
            for k, ld in enumerate(loads):
                at = f"(long long)reinterpret_cast<size_t>(astra_at{k})"
                conds.append(f"(astra_hi{m} <= {at} || {at} + {V} * (long long)sizeof(*{ld.ptr}) <= astra_lo{m})")
        edits = []
        for k, ld in enumerate(loads):
            edits.append(Edit(ld.node.start_byte - block.start_byte, ld.node.end_byte - block.start_byte,
                              f"astra_run{k}.v[{j}]"))
        btext = txt(block)
        fast = apply_edits(btext, edits)
        group.append(f"{gi}if ({(' &&' + chr(10) + gi + '    ').join(conds)}) {{\n")
        for k, ld in enumerate(loads):
            run_t = f"astra_lane_run<{ld.elem}, {V}>"
            at = f"*reinterpret_cast<const {run_t}*>(astra_at{k})"
            if ld.when is None:
                group.append(f"{gi}  const {run_t} astra_run{k} = {at};\n")
            else:
                group.append(f"{gi}  {run_t} astra_run{k};\n{gi}  if (astra_when{k}) astra_run{k} = {at};\n")
        group.append(f"{gi}#pragma unroll\n{gi}  for (int {j} = 0; {j} < {V}; ++{j}) {{\n"
                     f"{gi}    const {typ} {var} = {lane}; {lane_vars}\n{gi}    {fast}\n{gi}  }}\n")
        group.append(f"{gi}}} else {{\n{gi}#pragma unroll\n{gi}  for (int {j} = 0; {j} < {V}; ++{j}) {{\n"
                     f"{gi}    if ({j} < {E} - {d0}) {{\n{gi}      const {typ} {var} = {lane}; {lane_vars}\n"
                     f"{gi}      {btext}\n{gi}    }}\n{gi}  }}\n{gi}}}\n")
        if inner is not None:
            ib = inner.child_by_field_name("body")
            head = data[inner.start_byte:ib.start_byte].decode("utf-8")
            out.append(f"{ind}    {head}{{\n{''.join(group)}{ind}    }}\n")
        else:
            out.append("".join(group))
        # a `#pragma unroll` above the loop stays with the loop as written (it must precede a loop)
        start = f.start_byte
        prev = f.prev_named_sibling
        if prev is not None and prev.type == "preproc_call" and "pragma" in txt(prev):
            start = prev.start_byte
        out.append(f"{ind}  }}\n{ind}}} else {{\n{ind}{data[start:f.end_byte].decode('utf-8')}\n{ind}}}")
        return Edit(start, f.end_byte, ("" if start == f.start_byte else ind) + "".join(out))

