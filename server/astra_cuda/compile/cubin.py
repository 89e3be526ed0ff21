"""The kernels of a cubin: its ELF symbol table (pyelftools), demangled (libstdc++'s
`__cxa_demangle` through cxxfilt).

A kernel's mangled name is found without guessing at mangling rules:
- a name expression with template arguments (`act<__half, 4>`) is instantiated by a probe the
  nvcc layer appends to its copy of the file, `template __device__ int __astra_probe_N<decltype(&E), &E>`:
  by the Itanium ABI the probe's own symbol holds the kernel's symbol as a template argument
  (`L <mangled-name> E`), so the kernel is the entry whose symbol the probe's contains;
- a plain name (`scale`, `ns::scale`) is the one entry whose demangled name, without its
  parameter list, is that name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PROBE = "__astra_probe_"


@dataclass(frozen=True)
class Symbol:
    name: str        # as in the ELF symbol table
    demangled: str   # libstdc++'s reading ('' when it is not a C++ name)
    entry: bool      # a kernel (a global function), not a probe or a variable


def demangle(name: str) -> str:
    import cxxfilt
    try:
        return str(cxxfilt.demangle(name, external_only=False))
    except cxxfilt.InvalidName:
        return ""


STO_CUDA_ENTRY = 0x10  # st_other of a kernel's symbol in a cubin (cuobjdump: STO_ENTRY)


def symbols(data: bytes) -> list[Symbol]:
    """The functions and objects a cubin defines."""
    import io

    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    elf = ELFFile(io.BytesIO(data))
    out = []
    for section in elf.iter_sections():
        if not isinstance(section, SymbolTableSection):
            continue
        raw, size = section.data(), section["sh_entsize"]
        other = 5 if elf.elfclass == 64 else 13  # st_other's byte in an Elf64_Sym / Elf32_Sym
        for i, s in enumerate(section.iter_symbols()):
            kind = s["st_info"]["type"]
            if kind not in ("STT_FUNC", "STT_OBJECT") or s["st_shndx"] == "SHN_UNDEF" or not s.name:
                continue
            entry = kind == "STT_FUNC" and bool(raw[i * size + other] & STO_CUDA_ENTRY)
            out.append(Symbol(s.name, demangle(s.name) if s.name.startswith("_Z") else "", entry))
    return out


_OPERATOR = re.compile(r"(?<=\))[<>=!]+(?=\()")


def _masked(text: str) -> str:
    """`text` with the comparison and shift operators of template-argument expressions blanked
    (the demangler writes them between parentheses: `enable_if<((4)>(1)), void>`), so that only
    template brackets are left as `<` and `>`; same length, so indices carry over. An operator's
    left operand is itself parenthesised inside the expression's own parentheses (`((4)>`); a
    `>(` after a function-pointer argument (`&(float act<float>(float const&))>(float*)`) closes
    the template before the parameter list."""
    opened: dict[int, int] = {}   # index of ')' -> index of its '('
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "(":
            stack.append(i)
        elif ch == ")" and stack:
            opened[i] = stack.pop()

    def blank(m: re.Match[str]) -> str:
        left = opened.get(m.start() - 1)
        operand = left is not None and left > 0 and text[left - 1] == "("
        return "~" * len(m.group(0)) if operand else m.group(0)
    return _OPERATOR.sub(blank, text)


def _top_level(text: str, stop: str) -> int:
    """The index of the first `stop` character outside brackets (len(text) if none)."""
    depth = 0
    for i, ch in enumerate(_masked(text)):
        if ch in stop and depth == 0:
            return i
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
    return len(text)


def plain_name(demangled: str) -> str:
    """`ns::scale(float*, int)` -> `ns::scale`; `void k<float>(float*)` -> `k<float>`."""
    depth, cut = 0, len(demangled)
    masked = _masked(demangled)
    for i, ch in enumerate(masked):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not demangled.startswith("anonymous namespace)", i + 1):
            cut = i
            break
    head = demangled[:cut].strip()
    # A template function's demangling starts with its return type: 'void k<float>'.
    depth = 0
    masked_head = _masked(head)
    for i in range(len(head) - 1, -1, -1):
        ch = masked_head[i]
        if ch in ">)":
            depth += 1
        elif ch in "<(":
            depth -= 1
        elif ch == " " and depth == 0:
            return head[i + 1:]
    return head


def _probe_argument(demangled: str, probe: str) -> str | None:
    """What a probe holds: `__astra_probe_0<&(void k<float>(float*))>` -> `void k<float>(float*)`
    (the last template argument; C++14's probe has the kernel's type before it)."""
    at = demangled.find(probe + "<")
    if at < 0:
        return None
    args = demangled[at + len(probe) + 1:]
    args = args[:_top_level(args, ">")]
    while (cut := _top_level(args, ",")) < len(args):
        args = args[cut + 1:]
    arg = args.strip().removeprefix("&")
    if arg.startswith("(") and _top_level(arg[1:], ")") == len(arg) - 2 and not arg.startswith("(anonymous"):
        arg = arg[1:-1]
    return arg


def _probe_type(demangled: str, probe: str) -> str | None:
    """A probe's first template argument: the kernel's pointer type, `void (*)(float*, int)`."""
    at = demangled.find(probe + "<")
    if at < 0:
        return None
    args = demangled[at + len(probe) + 1:]
    args = args[:_top_level(args, ">")]
    cut = _top_level(args, ",")
    return args[:cut].strip() if cut < len(args) else None


def _param_list(text: str) -> str:
    """The last top-level parenthesised list of a demangled function or function-pointer type
    (`ns::k(float*, int)`, `void k<float>(float*, int)`, `void (*)(float*, int)`), blanks removed."""
    depth, start, last = 0, -1, ""
    for i, ch in enumerate(_masked(text)):
        if ch in "<([":
            if ch == "(" and depth == 0:
                start = i
            depth += 1
        elif ch in ">)]":
            depth -= 1
            if ch == ")" and depth == 0 and start >= 0:
                last = text[start + 1:i]
    return last.replace(" ", "")


def kernel_names(found: list[Symbol], expressions: dict[str, int | None]) -> tuple[dict[str, str], list[str]]:
    """(name expression -> mangled name, problems). `expressions` maps each name expression to
    the number of its probe (None for a plain name, found by its demangled name)."""
    entries = [s for s in found if s.entry]
    out: dict[str, str] = {}
    problems: list[str] = []
    for expr, probe in expressions.items():
        if probe is not None:
            held = [a for s in found if not s.entry
                    and (a := _probe_argument(s.demangled, f"{PROBE}{probe}")) is not None]
            hits = [e for e in entries for a in held if e.demangled and a in (e.demangled, plain_name(e.demangled))]
            if len(hits) > 1:   # overloads: the probe's first argument is the kernel's pointer type
                types = [t for s in found if not s.entry and (t := _probe_type(s.demangled, f"{PROBE}{probe}"))]
                hits = [e for e in hits if any(_param_list(e.demangled) == _param_list(t) for t in types)] or hits
        else:
            want = expr.replace(" ", "")
            hits = [e for e in entries if e.name == expr or (e.demangled and _unqualified_anonymous(
                plain_name(e.demangled)).replace(" ", "") == want)]
        if len(hits) == 1:
            out[expr] = hits[0].name
        elif hits:
            problems.append(f"the kernel `{expr}` is overloaded ({'; '.join(h.demangled for h in hits)}): "
                            "Astra cannot tell which one to run")
        else:
            problems.append(f"the kernel `{expr}` is not in the compiled module")
    return out, problems


def _unqualified_anonymous(name: str) -> str:
    return name.replace("(anonymous namespace)::", "")
