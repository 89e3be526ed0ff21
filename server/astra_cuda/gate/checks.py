"""Running one kernel on one case through the Backend interface, the way the gate needs it:
fresh uploads of the host inputs, outputs poisoned first, everything downloaded afterwards."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import exprs, layout
from ..backends import guard
from ..backends.base import Backend, Buffer, Launch, LaunchError, Module, Packed, Scalar, Schedule
from ..model.spec import ArgSpec, Spec
from . import compare
from .constructed import Constructed, arg_types as constructed_types
from .suite import record_values

POISONS = (0xFF, 0xA5)  # NaN for every float type; then a plausible small negative number
LAUNCH_TIMEOUT_S = 60.0
MAX_RECORD_BYTES = 256 << 20   # the records one pointer points to, assembled on the host


@dataclass
class Compiled:
    module: Module
    name: str        # name expression to launch
    role: str        # 'reference' | 'candidate'


@dataclass
class Run:
    """Buffers of one launch's arguments, and what came back."""

    args: list[Buffer | Scalar | Packed]
    buffers: dict[str, Buffer]
    after: dict[str, np.ndarray] = field(default_factory=dict)  # every pointer argument, downloaded after the launch


def scalar_ctypes(spec: Spec, params: dict[str, str]) -> dict[str, Any]:
    """C++ types of the by-value parameters, const removed and template parameters substituted
    (a struct parameter's layout is added by `arg_types`, from the compiled module)."""
    out: dict[str, Any] = {}
    for a in spec.args.values():
        if not a.is_scalar or not a.param:
            continue
        t = params.get(a.name) or a.dtype.cpp[0]
        words = [spec.template_args.get(w, w) for w in t.split() if w not in ("const", "volatile")]
        out[a.name] = " ".join(words) or a.dtype.cpp[0]
    return out


def arg_types(spec: Spec, backend: Backend, kernel: "Compiled", params: dict[str, str]) -> dict[str, Any]:
    """`scalar_ctypes`, and for each struct parameter its `layout.Layout` as compiled into the
    kernel's module (the probe `extract.spec_unit` appended). LaunchError when it cannot be read."""
    out = scalar_ctypes(spec, params)

    def read(name: str, symbol: str, fields: tuple[str, ...]) -> None:
        raw = backend.read_global(kernel.module, symbol, 8 * layout.words(fields))
        try:
            out[name] = layout.parse(raw, fields)
        except ValueError as e:
            raise LaunchError(f"struct parameter {name!r}: {e}") from None

    structs, records = layout.targets(spec, list(params))
    names = list(params)
    for i, fields in structs.items():
        read(names[i], layout.symbol(i), fields)
    for i in layout.accessors(spec, names):   # a tensor accessor: where its pointer, sizes and strides lie
        raw = backend.read_global(kernel.module, layout.accessor_symbol(i), 8 * layout.ACCESSOR_WORDS)
        try:
            out[names[i]] = layout.parse_accessor(raw)
        except ValueError as e:
            raise LaunchError(f"{names[i]!r} is given as a tensor accessor, but {e}") from None
    for (i, k), fields in records.items():   # a pointer to records: the layout of the struct it points to
        read(names[i] if k < 0 else f"{names[i]}.{structs[i][k]}", layout.records_symbol(i, k), fields)
    out.update(constructed_types(spec, backend, kernel.module, names))   # objects a constructor builds
    return out


def launch_args(spec: Spec, buffers: dict[str, Buffer], sizes: dict[str, int], ctypes: dict[str, Any]) -> list[Any]:
    """The kernel's arguments in its parameter order: its buffers, its scalars, each struct
    assembled from its fields (pointer fields point at their buffers), each table of pointers
    pointing at the rows of its buffer."""
    out: list[Buffer | Scalar | Packed] = []
    for a in spec.args.values():
        if not a.param:
            continue
        if a.accessor:
            out.append(_accessor(spec, a, buffers[a.name], sizes, ctypes.get(a.name)))
        elif a.records:
            out.append(_records(spec, a, sizes, ctypes.get(a.name)))
        elif a.construct:
            out.append(Packed(_constructed(a, ctypes.get(a.name), sizes)))
        elif a.struct:
            out.append(_struct(spec, a, buffers, sizes, ctypes))
        elif a.table:
            buf = buffers[a.name]
            shape = spec.shape(a.name, sizes)
            row = int(np.prod(shape[1:], dtype=np.int64)) * a.dtype.itemsize
            out.append(Packed(bytes(8 * shape[0]), tuple((8 * i, buf, i * row) for i in range(shape[0])), True))
        elif a.pointer:
            out.append(buffers[a.name])
        else:
            out.append(Scalar(ctypes[a.name], spec.scalar(a.name, sizes), a.dtype.np.name))
    return out


