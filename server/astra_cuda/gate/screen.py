"""Static screening of a candidate, before anything runs (tree-sitter, via astra_cuda.model.source).

Errors (the candidate is rejected): the kernel is missing or renamed; its parameters (names,
types, order) or template parameters changed; `__launch_bounds__` below the spec's block size;
host code added; host API calls (memory management, files, processes, clocks of the host).
Flags (a warning, and the runtime checks work harder): reading clocks or timers, new
`__device__` globals or `static` locals (state that survives a launch), atomics (determinism is
then checked within tolerance), fast-math intrinsic swaps (the CPU backend's emulation of their
error is approximate: confirm on a GPU).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator

from tree_sitter import Node

from ..model import exprs, source, syntax
from ..model.spec import Spec

TIMERS = {"clock", "clock64", "__nanosleep", "__globaltimer", "globaltimer", "__clock", "__clock64"}
TIMER_ASM = re.compile(r"%(global)?timer|%clock|%globaltimer")  # inside an asm string literal
# An atomic read-modify-write, by the callee's name: CUDA's own (`atomicAdd`, `atomicMax_block`)
# and the wrappers libraries put around them (PyTorch's `gpuAtomicAdd`/`gpuAtomicMax`, `fastAtomicAdd`,
# a project's `atomic_add_f16`): the order in which threads' updates land is the schedule's, so float
# sums through them round differently run to run — as inline PTX `atom.`/`red.` instructions do.
ATOMIC_CALL = re.compile(r"(?:^|_)atomic|Atomic")
ATOMIC_ASM = re.compile(r"(?<![\w.])(?:atom|red)\.")
HOST_APIS = {
    "cudaMalloc", "cudaFree", "cudaMemcpy", "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync",
    "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaDeviceSynchronize", "cudaStreamCreate",
    "cudaLaunchKernel", "cudaEventRecord", "cudaGraphLaunch", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
    "fopen", "fwrite", "fread", "open", "write", "read", "system", "popen", "fork", "execv", "execve",
    "execl", "execlp", "execvp", "dlopen", "dlsym", "socket", "connect", "getenv", "setenv", "mmap",
    "time", "gettimeofday", "clock_gettime", "usleep", "sleep", "nanosleep", "exit", "abort", "rand", "srand",
}
# Fast-math intrinsics -> the accurate function each replaces.
FAST_MATH = {
    "__expf": "expf", "__exp10f": "exp10f", "__logf": "logf", "__log2f": "log2f", "__log10f": "log10f",
    "__sinf": "sinf", "__cosf": "cosf", "__tanf": "tanf", "__sincosf": "sincosf", "__powf": "powf",
    "__fdividef": "division", "__frcp_rn": "division", "__fsqrt_rn": "sqrtf",
}


@dataclass
class Finding:
    kind: str          # 'signature' | 'template' | 'launch_bounds' | 'host_code' | 'missing_kernel' | ...
    message: str
    line: int | None   # 1-based line in the user's file
    error: bool


@dataclass
class ScreenResult:
    findings: list[Finding] = field(default_factory=list)
    uses_atomics: bool = False
    stateful_suspect: bool = False   # clocks, new __device__ globals, static locals
    fast_math: list[str] = field(default_factory=list)  # intrinsics added by the candidate

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.error]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if not f.error]


@lru_cache(maxsize=8)
def parsed(text: str) -> _Unit:
    """The unit of `text`, parsed once: the screen, the fast-math check and the race checker's
    report filter all read the same reference and candidate."""
    return _Unit(text)


class _Unit:
    """A parsed compile unit (or file) with #line mapping back to the user's file. Read-only
    once built (shared through `parsed`)."""

    def __init__(self, text: str):
        self.text = text
        # no token bound: a unit is the cut's output, within the cut's own ceilings (CUTLASS read
        # in as a project's headers makes units larger than any real file, 1.2 million nodes)
        self.model, self.tree = source.parse_with_tree(text, max_tokens=0)
        self._line_map: list[int] = []
        current = None
        for i, line in enumerate(text.split("\n")):
            m = re.match(r'\s*#\s*line\s+(\d+)', line)
            if m:
                current = int(m.group(1)) - 1  # the next line is this number
                self._line_map.append(-1)
                continue
            self._line_map.append(current if current is not None else i + 1)
            if current is not None:
                current += 1

    def user_line(self, node_or_line: Node | int) -> int:
        row = node_or_line.start_point[0] if isinstance(node_or_line, Node) else node_or_line
        return self._line_map[row] + 1 if 0 <= row < len(self._line_map) and self._line_map[row] >= 0 else row + 1

    def nodes(self, types: set[str]) -> Iterator[Node]:
        return syntax.of_type(self.tree.root_node, types)

    def calls(self) -> Iterator[tuple[str, Node]]:
        """(name, node) of every call expression's callee (plain or qualified identifier)."""
        for n in self.nodes({"call_expression"}):
            f = n.child_by_field_name("function")
            if f is None:
                continue
            if f.type == "template_function":
                f = f.child_by_field_name("name") or f
            if f.type == "qualified_identifier":
                f = f.child_by_field_name("name") or f
            if f.type == "identifier":
                yield (f.text or b"").decode("utf-8", "replace"), n

    def identifiers(self) -> set[str]:
        return {(n.text or b"").decode("utf-8", "replace") for n in self.nodes({"identifier"})}


