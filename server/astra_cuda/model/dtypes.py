"""Element types of the harness spec: names, NumPy dtypes, C++ spellings, default tolerances."""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str            # spec name: 'half', 'bfloat16', 'float', ...
    np: np.dtype
    cpp: tuple[str, ...]  # C++ spellings that match this type in a signature
    atol: float           # default absolute tolerance
    rtol: float           # default relative tolerance

    @property
    def is_float(self) -> bool:
        return self.name in ("half", "bfloat16", "float", "double", "float8_e4m3fn", "float8_e5m2")

    @property
    def itemsize(self) -> int:
        return self.np.itemsize


_TABLE = [
    DType("half", np.dtype(np.float16), ("half", "__half", "at::Half", "c10::Half"), 1e-2, 1e-2),
    DType("bfloat16", np.dtype(ml_dtypes.bfloat16),
          ("__nv_bfloat16", "nv_bfloat16", "bfloat16", "at::BFloat16", "c10::BFloat16"), 2e-2, 2e-2),
    # 8-bit floats (cuda_fp8.h's, and PyTorch's c10 types): a result rounded to 3 (2) mantissa
    # bits may land one step apart, 1/8 (1/4) relative.
    DType("float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn),
          ("__nv_fp8_e4m3", "c10::Float8_e4m3fn", "at::Float8_e4m3fn"), 1.6e-2, 1.25e-1),
    DType("float8_e5m2", np.dtype(ml_dtypes.float8_e5m2),
          ("__nv_fp8_e5m2", "c10::Float8_e5m2", "at::Float8_e5m2"), 1.6e-2, 2.5e-1),
    DType("float", np.dtype(np.float32), ("float",), 1e-5, 1e-4),
    DType("double", np.dtype(np.float64), ("double",), 1e-10, 1e-9),
    DType("int8", np.dtype(np.int8), ("int8_t", "signed char", "char"), 0, 0),
    DType("int16", np.dtype(np.int16), ("int16_t", "short"), 0, 0),
    DType("int32", np.dtype(np.int32), ("int32_t", "int", "signed", "signed int"), 0, 0),
    DType("int64", np.dtype(np.int64), ("int64_t", "long long", "long", "ptrdiff_t", "long long int", "intptr_t", "int64"), 0, 0),
    DType("uint8", np.dtype(np.uint8), ("uint8_t", "unsigned char"), 0, 0),
    DType("uint16", np.dtype(np.uint16), ("uint16_t", "unsigned short"), 0, 0),
    DType("uint32", np.dtype(np.uint32), ("uint32_t", "unsigned", "unsigned int", "uint"), 0, 0),
    DType("uint64", np.dtype(np.uint64), ("uint64_t", "size_t", "unsigned long long", "unsigned long", "uintptr_t"), 0, 0),
    DType("bool", np.dtype(np.bool_), ("bool",), 0, 0),
]

BY_NAME: dict[str, DType] = {d.name: d for d in _TABLE}
# Aliases accepted in specs.
BY_NAME.update({"fp16": BY_NAME["half"], "float16": BY_NAME["half"], "bf16": BY_NAME["bfloat16"],
                "float32": BY_NAME["float"], "fp32": BY_NAME["float"], "float64": BY_NAME["double"],
                "int": BY_NAME["int32"], "fp8": BY_NAME["float8_e4m3fn"], "fp8_e4m3": BY_NAME["float8_e4m3fn"],
                "fp8_e5m2": BY_NAME["float8_e5m2"]})


def lookup(name: str) -> DType | None:
    return BY_NAME.get(name.strip())


def from_cpp(cpp_type: str) -> DType | None:
    """The spec type for a C++ element type ('const __half' -> half); None if unknown
    (for example a template parameter `T`)."""
    t = " ".join(cpp_type.replace("const", " ").replace("volatile", " ").replace("__restrict__", " ").split())
    t = t.removeprefix("std::")
    for d in _TABLE:
        if t in d.cpp:
            return d
    return None


# CUDA's vector types: a pointer to one is described in a spec by its lane type, its shape
# counting lanes (`half2* x` over n pairs: type = "half", shape = ["2 * n"]).
VECTORS: dict[str, tuple[str, int]] = {
    "half2": ("half", 2), "__half2": ("half", 2), "__nv_bfloat162": ("bfloat16", 2), "nv_bfloat162": ("bfloat16", 2),
    "float2": ("float", 2), "float4": ("float", 4), "double2": ("double", 2),
    "int2": ("int32", 2), "int4": ("int32", 4), "uint2": ("uint32", 2), "uint4": ("uint32", 4),
    "short2": ("int16", 2), "short4": ("int16", 4), "ushort2": ("uint16", 2), "ushort4": ("uint16", 4),
    "char2": ("int8", 2), "char4": ("int8", 4), "uchar2": ("uint8", 2), "uchar4": ("uint8", 4),
    "longlong2": ("int64", 2), "ulonglong2": ("uint64", 2),
}


def vector_of(cpp_type: str) -> tuple[DType, int] | None:
    """(lane type, lanes) for a CUDA vector type ('const half2' -> (half, 2)); None otherwise."""
    t = " ".join(cpp_type.replace("const", " ").replace("volatile", " ").replace("__restrict__", " ").split())
    v = VECTORS.get(t.removeprefix("::"))
    return (BY_NAME[v[0]], v[1]) if v is not None else None
