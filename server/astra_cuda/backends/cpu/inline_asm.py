"""Inline PTX on the CPU backend: refused only where the kernel reaches it.

A header full of `asm` (DeepSpeed's memory helpers, FasterTransformer's conversions) says nothing
about the kernel that includes it: what matters is the asm the kernel can execute. `mark` turns
each asm statement of a function body into a call of a function no one defines, named with a
nonce the source cannot know (same lines, so `#line` mapping holds). The host compiler emits
only what the kernel's entry reaches — the templates it instantiates, the inline functions it
uses — so the markers its object still references (`reached`) are exactly the asm statements the
kernel can execute: those make it Unsupported, naming each one; the rest is dead code that never
runs, and the statement itself never reaches the host assembler. An asm outside a function body
or spelled by a macro is left in place, for the screen to refuse.

A few idioms real files use are not refused but run, as C++ with the same effect on the operands
(`emulate`): one PTX instruction, positional operands whose constraints match its registers, no
ordering or scope qualifiers:
- vector and scalar global loads and stores of 16/32/64-bit elements with cache hints only
  (`ld.global.nc.v4.u32`, `ld.global.ca.v2.f32`, `st.global.cs.v4.u32`, ...): hints change no
  value; a misaligned address traps, as on the GPU;
- integer conversions with saturation (`cvt.rni.sat.s8.f32`, `cvt.rni.sat.s32.f32`,
  `cvt.sat.s8.s32`: vLLM's int8 quantization), ties to even, NaN to 0, sign-extended;
- conversions between f32 and f16/bf16 rounding to nearest even (`cvt.rn.f16.f32`,
  `cvt.rn.bf16x2.f32`, `cvt.f32.f16`, ...), done by the CUDA headers' own exact host conversions;
- packing and unpacking 16-bit halves (`mov.b32 {%0, %1}, %2;`, `mov.b32 %0, {%1, %2};`) and
  `mov.{u32,b32,s32} %0, %%laneid;`.
Inputs are read before outputs are written, each operand expression is evaluated once, and an
operand whose size is not its register's fails to compile rather than run.
"""
from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from astra_cuda.model.syntax import walk

from . import screen


@dataclass(frozen=True)
class Marked:
    source: str
    nonce: str
    places: tuple[screen.Place, ...]  # the k-th marker's asm statement
    opcodes: tuple[str, ...] = ()      # and its first instruction, as the message names it

    def reached(self, obj: Path) -> list[str]:
        """What the compiled object still calls that the CPU cannot run: the marked asm statements
        (in source order) and the intrinsics the shim only declares (DECLARED_ONLY)."""
        from elftools.elf.elffile import ELFFile

        pattern = re.compile(rf"{_PREFIX}{self.nonce}_(\d+)")
        found: set[int] = set()
        intrinsics: list[str] = []
        with open(obj, "rb") as f:
            symtab = ELFFile(f).get_section_by_name(".symtab")
            for sym in symtab.iter_symbols() if symtab is not None else ():
                if sym["st_shndx"] != "SHN_UNDEF":
                    continue
                if (m := pattern.search(sym.name)) is not None:
                    found.add(int(m.group(1)))
                elif sym.name in DECLARED_ONLY:
                    intrinsics.append(f"{DECLARED_ONLY[sym.name]} ({sym.name})")
        return [f"inline PTX (asm) at {self.places[k]} ({self.opcodes[k]})" if self.opcodes[k] else
                f"inline PTX (asm) at {self.places[k]}" for k in sorted(found) if k < len(self.places)] + intrinsics


# Intrinsics the shim declares (extern "C") but cannot give a meaning on the CPU: a kernel that
# reaches one is refused; one in code the kernel never reaches costs nothing.
DECLARED_ONLY = {"__cvta_generic_to_shared": "shared-window addresses", "__cvta_shared_to_generic": "shared-window addresses"}


_PREFIX = "astra_reached_asm_"


