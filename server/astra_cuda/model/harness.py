"""The harness spec as a value: how to run a kernel, read from the TOML block comment above it.

    /* @astra
    grid = ["num_tokens"]
    block = ["min(d, 1024)"]
    [sizes]
    num_tokens = [1, 7, 333]
    d = [128, 1001, 4096]
    [args]
    out   = { type = "half", shape = ["num_tokens", "d"], output = true }
    input = { type = "half", shape = ["num_tokens", "2 * d"] }
    d     = "d"
    */

This format is a user-facing contract (README.md documents every key): its keys and limits, the
`Spec` that `astra_cuda.model.spec.load` makes of a comment (its test and bench cases, its launch,
what one case moves), each argument (`ArgSpec`) and how its values are drawn (`Init`).
"""
from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from typing import AbstractSet

from . import dtypes, exprs
from ..diagnostics import Diagnostic
from ..errors import AstraError

TOP_KEYS = {"grid", "block", "shared_mem", "reference", "instantiate", "require", "sizes", "bench", "args",
            "flops", "seeds", "max_cases"}
NULL = "null"                     # a pointer parameter passed as a null pointer: `bias = "null"`
ARRAY_KEYS = {"type", "shape", "output", "inout", "init", "atol", "rtol", "table", "flag"}
SCALAR_KEYS = {"value", "type"}
ACCESSOR = "accessor"             # a tensor accessor passed by value: `x = { type, shape, accessor = true }`
CONSTRUCT = "construct"           # a class object the host builds: `div = { construct = "uint_fastdiv(n)" }`
RECORDS = "records"               # a pointer to structs: `batch = { records = "seqs", start = {...} }`
DRAWN_KEYS = {"init", "type"}     # a field of records drawn per record: `start = { init = "randint(0, n)" }`
INITS = ("normal", "uniform", "randint", "arange", "zeros", "ones", "permutation", "offsets")
DEFAULT_MAX_CASES = 24
# Caps that keep a hostile or mistaken spec from exhausting the machine (checked in `load`,
# before anything is allocated): each a clear spec error at its line.
MAX_SEEDS = 16
MAX_CASES_CAP = 1024
MAX_COMBINATIONS = 100_000        # the cartesian product of [sizes] (or [bench]) before `require`
MAX_SIZE_VALUES = 64              # values listed for one size name
MAX_SIZE_NAMES = 16               # names in [sizes] or [bench] (each edge case copies them all)
MAX_SPEC_CHARS = 16 << 10         # the comment's text (real specs are under 1 KB)
MAX_SPEC_ERRORS = 20              # diagnostics reported for one spec (the first, by position)
MAX_CASE_BYTES = 256 << 30        # bytes of all buffers of one case: more than any one GPU holds
                                  # (the CPU backend skips or shrinks cases above its own limit)
MAX_FIELDS = 64                   # fields given for one struct parameter (nested ones included)
MAX_FIELD_DEPTH = 4               # a field of a field of ... (`p.inner.x` is depth 2)
MAX_TABLE_ENTRIES = 1 << 16       # pointers in one table of device pointers (`table = "layers"`)
# One step of a field path: a member, or one element of an array member (`stride[1]`, up to three
# dimensions: apex's table of device pointers `addresses[1][3]`). The path ends up in generated
# C++ (the layout probe, `astra_cuda.model.layout`): nothing else may pass.
FIELD_STEP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(\[[0-9]{1,6}\]){0,3}")


class SpecErrors(AstraError):
    def __init__(self, diagnostics: list[Diagnostic]):
        self.diagnostics = diagnostics
        first = diagnostics[0]
        super().__init__(f"harness spec: {first.message}", line=first.line, col=first.col)


@dataclass(frozen=True)
class Init:
    kind: str                   # one of INITS
    params: tuple[float, ...] = ()
    exprs: tuple[str, ...] = ()  # the bounds as written when they use sizes: randint(0, V)

    def __str__(self) -> str:
        if self.exprs:
            return f"{self.kind}({', '.join(self.exprs)})"
        return f"{self.kind}({', '.join(f'{p:g}' for p in self.params)})" if self.params else self.kind

    def at(self, sizes: dict[str, int]) -> "Init":
        """The bounds for one case (token ids drawn below a table's size V)."""
        if not self.exprs:
            return self
        return Init(self.kind, tuple(float(exprs.evaluate(e, sizes)) for e in self.exprs))


