"""NVRTC's C API through ctypes: the compiler where no CUDA toolkit is installed.

Astra calls ten functions of libnvrtc, whose C interface has been stable since CUDA 8. Calling
them through ctypes needs no compiled module per Python version, which is what kept cuda-bindings'
NVRTC binding (and the 7 MB driver module it imports, once per bundled Python) in the .vsix.
Where libnvrtc is, is cuda-pathfinder's job (the nvidia-cuda-nvrtc wheel, CUDA_HOME, the system).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

_SUCCESS = 0
_prog = ctypes.c_void_p
# Standard headers NVRTC has none of but gets from CCCL's libcu++ (<cuda/std/NAME>, `static`'s
# stand-ins): what a kernel includes itself, and what the cut includes for NVRTC where nvcc's host
# headers read them (`for_nvrtc`).
STD_HEADERS = ("type_traits", "limits", "utility", "array")


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """libnvrtc with its functions typed, or None where it is not found."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        lib = ctypes.CDLL(load_nvidia_dynamic_lib("nvrtc").abs_path)
    except Exception:  # not installed, or a library that does not load here
        return None
    c_int, c_size, c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p
    argv = ctypes.POINTER(c_char_p)
    for name, args in (
        ("nvrtcVersion", [ctypes.POINTER(c_int), ctypes.POINTER(c_int)]),
        ("nvrtcCreateProgram", [ctypes.POINTER(_prog), c_char_p, c_char_p, c_int, argv, argv]),
        ("nvrtcDestroyProgram", [ctypes.POINTER(_prog)]),
        ("nvrtcCompileProgram", [_prog, c_int, argv]),
        ("nvrtcGetProgramLogSize", [_prog, ctypes.POINTER(c_size)]),
        ("nvrtcGetProgramLog", [_prog, c_char_p]),
        ("nvrtcGetPTXSize", [_prog, ctypes.POINTER(c_size)]),
        ("nvrtcGetPTX", [_prog, c_char_p]),
        ("nvrtcAddNameExpression", [_prog, c_char_p]),
        ("nvrtcGetLoweredName", [_prog, c_char_p, ctypes.POINTER(c_char_p)]),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, c_int
    lib.nvrtcGetErrorString.argtypes, lib.nvrtcGetErrorString.restype = [c_int], c_char_p
    return lib


def version() -> str | None:
    """'13.0', or None without NVRTC."""
    lib = library()
    if lib is None:
        return None
    major, minor = ctypes.c_int(), ctypes.c_int()
    if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != _SUCCESS:
        return None
    return f"{major.value}.{minor.value}"


class NvrtcError(RuntimeError):
    pass


def _argv(items: list[bytes]) -> ctypes.Array[ctypes.c_char_p]:
    return (ctypes.c_char_p * max(1, len(items)))(*items)


@dataclass
class Compiled:
    ok: bool
    log: str
    ptx: str                      # empty unless asked for and compiled
    lowered: dict[str, str]       # name expression -> mangled name (compiled programs only)


def compile_program(source: str, filename: str, options: list[str], names: tuple[str, ...] = (),
                    want_ptx: bool = False) -> Compiled:
    """Compile `source` once; the log always, the PTX and the lowered names when it compiled."""
    lib = library()
    if lib is None:
        raise NvrtcError("NVRTC is not available")
    prog = _prog()
    err = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None)
    if err != _SUCCESS:
        raise NvrtcError(f"nvrtcCreateProgram: {lib.nvrtcGetErrorString(err).decode()}")
    try:
        for n in names:
            lib.nvrtcAddNameExpression(prog, n.encode())
        opts = [o.encode() for o in options]
        ok = lib.nvrtcCompileProgram(prog, len(opts), _argv(opts)) == _SUCCESS
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value + 1)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.raw.replace(b"\0", b"").decode(errors="replace").rstrip()  # its log may hold NULs
        ptx, lowered = "", {}
        if ok:
            for n in names:
                low = ctypes.c_char_p()
                if lib.nvrtcGetLoweredName(prog, n.encode(), ctypes.byref(low)) == _SUCCESS and low.value:
                    lowered[n] = low.value.decode(errors="replace").strip()
            if want_ptx:
                lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
                pbuf = ctypes.create_string_buffer(size.value + 1)
                lib.nvrtcGetPTX(prog, pbuf)
                ptx = pbuf.raw.rstrip(b"\0").decode(errors="replace")
        return Compiled(ok, log, ptx, lowered)
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
