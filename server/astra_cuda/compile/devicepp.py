"""The file as nvcc's device pass sees it: the toolkit's own preprocessor command (read from
`nvcc --dryrun`: the host compiler with `__CUDA_ARCH__`, `__CUDACC__`, the toolkit's macros and
`-include cuda_runtime.h`) run on the user's text with the project's flags.

What comes out is the whole translation unit with every conditional decided, every macro
expanded, line markers kept (so every line is known by file and line) and, through `-dD` and
`-dI`, the `#define`s and `#include`s of each file in place. The CUDA keywords stay keywords
(`__device__`, `__shared__`, ... are defined as themselves after cuda_runtime.h), so the text
is still CUDA C++ that tree-sitter reads, nvcc compiles and the CPU backend's shim gives its
own meaning to. `astra_cuda.compile.cut` cuts a kernel's unit out of it.

A header that is not found is read as empty (and named in `missing`): a file whose host code
includes `<torch/extension.h>` still has kernels to cut where torch is not installed. Where no
toolkit is installed the command is built by hand from the same macros, with the CUDA headers
of the nvidia-cuda-runtime wheel. Runs confined (astra_cuda.compile.confine), cached by content.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from . import confine
from ..errors import BackendUnavailable
from ..contract import DEFAULT_ARCH
from ..errors import AstraError

# Defined as themselves once cuda_runtime.h has defined them as attributes: the text keeps them.
KEYWORDS = ("__global__", "__device__", "__host__", "__shared__", "__constant__", "__managed__",
            "__grid_constant__", "__forceinline__", "__noinline__")
FUNCTION_KEYWORDS = ("__launch_bounds__", "__maxnreg__", "__cluster_dims__")
KEEP_HEADER = "".join(f"#undef {k}\n#define {k} {k}\n" for k in KEYWORDS) + "".join(
    f"#undef {k}\n#define {k}(...) {k}(__VA_ARGS__)\n" for k in FUNCTION_KEYWORDS)
MAX_MISSING = 32      # headers read as empty before giving up
# The toolkit's crt/host_defines.h, which the nvidia-cuda-runtime wheel lacks (the emulated pass
# below): its GNU branch — what nvcc's device pass and NVRTC both use — for the macros a project's
# own code spells (`struct __align__(16) vec_n` is `__attribute__((aligned(16)))`: tree-sitter
# reads that, not an unexpanded `__align__(16)`, and the cut keeps the struct). Searched last
# (-idirafter), so a real toolkit's header always wins.
HOST_DEFINES = """#ifndef __HOST_DEFINES_H__
#define __HOST_DEFINES_H__
#define __no_return__ __attribute__((noreturn))
#define __noinline__ __attribute__((noinline))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(a) __align__(a)
#define __thread__ __thread
#define __import__
#define __export__
#define __cdecl
#define CUDARTAPI
#define CUDARTAPI_CDECL
#define __specialization_static
#endif
"""
STANDINS = {"crt/host_defines.h": HOST_DEFINES}
MEMORY = 1 << 30  # a preprocessor needs a few hundred MB: an explosion stops twice as early as at 2 GiB
_MISSING = re.compile(r"fatal error: (?P<name>[^:\n]+): No such file or directory")
# What the confinement refused to open: a header outside the folders it lets a compiler read.
_DENIED = re.compile(r"^(?P<at>[^\n]*?): fatal error: (?P<name>[^\n]+): Permission denied$", re.M)


class PreprocessError(AstraError):
    """The device pass's preprocessor refused the file (an #error, an unreadable header)."""


@dataclass(frozen=True)
class Preprocessed:
    text: str                     # the preprocessor's output, line markers included
    path: str                     # the user's file, as the markers spell it
    missing: tuple[str, ...]      # headers not found, read as empty
    toolkit_dirs: tuple[str, ...]  # the toolkit's own header folders and CCCL copies (`library_dirs`), never the project's code
    compiler: str                 # which preprocessor: 'nvcc 13.0 device pass (gcc)'


def _nvcc() -> str | None:
    """The toolkit's nvcc, found as every compile of Astra finds it (`compile.toolkit`)."""
    from . import toolkit
    tk = toolkit.find()
    return tk.nvcc if tk is not None else None


