"""The harness spec: how to run a kernel, as a TOML block comment directly above it.

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

This format is a user-facing contract (README.md documents every key). `load` turns the comment
into a validated `Spec` or raises `SpecErrors` whose diagnostics point at the line and column
inside the comment. `infer` proposes a spec for a kernel that has none.

Long because the format is one contract: its types, the positions inside the comment, one
validator per section (`_Validator`) and the checks of every case live together.
"""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
import tomllib
from dataclasses import dataclass, field

from . import dtypes, exprs, tomlpos
from ..diagnostics import Diagnostic
from ..errors import AstraError
from . import source
from .source import Kernel, SourceModel

TOP_KEYS = {"grid", "block", "shared_mem", "reference", "instantiate", "require", "sizes", "bench", "args",
            "flops", "seeds", "max_cases"}
NULL = "null"                     # a pointer parameter passed as a null pointer: `bias = "null"`
ARRAY_KEYS = {"type", "shape", "output", "inout", "init", "atol", "rtol", "table"}
SCALAR_KEYS = {"value", "type"}
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
# One step of a field path: a member, or one element of an array member (`stride[1]`). The path
# ends up in generated C++ (the layout probe, `astra_cuda.model.layout`): nothing else may pass.
FIELD_STEP = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}(\[[0-9]{1,6}\])?")


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

    @property
    def param(self) -> bool:
        """A parameter of the kernel (not a field reached through one)."""
        return not self.member_of

    @property
    def is_scalar(self) -> bool:
        """A by-value number (a kernel parameter or a struct's field): `Spec.scalar` evaluates it."""
        return not self.pointer and not self.struct

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

    def scalar(self, arg: str, sizes: dict[str, int]):
        a = self.args[arg]
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
    def launch(self) -> tuple:
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


# ---- locating keys inside the comment, for precise diagnostics -------------------------------

class _Locator:
    """Where each key and value of the comment is (`tomlpos`, indexed once): a diagnostic lands
    on the key or value it is about; what has no place of its own lands on the marker."""

    def __init__(self, kernel: Kernel):
        c = kernel.spec
        assert c is not None
        self.first_line = c.body_first_line
        self.first_col = c.body_first_col
        self.lines = c.body.split("\n")
        self.comment_span = c.span
        self._body = c.body
        self._places: dict[tuple[str, ...], tomlpos.Place] | None = None

    def _pos(self, i: int, col: int) -> tuple[int, int]:
        return self.first_line + i, (self.first_col + col if i == 0 else col)

    def place(self, path: tuple[str, ...], value: bool = False) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) in the file of the key at `path` (its value with
        `value`; a table: its header), else of the comment's start."""
        if self._places is None:
            self._places = tomlpos.index(self._body)
        found = self._places.get(path)
        span = (found.value or found.key) if found is not None and value else (found.key if found else None)
        if span is None:
            s = self.comment_span
            return s.start_line, s.start_col, s.start_line, s.start_col + 2
        line, col = self._pos(span[0], span[1])
        end_line, end_col = self._pos(span[2], span[3])
        return line, col, end_line, end_col

    def key(self, key: str, section: str | None = None) -> tuple[int, int, int]:
        """(line, col, end_col) of `key = ...` inside `[section]` (None = top level)."""
        line, col, end_line, end_col = self.place((key,) if section is None else (section, key))
        return line, col, end_col if end_line == line else col + len(key)

    def at(self, line_in_body: int, col: int) -> tuple[int, int]:
        return self._pos(line_in_body, col)


def _diag(line: int, col: int, end_col: int, message: str, *, end_line: int | None = None, fix: str = "") -> Diagnostic:
    end_line = line if end_line is None else end_line
    if end_line == line:
        end_col = max(end_col, col + 1)
    return Diagnostic(line, col, end_line, end_col, "error", message, code="spec", fix=fix)


