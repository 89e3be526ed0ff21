"""Static diagnostics, no GPU needed: where a CUDA toolkit is installed, nvcc compiles the user's
whole file (`astra_cuda.compile.nvcc`); where none is, NVRTC (from PyPI, the compiler CuPy uses)
compiles one kernel's cut-out unit to a cubin, so that ptxas runs too. Every result names the
compiler that judged (`nvcc 13.0, flags …` / `NVRTC 13.5: no CUDA toolkit found`), and so does
every diagnostic's `source`.

For the NVRTC unit:

- Front-end errors and warnings come back at the user's file, line and column: the unit carries
  `#line` directives, and the column is read off the caret line NVRTC prints under the source.
- ptxas errors (bad inline PTX, over-size shared memory) name PTX lines or mangled kernels; they
  are mapped back through the `.loc` directives of the PTX (we compile with `-lineinfo`).
- `-Xptxas=-v` gives registers, spills, shared memory and stack per kernel -> ResourceUsage.

Results are cached by content hash for the life of the process. NVRTC creates no CUDA context,
so this is safe in the language-server process.

NVRTC opens the files a unit `#include`s itself, so every compile runs confined to what
`astra.confine` lets a compiler of user code read (a thread confined by Landlock; nvcc through
the sandbox wrapper): a hostile `#include "/etc/shadow"` is "Permission denied", never a
diagnostic that quotes the file.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from . import SEARCH_NVCC, confine
from ..backends.base import BackendUnavailable, ResourceUsage
from . import messages, nvrtc, toolkit
from ..contract import DEFAULT_ARCH
from ..diagnostics import Diagnostic

if TYPE_CHECKING:
    from .extract import CompileUnit


@dataclass
class StaticResult:
    ok: bool
    diagnostics: list[Diagnostic]
    resources: dict[str, ResourceUsage]  # name expression (or mangled name) -> usage
    log: str
    seconds: float
    compiler: str = ""
    arch: str = DEFAULT_ARCH
    lowered: dict[str, str] = field(default_factory=dict)  # name expression -> mangled name

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "diagnostics": [d.to_json() for d in self.diagnostics],
                "resources": {k: vars(v) for k, v in self.resources.items()}, "log": self.log,
                "seconds": self.seconds, "compiler": self.compiler, "arch": self.arch,
                "lowered": self.lowered}


# ---- where the compiler and headers are --------------------------------------------------

@lru_cache(maxsize=1)
def cuda_include_dir() -> str | None:
    """The CUDA headers (cuda_fp16.h, cuda_bf16.h): the nvidia-cuda-runtime wheel, else the toolkit."""
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        for base in nvidia.__path__:
            for sub in ("cu13", "cuda_runtime", "cu12"):
                inc = Path(base) / sub / "include"
                if (inc / "cuda_fp16.h").is_file():
                    return str(inc)
    except ImportError:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "include" / "cuda_fp16.h").is_file():
            return str(Path(home) / "include")
    return None


@lru_cache(maxsize=1)
def cccl_include_dirs() -> list[str]:
    """CCCL (nv/target, cuda/std: what cooperative_groups and cuda_fp16 include) from the
    nvidia-cuda-cccl wheel, which puts it under the CUDA include folder's cccl/."""
    inc = cuda_include_dir()
    return [str(Path(inc) / "cccl")] if inc and (Path(inc) / "cccl" / "nv" / "target").is_file() else []


def _nvrtc() -> str | None:
    """NVRTC's version ('13.0'), or None where libnvrtc is not found."""
    return nvrtc.version()


def available() -> str | None:
    """'nvcc X.Y' (a CUDA toolkit), 'nvrtc X.Y' or None."""
    tk = toolkit.find()
    if tk is not None:
        return tk.describe()
    ver = _nvrtc()
    return f"nvrtc {ver}" if ver is not None else None


def nvrtc_label(why: str = "") -> str:
    """What judged when NVRTC did, and why it was NVRTC: 'NVRTC 13.5: no CUDA toolkit found'."""
    return f"NVRTC {_nvrtc() or '?'}: {why or toolkit.why_none()}"


