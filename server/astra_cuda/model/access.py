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

The walk's rules are in its mixins, one module each: `access_statements`, `access_loops`,
`access_conditions`, `access_expressions`, `access_calls`; its values in `access_values`.
"""
from __future__ import annotations

from collections.abc import Callable

from tree_sitter import Node

from . import accessors, source, syntax
from .access_calls import CallWalk
from .access_conditions import ConditionWalk
from .access_expressions import ExpressionWalk
from .access_loops import LoopWalk
from .access_nodes import arity, boundary_arrays
from .access_statements import StatementWalk
from .access_values import Facts, Iv, Poly, Ptr, UNKNOWN, Use, View


class Analyzer(StatementWalk, LoopWalk, ConditionWalk, ExpressionWalk, CallWalk):
    """One evaluation of one kernel body at one point (sizes, grid, block): the walk's state, its
    rules in the mixins."""

    def __init__(self, kernel: source.Kernel, sizes: dict[str, int], grid: tuple[int, int, int],
                 block: tuple[int, int, int], elem_bytes: dict[str, int], int_params: set[str],
                 table_size: int, constants: dict[str, int], lanes: dict[str, int] | None = None,
                 helpers: dict[str, Node] | None = None, type_bytes: Callable[[str], int | None] | None = None,
                 shared_rows: bool = False, macros: frozenset[str] | None = None,
                 lengths: dict[str, int] | None = None):
        self.kernel = kernel
        # integer arrays holding lengths (`seq_lens`: a loaded value bounds a loop) -> the most any is
        self.lengths = lengths or {}
        # the macros the program defines (its file, project headers, command line), which decide a
        # body's `#ifdef`/`#ifndef`; None: unknown, both branches walked
        self.macros = macros
        # index arrays whose values are summed into one row (`seq.start_idx + seq.n_tokens - 1`): each
        # drawn in [1, table / 2]: two of them and the `- 1` reach the last row, never past it
        self.shared_rows = shared_rows
        self.type_bytes = type_bytes          # sizeof a type the table above does not know (`vec_n_t<T, 4>`)
        self.aliases: dict[str, str] = {}     # the body's own `using` and `typedef` names
        self.helpers = helpers or {}          # device function name -> its definition (followed into)
        self.const = {p.name: p.is_const for p in kernel.params if p.is_pointer}
        # the kernel's scalar parameters the probe sets: one the draft fixes instead (`constants`, not
        # probed: a split count `cp_size` 1) decides the branches that test it, as a template argument does
        self.sizes = {p.name for p in kernel.params if not p.is_pointer and (p.name in sizes or p.name not in constants)}
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
        # (a tensor accessor's dimensions are measured apart: `scores@0`, `scores@1`, see `accessors`)
        self.facts = Facts({n: Use() for n in accessors.pointer_names(kernel, constants)})
        self.env: dict[str, Iv | Ptr | str] = {}
        # `aEnd = aBegin + wA - 1`: aEnd is aBegin plus an offset (kept apart so a loop from aBegin
        # to aEnd counts its trips although both vary with the block)
        self.offsets: dict[str, tuple[str, Iv]] = {}
        # pointers a loop steps once per trip -> (its variable, the variable's first value, the
        # pointer at the loop's start, base elements per trip, the variable's step)
        self.stepped: dict[str, tuple[str, int, Ptr | Iv, int, int]] = {}
        # `end = min(start + 128, n)`: end is at most start plus an offset (a loop's bound, see `offsets`)
        self.upper: dict[str, tuple[str, Iv]] = {}
        # pointers a loop moves by a fixed amount each trip (`_per_trip`): set at the trip's start,
        # so each `p += e` in the body moves them by exactly e
        self.trip_ptrs: set[str] = set()
        self.loops = 0    # loops the walk is inside (their bodies are walked once)
        self.declared_at: dict[str, int] = {}   # local -> the loops it is declared inside
        self.boundaries: set[str] = set()   # integer pointers holding segment boundaries (`boundary_arrays`)
        # in walk order: the pointers whose address the code masks (`addr & 15`, an alignment test) and
        # those accessed by vectors — a followed helper's share of each says what its call assumes
        self.address_tests: list[str] = []
        self.vector_bases: list[str] = []
        # pointer parameters -> what they were moved by, as a polynomial (`src += first * n + tid`),
        # while every move is one of exactly that: a guard on a local (`tid + it * 32 < n`) narrows
        # the part of an address made of its terms, wherever each term was added
        self.moved: dict[str, Poly] = {p.name: {} for p in kernel.params if p.is_pointer}
        for p in kernel.params:
            if p.is_pointer and (acc := accessors.of_param(p, constants)) is not None:
                self.env[p.name] = accessors.Indexed(p.name, acc.dims)
            elif p.is_pointer:   # a `half2*` over a half buffer steps two elements at a time
                self.env[p.name] = Ptr(p.name, Iv.point(0), (lanes or {}).get(p.name, 1))
            elif p.name in sizes:
                self.env[p.name] = Iv.point(int(sizes[p.name]))
            else:
                self.env[p.name] = UNKNOWN

    def run(self, body: Node) -> Facts:
        self.boundaries = boundary_arrays(body, self.int_params)
        for name in self.boundaries:
            self.facts.uses[name].boundaries = True
        self.block_stmt(body)
        return self.facts


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
                low, high = arity(fn)   # overloads by their count of arguments (vLLM's vectorize_with_alignment:
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


def analyse(kernel: source.Kernel, sizes: dict[str, int], grid, block, elem_bytes: dict[str, int],
            int_params: set[str], table_size: int, constants: dict[str, int],
            lanes: dict[str, int] | None = None, helpers: dict[str, Node] | None = None,
            type_bytes: Callable[[str], int | None] | None = None, shared_rows: bool = False,
            macros: frozenset[str] | None = None, lengths: dict[str, int] | None = None) -> Facts | None:
    body = kernel_body(kernel)
    if body is None:
        return None
    return Analyzer(kernel, sizes, tuple(grid), tuple(block), elem_bytes, int_params, table_size,
                    constants, lanes, helpers, type_bytes, shared_rows, macros, lengths).run(body)