def _struct(spec: Spec, a: ArgSpec, buffers: dict[str, Buffer], sizes: dict[str, int], ctypes: dict[str, Any]) -> Packed:
    lay = ctypes.get(a.name)
    if not isinstance(lay, layout.Layout):
        raise LaunchError(f"struct parameter {a.name!r}: its layout was not read from the compiled module")
    data = bytearray(lay.size)
    pointers: list[tuple[int, Buffer | Packed, int]] = []
    for path in a.fields:
        m, f = spec.args[f"{a.name}.{path}"], lay.fields[path]
        if m.records:
            if f.kind != "pointer":
                raise LaunchError(f"`{m.name}` is described as records, but the field is {_what(f)}")
            pointers.append((f.offset, _records(spec, m, sizes, ctypes.get(m.name)), 0))
            continue
        if m.construct:
            b = _constructed(m, ctypes.get(m.name), sizes)
            if len(b) != f.size:
                raise LaunchError(f"`{m.name}`: its constructor built {len(b)} bytes, but the field is {_what(f)}")
            data[f.offset:f.offset + f.size] = b
            continue
        if m.pointer:
            if f.kind != "pointer":
                raise LaunchError(f"`{m.name}` is described as a buffer, but the field is {_what(f)}")
            if f.elem > 1 and f.elem % m.dtype.itemsize:
                raise LaunchError(f"`{m.name}` is described as {m.dtype.name} ({m.dtype.itemsize} bytes), but the "
                                  f"field points to elements of {f.elem} bytes")
            pointers.append((f.offset, buffers[m.name], 0))
            continue
        if m.value is None:
            raise LaunchError(f"`{m.name}` has no value")
        data[f.offset:f.offset + f.size] = _field_bytes(m, f, exprs.evaluate(m.value, dict(sizes)))
    return Packed(bytes(data), tuple(pointers))


def _constructed(a: ArgSpec, built: Any, sizes: dict[str, int]) -> bytes:
    if not isinstance(built, Constructed):
        raise LaunchError(f"`{a.name}`: the object its constructor builds was not made")
    return built.at(sizes)


def _accessor(spec: Spec, a: ArgSpec, buf: Buffer, sizes: dict[str, int], lay: Any) -> Packed:
    """A tensor accessor over `buf`, as torch's host constructor fills one from a contiguous tensor:
    the buffer's address, its shape as the sizes, row-major strides (in elements), each an index
    of the accessor's own type (a PackedTensorAccessor32's int32: torch refuses larger tensors)."""
    if not isinstance(lay, layout.Accessor):
        raise LaunchError(f"{a.name!r}: the layout of its tensor accessor was not read from the compiled module")
    shape = spec.shape(a.name, sizes)
    if len(shape) != lay.dims:
        raise LaunchError(f"{a.name!r} is a tensor accessor of {lay.dims} dimensions, but its shape has {len(shape)}")
    if lay.elem != a.dtype.itemsize:
        raise LaunchError(f"{a.name!r} is described as {a.dtype.name} ({a.dtype.itemsize} bytes), but its accessor "
                          f"points to elements of {lay.elem} bytes")
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    limit = 1 << (8 * lay.index - (1 if lay.signed else 0))
    if any(v >= limit for v in (*shape, *strides)) or int(np.prod(shape, dtype=np.int64)) >= limit:
        raise LaunchError(f"{a.name!r}: shape {list(shape)} does not fit its accessor's {8 * lay.index}-bit indices")
    data = bytearray(lay.size)
    for at, values in ((lay.sizes, shape), (lay.strides, strides)):
        for d, v in enumerate(values):
            data[at + d * lay.index:at + (d + 1) * lay.index] = int(v).to_bytes(lay.index, "little")
    return Packed(bytes(data), ((lay.data, buf, 0),))


def _records(spec: Spec, a: ArgSpec, sizes: dict[str, int], lay: Any) -> Packed:
    """`records` structs one after another, each field the same number in every record or drawn
    per record: bytes placed in device memory, the kernel given their address."""
    if not isinstance(lay, layout.Layout):
        raise LaunchError(f"{a.name!r}: the layout of its records was not read from the compiled module")
    n = exprs.evaluate_int(a.records, dict(sizes))
    if lay.size * n > MAX_RECORD_BYTES:   # the struct's size is the compiler's: a hostile one may be huge
        raise LaunchError(f"{a.name!r}: {n} records of {lay.size} bytes exceed {MAX_RECORD_BYTES >> 20} MiB")
    data = bytearray(lay.size * n)
    for path in a.fields:
        m, f = spec.args[f"{a.name}.{path}"], lay.fields[path]
        if m.drawn:
            values = [_field_bytes(m, f, v) for v in record_values(m, n, sizes).tolist()]
        else:
            if m.value is None:
                raise LaunchError(f"`{m.name}` has no value")
            values = [_field_bytes(m, f, exprs.evaluate(m.value, dict(sizes)))] * n
        for r, b in enumerate(values):
            data[r * lay.size + f.offset:r * lay.size + f.offset + f.size] = b
    return Packed(bytes(data), (), in_memory=True)


def _what(f: "layout.Field") -> str:
    return f"{'an' if f.kind in ('other', 'integer') else 'a'} {f.kind} of {f.size} bytes"


