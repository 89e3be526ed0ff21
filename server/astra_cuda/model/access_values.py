"""The values the access walk (`access`) computes with: integer intervals, pointers into the kernel's
parameters, view objects and pointer tables, what each parameter is found to be used for, the
polynomials a guard is kept as, and the fixed tables of names the walk recognises. Separate
because every part of the walk, and its callers, share them."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node


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
BUILTINS = frozenset(f"{a}.{f}" for a in ("threadIdx", "blockIdx") for f in "xyz")
# methods of a vector object that move one vector through the pointer they are given (FlashInfer's vec_t)
VECTOR_METHODS = frozenset({"load", "store", "cast_load", "cast_store", "load_global", "store_global"})
# `#if`/`#ifdef` blocks inside a body, and their `#elif`/`#else`: walked as branches
PREPROC_BRANCHES = frozenset({"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef", "preproc_else"})
UNSET = "unset"      # a local declared without a value: its first assignment gives it one
MAX_HELPER_DEPTH = 3   # device functions followed into, nested
EMPTY = -(1 << 62)   # the last element a block load/store of no elements reaches: below any other
# the element types of a byte (a quantized code: below 256)
BYTE_TYPE = re.compile(r"(const\s+)?(unsigned\s+char|uint8_t|u_char|uchar)")
# calls that read or write exactly where their pointer argument points (width aside)
ACCESSORS = ("load", "store", "__ld", "__st", "atomic", "ld", "st", "Load", "Store", "read", "write", "fetch",
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
    address_tested: bool = False   # its address, cast to an integer, is masked (`addr & 15`): an alignment test
    # pointers an aligning helper (one that tests another's address only) moved this one by vectors
    # beside, from a different start (its offsets must stay congruent to theirs), or from the same one
    congruent: set[str] = field(default_factory=set)
    same_start: bool = False
    casts: set[str] = field(default_factory=set)   # types it is cast to (`(float*)x` of a void* buffer), as spelled where unknown
    # a plain store (no read in the same access: no atomic, no `+=`), or a plain load, that could not be bounded
    stored_unknown: bool = False
    loaded_unknown: bool = False

    def reach(self, hi: int | None) -> None:
        if hi is None:
            self.unknown = True
        elif self.hi is None or hi > self.hi:
            self.hi = hi


@dataclass
class Facts:
    uses: dict[str, Use] = field(default_factory=dict)
    # moduli of the residue tests that narrowed an index (`d_id % 2 == 0`: elements taken in pairs)
    residues: set[int] = field(default_factory=set)


def iv_mul(a: Iv, b: Iv) -> Iv:
    if a.lo is None or a.hi is None or b.lo is None or b.hi is None:
        if a.lo is not None and b.lo is not None and a.lo >= 0 and b.lo >= 0:
            return Iv(a.lo * b.lo, None if a.hi is None or b.hi is None else a.hi * b.hi)
        return UNKNOWN
    c = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return Iv(min(c), max(c))


# a bound a condition puts on a compound expression (`(i * num_threads + tid) * VEC < d`), kept in
# the environment under this prefix and its polynomial, so it scopes and merges like a variable's
GUARD = "#guard:"
MAX_GUARD_TERMS = 8   # terms of a sum searched for a guarded part (2**8 subsets at most)
# an expression a condition keeps below a segment's length (`i < indptr[b + 1] - indptr[b]`), kept
# under this prefix and its polynomial, its value the segment's start as written (`indptr[b]`)
SEGMENT = "#segment:"

Poly = dict[tuple[str, ...], int]   # monomial (its names, sorted) -> coefficient; () is the constant


def poly_add(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for m, c in b.items():
        out[m] = out.get(m, 0) + sign * c
    return {m: c for m, c in out.items() if c}


def poly_mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = tuple(sorted(ma + mb))
            out[m] = out.get(m, 0) + ca * cb
    return {m: c for m, c in out.items() if c}


def guard_key(p: Poly) -> str:
    return GUARD + repr(sorted(p.items()))

def join_values(values: list[object]) -> Iv | Ptr | None:
    """What a function returns, where every return gives an interval, or a pointer into one buffer."""
    if not values:
        return None
    ivs = [v for v in values if isinstance(v, Iv)]
    if len(ivs) == len(values):
        out = ivs[0]
        for iv in ivs[1:]:
            out = out.join(iv)
        return out
    ptrs = [v for v in values if isinstance(v, Ptr)]
    if len(ptrs) == len(values) and len({(v.base, v.scale) for v in ptrs}) == 1:
        off = ptrs[0].offset
        for p in ptrs[1:]:
            off = off.join(p.offset)
        return Ptr(ptrs[0].base, off, ptrs[0].scale)
    return None


def iv_add(a: Iv, b: Iv) -> Iv:
    return Iv(None if a.lo is None or b.lo is None else a.lo + b.lo,
              None if a.hi is None or b.hi is None else a.hi + b.hi)