@dataclass(frozen=True)
class ArgSpec:
    name: str
    pointer: bool
    dtype: dtypes.DType
    shape: tuple[str, ...] = ()     # pointer args: size expressions
    output: bool = False
    inout: bool = False
    init: Init = Init("normal")
    atol: float | None = None
    rtol: float | None = None
    value: str | int | float | None = None  # scalar args: an expression over the sizes
    # A struct passed by value: `struct` is set and `fields` lists the paths the spec gives
    # ("out", "inner.rows", "stride[1]"); each is an entry of Spec.args named "<param>.<path>"
    # whose `member_of` is the parameter (a pointer field is a buffer like any other).
    struct: bool = False
    fields: tuple[str, ...] = ()
    member_of: str = ""
    typed: bool = True          # a scalar field without `type`: the compiler's type of the field decides
    # A table of device pointers (`T**`, or 64-bit integers holding addresses): the number of
    # entries; the buffer is shape[0] entries of shape[1:] each, and the kernel gets a table of
    # pointers to them.
    table: str = ""
    # A pointer parameter given as `"null"`: the kernel gets a null pointer (its optional input
    # absent, as `if (p != nullptr)` tests). Carried as an 8-byte integer zero, which is how a
    # null pointer is passed by value; it has no buffer.
    null: bool = False
    # A pointer to structs (a parameter, or a pointer field of a struct passed by value): `struct`
    # is set, `fields` as for a struct, and `records` the number of structs that lie one after
    # another in device memory (an expression over the sizes); the kernel gets their address.
    # Their fields are numbers: one value for every record, or `drawn` per record by `init`.
    records: str = ""
    drawn: bool = False
    # An output that reports a status, written only as constants (`valid[b] = true` / `false`):
    # the same value everywhere is what the kernel says of valid inputs, not a sign it did nothing.
    flag: bool = False
    # A tensor accessor passed by value (torch's `PackedTensorAccessor32<T, N>`: a data pointer,
    # then N sizes and N strides): a buffer like a pointer's (`pointer` is set), whose object the
    # harness builds — the buffer's address, its shape as the sizes, contiguous strides — laid
    # out as the compiler lays the class out (`astra_cuda.model.layout.accessor_probe`).
    accessor: bool = False
    # An object of a class passed by value (a parameter, or a struct's field) that the host builds
    # by a constructor or factory call over the sizes (`uint_fastdiv(page_size)`): its bytes come
    # from a host program compiled with the unit (`astra_cuda.model.construct`).
    construct: str = ""

    @property
    def param(self) -> bool:
        """A parameter of the kernel (not a field reached through one)."""
        return not self.member_of

    @property
    def is_scalar(self) -> bool:
        """A by-value number (a kernel parameter or a struct's field): `Spec.scalar` evaluates it."""
        return not self.pointer and not self.struct and not self.drawn and not self.construct

    @property
    def is_input(self) -> bool:
        return self.pointer and not self.output

    @property
    def written(self) -> bool:
        return self.pointer and (self.output or self.inout)

    @property
    def tolerance(self) -> tuple[float, float]:
        return (self.atol if self.atol is not None else self.dtype.atol,
                self.rtol if self.rtol is not None else self.dtype.rtol)


