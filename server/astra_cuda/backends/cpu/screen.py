"""Source screening for the CPU backend, on tree-sitter-cuda syntax trees.

- `forbidden_and_unsupported`: the compiled kernel is host code, so refuse host APIs a kernel
  has no business calling (CompileError), and detect what the CPU cannot run faithfully
  (Unsupported, "needs a GPU to verify"). It runs on the *preprocessed* text of the user's own
  lines, so macros cannot hide a call.
- `rewrite_shared`: same-line edits that give `extern __shared__` arrays the block's dynamic
  shared memory and poison static `__shared__` arrays at the start of every block.
- `fast_math_swaps`: flag candidates that trade sinf/logf/... for GPU approximations whose
  error the CPU does not reproduce.
"""
from __future__ import annotations

from dataclasses import dataclass

import tree_sitter

from astra_cuda.model import source as _source
from astra_cuda.model.syntax import walk as _walk

# Host APIs with no place in a kernel: processes, files, sockets, dynamic loading, raw memory
# mapping and system calls, environment, threads, signals, resource limits.
FORBIDDEN = frozenset("""
system popen pclose fork vfork clone execl execlp execle execv execvp execvpe execve fexecve
posix_spawn posix_spawnp fopen fopen64 freopen fdopen tmpfile open open64 openat creat close read
write pread pwrite readv writev lseek unlink unlinkat remove rename renameat mkdir rmdir chdir
fchdir chmod fchmod chown fchown symlink link truncate ftruncate opendir readdir mkstemp mkfifo
socket socketpair connect bind listen accept accept4 send sendto sendmsg recv recvfrom recvmsg
getaddrinfo gethostbyname shutdown setsockopt dlopen dlsym dlmopen dlclose mmap mmap64 munmap
mprotect mremap madvise shm_open memfd_create syscall ptrace kill raise signal sigaction
setrlimit prlimit getrlimit setuid setgid seteuid chroot pivot_root mount umount ioctl fcntl
getenv setenv putenv unsetenv pthread_create pthread_kill thrd_create sleep usleep nanosleep
ifstream ofstream fstream filebuf thread jthread async
freopen64 fopen64 tmpfile64 openat64 openat2 creat64 mkostemp mkostemps mkstemps mkdtemp tmpnam tempnam
renameat2 linkat symlinkat readlink readlinkat mknod mknodat fchmodat fchownat utime utimes utimensat
futimens truncate64 ftruncate64 sendfile splice tee copy_file_range io_uring_setup io_uring_enter
execveat clone3 unshare setns prctl seccomp bpf perf_event_open process_vm_readv process_vm_writev
userfaultfd dl_iterate_phdr environ __environ fgets fputs fputc fgetc getc putc fwrite fread fprintf
vfprintf fscanf vfscanf fflush fseek fseeko ftell rewind setvbuf setbuf getline getdelim stdin stdout
stderr fileno popen2 daemon setsid setpgid
dlvsym dladdr dlinfo dprintf vdprintf atexit __cxa_atexit at_quick_exit on_exit __cxa_thread_atexit
__cxa_thread_atexit_impl pthread_atfork
""".split())

# Attributes that run code at load time, rename symbols or redirect calls: `__attribute__((constructor))`
# would run before any check, `weakref("system")` or `alias` call a forbidden function by another name.
FORBIDDEN_ATTRIBUTES = frozenset({"constructor", "destructor", "__constructor__", "__destructor__",
                                  "init_priority", "section", "__section__", "weakref", "alias", "ifunc",
                                  "symver"})