def did_you_mean(word: str, known) -> str:
    """The closest known word (difflib), or ''."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else ""


def _parse_init(text: str, sizes: set[str] = frozenset()) -> Init:
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
    if uses:  # bounds over the sizes (randint(0, V)): evaluated per case
        if m.group(1) not in ("uniform", "randint", "offsets") or len(raw) != (1 if m.group(1) == "offsets" else 2):
            raise ValueError(f"only uniform(a, b), randint(a, b) and offsets(total) may use sizes in their bounds "
                             f"({text!r})")
        return Init(m.group(1), (), tuple(raw))
    params = tuple(float(exprs.evaluate(p, {})) for p in raw)
    if m.group(1) == "offsets" and params[0] < 0:
        raise ValueError("init offsets: the total must not be negative")
    if m.group(1) in ("uniform", "randint") and len(params) != 2:
        raise ValueError(f"init {m.group(1)} needs two bounds, e.g. {m.group(1)}(-1, 1)")
    if m.group(1) == "permutation" and params:
        raise ValueError("init permutation takes no bounds: its values are 0 .. n-1, n the array's elements")
    if m.group(1) == "normal" and len(params) not in (0, 2):
        raise ValueError("init normal takes no bounds or (mean, std)")
    return Init(m.group(1), params)


def split_template_args(instantiate: str) -> list[str]:
    """'<__half, 4>' -> ['__half', '4'] (commas inside nested <> or () are kept)."""
    s = instantiate.strip()
    if s.startswith("<") and s.endswith(">"):
        s = s[1:-1]
    return exprs.split_top_level(s)


# What a template argument may be made of: types (also qualified, templated, pointers, const)
# and integer or boolean constants (also named ones). Never an expression that calls, takes an
# address or branches: the arguments end up in generated C++.
_TEMPLATE_ARG_NODES = frozenset({
    "template_argument_list", "type_descriptor", "primitive_type", "type_identifier",
    "namespace_identifier", "qualified_identifier", "template_type", "sized_type_specifier",
    "type_qualifier", "abstract_pointer_declarator", "number_literal", "true", "false", "identifier",
    "<", ">", ",", "::", "*", "const", "volatile", "unsigned", "signed", "long", "short", "int", "char",
})
MAX_INSTANTIATE_CHARS = 300


def parse_template_args(instantiate: str) -> str:
    """The spec's `instantiate`, checked to be a template argument list of types and integer
    constants (parsed with tree-sitter), in canonical form '<A, B>'. ValueError otherwise."""
    text = instantiate.strip()
    if len(text) > MAX_INSTANTIATE_CHARS:
        raise ValueError(f"`instantiate` is too long (at most {MAX_INSTANTIATE_CHARS} characters)")
    if not text.startswith("<"):
        text = f"<{text}>"
    code = f"void* astra_probe_ = &astra_probe{text};".encode()
    tree = source.parser().parse(code)
    decls = tree.root_node.children
    lists = [n for n in _nodes(tree.root_node) if n.type == "template_argument_list"]
    outer = lists[0] if lists else None
    if (tree.root_node.has_error or len(decls) != 1 or outer is None
            or outer.text.decode() != text or outer.parent.type != "template_function"):
        raise ValueError(f"`instantiate` must be template arguments only, e.g. \"<__half, 4>\" (got {text!r})")
    args = []
    for child in outer.named_children:
        for n in _nodes(child):
            if n.type not in _TEMPLATE_ARG_NODES:
                raise ValueError(f"`instantiate` takes types and integer constants only; "
                                 f"{n.text.decode()!r} is not one")
        args.append(" ".join(child.text.decode().split()))
    if not args:
        raise ValueError("`instantiate` gives no template argument")
    return "<" + ", ".join(args) + ">"


def _nodes(root):
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def load(kernel: Kernel, model: SourceModel | None = None) -> Spec:
    """Parse and validate the kernel's spec comment. Raises SpecErrors (all problems found)."""
    if kernel.spec is None:
        raise AstraError(f"kernel {kernel.name!r} has no harness spec (a /* @astra ... */ comment above it); "
                         f"run `astra spec FILE --kernel {kernel.name}` to get a proposed one")
    loc = _Locator(kernel)
    if len(kernel.spec.body) > MAX_SPEC_CHARS:
        s = kernel.spec.span
        raise SpecErrors([_diag(s.start_line, s.start_col, s.start_col + 2,
                                f"the spec comment is {len(kernel.spec.body):,} characters long (at most "
                                f"{MAX_SPEC_CHARS:,}): a harness spec is a few lines")])
    v = _Validator(kernel, model, loc, _toml(kernel, loc))
    v.top_keys()
    grid, block = v.dim_list("grid"), v.dim_list("block")
    shared_mem = str(v.data.get("shared_mem", "0"))
    sizes, bench = v.sizes()
    v.launch(grid, block, shared_mem)
    require, flops = v.require(), v.flops()
    reference = v.reference()
    instantiate, targs = v.instantiate()
    seeds, max_cases = v.counts()
    args = v.args(targs)
    if v.errors:
        raise SpecErrors(sorted(v.errors, key=lambda d: (d.line, d.col))[:MAX_SPEC_ERRORS])
    spec = Spec(kernel=kernel.name, grid=grid, block=block, shared_mem=shared_mem, reference=reference,
                instantiate=instantiate, require=require, sizes=sizes, bench=bench, args=args,
                flops=flops, seeds=seeds, max_cases=max_cases, template_args=targs)
    _check_cases(spec, kernel, loc)
    return spec