def _norm_type(t: str) -> str:
    return " ".join(t.replace("*", " * ").replace("&", " & ").split())


def _launch_bound(kernel: source.Kernel) -> int | None:
    if not kernel.launch_bounds:
        return None
    m = re.search(r"\(\s*([^,)]+)", kernel.launch_bounds)
    if not m:
        return None
    try:
        return exprs.evaluate_int(m.group(1), {})
    except exprs.ExprError:
        return None  # a macro or template parameter: the launch itself will tell


def _max_block(spec: Spec) -> int:
    best = 0
    for sizes in spec.cases() + spec.bench_cases():
        try:
            _, b, _ = spec.launch_dims(sizes)
        except exprs.ExprError:
            continue
        best = max(best, b[0] * b[1] * b[2])
    return best


def fast_math_swaps(reference: str | None, candidate: str) -> list[str]:
    """Fast-math intrinsics the candidate calls that the reference does not."""
    cand = {name for name, _ in parsed(candidate).calls() if name in FAST_MATH}
    ref = {name for name, _ in parsed(reference).calls() if name in FAST_MATH} if reference else set()
    return sorted(cand - ref)


def screen(reference: str | None, candidate: str, kernel: str, spec: Spec | None = None) -> ScreenResult:
    """Screen a candidate unit (or file) text against the reference's. `kernel` is the kernel's
    name (plain or qualified)."""
    res = ScreenResult()
    cu = parsed(candidate)
    ru = parsed(reference) if reference is not None else None
    add = res.findings.append
    ck = cu.model.kernel(kernel)
    rk = ru.model.kernel(kernel) if ru is not None else None
    if ck is None:
        names = ", ".join(k.name for k in cu.model.kernels) or "none"
        add(Finding("missing_kernel", f"the candidate has no kernel named {kernel!r} (it has: {names})", None, True))
        return res
    line = cu.user_line(ck.name_span.start_line)
    if cu.model.syntax_errors:
        add(Finding("syntax", "the candidate has syntax errors (tree-sitter could not parse it fully)",
                    cu.user_line(cu.model.syntax_errors[0].start_line), False))
    # Signature.
    if rk is not None:
        cp = [(p.name, _norm_type(p.type)) for p in ck.params]
        rp = [(p.name, _norm_type(p.type)) for p in rk.params]
        if cp != rp:
            add(Finding("signature", f"the parameter list changed: reference ({_sig(rp)}), candidate ({_sig(cp)})",
                        line, True))
        if [" ".join(t.split()) for t in ck.template_params] != [" ".join(t.split()) for t in rk.template_params]:
            add(Finding("template", f"the template parameters changed: reference <{', '.join(rk.template_params)}>, "
                        f"candidate <{', '.join(ck.template_params)}>", line, True))
    elif spec is not None:
        # the spec names a parameter pack's elements (`args_0`, `args_1`): the instantiated kernel's
        params = [p.name for p in ck.instantiated(spec.template_args).params]
        given = [n for n, a in spec.args.items() if a.param]
        if params != given:
            add(Finding("signature", f"the parameters ({', '.join(params)}) do not match the spec's "
                        f"({', '.join(given)})", line, True))
    if spec is not None:
        bound = _launch_bound(ck)
        need = _max_block(spec)
        if bound is not None and bound < need:
            add(Finding("launch_bounds", f"__launch_bounds__({bound}) is below the spec's block of up to {need} "
                        f"threads: the launch contract would break", line, True))
    # Host code.
    ref_hosts = {n for i in ru.model.items if i.kind == "host_function" for n in i.defines} if ru else set()
    for item in cu.model.items:
        # a declaration (`auto has_tuple_size(T*) -> …;`, which CuTe's device code names in decltype
        # and the cut keeps) is no code: only a definition is host code added
        if item.kind == "host_function" and not item.device and not (item.defines & ref_hosts) \
                and not item.text.rstrip().endswith(";"):
            add(Finding("host_code", f"host function {', '.join(sorted(item.defines))} added: a candidate may only "
                        f"change device code", cu.user_line(item.span.start_line), True))
    ref_calls = {n for n, _ in ru.calls()} if ru else set()
    for name, node in cu.calls():
        if name in HOST_APIS and name not in ref_calls:
            add(Finding("host_api", f"calls the host API {name}(): not allowed in a kernel", cu.user_line(node), True))
        if ATOMIC_CALL.search(name):
            res.uses_atomics = True
    for n in cu.nodes({"gnu_asm_expression"}):
        template = n.child_by_field_name("assembly_code")   # the instructions, not the operands
        if template is not None and ATOMIC_ASM.search((template.text or b"").decode("utf-8", "replace")):
            res.uses_atomics = True
    # State and clocks.
    for name, node in cu.calls():
        if name in TIMERS:
            res.stateful_suspect = True
            add(Finding("timer", f"reads a clock ({name}): a kernel's result must not depend on time; "
                        f"checked with extra launches", cu.user_line(node), False))
    for n in cu.nodes({"string_literal"}):
        if TIMER_ASM.search((n.text or b"").decode("utf-8", "replace")):
            res.stateful_suspect = True
            add(Finding("timer", "reads a hardware timer register in inline assembly; checked with extra launches",
                        cu.user_line(n), False))
    ref_globals = {n for i in ru.model.items if i.kind == "variable" for n in i.defines} if ru else set()
    for item in cu.model.items:
        if item.kind != "variable" or not item.device or item.defines & ref_globals:
            continue
        words = set(item.text.replace("(", " ").split())
        if ("__device__" in words or "__managed__" in words) and "__constant__" not in words and \
                _mutable(item.text):
            res.stateful_suspect = True
            add(Finding("device_state", f"declares the __device__ global {', '.join(sorted(item.defines))}: state "
                        f"that survives between launches; checked with extra launches",
                        cu.user_line(item.span.start_line), False))
    ref_statics = _static_locals(ru) if ru else set()
    for name, node in _static_locals_nodes(cu):
        if name not in ref_statics:
            res.stateful_suspect = True
            add(Finding("device_state", f"declares the static local {name}: state that survives between launches; "
                        f"checked with extra launches", cu.user_line(node), False))
    res.fast_math = fast_math_swaps(reference, candidate)
    return res


