"""What a `.cu` file holds, as the source model gives it (`astra_cuda.model.source.parse`): its kernels
(parameters, template parameters, launch bounds, spec comment, exact ranges), launch sites,
top-level items and the preprocessor conditionals around them — frozen values, with the text's
byte ↔ (line, column) conversion that places them (`Positions`).

Positions are 0-based lines and character columns (LSP's convention for ASCII text)."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tree_sitter import Node

from . import exprs

SPEC_MARK = "@astra"


@dataclass(frozen=True)
class Span:
    start_line: int
    start_col: int
    end_line: int
    end_col: int
    start_byte: int
    end_byte: int

    def contains_line(self, line: int) -> bool:
        return self.start_line <= line <= self.end_line

    def to_json(self) -> dict[str, Any]:
        """[line, column] pairs counted from 1, as a user reads them (the end column exclusive)."""
        return {"start": [self.start_line + 1, self.start_col + 1], "end": [self.end_line + 1, self.end_col + 1]}


@dataclass(frozen=True)
class Param:
    index: int
    name: str
    type: str          # as written, without the name: 'const __half* __restrict__'
    base_type: str     # element or value type: '__half', 'int64_t', 'T'
    is_pointer: bool
    is_const: bool     # the pointee is const (or the scalar is const)
    restrict: bool
    span: Span
    pack: bool = False  # a function parameter pack (`ArgTypes... args`): one argument per element

    def to_json(self) -> dict[str, Any]:
        out = {"index": self.index, "name": self.name, "type": self.type, "base_type": self.base_type,
               "pointer": self.is_pointer, "const": self.is_const, "restrict": self.restrict}
        return {**out, "pack": True} if self.pack else out


@dataclass(frozen=True)
class SpecComment:
    text: str   # the whole comment, '/* @astra ... */'
    span: Span

    @property
    def body(self) -> str:
        """The TOML between the marker line and the closing '*/'."""
        inner = self.text[2:-2] if self.text.endswith("*/") else self.text[2:]
        head, _, rest = inner.partition(SPEC_MARK)
        return rest

    @property
    def body_first_line(self) -> int:
        """0-based file line of the body's first line (the marker line itself)."""
        return self.span.start_line + self.text[: self.text.index(SPEC_MARK)].count("\n")

    @property
    def body_first_col(self) -> int:
        """Column where the body starts on its first line (just after the marker)."""
        before = self.text[: self.text.index(SPEC_MARK)]
        last_nl = before.rfind("\n")
        col = len(before) - (last_nl + 1)
        if last_nl < 0:
            col += self.span.start_col
        return col + len(SPEC_MARK)


@dataclass(frozen=True)
class ConfigVar:
    """A launch-configuration argument that is a plain name of a `dim3` variable.

    `dims` are the dim3's constructor arguments as written, when its one declaration in the
    launching host function precedes the launch, encloses it and nothing may change it after;
    otherwise `dims` is None and `problem` says why it was not followed."""
    name: str
    dims: tuple[str, ...] | None
    line: int | None        # 0-based line of the declaration, when there is one in the function
    problem: str | None = None


@dataclass(frozen=True)
class LaunchSite:
    kernel: str
    template_args: str | None
    grid: str
    block: str
    shared_mem: str | None
    stream: str | None
    args: tuple[str, ...]
    span: Span
    function: str | None  # the enclosing host function
    grid_var: ConfigVar | None = None   # set when `grid` is the name of a dim3 variable
    block_var: ConfigVar | None = None  # likewise for `block`
    via_macro: str | None = None        # the launch is written in this macro's body, used here
    conditions: tuple[str, ...] = ()    # host conditions it is launched under that its span does not show

    def to_json(self) -> dict[str, Any]:
        out = {"kernel": self.kernel, "template_args": self.template_args, "grid": self.grid,
               "block": self.block, "shared_mem": self.shared_mem, "stream": self.stream,
               "args": list(self.args), "line": self.span.start_line + 1, "function": self.function}
        return {**out, "via_macro": self.via_macro} if self.via_macro else out


@dataclass(frozen=True)
class Kernel:
    name: str
    qualified_name: str             # with enclosing namespaces: 'ns::kernel'
    params: tuple[Param, ...]
    template_params: tuple[str, ...]       # as written: 'typename T', 'int N = 4'
    template_param_names: tuple[str, ...]  # 'T', 'N'
    launch_bounds: str | None
    extern_c: bool
    span: Span              # the whole definition, from `template<` (or the first specifier) to `}`
    name_span: Span
    signature_span: Span    # from the start of the definition to the end of the parameter list
    body_span: Span
    spec: SpecComment | None
    text: str               # source text of `span`
    uses: frozenset[str]    # identifiers the kernel refers to
    overloads: tuple[Span, ...] = ()  # further definitions of the same name (enable_if overloads)

    @property
    def is_template(self) -> bool:
        return bool(self.template_params)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def template_bindings(self, values: list[str]) -> dict[str, str]:
        """What each template parameter becomes for these arguments: one each, and a trailing
        parameter pack (`typename... ArgTypes`) all the rest, joined with ', ' ('' for none)."""
        names = list(self.template_param_names)
        if names and "..." in self.template_params[-1].split("=", 1)[0]:
            fixed = dict(zip(names[:-1], values))
            return {**fixed, names[-1]: ", ".join(v.strip() for v in values[len(names) - 1:])}
        return dict(zip(names, values))

    def instantiated(self, targs: dict[str, str]) -> "Kernel":
        """The kernel with each parameter whose type is a template parameter instantiated with a
        pointer type (`scale_type scale` with `at::Half *`) a pointer parameter to that pointee,
        and a function parameter pack (`ArgTypes... args`) one parameter per element of its
        template pack (`args_0`, `args_1`: the arguments the launch passes; none for an empty pack)."""
        params: list[Param] = []
        taken = {p.name for p in self.params}
        for p in self.params:
            if p.pack and p.base_type in targs:
                for k, element in enumerate((a.strip() for a in exprs.split_top_level(targs[p.base_type]) if a.strip())):
                    name = f"{p.name}_{k}"
                    while name in taken:
                        name += "_"
                    taken.add(name)
                    params.append(_typed(replace(p, name=name, type=element, base_type=element, pack=False),
                                         element))
                continue
            params.append(_typed(p, targs.get(p.base_type, "")))
        params = [replace(p, index=i) if p.index != i else p for i, p in enumerate(params)]
        return replace(self, params=tuple(params)) if params != list(self.params) else self

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "qualified_name": self.qualified_name,
                "params": [p.to_json() for p in self.params],
                "template_params": list(self.template_params), "launch_bounds": self.launch_bounds,
                "extern_c": self.extern_c, "range": self.span.to_json(),
                "name_range": self.name_span.to_json(), "has_spec": self.spec is not None}


