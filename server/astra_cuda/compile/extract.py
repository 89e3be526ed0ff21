"""A kernel's stand-alone compilation unit, and splicing kernels into files.

`unit` cuts the unit for one kernel out of the file as nvcc's device pass sees it
(`astra_cuda.compile.devicepp` preprocesses it with the toolkit's own command and the project's flags;
`astra_cuda.compile.cut` keeps the kernel and what it needs, `#line`-mapped to the user's file and
headers) and appends compile-time checks of element types Astra cannot read itself. The unit
carries its file's text too: nvcc compiles the file itself, and `astra_cuda.compile.cutcheck` checks that
the cut means what the file means.

Also here: `header_reader` (a file's project headers read item by item, for inference),
`replace_kernel` and `splice` (a rewritten kernel, or a model's code block, put into a file).
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from . import confine
from ..model import dtypes, layout, parse_time, source, textedit
from .. import files
from .cut import HOST_HEADERS_MACRO, header_kind  # noqa: F401 (HOST_HEADERS_MACRO: for callers)
from .headers import find_header, header_digest  # noqa: F401 (header_digest: extract's public name too)
from ..errors import AstraError, NoSuchKernel
from .project import ProjectContext
from ..model.source import Guard, Item, Kernel, SourceModel

if TYPE_CHECKING:
    from ..model.spec import Spec

MAX_HEADERS = 64          # project headers read into one unit
MAX_HEADER_DEPTH = 16


@dataclass(frozen=True)
class CompileUnit:
    source: str
    kernel: str
    name_expression: str
    path: str
    include_dirs: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()  # host-only items and headers left out, for messages
    context: ProjectContext = ProjectContext()  # include paths, macros, standard of the project
    headers: tuple[str, ...] = ()  # project headers read into the unit, by path
    notes: tuple[str, ...] = ()    # what a user should know about how the unit was cut
    params: tuple[tuple[str, str], ...] = ()  # the kernel's (parameter, C++ type): no re-parse to launch it
    file_text: str = ""            # the whole file the unit was cut from (a header after its includer's lines: headers.translation_unit): what nvcc compiles (compile.nvcc)
    left_out: tuple[str, ...] = ()  # declarations the cut left out whose names the kept code uses
    appendix: str = ""             # Astra's C++ appended to whatever compiles the unit (cut or whole
                                   # file): the layout probe of struct parameters (`astra_cuda.model.layout`)
    type_checks: str = ""          # the spec's element-type checks at the end of `source` (see `type_checks`)
    project_names: frozenset[str] = frozenset()  # names the project's declarations define (`cut.Cut`; `fastpath`)
    project_macros: frozenset[str] = frozenset()  # the project's macros
    kept_names: frozenset[str] = frozenset()     # names whose every declaration the cut keeps
    # set by `fastpath.search_unit` only: the search may compile this cut with NVRTC
    # (SEARCH_NVRTC) or nvcc (SEARCH_NVCC) instead of the whole file, as the proof allowed;
    # never set on a unit a final verdict compiles
    search_cut: str = ""

    @property
    def param_types(self) -> dict[str, str]:
        return dict(self.params)

    def same_code(self, other: "CompileUnit") -> bool:
        """Whether `other` is this unit's code: equal, or cut from the same whole file text for the
        same kernel and instantiation with the same appendix and project — the search's splice of
        the kernel into the proven cut (`fastpath.search_unit`: other lines, `#line` marks, the
        same code), or a tuned copy whose text came back unchanged. A text of its own is never."""
        if self == other:
            return True
        same = ("file_text", "path", "kernel", "name_expression", "appendix", "type_checks", "context",
                "include_dirs", "params")
        return bool(self.file_text) and all(getattr(self, f) == getattr(other, f) for f in same)

    def options(self) -> list[str]:
        """Compiler options every backend passes (the file's folder, then the project's)."""
        return list(dict.fromkeys([f"-I{d}" for d in self.include_dirs] + self.context.options()))

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "name_expression": self.name_expression, "path": self.path,
                "include_dirs": list(self.include_dirs), "dropped": list(self.dropped),
                "context": self.context.to_json(), "headers": list(self.headers), "notes": list(self.notes),
                "source": self.source}


@dataclass
class _Reader:
    """Reads the project headers a file includes into one list of items, in order: only those
    a compiler of the unit may read too (`confine`), so an `#include "/etc/shadow"`, a `../`
    escape or a symbolic link out of the project is never read into a unit."""
    context: ProjectContext
    notes: list[str]
    dropped: list[str]
    headers: list[str]
    seen: set[str]
    policy: confine.Confinement
    max_headers: int = MAX_HEADERS
    max_bytes: int = 0     # of header text parsed (0: no bound); a header past it is left out
    bytes_read: int = 0

    def items(self, model: SourceModel, path: str, guards: tuple[Guard, ...] = (), depth: int = 0) -> list[Item]:
        out: list[Item] = []
        here = os.path.dirname(os.path.abspath(path))
        for item in model.items:
            if guards:
                item = _guarded(item, guards)
            if item.kind != "include":
                out.append(item)
                continue
            header = item.header or ""
            quoted = '"' in item.text.split(header)[0] if header else False
            written = f'"{header}"' if quoted else f"<{header}>"
            kind = header_kind(header)
            found, own = find_header(header, quoted, here, self.context) if kind != "implicit" else (None, False)
            if found is not None and own and not self.policy.allows(found):
                self.notes.append(f"{written} not read into the unit: it is outside your project (compilers may "
                                  "read only the project's folders, CUDA's and the system's headers)")
                self.dropped.append(f"#include {written}")
                out.append(_host_only(item))
                continue
            if found is not None and own:
                key = str(found)
                if key in self.seen:
                    continue  # read once, as `#pragma once` or an include guard would
                if depth >= MAX_HEADER_DEPTH or len(self.headers) >= self.max_headers:
                    self.notes.append(f"{written} not read into the unit: more than {self.max_headers} project headers "
                                      f"or {MAX_HEADER_DEPTH} levels deep")
                    out.append(_host_only(item))
                    continue
                self.seen.add(key)
                self.headers.append(key)
                try:
                    text = files.read_source(key)
                except AstraError as e:
                    self.notes.append(f"{written} could not be read ({e.message}); left out")
                    out.append(_host_only(item))
                    continue
                if self.max_bytes and self.bytes_read + len(text) > self.max_bytes:
                    # parsing costs about 10 µs a byte: CUTLASS's cute headers (a 1 MB generated
                    # table of MMA atoms among them) kept flash-attention's `astra spec` past 167 s
                    self.notes.append(f"{written} not read: {len(text) >> 10} KiB past the {self.max_bytes >> 20} MiB "
                                      f"of project headers read")
                    self.headers.pop()
                    out.append(_host_only(item))
                    continue
                self.bytes_read += len(text)
                try:
                    header_model = _header_model(key, text)
                except AstraError as e:
                    self.notes.append(f"{written} could not be read ({e.message}); left out")
                    out.append(_host_only(item))
                    continue
                out.extend(self.items(header_model, key, item.guards, depth + 1))
            elif kind == "device":
                out.append(item)
            elif kind == "implicit":
                self.dropped.append(f"#include {written}")
            else:
                if found is None and quoted:
                    self.notes.append(f"{written} was not found (next to {os.path.basename(path)} or on the include "
                                      f"paths); left out — give its folder with -I if the kernel needs it")
                self.dropped.append(f"#include {written}")
                out.append(_host_only(item))
        return out


def header_reader(path: str, context: ProjectContext, notes: list[str] | None = None,
                  dropped: list[str] | None = None, headers: list[str] | None = None,
                  max_headers: int = MAX_HEADERS, max_bytes: int = 0) -> _Reader:
    """A reader of the project headers of the file at `path`, under the compilers' read policy
    (at most `max_bytes` of header text parsed, where given)."""
    policy = confine.for_unit([f"-I{os.path.dirname(os.path.abspath(path))}", *context.options()])
    return _Reader(context, [] if notes is None else notes, [] if dropped is None else dropped,
                   [] if headers is None else headers, set(), policy, max_headers, max_bytes)


def project_header_texts(model: SourceModel, path: str, context: ProjectContext) -> tuple[str, ...]:
    """The texts of the project headers the file includes, directly or through each other, in the
    order a compiler reads them: only those a compiler of its unit may read (`header_reader`), each
    at most once. For the offline transformations, which use the helpers a project already wrote."""
    read: list[str] = []
    header_reader(path, context, headers=read).items(model, path)
    out = []
    for h in read:
        try:
            out.append(files.read_source(h))
        except AstraError:
            continue   # the reader said why; a header it could not read holds no helper we may use
    return tuple(out)


@lru_cache(maxsize=128)
def _header_model(path: str, text: str) -> SourceModel:
    """A project header's model, parsed once per content (every kernel of a file, and every
    save, reads the same headers; keyed on the text itself, so an edit is never missed)."""
    return source.parse(text, path=path)


def _guarded(item: Item, outer: tuple[Guard, ...]) -> Item:
    from dataclasses import replace
    return replace(item, guards=outer + item.guards)


def _host_only(item: Item) -> Item:
    """A host-only include, kept in place behind the macro only an nvcc build defines."""
    from dataclasses import replace
    return replace(item, kind="host_include")


def name_expression(kernel: Kernel, instantiate: str | None, overloaded: bool = False) -> str:
    """The expression that names the kernel (every compile takes its address: `&E`). An overloaded
    kernel is named with its own parameter list, `*static_cast<void (*)(float*, int)>(&k<float>)`,
    so the overload the spec is written above is the one compiled, launched and checked."""
    if kernel.extern_c and not kernel.is_template and not overloaded:
        return kernel.name
    # an anonymous namespace's part is empty (`ns::::k`); qualified lookup through `ns` finds `k`
    base = "::".join(p for p in kernel.qualified_name.split("::") if p)
    if kernel.is_template:
        if not instantiate:
            raise AstraError(f"kernel {kernel.name!r} is a template: its spec needs instantiate = \"<...>\"")
        inst = instantiate.strip()
        if not inst.startswith("<"):
            inst = f"<{inst}>"
        base += inst
    if overloaded:
        return f"*static_cast<{_pointer_type(kernel, instantiate)}>(&{base})"
    return base


def _pointer_type(kernel: Kernel, instantiate: str | None) -> str:
    """`void (*)(T1, T2, ...)` of the kernel's parameters, its template parameters replaced by
    the instantiation's arguments (token by token, through the parser)."""
    from ..model.spec import split_template_args
    args = split_template_args(instantiate) if kernel.is_template and instantiate else []
    subst = kernel.template_bindings(args)
    # a parameter pack (`ArgTypes... args`) stands for one parameter per element of its pack
    kparams = kernel.instantiated(subst).params if any(p.pack for p in kernel.params) else kernel.params
    decl = f"void __astra_f({', '.join(p.type for p in kparams)});"
    data = decl.encode()
    tree = source.parser().parse(data)
    hits: list[tuple[int, int, str]] = []
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type in ("type_identifier", "identifier") and n.text is not None and n.text.decode() in subst:
            hits.append((n.start_byte, n.end_byte, subst[n.text.decode()]))
        stack.extend(n.children)
    for start, end, arg in sorted(hits, reverse=True):
        data = data[:start] + arg.encode() + data[end:]
    params = data.decode()[len("void __astra_f("):-len(");")]
    return f"void (*)({params})"


