"""One kernel's draft spec assembled in one pass: its launch, types, sizes, shapes and roles, and the checks
on the assembled draft (launch bounds, requirements) that read their intermediate values. Separate from
`proposal`, which splits structs and records around it. Long because `assemble` makes every section at once."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model import access, accessors, dtypes, exprs
from ..compile.project import ProjectContext
from ..model.source import Kernel, SourceModel
from ..model.spec import NULL
from .hostexprs import function_macros, raising_macros
from .launch_callers import pick_site, program_inits, scalar_value, zero_at_every_call
from .launch_locals import dim3_fields, host_locals, launch_byte
from .launches import SHARED_PER_THREAD, grid_guess, launch_of
from . import bench_sizes, class_numbers, data_positions, distinct_indices, guards, lengths, masks, range_chains, scales, structs
from .program import Program
from .roles import DIFFERENCES, body_divisions, infer_shapes, is_stride, only_in_dead_branches, size_pairs
from .shape_fits import TABLE, fallback_order
from .sizes import Draft, drop_idle, repair, test_values, unclamped_block
from .project_instances import project_instance
from .template_args import CANNOT, infer_template_args
from .template_names import enumerators, known_names, split as _split
from .types import Types, declared_types, dispatch_subjects, dispatch_values
from .body_facts import (WARP_WIDTH, bound_functions, called_template_params, cast_type, class_argument,
                         earlier_version, first_use, integer_constants, launch_value, measured, member_read,
                         mode_params, names_used, mode_note, null_tested, reduces, scatter_of, shift_counts, split_row_requires,
                         warp_width_names, whole_groups, written_as_constants)
from .notes import problems_of, ranked
from .requirements import (holds_true, launch_requirements, ordered_layouts, over_sizes, substituted, toml_list,
                           vector_requirements, whole_steps, within_launch_bounds)


@dataclass
class Proposal:
    comment: str
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # the validator's refusals: never shown as a proposal

    @property
    def valid(self) -> bool:
        return not self.problems


_SCALAR_GUESSES = (("eps", "1e-5"), ("epsilon", "1e-5"), ("learning_rate", "1e-3"), ("lr", "1e-3"),
                   ("beta1_correction", "0.1"), ("beta2_correction", "0.001"), ("beta1", "0.9"),
                   ("beta2", "0.999"), ("weight_decay", "0.01"), ("decay", "0.01"), ("scale", "0.5"),
                   ("alpha", "1.5"), ("momentum", "0.9"), ("temperature", "0.7"))

_PER_ROW = ("weight", "bias", "gamma", "beta", "w", "b", "scale", "norm_weight", "ln_weight", "ln_bias")


def _launcher_template_params(program: Program, site) -> set[str]:
    """The template parameter names of the function that holds the launch."""
    from .template_names import template_param_names_of
    fn = program.function(site.function) if site is not None and site.function else None
    return set(template_param_names_of(fn[0])) if fn is not None else set()


def _scalar_guess(name: str) -> str:
    low = name.lower()
    return next((v for k, v in _SCALAR_GUESSES if low == k or low.endswith("_" + k) or low.startswith(k)), "1.0")

def assemble(kernel: Kernel, model: SourceModel, types: Types, *, path: str | None = None,
             context: ProjectContext | None = None, decide: dict[str, str] | None = None,
             tables: dict[str, int] | None = None, opaque: dict[str, str] | None = None) -> Proposal:
    """`tables`: parameters that are one entry of a table of pointers (`structs`) -> the grid
    dimension counting the entries, which becomes their buffer's first dimension. `opaque`: a struct's
    fields of a class of their own (`structs.Flat.opaque`), which the spec leaves zero."""
    decide, tables = decide or {}, tables or {}
    notes: list[str] = []
    errors: list[str] = []
    program = Program(model, path, context)
    program.add_functions([it.text for it in types.items if it.kind == "host_function"])
    constants = {**enumerators([*program.headers_beside(), *(m.text for m in program.models)]), **types.constants(),
                 **function_macros([it.text for it in types.items if it.kind == "macro"])}
    site, site_model = pick_site(kernel, program, constants)
    around = dispatch_values(program, site, types.items)   # names dispatch macros define
    for name in warp_width_names(kernel, site_model, constants):
        constants[name] = str(WARP_WIDTH)
        notes.append(f"`{name}` is defined in no file of the project read here: took the warp width, {WARP_WIDTH}")
    if site is not None and site_model is not None:
        # the launch's own file decides its names (`#define BLOCKSIZE_2STATE 256` in bitsandbytes' ops.cu)
        constants = {**constants, **site_model.constants, **around}
        if around:
            notes.append("from the dispatch macros around the launch: " +
                         ", ".join(f"{k} = {v}" for k, v in around.items()) + " (one of the cases they offer)")
    # a template argument may be a local constant of the launcher (`constexpr int vec = 16 / sizeof(T)`)
    local = host_locals(site_model, site.function, launch_byte(site_model, site)) \
        if site is not None and site_model is not None else {}
    before, float_type = len(notes), dtypes.from_cpp("float")
    declared = declared_types(program, types.items, lambda t: dtypes.from_cpp(types.resolve(t)[0] or "") == float_type)
    instantiate = decide.get("instantiate") or infer_template_args(   # (decided: `proposal.struct_instances`)
        kernel, site, notes, program, {**local, **constants}, known_names(types.items), types, site_model, declared)
    instantiate, made = project_instance(kernel, instantiate, notes[before:], path, context,
                                         launched_here=site is not None and site_model is program.model,
                                         largest=decide.get("instance") == "largest")
    if made is not None:   # the compiler's own instance: what no launch gave is known after all (or it was late)
        notes[before:] = [n for n in notes[before:] if made.startswith(CANNOT) or not n.startswith(CANNOT)]
        notes.append(made)
    targs = kernel.template_bindings(_split(instantiate)) if instantiate else {}
    kernel = kernel.instantiated(targs)   # `scale_type scale` with `at::Half *`: a buffer
    kernel = accessors.as_pointers(kernel, targs)   # a tensor accessor: a buffer of its elements
    if instantiate:   # `sizeof(T)` in the launcher: T as resolved (named at the launch, or deduced: same name)
        written = _split(site.template_args) if site is not None and site.template_args else kernel.template_param_names
        launcher = _launcher_template_params(program, site)
        for name, value in zip(written, _split(instantiate)):
            dt = dtypes.from_cpp(value)
            if name.strip().isidentifier() and dt is not None:
                constants[f"sizeof({name.strip()})"] = str(dt.itemsize)
            # a value parameter of the launcher handed on to the kernel (`kdq<T, DATA_TYPE>`) has the
            # value taken for it in the launcher's own expressions (`(DATA_TYPE > 0) ? 1024 : 512`)
            number = constants.get(value.strip(), value.strip())   # an enumerator (`General8bit`): its value
            if name.strip() in launcher and re.fullmatch(r"-?\d+|true|false", number.strip()):
                constants.setdefault(name.strip(), number.strip())
        constants.update(class_numbers.launcher_numbers(site_model, site, written, _split(instantiate), types, constants))

    def cpp(p) -> tuple[str | None, str]:
        base = targs.get(p.base_type, p.base_type)
        base = " ".join(w for w in base.replace("*", " ").split() if w not in ("const", "volatile", "__restrict__"))
        return types.resolve(base) if base else (None, "no type")

    resolved = {p.name: cpp(p) for p in kernel.params}
    lanes: dict[str, int] = {}
    for p in kernel.params:   # a CUDA vector type (`half2*`) is described by its lane type
        vec = dtypes.vector_of(resolved[p.name][0] or "")
        if vec is not None:
            resolved[p.name] = (vec[0].cpp[0], resolved[p.name][1])
            lanes[p.name] = vec[1]
    for p in kernel.params:
        spelled, why = resolved[p.name]
        if spelled is not None and why and p.base_type not in targs:
            note = f"`{p.name}`: {why}"
            if note not in notes and not any(why in n for n in notes):
                notes.append(note)
    size_names = [p.name for p in kernel.params if not p.is_pointer and resolved[p.name][0] is not None
                  and dtypes.from_cpp(resolved[p.name][0]).name.startswith(("int", "uint"))]
    if not size_names:
        size_names = ["n"]
        notes.append("no integer parameter to take sizes from: invented a size `n`; adjust shapes")
    grid = block = shared = None
    program_sizes: dict[str, list[int]] = {}
    derived: dict[str, str] = {}
    launch_require: list[str] = []
    if site is not None and site_model is not None:
        switched = dispatch_subjects(program, site, types.items, around)
        # the launcher's checks read the value a dispatch switches on as its case's (`head_dim`
        # 64 in `if (head_dim < rotary_dim) throw ...` before `DISPATCH_HEAD_DIM(head_dim, ...)`)
        launch = launch_of(kernel, site_model, site, size_names, notes, program, {**constants, **switched},
                            raising_macros([it.text for it in types.items if it.kind == "macro"] + [site_model.text]))
        grid, block, shared, program_sizes = launch.grid, launch.block, launch.shared, launch.program_sizes
        for name in reversed(launch.new_sizes):
            size_names.insert(0, name)
        derived = {k: v for k, v in {**launch.derived, **launch.relations}.items()
                   if all(n in size_names for n in exprs.names(v))}
        dispatched = {p.name: switched[arg.strip()] for p, arg in zip(kernel.params, site.args)
                      if p.name in size_names and arg.strip() in switched}
        for k, v in dispatched.items():
            notes.append(f"`{k}` = {v}: the dispatch macro around the launch switches on it, and the case "
                         f"taken is {v}")
        derived = over_sizes({**derived, **dispatched})   # a relation over another: over the sizes
        # a launcher's value named like a template parameter of the kernel it picks (vLLM gptq:
        # `m_count` chooses `..._kernel<true, m_count>` through a function pointer and sizes the
        # grid) is that parameter's argument in this instance
        picked: set[str] = set()
        for n in launch.new_sizes:
            value = targs.get(n, "").strip()
            if re.fullmatch(r"\d+", value) and n not in derived:
                derived[n] = value
                picked.add(n)
                notes.append(f"`{n}` = {value}: the launch's `{n}` is the kernel's template parameter of that name, "
                             f"{value} in this instance")
        # a size the program passes as 0 at every call (a first expert, an offset at its origin) is no
        # problem size, which is positive: it is 0, as the program runs the kernel
        for p, arg in zip(kernel.params, site.args):
            if p.name in size_names and p.name not in derived and \
                    zero_at_every_call(program, site.function, arg.strip(), {**constants, **switched}):
                derived[p.name] = "0"
                picked.add(p.name)
                notes.append(f"`{p.name}` = 0: the program passes 0 for it at every call (line "
                             f"{site.span.start_line + 1}, in `{site.function}`)")
        size_names = [n for n in size_names if n not in derived]
        grid, block = substituted(grid, derived), substituted(block, derived)
        launch_require = [r for r in substituted(launch.require, derived) if set(exprs.names(r)) <= set(size_names)
                          and not (not exprs.names(r) and holds_true(r))]   # `1 == 1` once m_count is 1
        shared = substituted([shared], derived)[0] if shared else shared
        for k, v in ((k, v) for k, v in derived.items() if k not in dispatched and k not in picked):
            notes.append(f"`{k}` = {v}, as the launcher computes it" if k in launch.relations else
                         f"`{k}` is a stride or a dimension of a higher-rank tensor at the launch: took its value "
                         f"for a contiguous tensor of the lowest rank, {v}")
        if site_model is not model and site_model.items and site_model.items[0].path:
            notes.append(f"launch read from {site_model.items[0].path.rsplit('/', 1)[-1]} "
                         f"(line {site.span.start_line + 1}, in `{site.function}`)")
    else:
        notes.append("no launch site of this kernel in the file or beside it: grid and block are guesses")
    shifts = [(n, "0", f"`{n}` is a shift count (`x >> {n}`), not a size: took 0 — CHECK the counts the program uses")
              for n in shift_counts(kernel, size_names)]   # `hidden_dim >> merge_count`: a bit count, not a size
    for n, value, note in shifts + range_chains.range_thresholds(kernel, size_names):   # `while (k < rows_8 && …`
        derived[n] = value
        notes.append(note)
    size_names = [n for n in size_names if n not in derived]
    helpers = access.helpers_of([it.text for it in types.items if it.kind in ("device_function", "type")],
                                [it.text for it in types.items if it.kind == "macro"])
    helpers.update(bound_functions(kernel, targs, helpers))
    optional = null_tested(kernel, helpers) if decide.get("optional") == "null" else set()
    split_off: dict[str, int] = {}   # `if (cp_size > 1)`: a split 1 turns off, its branch then not walked
    for n, value, tested in mode_params(kernel, size_names, {p: 0 for p in optional}):   # `if (int8_mode == 2)`
        derived[n], split_off = str(value), {**split_off, **({n: value} if value in tested else {})}
        size_names.remove(n)
        notes.append(mode_note(n, value, tested))
    strides = [n for n in size_names if is_stride(n)]
    for n, size, line in guards.compared_strides(kernel, strides, [n for n in size_names if n not in strides]):
        derived[n] = size
        size_names.remove(n)
        notes.append(f"`{n}` taken equal to `{size}`: the kernel tests `{n} == {size}` (line {line}), the value "
                     f"that makes its layout contiguous there — CHECK the layout the program uses")
    size_names = size_names or ["n"]
    guessed_grid = grid is None or any("is a block count the caller computes" in n for n in notes)
    grid, grid_sizes = grid_guess(kernel, size_names, notes) if grid is None else (grid, [])   # blockIdx.y: a size
    if block is None:
        block = ["256"] if len(size_names) == 1 else [f"min({size_names[-1]}, 1024)"]
        if shared is None and site is not None and (site.shared_mem or "0").strip() not in ("0", "0u"):
            # the launch sets dynamic shared memory over a block not read either: a slot per thread
            # of the guessed block, as where only the shared memory could not be read
            shared = f"{' * '.join(f'({b})' if not b.isidentifier() and not b.isdigit() else b for b in block)} " \
                     f"* {SHARED_PER_THREAD}"
            notes[:] = [n for n in notes if not n.endswith("could not be read over the sizes: set shared_mem")]
            notes.append(f"dynamic shared memory `{site.shared_mem}`: took {SHARED_PER_THREAD} bytes per thread of "
                         f"the guessed block — CHECK")
    size_names += [n for n in grid_sizes if n not in size_names]   # after the block's guess: not its threads
    if decide.get("grid") == "rows" and guessed_grid and len(size_names) > 1:
        grid, block = [size_names[0]], [f"min({size_names[-1]}, 1024)"]
        notes.append(f"grid: one block per row of `{size_names[0]}` (the first guess did not run cleanly)")
    numbers = class_numbers.instance_numbers(kernel, targs, types)   # `Ktraits::THREADS_PER_CTA` of the instance's class
    block = within_launch_bounds(kernel, block, {**constants, **targs, **{k: str(v) for k, v in numbers.items()}}, notes)
    elem_bytes = {}
    int_params = set()
    for p in kernel.params:
        dt = dtypes.from_cpp(resolved[p.name][0]) if resolved[p.name][0] else None
        if p.is_pointer and dt is None and p.base_type.replace("const", "").strip() == "void":
            dt = dtypes.BY_NAME["uint8"]   # a `void*` buffer is bytes: its casts (`(float*)x`) measured in them
        if p.is_pointer and dt is not None:
            elem_bytes[p.name] = dt.itemsize
            if not dt.is_float:
                int_params.add(p.name)
    known_values = integer_constants(constants, names_used(kernel, types.items))   # TILE_DIM: the project's macros
    known_values.update({**types.packet_sizes(), **numbers})
    known_values.update({k: int(v) for k, v in targs.items() if v.strip().isdigit()})  # template `width = 1`
    known_values.update({f"sizeof({k})": dt.itemsize for k, v in targs.items()   # `16 / sizeof(T)` in the body
                         if (dt := dtypes.from_cpp(v.strip())) is not None})
    known_values.update({k: int(v.strip() == "true") for k, v in targs.items() if v.strip() in ("true", "false")})
    # an enumerator argument (`<float, 512, General8bit>`, as the project's instantiation spells it)
    # is its number: `if (DATA_TYPE > 0)` and `switch (DATA_TYPE)` then take the instance's branch
    known_values.update({k: known_values[v.strip().split("::")[-1]] for k, v in targs.items()
                         if k not in known_values and v.strip().split("::")[-1] in known_values})
    opaque = opaque or {}
    for f in sorted(set(opaque) - only_in_dead_branches(kernel, list(opaque), known_values)):
        # zero is no value of FlashInfer's `uint_fastdiv page_size` (a divisor with the magic numbers its
        # host constructor computes) where the instance uses it: the draft would divide by zero
        notes.append(f"{CANNOT}`{f}` is a `{opaque[f]}` (a class of its own, whose value the host builds) "
                     f"that this instance of the kernel uses: no number or buffer stands for it, and the spec "
                     f"format cannot give one yet")
    longest = lengths.length_bounds(kernel, int_params, helpers, shared, grid + block, size_names)  # `seq_lens`
    known_values.update({**{p: 0 for p in optional}, **split_off})   # passed null: the branches that test it are decided
    found, recast = measured(kernel, elem_bytes, int_params, lambda elem_bytes, int_params: infer_shapes(  # void*: its casts
                    kernel, [n for n in size_names if n != TABLE], grid, unclamped_block(block, lengths.reached_text(kernel, helpers), size_names, grid),
                    elem_bytes, int_params, known_values, lanes, {k: v for k, v in derived.items() if k not in split_off}, helpers,
                    equal_sizes=decide.get("sizes") == "equal", type_bytes=class_numbers.type_bytes(types, targs),
                    require=launch_require, powers=masks.shifted_by(kernel, helpers, size_names),  # shifts: powers of 2
                    macros=frozenset(types.defined_at(len(types.items) + 1)), lengths=longest),
                    lambda t: types.resolve(targs.get(t, t))[0] or types.scalar(t, targs))   # `Ktraits::input_t`
    accessors.fold(found, kernel, targs)   # a tensor accessor's dimensions, measured apart, make its shape
    if found is not None and (found.derived or found.equal):
        for k, v in found.derived.items():
            notes.append(f"`{k}` is a stride of a contiguous layout: took {v}, the extent the kernel reaches "
                         f"inside it (strides listed outermost first)")
        for k, v in found.equal.items():
            if k == TABLE:   # said where the index arrays are drawn
                continue
            notes.append(f"`{k}` taken equal to `{v}`: only then do the kernel's accesses fit a tensor's shape "
                         f"(other values of `{k}` are not tested) — CHECK")
        more = {**found.derived, **found.equal}
        derived = {**derived, **{k: substituted([v], more)[0] for k, v in more.items()}}
        size_names = [n for n in size_names if n not in derived]
        grid, block = substituted(grid, more), substituted(block, more)
        shared = substituted([shared], more)[0] if shared else shared
    scatter = scatter_of(found) if found is not None else None
    # the table split into whole blocks (`block = slot / block_size`, vLLM reshape_and_cache), or read by another index
    # array too (`src_indices`: blocks of one slot): its slots are V, the indices distinct values below V, not V = count
    slot_blocks = ([b for a, b in body_divisions(kernel, size_names, int_params) if a == TABLE]
                   or ["1"] * (len(found.tables) > 1)) if scatter is not None else []
    if scatter is not None and slot_blocks:   # V now counts the blocks, of `slot_blocks[0]` slots each
        index, count = scatter
        slots = f"{TABLE} * {slot_blocks[0]}" if slot_blocks[0] != "1" else TABLE
        found.shapes = {p: [substituted([d], {TABLE: slots})[0] for d in s if TABLE in exprs.names(d)] +  # rows first
                        [d for d in s if TABLE not in exprs.names(d)] for p, s in found.shapes.items()}
        scatter_require = [f"{slots} >= {count}"]
        found.inout |= {p for p, s in found.shapes.items() if any(TABLE in exprs.names(d) for d in s)   # the slots no
                        and p not in found.read_only}   # index names keep what they held (a cache kept across calls)
        notes.append(f"`{index}` places rows of an output the kernel never reads (a scatter) into {TABLE} " + (f"blocks "
                     f"of `{slot_blocks[0]}` slots" if slot_blocks[0] != "1" else "rows") + f": drawn as {count} "
                     f"distinct slots (`permutation({slots})`) — CHECK")
    elif scatter is not None:   # the table is as long as the index array: a permutation of its rows
        index, count = scatter
        found.shapes = {p: [substituted([d], {TABLE: count})[0] for d in s if TABLE in exprs.names(d)] +   # rows first
                        [d for d in s if TABLE not in exprs.names(d)] for p, s in found.shapes.items()}
        found.uses_table = False
        notes.append(f"`{index}` places rows of an output the kernel never reads (a scatter): drawn as a "
                     f"permutation of its {count} elements, the output that many rows — CHECK")
    if found is not None and found.uses_table and TABLE not in size_names:
        size_names.append(TABLE)
    distinct, apart = distinct_indices.drawn(found.shapes, found.distinct, found.equal, scatter and scatter[0],
                                             notes) if found is not None else ({}, [])   # copies within a buffer
    require = launch_requirements(grid, block, found, size_names, kernel, known_values, helpers)
    require += [r for r in (scatter_require if scatter is not None and slot_blocks else []) + apart if r not in require]
    for r in whole_groups(kernel, size_names, derived, grid, block, helpers):
        if r not in require:
            require.append(r)
            notes.append(f"`{r}`: the kernel divides the sizes into that many equal parts, remainder dropped — required")
    for r, line in split_row_requires(kernel, size_names, block, known_values):
        if r not in require:
            require.append(r)
            notes.append(f"`{r}`: several blocks share each row of it, each from its own start in steps of the "
                         f"whole group (line {line}): every block gets elements only from there on — required")
    for r, line in masks.power_of_two(kernel, helpers, size_names):
        if r not in require:
            require.append(r)
            notes.append(f"`{r}`: the kernel masks an index with it minus one or shifts by its log2 (`i & (n - 1)`, "
                         f"`i >> (31 - __clz(n))`, line {line}): a power of two — required")
    if found is not None:   # a vector access past a shape's end: whole packets of the innermost size
        require += [r for n, w in found.packets.items() if n in size_names and (r := f"{n} % {w} == 0") not in require]
        for n, w in found.packets.items():
            if n in size_names:
                notes.append(f"`{n}` % {w} == 0: the kernel reads or writes packets of {w} elements past the "
                             f"last index it checks (a vector access) — required")
    whole_steps(found, size_names, require, notes)
    require += [r for r in launch_require if r not in require]
    tile = max((int(b) for b in block if b.strip().isdigit()), default=1)
    if decide.get("tiles") and tile > 1:   # it faulted on a partial tile: every size a whole number of them
        tiled = [n for n in size_names if n != TABLE and not any(r.replace(" ", "").startswith(f"{n}%") for r in require)]
        require += [f"{n} % {tile} == 0" for n in tiled]
        if tiled:
            notes.append(f"{', '.join(f'`{n}`' for n in tiled)}: whole tiles of {tile} (the block's width) — the "
                         f"first guess faulted on a partial tile; CHECK the kernel handles no tail")
    earlier = earlier_version(kernel, model)
    if earlier is not None:
        notes.append(f"`{earlier}` is an earlier version of this kernel (same parameters): it is the reference; "
                     f"give it a spec of its own so it runs with its own launch")
    fallback_shape = fallback_order(size_names if len(size_names) <= 2 else size_names[:2], grid)
    drawn = program_inits(kernel, site_model, site) if site is not None and site_model is not None else {}
    guessed_shapes = []
    args: list[tuple[str, str]] = []     # (parameter, its TOML value)
    buffers: dict[str, tuple[list[str], int, bool]] = {}
    scalars: dict[str, str] = {}
    # every output an integer one (a quantizer's stores): a one-value float input scaling the data
    # into them is its scale (a kernel that also stores floats, `topk` weights beside their indices, is none)
    out_types = [dtypes.from_cpp(resolved[q.name][0]) if resolved[q.name][0] else None
                 for q in kernel.params if q.is_pointer and not q.is_const and q.name not in optional]
    integer_out = bool(out_types) and all(d is not None and not d.is_float and d.name != "bool" for d in out_types)
    for p in kernel.params:
        spelled, why = resolved[p.name]
        dt = dtypes.from_cpp(spelled) if spelled else None
        if p.name in optional:
            args.append((p.name, f'"{NULL}"'))
            notes.append(f"`{p.name}` passed as a null pointer: the kernel tests it against null (an optional "
                         f"input), and given as a buffer it did not run cleanly — CHECK the path a null takes is "
                         f"the one to test")
            continue
        if p.is_pointer:
            if dt is None and p.base_type.replace("const", "").strip() == "void":
                dt = dtypes.BY_NAME["uint8"]   # a `void*` buffer: bytes
                shape = found.shapes.get(p.name) if found is not None else None
                typed = recast.get(p.name) or (   # measured in its one cast type's elements, else the widest cast
                    cast_type(found, p.name, shape, lambda c: types.scalar(c, targs)) if found is not None else None)
                if typed is not None:   # read as the widest type the kernel casts it to, its shape in those
                    dt, named = typed, sorted(found.casts[p.name] & set(dtypes.BY_NAME)) or sorted(found.casts[p.name])
                    notes.append(f"`{p.name}` is a `void*` the kernel casts to {', '.join(named)}: "
                                 f"taken as {dt.name} (the widest; the flags chosen read it so) — CHECK")
                else:
                    notes.append(f"`{p.name}` is a `void*`: taken as bytes (uint8)")
            elif dt is None:   # never "?": float, which the compiler checks against the real type
                dt = dtypes.BY_NAME["float"]
                errors.append(f"`{p.name}`: the element type `{p.base_type}` could not be resolved ({why}): took "
                              f"float — the compiler checks it against the real type; set it if that fails")
            shape = found.shapes.get(p.name) if found is not None else None
            if found is not None and p.name in found.partial:
                notes.append(f"`{p.name}`: some of its accesses could not be bounded; shape {toml_list(shape)} is "
                             f"what the others reach — CHECK")
            if shape is not None and TABLE in shape:   # a table's rows come first: [V, C]
                shape = [TABLE] + [d for d in shape if d != TABLE]
            if shape is None:
                # a per-column parameter (a norm's weight, a bias) has one row's length
                per_row = p.is_const and p.name.lower().rstrip("_") in _PER_ROW and len(size_names) > 1
                shape = [size_names[-1]] if per_row else list(fallback_shape)
                if p.name in lanes:
                    shape[-1] = f"{lanes[p.name]} * {shape[-1]}"
                guessed_shapes.append(p.name)
            if p.name in tables and tables[p.name] < len(grid):
                shape = [grid[tables[p.name]]] + shape
            role = ""
            if not p.is_const and decide.get("roles") == "inout":
                role = ", inout = true"
                notes.append(f"`{p.name}` taken as read-modify-write (inout): as an output or input it did not run "
                             f"cleanly")
            elif not p.is_const:
                if found is not None and p.name in found.inout:
                    role = ", inout = true"
                elif found is not None and p.name in found.read_only:
                    notes.append(f"`{p.name}` is not const but the kernel only reads it (or never touches it): "
                                 f"taken as an input")
                else:
                    role = ", output = true"
                    if written_as_constants(kernel, p.name):
                        role += ", flag = true"
                        notes.append(f"`{p.name}` is written only as constants (a status): `flag = true`, the same "
                                     f"value everywhere is what valid inputs give")
                    if found is None:
                        notes.append(f"`{p.name}` is a non-const pointer: assumed an output (use inout = true if "
                                     f"the kernel also reads it)")
            init = ""
            if earlier is not None and dt.name == "float" and role and reduces(kernel):
                init = ", atol = 1e-4, rtol = 1e-3"
                notes.append(f"`{p.name}`: this version sums in another order than `{earlier}`: float tolerance "
                             f"loosened to atol 1e-4, rtol 1e-3")
            if not role and p.name in drawn:
                init = f', init = "uniform({drawn[p.name][0]}, {drawn[p.name][1]})"'
                notes.append(f"`{p.name}` drawn from uniform({drawn[p.name][0]}, {drawn[p.name][1]}), as the program "
                             f"fills the array it copies there")
            scale = scales.quantization_scale(kernel, p.name, integer_out) \
                if not role and not init and dt.is_float and shape == ["1"] else None
            if scale is not None:   # what the code shows, not a trial run's constant output
                init = f', init = "{scale}"'
                notes.append(f"`{p.name}` (one value the kernel {scales.scale_role(kernel, p.name)} the data by before "
                             f"storing it as integers: a quantization scale) drawn from {scale}, so the data "
                             f"reaches whole numbers at every case — CHECK the values the program passes")
            elif not role and not init and decide.get("bounds") == "large" and dt.is_float and shape == ["1"]:
                # one value the kernel reads beside the data (`min(absmax, *scale_ub)`) drawn like the data
                # clamped every output to it: drawn far above the data instead
                init = ', init = "uniform(1000, 10000)"'
                notes.append(f"`{p.name}` (one value read beside the data: a bound?) drawn from uniform(1000, 10000): "
                             f"drawn like the data it left an output constant — CHECK the values the program passes")
            if scatter is not None and p.name == scatter[0]:
                init = f', init = "permutation({slots})"' if slot_blocks else ', init = "permutation"'
            elif p.name in distinct:   # sources and destinations of one buffer's copies, all different
                init = distinct[p.name]
            elif not role and p.name in longest:   # lengths (`seq_lens`), not indices
                init = lengths.length_init(p.name, longest, notes)
            # indices within a row are integers the kernel reads (a flag or an output holds none)
            elif found is not None and p.name in found.tables and p.name in found.boundaries and not role:
                rows = found.equal.get(TABLE, TABLE)
                init = f', init = "offsets({rows})"'
                notes.append(f"`{p.name}` is read at `i` and `i + 1`: the boundaries of segments of {rows} rows (a CSR "
                             f"indptr), drawn from 0 up to {rows}, never decreasing")
            elif not role and not dt.is_float and dt.name != "bool" and (
                    bound := guards.early_return_bound(kernel, p.name, set(size_names))) is not None:
                init = f', init = "randint(0, {bound})"'   # the ids the kernel serves, as the program passes
                notes.append(f"`{p.name}` holds ids the kernel returns early on at `{bound}` and above: drawn from "
                             f"randint(0, {bound})")
            elif not role and not dt.is_float and dt.name != "bool" and len(shape) == 1 and guards.self_map(
                    kernel, p.name, helpers):
                init = f', init = "randint(0, {shape[0]})"'   # `e = map[e]`: indices into itself
                notes.append(f"`{p.name}` maps an index to another in its own range (`i = {p.name}[i]`): drawn "
                             f"from randint(0, {shape[0]}), indices below its own length")
            elif found is not None and p.name in found.tables and (TABLE not in found.equal or (
                    not role and not dt.is_float and dt.name != "bool")):
                rows = found.equal.get(TABLE, TABLE)   # indices within a row of that size
                init = f', init = "randint(0, {rows})"'
                notes.append(f"`{p.name}` holds indices into a table of {rows} rows: drawn from randint(0, {rows})"
                             if rows == TABLE else f"`{p.name}` holds indices within a row of `{rows}` elements (only "
                             f"then do the kernel's accesses fit a tensor's shape): drawn from randint(0, {rows}) — CHECK")
                if found.shared_rows:   # summed into one row (`start + count - 1`): two of them reach its last row
                    init = f', init = "randint(1, {rows} / 2 + 1)"'
                    notes[-1] = (f"`{p.name}` is summed with another loaded index into one row of {rows} "
                                 f"(`start + count - 1`): drawn from randint(1, {rows} / 2 + 1), so the row stays "
                                 f"within them — CHECK")
            if accessors.of_param(p, targs) is not None:   # the harness builds the object over the buffer
                init += ", accessor = true"
            args.append((p.name, f'{{ type = "{dt.name}", shape = {toml_list(shape)}{role}{init} }}'))
            buffers[p.name] = (shape, dt.itemsize, role == ", inout = true")
        elif p.name in size_names:
            args.append((p.name, f'"{p.name}"'))
            scalars[p.name] = p.name
        elif p.name in derived:
            args.append((p.name, f'"{derived[p.name]}"'))
            scalars[p.name] = derived[p.name]
        elif dt is None and not p.is_pointer and p.type.replace("const", "").strip() == "dim3":
            fields, note = dim3_fields(p.name, p.index, site, grid, block)   # a launch's dim3 handed on
            args += fields
            notes.append(note)
        else:
            given = launch_value(site, kernel, p.name, {**constants, **site_model.constants}) \
                if site is not None and site_model is not None else None
            value = given if given is not None else _scalar_guess(p.name)
            # (a struct's field of a class of its own is `opaque`: refused above only where the instance uses it)
            member = member_read(kernel, p.name) if dt is None and p.name not in opaque else None
            if member is not None:   # a struct `structs` could not split into its fields: no float stands for it
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                # a template parameter's struct is its instance's (`T` = `TensorListMetadata<3>`)
                named = p.base_type.replace("const", "").strip()
                named = " ".join(targs.get(named, named).split())
                notes.append(f"{CANNOT}`{p.name}` is a `{p.type}`{f' (`{named}`)' if named not in p.type else ''} "
                             f"passed by value and the kernel reads its members (`{member}`), but Astra reads only "
                             f"structs of plain fields (pointers and numbers): "
                             f"{structs.not_flattened(named, types.items)} — the spec format cannot give it yet")
            elif dt is None and not p.is_pointer and (indexed := first_use(kernel, p.name, "subscript_expression")):
                # an array object other than torch's tensor accessor (or one whose N is not known here)
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                notes.append(f"{CANNOT}`{p.name}` is a `{p.type}` passed by value that the kernel indexes like an "
                             f"array (`{indexed}`): an array object the spec format gives only as torch's tensor "
                             f"accessor (`accessor = true`, its dimensions known)")
            elif dt is None and not p.is_pointer and (cls := class_argument(targs.get(p.base_type, ""))):
                # CUTLASS's sgemm_1 `cute::Shape<int, int, int> shape_MNK` (12 bytes) given a float (4):
                # the kernel reads its sizes from bytes the launch never gave (its GPU check's worker died)
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                # what of the class no field of the spec gives (apex's TensorListMetadata<3>: arrays of addresses)
                why = structs.not_flattened(cls, types.items)
                notes.append(f"{CANNOT}`{p.name}` is a `{cls}` (template parameter `{p.base_type}`) passed by value: "
                             f"no number or buffer stands for an object of a class{f' ({why})' if why else ''}, "
                             f"and the spec format cannot give one yet")
            elif dt is None:
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                notes.append(structs.handed_whole(kernel, p.name, targs.get(p.base_type, p.base_type), types.items)
                             or f"`{p.name}`: type {p.type!r} unknown, assumed float")
            else:   # (a `bool` no launch fixes: what the launcher's callers pass, else off)
                value, note = scalar_value(program, site, kernel, p.name, dt, given, value, constants)
                args.append((p.name, value))
                notes.append(note)
    for n in size_names:
        if kernel.param(n) is None and n != TABLE:
            notes.append(f"size `{n}` comes from the launch site's grid; it is not a kernel parameter")
    if guessed_shapes:
        notes.append(f"shape of {', '.join(f'`{n}`' for n in guessed_shapes)} could not be read from the kernel's "
                     f"indexing: set to {toml_list(fallback_shape)} — CHECK each against the real extent")
        called = [n for n in called_template_params(kernel) if n not in helpers]   # (a bound one is followed)
        if called:   # sgl-kernel transfer_kernel_impl: `SrcOffsetFn(src_k, tbl, layer, ...)` gives the address
            notes.append("the kernel computes addresses through "
                         + ", ".join(f"`{n}` (here `{targs.get(n, '?')}`)" for n in called)
                         + ", a function it takes as a template argument: Astra does not follow calls through "
                           "template parameters, so what the kernel reaches through their results is not read")
    notes += data_positions.refusals(kernel, helpers, set(guessed_shapes) | (found.partial if found else set()))

    require += (vectors := vector_requirements(found, buffers, size_names, require, notes))
    counts, layouts = (launch.grid_counts, launch.layouts) if site is not None and site_model is not None else ([], {})
    layouts = ordered_layouts(found, size_names, layouts, program_sizes, notes)   # `d2 <= d`: at d's head dim
    draft = Draft(grid, block, shared, require, {n: test_values(n, program_sizes.get(n, []), n in counts) for n in size_names},
                  {}, buffers, scalars, access.kernel_body(kernel), known_values, dict(args), counts, layouts)
    for r in vectors:   # a row shorter than one vector is no row of vectors: not raised to one, left out
        n, width = r.split()[0], int(r.split()[2])
        if n in draft.sizes and any(v >= width for v in draft.sizes[n]):
            draft.sizes[n] = [v for v in draft.sizes[n] if v >= width]
    # `(max - min) / 8` blocks: a window [min, max) of the rows; tested and timed from the rows' start
    starts = [b for a, b in size_pairs(draft.grid + draft.block, size_names, DIFFERENCES)
              if a in draft.sizes and b in draft.sizes and not program_sizes.get(b)]
    for b in starts:
        draft.sizes[b] = [0]
        notes.append(f"size `{b}` = 0: the launch covers a window that starts at `{b}`; tested from the start "
                     f"(other starts are not tested)")
    for n, vals in program_sizes.items():
        if n in draft.sizes:
            notes.append(f"size `{n}`: the program itself uses {', '.join(map(str, vals))}")
    for pair in filter(None, decide.get("drop", "").split(",")):   # sizes where the kernel did no work
        n, _, v = pair.partition("=")
        if n in draft.sizes and len(draft.sizes[n]) > 1 and v.isdigit():
            draft.sizes[n] = [x for x in draft.sizes[n] if x > int(v)] or draft.sizes[n][-1:]
            notes.append(f"size `{n}`: values up to {v} left out of the tests — the output was constant there")
    before = {n: list(v) for n, v in draft.sizes.items()}
    ok = repair(draft, notes)
    if not ok and any(r in draft.require for r in launch_require):   # the launcher's checks contradict the sizes
        draft.require, draft.sizes = [r for r in draft.require if r not in launch_require], before
        ok = repair(draft, notes)
        if ok:
            notes.append("the launcher's checks were left out of `require`: no test size meets them all — CHECK")
    if not ok:
        errors.append("no test size gives a valid launch (grid, block): adjust [sizes] by hand")
    drop_idle(draft, program_sizes, notes)   # sizes at which the launch leaves every loop without a trip
    bench_sizes.size_bench(draft, program_sizes, notes)
    draft.bench.update({b: [0] for b in starts})

    lines = ["/* @astra", f"grid = {toml_list(draft.grid)}", f"block = {toml_list(draft.block)}"]
    if earlier is not None:
        lines.append(f'reference = "{earlier}"')
    if draft.shared:
        lines.append(f'shared_mem = "{draft.shared}"')
    if instantiate:
        lines.append(f'instantiate = "{instantiate}"')
    if draft.require:
        lines.append(f"require = {toml_list(draft.require)}")
    lines += ["", "[sizes]", *(f"{n} = {v}" for n, v in draft.sizes.items()), "", "[bench]",
              *(f"{n} = {v}" for n, v in draft.bench.items())]
    width = max(len(p.name) for p in kernel.params) if kernel.params else 0
    lines += ["", "[args]"] + [f"{name:<{width}} = {value}" for name, value in args]
    lines.append("*/")
    comment = "\n".join(lines) + "\n"
    notes = ranked(errors + notes)
    return Proposal(comment, notes, problems_of(notes, kernel, model, comment))


# What a note says about how sure inference is, least sure first: a type taken without evidence,
# a launch or shape guessed, a value guessed, then what was read from the program.