# ---- what NVRTC lacks -----------------------------------------------------------------------
# nvcc includes cuda_runtime.h (hence <stdint.h>) implicitly; NVRTC has no C library headers at
# all. Kernels routinely use int64_t or include <cstdint>, so give NVRTC small stand-ins for
# the freestanding headers and include <cstdint> first, as nvcc effectively does.
_SHIM = {
    # With CCCL on the include path (a CUDA toolkit, or the nvidia-cuda-cccl wheel) its own
    # <cuda/std/cstdint> is what cooperative_groups includes: use it, so the two never clash.
    "cstdint": """#pragma once
#if __has_include(<cuda/std/cstdint>)
#include <cuda/std/cstdint>
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;
using ::uint16_t; using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; }
#else
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long long uint64_t; typedef long long intptr_t; typedef unsigned long long uintptr_t;
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807LL
#define INT32_MIN (-INT32_MAX - 1)
#define INT64_MIN (-INT64_MAX - 1)
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615ULL
namespace std { using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;
using ::uint16_t; using ::uint32_t; using ::uint64_t; using ::intptr_t; using ::uintptr_t; }
#endif
""",
    "cstddef": """#pragma once
typedef decltype(sizeof(0)) size_t; typedef long ptrdiff_t;
namespace std { using ::size_t; using ::ptrdiff_t; typedef decltype(nullptr) nullptr_t; }
""",
    "climits": """#pragma once
#if __has_include(<cuda/std/climits>)
#include <cuda/std/climits>
#else
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-INT_MAX - 1)
#define UINT_MAX 4294967295U
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-LONG_MAX - 1L)
#define ULONG_MAX 18446744073709551615UL
#define LLONG_MAX 9223372036854775807LL
#define LLONG_MIN (-LLONG_MAX - 1LL)
#define ULLONG_MAX 18446744073709551615ULL
#endif
""",
    "cfloat": """#pragma once
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F
#define DBL_MAX 1.7976931348623158e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-016
""",
    "cassert": """#pragma once
#define assert(e) do { if (!(e)) __trap(); } while (0)
""",
    # NVRTC has the math functions built in (global namespace); <cmath> adds the std:: names and
    # the constants a C library's <math.h> defines (INFINITY, NAN, M_PI...).
    "cmath": "#pragma once\n" + "".join(f"#ifndef {n}\n#define {n} {v}\n#endif\n" for n, v in (
        ("INFINITY", "__int_as_float(0x7f800000)"), ("NAN", "__int_as_float(0x7fffffff)"),
        ("HUGE_VALF", "INFINITY"), ("HUGE_VAL", "__longlong_as_double(0x7ff0000000000000LL)"),
        ("M_PI", "3.14159265358979323846"), ("M_E", "2.7182818284590452354"), ("M_LN2", "0.69314718055994530942"),
        ("M_SQRT2", "1.41421356237309504880"), ("M_SQRT1_2", "0.70710678118654752440"),
        ("M_2_SQRTPI", "1.12837916709551257390"))) + "namespace std {\n" + "".join(f"using ::{f};\n" for f in (
        "abs fabs sqrt exp exp2 expm1 log log2 log10 log1p pow sin cos tan asin acos atan atan2 sinh cosh tanh "
        "asinh acosh atanh erf erfc floor ceil round trunc fmod fmin fmax fma copysign hypot cbrt lgamma tgamma "
        "isnan isinf isfinite signbit ldexp frexp nearbyint rint").split()) + "}\n",
    "algorithm": "#pragma once\nnamespace std { using ::min; using ::max; }\n",
}
# Standard headers device code includes that only CCCL's libcu++ provides under NVRTC: std:: names
# from cuda::std (qualified lookup in std follows the using-directive).
for _name in nvrtc.STD_HEADERS:
    _SHIM[_name] = (f"#pragma once\n#if __has_include(<cuda/std/{_name}>)\n#include <cuda/std/{_name}>\n"
                    f"namespace std {{ using namespace ::cuda::std; }}\n#endif\n")
_SHIM.update({"stdint.h": _SHIM["cstdint"], "stddef.h": _SHIM["cstddef"], "limits.h": _SHIM["climits"],
              "float.h": _SHIM["cfloat"], "assert.h": _SHIM["cassert"], "math.h": _SHIM["cmath"]})
NVRTC_PRELUDE = "#include <cstdint>\n#include <cstddef>\n"