@lru_cache(maxsize=16)
def _nvcc_command(nvcc: str, arch: str, options: tuple[str, ...]) -> tuple[list[str], str]:
    """nvcc's own device-pass preprocessor command for these options (without input and
    output), and nvcc's version."""
    probe = "astra_probe.cu"
    r = subprocess.run([nvcc, "--dryrun", "--ptx", f"-arch={arch}", *options, probe], capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    version = re.search(r"release (\d+\.\d+)", subprocess.run(
        [nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout)
    for line in (r.stderr + r.stdout).splitlines():
        if line.startswith("#$ ") and " -E " in line and "-D__CUDA_ARCH__=" in line:
            words = shlex.split(line[3:])
            out: list[str] = []
            skip = False
            for w in words:
                if skip:
                    skip = False
                elif w == "-o":
                    skip = True
                elif w != probe:
                    out.append(w)
            return out, f"nvcc {version.group(1) if version else '?'}"
    raise PreprocessError(f"cannot read nvcc's device preprocessor from `nvcc --dryrun`: {r.stderr.strip()[-300:]}")


def _emulated_command(arch: str, options: tuple[str, ...]) -> tuple[list[str], str]:
    """No toolkit: the host compiler with the macros nvcc's device pass defines and the CUDA
    headers of the nvidia-cuda-runtime wheel."""
    from . import static
    cxx = os.environ.get("ASTRA_CXX") or shutil.which("g++") or shutil.which("c++")
    inc = static.cuda_include_dir()
    if not cxx or not inc:
        raise PreprocessError("no C++ preprocessor (g++) and no CUDA toolkit (nvcc) here: install one of them")
    nv = static.available() or "nvrtc 13.0"
    major, _, minor = nv.split()[-1].partition(".")
    sm = arch.removeprefix("sm_").removeprefix("compute_")
    cmd = [cxx, f"-D__CUDA_ARCH__={sm}0", f"-D__CUDA_ARCH_LIST__={sm}0", "-E", "-x", "c++",
           "-DCUDA_DOUBLE_MATH_FUNCTIONS", "-D__CUDACC__", "-D__NVCC__", f"-I{inc}",
           *(x for d in static.cccl_include_dirs() for x in ("-isystem", d)),
           f"-D__CUDACC_VER_MAJOR__={major}", f"-D__CUDACC_VER_MINOR__={minor or 0}",
           "-include", "cuda_runtime.h", "-m64",
           *(o for o in options if o.startswith(("-I", "-D", "-U", "-std=", "-isystem")))]
    return cmd, f"g++ emulating nvcc {major}.{minor}'s device pass (no CUDA toolkit found)"


def command(options: tuple[str, ...], arch: str = DEFAULT_ARCH) -> tuple[list[str], str]:
    """The preprocessor command with the project's options (nvcc puts each where it belongs),
    then the CUDA library headers a compiler-only toolkit lacks (as every nvcc compile)."""
    from . import toolkit
    tk = toolkit.find()
    if tk is None:
        return _emulated_command(arch, options)
    return _nvcc_command(tk.nvcc, arch, (*options, *toolkit.library_headers(tk)))


# What marks a folder as the root of a copy of CCCL (libcu++, CUB, Thrust: the toolkit's own
# library) that a project vendors and puts on its include path ahead of the toolkit's, as
# FlashInfer does for a newer libcu++ (`cuda::fast_mod_div`).
CCCL_MARKERS = ("cuda/std/version", "cub/cub.cuh", "thrust/version.h")


def library_dirs(options: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The include folders of the options that hold a copy of CCCL. Their headers are a library's,
    as the toolkit's are: the cut keeps their #includes (compilers read them whole, the CPU build
    as libcu++ for the host and CUB's stand-ins) instead of cutting CCCL's code item by item."""
    out, take = [], False
    for w in options:
        d = None
        if take:
            d, take = w, False
        elif w in ("-I", "-isystem"):
            take = True
        elif w.startswith("-I") and len(w) > 2:
            d = w[2:]
        elif w.startswith("-isystem") and len(w) > 8:
            d = w[8:]
        if d and any(os.path.isfile(os.path.join(d, m)) for m in CCCL_MARKERS):
            out.append(os.path.realpath(d))
    return tuple(dict.fromkeys(out))


def _toolkit_dirs(cmd: list[str]) -> tuple[str, ...]:
    """The header folders the command itself brings (the toolkit's, CCCL's)."""
    out, take = [], False
    for w in cmd:
        if take:
            out.append(w)
            take = False
        elif w in ("-isystem", "-I"):
            take = True
        elif w.startswith("-I") and len(w) > 2:
            out.append(w[2:])
    return tuple(dict.fromkeys(os.path.realpath(d) for d in out))


_cache: "OrderedDict[str, Preprocessed]" = OrderedDict()
_lock = threading.Lock()
CACHE_SIZE = 32


def preprocess(text: str, path: str, options: list[str] | tuple[str, ...], arch: str = DEFAULT_ARCH) -> Preprocessed:
    """The device pass's preprocessed text of `text` (the file at `path`, or a version of it:
    its quoted includes are found next to `path`). Cached by content, headers included."""
    from .headers import header_digest
    opts = tuple(options)
    cmd, compiler = command(opts, arch)
    path = os.path.abspath(path)
    key = hashlib.sha256(repr((text, path, opts, arch, cmd, header_digest(text, path, list(opts)))).encode()).hexdigest()
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    result = _run(text, path, opts, cmd, compiler)
    with _lock:
        _cache[key] = result
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def _run(text: str, path: str, opts: tuple[str, ...], cmd: list[str], compiler: str) -> Preprocessed:
    here = os.path.dirname(path)
    # without the project's own -I folders, but with the CCCL copies among them
    toolkit = _toolkit_dirs(command((), DEFAULT_ARCH)[0]) + library_dirs(opts)
    exe = shutil.which(cmd[0]) or cmd[0]
    nvcc = _nvcc()
    exec_dirs = (str(Path(os.path.realpath(nvcc)).parent.parent),) if nvcc else ()
    from ..storage import after_compiler, writing
    scratch = "the device pass's scratch folder"
    with writing(scratch, tempfile.gettempdir()), tempfile.TemporaryDirectory(prefix="astra-pp-") as tmp:
        src = Path(tmp) / "src" / os.path.basename(path)
        src.parent.mkdir()
        # The user's name for every line (and __FILE__), its folder for quoted includes.
        src.write_text(f'#line 1 "{path}"\n{text}')
        keep = Path(tmp) / "astra_keep_keywords.h"
        keep.write_text(KEEP_HEADER)
        stubs = Path(tmp) / "missing"
        stubs.mkdir()
        for rel, body in STANDINS.items():
            (stubs / rel).parent.mkdir(parents=True, exist_ok=True)
            (stubs / rel).write_text(body)
        out = Path(tmp) / "out.ii"
        full = [exe, *cmd[1:], "-include", str(keep), "-dD", "-dI", "-iquote", here,
                "-idirafter", str(stubs), "-o", str(out), str(src)]
        jail = dataclasses.replace(confine.for_unit([*opts, f"-I{here}"], toolkit, workdir=tmp, exec_dirs=exec_dirs),
                                   memory=MEMORY)
        limit = confine.compiler_seconds(confine.heavy(opts))
        missing: list[str] = []
        while True:
            try:
                r = confine.run(full, jail, limit)
            except subprocess.TimeoutExpired:
                raise PreprocessError(f"preprocessing {os.path.basename(path)} took more than {limit:.0f} s")
            except BackendUnavailable as e:  # no Landlock: nothing of the user's is read
                raise PreprocessError(f"cannot cut a unit out of {os.path.basename(path)}: {e}")
            if r.returncode == 0:
                break
            after_compiler(r.stderr, tmp, scratch)
            if (hit := confine.limit_message(r.stderr, r.returncode, MEMORY)) is not None:  # an explosion: said as such
                raise PreprocessError(f"{os.path.basename(path)} does not preprocess for the device ({compiler}): {hit}")
            # the copy's folder is the user's (quoted includes are looked for in both)
            stderr = r.stderr.replace(str(src.parent) + os.sep, here + os.sep)
            denied = _DENIED.search(stderr)
            if denied:
                raise PreprocessError(
                    f"{denied['at']}: cannot read {denied['name']}: Astra's compilers read only your project's "
                    "files, the CUDA toolkit's and the include folders your project gives; a header outside "
                    "them (or a link that leads out of the project) is not read")
            m = _MISSING.search(stderr)
            name = m.group("name").strip() if m else ""
            stub = (stubs / name).resolve()
            if not name or os.path.isabs(name) or not stub.is_relative_to(stubs.resolve()) \
                    or name in missing or len(missing) >= MAX_MISSING:
                errors = [ln for ln in stderr.splitlines() if "error" in ln] or stderr.splitlines()
                raise PreprocessError(f"{os.path.basename(path)} does not preprocess for the device ({compiler}): "
                                      + "; ".join(e.strip() for e in errors[:3]))
            missing.append(name)
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("")
        return Preprocessed(out.read_text(errors="replace"), path, tuple(missing),
                            toolkit + (str(stubs), str(Path(tmp).resolve())), compiler)