def mark(source: str, filename: str) -> Marked:
    """Each `asm(...);` statement inside a function body becomes `{ void M(); M(); }` (M unique
    to it and to this build), padded with the statement's line breaks."""
    tree = screen.parse(source)
    marks = screen.line_directives(tree, filename)
    data = source.encode()
    nonce = secrets.token_hex(6)
    edits: list[tuple[int, int, bytes]] = []
    places: list[screen.Place] = []
    opcodes: list[str] = []
    for n in walk(tree.root_node):
        if n.type != "gnu_asm_expression":
            continue
        stmt = n.parent
        if stmt is None or stmt.type != "expression_statement" or not _in_function_body(stmt):
            continue
        emulated = emulate(n)
        if emulated is not None:
            edits.append((stmt.start_byte, stmt.end_byte, emulated.encode() + b"\n" * stmt.text.count(b"\n")))
            continue
        name = f"{_PREFIX}{nonce}_{len(places)}"
        places.append(screen.place_of_row(marks, n.start_point[0], filename))
        opcodes.append(_opcode(n))
        breaks = stmt.text.count(b"\n")
        edits.append((stmt.start_byte, stmt.end_byte, f"{{ void {name}(); {name}(); }}".encode() + b"\n" * breaks))
    for start, end, repl in sorted(edits, reverse=True):
        data = data[:start] + repl + data[end:]
    return Marked(data.decode(), nonce, tuple(places), tuple(opcodes))


def _opcode(asm) -> str:
    """The first instruction's name in an asm template (`ld.global.ca.v4.u32`), '' if unreadable."""
    literal = next((k for k in asm.children if k.type in ("string_literal", "concatenated_string")), None)
    text = (_string(literal) if literal is not None else None) or ""
    for step in re.split(r"[;\n]", text):
        words = [w for w in step.replace("{", " ").replace("}", " ").split() if not w.startswith("@")]
        if words and not words[0].startswith((".", "//")):
            return words[0][:60]
    return ""


def _in_function_body(node) -> bool:
    p = node.parent
    while p is not None:
        if p.type == "compound_statement":
            return True
        p = p.parent
    return False


# ---- emulation of common idioms ----------------------------------------------------------------

_HINTS = (r"(?:\.(?:ca|cg|cs|lu|cv|wb|wt|nc|L1::no_allocate|L1::evict_normal|L1::evict_unchanged|L1::evict_first|"
          r"L1::evict_last|L2::evict_normal|L2::evict_first|L2::evict_last|L2::64B|L2::128B|L2::256B))*")
_ELEM = {"u16": 16, "b16": 16, "s16": 16, "u32": 32, "b32": 32, "s32": 32, "f32": 32, "u64": 64, "b64": 64,
         "s64": 64, "f64": 64}
_REG = {16: "h", 32: "r", 64: "l"}  # the constraint letter of an integer register of that size
_REG_F = {32: "f", 64: "d"}         # and of a float register
_LIST = r"\{\s*(%\d+(?:\s*,\s*%\d+)*)\s*\}"
_LOAD = re.compile(rf"ld\.global{_HINTS}(?:\.(v2|v4))?\.(\w+)\s+(?:{_LIST}|(%\d+))\s*,\s*\[\s*(%\d+)\s*\]")
_STORE = re.compile(rf"st\.global{_HINTS}(?:\.(v2|v4))?\.(\w+)\s+\[\s*(%\d+)\s*\]\s*,\s*(?:{_LIST}|(%\d+))")
_CVT = {  # instruction -> constraints (output, inputs...), the output's value from the inputs'
    "cvt.f32.f16": ("fh", "__half2float(__ushort_as_half({0}))"),
    "cvt.f32.bf16": ("fh", "__bfloat162float(__ushort_as_bfloat16({0}))"),
    "cvt.rn.f16.f32": ("hf", "__half_as_ushort(__float2half_rn({0}))"),
    "cvt.rn.bf16.f32": ("hf", "__bfloat16_as_ushort(__float2bfloat16_rn({0}))"),
    # .f16x2/.bf16x2: the first source goes to the upper half
    "cvt.rn.f16x2.f32": ("rff", "((unsigned)__half_as_ushort(__float2half_rn({0})) << 16 | "
                                "__half_as_ushort(__float2half_rn({1})))"),
    "cvt.rn.bf16x2.f32": ("rff", "((unsigned)__bfloat16_as_ushort(__float2bfloat16_rn({0})) << 16 | "
                                 "__bfloat16_as_ushort(__float2bfloat16_rn({1})))"),
}
# shfl.sync.MODE.b32 d, a, b, c, membermask: c is the warp-wide clamp (no segments) only
# Integer conversions with saturation: instruction -> (input constraint, C++ of the int value,
# the types' range). A destination register wider than the type gets the value sign-extended (PTX:
# a signed instruction type extends by sign), as `(short)` / `(int)` do.
_ICVT = {
    "cvt.rni.sat.s8.f32": ("f", "astra::cvt_rni_sat(astra::asm_f32({0}), -128, 127)"),
    "cvt.rni.sat.s32.f32": ("f", "astra::cvt_rni_sat(astra::asm_f32({0}), -2147483647 - 1, 2147483647)"),
    "cvt.sat.s8.s32": ("r", "astra::cvt_sat((int)astra::asm_bits<32>({0}), -128, 127)"),
}
_ICVT_RE = re.compile(r"(cvt\.(?:rni\.)?sat\.s(?:8|32)\.(?:f32|s32)) %0, %1")
_SHFL = re.compile(r"shfl\.sync\.(bfly|down|up|idx)\.b32 %0, %1, %2, ((0x[0-9a-fA-F]+|\d+)), (?:(%3)|(0x[0-9a-fA-F]+|\d+))")
_CVT_RE = re.compile(r"(cvt(?:\.rn)?\.(?:f32|f16|bf16)(?:x2)?\.(?:f32|f16|bf16)) %0, %1(?:, %2)?")