def _mutable(declaration: str) -> bool:
    """Whether a declaration declares something a kernel can write: `const T x` and
    `T* const p` are read-only; `const T* p` is a writable pointer."""
    tree = source.parser().parse(declaration.encode("utf-8"))
    decl = next((n for n in tree.root_node.children if n.type == "declaration"), None)
    if decl is None:
        return True
    top_const = any(c.type == "type_qualifier" and c.text in (b"const", b"constexpr") for c in decl.children) or \
        any(c.type == "storage_class_specifier" and c.text == b"constexpr" for c in decl.children)
    for d in decl.children_by_field_name("declarator"):
        node = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
        if node is not None and node.type == "pointer_declarator":
            if not any(c.type == "type_qualifier" and c.text == b"const" for c in node.children):
                return True
        elif not top_const:
            return True
    return False


def _sig(params: list[tuple[str, str]]) -> str:
    return ", ".join(f"{t} {n}" for n, t in params)


def _static_locals_nodes(u: _Unit) -> Iterator[tuple[str, Node]]:
    for n in u.nodes({"declaration"}):
        parent = n.parent
        if parent is None or parent.type == "translation_unit" or parent.type == "declaration_list":
            continue
        words = set((n.text or b"").decode("utf-8", "replace").replace("(", " ").split())
        if words & {"__shared__", "const", "constexpr", "__constant__"}:
            continue  # per-block or read-only: no state across launches
        if any(c.type == "storage_class_specifier" and c.text == b"static" for c in n.children):
            for d in n.children_by_field_name("declarator"):
                name, _ = syntax.declarator_name(d)
                if name:
                    yield name, n


def _static_locals(u: _Unit) -> set[str]:
    return {name for name, _ in _static_locals_nodes(u)}
