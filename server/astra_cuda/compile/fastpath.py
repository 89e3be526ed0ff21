"""The search's fast path (issue 24): during `astra optimize`, a candidate is compiled from the
reference's cut unit with the candidate's kernel put in its place — by NVRTC in-process, else by
nvcc on the cut — instead of nvcc over the user's whole file, only where it is proven that the cut
means what the file means.

The proof (`prove`), once per reference file, cached by content (in memory and on disk):
1. `cutcheck`: nvcc compiles the cut and the whole file to unoptimised PTX, and the kernel's
   closure (entry, every function it calls, every variable it reads) is the same text — the cut
   means what the file means;
2. NVRTC's optimised PTX of the cut has the kernel's closure exactly as nvcc's optimised PTX of
   the whole file — the search runs the code the user's compiler makes. Where NVRTC's differs (an
   NVRTC of another version than the toolkit's) or NVRTC cannot compile the cut (a header it
   lacks), nvcc's optimised PTX of the cut is compared instead, and the search compiles the cut
   with nvcc (`SEARCH_NVCC`): for a PyTorch extension that is seconds instead of the ~20 s its
   whole file takes (torch's headers). An inliner that decides otherwise in the larger file fails
   both: no fast path.

Why a candidate keeps the proof (`search_unit`): it is taken only where the candidate's file is
the reference's file with the kernel's definition rewritten and device functions of new names
added next to it (the shape `extract.splice` makes), with the same parameters. Its unit is the
proven cut with that code put at the kernel's place: the same namespaces, the same macros in
force, the same project declarations before it. A name in the new code then means in the cut
what it means in the file when
- every project declaration of it is kept (the cut keeps a device name's declarations all
  together: every overload, whole types with their specializations, and what they use in turn;
  a host overload it leaves out makes the name uncovered), or
- it is a macro of the project the reference kernel used too (the cut keeps every `#define` in
  place; its expansion in the kernel's place is what the proof compared), or
- the project's code does not declare it at all (CUDA's and the library's headers are `#include`d
  at the same places in the cut; a host-only one is not read by NVRTC, so a name from it does not
  compile, and the candidate goes the whole-file way).
A name the project declares whose declarations the cut left out (a helper the reference never
called, a macro of the project the reference never used: its expansion may name them) is not
covered: that candidate is compiled from its whole file, as today. So is every candidate of
another shape (a rewritten helper of the file, a new type, another parameter list), every one
whose fast compile fails (NVRTC may refuse what nvcc takes), and every reference whose proof
fails or cannot be made (no toolkit: NVRTC compiles the cut there anyway).

What the fast path decides is the search's, never the user's: the final verdict of a candidate
that is adopted or shown as verified compiles the candidate's whole file with nvcc again
(`extract.CompileUnit.search_cut` is empty on every unit a final verdict uses; see
`agents.final_gate`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import toolkit as toolkit_mod
from . import SEARCH_NVCC, SEARCH_NVRTC   # the values of CompileUnit.search_cut
from ..backends.base import BackendUnavailable
from ..contract import DEFAULT_ARCH
from ..model import source, textedit

if TYPE_CHECKING:
    from .extract import CompileUnit
    from ..model.source import SourceModel



@dataclass(frozen=True)
class Proof:
    ok: bool
    reason: str          # what was proven, or why not
    seconds: float = 0.0
    compiler: str = ""   # SEARCH_NVRTC or SEARCH_NVCC where ok


CACHE_VERSION = 2   # bump when what is proven changes
_proofs: dict[str, Proof] = {}
_lock = threading.Lock()


def prove(ref: CompileUnit, arch: str = DEFAULT_ARCH) -> Proof:
    """Whether the search may compile `ref`'s cut (and candidates made from it) with NVRTC.
    Cached by content in memory and on disk (beside cutcheck's): every worker of a run, and every
    later run on the same file, proves nothing again."""
    from . import cutcheck, static, toolkit
    from .headers import header_digest
    t0 = time.perf_counter()
    if not ref.file_text:
        return Proof(False, "the unit does not carry its file")
    tk, why = toolkit.for_file(ref.file_text, ref.path, ref.context)
    if tk is None:
        return Proof(False, f"no fast path needed: NVRTC compiles the cut already ({why})")
    if static.available() is None:
        return Proof(False, "NVRTC is not installed: every compile is nvcc's")
    key = hashlib.sha256(repr((CACHE_VERSION, ref.source, ref.file_text, ref.path, ref.name_expression,
                               ref.appendix, ref.context, arch, tk.nvcc, static.available(),
                               header_digest(ref.file_text, ref.path, ref.options()))).encode()).hexdigest()[:32]
    with _lock:
        hit = _proofs.get(key)
    if hit is not None:
        return hit
    stored = cutcheck.cache_dir() / f"fastpath-{key}.json"
    try:
        proof = Proof(**json.loads(stored.read_text()))
    except (OSError, ValueError, TypeError):
        with ThreadPoolExecutor(1) as pool:   # beside cutcheck's two compiles
            same = pool.submit(_same_code, ref, tk, arch)
            checked = cutcheck.check(ref, arch)   # nvcc: the cut vs the file, unoptimised
            differs, compiler = same.result()
        if not checked.checked or not checked.ok:
            proof = Proof(False, f"the cut is not proven: {checked.message}", time.perf_counter() - t0)
        elif differs:
            proof = Proof(False, differs, time.perf_counter() - t0)
        else:
            who = "NVRTC's" if compiler == SEARCH_NVRTC else "nvcc's"
            proof = Proof(True, f"the cut means what the file means (nvcc, unoptimised), and {who} code for the "
                                "cut is nvcc's for the file (optimised PTX of the kernel's closure)",
                          time.perf_counter() - t0, compiler)
        # a check that could not be made (nvcc past its time on a busy machine, the file not
        # compiling yet) is not kept on disk: the next run tries again
        if checked.checked and not differs.startswith("nvcc does not compile the file") \
                and "NVRTC could not" not in differs:
            _store(stored, proof)
    with _lock:
        _proofs[key] = proof
    return proof


def _same_code(ref: CompileUnit, tk: toolkit_mod.Toolkit, arch: str) -> tuple[str, str]:
    """('', the search's compiler) where NVRTC's — else nvcc's — optimised PTX of the cut has the
    kernel's closure exactly as nvcc's of the whole file (the search then runs the code the user's
    compiler makes), else (what differs, '')."""
    from . import confine, cutcheck, nvrtc, static
    from . import nvcc as nvcc_mod
    probe = cutcheck.probe_appendix(ref.name_expression)
    options = nvcc_mod.project_flags(ref.context, ref.file_text, ref.path) + toolkit_mod.library_headers(tk)
    whole, log = cutcheck.nvcc_ptx(tk.nvcc, ref.file_text + "\n" + ref.type_checks + probe, ref.path, options, arch, [],
                               optimised=True)
    if whole is None:
        return f"nvcc does not compile the file ({cutcheck.first_errors(log)})", ""
    # line information only adds `.loc` lines (the search's compile asks for it; nvcc's here does not)
    opts = [o for o in static.nvrtc_options(ref, arch.replace("sm_", "compute_")) if o != "-lineinfo"]
    nvrtc.library()   # loaded here: the confined thread may not open it
    try:
        done = confine.call(static.confinement(opts), nvrtc.compile_program, static.NVRTC_PRELUDE + ref.source
                            + "\n" + probe, "astra_unit.cu", opts, (), True, timeout_s=confine.compiler_seconds())
        nvrtc_says = "" if done.ok else f"NVRTC does not compile the cut ({cutcheck.first_errors(done.log)})"
    except (confine.CompileTimeout, BackendUnavailable) as e:
        done, nvrtc_says = None, f"NVRTC could not compile the cut: {e}"
    if done is not None and done.ok:
        diff = cutcheck.compare(_linkage(done.ptx), _linkage(whole))
        if not diff:
            return "", SEARCH_NVRTC
        nvrtc_says = f"NVRTC's code for the cut is not nvcc's for the file: {diff}"
    # nvcc on the cut: the toolkit's own code generation, without the file's other headers
    cut, log = cutcheck.nvcc_ptx(tk.nvcc, ref.source + "\n" + probe, ref.path, options, arch, [], optimised=True)
    if cut is None:
        return f"{nvrtc_says}; nvcc does not compile the cut ({cutcheck.first_errors(log)})", ""
    diff = cutcheck.compare(_linkage(cut), _linkage(whole))
    if diff:
        return f"{nvrtc_says}; nvcc's code for the cut is not its code for the file: {diff}", ""
    return "", SEARCH_NVCC


_WEAK = re.compile(r"\.weak(\s+\.(?:entry|func)\b)")


def _linkage(ptx: str) -> str:
    """A template's instance is `.weak` where NVRTC made it for a name expression and `.visible`
    where the file's host code launches it: linkage, not code."""
    return _WEAK.sub(r".visible\1", ptx)


def _store(path: Path, proof: Proof) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(dataclasses.asdict(proof)))
        os.replace(tmp, path)
    except OSError:   # a cache only: a full disk stores nothing
        tmp.unlink(missing_ok=True)


def reference_unit(ref: CompileUnit, proof: Proof) -> CompileUnit:
    """The reference as the search compiles it beside a fast candidate (the same compiler on both
    sides of a timing)."""
    return dataclasses.replace(ref, search_cut=proof.compiler)


def _identifiers(text: str) -> set[str]:
    tree = source.parser().parse(text.encode())
    out, stack = set(), [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type in ("identifier", "type_identifier", "namespace_identifier"):
            out.add((n.text or b"").decode())
        stack.extend(n.children)
    return out


_LINE = re.compile(r'#line (\d+) "((?:[^"\\]|\\.)*)"$')


def _kernel_lines(cut: str, path: str, first: int, last: int) -> tuple[int, int] | None:
    """The cut's lines (indices, end exclusive) holding the kernel written on the file's lines
    first..last (1-based), with the `#line` before them: found by the cut's own `#line`s."""
    lines = cut.split("\n")
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    origin: tuple[str, int] | None = None
    start = end = None
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if m:
            origin = (m.group(2), int(m.group(1)))
            continue
        if origin is None:
            continue
        here = origin
        origin = (origin[0], origin[1] + 1)
        if here[0] != quoted:
            if start is not None and end is None:
                return None   # another file's line inside the kernel: not the shape we splice
            continue
        if here[1] == first and start is None:
            start = i - 1 if i > 0 and _LINE.match(lines[i - 1]) else i
        if start is not None and end is None and not first <= here[1] <= last:
            return None
        if here[1] == last and start is not None:
            end = i + 1
            break
    return (start, end) if start is not None and end is not None else None


def search_unit(ref: CompileUnit, proof: Proof, ref_model: SourceModel, cand_model: SourceModel,
                kernel: str) -> tuple[CompileUnit | None, str]:
    """The candidate's unit for the search: the proven cut with the candidate's kernel and new
    helpers in place (see the module's docstring), or None and why it goes the whole-file way."""
    if not proof.ok:
        return None, proof.reason
    if ref.file_text != ref_model.text:
        return None, "the kernel is in a header: its file is another text"
    kr, kc = ref_model.kernel(kernel), cand_model.kernel(kernel)
    if kr is None or kc is None:
        return None, f"kernel {kernel} is not in both files"
    if [(p.name, p.type) for p in kr.params] != [(p.name, p.type) for p in kc.params]:
        return None, "the candidate changes the kernel's parameters"
    theirs = {n for it in ref_model.items for n in it.defines}
    helpers = [it for it in cand_model.items if it.kind == "device_function" and it.defines
               and not it.defines & (theirs | ref.project_names)]
    start = kc.span.start_byte
    before = max((it.span.end_byte for it in cand_model.items if it.span.end_byte <= start and it not in helpers),
                 default=0)
    if any(not before <= h.span.start_byte < start for h in helpers):
        return None, "the candidate adds helpers away from the kernel"
    edits = [(kc.span.start_byte, kc.span.end_byte, kr.text)] + [(h.span.start_byte, h.span.end_byte, "")
                                                                 for h in helpers]
    restored = textedit.replace_bytes(cand_model.text, edits)
    if restored is None or restored.split() != ref_model.text.split():
        return None, "the candidate changes more than the kernel and helpers of new names"
    own = {n for h in helpers for n in h.defines}
    new = set().union(*(_identifiers(t) for t in [kc.text] + [h.text for h in helpers])) - own
    theirs_used = _identifiers(kr.text)
    macros = sorted(n for n in new & ref.project_macros if n not in theirs_used)
    if macros:
        return None, f"the candidate uses the project's macro {macros[0]}, which the reference kernel does not"
    uncovered = sorted(n for n in new - ref.project_macros if n in ref.project_names and n not in ref.kept_names)
    if uncovered:
        return None, f"the candidate names {uncovered[0]}, some declaration of which the proven cut leaves out"
    at = _kernel_lines(ref.source, ref.path, kr.span.start_line + 1, kr.span.end_line + 1)
    if at is None:
        return None, "the kernel's lines are not found in the cut"
    quoted = ref.path.replace("\\", "\\\\").replace('"', '\\"')
    code = "".join(f'#line {h.span.start_line + 1} "{quoted}"\n{h.text}\n' for h in helpers) + \
        f'#line {kc.span.start_line + 1} "{quoted}"\n{kc.text}'
    lines = ref.source.split("\n")
    spliced = "\n".join(lines[:at[0]] + code.split("\n") + lines[at[1]:])
    return dataclasses.replace(ref, source=spliced, file_text=cand_model.text, search_cut=proof.compiler), ""

