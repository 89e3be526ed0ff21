"""The proposal: every part inferred (launch, types, sizes, shapes and roles) assembled into one
spec comment, with what was guessed listed in `notes`. `infer` is the entry: a struct passed by
value, or a pointer to records, is split into its fields (`structs`, `records`) around the
draft `draft.assemble` makes of the kernel, and the proposal given back in the kernel's terms."""
from __future__ import annotations

import dataclasses

from ..compile.project import ProjectContext
from ..model.source import Kernel, SourceModel
from . import built_params, records, structs
from .types import Types
from .body_facts import member_read
from .draft import Proposal, assemble
from .template_args import CANNOT
from .template_names import split
from .notes import problems_of, record_refusals


def infer(kernel: Kernel, model: SourceModel, *, path: str | None = None,
          context: ProjectContext | None = None, decide: dict[str, str] | None = None) -> Proposal:
    """The best-ranked proposal. `decide` fixes decisions a run showed wrong: `roles = "inout"`
    (every written pointer read-modify-write), `optional = "null"` (a pointer the kernel tests
    against null passed as null), `grid = "rows"` (one block per row where the grid
    was a guess), `tiles` (every size a whole number of the block's width), `sizes = "equal"` (two
    sizes taken equal where only then the accesses fit a shape), `instance = "largest"` (of the project's
    instances, where the numbers were guessed, the one with the largest). A struct passed by value is read
    through its fields (`structs`); a parameter the launcher builds from a size is read as that
    size and proposed as built by its class's constructor (`built_params`)."""
    types = Types(model, path, context)
    built = built_params.split(kernel, model, types.items)
    if built is None:
        return _infer(kernel, model, types, path, context, decide)
    p = _infer(built.kernel, built.model, Types(built.model, path, context), path, context, decide)
    comment = built_params.written_back(p.comment, built.classes)
    return Proposal(comment, p.notes, problems_of(p.notes, kernel, model, comment) + record_refusals(kernel, types))


def _infer(kernel: Kernel, model: SourceModel, types: Types, path: str | None,
           context: ProjectContext | None, decide: dict[str, str] | None) -> Proposal:
    flat = structs.flatten(kernel, model, types.items, lambda t: types.resolve(t)[0] is not None)
    carried: list[str] = []
    if flat is None:   # a struct parameter whose type is a template parameter: split as its instance
        flat, decide, carried = _struct_instances(kernel, model, types, path, context, decide)
    k, m = (flat.kernel, flat.model) if flat is not None else (kernel, model)
    ktypes = Types(m, path, context) if flat is not None else types
    # pointers to records (a parameter, or a struct's field just split off) read through their fields
    rec = records.flatten(k, m, ktypes.items, lambda t: ktypes.resolve(t)[0] is not None)
    if rec is not None:
        k, m, ktypes = rec.kernel, rec.model, Types(rec.model, path, context)
    if flat is None and rec is None:
        p = assemble(kernel, model, types, path=path, context=context, decide=decide)
        return dataclasses.replace(p, problems=p.problems + record_refusals(kernel, types))
    p = assemble(k, m, ktypes, path=path, context=context, decide=decide,
                 tables={f"{t}{structs.SEP}{structs.ROW}": dim for t, dim in flat.tables.items()} if flat else None,
                 opaque=flat.opaque if flat else None)
    comment, notes = p.comment, carried + p.notes
    if rec is not None:
        comment, notes = records.unflatten(comment, notes, rec)
        notes.append("pointer(s) to records " + ", ".join(f"`{n}`" for n in rec.fields) + " given by the fields the "
                     "kernel reads (the others are zero)")
    if flat is None:
        return Proposal(comment, notes, problems_of(notes, kernel, model, comment) + record_refusals(k, ktypes))
    comment, notes = structs.unflatten(comment, notes, flat.fields, flat.tables, flat.opaque, flat.built)
    if flat.fields:
        notes.append("struct parameter(s) " + ", ".join(f"`{n}`" for n in flat.fields) + " given by their fields "
                     "(fields left out are zero)")
    for t, dim in flat.tables.items():
        notes.append(f"`{t}` is a table of device pointers, one per block along the grid's {'xyz'[dim]}: each "
                     f"entry's buffer measured from how the kernel reads it")
    return Proposal(comment, notes, problems_of(notes, kernel, model, comment) + record_refusals(k, ktypes))


def _struct_instances(kernel: Kernel, model: SourceModel, types: Types, path: str | None,
                      context: ProjectContext | None, decide: dict[str, str] | None
                      ) -> tuple[structs.Flat | None, dict[str, str] | None, list[str]]:
    """A kernel whose parameter passed by value has a template parameter for its type (`Params
    params`, launched as `k<MyParams>`, or the project's class `template_args` takes for it):
    the draft's `instantiate` decides the struct, which is split into its fields like any other —
    (the split, `decide` with that `instantiate`, the notes the draft made of its template
    arguments); (None, decide, []) where there is no such parameter, the draft refuses
    something else, or the struct taken is not one Astra splits."""
    names = set(kernel.template_param_names)
    params = {p.name: structs.plain_type(p.base_type)
              for p in kernel.params if not p.is_pointer}
    # (one the kernel reads members of: a scalar `T alpha` costs no second draft)
    params = {n: t for n, t in params.items() if t in names and member_read(kernel, n) is not None}
    typed = set(params.values())
    if not typed:
        return None, decide, []
    first = assemble(kernel, model, types, path=path, context=context, decide=decide)
    line = next((ln for ln in first.comment.splitlines() if ln.startswith("instantiate = ")), None)
    if line is None:
        return None, decide, []
    instantiate = line.split("=", 1)[1].strip().strip('"')
    bound = {t: v for t, v in kernel.template_bindings(split(instantiate)).items() if t in typed}
    # what the draft could not infer but these structs' fields stands in the way (another
    # template parameter the caller chooses): that refusal stays
    theirs = tuple(f"{CANNOT}`{n}` " for n in params)
    if any(n.startswith(CANNOT) and not n.startswith(theirs) for n in first.notes) or not bound:
        return None, decide, []
    flat = structs.flatten(kernel, model, types.items, lambda t: types.resolve(t)[0] is not None, bound)
    if flat is None:
        return None, decide, []
    carried = [n for n in first.notes if n.startswith("template parameter") or n.startswith("template arguments")]
    return flat, {**(decide or {}), "instantiate": instantiate}, carried
