"""A kernel unit built for the CPU backend: preprocessed as the host compiler reads it (`g++ -E`,
confined, with NVRTC's macros, and the headers it read), screened before any build (`check_source`:
host APIs refused, preprocessor tricks that disguise code as a system header, features that need a
GPU), then compiled with its launcher entries and linked into a cached shared object
(`compile_module`; a failed build remembered for a minute). Astra's own builds, the compiler, its
flags and the cache are `toolchain`'s."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Sequence

from astra_cuda import redact, storage
from astra_cuda.backends.base import CompileError, Unsupported
from astra_cuda.compile import confine

from . import device_state, inline_asm, screen, toolchain

PREPROCESS_TIMEOUT_S = 60   # `g++ -E` of a unit takes well under a second
PREPROCESS_MEMORY = 1 << 30  # and a few hundred MB: an explosion stops twice as early as at 2 GiB
MAX_HEADER_BYTES = 4 << 20  # a user header read for the screen


def entries(name_expressions: Sequence[str]) -> str:
    """Per kernel: a launcher entry (unpacks the argument array and calls the kernel; the name
    expression instantiates templates) and a signature query."""
    out = ['\n#line 1 "<astra launcher>"']
    for i, expr in enumerate(name_expressions):
        out.append(f'extern "C" void astra_entry_{i}(void** astra_a_) {{ astra::invoke(&{expr}, astra_a_); }}')
        out.append(f'extern "C" int astra_sig_{i}(unsigned long long* astra_s_, int* astra_k_, int astra_m_) '
                   f'{{ return astra::signature(&{expr}, astra_s_, astra_k_, astra_m_); }}')
    return "\n".join(out) + "\n"


# The user's code sees the macros NVRTC defines, so the CPU compiles exactly the code the GPU
# compile accepted: `#ifndef __CUDACC_RTC__` cannot hide host code from the GPU-first check.
NVRTC_VIEW = "#define __CUDACC__ 1\n#define __CUDACC_RTC__ 1\n"


def named(source: str, filename: str) -> str:
    """Messages name the user's file even where the unit has no #line of its own."""
    return NVRTC_VIEW + f'#line 1 "{filename}"\n' + source


def preprocess(source: str, filename: str, options: Sequence[str]) -> str:
    return preprocess_with_headers(source, filename, options)[0]


def preprocess_with_headers(source: str, filename: str, options: Sequence[str]) -> tuple[str, list[str]]:
    """`g++ -E` of the unit (sandboxed), and the real paths of the headers it read. Bounded like
    every compile of user code (memory, output file size; a minute): a macro that doubles
    24 times in a few hundred bytes is an error here, not gigabytes read back."""
    with storage.writing(toolchain.CACHE, toolchain.cache_dir()), toolchain.build_dir() as d:
        src = Path(d) / "unit.cpp"
        src.write_text(named(source, filename))
        deps, out = Path(d) / "unit.d", Path(d) / "unit.ii"
        cmd = [toolchain.compiler(), *toolchain.libcuxx_flags(source), *toolchain.base_flags(""), *options,
               "-include", str(toolchain.SHIM), "-E", "-MD",
               "-MF", str(deps),
               "-o", str(out), "-x", "c++", str(src)]
        try:
            confined = dataclasses.replace(toolchain.confinement(d, options), memory=PREPROCESS_MEMORY)
            r = toolchain.run_compiler(cmd, confined, PREPROCESS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"preprocessing {filename} timed out after {PREPROCESS_TIMEOUT_S} s "
                               "(a macro that explodes?)")
        if r.returncode != 0:
            storage.after_compiler(r.stderr, d, toolchain.CACHE)
        if r.returncode != 0 and (hit := toolchain.limit_message(r, PREPROCESS_MEMORY)) is not None:
            raise CompileError(f"preprocessing {filename}: {hit}", log=redact.included(r.stderr, filename))
        if r.returncode != 0:
            log = redact.included(r.stderr, filename)
            raise CompileError(f"{filename} does not compile:\n{toolchain.first_errors(log)}", log=log)
        headers = _dependencies(deps.read_text()) if deps.exists() else []
        with open(out, encoding="utf-8", errors="replace") as f:
            text = f.read(confine.COMPILER_FILE_SIZE + 1)
        return text, [h for h in headers if h != str(src)]


def _dependencies(make_rule: str) -> list[str]:
    """The prerequisites of a `-MD` rule ('out: a.h b\\ c.h \\<newline> d.h')."""
    body = make_rule.replace("\\\n", " ").split(":", 1)[-1]
    out, cur, i = [], "", 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] in " #":
            cur += body[i + 1]
            i += 2
            continue
        if ch.isspace():
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    if cur:
        out.append(cur)
    return [os.path.realpath(p) for p in out]