def _field_bytes(m: ArgSpec, f: "layout.Field", value: Any) -> bytes:
    """A scalar field's bytes: as the spec's `type` says (which must fit the field), else as the
    compiler's type of the field (an integer or floating-point field of its size)."""
    if f.kind == "pointer":
        raise LaunchError(f"`{m.name}` is a pointer field: describe it as a buffer ({{ type = ..., shape = [...] }})")
    if m.typed:
        if m.dtype.itemsize != f.size or (f.kind == "integer" and m.dtype.is_float) or \
                (f.kind == "floating" and not m.dtype.is_float):
            raise LaunchError(f"`{m.name}` is given as {m.dtype.name}, but the field is {_what(f)}")
        v = float(value) if m.dtype.is_float else int(value)
        return np.array(v, dtype=m.dtype.np).tobytes()
    if f.kind == "floating" and f.size in (4, 8):
        return np.array(float(value), dtype=np.float32 if f.size == 4 else np.float64).tobytes()
    if f.kind == "integer" and f.size in (1, 2, 4, 8):
        v = int(value)
        if not -(1 << (8 * f.size - 1)) <= v < (1 << (8 * f.size)):
            raise LaunchError(f"`{m.name}` = {v} does not fit its field ({f.size} bytes)")
        return (v & ((1 << (8 * f.size)) - 1)).to_bytes(f.size, "little")
    raise LaunchError(f"`{m.name}`: the field is {_what(f)}, whose type Astra cannot tell (an enum, a half?): "
                      f"give it with {{ value = ..., type = \"...\" }}")


def launch_of(spec: Spec, sizes: dict[str, int]) -> Launch:
    grid, block, shared = spec.launch_dims(sizes)
    return Launch(grid, block, shared)


def prepare(spec: Spec, backend: Backend, sizes: dict[str, int], host: dict[str, np.ndarray],
            ctypes: dict[str, str], poison: int) -> Run:
    """Upload the inputs (a fresh copy per call), allocate and poison the outputs."""
    buffers: dict[str, Buffer] = {}
    for a in spec.args.values():
        if a.pointer:
            if a.output:
                buf = backend.upload(np.empty(spec.shape(a.name, sizes), dtype=a.dtype.np))
                backend.fill_bytes(buf, poison)
            else:
                buf = backend.upload(np.ascontiguousarray(host[a.name]))
            buffers[a.name] = buf
    return Run(launch_args(spec, buffers, sizes, ctypes), buffers)


def execute(spec: Spec, backend: Backend, kernel: Compiled, sizes: dict[str, int], run: Run,
            schedule: Schedule | None = None, written_only: bool = False) -> Run:
    """Launch and download every pointer argument (only the written ones with `written_only`:
    the reference's inputs need no checking)."""
    backend.launch(kernel.module, kernel.name, launch_of(spec, sizes), run.args, schedule=schedule,
                   timeout_s=LAUNCH_TIMEOUT_S)
    overran(backend, run.buffers)
    run.after = {name: backend.download(buf) for name, buf in run.buffers.items()
                 if not written_only or spec.args[name].written}
    return run


def overran(backend: Backend, buffers: dict[str, Buffer]) -> None:
    """LaunchError naming the first buffer (in argument order) whose guard the launch changed:
    a write past its end, said the same way on every backend and in every run, instead of
    whatever it did to the memory after the buffer (backends/guard.py)."""
    for name, buf in buffers.items():
        hit = backend.overrun(buf)
        if hit is not None:
            raise LaunchError(guard.message(name, buf.nbytes, buf.dtype.itemsize, hit[0]))


def run_case(spec: Spec, backend: Backend, kernel: Compiled, sizes: dict[str, int], host: dict[str, np.ndarray],
             ctypes: dict[str, str], poison: int, schedule: Schedule | None = None,
             written_only: bool = False) -> Run:
    return execute(spec, backend, kernel, sizes, prepare(spec, backend, sizes, host, ctypes, poison), schedule,
                   written_only)


def written(spec: Spec) -> list[str]:
    return [a.name for a in spec.args.values() if a.written]


def changed_inputs(spec: Spec, host: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[tuple[str, int, tuple[int, ...]]]:
    """(name, changed elements, first index) for every read-only input that the launch modified."""
    out = []
    for a in spec.args.values():
        if a.pointer and not a.written:
            d = compare.first_difference(host[a.name], after[a.name])
            if d is not None:
                out.append((a.name, d[0], d[1]))
    return out


def fill_host(spec: Spec, sizes: dict[str, int], patterns: dict[str, int]) -> dict[str, np.ndarray]:
    """Host arrays equal to buffers filled byte-wise with `patterns` (for the same-pointer test)."""
    out = {}
    for name, byte in patterns.items():
        a = spec.args[name]
        n = int(np.prod(spec.shape(name, sizes))) * a.dtype.itemsize
        out[name] = np.frombuffer(bytes([byte]) * n, dtype=a.dtype.np).reshape(spec.shape(name, sizes)).copy()
    return out