def _toml(kernel: Kernel, loc: _Locator) -> dict:
    """The comment's TOML, or SpecErrors at the syntax error's place."""
    assert kernel.spec is not None
    try:
        return tomllib.loads(kernel.spec.body)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        if m:
            line, col = loc.at(int(m.group(1)) - 1, int(m.group(2)) - 1)
        else:
            line, col = kernel.spec.span.start_line, kernel.spec.span.start_col
        raise SpecErrors([_diag(line, col, col + 1, f"TOML syntax error: {msg}")]) from None
    except RecursionError:  # tomllib descends once per nested [ or {
        s = kernel.spec.span
        raise SpecErrors([_diag(s.start_line, s.start_col, s.start_col + 2,
                                "TOML nested too deeply (arrays or tables inside each other)")]) from None


class _Validator:
    """One validator per section of a spec's TOML; every problem is collected (`errors`) at the
    line and column of its key, so a user sees them all at once."""

    def __init__(self, kernel: Kernel, model: SourceModel | None, loc: _Locator, data: dict):
        self.kernel, self.model, self.loc, self.data = kernel, model, loc, data
        self.errors: list[Diagnostic] = []
        self.known: set[str] = set()  # the size names, once [sizes] is read

    def err(self, message: str, key: str, section: str | None = None) -> None:
        self.err_at(message, (key,) if section is None else (section, key))

    def err_at(self, message: str, path: tuple[str, ...], *, value: bool = False, fix: str = "") -> None:
        """A problem at the key of `path` (or its value), with what it should read instead."""
        line, col, end_line, end_col = self.loc.place(path, value)
        self.errors.append(_diag(line, col, end_col, message, end_line=end_line, fix=fix))

    def unknown(self, what: str, word: str, known, path: tuple[str, ...], *, value: bool = False,
                listing: bool = True) -> None:
        """`word` is not one of `known`: at its place, with the closest known word."""
        close = did_you_mean(word, known)
        hint = f"; did you mean {close!r}?" if close else (f" (known: {', '.join(sorted(known))})" if listing else "")
        fix = ""
        if close:
            table = isinstance(self._at(path), dict) and not value and len(path) == 1
            fix = f"[{close}]" if table else (f'"{close}"' if value else close)
        self.err_at(f"unknown {what} {word!r}{hint}", path, value=value, fix=fix)

    def _at(self, path: tuple[str, ...]):
        node = self.data
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        return node

    def top_keys(self) -> None:
        for k in [k for k in self.data if k not in TOP_KEYS][:MAX_SPEC_ERRORS]:
            self.unknown("key", k, TOP_KEYS, (k,))

    def dim_list(self, key: str) -> tuple[str, ...]:
        """`grid` or `block`: 1 to 3 integer expressions (required)."""
        v = self.data.get(key)
        if v is None:
            self.err(f"missing `{key}` (up to 3 integer expressions, e.g. {key} = [\"n\"])", key)
            return ()
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list) or not (1 <= len(v) <= 3):
            self.err(f"`{key}` must be a list of 1 to 3 integer expressions", key)
            return ()
        return tuple(str(x) for x in v)

    def size_table(self, key: str, written: str | None = None) -> dict[str, list[int]]:
        """[key] (as `written`, when misspelt: its names still count, so one typo gives one error)."""
        key = written or key
        raw = self.data.get(key, {})
        if not isinstance(raw, dict):
            self.err(f"[{key}] must be a table of size name = list of integers", key)
            return {}
        if len(raw) > MAX_SIZE_NAMES:
            self.err(f"[{key}] names {len(raw)} sizes (at most {MAX_SIZE_NAMES})", key)
            return {}
        table = {}
        for name, vals in raw.items():
            if isinstance(vals, int) and not isinstance(vals, bool):
                vals = [vals]
            if not isinstance(vals, list) or not vals or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in vals):
                self.err(f"size {name!r} must be a non-empty list of non-negative integers", name, key)
                continue
            if len(vals) > MAX_SIZE_VALUES:
                self.err(f"size {name!r} lists {len(vals)} values (at most {MAX_SIZE_VALUES})", name, key)
                continue
            if any(x >= 1 << 48 for x in vals):
                self.err(f"size {name!r}: {max(vals)} is too large for a size (at most 2**48)", name, key)
                continue
            table[name] = list(vals)
        if combinations(table) > MAX_COMBINATIONS:
            self.err(f"[{key}] makes {combinations(table)} combinations of sizes (at most {MAX_COMBINATIONS}): "
                     f"list fewer values", key)
            return {}
        return table

    def sizes(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """[sizes] (required) and [bench], whose names must be among the sizes."""
        misspelt = None if "sizes" in self.data else next(
            (k for k in self.data if k not in TOP_KEYS and did_you_mean(k, TOP_KEYS) == "sizes"), None)
        sizes = self.size_table("sizes", misspelt)
        if "sizes" not in self.data and misspelt is None:
            self.err("missing [sizes] table (the test sizes, e.g. n = [1, 1000, 4096])", "sizes")
        bench = self.size_table("bench")
        for name in bench:
            if name not in sizes:
                close = did_you_mean(name, sizes)
                self.err_at(f"bench size {name!r} is not one of the [sizes] names ({', '.join(sizes) or 'none'})"
                            + (f"; did you mean {close!r}?" if close else ""), ("bench", name), fix=close)
        self.known = set(sizes)
        return sizes, bench

    def check_expr(self, expr, key: str, section: str | None = None, what: str = "",
                   path: tuple[str, ...] | None = None) -> bool:
        """A size expression over the known sizes (parsed and bounded, never evaluated here);
        a problem lands on the expression itself when `path` names its place."""
        at = path if path is not None else ((key,) if section is None else (section, key))
        value = path is not None
        try:
            unknown = exprs.names(expr) - self.known
        except exprs.ExprError as e:
            self.err_at(f"{what}{e}", at, value=value)
            return False
        if unknown:
            close = [c for c in (did_you_mean(u, self.known) for u in sorted(unknown)) if c]
            self.err_at(f"{what}expression {expr!r} uses unknown size(s) {', '.join(sorted(unknown))} "
                        f"(sizes: {', '.join(sorted(self.known)) or 'none'})"
                        + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""), at, value=value)
            return False
        return True

    def launch(self, grid: tuple[str, ...], block: tuple[str, ...], shared_mem: str) -> None:
        for key, dims in (("grid", grid), ("block", block)):
            listed = isinstance(self.data.get(key), list)
            for i, e in enumerate(dims):
                self.check_expr(e, key, what=f"{key}: ", path=(key, str(i)) if listed else (key,))
        self.check_expr(shared_mem, "shared_mem", what="shared_mem: ",
                        path=("shared_mem",) if "shared_mem" in self.data else None)

    def require(self) -> tuple[str, ...]:
        require = self.data.get("require", [])
        if isinstance(require, str):
            require = [require]
        if not isinstance(require, list) or not all(isinstance(r, str) for r in require):
            self.err("`require` must be a list of condition strings, e.g. [\"d % 2 == 0\"]", "require")
            require = []
        for r in require:
            self.check_expr(r, "require", what="require: ")
        return tuple(require)

    def flops(self) -> str | None:
        flops = self.data.get("flops")
        if flops is None:
            return None
        self.check_expr(str(flops), "flops", what="flops: ")
        return str(flops)

    def reference(self) -> str | None:
        """Another kernel of the file, taking the same parameters."""
        reference = self.data.get("reference")
        if reference is None:
            return None
        if not isinstance(reference, str):
            self.err("`reference` must be the name of another kernel in this file", "reference")
            return None
        if self.model is not None:
            ref = self.model.kernel(reference)
            if ref is None:
                self.err(f"reference kernel {reference!r} is not in this file "
                         f"(kernels: {', '.join(k.name for k in self.model.kernels)})", "reference")
            elif [p.name for p in ref.params] != [p.name for p in self.kernel.params] and \
                    len(ref.params) != len(self.kernel.params):
                self.err(f"reference kernel {reference!r} must take the same parameters as {self.kernel.name!r}",
                         "reference")
        return reference

    def instantiate(self) -> tuple[str | None, dict[str, str]]:
        """Template arguments only (parsed with tree-sitter, re-emitted), and what each parameter
        of the template becomes."""
        kernel = self.kernel
        instantiate = self.data.get("instantiate")
        if kernel.is_template and not instantiate:
            self.err(f"kernel {kernel.name!r} is a template: add instantiate = \"<...>\" with its template "
                     "arguments", "instantiate" if "instantiate" in self.data else "grid")
        targs: dict[str, str] = {}
        if not instantiate:
            return instantiate, targs
        if not isinstance(instantiate, str):
            self.err("`instantiate` must be a string such as \"<__half>\"", "instantiate")
            return None, targs
        try:
            instantiate = parse_template_args(instantiate)
        except ValueError as e:
            self.err(str(e), "instantiate")
            return None, targs
        if instantiate:
            vals = split_template_args(instantiate)
            if kernel.is_template and len(vals) > len(kernel.template_params):
                self.err(f"`instantiate` gives {len(vals)} template arguments; {kernel.name!r} has "
                         f"{len(kernel.template_params)}", "instantiate")
            targs = dict(zip(kernel.template_param_names, vals))
        return instantiate, targs

    def counts(self) -> tuple[int, int]:
        """`seeds` and `max_cases`, within their caps."""
        seeds = self.data.get("seeds", 2)
        if not isinstance(seeds, int) or isinstance(seeds, bool) or not 1 <= seeds <= MAX_SEEDS:
            self.err(f"`seeds` must be an integer from 1 to {MAX_SEEDS}", "seeds")
            seeds = 2
        max_cases = self.data.get("max_cases", DEFAULT_MAX_CASES)
        if not isinstance(max_cases, int) or isinstance(max_cases, bool) or not 1 <= max_cases <= MAX_CASES_CAP:
            self.err(f"`max_cases` must be an integer from 1 to {MAX_CASES_CAP}", "max_cases")
            max_cases = DEFAULT_MAX_CASES
        return seeds, max_cases

    def args(self, targs: dict[str, str]) -> dict[str, ArgSpec]:
        """[args]: one entry per kernel parameter, each a pointer's, a scalar's or a struct's
        description (a struct's fields follow it, as entries of their own). A parameter whose
        type the instantiation makes a pointer (`scale_type` = `at::Half *`) is a pointer's."""
        kernel, data, loc = self.kernel.instantiated(targs), self.data, self.loc
        raw_args = data.get("args", {})
        if not isinstance(raw_args, dict):
            self.err("[args] must be a table with one entry per kernel parameter", "args")
            raw_args = {}
        if "args" not in data:
            self.err(f"missing [args] table (one entry per parameter of {kernel.name!r})", "args")
        args: dict[str, ArgSpec] = {}
        params = {p.name: p for p in kernel.params}
        for name in raw_args:
            if name not in params:
                close = did_you_mean(name, params)
                self.err_at(f"unknown parameter {name!r}: {kernel.name!r} takes {', '.join(params) or 'no parameters'}"
                            + (f"; did you mean {close!r}?" if close else ""), ("args", name), fix=close)
        for p in kernel.params:
            if p.name not in raw_args:
                if "args" in data:
                    sec_line = next((i for i, ln in enumerate(loc.lines) if ln.strip() == "[args]"), None)
                    if sec_line is not None:
                        line, col = loc.at(sec_line, loc.lines[sec_line].index("["))
                        self.errors.append(_diag(line, col, col + 6, f"missing parameter {p.name!r} ({p.type}) in [args]"))
                    else:
                        self.err(f"missing parameter {p.name!r} ({p.type}) in [args]", "args")
                continue
            v = raw_args[p.name]
            cpp_dtype = dtypes.from_cpp(targs.get(p.base_type, p.base_type))
            if p.is_pointer:
                arg = self.pointer_arg(p, v, cpp_dtype)
            elif cpp_dtype is None and _describes_struct(v):
                for a in self.struct_arg(p, v):
                    args[a.name] = a
                continue
            else:
                arg = self.scalar_arg(p, v, cpp_dtype)
            if arg is not None:
                args[p.name] = arg
        return args

    def pointer_arg(self, p, v, cpp_dtype) -> ArgSpec | None:
        if v == NULL:
            return ArgSpec(p.name, False, dtypes.BY_NAME["uint64"], value=0, null=True)
        if not isinstance(v, dict):
            self.err(f"parameter {p.name!r} is a pointer ({p.type}): describe it as "
                     f"{{ type = \"...\", shape = [...] }}, or as \"{NULL}\" for a null pointer", p.name, "args")
            return None
        table = v.get("table")
        if table is not None:
            return self.table_arg(p, v, table)
        if p.type.count("*") > 1:
            self.err(f"parameter {p.name!r} ({p.type}) points to pointers: describe it as a table of device "
                     f"pointers, e.g. {{ type = \"{p.base_type if dtypes.lookup(p.base_type) else 'float'}\", "
                     f"shape = [\"n\"], table = \"count\" }}", p.name, "args")
            return None
        return self.buffer(p.name, p.type, p.is_const, v, cpp_dtype, ("args", p.name))

    def buffer(self, name: str, ctype: str, is_const: bool, v: dict, cpp_dtype, at: tuple[str, ...],
               member_of: str = "") -> ArgSpec | None:
        """A buffer the kernel reaches: a pointer parameter, a struct's pointer field, a table's entries."""
        for k in v:
            if k not in ARRAY_KEYS or (k == "table" and member_of):
                self.unknown(f"key for pointer {name!r}:", k, ARRAY_KEYS - {"table"} if member_of else ARRAY_KEYS,
                             (*at, k))
        tname = v.get("type")
        dt = dtypes.lookup(tname) if isinstance(tname, str) else None
        if dt is None:
            if tname is None and cpp_dtype is not None:
                dt = cpp_dtype
            else:
                self.unknown_type(at, tname)
                return None
        if cpp_dtype is not None and cpp_dtype.np != dt.np:
            self.err_at(f"parameter {name!r}: spec type {dt.name!r} does not match the C++ type {ctype!r}",
                        (*at, "type") if "type" in v else at, value="type" in v,
                        fix=f'"{cpp_dtype.name}"' if "type" in v else "")
        shape = v.get("shape")
        if not isinstance(shape, list) or not shape:
            self.err_at(f"parameter {name!r}: `shape` must be a non-empty list of size expressions",
                        (*at, "shape") if "shape" in v else at, value="shape" in v)
            return None
        shape = tuple(str(s) for s in shape)
        for i, s in enumerate(shape):
            self.check_expr(s, name, "args", what=f"parameter {name!r} shape: ", path=(*at, "shape", str(i)))
        output = bool(v.get("output", False))
        inout = bool(v.get("inout", False))
        if (output or inout) and is_const:
            self.err_at(f"parameter {name!r} is const ({ctype}) but the spec says it is written", at)
        try:
            init = _parse_init(str(v.get("init", "normal")), self.known)
        except (ValueError, exprs.ExprError) as e:
            self.err_at(f"parameter {name!r}: {e}", (*at, "init"), value=True)
            init = Init("normal")
        tol = {}
        for tk in ("atol", "rtol"):
            if tk in v:
                if not isinstance(v[tk], (int, float)) or isinstance(v[tk], bool) or v[tk] < 0:
                    self.err_at(f"parameter {name!r}: `{tk}` must be a non-negative number", (*at, tk), value=True)
                else:
                    tol[tk] = float(v[tk])
        return ArgSpec(name, True, dt, shape, output=output and not inout, inout=inout, init=init,
                       member_of=member_of, **tol)

    def table_arg(self, p, v: dict, table) -> ArgSpec | None:
        """`T** p` (or 64-bit integers holding addresses): `table` pointers, each to a buffer of
        `shape`; Astra allocates them as one buffer of [table, *shape] and passes a table of
        pointers to its rows."""
        at = ("args", p.name)
        stars = p.type.count("*")
        word = dtypes.from_cpp(p.base_type)
        if not (stars > 1 or (stars == 1 and word is not None and not word.is_float and word.itemsize == 8)):
            self.err_at(f"parameter {p.name!r} ({p.type}) cannot hold a table of pointers: a table is a `T**` "
                        f"(or a pointer to 64-bit integers holding addresses)", (*at, "table"))
            return None
        if not isinstance(table, (str, int)) or isinstance(table, bool):
            self.err_at(f"parameter {p.name!r}: `table` is the number of pointers, a size expression such as "
                        f"\"layers\"", (*at, "table"), value=True)
            return None
        if not self.check_expr(str(table), p.name, "args", what=f"parameter {p.name!r} table: ",
                               path=(*at, "table")):
            return None
        elem = dtypes.from_cpp(p.base_type) if stars > 1 else None
        data_const = "const" in p.type.split("*")[0].split() if stars > 1 else False
        a = self.buffer(p.name, p.type, data_const, v, elem, at)
        if a is None:
            return None
        return dataclasses.replace(a, shape=(str(table), *a.shape), table=str(table))

    def struct_arg(self, p, v: dict) -> list[ArgSpec]:
        """A struct passed by value: the fields the spec gives, each described like an argument
        (`p.out = { type = "float", shape = ["n"], output = true }`, `p.n = "n"`); fields left out
        are zero. Where each lies in the struct comes from the compiler (`astra_cuda.model.layout`)."""
        members: list[ArgSpec] = []
        paths: list[str] = []

        def walk(table: dict, prefix: str, at: tuple[str, ...], depth: int) -> None:
            for key, value in table.items():
                here = (*at, key)
                if not FIELD_STEP.fullmatch(key):
                    self.err_at(f"`{p.name}.{prefix}{key}`: a field is a member's name, or one element of an "
                                f"array member (\"stride[1]\")", here)
                    continue
                path = prefix + key
                if isinstance(value, dict) and not value.keys() & {"shape", "value", "type", "table"}:
                    if depth + 1 >= MAX_FIELD_DEPTH:
                        self.err_at(f"`{p.name}.{path}`: fields nest at most {MAX_FIELD_DEPTH} deep", here)
                    else:
                        walk(value, path + ".", here, depth + 1)
                    continue
                if len(paths) >= MAX_FIELDS:
                    self.err_at(f"struct parameter {p.name!r}: at most {MAX_FIELDS} fields", here)
                    return
                full = f"{p.name}.{path}"
                if isinstance(value, dict) and "shape" in value:
                    a = self.buffer(full, "a field", False, value, None, here, member_of=p.name)
                else:
                    a = self.scalar_value(full, "a field", value, None, here, member_of=p.name)
                paths.append(path)
                if a is not None:
                    members.append(a)

        walk(v, "", ("args", p.name), 0)
        return [ArgSpec(p.name, False, dtypes.BY_NAME["uint8"], struct=True, fields=tuple(paths))] + members

    def unknown_type(self, where: tuple[str, ...], tname) -> None:
        at = (*where, "type")
        name = ".".join(where[1:])
        if not isinstance(tname, str):
            self.err_at(f"parameter {name!r}: `type` must be a type name such as \"float\"", at, value=True)
            return
        self.unknown(f"type for parameter {name!r}:", tname, set(dtypes.BY_NAME), at, value=True, listing=False)
        if not did_you_mean(tname, dtypes.BY_NAME):
            d = self.errors[-1]
            self.errors[-1] = dataclasses.replace(d, message=d.message + " (types: half, bfloat16, float, double, "
                                                  "float8_e4m3fn, float8_e5m2, int8..int64, uint8..uint64, bool)")

    def scalar_arg(self, p, v, cpp_dtype) -> ArgSpec | None:
        return self.scalar_value(p.name, p.type, v, cpp_dtype, ("args", p.name))

    def scalar_value(self, name: str, ctype: str, v, cpp_dtype, at: tuple[str, ...],
                     member_of: str = "") -> ArgSpec | None:
        value, tname = v, None
        if isinstance(v, dict):
            value, tname = v.get("value"), v.get("type")
            for k in v:
                if k not in SCALAR_KEYS:
                    self.unknown(f"key for scalar {name!r}:", k, SCALAR_KEYS, (*at, k))
        if value is None or isinstance(value, (bool, list, dict)):
            self.err_at(f"{'field' if member_of else 'parameter'} {name!r} is a scalar ({ctype}): give an "
                        f"expression over the sizes, e.g. {name} = \"n\"", at)
            return None
        dt = dtypes.lookup(tname) if isinstance(tname, str) else cpp_dtype
        typed = dt is not None
        if dt is None:
            if isinstance(tname, str):
                self.unknown_type(at, tname)
                return None
            if not member_of:
                self.err_at(f"parameter {name!r}: cannot tell the scalar type of {ctype!r}; write it as "
                            f"{name} = {{ value = ..., type = \"float\" }} (or the type it is)", at)
                return None
            dt = dtypes.BY_NAME["double"]   # a field: the compiler's type of the field decides (layout)
        if isinstance(value, str):
            self.check_expr(value, name, "args", what=f"parameter {name!r}: ",
                            path=(*at, "value") if isinstance(v, dict) else at)
        return ArgSpec(name, False, dt, value=value, member_of=member_of, typed=typed)