# What the CPU backend cannot run faithfully, with the reason shown to the user.
UNSUPPORTED_IDENTIFIERS = {
    "nvcuda": "tensor-core code (WMMA)", "wmma": "tensor-core code (WMMA)",
    "mma_sync": "tensor-core code (WMMA)", "load_matrix_sync": "tensor-core code (WMMA)",
    "__pipeline_memcpy_async": "cp.async pipelines", "__pipeline_commit": "cp.async pipelines",
    "__pipeline_wait_prior": "cp.async pipelines", "__pipeline_arrive_on": "cp.async pipelines",
    "memcpy_async": "asynchronous copies (cp.async/TMA)", "cp_async": "asynchronous copies (cp.async)",
    "this_grid": "grid-wide cooperative sync", "grid_group": "grid-wide cooperative sync",
    "this_cluster": "thread-block clusters", "cluster_group": "thread-block clusters",
    "__cluster_dims__": "thread-block clusters", "cute": "CuTe", "cutlass": "CUTLASS",
    "cudaGridDependencySynchronize": "programmatic dependent launch",
    "tex1Dfetch": "texture fetches", "tex1D": "texture fetches", "tex2D": "texture fetches",
    "tex3D": "texture fetches", "surf2Dwrite": "surface writes", "surf2Dread": "surface reads",
    "labeled_partition": "labeled partitions",
    "binary_partition": "binary partitions",
}
UNSUPPORTED_INCLUDES = {
    "cub/": "CUB", "thrust/": "Thrust", "cutlass/": "CUTLASS", "cute/": "CuTe",
    "cuda/barrier": "cuda::barrier (mbarrier)",
    "cuda/pipeline": "cuda::pipeline (cp.async)", "cuda/ptx": "inline PTX (cuda::ptx)",
    "cuda/": "libcu++ (cuda::)", "cuda_pipeline": "cp.async pipelines",
    "cuda_awbarrier": "mbarrier", "cooperative_groups/memcpy_async": "asynchronous copies (memcpy_async)",
    "cooperative_groups/scan": "cooperative-groups scans",
}

# libcu++ headers that support host compilers and mean the same there: the CPU build includes them
# in host mode, ahead of the shim (toolchain.libcuxx_flags). Waiting and asynchronous ones stay
# refused (UNSUPPORTED_INCLUDES): a barrier or semaphore between fibers would block their thread.
LIBCUXX_HOST_HEADERS = ("cuda/std/", "cuda/functional", "cuda/cmath", "cuda/type_traits", "cuda/utility",
                        "cuda/bit", "cuda/numeric")
LIBCUXX_WAITING = ("cuda/std/barrier", "cuda/std/latch", "cuda/std/semaphore", "cuda/std/atomic",
                   "cuda/std/chrono", "cuda/std/thread")


def host_libcuxx(path: str) -> bool:
    """True for a libcu++ header the CPU build compiles as host code."""
    return path.startswith(LIBCUXX_HOST_HEADERS) and not path.startswith(LIBCUXX_WAITING) \
        and not path.startswith("cuda/std/__")


# CUB's headers all lead to the stand-in (runtime/include/cub/cub.cuh, toolchain.cub_header_names):
# an include is never refused, a CUB name the stand-in lacks is (it needs a GPU).
CUB_STAND_IN = frozenset({
    "BlockReduce", "WarpReduce", "BlockScan", "BlockLoad", "BlockStore", "BlockRadixSort", "Sum", "Max", "Min",
    "ArgMax", "ArgMin", "KeyValuePair", "NullType", "LoadDirectBlocked", "LoadDirectStriped", "StoreDirectBlocked",
    "StoreDirectStriped", "BlockReduceAlgorithm", "BLOCK_REDUCE_WARP_REDUCTIONS", "BLOCK_REDUCE_RAKING",
    "BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY", "BlockScanAlgorithm", "BLOCK_SCAN_RAKING", "BLOCK_SCAN_RAKING_MEMOIZE",
    "BLOCK_SCAN_WARP_SCANS", "BlockLoadAlgorithm", "BLOCK_LOAD_DIRECT", "BLOCK_LOAD_STRIPED", "BLOCK_LOAD_VECTORIZE",
    "BLOCK_LOAD_TRANSPOSE", "BLOCK_LOAD_WARP_TRANSPOSE", "BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED",
    "BlockStoreAlgorithm", "BLOCK_STORE_DIRECT", "BLOCK_STORE_STRIPED", "BLOCK_STORE_VECTORIZE",
    "BLOCK_STORE_TRANSPOSE", "BLOCK_STORE_WARP_TRANSPOSE", "BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED"})