@dataclass(frozen=True)
class _Operand:
    constraint: str   # without the '=' of an output
    expr: str
    output: bool


def emulate(asm) -> str | None:
    """C++ with the effect of one asm statement of a known idiom, on one line; None otherwise."""
    parsed = _parse(asm)
    if parsed is None:
        return None
    raw, ops = parsed
    outs = [o for o in ops if o.output]
    ins = [o for o in ops if not o.output]
    body = raw.strip()
    if body.startswith("{") and body.endswith("}"):
        return _guarded_load(body[1:-1], outs, ins)
    text = _normal(body)
    if ";" in text or text.startswith(("@", "{")):
        return None  # several instructions, a predicate
    if (load := _load(text, outs, ins)) is not None:
        bits, n, src = load
        sets = " ".join(f"astra::asm_set({o.expr}, astra_v_[{i}]);" for i, o in enumerate(outs))
        return f"{{ {_uint(bits)} astra_v_[{n}]; __builtin_memcpy(astra_v_, {src}, {n * bits // 8}); {sets} }}"
    if m := _STORE.fullmatch(text):
        vec, elem, addr, lst, one = m.groups()
        n = {"v2": 2, "v4": 4}.get(vec or "", 1)
        if elem not in _ELEM or addr != "%0" or _regs(lst, one) != list(range(1, n + 1)):
            return None
        bits = _ELEM[elem]
        if outs or len(ins) != n + 1 or ins[0].constraint != "l" or \
                any(o.constraint not in _letters(elem, bits) for o in ins[1:]):
            return None
        vals = ", ".join(f"astra::asm_bits<{bits}>({o.expr})" for o in ins[1:])
        dst = f"astra::asm_addr({ins[0].expr}, {n * bits // 8}, __FILE__, __LINE__)"
        return f"{{ {_uint(bits)} astra_v_[{n}] = {{{vals}}}; __builtin_memcpy({dst}, astra_v_, {n * bits // 8}); }}"
    if m := _CVT_RE.fullmatch(text):
        form = _CVT.get(m.group(1))
        if form is None or len(outs) != 1 or outs[0].constraint + "".join(o.constraint for o in ins) != form[0] \
                or text.count("%") != len(form[0]):
            return None
        reads = " ".join(f"auto astra_i{i}_ = " + (f"astra::asm_bits<16>({o.expr});" if o.constraint == "h" else
                                                  f"astra::asm_f32({o.expr});") for i, o in enumerate(ins))
        value = form[1].format(*(f"astra_i{i}_" for i in range(len(ins))))
        return f"{{ {reads} astra::asm_set({outs[0].expr}, {value}); }}"
    if (m := _ICVT_RE.fullmatch(text)) and (form := _ICVT.get(m.group(1))) and len(outs) == 1 and len(ins) == 1 \
            and ins[0].constraint == form[0] and outs[0].constraint in ("r", "h") \
            and not (outs[0].constraint == "h" and ".s32." in m.group(1)):
        wide = "(unsigned)(int)" if outs[0].constraint == "r" else "(unsigned short)(short)"
        return f"{{ astra::asm_set({outs[0].expr}, {wide}({form[1].format(ins[0].expr)})); }}"
    letters = "".join(o.constraint for o in ops)
    if text == "mov.b32 {%0, %1}, %2" and letters == "hhr":
        return (f"{{ unsigned astra_i0_ = astra::asm_bits<32>({ins[0].expr}); "
                f"astra::asm_set({outs[0].expr}, (unsigned short)(astra_i0_ & 0xffffu)); "
                f"astra::asm_set({outs[1].expr}, (unsigned short)(astra_i0_ >> 16)); }}")
    if (text == "mov.b32 %0, {%1, %2}" and letters == "rhh") or (text == "mov.b32 %0, {%1, %1}" and letters == "rh"):
        return (f"{{ unsigned astra_lo_ = astra::asm_bits<16>({ins[0].expr}); unsigned astra_hi_ = "
                f"astra::asm_bits<16>({ins[-1].expr}); astra::asm_set({outs[0].expr}, astra_lo_ | astra_hi_ << 16); }}")
    if (m := _SHFL.fullmatch(text)) and len(outs) == 1 and len(ins) in (2, 3) and letters[:3] in ("ffr", "rrr") \
            and (m.group(4) is None) == (len(ins) == 2):
        mode, clamp = m.group(1), int(m.group(3), 0)
        if clamp != (0 if mode == "up" else 0x1f):
            return None  # another width than the warp's
        mask = ins[2].expr if len(ins) == 3 else m.group(5)
        t = "float" if letters[0] == "f" else "unsigned"
        call = {"bfly": "__shfl_xor_sync", "down": "__shfl_down_sync", "up": "__shfl_up_sync", "idx": "__shfl_sync"}[mode]
        return (f"{{ auto astra_v_ = astra::asm_bits<32>({ins[0].expr}); auto astra_b_ = astra::asm_bits<32>("
                f"{ins[1].expr}); unsigned astra_m_ = {mask}; {t} astra_x_; __builtin_memcpy(&astra_x_, &astra_v_, 4); "
                f"astra::asm_set({outs[0].expr}, {call}(astra_m_, astra_x_, (int)astra_b_)); }}")
    # `%laneid` with one `%` too: nvcc passes it to ptxas as written (sgl-kernel's `mov.s32`)
    if re.fullmatch(r"mov\.[ubs]32 %0, %%?laneid", text) and letters == "r":
        return f"{{ astra::asm_set({outs[0].expr}, astra::asm_laneid()); }}"
    return None