@lru_cache(maxsize=1)
def nvrtc_shim_dir() -> str:
    """A directory with the stand-in headers (written once per content)."""
    digest = hashlib.sha256(repr(sorted(_SHIM.items())).encode()).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "astra" / f"nvrtc-shim-{digest}"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        root = Path(tempfile.gettempdir()) / f"astra-nvrtc-shim-{digest}"
        root.mkdir(parents=True, exist_ok=True)
    from ..storage import writing
    for name, text in _SHIM.items():
        f = root / name
        if not f.is_file() or f.read_text() != text:
            tmp = f.with_suffix(f".tmp{os.getpid()}")
            with writing("NVRTC's stand-in headers", root):
                try:
                    tmp.write_text(text)
                    os.replace(tmp, f)
                except BaseException:
                    tmp.unlink(missing_ok=True)
                    raise
    return str(root)


def nvrtc_options(unit: CompileUnit, arch: str) -> list[str]:
    """Options shared by the static check and the GPU backend (CuPy's RawModule)."""
    project = unit.options()  # the file's folder, the project's include paths, macros, standard
    std = [] if any(o.startswith("-std=") for o in project) else ["-std=c++17"]
    opts = [f"--gpu-architecture={arch}", *std, "-lineinfo"]
    dirs = [str(Path(unit.path).resolve().parent)] if getattr(unit, "path", "") else []
    inc = cuda_include_dir()
    tail = ([inc] if inc else []) + cccl_include_dirs() + [nvrtc_shim_dir()]
    return list(dict.fromkeys(opts + [f"-I{d}" for d in dirs] + project + [f"-I{d}" for d in tail]))


def confinement(options: Sequence[str]) -> confine.Confinement:
    """What an NVRTC compile with these options may read: the project's folders, CUDA's and
    CCCL's headers, the stand-ins, NVRTC's own libraries and the Python ones it runs from."""
    inc = cuda_include_dir()
    ours = ([inc] if inc else []) + cccl_include_dirs() + [nvrtc_shim_dir()]
    return confine.for_unit(options, (*ours, *confine.loaded_library_dirs("libnvrtc"), *confine.python_dirs()))


# ---- compiling ---------------------------------------------------------------------------

_cache: dict[str, StaticResult] = {}
_lock = threading.Lock()


def _options(unit: CompileUnit, arch: str, extra: tuple[str, ...]) -> list[str]:
    return nvrtc_options(unit, arch) + list(extra)