def trusted_header_dirs() -> tuple[str, ...]:
    """Where real system headers live: the compiler's own include folders, CUDA's, the torch
    installed beside Astra, Astra's runtime (and its precompiled copy in the cache). Only there
    may a header be a 'system header'."""
    from astra_cuda.compile import torch_ext
    dirs = ["/usr/include", "/usr/lib/gcc", "/usr/local/include", *toolchain.cuda_include_dirs(),
            *torch_ext.installed_include_dirs(), str(toolchain.RUNTIME_DIR),
            *(str(p) for p in toolchain.cache_dir().glob("pch-*")),
            *(str(p) for p in toolchain.cache_dir().glob("cub-names-*"))]
    exe = shutil.which(toolchain.compiler())
    if exe:
        dirs.append(str(Path(os.path.realpath(exe)).parent.parent))  # a toolchain outside /usr
    return tuple(os.path.realpath(d) for d in dirs)


def check_source(source: str, filename: str, options: Sequence[str]) -> None:
    """Refuse forbidden host APIs and preprocessor tricks (CompileError) and detect unsupported
    features (Unsupported). A first, friendly error: the sandbox is the guarantee."""
    found = screen.unsupported_includes(source, filename)
    if found:
        raise Unsupported("the CPU backend cannot run this kernel faithfully; needs a GPU to verify: "
                          + "; ".join(found))
    tricks = screen.absolute_includes(source, filename) + screen.directive_problems(source, filename)
    if not tricks:
        text, headers = preprocess_with_headers(source, filename, options)
        trusted = trusted_header_dirs()
        for h in headers:
            if not screen.is_under(h, trusted):
                try:
                    with open(h, "rb") as f:
                        raw = f.read(MAX_HEADER_BYTES).decode(errors="replace")
                except OSError:
                    continue
                tricks += screen.directive_problems(raw, h, pragma=False)   # forged line markers only
    if tricks:
        raise CompileError("refused: preprocessor directives that disguise kernel code as a system header "
                           "or pull files by absolute path: " + ", ".join(tricks))
    try:
        forbidden, unsupported = screen.screen_preprocessed(text, trusted)
    except screen.TooLarge as e:
        raise CompileError(f"refused: {e}") from None
    if forbidden:
        raise CompileError("refused: the kernel calls host APIs a kernel has no business using "
                           "(the CPU backend runs it as host code): " + ", ".join(forbidden))
    if unsupported:
        raise Unsupported("the CPU backend cannot run this kernel faithfully; needs a GPU to verify: "
                          + "; ".join(unsupported))


_SAFE_OPTION_PREFIXES = ("-D", "-U", "-std=", "-I")


def host_options(options: Sequence[str], source: str = "") -> list[str]:
    """Keep the options that mean the same for g++ (macros, includes); drop nvcc/NVRTC ones
    such as -arch or --use_fast_math (fast-math intrinsics are already GPU-emulated)."""
    out = []
    if any(p.startswith(("cuda_fp8", "cuda_fp6", "cuda_fp4")) for p in screen.includes(source)):
        out.append("-DASTRA_WITH_FP8")  # included before __CUDA_ARCH__ is defined (host code paths)
    for o in options:
        if o.startswith("-std="):
            if o in ("-std=c++20", "-std=gnu++20"):  # the shim needs C++17 at least: older ones stay 17
                out.append(o)
        elif o.startswith(_SAFE_OPTION_PREFIXES):
            out.append(o)
    return out + toolchain.torch_options(source, out)


def compile_module(source: str, name_expressions: Sequence[str], filename: str,
                   options: Sequence[str], sanitize: str) -> Path:
    """Screen, rewrite and compile a unit into a cached shared object; returns its path."""
    from astra_cuda.compile.headers import header_digest
    opts = host_options(options, source)
    headers = header_digest(source, filename, opts)  # an edited header is a new build
    key = hashlib.sha256("\0".join([source, *name_expressions, *opts, str(sanitize), headers, toolchain.runtime_digest(),
                                    *toolchain.unit_flags(sanitize)]).encode()).hexdigest()[:24]
    out = toolchain.cache_dir() / f"mod-{key}{'-' + sanitize if sanitize else ''}.so"
    asked = time.monotonic()
    with toolchain.one_build(out):
        failed = _failed.get(str(out))
        if failed is not None and failed[0] >= asked:
            raise failed[1]  # the very build failed while this one waited for it (the reference is
            #                  often the candidate's own text): not a second minute of the same
        try:
            with storage.writing(toolchain.CACHE, out.parent):  # a full disk or read-only cache: said, not a traceback
                return _build_module(out, source, name_expressions, filename, opts, sanitize)
        except CompileError as e:
            now = time.monotonic()
            for k in [k for k, (t, _) in _failed.items() if now - t > 60]:
                del _failed[k]
            _failed[str(out)] = (now, e)
            raise


_failed: dict[str, tuple[float, CompileError]] = {}  # a module build that failed: when, and why