FAST_MATH_SWAPS = (("sinf", "__sinf"), ("cosf", "__cosf"), ("logf", "__logf"),
                   ("tanf", "__tanf"), ("powf", "__powf"), ("sincosf", "__sincosf"),
                   ("log2f", "__log2f"), ("log10f", "__log10f"), ("expf", "__expf"),
                   ("exp10f", "__exp10f"))


def parse(text: str) -> tree_sitter.Tree:
    return _source.parser().parse(text.encode())


@dataclass(frozen=True)
class Place:
    file: str
    line: int  # 1-based, in the user's file

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def line_directives(tree: tree_sitter.Tree, default_file: str) -> list[tuple[int, str, int]]:
    """(source row, file, line) for each `#line N "file"` of the raw source."""
    marks = []
    for n in _walk(tree.root_node):
        if n.type == "preproc_call":
            d = n.child_by_field_name("directive")
            a = n.child_by_field_name("argument")
            if d is not None and d.text.decode().strip() == "#line" and a is not None:
                parts = a.text.decode().strip().split(None, 1)
                if parts and parts[0].isdigit():
                    f = parts[1].strip().strip('"') if len(parts) > 1 else None
                    marks.append((n.start_point[0], f or default_file, int(parts[0])))
    return sorted(marks)


def place_of_row(marks, row: int, default_file: str) -> Place:
    file, line = default_file, row + 1
    for r, f, l in marks:
        if r < row:
            file, line = f, l + (row - r - 1)
    return Place(file, line)


def unsupported_includes(source: str, filename: str) -> list[str]:
    """Includes of libraries the CPU backend cannot run ("<what> at file:line")."""
    tree = parse(source)
    marks = line_directives(tree, filename)
    found = []
    for n in _walk(tree.root_node):
        if n.type != "preproc_include":
            continue
        path = n.child_by_field_name("path")
        if path is None:
            continue
        p = path.text.decode().strip('<>"')
        if p.startswith("cub/") or host_libcuxx(p):
            continue
        for prefix, what in UNSUPPORTED_INCLUDES.items():
            if p.startswith(prefix):
                found.append(f"{what} (#include <{p}>) at {place_of_row(marks, n.start_point[0], filename)}")
                break
    return found


def includes(source: str) -> list[str]:
    """The paths of the unit's #include directives."""
    out = []
    for n in _walk(parse(source).root_node):
        if n.type == "preproc_include":
            path = n.child_by_field_name("path")
            if path is not None:
                out.append(path.text.decode().strip('<>"'))
    return out


def directive_problems(text: str, filename: str, pragma: bool = True) -> list[str]:
    """Preprocessor tricks that would make user code pass for a system header: GNU line markers
    (`# 1 "/usr/include/stdlib.h" 3`, whose flag 3 the compiler passes on) and, with `pragma`, the
    `system_header` pragma in any spelling. Checked on the raw text of the unit and of each user
    header (the preprocessed output cannot tell a real system header from a forged one). `#line`
    is harmless: it renames, but cannot make a file a system header. The pragma only flags the
    file it is in, under its real path, which `user_lines` screens unless it lies in a trusted
    folder: in a header it hides nothing (vendored libraries carry it: CCCL's `nv/target`)."""
    tree = parse(text)
    marks = line_directives(tree, filename)
    found = []
    for n in _walk(tree.root_node):
        where = place_of_row(marks, n.start_point[0], filename)
        if n.type == "preproc_call":
            d = n.child_by_field_name("directive")
            directive = d.text.decode().strip() if d is not None else ""
            a = n.child_by_field_name("argument")
            arg = a.text.decode().strip() if a is not None else ""
            if directive[1:].strip()[:1].isdigit():
                found.append(f"a line marker ({directive} {arg}) at {where}")
        if n.child_count == 0 or n.type in ("preproc_arg", "string_content"):
            if pragma and b"system_header" in n.text:
                found.append(f"the system_header pragma at {where}")
    return _dedup(found)


