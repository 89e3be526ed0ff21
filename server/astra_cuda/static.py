"""Static diagnostics, no GPU needed: compile one kernel's unit with NVRTC (from PyPI, the
compiler CuPy uses) to a cubin, so that ptxas runs too, and read the log.

- Front-end errors and warnings come back at the user's file, line and column: the unit carries
  `#line` directives, and the column is read off the caret line NVRTC prints under the source.
- ptxas errors (bad inline PTX, over-size shared memory) name PTX lines or mangled kernels; they
  are mapped back through the `.loc` directives of the PTX (we compile with `-lineinfo`).
- `-Xptxas=-v` gives registers, spills, shared memory and stack per kernel -> ResourceUsage.

When NVRTC cannot be loaded we fall back to `nvcc --cubin -Xptxas -v`. Results are cached by
content hash for the life of the process. NVRTC creates no CUDA context, so this is safe in the
language-server process.

NVRTC opens the files a unit `#include`s itself, so every compile runs confined to what
`astra.confine` lets a compiler of user code read (a thread confined by Landlock; nvcc through
the sandbox wrapper): a hostile `#include "/etc/shadow"` is "Permission denied", never a
diagnostic that quotes the file.

Long because compiling, mapping the compiler's log to the user's lines and reading the resources
are one pipeline per unit.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import confine
from .backends.base import BackendUnavailable, ResourceUsage
from .contract import DEFAULT_ARCH
from .diagnostics import Diagnostic


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

    def to_json(self) -> dict:
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


@lru_cache(maxsize=1)
def _nvrtc():
    """The cuda.bindings NVRTC module, or None. cuda-bindings finds libnvrtc from the
    nvidia-cuda-nvrtc wheel through cuda-pathfinder."""
    try:
        from cuda.bindings import nvrtc
        err, major, minor = nvrtc.nvrtcVersion()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None
        nvrtc._astra_version = f"{major}.{minor}"
        return nvrtc
    except Exception:  # ImportError, or the shared library not found
        return None


def _nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def available() -> str | None:
    """'nvrtc X.Y', 'nvcc' or None."""
    mod = _nvrtc()
    if mod is not None:
        return f"nvrtc {mod._astra_version}"
    return "nvcc" if _nvcc() else None


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
for _name in ("type_traits", "limits", "utility", "array"):
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
    for name, text in _SHIM.items():
        f = root / name
        if not f.is_file() or f.read_text() != text:
            tmp = f.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, f)
    return str(root)


def nvrtc_options(unit, arch: str) -> list[str]:
    """Options shared by the static check and the GPU backend (CuPy's RawModule)."""
    project = unit.options()  # the file's folder, the project's include paths, macros, standard
    std = [] if any(o.startswith("-std=") for o in project) else ["-std=c++17"]
    opts = [f"--gpu-architecture={arch}", *std, "-lineinfo"]
    dirs = [str(Path(unit.path).resolve().parent)] if getattr(unit, "path", "") else []
    inc = cuda_include_dir()
    tail = ([inc] if inc else []) + cccl_include_dirs() + [nvrtc_shim_dir()]
    return list(dict.fromkeys(opts + [f"-I{d}" for d in dirs] + project + [f"-I{d}" for d in tail]))


def confinement(options) -> confine.Confinement:
    """What an NVRTC compile with these options may read: the project's folders, CUDA's and
    CCCL's headers, the stand-ins, NVRTC's own libraries and the Python ones it runs from."""
    inc = cuda_include_dir()
    ours = ([inc] if inc else []) + cccl_include_dirs() + [nvrtc_shim_dir()]
    return confine.for_unit(options, (*ours, *confine.loaded_library_dirs("libnvrtc"), *confine.python_dirs()))


# ---- compiling ---------------------------------------------------------------------------

_cache: dict[str, StaticResult] = {}
COMPILE_TIMEOUT_S = 120.0  # an NVRTC compile longer than this is stuck (an #include of a FIFO)
_lock = threading.Lock()


def _options(unit, arch: str, extra: tuple[str, ...]) -> list[str]:
    return nvrtc_options(unit, arch) + list(extra)


def compile_unit(unit, arch: str = DEFAULT_ARCH, *, options: tuple[str, ...] = (),
                 extra_name_expressions: tuple[str, ...] = ()) -> StaticResult:
    """Compile `unit` (an `astra_cuda.extract.CompileUnit`) for `arch` and report diagnostics at the
    user's lines plus per-kernel resources. Never raises for bad code: `ok` is False."""
    names = tuple(dict.fromkeys((unit.name_expression,) + tuple(extra_name_expressions)))
    from .extract import header_digest
    key = hashlib.sha256(repr((unit.source, unit.path, tuple(unit.options()), arch, options, names,
                               header_digest(unit.source, unit.path, unit.options()))).encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    try:
        if _nvrtc() is not None:
            result = confine.call(confinement(_options(unit, arch, options)), _compile_nvrtc, unit, arch, options,
                                  names, timeout_s=COMPILE_TIMEOUT_S)
        elif _nvcc() is not None:
            result = _compile_nvcc(unit, arch, options, names)
        else:
            result = _failed("no CUDA compiler available for static checks (install nvidia-cuda-nvrtc and "
                             "cuda-bindings, or nvcc)", "compile", arch)
    except BackendUnavailable as e:  # no Landlock here: nothing of the user's is compiled
        return _failed(f"static checks are off: {e}", "sandbox", arch)
    except confine.CompileTimeout as e:  # its thread is stuck in NVRTC: this worker is done
        _retire_worker()
        return _failed(str(e), "compile", arch)
    result.seconds = time.perf_counter() - t0
    with _lock:
        _cache[key] = result
    return result


def _failed(message: str, code: str, arch: str) -> StaticResult:
    return StaticResult(False, [Diagnostic(0, 0, 0, 1, "error", message, code=code)], {}, "", 0.0, "none", arch)


def _retire_worker() -> None:
    from . import worker
    worker.retire_after_reply()


def _nvrtc_program(nvrtc, source: str, filename: str, names: tuple[str, ...]):
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"nvrtcCreateProgram: {err}")
    for n in names:
        nvrtc.nvrtcAddNameExpression(prog, n.encode())
    return prog


def _nvrtc_log(nvrtc, prog) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.replace(b"\0", b"").rstrip().decode(errors="replace")


def _compile_nvrtc(unit, arch: str, extra: tuple[str, ...], names: tuple[str, ...]) -> StaticResult:
    nvrtc = _nvrtc()
    filename = "astra_unit.cu"
    opts = _options(unit, arch, extra) + ["--ptxas-options=-v"]
    prog = _nvrtc_program(nvrtc, NVRTC_PRELUDE + unit.source, filename, names)
    try:
        (res,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _nvrtc_log(nvrtc, prog)
        ok = res == nvrtc.nvrtcResult.NVRTC_SUCCESS
        lowered = _lowered(nvrtc, prog, names) if ok else {}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ptx = ""
    if not ok and "ptxas" in log and not _FRONT_ERROR.search(log):
        # ptxas failed: the front end worked. Get the PTX (with .loc lines) and the lowered
        # names from a PTX-only compile, to map ptxas's messages back to the user's lines.
        ptx_opts = [o for o in _options(unit, arch.replace("sm_", "compute_"), extra)]
        prog = _nvrtc_program(nvrtc, NVRTC_PRELUDE + unit.source, filename, names)
        try:
            (res2,) = nvrtc.nvrtcCompileProgram(prog, len(ptx_opts), [o.encode() for o in ptx_opts])
            if res2 == nvrtc.nvrtcResult.NVRTC_SUCCESS:
                _, n = nvrtc.nvrtcGetPTXSize(prog)
                buf = b" " * n
                nvrtc.nvrtcGetPTX(prog, buf)
                ptx = buf.rstrip(b"\0").decode(errors="replace")
                lowered = _lowered(nvrtc, prog, names)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
    return _result(unit, ok, log, ptx, lowered, f"nvrtc {nvrtc._astra_version}", arch)


def _lowered(nvrtc, prog, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for n in names:
        err, low = nvrtc.nvrtcGetLoweredName(prog, n.encode())
        if err == nvrtc.nvrtcResult.NVRTC_SUCCESS and low:
            out[n] = (low.decode(errors="replace") if isinstance(low, bytes) else str(low)).rstrip("\0").strip()
    return out


def _compile_nvcc(unit, arch: str, extra: tuple[str, ...], names: tuple[str, ...]) -> StaticResult:
    """Fallback: nvcc has no name expressions, so force each template instantiation by taking
    the kernel's address in host code."""
    nvcc = _nvcc()
    src = unit.source + "\n" + "".join(
        f"static void* __astra_use_{i} = (void*)&{n};\n" for i, n in enumerate(names))
    with tempfile.TemporaryDirectory(prefix="astra-static-") as tmp:
        cu = Path(tmp) / "astra_unit.cu"
        cu.write_text(src)
        # nvcc brings its own headers: leave out the wheel's and the NVRTC stand-ins.
        skip = {f"-I{nvrtc_shim_dir()}", f"-I{cuda_include_dir()}"}
        opts = [o.replace("--gpu-architecture=", "-arch=") for o in _options(unit, arch, extra) if o not in skip]
        cmd = [nvcc, "--cubin", *opts, "-Xptxas", "-v", "-o", str(Path(tmp) / "out.cubin"), str(cu)]
        toolkit = str(Path(os.path.realpath(nvcc)).parent.parent)  # its cicc, ptxas, headers, libdevice
        sandboxed = confine.for_unit(opts, (toolkit,), workdir=tmp, exec_dirs=(toolkit,))
        try:
            p = confine.run(cmd, sandboxed, 120)
            ok, log = p.returncode == 0, p.stdout + p.stderr
        except subprocess.TimeoutExpired:
            ok, log = False, "nvcc timed out after 120 s"
        ptx = ""
        if not ok and "ptxas" in log and not _FRONT_ERROR.search(log):
            ptx_path = Path(tmp) / "out.ptx"
            ptx_opts = [o for o in opts if not o.startswith("-arch=")] + [f"-arch={arch.replace('sm_', 'compute_')}"]
            q = confine.run([nvcc, "--ptx", *ptx_opts, "-o", str(ptx_path), str(cu)], sandboxed, 120)
            if q.returncode == 0:
                ptx = ptx_path.read_text(errors="replace")
    # Mangled names of plain kernels follow the Itanium ABI (_Z<len><name>...).
    lowered = {}
    for n in names:
        base = n.split("<")[0].split("::")[-1]
        m = re.search(r"_Z\w*?" + str(len(base)) + re.escape(base) + r"\w*", log)
        if m:
            lowered[n] = m.group(0)
    return _result(unit, ok, log, ptx, lowered, "nvcc", arch)


# ---- reading the log ---------------------------------------------------------------------

# EDG front-end message: `path(line): error: text` (also 'warning', 'catastrophic error', 'remark').
_FRONT = re.compile(r"^(?P<path>.+?)\((?P<line>\d+)\): (?P<sev>(?:catastrophic )?error|warning|remark)"
                    r"(?: #(?P<num>[\w-]+))?: (?P<msg>.*)$")
_FRONT_ERROR = re.compile(r"^.+?\(\d+\): (?:catastrophic )?error", re.M)
_PTXAS_LINE = re.compile(r"ptxas (?:application ptx input|[^,]*\.ptx), line (?P<ptxline>\d+); "
                         r"(?P<sev>error|warning)\s*: (?P<msg>.*)")
_PTXAS_ENTRY = re.compile(r"ptxas (?P<sev>error|warning)\s*: (?P<msg>.*?'(?P<entry>[\w$.]+)'.*)")
_PTXAS_OTHER = re.compile(r"ptxas (?P<sev>error|fatal|warning)\s*: (?P<msg>.*)")


def _same_file(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def _result(unit, ok: bool, log: str, ptx: str, lowered: dict[str, str], compiler: str,
            arch: str) -> StaticResult:
    diags = _front_diagnostics(log, unit.path)
    diags += _ptxas_diagnostics(log, ptx, unit.path, lowered)
    if not ok and not any(d.severity == "error" for d in diags):
        diags.append(Diagnostic(0, 0, 0, 1, "error", "compilation failed: " +
                                (log.strip().splitlines() or ["(no compiler log)"])[-1], code="compile",
                                source=compiler.split()[0]))
    resources = _resources(log, lowered, (unit.name_expression,))
    return StaticResult(ok, diags, resources, log, 0.0, compiler, arch, lowered)


def _front_diagnostics(log: str, user_path: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    lines = log.splitlines()
    i = 0
    while i < len(lines):
        m = _FRONT.match(lines[i])
        if not m:
            i += 1
            continue
        sev = "error" if "error" in m.group("sev") else ("warning" if m.group("sev") == "warning" else "info")
        msg = m.group("msg").strip()
        line = int(m.group("line")) - 1
        col, end_col = 0, None
        # The echoed source line (indented by 2) and a caret line under it give the column.
        j = i + 1
        if j + 1 < len(lines) and lines[j + 1].strip() == "^":
            col = max(0, lines[j + 1].index("^") - 2)
            src = lines[j][2:] if lines[j].startswith("  ") else lines[j]
            k = col
            while k < len(src) and (src[k].isalnum() or src[k] == "_"):
                k += 1
            end_col = k if k > col else col + 1
            j += 2
        # Context lines such as 'detected during instantiation of ...' belong to this message.
        while j < len(lines) and lines[j].startswith("          ") and lines[j].strip():
            msg += " (" + lines[j].strip() + ")"
            j += 1
        if not _same_file(m.group("path"), user_path):
            msg = f"in {m.group('path')}:{line + 1}: {msg}"
            line, col, end_col = 0, 0, None
        out.append(Diagnostic(line, col, line, end_col if end_col is not None else col + 1, sev, msg,
                              code=f"nvrtc-{m.group('num')}" if m.group("num") else "compile", source="nvrtc"))
        i = j
    return out


def _ptx_locations(ptx: str, user_path: str):
    """(line -> user line) for each PTX line, and entry (mangled) -> its first user line."""
    files: dict[str, str] = {}
    for m in re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.M):
        files[m.group(1)] = m.group(2)
    at: list[int | None] = []
    first: dict[str, int] = {}
    entry, cur = None, None
    for text in ptx.splitlines():
        m = re.match(r"\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)", text)
        if m:
            entry, cur = m.group(1), None
        m = re.match(r"\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)", text)
        if m and _same_file(files.get(m.group(1), ""), user_path):
            cur = int(m.group(2)) - 1
            if entry and entry not in first:
                first[entry] = cur
        at.append(cur)
    return at, first


def _ptxas_diagnostics(log: str, ptx: str, user_path: str, lowered: dict[str, str]) -> list[Diagnostic]:
    at, first = _ptx_locations(ptx, user_path) if ptx else ([], {})
    names = {v: k for k, v in lowered.items()}
    out: list[Diagnostic] = []
    seen: set[str] = set()
    for raw in log.splitlines():
        text = raw.strip()
        if not text.startswith("ptxas") or text.startswith("ptxas info") or text.startswith("ptxas  "):
            continue
        line, msg, sev = 0, None, "error"
        m = _PTXAS_LINE.search(text)
        if m:
            n = int(m.group("ptxline")) - 1
            line = at[n] if 0 <= n < len(at) and at[n] is not None else 0
            msg, sev = f"inline PTX / ptxas: {m.group('msg').strip()}", m.group("sev")
        elif (m := _PTXAS_ENTRY.search(text)) is not None:
            entry = m.group("entry")
            line = first.get(entry, 0)
            msg = m.group("msg").replace(entry, names.get(entry, entry))
            sev = m.group("sev")
            if "too much shared data" in msg:
                msg += " — static __shared__ arrays are limited to 48 KiB; use dynamic shared memory " \
                       "(extern __shared__) for more"
        elif (m := _PTXAS_OTHER.search(text)) is not None:
            if m.group("sev") == "fatal" and out:
                continue  # 'Ptx assembly aborted due to errors' repeats what was said
            msg, sev = f"ptxas: {m.group('msg').strip()}", "warning" if m.group("sev") == "warning" else "error"
        if msg is None or (line, msg) in seen:
            continue
        seen.add((line, msg))
        out.append(Diagnostic(line, 0, line, 1, sev, msg, code="ptxas", source="ptxas"))
    return out


_RES_ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_RES_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RES_USED = re.compile(r"Used (\d+) registers")
_RES_SMEM = re.compile(r"(\d+) bytes smem")


def _resources(log: str, lowered: dict[str, str], lowered_names: tuple[str, ...] = ()) -> dict[str, ResourceUsage]:
    names = {v: k for k, v in lowered.items()}
    raw: dict[str, dict] = {}
    cur = None
    for text in log.splitlines():
        m = _RES_ENTRY.search(text)
        if m:
            cur = m.group(1)
            raw.setdefault(cur, {})
            continue
        if cur is None:
            continue
        if (m := _RES_FRAME.search(text)) is not None:
            raw[cur]["stack_bytes"] = int(m.group(1))
            raw[cur]["spills_bytes"] = int(m.group(2)) + int(m.group(3))
        if (m := _RES_USED.search(text)) is not None:
            raw[cur]["registers"] = int(m.group(1))
            s = _RES_SMEM.search(text)
            raw[cur]["shared_static_bytes"] = int(s.group(1)) if s else 0
    out = {names.get(k, k): ResourceUsage(**v) for k, v in raw.items() if "registers" in v}
    # A unit holds one kernel: if its lowered name could not be read, the one entry is it.
    missing = [n for n in lowered_names if n not in out]
    if len(missing) == 1 and len(out) == 1 and next(iter(out)).startswith("_Z"):
        out = {missing[0]: next(iter(out.values()))}
    return out