def _names_in(instantiate: str | None) -> set[str]:
    """Identifiers in template arguments: a device function passed as one
    (`<float, silu<float>>`) must be in the unit too."""
    if not instantiate:
        return set()
    inst = instantiate.strip()
    node = source.parse_expression("__astra_k" + (inst if inst.startswith("<") else f"<{inst}>"))
    if node is None:
        return set()
    out, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "type_identifier", "namespace_identifier"):
            out.add((n.text or b"").decode())
        stack.extend(n.children)
    return out - {"__astra_k"}


_INTEGERS = ("char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int", "long",
             "unsigned long", "long long", "unsigned long long")


def type_checks(kernel: Kernel, name_expr: str, arg_types: dict[str, str], path: str, line: int) -> str:
    """Compile-time checks that pointer parameters whose element type Astra could not read
    (a typedef, a macro) are what the spec says: a `#define` missing or a header changed must
    never test a kernel with another element type. Integer types are checked by size and
    sign (int64_t is `long` for g++ and `long long` for NVRTC)."""
    checks = []
    for p in kernel.params:
        want = dtypes.lookup(arg_types.get(p.name, "")) if p.is_pointer else None
        if want is None or p.base_type.replace("const", "").strip() == "void":
            continue   # a `void*` is bytes of any type: nothing to check
        idx = p.index
        elem = f"typename __astra_elem<typename __astra_arg<{idx}, decltype(&{name_expr})>::type>::type"
        msg = f"Astra: the spec says `{p.name}` points to {want.name}, but its C++ type `{p.type}` is another type"
        if want.is_float or want.name == "bool":
            cond = f"__astra_is<{elem}, {want.cpp[0]}>::value"
        else:
            signed = "true" if want.name.startswith("int") else "false"
            cond = f"__astra_int<{elem}>::bytes == {want.itemsize} && __astra_int<{elem}>::is_signed == {signed}"
        # a CUDA vector of that lane type (`half2` over a half buffer) is the same memory
        vectors = sorted(v for v, (lane, _) in dtypes.VECTORS.items() if lane == want.name)
        cond = " || ".join([f"({cond})"] + [f"__astra_is<{elem}, {v}>::value" for v in vectors])
        checks.append(f'static_assert({cond}, "{msg}");')
    if not checks:
        return ""
    needs = "".join(f"#include <{h}>\n" for t, h in (("half", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h"),
                                                     ("float8_e4m3fn", "cuda_fp8.h"), ("float8_e5m2", "cuda_fp8.h"))
                    if any(getattr(dtypes.lookup(v), "name", None) == t for v in arg_types.values()))
    return (f"// Astra: element types the spec gives, checked by the compiler\n{needs}"
            "template <class A, class B> struct __astra_is { static constexpr bool value = false; };\n"
            "template <class A> struct __astra_is<A, A> { static constexpr bool value = true; };\n"
            # integers by size and sign, an enum by its underlying type, any other type (a struct such as
            # uint4, whose cast from -1 would not compile) as size 0: never an error of its own
            "template <class T, bool = __is_enum(T)> struct __astra_int "
            "{ static constexpr int bytes = 0; static constexpr bool is_signed = false; };\n"
            "template <class T> struct __astra_int<T, true> : __astra_int<__underlying_type(T)> {};\n"
            + "".join(f"template <> struct __astra_int<{t}, false> {{ static constexpr int bytes = sizeof({t}); "
                      f"static constexpr bool is_signed = ({t})(-1) < ({t})(0); }};\n" for t in _INTEGERS) +
            "template <class T> struct __astra_elem { typedef T type; };\n"
            "template <class T> struct __astra_elem<T*> { typedef T type; };\n"
            "template <class T> struct __astra_elem<const T*> { typedef T type; };\n"
            "template <class T> struct __astra_elem<volatile T*> { typedef T type; };\n"
            "template <class T> struct __astra_elem<const volatile T*> { typedef T type; };\n"
            "template <int I, class F> struct __astra_arg;\n"
            "template <class R, class A, class... P> struct __astra_arg<0, R (*)(A, P...)> { typedef A type; };\n"
            "template <int I, class R, class A, class... P> struct __astra_arg<I, R (*)(A, P...)> "
            "{ typedef typename __astra_arg<I - 1, R (*)(P...)>::type type; };\n"
            f'#line {line + 1} "{path}"\n' + "\n".join(checks) + "\n")


def unresolved_pointer_types(kernel: Kernel, template_args: dict[str, str] | None = None) -> list[str]:
    """Pointer parameters whose element type is not a spelling Astra knows (a typedef, a macro)."""
    targs = template_args or {}
    return [p.name for p in kernel.params
            if p.is_pointer and dtypes.from_cpp(targs.get(p.base_type, p.base_type)) is None]


def unit_from_model(model: SourceModel, path: str, kernel_name: str, *, instantiate: str | None = None,
                    context: ProjectContext | None = None, arg_types: dict[str, str] | None = None,
                    spec_line: int | None = None) -> CompileUnit:
    """The unit for `kernel_name`, cut from the device pass's preprocessed file
    (`astra_cuda.compile.devicepp`, `astra_cuda.compile.cut`). `arg_types` (parameter -> spec type name) adds
    compile-time checks of element types Astra cannot read itself (see `type_checks`)."""
    from . import cut as cutting
    from . import devicepp
    from . import torch_ext
    from .headers import translation_unit
    context = context or ProjectContext()
    text = translation_unit(model.text, path, context)   # a header as the .cu beside it includes it
    context = torch_ext.with_defines(context, text, path)
    kernel = model.kernel(kernel_name)
    if kernel is None:
        names = ", ".join(k.name for k in model.kernels) or "none"
        raise NoSuchKernel(f"no __global__ kernel named {kernel_name!r} in {path} (kernels: {names})")
    if instantiate is None and kernel.is_template and kernel.spec is not None:
        from ..model import spec as spec_mod  # local: spec imports source, not extract
        try:
            instantiate = spec_mod.load(kernel, model).instantiate
        except AstraError:
            instantiate = None
    overloaded = sum(k.qualified_name == kernel.qualified_name for k in model.kernels) > 1
    expr = name_expression(kernel, instantiate, overloaded)
    path = os.path.abspath(path)
    pp = devicepp.preprocess(text, path, context.options())
    namespaces = tuple(kernel.qualified_name.split("::")[:-1])   # '' for an anonymous namespace
    cut = cutting.cut(pp, kernel.name, namespaces, _names_in(instantiate), context.include_dirs)
    if not cut.found and namespaces and sum(k.name == kernel.name for k in model.kernels) == 1:
        # a namespace spelled through a macro (flash-attention's `namespace FLASH_NAMESPACE {`) has
        # another name once preprocessed; the kernel's name alone tells it apart in this file
        cut = cutting.cut(pp, kernel.name, None, _names_in(instantiate), context.include_dirs)
    if not cut.found:
        raise AstraError(f"kernel {kernel.name!r} is not in the file as nvcc's device pass sees it "
                         f"({pp.compiler}): a preprocessor conditional leaves it out, or what stands before it "
                         "does not read as C++ once preprocessed (an #include of a file that is not source?)")
    notes = []
    if cut.headers:
        notes.append("project headers read into the unit: " + ", ".join(os.path.basename(h) for h in cut.headers))
    if pp.missing:
        notes.append("not found, read as empty: " + ", ".join(f"<{m}>" for m in pp.missing)
                     + " (give their folders with -I if the kernel needs them)")
    parts = [f"// Astra: stand-alone unit for kernel {kernel.qualified_name} from {os.path.basename(path)}, "
             f"cut from {pp.compiler}\n", cut.source]
    if arg_types:
        targs = {}
        if kernel.is_template and instantiate:
            from ..model.spec import split_template_args
            targs = kernel.template_bindings(split_template_args(instantiate))
        todo = {n: arg_types[n] for n in unresolved_pointer_types(kernel, targs) if n in arg_types}
        checks = type_checks(kernel, expr, todo, path, spec_line if spec_line is not None else kernel.span.start_line)
        parts.append(checks)
    else:
        checks = ""
    quoted = any('"' in i.text for i in model.includes)
    include_dirs = (os.path.dirname(path),) if quoted else ()
    return CompileUnit(source="".join(parts), kernel=kernel.name, name_expression=expr, path=path,
                       include_dirs=include_dirs, dropped=tuple(dict.fromkeys(cut.dropped)), context=context,
                       headers=tuple(cut.headers), notes=tuple(notes),
                       params=tuple((p.name, p.type) for p in kernel.params), file_text=text,
                       left_out=tuple(cut.left_out), type_checks=checks, project_names=cut.project_names,
                       project_macros=cut.project_macros, kept_names=cut.kept_names)


def unit(text: str, path: str, kernel_name: str, *, instantiate: str | None = None,
         context: ProjectContext | None = None, arg_types: dict[str, str] | None = None,
         spec_line: int | None = None) -> CompileUnit:
    """The stand-alone unit for `kernel_name` in the file text `text` (read from `path`)."""
    return unit_from_model(source.parse(text), path, kernel_name, instantiate=instantiate, context=context,
                           arg_types=arg_types, spec_line=spec_line)


def spec_unit(model: SourceModel, path: str, kernel_name: str, spec: Spec, *,
              context: ProjectContext | None = None) -> CompileUnit:
    """The unit a check runs: instantiated as the spec says, with the spec's element types
    checked by the compiler wherever Astra cannot read the C++ type itself."""
    kernel = model.kernel(kernel_name)
    line = kernel.spec.span.start_line if kernel is not None and kernel.spec is not None else None
    types = {a.name: a.dtype.name for a in spec.args.values() if a.pointer and a.param and not a.table}
    u = unit_from_model(model, path, kernel_name, instantiate=spec.instantiate, context=context,
                        arg_types=types, spec_line=line)
    names = [p for p, _ in u.params]
    structs, records = layout.targets(spec, names)
    accessors = layout.accessors(spec, names)
    return dataclasses.replace(u, appendix=layout.probe(u.name_expression, structs, records, accessors)) \
        if structs or records or accessors else u


def replace_kernel(text: str, kernel_name: str, new_kernel_text: str) -> str:
    """The file text with the kernel's definition (template line to closing brace; the spec
    comment above it stays) replaced by `new_kernel_text`."""
    model = source.parse(text)
    kernel = model.kernel(kernel_name)
    if kernel is None:
        raise NoSuchKernel(f"no __global__ kernel named {kernel_name!r}")
    out = textedit.replace_bytes(text, [(kernel.span.start_byte, kernel.span.end_byte, new_kernel_text)])
    assert out is not None  # one edit cannot overlap
    return out


# A directive that reads another file, wherever it stands on a line (after `#`, the digraph `%:`
# or the trigraph `??=`, comments between): what a candidate may not add.
_READS_A_FILE = re.compile(r"(?:#|%:|\?\?=)\s*(?:/\*.*?\*/\s*)*(include_next|include|import|embed)\b\s*"
                           r"(\"[^\"]*\"|<[^>]*>|\S*)")


def file_reads(text: str) -> set[str]:
    """Every `#include`-like directive of `text` (lines joined at backslash-newlines), as
    '#include "x.h"' — read conservatively: such a directive inside a string counts too."""
    joined = re.sub(r"\\\r?\n", "", text)
    return {f"#{m.group(1)} {m.group(2)}" for line in joined.splitlines() for m in _READS_A_FILE.finditer(line)}


def splice(file_text: str, kernel: str, block: str) -> tuple[str | None, str]:
    """The file with its kernel replaced by the kernel defined in `block` (a model's code
    block), and helper device functions from the block replacing or joining the file's.
    Returns (text, problem). A block may include nothing the file does not already include:
    `#include ".env"` in a model's kernel would put the file's secrets into the compiler's
    messages, and so into the next prompt."""
    try:
        with parse_time.reading("the model's code block"):
            new = source.parse(block)
    except parse_time.TooSlowToParse as e:
        return None, e.message
    k_new = new.kernel(kernel)
    if new.syntax_errors:
        s = new.syntax_errors[0]
        return None, f"the code block does not parse (line {s.start_line + 1} of the block); it may be truncated"
    if k_new is None:
        names = ", ".join(k.name for k in new.kernels) or "none"
        return None, f"the code block does not define the kernel `{kernel}` (kernels found: {names})"
    m = source.parse(file_text)
    k_old = m.kernel(kernel)
    if k_old is None:
        return None, f"kernel `{kernel}` is no longer in the file"
    edits = [(k_old.span.start_byte, k_old.span.end_byte, k_new.text)]
    insert = []
    for item in new.items:
        if item.kind != "device_function":
            continue
        same = [i for i in m.items if i.kind == "device_function" and i.defines == item.defines]
        if same:
            if same[0].text.strip() != item.text.strip():
                edits.append((same[0].span.start_byte, same[0].span.end_byte, item.text))
        else:
            insert.append(item.text)
    if insert:
        at = k_old.spec.span.start_byte if k_old.spec is not None else k_old.span.start_byte
        edits.append((at, at, "\n\n".join(insert) + "\n\n"))
    out = textedit.replace_bytes(file_text, edits)
    if out is None:
        return None, "the rewritten helpers overlap the kernel"
    added = file_reads(out) - file_reads(file_text)
    if added:
        return None, (f"the code block adds {', '.join(sorted(added))}: a candidate may include only what the "
                      "file already includes")
    return out, ""