def absolute_includes(source: str, filename: str) -> list[str]:
    """`#include "/abs/path"`: kernel code includes by name, through the include path."""
    tree = parse(source)
    marks = line_directives(tree, filename)
    found = []
    for n in _walk(tree.root_node):
        if n.type == "preproc_include":
            path = n.child_by_field_name("path")
            if path is not None and path.text.decode().strip('<>"').startswith("/"):
                found.append(f"an include by absolute path ({path.text.decode()}) at "
                             f"{place_of_row(marks, n.start_point[0], filename)}")
    return found


def user_lines(preprocessed: str, trusted: tuple[str, ...] = ()) -> tuple[str, list[Place | None]]:
    """Keep the lines of a `g++ -E` output that come from non-system files (the user's code,
    after macro expansion); blank the rest. Returns the text and each row's user place. A file
    counts as a system header only when the compiler says so *and* it lies under one of the
    `trusted` folders (the compiler's and CUDA's headers, Astra's runtime)."""
    out, places = [], []
    file, line, system = "?", 1, False
    for raw in preprocessed.split("\n"):
        if raw.startswith("# ") and len(raw) > 2 and raw[2].isdigit():
            # linemarker: # LINE "FILE" FLAGS (flag 3 = system header)
            head, _, rest = raw[2:].partition(" ")
            if head.isdigit() and rest.startswith('"'):
                end = rest.rfind('"')
                file = rest[1:end]
                flags = rest[end + 1:].split()
                line = int(head)
                system = "3" in flags and is_under(file, trusted)  # <built-in> holds only macros
                out.append("")
                places.append(None)
                continue
        if system:
            out.append("")
            places.append(None)
        else:
            out.append(raw)
            places.append(Place(file, line))
        line += 1
    return "\n".join(out), places


def is_under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether `path`, links resolved, is one of `roots` or lies below one."""
    import os

    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def _name_of(node) -> str:
    if node.type == "qualified_identifier":
        name = node.child_by_field_name("name")
        return _name_of(name) if name is not None else node.text.decode()
    return node.text.decode()


MAX_SCREENED_CHARS = 8 << 20  # the user's lines after macro expansion (a real unit: tens of KB)


class TooLarge(ValueError):
    """The user's lines expand to more than the screen reads."""