def _describes_struct(v) -> bool:
    """A by-value parameter described by its fields (`p.out = {...}`), not `{ value, type }`."""
    return isinstance(v, dict) and not (v.keys() <= SCALAR_KEYS and "value" in v)


def _check_cases(spec: Spec, kernel: Kernel, loc: _Locator) -> None:
    """Semantic checks that need evaluation: every case must give positive launch dimensions
    and buffers of a sane size (estimated here, before anything is allocated)."""
    assert kernel.spec is not None
    problems: list[Diagnostic] = []
    line, col = kernel.spec.span.start_line, kernel.spec.span.start_col
    try:
        cases = spec.cases()
        timed = spec.bench_cases()
    except exprs.ExprError as e:
        raise SpecErrors([_diag(*loc.key("require"), f"require: {e}")]) from None
    for case in cases[:64] + timed[:64]:
        try:
            g, b, _ = spec.launch_dims(case)
            for a in spec.args.values():
                if a.is_scalar:
                    spec.scalar(a.name, case)
            _case_bytes(spec, case)
        except exprs.ExprError as e:
            problems.append(_diag(line, col, col + 2, str(e)))
            break
        except _TooLarge as e:
            line_, col_, end_line_, end_col_ = loc.place(arg_path(e.arg))
            problems.append(_diag(line_, col_, end_col_ if end_line_ == line_ else col_ + 1, str(e)))
            break
        if min(b) < 1 or b[0] * b[1] * b[2] > 1024:
            problems.append(_diag(line, col, col + 2, f"block {b} at sizes {case} is not between 1 and 1024 threads"))
            break
        if min(g) < 1 or g[0] >= 1 << 31 or g[1] > 65535 or g[2] > 65535:
            problems.append(_diag(*loc.key("grid"), f"grid {g} at sizes {case} is not a valid CUDA grid"))
            break
    if not cases:
        problems.append(_diag(line, col, col + 2, "no test case: [sizes] is empty or `require` rules out every combination"))
    if problems:
        raise SpecErrors(problems[:1])


