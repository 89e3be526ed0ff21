"""Structs passed by value: where each field the spec gives lies, as the compiler that builds the
kernel lays it out.

A spec describes a struct parameter by the fields the kernel needs (`p.out = {...}`, `p.n = "n"`,
`p.inner.rows = ...`, `p."stride[1]" = ...`); Astra never computes a C++ layout itself. `probe`
is C++ appended to what is compiled (`CompileUnit.appendix`): for each struct parameter, a
global array `astra_layout_<i>` holding the struct's size and, per field, its offset
(`__builtin_offsetof`), its size, what kind of type it has (pointer, floating point, integer,
other) and, for a pointer, the size of what it points to. The backend reads the array back
from the module it launches (`Backend.read_global`) and `parse` turns it into a `Layout`; the
gate then assembles the struct's bytes (`gate.checks.launch_args`). A field path that names no
member is a compile error at the probe's line, naming the field. A pointer to records (a
parameter or a struct parameter's field, `records = "n"` in the spec) gets the same probe of the
struct it points to (`astra_records_<i>`, `astra_records_<i>_<field>`): the gate lays out that
many of them and passes their address. A tensor accessor passed by value (`accessor = true`:
torch's `PackedTensorAccessor32<T, N>`, a data pointer then `index_t sizes_[N]` and `index_t
strides_[N]`, protected members) gets `accessor_probe`'s array, read through a class derived
from it (which may name protected members): where the pointer, the sizes and the strides lie,
the element's size and the index type's, so the gate writes the object the way torch's host
constructor would (`Accessor`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .harness import FIELD_STEP, Spec

PROBE_FILE = "<astra-layout>"  # the appended probe's name in compiler messages: a pseudo-file, quoted as it is
KINDS = {0: "other", 1: "pointer", 2: "floating", 3: "integer"}
_INTEGERS = ("bool", "char", "signed char", "unsigned char", "short", "unsigned short", "int", "unsigned int",
             "long", "unsigned long", "long long", "unsigned long long", "wchar_t", "char16_t", "char32_t")

HELPERS = """namespace astra_layout_ {
template <unsigned I, class... P> struct nth;
template <class H, class... T> struct nth<0, H, T...> { typedef H type; };
template <unsigned I, class H, class... T> struct nth<I, H, T...> { typedef typename nth<I - 1, T...>::type type; };
template <unsigned I, class F> struct param;
template <unsigned I, class R, class... P> struct param<I, R (*)(P...)> { typedef typename nth<I, P...>::type type; };
template <class T> struct bare { typedef T type; };
template <class T> struct bare<T&> { typedef typename bare<T>::type type; };
template <class T> struct bare<const T> { typedef typename bare<T>::type type; };
template <class T> struct bare<volatile T> { typedef typename bare<T>::type type; };
template <class T> struct bare<const volatile T> { typedef typename bare<T>::type type; };
// a `__restrict__` member (`void *__restrict__ u_ptr`, mamba's SSMParamsBase) is still a pointer
template <class T> struct bare<T* __restrict__> { typedef T* type; };
template <class T> struct pointee { typedef T type; };
template <class T> struct pointee<T*> { typedef typename bare<T>::type type; };
template <class T> struct size { enum { v = sizeof(T) }; };
template <> struct size<void> { enum { v = 1 }; };
template <class T> struct kind { enum { v = 0, elem = 0 }; };
template <class T> struct kind<T*> { enum { v = 1, elem = size<typename bare<T>::type>::v }; };
template <> struct kind<float> { enum { v = 2, elem = 0 }; };
template <> struct kind<double> { enum { v = 2, elem = 0 }; };
""" + "".join(f"template <> struct kind<{t}> {{ enum {{ v = 3, elem = 0 }}; }};\n" for t in _INTEGERS) + "}\n"


@dataclass(frozen=True)
class Field:
    offset: int
    size: int
    kind: str          # one of KINDS' values
    elem: int = 0      # a pointer's element size in bytes (void: 1)


@dataclass(frozen=True)
class Layout:
    """A struct parameter as compiled: its size and the fields the spec gives, by path."""
    size: int
    fields: dict[str, Field]


def symbol(param_index: int) -> str:
    return f"astra_layout_{param_index}"


def records_symbol(param_index: int, field_index: int = -1) -> str:
    """The probe of the structs a pointer points to: parameter `param_index` itself, or the
    `field_index`-th field the spec gives of that struct parameter."""
    return f"astra_records_{param_index}" if field_index < 0 else f"astra_records_{param_index}_{field_index}"


def words(fields: tuple[str, ...]) -> int:
    """How many 64-bit words the probe of a struct with `fields` holds."""
    return 1 + 4 * len(fields)


def _designator(path: str) -> str:
    steps = path.split(".")
    if not steps or not all(FIELD_STEP.fullmatch(s) for s in steps):
        raise ValueError(f"not a field path: {path!r}")
    return ".".join(steps)


def targets(spec: Spec, params: list[str]) -> tuple[dict[int, tuple[str, ...]], dict[tuple[int, int], tuple[str, ...]]]:
    """What `probe` lays out for a spec whose kernel takes `params`: its struct
    parameters passed by value, and its pointers to records (see `probe`)."""
    structs: dict[int, tuple[str, ...]] = {}
    records: dict[tuple[int, int], tuple[str, ...]] = {}
    for i, name in enumerate(params):
        a = spec.args.get(name)
        if a is None or not a.struct:
            continue
        if a.records:
            records[(i, -1)] = a.fields
            continue
        structs[i] = a.fields
        for k, path in enumerate(a.fields):
            m = spec.args.get(f"{name}.{path}")
            if m is not None and m.records:
                records[(i, k)] = m.fields
    return structs, records


def probe(name_expression: str, structs: dict[int, tuple[str, ...]],
          records: dict[tuple[int, int], tuple[str, ...]] | None = None, accessors: list[int] | None = None) -> str:
    """C++ to append to a unit whose kernel is `name_expression`: the layout of each struct
    parameter (parameter index -> the field paths the spec gives), of the structs each pointer
    to records points to ((parameter index, -1 for the parameter itself or the index of the
    struct parameter's field that points to them) -> their field paths) and of each tensor
    accessor parameter (indices). Empty when there is none."""
    records = records or {}
    accessors = accessors or []
    if not structs and not records and not accessors:
        return ""
    out = [f'\n#line 1 "{PROBE_FILE}"\n', HELPERS]

    def one(t: str, sym: str, paths: tuple[str, ...]) -> None:
        values = [f"sizeof({t})"]
        for path in paths:
            d = _designator(path)
            member = f"astra_layout_::bare<decltype((({t}*)0)->{d})>::type"
            values += [f"__builtin_offsetof({t}, {d})", f"sizeof((({t}*)0)->{d})",
                       f"astra_layout_::kind<{member}>::v", f"astra_layout_::kind<{member}>::elem"]
        # `extern "C" { … }`, not `extern "C" __device__ …`: the block's declaration is a definition
        # under nvcc's host pass too (the constructor program, compile/hostprog), where the other
        # form left the host's shadow of the array undefined at link time.
        out.append(f'extern "C" {{ __device__ unsigned long long {sym}[] = {{{", ".join(values)}}}; }}\n')

    for i in sorted({i for i in structs} | {i for i, _ in records} | set(accessors)):
        param = f"astra_layout_::bare<astra_layout_::param<{i}, decltype(&{name_expression})>::type>::type"
        t = f"astra_layout_t{i}_"
        out.append(f"typedef {param} {t};\n")
        if i in accessors:
            out.append(_accessor_probe(i, t))
        if i in structs:
            one(t, symbol(i), structs[i])
        for (j, k), paths in sorted(records.items()):
            if j != i:
                continue
            r = f"astra_records_t{i}_{k if k >= 0 else 'p'}_"
            inner = f"{t}" if k < 0 else f"astra_layout_::bare<decltype((({t}*)0)->{_designator(structs[i][k])})>::type"
            out.append(f"typedef astra_layout_::pointee<{inner}>::type {r};\n")
            one(r, records_symbol(i, k), paths)
    return "".join(out)


@dataclass(frozen=True)
class Accessor:
    """A tensor accessor as compiled: its size, where its data pointer, its N sizes and its N
    strides lie, the size of an element its pointer points to, the index type's size and sign."""
    size: int
    data: int
    elem: int
    sizes: int
    strides: int
    dims: int
    index: int
    signed: bool


ACCESSOR_WORDS = 10   # the probe's array: see accessor_probe


def accessor_symbol(param_index: int) -> str:
    return f"astra_accessor_{param_index}"


def accessors(spec: Spec, params: list[str]) -> list[int]:
    """The parameters (indices) the spec gives as tensor accessors."""
    return [i for i, name in enumerate(params) if (a := spec.args.get(name)) is not None and a.accessor]


def _accessor_probe(i: int, t: str) -> str:
    # A class derived from the accessor may name its protected members; the offsets are read in
    # a member function's body, where the class is complete. `sizeof(*data_)` is the element's
    # size whatever qualifies the pointer (torch's RestrictPtrTraits: `T* __restrict__`).
    peek = f"astra_accessor_peek{i}_"
    words = {"size": f"sizeof({t})", "data": f"__builtin_offsetof({peek}, data_)", "data_size": "sizeof(data_)",
             "elem": "sizeof(*data_)",
             "sizes": f"__builtin_offsetof({peek}, sizes_)", "sizes_size": "sizeof(sizes_)",
             "strides": f"__builtin_offsetof({peek}, strides_)", "strides_size": "sizeof(strides_)",
             "index": "sizeof(sizes_[0])",
             "signed": "(astra_layout_::bare<decltype(sizes_[0])>::type)-1 < 0 ? 1 : 0"}
    body = "".join(f"  static constexpr __host__ __device__ unsigned long long astra_{k}() {{ return {v}; }}\n"
                   for k, v in words.items())
    return (f"struct {peek} : {t} {{\n{body}}};\n"
            f'extern "C" {{ __device__ unsigned long long {accessor_symbol(i)}[] = '
            f'{{{", ".join(f"{peek}::astra_{k}()" for k in words)}}}; }}\n')


def parse_accessor(raw: bytes) -> Accessor:
    """The accessor probe's array, read back from the module. ValueError if it is not one (a
    class without torch's accessor layout: not one pointer, then N sizes and N strides)."""
    if len(raw) < 8 * ACCESSOR_WORDS:
        raise ValueError(f"the accessor probe holds {len(raw)} bytes, {8 * ACCESSOR_WORDS} expected")
    size, data, data_size, elem, sizes, sizes_size, strides, strides_size, index, signed = (
        int.from_bytes(raw[8 * k:8 * k + 8], "little") for k in range(ACCESSOR_WORDS))
    if data_size != 8 or index not in (4, 8) or not elem or sizes_size != strides_size or \
            sizes_size % index or not 0 < sizes_size // index <= 25 or \
            max(data + 8, sizes + sizes_size, strides + strides_size) > size:
        raise ValueError(f"its class is not a tensor accessor's layout (a pointer of {data_size} bytes, sizes of "
                         f"{sizes_size} and strides of {strides_size} bytes, each index {index} bytes, in {size})")
    return Accessor(size, data, elem, sizes, strides, sizes_size // index, index, bool(signed))


def parse(raw: bytes, paths: tuple[str, ...]) -> Layout:
    """The probe's array, read back from the module, as a Layout. ValueError if it is not one."""
    n = words(paths)
    if len(raw) < 8 * n:
        raise ValueError(f"the layout probe holds {len(raw)} bytes, {8 * n} expected")
    v = [int.from_bytes(raw[8 * k:8 * k + 8], "little") for k in range(n)]
    fields = {}
    for j, path in enumerate(paths):
        off, size, kind, elem = v[1 + 4 * j:5 + 4 * j]
        if off + size > v[0] or kind not in KINDS:
            raise ValueError(f"the layout probe of field {path!r} is not one (offset {off}, size {size})")
        fields[path] = Field(off, size, KINDS[kind], elem)
    return Layout(v[0], fields)