def screen_preprocessed(preprocessed: str, trusted: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(forbidden uses, unsupported uses) in the user's lines, each as 'what at file:line'.
    TooLarge where macros expand them past MAX_SCREENED_CHARS (parsed, they would take gigabytes)."""
    text, places = user_lines(preprocessed, trusted)
    size = len(text) - text.count("\n")
    if size > MAX_SCREENED_CHARS:
        raise TooLarge(f"the kernel's lines expand to {size / 2**20:.0f} MiB after macro expansion (at most "
                       f"{MAX_SCREENED_CHARS >> 20} MiB): a macro that explodes?")
    tree = parse(text)
    own = _own_names(tree.root_node)
    forbidden: list[str] = []
    unsupported: list[str] = []
    for n in _walk(tree.root_node):
        t = n.type
        row = n.start_point[0]
        if t == "gnu_asm_expression":
            unsupported.append(f"inline PTX (asm) at {places[row]}")
        elif t == "qualified_identifier":
            scope, name = n.child_by_field_name("scope"), n.child_by_field_name("name")
            if scope is not None and scope.text == b"cub" and name is not None:
                first = next((k for k in _walk(name) if k.type in ("identifier", "type_identifier",
                                                                  "namespace_identifier")), name)
                if first.text.decode() not in CUB_STAND_IN:
                    unsupported.append(f"CUB (cub::{first.text.decode()}) at {places[row]}")
        elif t in ("attribute_specifier", "attribute_declaration", "attribute"):
            for k in _walk(n):
                if k.type == "identifier" and k.text.decode() in FORBIDDEN_ATTRIBUTES:
                    forbidden.append(f"__attribute__(({k.text.decode()})) at {places[row]}")
        elif t in ("identifier", "type_identifier", "namespace_identifier"):
            name = n.text.decode()
            # `::system` or `std::system` means the library's, whatever a local is called
            qualified = n.parent is not None and n.parent.type == "qualified_identifier" and \
                n.parent.child_by_field_name("name") == n and _global_or_std(n.parent)
            if name in FORBIDDEN and (qualified or name not in own) and not _is_declarator(n):
                forbidden.append(f"{name} at {places[row]}")
            elif name in UNSUPPORTED_IDENTIFIERS:
                unsupported.append(f"{UNSUPPORTED_IDENTIFIERS[name]} ({name}) at {places[row]}")
    return _dedup(forbidden), _dedup(unsupported)


def _global_or_std(q) -> bool:
    scope = q.child_by_field_name("scope")
    return scope is None or scope.text.decode() in ("std", "::std")


_DECLARATOR_WRAPPERS = ("pointer_declarator", "array_declarator", "reference_declarator",
                        "init_declarator", "parenthesized_declarator")


def _is_declarator(node) -> bool:
    """True for the name being declared in a variable/parameter/function declarator."""
    p = node.parent
    while p is not None and p.type in _DECLARATOR_WRAPPERS:
        if p.child_by_field_name("declarator") != node:
            return False
        node, p = p, p.parent
    if p is None:
        return False
    if p.type == "function_declarator":
        return p.child_by_field_name("declarator") == node
    return p.type in ("declaration", "parameter_declaration", "field_declaration") \
        and p.child_by_field_name("type") != node


def _own_names(root) -> set[str]:
    """Variables and parameters the user declares, and functions the user defines (with a body):
    a local called `read` is not libc's read. Body-less function declarations do not count, so
    declaring `int system(const char*);` oneself does not get past the screen."""
    names = set()
    for n in _walk(root):
        if n.type == "identifier" and _is_declarator(n):
            p = n.parent
            if p.type == "function_declarator":
                q = p.parent
                while q is not None and q.type in _DECLARATOR_WRAPPERS:
                    q = q.parent
                if q is None or q.type != "function_definition":
                    continue
            names.add(n.text.decode())
    return names


def _dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def rewrite_shared(source: str) -> str:
    """Same-line source edits for shared memory (so #line mapping is untouched):
    `extern __shared__ T name[];` becomes a pointer to the block's dynamic shared memory, and
    each local static `__shared__` declaration is wrapped in the shim's ASTRA_SHARED_OPEN/CLOSE/BIND
    (redzones ASan checks, in its build) and followed by ASTRA_POISON_SHARED(name)."""
    data = source.encode()
    tree = parse(source)
    edits: list[tuple[int, int, bytes]] = []
    for n in _walk(tree.root_node):
        if n.type != "declaration":
            continue
        kids = n.children
        qualifier = next((k for k in kids if k.type == "type_qualifier" and k.text == b"__shared__"), None)
        if qualifier is None:
            continue
        static = next((k for k in kids if k.type == "storage_class_specifier" and k.text == b"static"), None)
        if static is not None:  # `static __shared__`: the shim's __shared__ is already static
            edits.append((static.start_byte, static.end_byte, b" " * len(static.text)))
        ext = next((k for k in kids if k.type == "storage_class_specifier" and k.text == b"extern"), None)
        at_function_scope = n.parent is not None and n.parent.type == "compound_statement"
        if ext is not None:
            arr = next((k for k in _walk(n) if k.type == "array_declarator"), None)
            ident = None
            if arr is not None:
                ident = next((k for k in arr.children if k.type == "identifier"), None)
            if ident is None:
                continue
            name = ident.text.decode()
            tname = f"astra_dyn_t_{name}"
            elem = f"std::remove_extent_t<{tname}>"
            edits.append((ext.start_byte, ext.end_byte, b"typedef"))
            edits.append((qualifier.start_byte, qualifier.end_byte, b" " * len(qualifier.text)))
            edits.append((ident.start_byte, ident.end_byte, tname.encode()))
            if at_function_scope:
                tail = f" {elem}* const {name} = reinterpret_cast<{elem}*>(astra::dyn_smem());"
            else:
                tail = (f" static thread_local {elem}* {name}; static const int astra_dyn_reg_{name} ="
                        f" astra::register_dyn_shared([](void* p) {{ {name} = reinterpret_cast<{elem}*>(p); }});")
            edits.append((n.end_byte, n.end_byte, tail.encode()))
        elif at_function_scope:
            names = []
            for k in n.children:
                d = k
                while d is not None and d.type in ("array_declarator", "init_declarator", "pointer_declarator"):
                    d = d.child_by_field_name("declarator")
                if d is not None and d.type == "identifier" and k.type != "type_identifier" \
                        and k != n.child_by_field_name("type"):
                    names.append(d.text.decode())
            tail = "".join(f" ASTRA_POISON_SHARED({x});" for x in names)
            if names:   # the shim's bounds-guarded form (under AddressSanitizer; plainly `static thread_local`)
                tag = names[0]
                edits.append((n.start_byte, n.start_byte, f"ASTRA_SHARED_OPEN({tag}) ".encode()))
                edits.append((qualifier.start_byte, qualifier.end_byte, b" " * len(qualifier.text)))
                tail = f" ASTRA_SHARED_CLOSE({tag})" + "".join(f" ASTRA_SHARED_BIND({tag}, {x})" for x in names) + tail
            if tail:
                edits.append((n.end_byte, n.end_byte, tail.encode()))
    for start, end, repl in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        data = data[:start] + repl + data[end:]
    return data.decode()


# CUDA's built-in variables, which the shim defines as macros (a launch's own values, per fiber)
BUILTIN_VARIABLES = ("threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize")


def unshadowed(source: str) -> str:
    """A function's parameter named like a built-in variable (TGI's `const dim3 blockDim`, which
    C++ lets shadow CUDA's) renamed within that function, where every use of the name is the
    parameter's: the shim's macro of that name would otherwise replace it (a syntax error at
    the parameter). Same-length-or-longer edits on the same lines, so #line mapping holds."""
    if not any(b in source for b in BUILTIN_VARIABLES):
        return source
    data = source.encode()
    edits: list[tuple[int, int, bytes]] = []
    for fn in _walk(parse(source).root_node):
        if fn.type != "function_definition":
            continue
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        # the names the parameters declare: a built-in read in a default value (`int width =
        # warpSize`, apex's and TransformerEngine's shuffle helpers) is the built-in, not a parameter
        shadowing = {i.text.decode() for p in (plist.named_children if plist is not None else [])
                     for d in [p.child_by_field_name("declarator")] if d is not None
                     for i in _walk(d) if i.type == "identifier" and i.text.decode() in BUILTIN_VARIABLES}
        if shadowing:
            edits += [(n.start_byte, n.end_byte, b"astra_param_" + n.text) for n in _walk(fn)
                      if n.type == "identifier" and n.text.decode() in shadowing]
    for start, end, repl in sorted(set(edits), reverse=True):
        data = data[:start] + repl + data[end:]
    return data.decode()


def _called_names(source: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in _walk(parse(source).root_node):
        if n.type == "call_expression":
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type in ("identifier", "qualified_identifier"):
                name = _name_of(fn)
                counts[name] = counts.get(name, 0) + 1
    return counts


def fast_math_swaps(reference_src: str, candidate_src: str) -> list[str]:
    """Accurate math calls the candidate replaced by GPU fast-math intrinsics (e.g. sinf ->
    __sinf). The CPU backend cannot reproduce those intrinsics' GPU error, so a pass on the
    CPU says little: such candidates need a GPU to verify."""
    ref, cand = _called_names(reference_src), _called_names(candidate_src)
    out = []
    for accurate, fast in FAST_MATH_SWAPS:
        if cand.get(fast, 0) > ref.get(fast, 0) and ref.get(accurate, 0) > cand.get(accurate, 0):
            out.append(f"{accurate} -> {fast}: the GPU's {fast} approximation error cannot be "
                       "reproduced on the CPU; verify on a GPU")
    return out