def _normal(text: str) -> str:
    """One instruction's text with its spacing made canonical: `op a, {b, c}, [d]`."""
    text = re.sub(r"\s+", " ", text.strip())
    text = re.sub(r"\s*([,{}\[\]])\s*", r"\1", text.rstrip(";").strip()).replace(",", ", ")
    return re.sub(r"(\S) ?([{\[])", r"\1 \2", text)


def _load(text: str, outs: list[_Operand], ins: list[_Operand]) -> tuple[int, int, str] | None:
    """(element bits, elements, C++ of the checked source address) of a global load into the
    outputs in order from the address in the first input; None for anything else."""
    m = _LOAD.fullmatch(text)
    if m is None:
        return None
    vec, elem, lst, one, addr = m.groups()
    n = {"v2": 2, "v4": 4}.get(vec or "", 1)
    if elem not in _ELEM or _regs(lst, one) != list(range(n)) or addr != f"%{n}":
        return None
    bits = _ELEM[elem]
    if len(outs) != n or not ins or ins[0].constraint != "l" or \
            any(o.constraint not in _letters(elem, bits) for o in outs):
        return None
    return bits, n, f"astra::asm_addr({ins[0].expr}, {n * bits // 8}, __FILE__, __LINE__)"


def _guarded_load(block: str, outs: list[_Operand], ins: list[_Operand]) -> str | None:
    """`{ .reg .pred p; setp.ne.b32 p, %P, 0; mov.b32 %0, 0; ...; @p ld.global... }`: the outputs
    are zero unless the predicate input is non-zero, and only then is memory read."""
    steps = [_normal(x) for x in block.split(";") if x.strip()]
    n = len(outs)
    if len(steps) != n + 3 or len(ins) != 2 or ins[1].constraint != "r":
        return None
    head = re.fullmatch(r"\.reg \.pred (\w+)", steps[0])
    if head is None:
        return None
    p = head.group(1)
    if steps[1] not in (f"setp.ne.{t}32 {p}, %{n + 1}, 0" for t in "bsu") or \
            any(steps[2 + i] not in (f"mov.b32 %{i}, 0", f"mov.u32 %{i}, 0") for i in range(n)) or \
            not steps[-1].startswith(f"@{p} "):
        return None
    load = _load(steps[-1][len(p) + 2:], outs, [_Operand("l", "astra_s_", False)])  # inputs are read first
    if load is None or load[0] != 32:
        return None
    bits, n, src = load
    sets = " ".join(f"astra::asm_set({o.expr}, astra_v_[{i}]);" for i, o in enumerate(outs))
    return (f"{{ auto astra_s_ = {ins[0].expr}; unsigned astra_p_ = astra::asm_bits<32>({ins[1].expr}); "
            f"unsigned astra_v_[{n}] = {{}}; if (astra_p_ != 0) __builtin_memcpy(astra_v_, {src}, {n * 4}); {sets} }}")


