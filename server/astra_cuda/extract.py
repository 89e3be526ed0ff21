"""Cut a stand-alone compilation unit for one kernel out of a user's file.

The unit holds the kernel, the device code and declarations it needs (transitively), every
macro of the file in order (a `#define` that selects a type behind a header's `typedef` must
stay where it was), the preprocessor conditionals around what is kept, and the CUDA headers the
file includes. The project's own headers (found next to the file or on the project's include
paths) are read into the unit the same way, item by item, so a `common.h` that includes cuBLAS
or `<stdlib.h>` for its host helpers costs nothing: host-only code (PyTorch/pybind wrappers,
`main`, host helpers) is dropped and host-only headers are kept only behind
`#if defined(ASTRA_HOST_HEADERS)` (set by a GPU build through nvcc, never by NVRTC or the CPU
backend). Every item is preceded by a `#line` directive and indented to its original column,
so compiler messages from NVRTC, nvcc or g++ point at the user's file (or header), line and
column. Headers that stay `#include`d (CUDA's, a system folder's) are named in `headers`, so
build caches can key on their contents.

Long because the cut is one pass over one list of items — headers read in, what the kernel needs
kept, conditionals re-opened, element types checked — and splicing works on the same items.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import confine, dtypes, files, source, textedit
from .errors import AstraError, NoSuchKernel
from .project import ProjectContext
from .source import Guard, Item, Kernel, SourceModel

HOST_HEADERS_MACRO = "ASTRA_HOST_HEADERS"
MAX_HEADERS = 64          # project headers read into one unit
MAX_HEADER_DEPTH = 16

# Headers that device code may use and that NVRTC or the CPU shim can provide.
DEVICE_HEADERS = (
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp4.h", "mma.h", "cuda_pipeline.h",
    "cuda_pipeline_primitives.h", "cooperative_groups.h", "cooperative_groups/", "cuda/", "cub/", "cute/",
    "cutlass/", "cstdint", "stdint.h", "climits", "limits.h", "cfloat", "float.h", "cmath", "math.h",
    "type_traits", "cassert", "assert.h", "cstddef", "stddef.h", "utility", "limits", "array",
)
# Provided implicitly (NVRTC) or host-only in effect: never copied into a unit.
IMPLICIT_HEADERS = ("cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "device_launch_parameters.h",
                    "device_functions.h", "vector_types.h")


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
    file_text: str = ""            # the whole file the unit was cut from: what nvcc compiles (compile.nvcc)

    @property
    def param_types(self) -> dict[str, str]:
        return dict(self.params)

    def options(self) -> list[str]:
        """Compiler options every backend passes (the file's folder, then the project's)."""
        return list(dict.fromkeys([f"-I{d}" for d in self.include_dirs] + self.context.options()))

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "name_expression": self.name_expression, "path": self.path,
                "include_dirs": list(self.include_dirs), "dropped": list(self.dropped),
                "context": self.context.to_json(), "headers": list(self.headers), "notes": list(self.notes),
                "source": self.source}


def _header_kind(header: str) -> str:
    if any(header == h or header.endswith("/" + h) for h in IMPLICIT_HEADERS):
        return "implicit"
    if any(header == h or (h.endswith("/") and header.startswith(h)) for h in DEVICE_HEADERS):
        return "device"
    return "host"


def find_header(header: str, quoted: bool, including_dir: str, context: ProjectContext) -> tuple[Path | None, bool]:
    """(the file `#include` would open, whether it is the project's own), searching as a
    compiler does: a quoted name first next to the including file, then the include paths,
    then the system folders (whose headers are not the project's)."""
    dirs = ([including_dir] if quoted else []) + list(context.include_dirs)
    for d in dirs:
        f = Path(d) / header
        if f.is_file():
            return f.resolve(), True
    for d in context.system_dirs:
        f = Path(d) / header
        if f.is_file():
            return f.resolve(), False
    return None, False


@lru_cache(maxsize=512)
def _includes_in(text: str) -> tuple[tuple[str, bool], ...]:
    """(header, quoted) for each #include of a text, parsed once per content: the digest below
    runs before every build-cache lookup."""
    out = []
    for inc in source.parse(text).includes:
        header = inc.header or ""
        if header:
            out.append((header, '"' in inc.text.split(header)[0]))
    return tuple(out)


def header_digest(text: str, filename: str, options) -> str:
    """A digest of every header `text` includes (transitively) from the file's folder or the
    `-I` folders in `options`: build caches key on it, so editing a header is never answered
    with a build (or a verdict) of its old contents. CUDA's and the system's headers are not
    on those paths; they change with the toolkit, which the caches key on separately."""
    import hashlib
    dirs = [o[2:] for o in options if o.startswith("-I") and len(o) > 2]
    h = hashlib.sha256()
    top = os.path.dirname(os.path.abspath(filename)) if filename else os.getcwd()
    policy = confine.for_unit([f"-I{top}", *options])  # what the compiler itself may read
    todo = [(text, top)]
    seen: set[str] = set()
    while todo and len(seen) < 4 * MAX_HEADERS:
        body, here = todo.pop()
        for header, quoted in _includes_in(body):
            for d in ([here] if quoted else []) + dirs:
                f = Path(d) / header
                if f.is_file():
                    key = str(f.resolve())
                    if key not in seen and policy.allows(key):
                        seen.add(key)
                        with open(key, "rb") as fh:
                            data = fh.read(files.MAX_BYTES)
                        h.update(key.encode() + b"\0" + data + b"\0")
                        todo.append((data.decode("utf-8", errors="replace"), str(f.resolve().parent)))
                    break
    return h.hexdigest()[:16] if seen else ""


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
            kind = _header_kind(header)
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
                if depth >= MAX_HEADER_DEPTH or len(self.headers) >= MAX_HEADERS:
                    self.notes.append(f"{written} not read into the unit: more than {MAX_HEADERS} project headers "
                                      f"or {MAX_HEADER_DEPTH} levels deep")
                    out.append(_host_only(item))
                    continue
                self.seen.add(key)
                self.headers.append(key)
                try:
                    header_model = _header_model(key, files.read_source(key))
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
                  dropped: list[str] | None = None, headers: list[str] | None = None) -> _Reader:
    """A reader of the project headers of the file at `path`, under the compilers' read policy."""
    policy = confine.for_unit([f"-I{os.path.dirname(os.path.abspath(path))}", *context.options()])
    return _Reader(context, [] if notes is None else notes, [] if dropped is None else dropped,
                   [] if headers is None else headers, set(), policy)


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


def name_expression(kernel: Kernel, instantiate: str | None) -> str:
    if kernel.extern_c and not kernel.is_template:
        return kernel.name
    base = kernel.qualified_name
    if kernel.is_template:
        if not instantiate:
            raise AstraError(f"kernel {kernel.name!r} is a template: its spec needs instantiate = \"<...>\"")
        inst = instantiate.strip()
        if not inst.startswith("<"):
            inst = f"<{inst}>"
        return base + inst
    return base


def _is_own(item: Item, kernel: Kernel) -> bool:
    return item.kind == "kernel" and item.path is None and kernel.name in item.defines and (
        item.span.start_byte == kernel.span.start_byte or item.span in kernel.overloads)


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
            out.add(n.text.decode())
        stack.extend(n.children)
    return out - {"__astra_k"}


def _needed(items: list[Item], kernel: Kernel, extra: set[str] = frozenset()) -> list[Item]:
    """The kernel's items (its overloads too) plus every device-side item they reach through
    the names they use (and the names in `extra`: its template arguments)."""
    providers: dict[str, list[Item]] = {}
    for item in items:
        if item.kind in ("include", "host_include", "host_function", "other", "kernel_decl", "macro", "using"):
            continue
        if item.kind == "kernel":
            # Other kernels are never needed by this one (a kernel cannot call a kernel
            # without dynamic parallelism), but their helpers might be.
            continue
        for name in item.defines:
            providers.setdefault(name, []).append(item)
    own = [i for i in items if _is_own(i, kernel)]
    keep: dict[int, Item] = {id(i): i for i in own}
    todo = [n for i in own for n in i.uses] + sorted(extra)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for item in providers.get(name, ()):
            if id(item) not in keep:
                keep[id(item)] = item
                todo.extend(item.uses)
    return [i for i in items if id(i) in keep]


def _emit(item: Item, path: str) -> str:
    lead = " " * item.span.start_col
    text = item.text.rstrip("\n")
    if item.kind == "host_include":
        return (f"#if defined({HOST_HEADERS_MACRO})\n#line {item.span.start_line + 1} \"{item.path or path}\"\n"
                f"{text}\n#endif\n")
    body = f'#line {item.span.start_line + 1} "{item.path or path}"\n{lead}{text}\n'
    if item.extern_c and not item.text.lstrip().startswith("extern"):
        body = f'extern "C" {{\n{body}}}\n'
    for ns in reversed(item.namespaces):
        body = f"namespace {ns} {{\n{body}}}  // namespace {ns}\n" if ns else f"namespace {{\n{body}}}\n"
    return body


def _with_conditionals(items: list[Item], path: str) -> list[str]:
    """Emit the items in order, re-opening the preprocessor conditionals around them: an item
    of an `#else` branch is emitted after its conditional's earlier heads, so the compiler
    chooses between the kept branches exactly as it would in the file."""
    parts: list[str] = []
    open_: list[Guard] = []
    for item in items:
        chain = list(item.guards)
        p = 0
        while p < len(open_) and p < len(chain) and open_[p] == chain[p]:
            p += 1
        if p < len(open_) and p < len(chain) and open_[p].key == chain[p].key \
                and chain[p].heads[:len(open_[p].heads)] == open_[p].heads:
            for _ in range(len(open_) - p - 1):  # a later branch of the same conditional
                parts.append("#endif\n")
            parts.extend(h + "\n" for h in chain[p].heads[len(open_[p].heads):])
            open_ = open_[:p] + [chain[p]]
            p += 1
        else:
            parts.extend("#endif\n" for _ in range(len(open_) - p))
            open_ = open_[:p]
        for g in chain[p:]:
            parts.extend(h + "\n" for h in g.heads)
            open_.append(g)
        parts.append(_emit(item, path))
    parts.extend("#endif\n" for _ in open_)
    return parts


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
            cond = f"sizeof({elem}) == {want.itemsize} && (({elem})(-1) < ({elem})(0)) == {signed}"
        # a CUDA vector of that lane type (`half2` over a half buffer) is the same memory
        vectors = sorted(v for v, (lane, _) in dtypes.VECTORS.items() if lane == want.name)
        cond = " || ".join([f"({cond})"] + [f"__astra_is<{elem}, {v}>::value" for v in vectors])
        checks.append(f'static_assert({cond}, "{msg}");')
    if not checks:
        return ""
    needs = "".join(f"#include <{h}>\n" for t, h in (("half", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h"))
                    if any(dtypes.lookup(v) is not None and dtypes.lookup(v).name == t for v in arg_types.values()))
    return (f"// Astra: element types the spec gives, checked by the compiler\n{needs}"
            "template <class A, class B> struct __astra_is { static constexpr bool value = false; };\n"
            "template <class A> struct __astra_is<A, A> { static constexpr bool value = true; };\n"
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
    """The unit for `kernel_name`. `arg_types` (parameter -> spec type name) adds compile-time
    checks of element types Astra cannot read itself (see `type_checks`)."""
    context = context or ProjectContext()
    kernel = model.kernel(kernel_name)
    if kernel is None:
        names = ", ".join(k.name for k in model.kernels) or "none"
        raise NoSuchKernel(f"no __global__ kernel named {kernel_name!r} in {path} (kernels: {names})")
    if instantiate is None and kernel.is_template and kernel.spec is not None:
        from . import spec as spec_mod  # local: spec imports source, not extract
        try:
            instantiate = spec_mod.load(kernel, model).instantiate
        except AstraError:
            instantiate = None
    dropped: list[str] = []
    notes: list[str] = []
    headers: list[str] = []
    reader = header_reader(path, context, notes, dropped, headers)
    items = reader.items(model, path)
    needed = {id(i) for i in _needed(items, kernel, _names_in(instantiate))}
    kept = [i for i in items if id(i) in needed or i.kind in ("macro", "include", "host_include", "using")]
    for item in items:
        if item.kind in ("host_function", "other") and id(item) not in needed and item.path is None:
            name = next(iter(item.defines), None) or item.text.split("\n")[0][:40]
            dropped.append(name)
    expr = name_expression(kernel, instantiate)
    parts = [f"// Astra: stand-alone unit for kernel {kernel.qualified_name} from {os.path.basename(path)}\n"]
    parts += _with_conditionals(kept, path)
    if arg_types:
        targs = {}
        if kernel.is_template and instantiate:
            from .spec import split_template_args
            targs = dict(zip(kernel.template_param_names, split_template_args(instantiate)))
        todo = {n: arg_types[n] for n in unresolved_pointer_types(kernel, targs) if n in arg_types}
        parts.append(type_checks(kernel, expr, todo, path,
                                 spec_line if spec_line is not None else kernel.span.start_line))
    quoted = any('"' in i.text for i in model.includes)
    include_dirs = (os.path.dirname(os.path.abspath(path)),) if quoted else ()
    if headers:
        notes.insert(0, "project headers read into the unit: " + ", ".join(os.path.basename(h) for h in headers))
    return CompileUnit(source="".join(parts), kernel=kernel.name, name_expression=expr, path=path,
                       include_dirs=include_dirs, dropped=tuple(dict.fromkeys(dropped)), context=context,
                       headers=tuple(headers), notes=tuple(notes),
                       params=tuple((p.name, p.type) for p in kernel.params), file_text=model.text)


def unit(text: str, path: str, kernel_name: str, *, instantiate: str | None = None,
         context: ProjectContext | None = None, arg_types: dict[str, str] | None = None,
         spec_line: int | None = None) -> CompileUnit:
    """The stand-alone unit for `kernel_name` in the file text `text` (read from `path`)."""
    return unit_from_model(source.parse(text), path, kernel_name, instantiate=instantiate, context=context,
                           arg_types=arg_types, spec_line=spec_line)


def spec_unit(model: SourceModel, path: str, kernel_name: str, spec, *,
              context: ProjectContext | None = None) -> CompileUnit:
    """The unit a check runs: instantiated as the spec says, with the spec's element types
    checked by the compiler wherever Astra cannot read the C++ type itself."""
    kernel = model.kernel(kernel_name)
    line = kernel.spec.span.start_line if kernel is not None and kernel.spec is not None else None
    types = {a.name: a.dtype.name for a in spec.args.values() if a.pointer}
    return unit_from_model(model, path, kernel_name, instantiate=spec.instantiate, context=context,
                           arg_types=types, spec_line=line)


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
    new = source.parse(block)
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