@dataclass
class Spec:
    kernel: str
    grid: tuple[str, ...]
    block: tuple[str, ...]
    shared_mem: str = "0"
    reference: str | None = None
    instantiate: str | None = None
    require: tuple[str, ...] = ()
    sizes: dict[str, list[int]] = field(default_factory=dict)
    bench: dict[str, list[int]] = field(default_factory=dict)
    args: dict[str, ArgSpec] = field(default_factory=dict)  # in the kernel's parameter order
    flops: str | None = None
    seeds: int = 2
    max_cases: int = DEFAULT_MAX_CASES
    template_args: dict[str, str] = field(default_factory=dict)  # template parameter -> argument
    # Test cases a rewrite's own spec added to these [sizes] (a size dispatch's other side, see
    # with_cases_of): the gate runs them beside the spec's cases, never instead of one.
    added_cases: tuple[tuple[tuple[str, int], ...], ...] = ()

    # ---- cases -------------------------------------------------------------------------
    def satisfies(self, sizes: dict[str, int]) -> bool:
        return all(bool(exprs.evaluate(r, sizes)) for r in self.require)

    def cases(self) -> list[dict[str, int]]:
        """The spec's test sizes: the cartesian product of [sizes] that meets `require`,
        capped at `max_cases` (keeping the smallest, the largest and an even spread)."""
        names = list(self.sizes)
        if combinations(self.sizes) > MAX_COMBINATIONS:
            raise exprs.ExprError(f"[sizes] makes {combinations(self.sizes)} combinations (at most {MAX_COMBINATIONS})")
        combos = [dict(zip(names, vals)) for vals in itertools.product(*(self.sizes[n] for n in names))]
        combos = [c for c in combos if self.satisfies(c)]
        if len(combos) > self.max_cases:
            step = (len(combos) - 1) / (self.max_cases - 1)
            combos = [combos[round(i * step)] for i in range(self.max_cases)]
        return combos

    def bench_cases(self) -> list[dict[str, int]]:
        """The sizes that are timed: [bench] (names it omits take their largest test size),
        or the largest test case."""
        if not self.bench:
            cases = self.cases()
            if not cases:
                return []
            return [max(cases, key=lambda c: self.elements(c))]
        table = {n: self.bench.get(n, [max(v)]) for n, v in self.sizes.items()}
        table.update({n: v for n, v in self.bench.items() if n not in table})
        names = list(table)
        if combinations(table) > MAX_COMBINATIONS:
            raise exprs.ExprError(f"[bench] makes {combinations(table)} combinations (at most {MAX_COMBINATIONS})")
        combos = [dict(zip(names, vals)) for vals in itertools.product(*(table[n] for n in names))]
        return [c for c in combos if self.satisfies(c)]

    # ---- evaluation --------------------------------------------------------------------
    def launch_dims(self, sizes: dict[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        def dims(exprs_: tuple[str, ...]) -> tuple[int, int, int]:
            vals = [exprs.evaluate_int(e, sizes) for e in exprs_]
            return tuple((vals + [1, 1, 1])[:3])  # type: ignore[return-value]
        return dims(self.grid), dims(self.block), exprs.evaluate_int(self.shared_mem, sizes)

    def shape(self, arg: str, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(exprs.evaluate_int(e, sizes) for e in self.args[arg].shape)

    def scalar(self, arg: str, sizes: dict[str, int]) -> int | float:
        a = self.args[arg]
        assert a.value is not None, arg   # every by-value argument has one (the validator's rule)
        v = exprs.evaluate(a.value, sizes)
        return float(v) if a.dtype.is_float else int(v)

    def elements(self, sizes: dict[str, int]) -> int:
        total = 0
        for a in self.args.values():
            if a.pointer:
                n = 1
                for d in self.shape(a.name, sizes):
                    n *= d
                total += n
        return total

    def bytes_moved(self, sizes: dict[str, int]) -> int:
        """The fewest bytes the kernel must move: every input read once, every output written
        once (in-place arguments both)."""
        total = 0
        for a in self.args.values():
            if not a.pointer:
                continue
            n = a.dtype.itemsize
            for d in self.shape(a.name, sizes):
                n *= d
            total += n * (2 if a.inout else 1)
        return total

    def flop_count(self, sizes: dict[str, int]) -> float | None:
        return float(exprs.evaluate(self.flops, sizes)) if self.flops else None

    # ---- the launch configuration of one version of the kernel ---------------------------
    LAUNCH_FIELDS = ("grid", "block", "shared_mem")

    @property
    def launch(self) -> tuple[tuple[str, ...], tuple[str, ...], str]:
        return self.grid, self.block, self.shared_mem

    def with_launch(self, other: "Spec") -> "Spec":
        """This spec, launched the way `other` says (a rewrite may change only the launch)."""
        return dataclasses.replace(self, grid=other.grid, block=other.block, shared_mem=other.shared_mem)

    def changed_beyond_launch(self, other: "Spec") -> list[str]:
        """Fields other than the launch configuration in which `other` differs from this spec:
        what the test harness means (sizes, arguments, tolerances) must not move with a rewrite.
        [sizes] may gain values (`only_adds_cases`): more cases checked, never fewer."""
        return [f.name for f in dataclasses.fields(self)
                if f.name not in self.LAUNCH_FIELDS + ("added_cases",) and getattr(self, f.name) != getattr(other, f.name)
                and not (f.name == "sizes" and self.only_adds_cases(other))]

    def only_adds_cases(self, other: "Spec") -> bool:
        """`other`'s [sizes] hold every value of this one's, under the same names: a rewrite may add
        sizes for the gate to check (both versions of a size dispatch), never take one away."""
        return set(other.sizes) == set(self.sizes) and all(set(v) <= set(other.sizes[n]) for n, v in self.sizes.items())

    def with_cases_of(self, other: "Spec") -> "Spec":
        """This spec with the cases `other`'s [sizes] add to its own as `added_cases` (where they
        only add, see only_adds_cases; at most `max_cases` of them, the smallest, the largest and an
        even spread). Its [sizes] stay as they are, so every case it chose before — the quick
        gate's picks, the edge sizes around its largest values — is chosen still."""
        if other.sizes == self.sizes or not self.only_adds_cases(other):
            return self
        names = list(self.sizes)
        if combinations(other.sizes) > MAX_COMBINATIONS:
            return self
        old = set(itertools.product(*(self.sizes[n] for n in names)))
        new = [dict(zip(names, v)) for v in itertools.product(*(other.sizes[n] for n in names)) if v not in old]
        new = sorted((c for c in new if self.satisfies(c)), key=self.elements)
        if len(new) > self.max_cases:
            step = (len(new) - 1) / (self.max_cases - 1)
            new = [new[round(i * step)] for i in range(self.max_cases)]
        return dataclasses.replace(self, added_cases=tuple(tuple(sorted(c.items())) for c in new))


def arg_path(name: str) -> tuple[str, ...]:
    """Where an argument is in the TOML: ("args", "out"), a struct's field ("args", "p", "inner", "x")."""
    return ("args", *name.split("."))


def combinations(table: dict[str, list[int]]) -> int:
    n = 1
    for values in table.values():
        n *= max(1, len(values))
    return n


def parse_init(text: str, sizes: AbstractSet[str] = frozenset()) -> Init:
    text = text.strip()
    m = re.fullmatch(r"([a-z_]+)\s*(?:\((.*)\))?", text)
    if not m or m.group(1) not in INITS:
        raise ValueError(f"unknown init {text!r}; expected one of: normal, uniform(a, b), randint(a, b), "
                         f"arange, zeros, ones, permutation, offsets(total)")
    raw = [p.strip() for p in m.group(2).split(",")] if m.group(2) else []
    uses = set().union(*(exprs.names(p) for p in raw)) if raw else set()
    if uses - set(sizes):
        raise ValueError(f"init {text!r} uses unknown size(s) {', '.join(sorted(uses - set(sizes)))}")
    if m.group(1) == "offsets" and len(raw) != 1:
        raise ValueError("init offsets takes one bound, the total its segments add up to: offsets(V)")
    if m.group(1) == "permutation" and len(raw) > 1:
        raise ValueError("init permutation takes no bounds but the range it draws from: permutation (0 .. n-1, "
                         "n the array's elements) or permutation(V) (n distinct values of 0 .. V-1)")
    if uses:  # bounds over the sizes (randint(0, V)): evaluated per case
        one = m.group(1) in ("offsets", "permutation")
        if m.group(1) not in ("uniform", "randint", "offsets", "permutation") or len(raw) != (1 if one else 2):
            raise ValueError(f"only uniform(a, b), randint(a, b), offsets(total) and permutation(V) may use sizes "
                             f"in their bounds ({text!r})")
        return Init(m.group(1), (), tuple(raw))
    params = tuple(float(exprs.evaluate(p, {})) for p in raw)
    if m.group(1) == "offsets" and params[0] < 0:
        raise ValueError("init offsets: the total must not be negative")
    if m.group(1) in ("uniform", "randint") and len(params) != 2:
        raise ValueError(f"init {m.group(1)} needs two bounds, e.g. {m.group(1)}(-1, 1)")
    if m.group(1) == "permutation" and params and params[0] < 0:
        raise ValueError("init permutation(V): the range must not be negative")
    if m.group(1) == "normal" and len(params) not in (0, 2):
        raise ValueError("init normal takes no bounds or (mean, std)")
    return Init(m.group(1), params)