class _TooLarge(Exception):
    def __init__(self, arg: str, message: str):
        super().__init__(message)
        self.arg = arg


def _case_bytes(spec: Spec, case: dict[str, int]) -> int:
    """Bytes of all buffers of one case, or _TooLarge naming the argument that breaks the cap."""
    total = 0
    for a in spec.args.values():
        if not a.pointer:
            continue
        shape = spec.shape(a.name, case)
        if any(d < 0 for d in shape):
            raise _TooLarge(a.name, f"parameter {a.name!r}: negative shape {shape} at sizes {case}")
        if a.table and not 1 <= shape[0] <= MAX_TABLE_ENTRIES:
            raise _TooLarge(a.name, f"parameter {a.name!r}: a table of {shape[0]} pointers at sizes {case} "
                                    f"(from 1 to {MAX_TABLE_ENTRIES})")
        n = a.dtype.itemsize
        for d in shape:
            n *= d
        total += n
        if total > MAX_CASE_BYTES:
            raise _TooLarge(a.name, f"parameter {a.name!r}: the buffers of sizes {case} would take "
                                    f"{total / 2**30:.1f} GiB (at most {MAX_CASE_BYTES >> 30} GiB per case)")
    return total


def validate(kernel: Kernel, model: SourceModel | None = None) -> list[Diagnostic]:
    if kernel.spec is None:
        return []
    try:
        load(kernel, model)
    except SpecErrors as e:
        return e.diagnostics
    except AstraError as e:
        return [_diag(kernel.spec.span.start_line, kernel.spec.span.start_col,
                      kernel.spec.span.start_col + 2, e.message)]
    return []