def compile_unit(unit: CompileUnit, arch: str = DEFAULT_ARCH, *, options: tuple[str, ...] = (),
                 extra_name_expressions: tuple[str, ...] = ()) -> StaticResult:
    """Compile `unit` (an `astra_cuda.compile.extract.CompileUnit`) for `arch` and report diagnostics at the
    user's lines plus per-kernel resources: the unit's whole file with nvcc where a toolkit is
    installed, else the unit with NVRTC. `extra_name_expressions`: other kernels of the file to
    instantiate in the same compile. Never raises for bad code: `ok` is False."""
    names = tuple(dict.fromkeys((unit.name_expression,) + tuple(extra_name_expressions)))
    tk, why = toolkit.for_file(unit.file_text, unit.path, unit.context) if unit.file_text and not options \
        else (None, "")
    if tk is not None and unit.search_cut:   # the search's proven cut (`fastpath`): never a final verdict's
        if unit.search_cut == SEARCH_NVCC:
            return _compile_file(unit, arch, names, tk, unit.source, unit.search_cut)
        tk, why = None, unit.search_cut
    if tk is not None:
        return _compile_file(unit, arch, names, tk)
    from .headers import header_digest
    key = hashlib.sha256(repr((unit.source, unit.path, tuple(unit.options()), arch, options, names, why,
                               header_digest(unit.source, unit.path, unit.options()))).encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    try:
        if _nvrtc() is not None:
            result = confine.call(confinement(_options(unit, arch, options)), _compile_nvrtc, unit, arch, options,
                                  names, why, timeout_s=confine.compiler_seconds())
        else:
            result = _failed("no CUDA compiler available for static checks (install a CUDA toolkit, or "
                             "the nvidia-cuda-nvrtc package)", "compile", arch)
    except BackendUnavailable as e:  # no Landlock here: nothing of the user's is compiled
        return _failed(f"static checks are off: {e}", "sandbox", arch)
    except confine.CompileTimeout as e:  # its thread is stuck in NVRTC: this worker is done
        _retire_worker()
        return _failed(str(e), "compile", arch)
    result.seconds = time.perf_counter() - t0
    with _lock:
        _cache[key] = result
    return result


def compile_units(units: Sequence[CompileUnit], arch: str = DEFAULT_ARCH) -> list[StaticResult]:
    """`compile_unit` for each unit; the kernels of one file share one nvcc compile."""
    together: dict[tuple[str, str], list[str]] = {}
    for u in units:
        together.setdefault((u.path, u.file_text), []).append(u.name_expression)
    out = []
    for u in units:
        tk = toolkit.for_file(u.file_text, u.path, u.context)[0] if u.file_text else None
        others = tuple(together[(u.path, u.file_text)]) if tk is not None else ()
        out.append(compile_unit(u, arch, extra_name_expressions=others))
    return out


def _compile_file(unit: CompileUnit, arch: str, names: tuple[str, ...], tk: toolkit.Toolkit,
                  text: str | None = None, label: str = "") -> StaticResult:
    """nvcc on the unit's whole file (cached by the file's and its headers' content), or on
    `text` (the search's proven cut), said in the compiler's `label`."""
    from . import nvcc
    try:
        r = nvcc.compile(unit.file_text if text is None else text, unit.path, unit.context, arch, names, toolkit=tk)
    except BackendUnavailable as e:
        return _failed(f"static checks are off: {e}", "sandbox", arch)
    except nvcc.InvalidName as e:
        return _failed(str(e), "compile", arch)
    own = f"`{unit.name_expression}`"
    diags = [d for d in r.diagnostics if d.code != "kernel" or own in d.message]
    ok = r.ok and unit.name_expression in r.kernels
    return StaticResult(ok, diags, r.resources, r.log, r.seconds, f"{label}: {r.compiler}" if label else r.compiler,
                        arch, dict(r.kernels))


def _failed(message: str, code: str, arch: str) -> StaticResult:
    return StaticResult(False, [Diagnostic(0, 0, 0, 1, "error", message, code=code)], {}, "", 0.0, "none", arch)


def _retire_worker() -> None:
    from ..execution import worker
    worker.retire_after_reply()


def _compile_nvrtc(unit: CompileUnit, arch: str, extra: tuple[str, ...], names: tuple[str, ...], why: str = "") -> StaticResult:
    filename = "astra_unit.cu"
    source = NVRTC_PRELUDE + unit.source
    done = nvrtc.compile_program(source, filename, _options(unit, arch, extra) + ["--ptxas-options=-v"], names)
    ptx, lowered = "", done.lowered
    if not done.ok and "ptxas" in done.log and not _FRONT_ERROR.search(done.log):
        # ptxas failed: the front end worked. Get the PTX (with .loc lines) and the lowered
        # names from a PTX-only compile, to map ptxas's messages back to the user's lines.
        ptx_only = nvrtc.compile_program(source, filename, _options(unit, arch.replace("sm_", "compute_"), extra),
                                         names, want_ptx=True)
        if ptx_only.ok:
            ptx, lowered = ptx_only.ptx, ptx_only.lowered
    return _result(unit, done.ok, done.log, ptx, lowered, nvrtc_label(why), arch)


# ---- reading the log ---------------------------------------------------------------------

_FRONT_ERROR = messages.FRONT_ERROR


def _result(unit: CompileUnit, ok: bool, log: str, ptx: str, lowered: dict[str, str], compiler: str,
            arch: str) -> StaticResult:
    said = compiler.split(":")[0]  # 'NVRTC 13.5'
    # the unit's lines are the device pass's (its spacing, macros expanded): columns re-anchored in the file's own
    from .headers import own_text
    diags = messages.front_diagnostics(log, unit.path, said,
                                       user_text=own_text(unit.file_text, unit.path) if unit.file_text else None)
    diags += messages.ptxas_diagnostics(log, ptx, unit.path, lowered, said)
    if not ok and not any(d.severity == "error" for d in diags):
        diags.append(messages.failed_without_message(log, said))
    resources = messages.resources(log, lowered, (unit.name_expression,))
    return StaticResult(ok, diags, resources, log, 0.0, compiler, arch, lowered)