def _regs(lst: str | None, one: str | None) -> list[int]:
    items = lst.split(",") if lst is not None else [one or ""]
    return [int(x.strip()[1:]) for x in items]


def _letters(elem: str, bits: int) -> tuple[str, ...]:
    return (_REG[bits], _REG_F[bits]) if elem.startswith("f") else (_REG[bits],)


def _uint(bits: int) -> str:
    return {16: "unsigned short", 32: "unsigned", 64: "unsigned long long"}[bits]


def _parse(asm) -> tuple[str, list[_Operand]] | None:
    """The template (escapes decoded) and the operands in number order; None for what the
    emulation does not read (symbolic operand names, read-write operands, goto labels, clobbers
    other than memory)."""
    template = None
    ops: list[_Operand] = []
    for k in asm.children:
        if k.type in ("string_literal", "concatenated_string") and template is None:
            template = _string(k)
            if template is None:
                return None
        elif k.type in ("gnu_asm_output_operand_list", "gnu_asm_input_operand_list"):
            output = k.type == "gnu_asm_output_operand_list"
            for op in k.children:
                if op.type in (":", ","):
                    continue
                strs = [c for c in op.children if c.type == "string_literal"]
                exprs = [c for c in op.children if c.type not in ("string_literal", "(", ")")]
                if op.type not in ("gnu_asm_output_operand", "gnu_asm_input_operand") or len(strs) != 1 \
                        or len(exprs) != 1:
                    return None  # a symbolic name ([x] "r"(v)) is one more child
                c = _string(strs[0])
                if c is None or (output and not c.startswith("=")) or (not output and c.startswith(("=", "+"))):
                    return None
                c = c[1:] if output else c
                if c not in ("h", "r", "l", "f", "d"):
                    return None
                ops.append(_Operand(c, exprs[0].text.decode(), output))
        elif k.type == "gnu_asm_clobber_list":
            if any(c.type == "string_literal" and _string(c) != "memory" for c in k.children):
                return None
        elif k.type == "gnu_asm_goto_list":
            return None
    return (template, ops) if template is not None else None


def _string(node) -> str | None:
    parts = [node] if node.type == "string_literal" else [c for c in node.children if c.type == "string_literal"]
    out = []
    for p in parts:
        for c in p.children:
            if c.type == "string_content":
                out.append(c.text.decode())
            elif c.type == "escape_sequence":
                esc = {"\\n": "\n", "\\t": "\t", '\\"': '"', "\\\\": "\\"}.get(c.text.decode())
                if esc is None:
                    return None
                out.append(esc)
            elif c.type != '"':
                return None
    return "".join(out)
