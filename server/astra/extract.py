"""Cut a stand-alone compilation unit for one kernel out of a user's file.

The unit holds the kernel, the device code and declarations it needs (transitively), and the
CUDA headers the file includes — host-only code (PyTorch/pybind wrappers, `main`, host
headers) is dropped. Every item is preceded by a `#line` directive and indented to its original
column, so compiler messages from NVRTC, nvcc or g++ point at the user's file, line and column.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import source
from .errors import AstraError, NoSuchKernel
from .source import Item, Kernel, SourceModel

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

    def to_json(self) -> dict:
        return {"kernel": self.kernel, "name_expression": self.name_expression, "path": self.path,
                "include_dirs": list(self.include_dirs), "dropped": list(self.dropped),
                "source": self.source}


def _header_kind(header: str) -> str:
    if any(header == h or header.endswith("/" + h) for h in IMPLICIT_HEADERS):
        return "implicit"
    if any(header == h or (h.endswith("/") and header.startswith(h)) for h in DEVICE_HEADERS):
        return "device"
    return "host"


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


def _needed(model: SourceModel, kernel: Kernel) -> list[Item]:
    """The kernel's item plus every device-side item it reaches through the names it uses."""
    providers: dict[str, list[Item]] = {}
    for item in model.items:
        if item.kind in ("include", "host_function", "other", "kernel_decl"):
            continue
        if item.kind == "kernel" and kernel.name not in item.defines:
            # Other kernels are never needed by this one (a kernel cannot call a kernel
            # without dynamic parallelism), but their helpers might be.
            continue
        for name in item.defines:
            providers.setdefault(name, []).append(item)
    own = next(i for i in model.items if i.kind == "kernel" and kernel.name in i.defines
               and i.span.start_byte == kernel.span.start_byte)
    keep: dict[int, Item] = {id(own): own}
    todo = list(own.uses)
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
    return sorted(keep.values(), key=lambda i: i.span.start_byte)


def _emit(item: Item, path: str) -> str:
    lead = " " * item.span.start_col
    body = f'#line {item.span.start_line + 1} "{path}"\n{lead}{item.text}\n'
    if item.extern_c and item.kind != "kernel" and not item.text.lstrip().startswith("extern"):
        body = f'extern "C" {{\n{body}}}\n'
    elif item.extern_c and item.kind == "kernel" and not item.text.lstrip().startswith("extern"):
        body = f'extern "C" {{\n{body}}}\n'
    for ns in reversed(item.namespaces):
        body = f"namespace {ns} {{\n{body}}}  // namespace {ns}\n" if ns else f"namespace {{\n{body}}}\n"
    return body


def unit_from_model(model: SourceModel, path: str, kernel_name: str, *, instantiate: str | None = None) -> CompileUnit:
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
    parts: list[str] = [f"// Astra: stand-alone unit for kernel {kernel.qualified_name} from {os.path.basename(path)}\n"]
    include_dirs: list[str] = []
    for inc in model.includes:
        kind = _header_kind(inc.header or "")
        quoted = '"' in inc.text
        if kind == "device" or (quoted and kind != "implicit"):
            parts.append(_emit(inc, path))
            if quoted:
                d = os.path.dirname(os.path.abspath(path))
                if d not in include_dirs:
                    include_dirs.append(d)
        else:
            dropped.append(f"#include <{inc.header}>" if not quoted else f'#include "{inc.header}"')
    needed = _needed(model, kernel)
    kept_ids = {id(i) for i in needed}
    for item in model.items:
        if item.kind in ("host_function", "other") and id(item) not in kept_ids:
            name = next(iter(item.defines), None) or item.text.split("\n")[0][:40]
            dropped.append(name)
    parts.extend(_emit(i, path) for i in needed)
    return CompileUnit(source="".join(parts), kernel=kernel.name,
                       name_expression=name_expression(kernel, instantiate), path=path,
                       include_dirs=tuple(include_dirs), dropped=tuple(dropped))


def unit(text: str, path: str, kernel_name: str, *, instantiate: str | None = None) -> CompileUnit:
    """The stand-alone unit for `kernel_name` in the file text `text` (read from `path`)."""
    return unit_from_model(source.parse(text), path, kernel_name, instantiate=instantiate)


def replace_kernel(text: str, kernel_name: str, new_kernel_text: str) -> str:
    """The file text with the kernel's definition (template line to closing brace; the spec
    comment above it stays) replaced by `new_kernel_text`."""
    model = source.parse(text)
    kernel = model.kernel(kernel_name)
    if kernel is None:
        raise NoSuchKernel(f"no __global__ kernel named {kernel_name!r}")
    data = text.encode("utf-8")
    return (data[:kernel.span.start_byte] + new_kernel_text.encode("utf-8")
            + data[kernel.span.end_byte:]).decode("utf-8")
