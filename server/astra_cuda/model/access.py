"""What a kernel reads and writes through its pointer parameters, and how far — read off its
tree-sitter body by interval arithmetic, for spec inference.

For one assignment of the sizes and one launch (grid, block), every integer variable is an
interval: `threadIdx.x` is [0, block.x - 1], a loop variable runs from its start to its bound, an
`if (i < n)` or an early `if (i >= n) return;` narrows `i`. Each access `p[e]`, `*(p + e)`,
`load128(p + e)` or through an alias (`const float* x = inp + row * C; x[i]`, a
`reinterpret_cast<const uint4*>`) records how far into `p` it reaches. Values loaded from an
integer parameter (token ids) are taken to lie below a table size the caller names (`V`), so a
gather's table gets V rows. Infer evaluates this at a few size assignments and fits each
extent to a product of sizes. Anything it cannot follow is simply unknown (None): inference
then says what to fill in.

Long because the interval arithmetic over a kernel's body is one walker with its rules.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from tree_sitter import Node

from . import dtypes, exprs, source
from . import loop_steps, syntax

VECTOR_BYTES = {"int4": 16, "uint4": 16, "float4": 16, "double2": 16, "longlong2": 16, "ulonglong2": 16,
                "int2": 8, "uint2": 8, "float2": 8, "half2": 4, "__half2": 4, "__nv_bfloat162": 4,
                "nv_bfloat162": 4, "int": 4, "float": 4, "uint32_t": 4, "int32_t": 4, "unsigned": 4,
                "double": 8, "int64_t": 8, "uint64_t": 8, "short": 2, "char": 1, "int8_t": 1, "uint8_t": 1,
                "half": 2, "__half": 2, "__nv_bfloat16": 2, "nv_bfloat16": 2, "uint16_t": 2, "int16_t": 2}


@dataclass(frozen=True)
class Iv:
    """An integer interval; None bounds are unknown."""
    lo: int | None
    hi: int | None

    @staticmethod
    def point(v: int) -> "Iv":
        return Iv(v, v)

    def join(self, o: "Iv") -> "Iv":
        return Iv(None if self.lo is None or o.lo is None else min(self.lo, o.lo),
                  None if self.hi is None or o.hi is None else max(self.hi, o.hi))


UNKNOWN = Iv(None, None)
# thread and block indices a condition can narrow (kept in the environment under these names)
_BUILTINS = frozenset(f"{a}.{f}" for a in ("threadIdx", "blockIdx") for f in "xyz")
# methods of a vector object that move one vector through the pointer they are given (FlashInfer's vec_t)
_VECTOR_METHODS = frozenset({"load", "store", "cast_load", "cast_store", "load_global", "store_global"})
# `#if`/`#ifdef` blocks inside a body, and their `#elif`/`#else`: walked as branches
_PREPROC_BRANCHES = frozenset({"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef", "preproc_else"})
UNSET = "unset"      # a local declared without a value: its first assignment gives it one
MAX_HELPER_DEPTH = 3   # device functions followed into, nested
_EMPTY = -(1 << 62)   # the last element a block load/store of no elements reaches: below any other
# the element types of a byte (a quantized code: below 256)
_BYTE_TYPE = re.compile(r"(const\s+)?(unsigned\s+char|uint8_t|u_char|uchar)")
# calls that read or write exactly where their pointer argument points (width aside)
_ACCESSORS = ("load", "store", "__ld", "__st", "atomic", "ld", "st", "Load", "Store", "read", "write", "fetch",
              "cp_async", "memcpy")


@dataclass(frozen=True)
class Ptr:
    """A pointer into parameter `base`: `offset` in base elements, `scale` base elements per
    element of this pointer (a uint4* over halves: 8), `width` elements one access touches."""
    base: str
    offset: Iv
    scale: int = 1


@dataclass(frozen=True, eq=False)
class View:
    """A local object of a class of the project built over the kernel's pointers (`MatrixView_half_rw
    dest_(dest, height, width)`): its class and the values its constructor gave its fields."""
    cls: Node
    fields: tuple[tuple[str, "Iv | Ptr"], ...]


@dataclass(frozen=True)
class Table:
    """A local array of pointers into parameters (`T* qkv_ptr[3] = {q_buf, k_buf, v_buf}`);
    `element`: one entry of it (`qkv_ptr[j]`), which may be any of them."""
    entries: tuple[Ptr, ...]
    element: bool = False


@dataclass
class Use:
    read: bool = False
    written: bool = False
    hi: int | None = None          # largest element index reached (inclusive), None: unknown
    unknown: bool = False          # some access could not be bounded
    table_loads: bool = False      # integer values were loaded from it (an index array)
    boundaries: bool = False       # read at `i` and `i + 1`: segment boundaries (a CSR `indptr`)
    packet: int = 1                # most elements one access touches (a uint4 over floats: 4)
    casts: set[str] = field(default_factory=set)   # scalar types it is cast to (`(float*)x` of a void* buffer)

    def reach(self, hi: int | None) -> None:
        if hi is None:
            self.unknown = True
        elif self.hi is None or hi > self.hi:
            self.hi = hi


@dataclass
class Facts:
    uses: dict[str, Use] = field(default_factory=dict)


def _mul(a: Iv, b: Iv) -> Iv:
    if None in (a.lo, a.hi, b.lo, b.hi):
        if a.lo is not None and b.lo is not None and a.lo >= 0 and b.lo >= 0:
            return Iv(a.lo * b.lo, None if a.hi is None or b.hi is None else a.hi * b.hi)
        return UNKNOWN
    c = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return Iv(min(c), max(c))


# a bound a condition puts on a compound expression (`(i * num_threads + tid) * VEC < d`), kept in
# the environment under this prefix and its polynomial, so it scopes and merges like a variable's
_GUARD = "#guard:"
MAX_GUARD_TERMS = 8   # terms of a sum searched for a guarded part (2**8 subsets at most)
# an expression a condition keeps below a segment's length (`i < indptr[b + 1] - indptr[b]`), kept
# under this prefix and its polynomial, its value the segment's start as written (`indptr[b]`)
_SEGMENT = "#segment:"

Poly = dict[tuple[str, ...], int]   # monomial (its names, sorted) -> coefficient; () is the constant


def _poly_add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
    return {m: c for m, c in out.items() if c}


def _poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def _guard_key(p: Poly) -> str:
    return _GUARD + repr(sorted(p.items()))


class Analyzer:
    """One evaluation of one kernel body at one point (sizes, grid, block)."""

    def __init__(self, kernel: source.Kernel, sizes: dict[str, int], grid: tuple[int, int, int],
                 block: tuple[int, int, int], elem_bytes: dict[str, int], int_params: set[str],
                 table_size: int, constants: dict[str, int], lanes: dict[str, int] | None = None,
                 helpers: dict[str, Node] | None = None, type_bytes: Callable[[str], int | None] | None = None,
                 shared_rows: bool = False):
        self.kernel = kernel
        # index arrays whose values are summed into one row (`seq.start_idx + seq.n_tokens - 1`): each
        # drawn in [1, table / 2]: two of them and the `- 1` reach the last row, never past it
        self.shared_rows = shared_rows
        self.type_bytes = type_bytes          # sizeof a type the table above does not know (`vec_n_t<T, 4>`)
        self.aliases: dict[str, str] = {}     # the body's own `using` and `typedef` names
        self.helpers = helpers or {}          # device function name -> its definition (followed into)
        self.const = {p.name: p.is_const for p in kernel.params if p.is_pointer}
        self.sizes = {p.name for p in kernel.params if not p.is_pointer}   # the kernel's scalar parameters
        self.depth = 0
        self.view: View | None = None   # the object whose method is being walked
        # locals with the expression that set them: a condition that narrows `i` narrows
        # `offset = base + i * stride` too (`(i + half < n) ? x[offset + half] : ...`)
        self.defs: dict[str, tuple[Node, frozenset[str]]] = {}
        self.narrowing = False
        self.objects: set[str] = set()         # locals of a class type or lambdas: called, they are functors
        # local arrays of unsigned bytes (`unsigned char qvals[8]`): an element read from one is a code
        # below 256, so the table it indexes (`code[qvals[j]]`) has 256 entries
        self.byte_arrays: set[str] = set()
        # every value a local was given so far (its declaration's, each `=`): the most any of them is
        # bounds it wherever it is read (a count set in an `if`/`else`, `valid = min(TILE, n - i)`)
        self.assigned: dict[str, list[Node]] = {}
        self.object_types: dict[str, str] = {}  # a functor local's type as written (its class's operator() read)
        # a local object (or array of them) of a class of the project, plain data with methods that take
        # the kernel's pointers (`Vec<float, 4> v[2]; v[it].store_to(out, i)`): its class
        self.class_objects: dict[str, Node] = {}
        self.defaults: set[str] = set()        # a helper's parameters the call left at their default value
        self.obj_bytes: dict[str, int] = {}    # a local vector object (`vec_t<float, 4> v`) -> its bytes
        self.returns: list | None = None       # the values a followed function returns (None: in the kernel)
        self.grid, self.block = grid, block
        self.elem_bytes = elem_bytes          # pointer parameter -> bytes per element
        self.int_params = int_params          # integer pointer parameters (their loads are table indices)
        self.table_size = table_size
        # 'x128::size' -> 8; also a const local flag a null pointer decides (`use_len = len != nullptr`)
        self.constants = dict(constants)
        self.facts = Facts({p.name: Use() for p in kernel.params if p.is_pointer})
        self.env: dict[str, Iv | Ptr | str] = {}
        # `aEnd = aBegin + wA - 1`: aEnd is aBegin plus an offset (kept apart so a loop from aBegin
        # to aEnd counts its trips although both vary with the block)
        self.offsets: dict[str, tuple[str, Iv]] = {}
        # pointers a loop steps once per trip -> (its variable, the variable's first value, the
        # pointer at the loop's start, base elements per trip, the variable's step)
        self.stepped: dict[str, tuple[str, int, Ptr, int, int]] = {}
        # `end = min(start + 128, n)`: end is at most start plus an offset (a loop's bound, see `offsets`)
        self.upper: dict[str, tuple[str, Iv]] = {}
        # pointers a loop moves by a fixed amount each trip (`_per_trip`): set at the trip's start,
        # so each `p += e` in the body moves them by exactly e
        self.trip_ptrs: set[str] = set()
        self.loops = 0    # loops the walk is inside (their bodies are walked once)
        self.declared_at: dict[str, int] = {}   # local -> the loops it is declared inside
        self.boundaries: set[str] = set()   # integer pointers holding segment boundaries (`boundary_arrays`)
        # pointer parameters -> what they were moved by, as a polynomial (`src += first * n + tid`),
        # while every move is one of exactly that: a guard on a local (`tid + it * 32 < n`) narrows
        # the part of an address made of its terms, wherever each term was added
        self.moved: dict[str, Poly] = {p.name: {} for p in kernel.params if p.is_pointer}
        for p in kernel.params:
            if p.is_pointer:   # a `half2*` over a half buffer steps two elements at a time
                self.env[p.name] = Ptr(p.name, Iv.point(0), (lanes or {}).get(p.name, 1))
            elif p.name in sizes:
                self.env[p.name] = Iv.point(int(sizes[p.name]))
            else:
                self.env[p.name] = UNKNOWN

    def _template_bindings(self, called: Node | None, fn: Node, vals: list) -> dict[str, int]:
        """The constants a call gives a function template's parameters: a number it spells
        (`copy<VEC_SIZE>(in, out, n)`: VEC_SIZE as known here) and `sizeof(T)` of a type it deduces
        from a pointer argument (`const InT* in` given a float buffer: 4) — so `WIDTH = VEC_SIZE *
        sizeof(InT)` and the masks made of it are numbers inside the helper."""
        decl = fn.parent if fn.parent is not None and fn.parent.type == "template_declaration" else None
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        if plist is None:
            return {}
        tparams = [(p.type, syntax.declarator_name(p.child_by_field_name("declarator"))[0]
                    if p.child_by_field_name("declarator") is not None else
                    next((c.text.decode() for c in p.named_children if c.type == "type_identifier"), None))
                   for p in plist.named_children if p.type != "comment"]
        out: dict[str, int] = {}
        spelled = called.child_by_field_name("arguments") if called is not None and called.type == "template_function" \
            else None
        for (kind, name), arg in zip(tparams, [a for a in spelled.named_children if a.type != "comment"]
                                     if spelled is not None else []):
            if name and kind in ("parameter_declaration", "optional_parameter_declaration"):
                node = source.parse_expression(arg.text.decode())
                v = self.expr(node, evaluate_only=True) if node is not None else None
                if isinstance(v, Iv) and v.lo is not None and v.lo == v.hi:
                    out[name] = v.lo
        types = {n for k, n in tparams if n and k in ("type_parameter_declaration", "optional_type_parameter_declaration")}
        fdecl = syntax.function_declarator(fn.child_by_field_name("declarator"))
        plist = fdecl.child_by_field_name("parameters") if fdecl is not None else None
        for p, v in zip([p for p in (plist.named_children if plist is not None else [])
                         if p.type in ("parameter_declaration", "optional_parameter_declaration")], vals):
            t, d = p.child_by_field_name("type"), p.child_by_field_name("declarator")
            if t is None or d is None or d.type != "pointer_declarator" or t.text.decode() not in types \
                    or not isinstance(v, Ptr) or v.base not in self.elem_bytes:
                continue
            out[f"sizeof({t.text.decode()})"] = self.elem_bytes[v.base] * v.scale
        return out

    def _passed_objects(self, names: list[str | None], arg_nodes: list[Node]) -> dict[str, str]:
        """A helper's parameters given a functor local of the caller (`k_op`, also through
        `std::forward<Op>(op)`) -> that functor's type: called in the helper (`scalar_op(out[i], in[i])`,
        vLLM's vectorize_with_alignment), it is the same functor, whose operator() says what it reads."""
        out: dict[str, str] = {}
        for n, a in zip(names, arg_nodes):
            while a is not None and a.type == "call_expression" and a.child_by_field_name("function") is not None \
                    and a.child_by_field_name("function").text.decode().split("<")[0].split("::")[-1] in ("forward", "move") \
                    and a.child_by_field_name("arguments") is not None and a.child_by_field_name("arguments").named_child_count == 1:
                a = a.child_by_field_name("arguments").named_children[0]
            if n and a is not None and a.type == "identifier" and a.text.decode() in self.objects \
                    and a.text.decode() in self.object_types:
                out[n] = self.object_types[a.text.decode()]
        return out

    def inline(self, fn: Node, vals: list, fields: dict[str, Iv | Ptr] | None = None,
               bound: dict[str, int] | None = None, arg_nodes: list[Node] | None = None) -> Iv | Ptr | None:
        """A device function of the file called with pointers into the parameters (`apply_rotary(query,
        ...)`): its body walked with its parameters bound to the call's values, so what it reads and
        writes counts for the kernel's own parameters. `fields`: a view object's fields, in scope
        in its methods. Returns what it returns where that is one pointer or interval."""
        decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        params = [p for p in (plist.named_children if plist is not None else [])
                  if p.type in ("parameter_declaration", "optional_parameter_declaration")]
        names = [syntax.declarator_name(p.child_by_field_name("declarator"))[0] for p in params]
        body = fn.child_by_field_name("body")
        if body is None:
            return
        saved, saved_defs, saved_defaults, saved_returns = self.env, self.defs, self.defaults, self.returns
        saved_moved, self.moved = self.moved, {}
        saved_declared, self.declared_at = self.declared_at, dict(self.declared_at)
        saved_constants, self.constants = self.constants, {**self.constants, **(bound or {})}
        passed = self._passed_objects(names, arg_nodes or [])
        saved_objects, saved_types = self.objects, self.object_types
        self.objects, self.object_types = self.objects | set(passed), {**self.object_types, **passed}
        self.env = {**(fields or {}),
                    **{n: (v if isinstance(v, (Iv, Ptr, View)) else UNKNOWN) for n, v in zip(names, vals) if n}}
        # its parameters are locals made at the call, inside the loops the call is: an update of one
        # outside the helper's own loops (vLLM's `len -= prefix_elems`) happens once per call, exactly
        self.declared_at.update({n: self.loops for n in names if n})
        self.returns = []
        # a parameter the call leaves out takes its default (`int32_t const group_size = 0`): a
        # branch that default rules out (`if (group_size > 0)`) is not this call's
        self.defaults = set()
        for p, n in list(zip(params, names))[len(vals):]:
            default = p.child_by_field_name("default_value")
            v = self.expr(default, evaluate_only=True) if default is not None else None
            if n and isinstance(v, Iv) and v.lo is not None and v.lo == v.hi:
                self.env[n] = v
                self.defaults.add(n)
        self.defs = {}
        self.depth += 1
        try:
            self.block_stmt(body)
            returned = _joined(self.returns)
        finally:
            self.depth -= 1
            self.env, self.defs, self.defaults, self.returns = saved, saved_defs, saved_defaults, saved_returns
            self.moved, self.declared_at, self.constants = saved_moved, saved_declared, saved_constants
            self.objects, self.object_types = saved_objects, saved_types
        return returned

    # ---- statements ------------------------------------------------------------------------
    def run(self, body: Node) -> Facts:
        self.boundaries = boundary_arrays(body, self.int_params)
        for name in self.boundaries:
            self.facts.uses[name].boundaries = True
        self.block_stmt(body)
        return self.facts

    def block_stmt(self, node: Node) -> bool:
        """Walk statements in order; True when the path certainly returned."""
        kids = [c for c in node.named_children if c.type != "comment"] if node.type == "compound_statement" else [node]
        for st in kids:
            if self.stmt(st):
                return True
        return False

    def stmt(self, st: Node) -> bool:
        t = st.type
        if t == "compound_statement":
            saved = dict(self.env)
            done = self.block_stmt(st)
            self.env = {k: v for k, v in self.env.items() if k in saved} | {
                k: v for k, v in saved.items() if k not in self.env}
            return done
        if t == "declaration":
            self.declaration(st)
        elif t in ("alias_declaration", "type_definition"):   # `using pack_128b_t = uint4;` in the body
            tn = st.child_by_field_name("type")
            names = [st.child_by_field_name("name")] if t == "alias_declaration" else \
                st.children_by_field_name("declarator")
            for n in names:
                if n is not None and tn is not None:
                    self.aliases[n.text.decode()] = tn.text.decode()
        elif t == "expression_statement":
            for c in st.named_children:
                self.expr(c)
        elif t == "return_statement":
            vals = [self.expr(c) for c in st.named_children if c.type != "comment"]
            if self.returns is not None:
                self.returns.append(vals[-1] if vals else None)
            return True
        elif t in ("break_statement", "continue_statement"):
            return True   # this iteration ends here: `if (column >= n) break;` narrows what follows, as a return does
        elif t == "if_statement":
            return self.if_stmt(st)
        elif t == "for_statement":
            self.for_stmt(st)
        elif t in ("while_statement", "do_statement"):
            cond = st.child_by_field_name("condition")
            trips = self._while_trips(st) if t == "while_statement" else None
            mine = self._per_trip(st, trips) if trips is not None else {}
            counted = loop_steps.while_counter(st)
            rel = self.offsets.get(counted[0]) if counted is not None else None
            saved = dict(self.env)
            for n in syntax.walk(st.child_by_field_name("body")):   # `i += stride` in the body: i runs up to the bound
                if n.type == "update_expression" or (n.type == "assignment_expression" and
                                                      n.child_by_field_name("operator").type == "+="):
                    target = n.child_by_field_name("argument") or n.child_by_field_name("left")
                    cur = self.env.get(target.text.decode()) if target is not None else None
                    if isinstance(cur, Iv):
                        self.env[target.text.decode()] = Iv(cur.lo, None)
            if cond is not None:
                self.expr(cond)
                self.refine(cond, True)
            body = st.child_by_field_name("body")
            if body is not None:
                self.loops += 1
                try:
                    self.stmt(body)
                finally:
                    self.loops -= 1
            self.env = self.merge(saved, self.env)
            self._after_trips(mine, trips)
            self._counted_past(st, trips, rel)
        elif t == "switch_statement":
            self.switch_stmt(st)
        elif t in ("attributed_statement", "labeled_statement"):
            for c in st.named_children:
                self.stmt(c)
        elif t in _PREPROC_BRANCHES:
            return self.preproc_branch(st)
        else:
            for c in st.named_children:
                if c.type.endswith("expression"):
                    self.expr(c)
        return False

    def switch_stmt(self, st: Node) -> None:
        """`switch (DATA_TYPE) { case General8bit: ... break; case FP4: ... }`: the case the value
        picks where it is known (a template argument, an enumerator), from there to its `break`;
        otherwise each case from its label to its `break` as a branch, what any of them does counting."""
        cond = st.child_by_field_name("condition")
        inner = cond.named_children[0] if cond is not None and cond.type == "condition_clause" \
            and cond.named_children else cond
        value = self.expr(inner)
        body = st.child_by_field_name("body")
        # the statements in order, each case's label a mark: a `#pragma` after a label ends the
        # grammar's case_statement, the statements after it then being the body's own children
        flat: list[Node | int] = []
        cases: list[Node] = []
        for c in body.named_children if body is not None else []:
            if c.type == "case_statement":
                flat.append(len(cases))
                cases.append(c)
                flat.extend(x for x in c.named_children if x != c.child_by_field_name("value"))
            else:
                flat.append(c)
        if not cases:
            return

        def statements(i: int) -> list[Node]:   # from case i's label on, falling through to its break
            out: list[Node] = []
            for x in flat[flat.index(i) + 1:]:
                if isinstance(x, int) or x.type in ("comment", "preproc_call"):
                    continue
                out.append(x)
                if x.type in ("break_statement", "return_statement"):
                    break
            return out

        def walk(i: int) -> None:
            for x in statements(i):
                if self.stmt(x):
                    return
        picked: int | None = None
        # a kernel argument's value is the probe's, not the program's: every case is walked for it
        by_argument = inner is not None and any(x.type == "identifier" and x.text.decode() in self.sizes
                                                for x in syntax.walk(inner))
        if isinstance(value, Iv) and value.lo is not None and value.lo == value.hi and not by_argument:
            for i, c in enumerate(cases):
                label = self.expr(c.child_by_field_name("value"), evaluate_only=True) \
                    if c.child_by_field_name("value") is not None else None
                if isinstance(label, Iv) and label.lo == label.hi == value.lo:
                    picked = i
            if picked is None:
                picked = next((i for i, c in enumerate(cases) if c.child_by_field_name("value") is None), None)
                if picked is None:
                    return   # no case taken
        if picked is not None:
            walk(picked)
            return
        before, merged = dict(self.env), None
        for i in range(len(cases)):
            self.env = dict(before)
            walk(i)
            merged = self.env if merged is None else self.merge(merged, self.env)
        self.env = self.merge(before, merged) if merged is not None else before

    def preproc_branch(self, st: Node) -> bool:
        """`#if PTX_AVAILABLE asm(...) #else data[0] = src[0]; #endif` (DeepSpeed's load_global):
        which branch the build takes is not known here, so each is walked like an `if`'s and what
        either reaches counts."""
        alt = st.child_by_field_name("alternative")
        skip = {c.id for c in (st.child_by_field_name("name"), st.child_by_field_name("condition"), alt)
                if c is not None}
        before = dict(self.env)
        done = False
        for c in st.named_children:
            if c.id not in skip and c.type != "comment" and self.stmt(c):
                done = True
                break
        if alt is None:
            self.env = before if done else self.merge(before, self.env)
            return False
        after_this = self.env
        self.env = dict(before)
        alt_done = self.preproc_branch(alt) if alt.type in _PREPROC_BRANCHES else False
        if done and alt_done:
            return True
        self.env = self.env if done else (after_this if alt_done else self.merge(after_this, self.env))
        return False

    def merge(self, a: dict, b: dict) -> dict:
        out = {}
        for k in a.keys() | b.keys():
            x, y = a.get(k), b.get(k)
            if (k in _BUILTINS or k.startswith((_GUARD, _SEGMENT))) and (x is None or y is None):
                continue   # narrowed on one branch only: the launch's own range again
            if isinstance(x, Iv) and isinstance(y, Iv):
                out[k] = x.join(y)
            elif x is not None and (x == y or y is None):
                out[k] = x
            elif y is not None and x is None:
                out[k] = y
            else:
                out[k] = UNKNOWN
        return out

    def if_stmt(self, st: Node) -> bool:
        cond = st.child_by_field_name("condition")
        cons = st.child_by_field_name("consequence")
        alt = st.child_by_field_name("alternative")
        decided = constexpr_branch(st, self.constants)
        if decided is None and cond is not None:   # `if (store_res && i < n)` with store_res false
            decided = truth_of(cond, self.constants, self.sizes)
        if decided is None and cond is not None:   # `if (past_len == -1)`: a sentinel no size takes
            decided = self.sentinel(cond)
        if decided is not None:   # `if constexpr (use_vec)`: only the branch the instance compiles
            taken = cons if decided else (
                next((c for c in alt.named_children), None) if alt is not None and alt.type == "else_clause" else alt)
            return self.stmt(taken) if taken is not None else False
        if cond is not None:
            self.expr(cond)
        names = {n.text.decode() for n in syntax.walk(cond) if n.type == "identifier"} if cond is not None else set()
        if names and names <= self.defaults:   # decided by defaults alone: only the branch they take
            before = dict(self.env)
            holds = self.refine_feasible(cond, True)
            self.env = before
            if not holds:
                inner = next((c for c in alt.named_children), None) if alt is not None and alt.type == "else_clause" \
                    else alt
                return self.stmt(inner) if inner is not None else False
        before = dict(self.env)
        # both branches are walked even where a condition cannot hold at the probe sizes: those
        # may miss what the launcher keeps (`head_size / x` whole), and the branch is then the kernel
        if cond is not None:
            self.refine(cond, True)
        then_ret = self.stmt(cons) if cons is not None else False
        after_then = self.env
        self.env = dict(before)
        if cond is not None:
            self.refine(cond, False)
        else_ret = False
        if alt is not None:
            inner = next((c for c in alt.named_children), None) if alt.type == "else_clause" else alt
            else_ret = self.stmt(inner) if inner is not None else False
        after_else = self.env
        if then_ret and else_ret:
            return True
        self.env = after_else if then_ret else (after_then if else_ret else self.merge(after_then, after_else))
        return False

    def sentinel(self, cond: Node) -> bool | None:
        """`n == -1` (`!=`) of a value that is never negative here (a size): false (true). A kernel
        marks a size it reads elsewhere with -1 (exllamav2's rope: `past_len == -1` takes it from
        `past_lens`), which no size of a spec is."""
        cond = _unparen(cond)
        op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
        if op is None or op.type not in ("==", "!="):
            return None
        sides = [_unparen(cond.child_by_field_name(f)) for f in ("left", "right")]
        names = [x for x in sides if x is not None and x.type == "identifier"]
        numbers = [x for x in sides if x is not None and x.type in ("unary_expression", "number_literal")]
        if len(names) != 1 or len(numbers) != 1 or not re.fullmatch(r"-\s*\d+", numbers[0].text.decode()):
            return None
        value = self.env.get(names[0].text.decode())
        if not isinstance(value, Iv) or value.lo is None or value.lo < 0:
            return None
        return op.type == "!="

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
            # followed where an enclosing loop's trip starts it afresh and this loop's trips are fixed
            moved = Iv.point(fixed.lo * step) if fixed is not None and fixed.lo is not None and \
                name in self.trip_ptrs else UNKNOWN
            self.env[name] = Ptr(start.base, _add(start.offset, moved), start.scale)
        self.env = self.merge(saved, {k: v for k, v in self.env.items() if k in saved})
        self._after_trips(mine, trips if not dead else Iv.point(0))

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
            if enclosing == loop and target is not None and target.type == "identifier" \
                    and isinstance(self.env.get(target.text.decode()), Ptr):
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
            self.stepped[p] = (name, iv.lo, start, step.lo * start.scale, by)
            out.append(p)
        return out

    def declaration(self, st: Node) -> None:
        type_node = st.child_by_field_name("type")
        type_text = type_node.text.decode() if type_node is not None else ""
        for d in st.children_by_field_name("declarator"):
            name, _ = syntax.declarator_name(d)
            if name is None:
                continue
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            target = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            self.declared_at[name] = self.loops
            cls = self._class_of(type_text)
            if cls is not None:
                self.class_objects[name] = cls
            else:
                self.class_objects.pop(name, None)   # a name declared again, of another type
            if target is not None and target.type == "array_declarator":
                self.env[name] = "array"
                if _BYTE_TYPE.fullmatch(type_text.strip()):
                    self.byte_arrays.add(name)
                continue
            if "thread_block_tile" in type_text or "tiled_partition" in (value.text.decode() if value else ""):
                size = next((int(x) for x in _numbers(type_text + (value.text.decode() if value else ""))), 32)
                self.env[name] = f"tile:{size}"
                continue
            if "thread_block" in type_text or (value is not None and "this_thread_block" in value.text.decode()):
                self.env[name] = "tile:block"
                continue
            view = self._view(type_text, d, value)
            if view is not None:   # its methods are followed where it is called, here or in a helper it is passed to
                self.env[name] = view
                continue
            plain = target is not None and target.type == "identifier"
            if plain and "<" in type_text and self.type_bytes is not None:
                nbytes = self.type_bytes(type_text)
                if nbytes:
                    self.obj_bytes[name] = nbytes
            if plain and (type_node is not None and type_node.type in ("template_type", "type_identifier")
                          or value is not None and value.type == "lambda_expression"):
                self.objects.add(name)   # an object the kernel may call (a functor, a lambda)
                self.object_types[name] = type_text
            if value is None:   # declared, assigned later (`int x_index; if (..) x_index = ..`)
                self.env[name] = UNSET
                continue
            if value.type == "initializer_list":
                entries = [self.expr(c) for c in value.named_children if c.type != "comment"]
                arrays = target is not None and any(x.type == "array_declarator" for x in syntax.walk(target))
                # a local table of the parameters' pointers: a write through an entry writes them
                self.env[name] = Table(tuple(entries)) if arrays and entries and all(  # type: ignore[arg-type]
                    isinstance(e, Ptr) for e in entries) else UNKNOWN
                continue
            if any(c.type == "type_qualifier" and c.text == b"const" for c in st.children) and _condition(value):
                flag = truth_of(value, self.constants, self.sizes)   # `use_len = input_lengths != nullptr` with it null: false
                if flag is not None:
                    self.constants[name] = int(flag)
            v = self.expr(value)
            self.assigned[name] = [value]
            rel = self._offset_of(value)
            if rel is not None and rel[0] != name:
                self.offsets[name] = rel
            up = self._upper_offset(value) if rel is None else None
            if up is not None and up[0] != name:
                self.upper[name] = up
            if isinstance(v, Ptr) and target is not None and target.type == "pointer_declarator":
                v = self._rescale(v, type_text)
            self.env[name] = v if isinstance(v, (Iv, Ptr)) else UNKNOWN
            self.moved.pop(name, None)
            self._forget(name)
            if isinstance(v, (Iv, Ptr)) or _condition(value):   # a condition kept: `x_check ? x[i] : 0` narrows by it
                self.defs[name] = (value, frozenset(x.text.decode() for x in syntax.walk(value)
                                                    if x.type == "identifier"))

    def _view(self, type_text: str, d: Node, value: Node | None) -> View | None:
        """A local object of a class of the project constructed from the kernel's values (`MatrixView_half_rw
        dest_(dest, height, width)`, which the grammar reads as a function declaration): its class and
        the fields its constructor's initializer list (or, without a constructor, a brace list in
        field order) sets to a pointer or an integer."""
        cls = self.helpers.get(type_text.split("<")[0].split("::")[-1].strip())
        if cls is None or cls.type not in ("class_specifier", "struct_specifier"):
            return None
        if d.type == "function_declarator":   # `View v(a, b);`: parameters that are only a name are arguments
            plist = d.child_by_field_name("parameters")
            params = plist.named_children if plist is not None else []
            if not params or any(p.type != "parameter_declaration" or p.child_by_field_name("declarator") is not None
                                 or len(p.named_children) != 1 for p in params):
                return None
            vals = [self._name_value(p.named_children[0].text.decode()) for p in params]
            brace = False
        elif value is not None and value.type in ("argument_list", "initializer_list"):
            vals = [self.expr(a) for a in value.named_children if a.type != "comment"]
            brace = value.type == "initializer_list"
        else:
            return None
        body = cls.child_by_field_name("body")
        members = body.named_children if body is not None else []
        cname = (cls.child_by_field_name("name").text.decode() if cls.child_by_field_name("name") is not None else "")
        ctors = [m for m in members if m.type == "function_definition" and _method_name(m) == cname
                 and _arity(m)[0] <= len(vals) <= _arity(m)[1]]
        fields: dict[str, Iv | Ptr] = {}
        if ctors:
            decl = syntax.function_declarator(ctors[0].child_by_field_name("declarator"))
            plist = decl.child_by_field_name("parameters") if decl is not None else None
            names = [syntax.declarator_name(p.child_by_field_name("declarator"))[0]
                     for p in (plist.named_children if plist is not None else [])
                     if p.type in ("parameter_declaration", "optional_parameter_declaration")]
            saved = self.env
            self.env = {n: v for n, v in zip(names, vals) if n and isinstance(v, (Iv, Ptr))}
            try:
                inits = next((c for c in ctors[0].named_children if c.type == "field_initializer_list"), None)
                for fi in (inits.named_children if inits is not None else []):
                    fname = next((c.text.decode() for c in fi.named_children if c.type == "field_identifier"), None)
                    args = next((c for c in fi.named_children if c.type in ("argument_list", "initializer_list")), None)
                    inner = [a for a in args.named_children if a.type != "comment"] if args is not None else []
                    v = self.expr(inner[0], evaluate_only=True) if len(inner) == 1 else None
                    if fname and isinstance(v, (Iv, Ptr)):
                        fields[fname] = v
            finally:
                self.env = saved
        elif brace:   # an aggregate: `View v{ptr, rows, cols}` sets its fields in order
            order = [syntax.declarator_name(f.child_by_field_name("declarator"))[0]
                     for f in members if f.type == "field_declaration"]
            fields = {n: v for n, v in zip(order, vals) if n and isinstance(v, (Iv, Ptr))}
        else:
            return None
        return View(cls, tuple(fields.items())) if any(isinstance(v, Ptr) for v in fields.values()) else None

    def _class_of(self, type_text: str) -> Node | None:
        """The project's class a local's type names, directly or through the body's own aliases
        (`using Wvec = Vec<float, 4>;`), or None."""
        text = type_text
        for _ in range(4):
            text = " ".join(w for w in text.split() if w not in ("const", "typename", "volatile"))
            if text not in self.aliases:
                break
            text = self.aliases[text]
        cls = self.helpers.get(text.split("<")[0].split("::")[-1].strip()) if text else None
        return cls if cls is not None and cls.type in ("class_specifier", "struct_specifier") else None

    def _object_class(self, obj: Node | None) -> Node | None:
        """The class of a local object a method is called on: `v` or an element of an array `v[it]`."""
        while obj is not None and obj.type == "subscript_expression":
            obj = obj.child_by_field_name("argument")
        return self.class_objects.get(obj.text.decode()) if obj is not None and obj.type == "identifier" else None

    def _name_value(self, name: str) -> Iv | Ptr | None:
        if name not in self.env and name in self.constants:
            return Iv.point(self.constants[name])
        v = self.env.get(name)
        return v if isinstance(v, (Iv, Ptr)) else None

    def _method(self, view: View, method: str, vals: list) -> Iv | Ptr | None:
        """A method of a view object called: its body followed with the object's fields in scope."""
        body = view.cls.child_by_field_name("body")
        members = []
        for m in (body.named_children if body is not None else []):
            m = next((c for c in m.named_children if c.type == "function_definition"), m) \
                if m.type == "template_declaration" else m
            if m.type == "function_definition" and _method_name(m) == method:
                members.append(m)
        fn = next((m for m in members if _arity(m)[0] <= len(vals) <= _arity(m)[1]), None)
        if fn is None or self.depth >= MAX_HELPER_DEPTH:
            return None
        saved, self.view = self.view, view   # its own methods, called unqualified in its body, are on it
        try:
            return self.inline(fn, vals, dict(view.fields))
        finally:
            self.view = saved

    def _offset_of(self, n: Node | None) -> tuple[str, Iv] | None:
        """`base + e - f` as (base, the interval of e - f), base a plain integer variable."""
        n = _unparen(n)
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
        return left[0], _add(left[1], right if op.type == "+" else _mul(right, Iv.point(-1)))

    def _upper_offset(self, n: Node | None) -> tuple[str, Iv] | None:
        """`min(base + 128, n)`: at most base plus an offset (`_offset_of`'s, or `upper`'s for a local)."""
        n = _unparen(n)
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
                self.env[name] = Ptr(start.base, _add(start.offset, Iv(0, (trips.hi - 1) * total * start.scale)),
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
            self.env[name] = Ptr(start.base, _add(start.offset, Iv((trips.lo or 0) * total, trips.hi * total)),
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
        cond = _unparen(cond)
        op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
        if op is None or op.type not in ("<", "<=") or init is None:
            return
        left, right = _unparen(cond.child_by_field_name("left")), cond.child_by_field_name("right")
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
        if dt is not None and p.base in self.facts.uses and dtypes.vector_of(elem) is None:
            self.facts.uses[p.base].casts.add(dt.name)
        if nbytes is None and self.type_bytes is not None and elem:
            nbytes = self.type_bytes(elem)
        base = self.elem_bytes.get(p.base)
        if nbytes is None or base is None or nbytes == base * p.scale:
            return p
        if nbytes % base:
            return Ptr(p.base, p.offset, p.scale)
        return Ptr(p.base, p.offset, nbytes // base)

    # ---- conditions ------------------------------------------------------------------------
    def refine_feasible(self, cond: Node, truth: bool) -> bool:
        """Narrow by `cond` being `truth`; False when that leaves a variable no value."""
        before = {k: v for k, v in self.env.items() if isinstance(v, Iv)}
        self.refine(cond, truth)
        return not any(isinstance(v, Iv) and v.lo is not None and v.hi is not None and v.lo > v.hi
                       and (k not in before or before[k] != v) for k, v in self.env.items())

    def refine(self, cond: Node, truth: bool) -> None:
        cond = _unparen(cond)
        if cond is None:
            return
        if cond.type == "unary_expression" and cond.child_by_field_name("operator") is not None \
                and cond.child_by_field_name("operator").type == "!":
            self.refine(cond.child_by_field_name("argument"), not truth)
            return
        if cond.type == "identifier" and cond.text.decode() in self.defs \
                and _condition(self.defs[cond.text.decode()][0]):   # `bool ok = i < n && ...; if (ok)`
            self.refine(self.defs[cond.text.decode()][0], truth)
            return
        if cond.type != "binary_expression":
            return
        op = cond.child_by_field_name("operator").type
        left, right = _unparen(cond.child_by_field_name("left")), _unparen(cond.child_by_field_name("right"))
        if op == "&&" and truth or op == "||" and not truth:
            self.refine(left, truth)
            self.refine(right, truth)
            return
        if op not in ("<", "<=", ">", ">=") or left is None or right is None:
            return
        if not truth:
            op = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}[op]
        for side in (left, right):   # `if (threadIdx.x < BINS)` narrows the index itself
            if side.text.decode() in _BUILTINS and side.text.decode() not in self.env:
                self.env[side.text.decode()] = self.field(side)
        self._guard(left, op, right)
        start = self._segment_start(right) if op == "<" else None
        poly = self._poly(left) if start is not None else None
        if start is not None and poly is not None:
            self.env[_SEGMENT + repr(sorted(poly.items()))] = start
        if left.type == "binary_expression" and left.child_by_field_name("operator").type == "+":
            # `i + half < n`: i < n - half (the offset taken at its largest: a bound that holds)
            x, c = _unparen(left.child_by_field_name("left")), _unparen(left.child_by_field_name("right"))
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
            self._bound(left.text.decode(), op, self.expr(right, evaluate_only=True))
        if right.type in ("identifier", "field_expression") and isinstance(self.env.get(right.text.decode()), Iv):
            flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
            self._bound(right.text.decode(), flip, self.expr(left, evaluate_only=True))

    def _scaled_bound(self, left: Node, op: str, right: Node) -> None:
        """`threadIdx.x * vec_size < rotary_dim / 2`: the index itself below the bound divided by
        the (positive, constant) scale, so a branch taken under it reaches no further."""
        x, c = _unparen(left.child_by_field_name("left")), _unparen(left.child_by_field_name("right"))
        if x is not None and x.type not in ("identifier", "field_expression"):
            x, c = c, x
        if x is None or c is None or x.type not in ("identifier", "field_expression"):
            return
        if x.text.decode() in _BUILTINS and x.text.decode() not in self.env:
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
                key = _guard_key(poly)
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
        key = _guard_key(poly)
        if not isinstance(self.env.get(key), Iv):
            self.env[key] = cur if isinstance(cur, Iv) else UNKNOWN
        self._bound(key, op, bound)
        c = poly.get((), 0)
        rest = {m: v for m, v in poly.items() if m != ()}
        if c and isinstance(bound, Iv) and (len(rest) > 1 or any(len(m) > 1 for m in rest)):
            # its constant moved to the bound (`k + 8 + 8 * i < K`: `k + 8 * i` below K - 8), for an
            # address that adds the same terms without it (`(k / 8 + i) * 8`, a vector's first element)
            key = _guard_key(rest)
            if not isinstance(self.env.get(key), Iv):
                self.env[key] = _add(cur, Iv.point(-c)) if isinstance(cur, Iv) else UNKNOWN
            self._bound(key, op, _add(bound, Iv.point(-c)))

    def _poly(self, n: Node | None) -> Poly | None:
        """The expression as a polynomial over the names it reads (the launch's constants and
        template arguments by value), or None for anything else."""
        n = _unparen(n)
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
        if t == "call_expression" and _functional_cast(n.child_by_field_name("function")):
            inner = [a for a in n.child_by_field_name("arguments").named_children if a.type != "comment"]
            return self._poly(inner[0]) if len(inner) == 1 else None
        if t == "binary_expression":
            op = n.child_by_field_name("operator").type
            a, b = self._poly(n.child_by_field_name("left")), self._poly(n.child_by_field_name("right"))
            if a is None or b is None:
                return None
            if op in ("+", "-"):
                return _poly_add(a, b, 1 if op == "+" else -1)
            if op == "*":
                return _poly_mul(a, b)
            if op == "/" and set(b) == {()} and b[()] > 0 and all(v % b[()] == 0 for v in a.values()):
                # an exact quotient by a constant (`num_values_4bit / 4`, a macro's 32 / 4; `i * 32 / 4`)
                return {m: v // b[()] for m, v in a.items()}
        return None

    def _compared(self, cond: Node | None) -> bool | None:
        """A comparison its sides' intervals decide (`1024 <= 128`), else None."""
        cond = _unparen(cond)
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
                term = _poly_mul(term, sub if sub is not None else {(name,): 1})
            out = _poly_add(out, term)
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
            value = _mul(value, v)
        return value

    def _guarded_address(self, terms: list[tuple[Node, int]]) -> Ptr | None:
        """`src + itr_idx` where `src` was moved by `first * n + tid` and a condition bounds
        `tid + it * 32`, which `itr_idx = i * n + it * 32` completes: the pointer with that part
        taken at its bound, the rest at its own value. None where no guard applies."""
        guards = {k: v for k, v in self.env.items() if k.startswith(_GUARD) and isinstance(v, Iv) and v.hi is not None}
        if not guards:
            return None
        base: Ptr | None = None
        total: Poly = {}
        for t, sign in terms:
            t = _unparen(t)
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
            total = _poly_add(total, poly, sign)
        if base is None:
            return None
        best: Ptr | None = None
        for key, bound in guards.items():
            part: Poly = dict(ast.literal_eval(key[len(_GUARD):]))   # the key is the polynomial's repr
            if not part or any(total.get(m) != c for m, c in part.items()):
                continue
            rest = bound
            for m, c in _poly_add(total, part, -1).items():
                rest = _add(rest, self._monomial(m, c))
            if rest.hi is None:
                continue
            offset = _mul(rest, Iv.point(base.scale))
            if best is None or offset.hi < best.offset.hi:   # type: ignore[operator]
                best = Ptr(base.base, offset, base.scale)
        return best

    def _terms(self, n: Node, sign: int = 1) -> list[tuple[Node, int]]:
        """The terms of a sum (`p + a + b - c`), each with its sign."""
        n = _unparen(n)
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
        guards = {k: v for k, v in self.env.items() if k.startswith(_GUARD) and isinstance(v, Iv)}
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
            divisors = {quotients[i][0] for i in part if quotients[i] is not None}
            if len(divisors) == 1:
                # `k / 8 + i` (a vector's index) under `k + 8 * i < K`: c times the part is at most
                # k + 8 * i (each `x / c` times c at most x, for x >= 0), so the part is below K / c
                c = divisors.pop()
                total = {}
                for i in part:
                    q = quotients[i]
                    term = q[1] if q is not None else (None if polys[i] is None else
                                                       {m: v * c * terms[i][1] for m, v in polys[i].items()})
                    total = None if term is None or total is None else _poly_add(total, term)
                scaled = guards.get(_guard_key(total)) if total is not None else None
                bound = Iv(None, scaled.hi // c) if scaled is not None and scaled.hi is not None else None
            elif any(polys[i] is None for i in part):
                continue
            else:
                total = {}
                for i in part:
                    total = _poly_add(total, polys[i], terms[i][1])
                bound = guards.get(_guard_key(total))
            if bound is None:
                continue
            acc: Iv | Ptr = bound
            for i in (i for i in range(len(terms)) if i not in part):
                v = vals[i]
                if isinstance(v, Ptr) and isinstance(acc, Iv) and terms[i][1] > 0:
                    acc = Ptr(v.base, _add(v.offset, _mul(acc, Iv.point(v.scale))), v.scale)
                elif isinstance(v, Iv) and isinstance(acc, Ptr):
                    acc = Ptr(acc.base, _add(acc.offset, _mul(v, Iv.point(acc.scale * terms[i][1]))), acc.scale)
                elif isinstance(v, Iv) and isinstance(acc, Iv):
                    acc = _add(acc, _mul(v, Iv.point(terms[i][1])))
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
        t = _unparen(t)
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
        n = _unparen(n)
        for _ in range(2):
            if n is not None and n.type == "identifier" and n.text.decode() in self.defs:
                n = _unparen(self.defs[n.text.decode()][0])
            elif n is not None and n.type == "cast_expression":
                n = _unparen(n.child_by_field_name("value"))
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type != "-":
            return None
        end, start = (_subscript_of(_unparen(n.child_by_field_name(side)), self.boundaries) for side in ("left", "right"))
        if end is None or start is None or end[0] != start[0] or end[1] not in (f"{start[1]}+1", f"1+{start[1]}",
                                                                                f"({start[1]})+1"):
            return None
        return f"{start[0]}[{start[1]}]"

    def _within_segment(self, n: Node, value):
        """`indptr[b] + i` where a condition keeps `i` below the segment's length: an index below
        the segment's end, so below the size the boundaries end at (the table's size)."""
        segments = {k: v for k, v in self.env.items() if k.startswith(_SEGMENT) and isinstance(v, str)}
        if not segments or not isinstance(value, Iv):
            return value
        terms = self._terms(n)
        for k, (t, sign) in enumerate(terms):
            at = _subscript_of(_unparen(t), self.boundaries)
            if sign != 1 or at is None or f"{at[0]}[{at[1]}]" not in segments.values():
                continue
            rest: Poly | None = {}
            for j, (u, s) in enumerate(terms):
                poly = self._poly(u) if j != k else {}
                rest = None if poly is None or rest is None else _poly_add(rest, poly, s)
            if rest is not None and segments.get(_SEGMENT + repr(sorted(rest.items()))) == f"{at[0]}[{at[1]}]":
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
        for g in [g for g in self.env if g.startswith(_GUARD) and f"'{name}'" in g]:
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

    # ---- expressions -----------------------------------------------------------------------
    def access(self, p: Ptr, index: Iv, *, write: bool = False, read: bool = True, width: int = 1) -> None:
        use = self.facts.uses.get(p.base)
        if use is None:
            return
        use.read |= read
        use.written |= write
        use.packet = max(use.packet, p.scale * width)
        if index.hi is None or p.offset.hi is None:
            use.reach(None)
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
                    return Ptr(start.base, _add(start.offset, _mul(trips, Iv.point(step))), start.scale)
                return Ptr(start.base, UNKNOWN, start.scale)
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
                self.env[name] = f"tile:{next(iter(_numbers(rnode.text.decode())), 32)}"
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
                    self.moved[name] = _poly_add(moved, by)
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
                    self.env[name] = Ptr(cur.base, _add(cur.offset, _mul(right, Iv.point(cur.scale))), cur.scale)
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
                    self.env[name] = _add(cur, right) if op == "+=" else \
                        _add(cur, Iv(None if right.hi is None else -right.hi, None if right.lo is None else -right.lo)) \
                        if op == "-=" else _mul(cur, right)
                elif not isinstance(cur, str) or cur == UNSET:
                    self.env[name] = UNKNOWN
                return None
            self.expr(left, evaluate_only=evaluate_only, lhs=op)
            return None
        if t == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                cur = self.env.get(arg.text.decode())
                if isinstance(cur, Ptr) and arg.text.decode() in self.trip_ptrs and "++" in n.text.decode():
                    if not evaluate_only:   # `p++` where each trip starts it afresh: one element on
                        self.env[arg.text.decode()] = Ptr(cur.base, _add(cur.offset, Iv.point(cur.scale)), cur.scale)
                    return None
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
            off = _add(a.offset, _mul(b, Iv.point(a.scale))) if op == "+" else a.offset
            return Ptr(a.base, off if op == "+" else UNKNOWN, a.scale)
        if isinstance(b, Ptr) and isinstance(a, Iv) and op == "+":
            return Ptr(b.base, _add(b.offset, _mul(a, Iv.point(b.scale))), b.scale)
        if op == "&" and not (isinstance(a, Iv) and isinstance(b, Iv)):
            # a mask's bits bound the result, whatever it masks (vLLM's `addr & (WIDTH - 1)` of an
            # address cast to an integer): 0 .. the mask where that is known and not negative
            mask = b if isinstance(b, Iv) else a if isinstance(a, Iv) else None
            return Iv(0, mask.hi) if mask is not None and mask.lo is not None and mask.lo >= 0 \
                and mask.hi is not None else None
        if not isinstance(a, Iv) or not isinstance(b, Iv):
            return None
        if op == "+":
            return _add(a, b)
        if op == "-":
            return Iv(None if a.lo is None or b.hi is None else a.lo - b.hi,
                      None if a.hi is None or b.lo is None else a.hi - b.lo)
        if op == "*":
            return _mul(a, b)
        if op in ("/", ">>") and b.lo is not None and b.hi is not None:
            d_lo, d_hi = (b.lo, b.hi) if op == "/" else (1 << b.lo, 1 << b.hi)
            if d_lo > 0 and d_hi >= d_lo and a.lo is not None and a.lo >= 0:
                return Iv(a.lo // d_hi, None if a.hi is None else a.hi // d_lo)
            return None
        if op == "<<" and b.lo is not None and b.hi is not None and b.lo >= 0:
            return _mul(a, Iv(1 << b.lo, 1 << b.hi))
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
        if isinstance(p, Table) and not p.element:   # `qkv_ptr[j]`: one of the table's pointers
            return Table(p.entries, element=True)
        if isinstance(p, Table):   # `qkv_ptr[j][idx]`: any of them, at idx
            for e in p.entries if not evaluate_only else ():
                self.access(e, i if isinstance(i, Iv) else UNKNOWN, write=bool(lhs), read=lhs != "=")
            return None
        if not isinstance(p, Ptr):
            name = _unparen(arr)
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
        inner = _unparen(arg)
        if op is not None and op.type == "&" and inner is not None and inner.type == "subscript_expression":
            # `&data[i]` is an address, not an access: the pointer `data + i`
            idx = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if idx is not None and idx.type == "subscript_argument_list":
                idx = next((c for c in idx.named_children if c.type != "comment"), None)
            p = self.expr(inner.child_by_field_name("argument"), evaluate_only=evaluate_only)
            i = self.expr(idx, evaluate_only=evaluate_only)
            if isinstance(p, Ptr):
                return Ptr(p.base, _add(p.offset, _mul(i if isinstance(i, Iv) else UNKNOWN, Iv.point(p.scale))),
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
        a = _unparen(a)
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

    def _specialized(self, fn: Node | None, short: str) -> Node | None:
        """The explicit specialization a call with template arguments picks (`copy_vector<input_t,
        ELEMENTS>` with ELEMENTS 4 and input_t half: `copy_vector<c10::Half, 4>`, a float2 copy, not
        the first one written, `<c10::BFloat16, 1>`): its numbers equal, its types as wide."""
        targs = fn.child_by_field_name("arguments") if fn is not None and fn.type == "template_function" else None
        if targs is None:
            return None
        called = [a.strip() for a in exprs.split_top_level(targs.text.decode().strip()[1:-1])]
        for key, helper in self.helpers.items():
            if not key.startswith(short + "<"):
                continue
            written = [a.strip() for a in exprs.split_top_level(key[len(short) + 1:-1])]
            if len(written) == len(called) and all(self._same_argument(c, w) for c, w in zip(called, written)):
                return helper
        return None

    def _same_argument(self, called: str, written: str) -> bool:
        if re.fullmatch(r"-?\d+[uUlL]*", written):
            node = source.parse_expression(called)
            v = self.expr(node, evaluate_only=True) if node is not None else None
            return isinstance(v, Iv) and v.lo == v.hi == int(written.rstrip("uUlL"))
        if self.type_bytes is None:
            return False
        a, b = self.type_bytes(called), self.type_bytes(written)
        return a is not None and a == b

    def _call_op(self, name: str) -> Node | None:
        """The `operator()` of a functor local whose class the file defines (None otherwise)."""
        if name not in self.objects:
            return None
        return _call_operator(self.helpers.get(self.object_types.get(name, "").split("<")[0].split("::")[-1].strip()))

    def _functor_unread(self, name: str) -> set[int]:
        op = self._call_op(name)
        return _reference_params(op) & _assigned_only(op) if op is not None else set()

    def _written_through(self, name: str, args: list[Node]) -> None:
        """An element passed to a helper's non-const reference parameter (`from_float(out[i], acc)`)
        is written there; one passed to a functor the kernel holds (`op(dst[i], src[i])`, a local
        object called) is taken as read and written, as its operator() is not read here."""
        short = name.split("<")[0].split("::")[-1]   # `ns::f<ns::k>`: f
        functor = name in self.objects
        helper = self.helpers.get(short)
        refs = set(range(len(args))) if functor else (_reference_params(helper) if helper is not None else set())
        unread: set[int] = set()
        call_op = self._call_op(name)
        if call_op is not None:   # the functor's class is the file's (vLLM's CopyWithScaleOp): its operator() read
            refs, unread = _reference_params(call_op), _assigned_only(call_op)
        for i in sorted(refs):
            el = self._element(args[i]) if i < len(args) else None
            if el is not None and not self.const.get(el[0].base, True):
                self.access(el[0], el[1], write=True, read=functor and i not in unread)

    def call(self, n: Node, evaluate_only: bool):
        fn = n.child_by_field_name("function")
        name = fn.text.decode() if fn is not None else ""
        short = name.split("<")[0].split("::")[-1]   # `ns::f<ns::k>`: f
        args_node = n.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        if fn is not None and fn.type == "field_expression":  # cooperative-groups methods
            obj = fn.child_by_field_name("argument")
            kind = self.env.get(obj.text.decode()) if obj is not None else None
            method = fn.child_by_field_name("field").text.decode() if fn.child_by_field_name("field") else ""
            if isinstance(kind, str) and kind.startswith("tile:"):
                size = self.block[0] * self.block[1] * self.block[2] if kind == "tile:block" else int(kind[5:])
                nthreads = self.block[0] * self.block[1] * self.block[2]
                for a in args:
                    self.expr(a, evaluate_only=evaluate_only)
                if method == "thread_rank":
                    return Iv(0, size - 1)
                if method in ("size", "num_threads"):
                    return Iv.point(size)
                if method == "meta_group_rank":
                    return Iv(0, max(1, nthreads // size) - 1)
                if method == "meta_group_size":
                    return Iv.point(max(1, nthreads // size))
                return None
            view = self.env.get(obj.text.decode()) if obj is not None else None
            if view is None and obj is not None and obj.type == "this":   # `this->item_ptr(r, c)`
                view = self.view
            if isinstance(view, View):
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                return None if evaluate_only else self._method(view, method, vals)
            nbytes = self.obj_bytes.get(obj.text.decode()) if obj is not None else None
            if nbytes is not None and method in _VECTOR_METHODS:   # `v.cast_load(v_a + off)`: one vector's elements
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                p = next((v for v in vals if isinstance(v, Ptr)), None)
                if p is not None and not evaluate_only:
                    width = max(1, nbytes // max(1, self.elem_bytes.get(p.base, nbytes) * p.scale))
                    store = "store" in method
                    self.access(p, Iv.point(0), write=store, read=not store, width=width)
                return None
            cls = self._object_class(obj)
            if cls is not None and _has_method(View(cls, ()), method, len(args)):
                # a method of a plain local object handed the kernel's pointers (flash-attention's layer
                # norm `gamma[it].load_from(params.gamma, idx)`, a cast and an index inside): followed,
                # the object's own fields unknown there; one handed none touches no parameter
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                if evaluate_only or not any(isinstance(v, Ptr) for v in vals):
                    return None
                return self._method(View(cls, ()), method, vals)
        if short in ("reinterpret_cast", "static_cast", "const_cast") and len(args) == 1:
            v = self.expr(args[0], evaluate_only=evaluate_only)
            targs = fn.child_by_field_name("arguments") if fn is not None else None
            to = targs.text.decode().strip("<> ") if targs is not None else ""
            if isinstance(v, Ptr) and "*" in to:
                return self._rescale(v, to)
            return v
        if len(args) == 1 and _functional_cast(fn):   # `int64_t(d)`: d
            return self.expr(args[0], evaluate_only=evaluate_only)
        if self.view is not None and fn is not None and fn.type == "identifier" and name not in self.env:
            # inside a method, `item_ptr(row, column)` is another method of the same object
            vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
            if not evaluate_only and _has_method(self.view, name, len(vals)):
                return self._method(self.view, name, vals)
            if _has_method(self.view, name, len(vals)):
                return None
            args_vals = vals
        else:
            args_vals = None
        # an element a functor only assigns through its reference parameter (`op(dst[i], src[i])`
        # with `dst = ...`) is not read: not evaluated here, written by `_written_through`
        skip = self._functor_unread(name) if not evaluate_only else set()
        vals = args_vals if args_vals is not None else [
            None if i in skip and self._element(a) is not None else self.expr(a, evaluate_only=evaluate_only)
            for i, a in enumerate(args)]
        if not evaluate_only:
            self._written_through(name, args)
        if short in ("min", "fminf", "umin") and len(vals) == 2 and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            return Iv(None if a.lo is None or b.lo is None else min(a.lo, b.lo),
                      None if a.hi is None or b.hi is None else min(a.hi, b.hi) if a.hi is not None and b.hi is not None
                      else (a.hi if b.hi is None else b.hi))
        if short in ("max", "umax") and len(vals) == 2 and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            return Iv(None if a.lo is None or b.lo is None else max(a.lo, b.lo),
                      None if a.hi is None or b.hi is None else max(a.hi, b.hi))
        if short in ("__clz", "__clzll") and len(vals) == 1 and isinstance(vals[0], Iv) \
                and vals[0].lo is not None and vals[0].lo > 0 and vals[0].hi is not None:
            # leading zeros: `x >> (31 - __clz(blocksize))` divides by blocksize (a power of two)
            bits = 32 if short == "__clz" else 64
            return Iv(bits - vals[0].hi.bit_length(), bits - vals[0].lo.bit_length())
        if short in ("ceil_div", "cdiv", "CEIL_DIV", "div_up", "DIV_UP") and len(vals) == 2 \
                and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            if a.hi is not None and b.lo and b.lo > 0:
                return Iv(0, -(-a.hi // b.lo))
            return None
        # the project's own `atomicAdd(half2*, half2)` (exllama's compat.cuh, for old GPUs: a CAS
        # loop over the address's bits) is an atomic all the same: one element read and written
        helper = None if short.startswith("atomic") else self._specialized(fn, short) \
            or self.helpers.get(f"{short}#{len(args)}") or self.helpers.get(short)
        if helper is not None and helper.type == "function_definition" and self.depth < MAX_HELPER_DEPTH and (
                not evaluate_only and (any(isinstance(v, (Ptr, View)) for v in vals) or not args)
                or args and all(isinstance(v, Iv) for v in vals)):
            # one given pointers, one of no arguments whose value comes from the thread (`get_lane_id()`),
            # or index arithmetic over numbers only (`get_elem_offset(row, head, stride_n, stride_h)`)
            return self.inline(helper, vals, bound=self._template_bindings(fn, helper, vals), arg_nodes=args)
        # a method called on an object (`StoreT(tmp).Store(&out[i], v, n)`, CUB's block store): its name
        field = fn.child_by_field_name("field") if fn is not None and fn.type == "field_expression" else None
        method = field.text.decode().split("<")[0] if field is not None else short
        accessor = "128" in short or "256" in short or short.startswith(_ACCESSORS) or method.startswith(_ACCESSORS)
        if not evaluate_only and not accessor:
            # a function Astra cannot see into (a library's, a member): what it does with the
            # pointer is unknown — its extent is, and a non-const pointer may be written
            for v in vals:
                if isinstance(v, Ptr) and v.base in self.facts.uses:
                    use = self.facts.uses[v.base]
                    use.read = True
                    use.written |= not self.const.get(v.base, False)
                    use.reach(None)
            return None
        if not evaluate_only and method in ("Load", "Store") and len(args) >= 3 and isinstance(vals[0], Ptr):
            span = self._valid_items_span(args[0], args[2])
            if span is not None and span.hi is not None and vals[0].offset.hi is not None \
                    and span.hi < vals[0].offset.hi:
                # CUB's block load/store of `valid_items`: that many from the pointer, where the count
                # cancels the address (`min(TILE, n - i)`); else, as before, where it points (the
                # loop's loose bound on `i` already reaches the tile's end)
                store = method == "Store"
                self.access(Ptr(vals[0].base, span, 1), Iv.point(0), write=store, read=not store)
                return None
        if not evaluate_only:
            wide = "128" in short or short.startswith(("load_vec", "store_vec"))
            for a, v in zip(args, vals):
                if isinstance(v, Ptr):
                    width = 16 // max(1, self.elem_bytes.get(v.base, 16) * v.scale) if wide else 1
                    write = short.startswith(("store", "__st", "atomic")) or method.startswith(("store", "Store"))
                    self.access(v, Iv.point(0), write=write, read=not (short.startswith(("store", "__st"))
                                                                      or method.startswith(("store", "Store"))),
                                width=max(1, width))
        if short in ("__ldg", "__ldcs", "__ldcg", "__ldlu", "__ldca") and vals and isinstance(vals[0], Ptr):
            return self.loaded(vals[0])
        return None


    def _valid_items_span(self, address: Node, valid: Node) -> Iv | None:
        """The elements a CUB block load or store (`BlockStore<T, THREADS, N>(tmp).Store(&out[i], vals,
        valid_items)`) reaches from `&p[i]` (or `p + i`): `valid_items` of them, so the last is
        `i + valid_items - 1`, each side of a `min` an upper bound (`min(TILE, n - i)` reaches n - 1,
        which intervals alone, blind to the two `i` being one, put a whole tile past). None where the
        address or the count is no polynomial over the kernel's names."""
        a = _unparen(address)
        index: Node | None = None
        if a is not None and a.type == "pointer_expression" and a.child_by_field_name("operator").type == "&":
            inner = _unparen(a.child_by_field_name("argument"))
            if inner is None or inner.type != "subscript_expression":
                return None
            index = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if index is not None and index.type == "subscript_argument_list":
                index = next((c for c in index.named_children if c.type != "comment"), None)
            base = _unparen(inner.child_by_field_name("argument"))
        elif a is not None and a.type == "binary_expression" and a.child_by_field_name("operator").type == "+":
            base, index = _unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        else:
            return None
        index = _unparen(index)
        while index is not None and index.type == "conditional_expression":   # `(DATA_TYPE > 0) ? i * 2 : i`
            taken = truth_of(index.child_by_field_name("condition"), self.constants, self.sizes)
            if taken is None:
                taken = self._compared(index.child_by_field_name("condition"))
            if taken is None:
                return None
            index = _unparen(index.child_by_field_name("consequence" if taken else "alternative"))
        start = self._expanded(index)
        if base is None or base.type != "identifier" or start is None \
                or self.env.get(base.text.decode()) != Ptr(base.text.decode(), Iv.point(0), 1):
            return None   # a pointer moved or rescaled first: its offset is not the index alone
        last = self._count_bound(start, valid, 0)
        lo = self._poly_value(start).lo
        return None if last is None or last == _EMPTY or lo is None else Iv(lo, last)

    def _count_bound(self, start: Poly, count: Node | None, depth: int) -> int | None:
        """The most `start + count - 1` is: a `min`'s smallest side, a local's largest value given
        (each value it was assigned so far), None where no side is a polynomial."""
        count = _unparen(count)
        if count is None or depth > 4:
            return None
        if count.type == "identifier" and count.text.decode() in self.assigned:
            bounds = [self._count_bound(start, v, depth + 1) for v in self.assigned[count.text.decode()]]
            return None if not bounds or None in bounds else max(b for b in bounds if b is not None)
        fn = count.child_by_field_name("function") if count.type == "call_expression" else None
        if fn is not None and fn.text.decode().split("::")[-1] in ("min", "umin"):
            sides = [self._count_bound(start, c, depth + 1)
                     for c in count.child_by_field_name("arguments").named_children if c.type != "comment"]
            known = [b for b in sides if b is not None]
            return min(known) if known else None
        n = self._expanded(count)
        if n is None:
            return None
        if (self._poly_value(n).hi or 0) <= 0 and self._poly_value(n).hi is not None:
            return _EMPTY   # a count of none (`int valid = 0;` before it is set): no element reached
        return self._poly_value(_poly_add(_poly_add(start, n), {(): -1})).hi

    def _poly_value(self, poly: Poly) -> Iv:
        value = Iv.point(0)
        for m, c in poly.items():
            value = _add(value, self._monomial(m, c))
        return value


def constexpr_branch(st: Node, values: dict[str, int]) -> bool | None:
    """Which branch of an `if constexpr` over the template's arguments an instance compiles
    (`use_vec`, `!flag`, `NUM_DIMS == 2`, with `values` the arguments), None for any other `if`
    or a condition not read."""
    cond = _unparen(st.child_by_field_name("condition"))
    if cond is None or not any(c.type == "constexpr" for c in st.children):
        return None

    def value(n: Node | None) -> int | None:
        n = _unparen(n)
        if n is None:
            return None
        if n.type in ("true", "false"):
            return int(n.type == "true")
        if n.type == "identifier":
            return values.get(n.text.decode())
        if n.type == "number_literal" and n.text.decode().rstrip("uUlL").isdigit():
            return int(n.text.decode().rstrip("uUlL"))
        return None
    op = cond.child_by_field_name("operator") if cond.type in ("unary_expression", "binary_expression") else None
    if cond.type == "unary_expression" and op is not None and op.type == "!":
        v = value(cond.child_by_field_name("argument"))
        return None if v is None else not v
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!="):
        a, b = value(cond.child_by_field_name("left")), value(cond.child_by_field_name("right"))
        return None if a is None or b is None else (a == b) == (op.type == "==")
    v = value(cond)
    return None if v is None else bool(v)


def truth_of(cond: Node, values: dict[str, int], probed: Collection[str] = frozenset()) -> bool | None:
    """A plain `if`'s condition decided by the template's arguments alone (`flag && i < n` with
    flag false is false, `!flag || ...` with flag false true), None where the sizes decide it:
    the branch an argument rules out is dead code in this instance."""
    cond = _unparen(cond)
    if cond is None:
        return None
    if cond.type in ("true", "false"):
        return cond.type == "true"
    if cond.type == "identifier":
        v = values.get(cond.text.decode())
        return None if v is None else bool(v)
    op = cond.child_by_field_name("operator")
    if cond.type == "unary_expression" and op is not None and op.type == "!":
        v = truth_of(cond.child_by_field_name("argument"), values, probed)
        return None if v is None else not v
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!="):
        # a pointer the spec passes as null (values 0) against null: `cu_seqlens != nullptr`
        left, right = _unparen(cond.child_by_field_name("left")), _unparen(cond.child_by_field_name("right"))
        if left is not None and left.type == "null":
            left, right = right, left
        if right is not None and right.type == "null" and left is not None and left.type == "identifier" \
                and left.text.decode() in values:
            return (values[left.text.decode()] == 0) == (op.type == "==")
    if cond.type == "binary_expression" and op is not None and op.type in ("==", "!=", "<", "<=", ">", ">="):
        # `if (DATA_TYPE > 0)`: two template arguments or numbers, compared; never a kernel argument
        # (`probed`), whose value here is a probe's (`mode == 2` with the mode taken 0 is still read)
        a, b = _argument_value(cond.child_by_field_name("left"), values, probed), \
            _argument_value(cond.child_by_field_name("right"), values, probed)
        if a is None or b is None:
            return None
        return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op.type]
    if cond.type == "binary_expression" and op is not None and op.type in ("&&", "||"):
        a, b = truth_of(cond.child_by_field_name("left"), values, probed), \
            truth_of(cond.child_by_field_name("right"), values, probed)
        short = op.type == "||"   # the value either side settles it at
        if a is short or b is short:
            return short
        return (not short) if a is not None and b is not None else None
    return None


def _argument_value(n: Node | None, values: dict[str, int], probed: Collection[str]) -> int | None:
    """A template argument's value (`values`, not one of the `probed` names) or a decimal number, else None."""
    n = _unparen(n)
    if n is not None and n.type == "identifier":
        return None if n.text.decode() in probed else values.get(n.text.decode())
    text = n.text.decode().rstrip("uUlL") if n is not None and n.type == "number_literal" else ""
    return int(text) if text.isdigit() else None


def not_compiled(root: Node, values: dict[str, int]) -> list[tuple[int, int]]:
    """(start, end) bytes of the `if constexpr` branches an instance with template arguments
    `values` does not compile."""
    out = []
    for n in syntax.walk(root):
        if n.type != "if_statement":
            continue
        taken = constexpr_branch(n, values)
        if taken is None:
            continue
        dead = n.child_by_field_name("alternative") if taken else n.child_by_field_name("consequence")
        if dead is not None:
            out.append((dead.start_byte, dead.end_byte))
    return out


def _call_operator(cls: Node | None) -> Node | None:
    """A class's `operator()` definition (None where the class is not read or has none)."""
    body = cls.child_by_field_name("body") if cls is not None and cls.type in ("class_specifier",
                                                                               "struct_specifier") else None
    for m in (body.named_children if body is not None else []):
        m = next((c for c in m.named_children if c.type == "function_definition"), m) \
            if m.type == "template_declaration" else m
        if m.type == "function_definition" and (_method_name(m) or "").replace(" ", "") == "operator()":
            return m
    return None


def _assigned_only(fn: Node) -> set[int]:
    """Positions of the reference parameters a function only assigns (`dst = static_cast<OutT>(src)`,
    never read): the element passed there is written, not read."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    params = [p for p in (plist.named_children if plist is not None else [])
              if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    body = fn.child_by_field_name("body")
    out = set()
    for i, p in enumerate(params):
        d = p.child_by_field_name("declarator")
        name = next((c.text.decode() for c in syntax.walk(d) if c.type == "identifier"), None) if d else None
        uses = [n for n in syntax.walk(body) if n.type == "identifier" and n.text.decode() == name] \
            if name and body is not None else []
        if uses and all(u.parent is not None and u.parent.type == "assignment_expression"
                        and u.parent.child_by_field_name("left") == u
                        and u.parent.child_by_field_name("operator").type == "=" for u in uses):
            out.add(i)
    return out


def _reference_params(fn: Node) -> set[int]:
    """The positions of a function's non-const reference parameters (`float& dst`): what it is
    passed there it may write."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    params = [p for p in (plist.named_children if plist is not None else [])
              if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    return {i for i, p in enumerate(params) if p.child_by_field_name("declarator") is not None
            and p.child_by_field_name("declarator").type == "reference_declarator"
            and not any(c.type == "type_qualifier" and c.text == b"const" for c in p.children)}


def _has_method(view: View, name: str, nargs: int) -> bool:
    """Whether the view's class defines a method `name` taking `nargs` arguments."""
    body = view.cls.child_by_field_name("body")
    for m in (body.named_children if body is not None else []):
        m = next((c for c in m.named_children if c.type == "function_definition"), m) \
            if m.type == "template_declaration" else m
        if m.type == "function_definition" and _method_name(m) == name and _arity(m)[0] <= nargs <= _arity(m)[1]:
            return True
    return False


def _method_name(fn: Node) -> str | None:
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    return syntax.declarator_name(decl.child_by_field_name("declarator"))[0] if decl is not None else None


def _arity(fn: Node) -> tuple[int, int]:
    """(required, all) parameters of a function definition."""
    decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    ps = [p for p in (plist.named_children if plist is not None else [])
          if p.type in ("parameter_declaration", "optional_parameter_declaration")]
    if len(ps) == 1 and ps[0].text.decode().strip() == "void":
        ps = []
    return sum(1 for p in ps if p.type == "parameter_declaration"), len(ps)


def _joined(values: list) -> Iv | Ptr | None:
    """What a function returns, where every return gives an interval, or a pointer into one buffer."""
    if not values:
        return None
    if all(isinstance(v, Iv) for v in values):
        out = values[0]
        for v in values[1:]:
            out = out.join(v)
        return out
    if all(isinstance(v, Ptr) for v in values) and len({(v.base, v.scale) for v in values}) == 1:
        off = values[0].offset
        for v in values[1:]:
            off = off.join(v.offset)
        return Ptr(values[0].base, off, values[0].scale)
    return None


def _add(a: Iv, b: Iv) -> Iv:
    return Iv(None if a.lo is None or b.lo is None else a.lo + b.lo,
              None if a.hi is None or b.hi is None else a.hi + b.hi)


def _condition(n: Node | None) -> bool:
    """A comparison or a logical combination of them (`check && i < n`)."""
    n = _unparen(n)
    return n is not None and n.type == "binary_expression" and n.child_by_field_name("operator").type in (
        "&&", "||", "<", "<=", ">", ">=", "==", "!=")


def _functional_cast(fn: Node | None) -> bool:
    """`int64_t(d)`, `float(x)`: a call whose function is a scalar type, a cast written as a call."""
    return fn is not None and fn.type in ("primitive_type", "type_identifier", "identifier", "qualified_identifier") \
        and dtypes.from_cpp(fn.text.decode()) is not None


def _unparen(n: Node | None) -> Node | None:
    while n is not None and n.type in ("parenthesized_expression", "condition_clause"):
        inner = [c for c in n.named_children if c.type != "comment"]
        if len(inner) != 1:
            return n if n.type != "condition_clause" else (inner[-1] if inner else None)
        n = inner[0]
    return n


def _numbers(text: str) -> list[int]:
    out, cur = [], ""
    for ch in text + " ":
        if ch.isdigit():
            cur += ch
        elif cur:
            out.append(int(cur))
            cur = ""
    return out


def kernel_body(kernel: source.Kernel) -> Node | None:
    """The kernel's body parsed again on its own (the model keeps text, not nodes)."""
    tree = source.parser().parse(kernel.text.encode("utf-8")).root_node
    for n in syntax.walk(tree):
        if n.type == "function_definition":
            return n.child_by_field_name("body")
    return None


def helpers_of(texts: list[str], macros: list[str] = ()) -> dict[str, Node]:
    """Device function definitions by name, from the texts of the file's device-function items,
    and function-like macros whose body is one expression (`#define VLLM_LDG(arg) __ldg(arg)`),
    each read as a function of its parameters so a load through it is followed."""
    out: dict[str, Node] = {}
    for text in [*texts, *filter(None, map(_macro_as_function, macros))]:
        root = source.parser().parse(text.encode("utf-8")).root_node
        members: set[int] = set()   # a class's methods are its own, not free functions
        for n in syntax.walk(root):
            if n.type in ("class_specifier", "struct_specifier") and n.child_by_field_name("body") is not None \
                    and n.child_by_field_name("name") is not None:
                out.setdefault(n.child_by_field_name("name").text.decode(), n)
                members |= {m.id for m in syntax.walk(n.child_by_field_name("body"))}
        for fn in (n for n in syntax.walk(root) if n.type == "function_definition" and n.id not in members):
            decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
            name = syntax.declarator_name(decl)[0]
            if name:
                out.setdefault(name.split("::")[-1], fn)
                low, high = _arity(fn)   # overloads by their count of arguments (vLLM's vectorize_with_alignment:
                for n in range(low, high + 1):   # 6 arguments forward to the 7 of the one written first)
                    out.setdefault(f"{name.split('::')[-1]}#{n}", fn)
            spelled = decl.child_by_field_name("declarator") if decl is not None else None
            if name and spelled is not None and spelled.type == "template_function":
                # an explicit specialization (`copy_vector<c10::Half, 4>`), kept under its arguments too
                out.setdefault(name.split("::")[-1] + "".join(spelled.child_by_field_name("arguments").text.decode()
                                                              .split()), fn)
    return out


def _macro_as_function(text: str) -> str | None:
    """`#define F(a, b) expr` as `auto F(auto a, auto b) { return expr; }` (None for anything else): its
    value is the call's, as a followed function's (`CEILDIV(n, block)` passed on as a bound)."""
    root = source.parser().parse(text.encode("utf-8")).root_node
    node = next((n for n in syntax.walk(root) if n.type == "preproc_function_def"), None)
    if node is None:
        return None
    name, params, value = (node.child_by_field_name(f) for f in ("name", "parameters", "value"))
    if name is None or params is None or value is None:
        return None
    body = value.text.decode().replace("\\\n", " ").strip()
    expr = source.parse_expression(body)
    if expr is None or expr.has_error or "#" in body or "<<<" in body:
        return None
    names = [c.text.decode() for c in params.named_children if c.type == "identifier"]
    return f"auto {name.text.decode()}({', '.join(f'auto {n}' for n in names)}) {{ return {body}; }}"


def _subscript_of(n: Node | None, arrays: set[str]) -> tuple[str, str] | None:
    """(array, index without blanks) of `a[i]` where `a` is one of `arrays`."""
    if n is None or n.type != "subscript_expression":
        return None
    arr = _unparen(n.child_by_field_name("argument"))
    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = next((c for c in idx.named_children if c.type != "comment"), None)
    if arr is None or arr.type != "identifier" or arr.text.decode() not in arrays or idx is None:
        return None
    return arr.text.decode(), re.sub(r"\s+", "", idx.text.decode())


def _strided_index(n: Node) -> bool:
    """`a[2 * b]` or `a[2 * b + 1]`: records of several entries (vLLM copy_blocks' (src, dst)
    pairs), whose `+ 1` is the next field of one record, not the next boundary."""
    idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = next((c for c in idx.named_children if c.type != "comment"), None)
    idx = _unparen(idx)
    if idx is not None and idx.type == "binary_expression" and idx.child_by_field_name("operator").type == "+":
        idx = _unparen(idx.child_by_field_name("left"))
    if idx is None or idx.type != "binary_expression" or idx.child_by_field_name("operator").type != "*":
        return False
    factors = (_unparen(idx.child_by_field_name(side)) for side in ("left", "right"))
    return any(f is not None and f.type == "number_literal" and f.text.decode().rstrip("uUlL").isdigit()
               and int(f.text.decode().rstrip("uUlL")) > 1 for f in factors)


def boundary_arrays(body: Node, int_params: set[str]) -> set[str]:
    """The integer pointer parameters read both at some index `i` and at `i + 1` (`indptr[b + 1] -
    indptr[b]`): the boundaries of segments, as a CSR `indptr` or `cu_seqlens` holds them — values
    that never decrease, from 0 to the size of what they segment, not indices drawn at random."""
    seen: dict[str, set[str]] = {}
    for n in syntax.walk(body):
        at = _subscript_of(n, int_params)
        if at is not None and not _strided_index(n):
            seen.setdefault(at[0], set()).add(at[1])
    return {name for name, indices in seen.items()
            if any(f"{i}+1" in indices or f"({i})+1" in indices or f"1+{i}" in indices for i in indices)}


def analyse(kernel: source.Kernel, sizes: dict[str, int], grid, block, elem_bytes: dict[str, int],
            int_params: set[str], table_size: int, constants: dict[str, int],
            lanes: dict[str, int] | None = None, helpers: dict[str, Node] | None = None,
            type_bytes: Callable[[str], int | None] | None = None, shared_rows: bool = False) -> Facts | None:
    body = kernel_body(kernel)
    if body is None:
        return None
    return Analyzer(kernel, sizes, tuple(grid), tuple(block), elem_bytes, int_params, table_size,
                    constants, lanes, helpers, type_bytes, shared_rows).run(body)