def _build_module(out: Path, source: str, name_expressions: Sequence[str], filename: str,
                  opts: list[str], sanitize: str) -> Path:
    if toolchain.reuse(out):
        return out
    marked = inline_asm.mark(source, filename)  # asm the kernel does not reach is dead code
    check_source(marked.source, filename, opts)
    rt, shim = toolchain.prepare(sanitize)
    libcuxx = toolchain.libcuxx_flags(source)
    if libcuxx or any(o.startswith(("-D", "-U", "-include")) for o in opts):
        shim = toolchain.SHIM  # macros or headers before the shim would not match the precompiled one
    with toolchain.build_dir() as d:
        src, obj = Path(d) / "unit.cpp", Path(d) / "unit.o"
        src.write_text(named(screen.rewrite_shared(screen.unshadowed(marked.source)), filename)
                       + entries(name_expressions))
        confined = toolchain.confinement(d, opts)

        def compile_cmd(tmp: str) -> list[str]:
            return [toolchain.compiler(), *libcuxx, *toolchain.unit_flags(sanitize), *opts, "-include", str(shim),
                    "-c", "-x", "c++",
                    str(src), "-o", tmp]

        what = f"compiling {filename} for the CPU"
        try:
            toolchain.atomic_build_unlocked(obj, compile_cmd, what, confined)
        except CompileError as e:
            if shim == toolchain.SHIM or not any(w in e.log for w in ("PCH", ".gch", toolchain.SHIM.name)):
                raise  # the kernel's own error (a timeout, a limit): a second build would say it again
            shim = toolchain.SHIM  # e.g. the precompiled header went away meanwhile: once more without it
            toolchain.atomic_build_unlocked(obj, compile_cmd, what, confined)
        reached = marked.reached(obj)
        if reached:
            raise Unsupported("the CPU backend cannot run this kernel faithfully; needs a GPU to verify: "
                              + "; ".join(reached))
        built = toolchain.atomic_build(out, lambda tmp: [toolchain.compiler(), *toolchain.base_flags(sanitize),
                                                         "-shared", str(obj), str(rt),
                                                         f"-Wl,-T,{device_state.SCRIPT}", "-o", tmp], what, confined)
    if (len(os.listdir(out.parent)) > toolchain.MAX_MODULES + 16
            or toolchain.module_bytes() > toolchain.MAX_MODULE_BYTES):
        toolchain.prune_cache()
    return built


def build_host(source: str, main: str, filename: str, options: Sequence[str]) -> Path:
    """A host program made of a unit (`source`) and Astra's `main` after it (`astra_cuda.model.construct`:
    it builds the objects of a class the kernel takes by value and prints their bytes), compiled
    as the unit's module is (the same screen, rewrites, flags and shim, so each class is laid out
    as the kernel module reads it) and linked with the runtime as an executable; cached by content.
    Run it confined (`astra_cuda.compile.hostprog.run`)."""
    from astra_cuda.compile.headers import header_digest
    opts = host_options(options, source)
    key = hashlib.sha256("\0".join(["host", source, main, *opts, header_digest(source, filename, opts),
                                    toolchain.runtime_digest(), *toolchain.unit_flags("")]).encode()).hexdigest()[:24]
    out = toolchain.cache_dir() / f"host-{key}"
    with toolchain.one_build(out), storage.writing(toolchain.CACHE, out.parent):
        if toolchain.reuse(out):
            return out
        marked = inline_asm.mark(source, filename)
        check_source(marked.source, filename, opts)   # the user's code; `main` is Astra's
        rt, _ = toolchain.prepare("")
        with toolchain.build_dir() as d:
            src, obj = Path(d) / "unit.cpp", Path(d) / "unit.o"
            # read as nvcc's host pass reads the unit, not as NVRTC does: the host-only members the cut
            # deletes for NVRTC (`compile.for_nvrtc`: the very constructor wanted here) are there
            src.write_text("#define __CUDACC__ 1\n" + f'#line 1 "{filename}"\n'
                           + screen.rewrite_shared(screen.unshadowed(marked.source)) + main)
            confined = toolchain.confinement(d, opts)
            what = f"compiling the constructor program of {filename}"
            toolchain.atomic_build_unlocked(obj, lambda tmp: [
                toolchain.compiler(), *toolchain.libcuxx_flags(source), *toolchain.unit_flags(""), *opts,
                "-include", str(toolchain.SHIM), "-c", "-x", "c++", str(src), "-o", tmp], what, confined)
            # the kernel's own code is in the program but never runs: what it calls of the
            # runtime (and the markers of its inline PTX) may stay unresolved
            return toolchain.atomic_build_unlocked(out, lambda tmp: [
                toolchain.compiler(), *toolchain.base_flags(""), str(obj), str(rt), "-ldl",
                "-Wl,--unresolved-symbols=ignore-all", "-o", tmp], what, confined)