def _typed(p: Param, arg: str) -> Param:
    """`p` as the template argument `arg` makes it: a pointer parameter where `arg` is one
    pointer type (`at::Half *`), unchanged otherwise."""
    arg = " ".join(arg.split())
    if p.is_pointer or not arg.endswith("*") or arg.count("*") != 1:
        return p
    words = arg[:-1].split()
    pointee = " ".join(w for w in words if w not in ("const", "volatile", "__restrict__"))
    return replace(p, type=arg, base_type=pointee, is_pointer=True, is_const="const" in words)


@dataclass(frozen=True)
class Item:
    """A top-level item of the file, with what it defines and what it uses."""

    kind: str          # 'include' | 'macro' | 'kernel' | 'device_function' | 'host_function'
                       # | 'type' | 'variable' | 'other'
    defines: frozenset[str]
    uses: frozenset[str]
    span: Span
    text: str
    namespaces: tuple[str, ...] = ()  # enclosing namespaces, outermost first
    extern_c: bool = False
    header: str | None = None          # for includes: the header name
    device: bool = False               # device-side code or data (or usable on both sides)
    guards: tuple["Guard", ...] = ()   # the preprocessor conditionals around it, outermost first
    path: str | None = None            # the file it comes from (None: the file being modelled)


@dataclass(frozen=True)
class Guard:
    """One branch of a preprocessor conditional: `heads` are the directive lines of the
    conditional's branches up to and including this one ('#ifdef X', '#else'), so that an
    item of a later branch can be emitted under the same conditions. `key` tells one
    conditional from another."""
    key: tuple[str | None, int]
    heads: tuple[str, ...]

    @property
    def branch(self) -> int:
        return len(self.heads) - 1


@dataclass
class SourceModel:
    text: str
    kernels: list[Kernel] = field(default_factory=list)
    launches: list[LaunchSite] = field(default_factory=list)
    items: list[Item] = field(default_factory=list)
    syntax_errors: list[Span] = field(default_factory=list)
    # Names with one constant value in the file: object-like macros and file-scope const/constexpr
    # integers, name -> value as written ('MAX_THREADS' -> '1024').
    constants: dict[str, str] = field(default_factory=dict)

    def kernel(self, name: str) -> Kernel | None:
        """The kernel of that name; of overloads, the first with a spec above it."""
        hits = [k for k in self.kernels if name in (k.name, k.qualified_name)]
        return next((k for k in hits if k.spec is not None), hits[0] if hits else None)

    def launches_of(self, name: str) -> list[LaunchSite]:
        short = name.split("::")[-1]
        return [site for site in self.launches if site.kernel.split("::")[-1] == short]

    @property
    def includes(self) -> list[Item]:
        return [i for i in self.items if i.kind == "include"]

    @property
    def device_functions(self) -> list[Item]:
        return [i for i in self.items if i.kind == "device_function"]


class Positions:
    """Byte <-> (line, char column) conversion for one source text."""

    def __init__(self, text: str):
        self.text = text
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for m in re.finditer(b"\n", self.data):
            self.line_starts.append(m.end())
        # UTF-8's continuation bytes: a column counts the bytes before it less these, so it is
        # found without decoding the line (decoding made a 4 MB line of `a;` quadratic: minutes)
        self.continuations = [m.start() for m in re.finditer(rb"[\x80-\xbf]", self.data)]

    def col(self, line: int, byte_col: int) -> int:
        start = self.line_starts[line] if line < len(self.line_starts) else len(self.data)
        end = min(start + byte_col, len(self.data))
        if not self.continuations:
            return end - start
        return end - start - (bisect.bisect_left(self.continuations, end) - bisect.bisect_left(self.continuations, start))

    def span(self, node: Node, start: Node | None = None) -> Span:
        s = start or node
        (sl, sc), (el, ec) = s.start_point, node.end_point
        return Span(sl, self.col(sl, sc), el, self.col(el, ec), s.start_byte, node.end_byte)

    def slice(self, start_byte: int, end_byte: int) -> str:
        return self.data[start_byte:end_byte].decode("utf-8", errors="replace")
