"""The proposal: every part inferred (launch, types, sizes, shapes and roles) assembled into one
spec comment, with what was guessed listed in `notes`.

Long because `_infer` assembles every section in one pass (launch, types, sizes, shapes, roles),
and the checks on the assembled draft (launch bounds, requirements) read its intermediate values."""
from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass, field

from ..model import access, compiled_branches, dtypes, exprs, source
from ..compile.project import ProjectContext
from ..model.source import Kernel, SourceModel
from ..model.spec import NULL
from ..model.syntax import walk as _walk
from tree_sitter import Node
from .hostexprs import function_macros, raising_macros
from .launches import SHARED_PER_THREAD, launch_of, pick_site, host_locals, launch_byte, program_inits, value_of, \
    zero_at_every_call
from . import guards, masks, records, scales, structs
from .program import Program, param_names
from .roles import DIFFERENCES, DIVISIONS, TABLE, InferredShapes, body_divisions, infer_shapes, is_stride, \
    only_in_dead_branches, size_pairs
from .sizes import Draft, clamped_block_requires, repair, size_bench, test_values, unclamped_block
from .template_args import CANNOT, infer_template_args, enumerators, known_names, project_instance, split as _split
from .types import Types, declared_types, dispatch_subjects, dispatch_values


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


_NULL_HELPER_DEPTH = 4   # device helpers followed for a pointer's null test
_PER_ROW = ("weight", "bias", "gamma", "beta", "w", "b", "scale", "norm_weight", "ln_weight", "ln_bias")


def _launcher_template_params(program: Program, site) -> set[str]:
    """The template parameter names of the function that holds the launch."""
    from .template_args import template_param_names_of
    fn = program.function(site.function) if site is not None and site.function else None
    return set(template_param_names_of(fn[0])) if fn is not None else set()


def _scalar_guess(name: str) -> str:
    low = name.lower()
    return next((v for k, v in _SCALAR_GUESSES if low == k or low.endswith("_" + k) or low.startswith(k)), "1.0")


def infer(kernel: Kernel, model: SourceModel, *, path: str | None = None,
          context: ProjectContext | None = None, decide: dict[str, str] | None = None) -> Proposal:
    """The best-ranked proposal. `decide` fixes decisions a run showed wrong: `roles = "inout"`
    (every written pointer read-modify-write), `optional = "null"` (a pointer the kernel tests
    against null passed as null), `grid = "rows"` (one block per row where the grid
    was a guess), `tiles` (every size a whole number of the block's width), `sizes = "equal"` (two
    sizes taken equal where only then the accesses fit a shape), `instance = "largest"` (of the project's
    instances, where the numbers were guessed, the one with the largest). A struct passed by value is read
    through its fields (`structs`)."""
    types = Types(model, path, context)
    flat = structs.flatten(kernel, model, types.items, lambda t: types.resolve(t)[0] is not None)
    k, m = (flat.kernel, flat.model) if flat is not None else (kernel, model)
    ktypes = Types(m, path, context) if flat is not None else types
    # pointers to records (a parameter, or a struct's field just split off) read through their fields
    rec = records.flatten(k, m, ktypes.items, lambda t: ktypes.resolve(t)[0] is not None)
    if rec is not None:
        k, m, ktypes = rec.kernel, rec.model, Types(rec.model, path, context)
    if flat is None and rec is None:
        p = _infer(kernel, model, types, path=path, context=context, decide=decide)
        return dataclasses.replace(p, problems=p.problems + _records(kernel, types))
    p = _infer(k, m, ktypes, path=path, context=context, decide=decide,
               tables={f"{t}{structs.SEP}{structs.ROW}": dim for t, dim in flat.tables.items()} if flat else None,
               opaque=flat.opaque if flat else None)
    comment, notes = p.comment, p.notes
    if rec is not None:
        comment, notes = records.unflatten(comment, notes, rec)
        notes.append("pointer(s) to records " + ", ".join(f"`{n}`" for n in rec.fields) + " given by the fields the "
                     "kernel reads (the others are zero)")
    if flat is None:
        return Proposal(comment, notes, _problems(notes, kernel, model, comment) + _records(k, ktypes))
    comment, notes = structs.unflatten(comment, notes, flat.fields, flat.tables, flat.opaque)
    if flat.fields:
        notes.append("struct parameter(s) " + ", ".join(f"`{n}`" for n in flat.fields) + " given by their fields "
                     "(fields left out are zero)")
    for t, dim in flat.tables.items():
        notes.append(f"`{t}` is a table of device pointers, one per block along the grid's {'xyz'[dim]}: each "
                     f"entry's buffer measured from how the kernel reads it")
    return Proposal(comment, notes, _problems(notes, kernel, model, comment) + _records(k, ktypes))


def _class_argument(arg: str) -> str | None:
    """The template argument when it names an object of a class template (`cute::Shape<int, int>`,
    `TensorListMetadata<3>`), which no number stands for; None for anything else."""
    arg = " ".join(arg.split())
    return arg if "<" in arg and not arg.endswith("*") else None


def _problems(notes: list[str], kernel: Kernel, model: SourceModel, comment: str) -> list[str]:
    """Why the draft is not proposed: what inference says it cannot know, then the validator's refusals."""
    return [n for n in notes if n.startswith(CANNOT)] + refusals(kernel, model, comment)


def _records(kernel: Kernel, types: Types) -> list[str]:
    """Why no draft gives a pointer to records whose fields the kernel reads (`batch->n_tokens`)
    that `records` could not split into its fields (it is also used otherwise): the counts and
    offsets the kernel takes from them decide what it reads — a draft that guessed them would only
    fail for a reason it hides. (A struct passed by value is `CANNOT`'s note where `structs`
    cannot split it.)"""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    out: list[str] = []
    for p in kernel.params:
        base = p.base_type.replace("const", "").replace("__restrict__", "").strip()
        if not p.is_pointer or types.resolve(base)[0] is not None or base == "void" or "<" in base:
            continue
        read = None
        for n in _walk(body):
            if n.type != "field_expression":
                continue
            arg = n.child_by_field_name("argument")
            while arg is not None and arg.type in ("parenthesized_expression", "subscript_expression"):
                arg = arg.child_by_field_name("argument") if arg.type == "subscript_expression" else arg.named_children[0]
            if arg is not None and arg.type == "identifier" and arg.text.decode() == p.name:
                read = n.text.decode()
                break
        if read is not None:
            out.append(f"{CANNOT}`{p.name}` points to `{base}` records whose fields the kernel reads (`{read}`), "
                       f"but it also uses the pointer otherwise (hands it on whole, offsets it), so Astra cannot tell "
                       f"which fields decide what it reads — give it by hand as {{ records = \"n\", <field> = ... }}")
    return out


WARP_WIDTH = 32   # threads of a warp on every NVIDIA GPU


def _warp_width_names(kernel: Kernel, site_model: SourceModel | None, constants: dict[str, str]) -> list[str]:
    """Macros named for the warp's width (`C10_WARP_SIZE`, defined by torch's headers, which
    inference does not read) that the kernel or its launcher uses and the project does not define."""
    texts = [kernel.text] + ([site_model.text] if site_model is not None else [])
    nodes = [n for t in texts for n in _walk(source.parser().parse(t.encode("utf-8")).root_node)]
    found = {n.text.decode() for n in nodes if n.type == "identifier"}
    # a name the code declares itself (the kernel's own `constexpr int WARP_SIZE = ...`) is its own
    declared = {d.text.decode() for n in nodes if n.type in ("init_declarator", "preproc_def", "preproc_function_def")
                if (d := n.child_by_field_name("declarator") or n.child_by_field_name("name")) is not None}
    return sorted(n for n in found - declared if n.isupper() and n.endswith("WARP_SIZE") and n not in constants)


def _infer(kernel: Kernel, model: SourceModel, types: Types, *, path: str | None = None,
           context: ProjectContext | None = None, decide: dict[str, str] | None = None,
           tables: dict[str, int] | None = None, opaque: dict[str, str] | None = None) -> Proposal:
    """`tables`: parameters that are one entry of a table of pointers (`structs`) -> the grid
    dimension counting the entries, which becomes their buffer's first dimension. `opaque`: a struct's
    fields of a class of their own (`structs.Flat.opaque`), which the spec leaves zero."""
    decide = decide or {}
    tables = tables or {}
    notes: list[str] = []
    errors: list[str] = []
    program = Program(model, path, context)
    program.add_functions([it.text for it in types.items if it.kind == "host_function"])
    site, site_model = pick_site(kernel, program)
    constants = {**enumerators([*program.headers_beside(), *(m.text for m in program.models)]), **types.constants(),
                 **function_macros([it.text for it in types.items if it.kind == "macro"])}
    around = dispatch_values(program, site, types.items)   # names dispatch macros define
    for name in _warp_width_names(kernel, site_model, constants):
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
    before = len(notes)
    float_type = dtypes.from_cpp("float")
    declared = declared_types(program, types.items, lambda t: dtypes.from_cpp(types.resolve(t)[0] or "") == float_type)
    instantiate = infer_template_args(kernel, site, notes, program, {**local, **constants}, known_names(types.items),
                                      types.items, site_model, declared)
    instantiate, made = project_instance(kernel, instantiate, notes[before:], path, context,
                                         launched_here=site is not None and site_model is program.model,
                                         largest=decide.get("instance") == "largest")
    if made is not None:   # the compiler's own instance: what no launch gave is known after all
        notes[before:] = [n for n in notes[before:] if not n.startswith(CANNOT)]
        notes.append(made)
    targs = kernel.template_bindings(_split(instantiate)) if instantiate else {}
    kernel = kernel.instantiated(targs)   # `scale_type scale` with `at::Half *`: a buffer
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
        derived = {**derived, **dispatched}
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
        grid, block = _substituted(grid, derived), _substituted(block, derived)
        launch_require = [r for r in _substituted(launch.require, derived) if set(exprs.names(r)) <= set(size_names)
                          and not (not exprs.names(r) and _holds_true(r))]   # `1 == 1` once m_count is 1
        shared = _substituted([shared], derived)[0] if shared else shared
        for k, v in ((k, v) for k, v in derived.items() if k not in dispatched and k not in picked):
            notes.append(f"`{k}` = {v}, as the launcher computes it" if k in launch.relations else
                         f"`{k}` is a stride or a dimension of a higher-rank tensor at the launch: took its value "
                         f"for a contiguous tensor of the lowest rank, {v}")
        if site_model is not model and site_model.items and site_model.items[0].path:
            notes.append(f"launch read from {site_model.items[0].path.rsplit('/', 1)[-1]} "
                         f"(line {site.span.start_line + 1}, in `{site.function}`)")
    else:
        notes.append("no launch site of this kernel in the file or beside it: grid and block are guesses")
    for n in _shift_counts(kernel, size_names):   # `hidden_dim >> merge_count`: a bit count, not a size
        derived[n] = "0"
        size_names.remove(n)
        notes.append(f"`{n}` is a shift count (`x >> {n}`), not a size: took 0 — CHECK the counts the program uses")
    for n, value, tested in _modes(kernel, size_names):   # `if (int8_mode == 2)`: a mode, not a size
        derived[n] = str(value)
        size_names.remove(n)
        notes.append(f"`{n}` is a mode the kernel only compares with {', '.join(map(str, tested))}: took {value}, "
                     f"the path none of those comparisons selects — CHECK the mode the program uses")
    strides = [n for n in size_names if is_stride(n)]
    for n, size, line in guards.compared_strides(kernel, strides, [n for n in size_names if n not in strides]):
        derived[n] = size
        size_names.remove(n)
        notes.append(f"`{n}` taken equal to `{size}`: the kernel tests `{n} == {size}` (line {line}), the value "
                     f"that makes its layout contiguous there — CHECK the layout the program uses")
    if not size_names:
        size_names = ["n"]
    first = size_names[0]
    guessed_grid = grid is None or any("is a block count the caller computes" in n for n in notes)
    if grid is None:
        grid = [f"cdiv({first}, 256)"] if len(size_names) == 1 else [size_names[0]]
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
    if decide.get("grid") == "rows" and guessed_grid and len(size_names) > 1:
        grid, block = [size_names[0]], [f"min({size_names[-1]}, 1024)"]
        notes.append(f"grid: one block per row of `{size_names[0]}` (the first guess did not run cleanly)")

    block = _within_launch_bounds(kernel, block, {**constants, **targs}, notes)
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
    known_values = _integer_constants(constants, _names_used(kernel, types.items))   # TILE_DIM: the project's macros
    known_values.update(types.packet_sizes())
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
    helpers = access.helpers_of([it.text for it in types.items if it.kind in ("device_function", "type")],
                                [it.text for it in types.items if it.kind == "macro"])
    helpers.update(_bound_functions(kernel, targs, helpers))
    optional = _null_tested(kernel, helpers) if decide.get("optional") == "null" else set()
    known_values.update({p: 0 for p in optional})   # passed null: the branches that test it are decided
    found = infer_shapes(kernel, [n for n in size_names if n != TABLE], grid,
                    unclamped_block(block, kernel.text, size_names), elem_bytes, int_params, known_values,
                    lanes, derived, helpers,
                    equal_sizes=decide.get("sizes") == "equal",
                    type_bytes=lambda t: types.vector_bytes(t, targs),
                    # a shift by a size's log2 divides by it only where it is a power of two: probed so
                    require=launch_require, powers=masks.shifted_by(kernel, helpers, size_names))
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
        derived = {**derived, **{k: _substituted([v], more)[0] for k, v in more.items()}}
        size_names = [n for n in size_names if n not in derived]
        grid, block = _substituted(grid, more), _substituted(block, more)
        shared = _substituted([shared], more)[0] if shared else shared
    scatter = _scatter(found) if found is not None else None
    # the table split into whole blocks (`block = slot / block_size`, vLLM reshape_and_cache): its
    # slots are V, whole blocks of them, the indices distinct values below V — not V = the count
    slot_blocks = [b for a, b in body_divisions(kernel, size_names, int_params) if a == TABLE] \
        if scatter is not None else []
    if scatter is not None and slot_blocks:   # V now counts the blocks, of `slot_blocks[0]` slots each
        index, count = scatter
        slots = f"{TABLE} * {slot_blocks[0]}"
        found.shapes = {p: [_substituted([d], {TABLE: slots})[0] for d in s if TABLE in exprs.names(d)] +  # rows first
                        [d for d in s if TABLE not in exprs.names(d)] for p, s in found.shapes.items()}
        scatter_require = [f"{slots} >= {count}"]
        # the slots no index names keep what they held (a cache the program keeps across calls): inout
        found.inout |= {p for p, s in found.shapes.items() if any(TABLE in exprs.names(d) for d in s)}
        notes.append(f"`{index}` places rows of an output the kernel never reads (a scatter) into {TABLE} blocks "
                     f"of `{slot_blocks[0]}` slots: drawn as {count} distinct slots (`permutation({slots})`) — CHECK")
    elif scatter is not None:   # the table is as long as the index array: a permutation of its rows
        index, count = scatter
        found.shapes = {p: [_substituted([d], {TABLE: count})[0] for d in s if TABLE in exprs.names(d)] +   # rows first
                        [d for d in s if TABLE not in exprs.names(d)] for p, s in found.shapes.items()}
        found.uses_table = False
        notes.append(f"`{index}` places rows of an output the kernel never reads (a scatter): drawn as a "
                     f"permutation of its {count} elements, the output that many rows — CHECK")
    if found is not None and found.uses_table and TABLE not in size_names:
        size_names.append(TABLE)
    require = _requirements(grid, block, found, size_names, kernel, known_values)
    if scatter is not None and slot_blocks:
        require += [r for r in scatter_require if r not in require]
    for r in _whole_groups(kernel, size_names, derived):
        if r not in require:
            require.append(r)
            notes.append(f"`{r}`: the kernel divides the sizes into that many equal parts, remainder dropped — required")
    for r, line in _shared_rows(kernel, size_names, block, known_values):
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
        require += [r for n, w in found.packets.items() if n in size_names and
                    (r := f"{n} % {w} == 0") not in require]
        for n, w in found.packets.items():
            if n in size_names:
                notes.append(f"`{n}` % {w} == 0: the kernel reads or writes packets of {w} elements past the "
                             f"last index it checks (a vector access) — required")
    require += [r for r in launch_require if r not in require]
    tile = max((int(b) for b in block if b.strip().isdigit()), default=1)
    if decide.get("tiles") and tile > 1:   # it faulted on a partial tile: every size a whole number of them
        tiled = [n for n in size_names if n != TABLE and not any(r.replace(" ", "").startswith(f"{n}%") for r in require)]
        require += [f"{n} % {tile} == 0" for n in tiled]
        if tiled:
            notes.append(f"{', '.join(f'`{n}`' for n in tiled)}: whole tiles of {tile} (the block's width) — the "
                         f"first guess faulted on a partial tile; CHECK the kernel handles no tail")
    earlier = _earlier_version(kernel, model)
    if earlier is not None:
        notes.append(f"`{earlier}` is an earlier version of this kernel (same parameters): it is the reference; "
                     f"give it a spec of its own so it runs with its own launch")

    fallback_shape = size_names if len(size_names) <= 2 else size_names[:2]
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
                typed = _cast_type(found.casts.get(p.name, set()) if found is not None else set(), shape)
                if typed is not None:   # read as the widest type the kernel casts it to, its shape in those
                    dt, found.shapes[p.name] = typed
                    if p.name in found.vectors:   # its vector accesses in those elements too
                        found.vectors[p.name] = max(1, found.vectors[p.name] // dt.itemsize)
                    notes.append(f"`{p.name}` is a `void*` the kernel casts to {', '.join(sorted(found.casts[p.name]))}: "
                                 f"taken as {dt.name} (the widest; the flags chosen read it so) — CHECK")
                else:
                    notes.append(f"`{p.name}` is a `void*`: taken as bytes (uint8)")
            elif dt is None:   # never "?": float, which the compiler checks against the real type
                dt = dtypes.BY_NAME["float"]
                errors.append(f"`{p.name}`: the element type `{p.base_type}` could not be resolved ({why}): took "
                              f"float — the compiler checks it against the real type; set it if that fails")
            shape = found.shapes.get(p.name) if found is not None else None
            if found is not None and p.name in found.partial:
                notes.append(f"`{p.name}`: some of its accesses could not be bounded; shape {_toml_list(shape)} is "
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
                    if _written_as_constants(kernel, p.name):
                        role += ", flag = true"
                        notes.append(f"`{p.name}` is written only as constants (a status): `flag = true`, the same "
                                     f"value everywhere is what valid inputs give")
                    if found is None:
                        notes.append(f"`{p.name}` is a non-const pointer: assumed an output (use inout = true if "
                                     f"the kernel also reads it)")
            init = ""
            if earlier is not None and dt.name == "float" and role and _reduces(kernel):
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
            args.append((p.name, f'{{ type = "{dt.name}", shape = {_toml_list(shape)}{role}{init} }}'))
            buffers[p.name] = (shape, dt.itemsize, role == ", inout = true")
        elif p.name in size_names:
            args.append((p.name, f'"{p.name}"'))
            scalars[p.name] = p.name
        elif p.name in derived:
            args.append((p.name, f'"{derived[p.name]}"'))
            scalars[p.name] = derived[p.name]
        else:
            given = _launch_value(site, kernel, p.name, {**constants, **site_model.constants}) \
                if site is not None and site_model is not None else None
            value = given if given is not None else _scalar_guess(p.name)
            # (a struct's field of a class of its own is `opaque`: refused above only where the instance uses it)
            member = _member_read(kernel, p.name) if dt is None and p.name not in opaque else None
            if member is not None:   # a struct `structs` could not split into its fields: no float stands for it
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                # a template parameter's struct is its instance's (`T` = `TensorListMetadata<3>`)
                named = p.base_type.replace("const", "").strip()
                named = " ".join(targs.get(named, named).split())
                notes.append(f"{CANNOT}`{p.name}` is a `{p.type}`{f' (`{named}`)' if named not in p.type else ''} "
                             f"passed by value and the kernel reads its members (`{member}`), but Astra reads only "
                             f"structs of plain fields (pointers and numbers): "
                             f"{structs.not_flattened(named, types.items)} — the spec format cannot give it yet")
            elif dt is None and not p.is_pointer and (indexed := _first_use(kernel, p.name, "subscript_expression")):
                # torch's `PackedTensorAccessor32<T, 2>`: a pointer with its sizes and strides in one object
                args.append((p.name, f'{{ value = {value}, type = "float" }}'))
                notes.append(f"{CANNOT}`{p.name}` is a `{p.type}` passed by value that the kernel indexes like an "
                             f"array (`{indexed}`): an array object (a tensor accessor: a pointer with its sizes and "
                             f"strides) cannot be given by the spec format yet")
            elif dt is None and not p.is_pointer and (cls := _class_argument(targs.get(p.base_type, ""))):
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
                notes.append(f"`{p.name}`: type {p.type!r} unknown, assumed float")
            else:
                args.append((p.name, value if dt.is_float else str(int(float(value)))))
                notes.append(f"`{p.name}` = {value}, as the launch passes it" if given is not None
                             else f"`{p.name}` = {value} is a guess")
    for n in size_names:
        if kernel.param(n) is None and n != TABLE:
            notes.append(f"size `{n}` comes from the launch site's grid; it is not a kernel parameter")
    if guessed_shapes:
        notes.append(f"shape of {', '.join(f'`{n}`' for n in guessed_shapes)} could not be read from the kernel's "
                     f"indexing: set to {_toml_list(fallback_shape)} — CHECK each against the real extent")
        called = [n for n in _called_template_params(kernel) if n not in helpers]   # (a bound one is followed)
        if called:   # sgl-kernel transfer_kernel_impl: `SrcOffsetFn(src_k, tbl, layer, ...)` gives the address
            notes.append("the kernel computes addresses through "
                         + ", ".join(f"`{n}` (here `{targs.get(n, '?')}`)" for n in called)
                         + ", a function it takes as a template argument: Astra does not follow calls through "
                           "template parameters, so what the kernel reaches through their results is not read")

    vectors = _vector_requirements(found, buffers, size_names, require, notes)
    require += vectors
    draft = Draft(grid, block, shared, require, {n: test_values(n, program_sizes.get(n, [])) for n in size_names},
                  {}, buffers, scalars, access.kernel_body(kernel), known_values)
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
    size_bench(draft, program_sizes, notes)
    for b in starts:
        draft.bench[b] = [0]

    lines = ["/* @astra", f"grid = {_toml_list(draft.grid)}", f"block = {_toml_list(draft.block)}"]
    if earlier is not None:
        lines.append(f'reference = "{earlier}"')
    if draft.shared:
        lines.append(f'shared_mem = "{draft.shared}"')
    if instantiate:
        lines.append(f'instantiate = "{instantiate}"')
    if draft.require:
        lines.append(f"require = {_toml_list(draft.require)}")
    lines += ["", "[sizes]"] + [f"{n} = {v}" for n, v in draft.sizes.items()]
    lines += ["", "[bench]"] + [f"{n} = {v}" for n, v in draft.bench.items()]
    width = max(len(p.name) for p in kernel.params) if kernel.params else 0
    lines += ["", "[args]"] + [f"{name:<{width}} = {value}" for name, value in args]
    lines.append("*/")
    comment = "\n".join(lines) + "\n"
    notes = ranked(errors + notes)
    return Proposal(comment, notes, _problems(notes, kernel, model, comment))


# What a note says about how sure inference is, least sure first: a type taken without evidence,
# a launch or shape guessed, a value guessed, then what was read from the program.
_UNSURE = (("could not be resolved", "took float", "took 1", "took false", "took int32"),
           ("guessed", "could not be read", "CHECK", "no launch site", "invented", "not followed"),
           ("is a guess", "assumed", "took 256", "took its value", "one of the cases", "taken as"))


def ranked(notes: list[str]) -> list[str]:
    """The notes, what inference is least sure of first (the order within a rank kept)."""
    def rank(note: str) -> int:
        if note.startswith(CANNOT):   # what no reading of the program gives: before any guess
            return -1
        return next((i for i, words in enumerate(_UNSURE) if any(w in note for w in words)), len(_UNSURE))
    return sorted(notes, key=rank)


def refusals(kernel: Kernel, model: SourceModel, comment: str) -> list[str]:
    """What Astra's own validator says of `comment` pasted above the kernel ([] when it accepts it)."""
    from ..errors import AstraError
    from ..model.spec import SpecErrors, load
    data = model.text.encode("utf-8")
    text = (data[:kernel.span.start_byte] + comment.encode("utf-8") + data[kernel.span.start_byte:]).decode("utf-8")
    m = source.parse(text)
    k = next((x for x in m.kernels if x.qualified_name == kernel.qualified_name and x.spec is not None), None)
    if k is None:
        return ["the comment is not read as the kernel's spec where it is inserted"]
    try:
        load(k, m)
    except SpecErrors as e:
        return [d.message for d in e.diagnostics]
    except AstraError as e:
        return [e.message]
    return []


def _scatter(found: InferredShapes) -> tuple[str, str] | None:
    """(the index array, its element count) where the kernel's one index array places rows of
    outputs it never reads (`out[idx[row] * cols + i] = x`): a scatter, whose destinations are
    distinct — drawn with repeats, two rows would race for one destination and others stay unwritten."""
    shape = found.shapes.get(next(iter(found.tables))) if found.uses_table and len(found.tables) == 1 else None
    users = [p for p, s in found.shapes.items() if any(TABLE in exprs.names(d) for d in s)]
    if not shape or any(TABLE in exprs.names(d) for d in shape) or not users \
            or any(p in found.read_only or p in found.inout for p in users):
        return None
    return next(iter(found.tables)), " * ".join(d if d.isidentifier() or d.isdigit() else f"({d})" for d in shape)


def _shared_rows(kernel: Kernel, size_names: list[str], block: list[str], values: dict[str, int]) -> list[tuple[str, int]]:
    """(`n >= S`, line) for a loop over size `n` that several blocks split (FasterTransformer's
    topk_stage1: `for (e = tid + lane * BLOCK; e < vocab; e += BLOCK * BLOCKS_PER_BEAM)`, `lane`
    read from blockIdx): it starts at a block's own offset and steps a constant S wider than the
    block. Below S elements some block has none, and its partial result is empty (an index of -1
    the kernel writes through): the program's rows are far longer, so that is no edge to test."""
    body = access.kernel_body(kernel)
    threads = [int(b) for b in block if b.strip().isdigit()]
    if body is None or len(threads) != len(block) or not threads:
        return []
    width = _prod(threads)
    from_block: set[str] = {"blockIdx"}   # locals computed from the block's index, transitively
    for d in _walk(body):
        if d.type == "init_declarator" and d.child_by_field_name("value") is not None:
            name = d.child_by_field_name("declarator")
            used = {n.text.decode() for n in _walk(d.child_by_field_name("value")) if n.type == "identifier"}
            if name is not None and name.type == "identifier" and used & from_block:
                from_block.add(name.text.decode())
    out: list[tuple[str, int]] = []
    for loop in _walk(body):
        if loop.type != "for_statement":
            continue
        init, cond, step = (loop.child_by_field_name(f) for f in ("initializer", "condition", "update"))
        if init is None or cond is None or step is None or step.type != "assignment_expression" \
                or step.child_by_field_name("operator").type != "+=":
            continue
        if not {n.text.decode() for n in _walk(init) if n.type == "identifier"} & from_block:
            continue
        op, bound = cond.child_by_field_name("operator"), cond.child_by_field_name("right")
        if op is None or op.type != "<" or bound is None or bound.text.decode() not in size_names:
            continue
        try:
            stride = exprs.evaluate_int(step.child_by_field_name("right").text.decode(), values)
        except exprs.ExprError:
            continue
        if stride >= 2 * width:
            out.append((f"{bound.text.decode()} >= {stride}", kernel.span.start_line + loop.start_point[0] + 1))
    return list(dict.fromkeys(out))


def _whole_groups(kernel: Kernel, size_names: list[str], derived: dict[str, str]) -> list[str]:
    """`hidden * rows % groups == 0` where the kernel's body computes, once and before any loop,
    a product of sizes divided by a size (`stride = (hidden * rows) / groups`): each of that many
    parts is taken whole, so its launcher passes a divisor (a remainder's elements would be read
    from past the parts' table)."""
    from .hostexprs import HostExprs
    body = access.kernel_body(kernel)
    if body is None:
        return []
    local: dict[str, str] = dict(derived)
    out: list[str] = []
    for st in body.named_children:
        if st.type != "declaration":
            continue
        for d in st.children_by_field_name("declarator"):
            target, value = d.child_by_field_name("declarator"), d.child_by_field_name("value")
            if d.type != "init_declarator" or target is None or target.type != "identifier" or value is None:
                continue
            v = value
            while v.type == "parenthesized_expression" and v.named_child_count == 1:
                v = v.named_children[0]
            hx = HostExprs({n: n for n in size_names}, local)
            if v.type == "binary_expression" and v.child_by_field_name("operator").type == "/":
                num, den = v.child_by_field_name("left"), v.child_by_field_name("right")
                a, b = hx.spec(num.text.decode()), hx.spec(den.text.decode())
                if a is not None and b in size_names and exprs.names(a) and b not in exprs.names(a) \
                        and (a in size_names or any(isinstance(x, ast.BinOp) for x in ast.walk(exprs.parse(a)))):
                    out.append(f"{exprs.simplify(a, [])} % {b} == 0")
            if hx.spec(value.text.decode()) is not None:
                local[target.text.decode()] = value.text.decode()
    return out


def _member_read(kernel: Kernel, name: str) -> str | None:
    """The first `name.member` (or `name.method(…)`) of the kernel's body, or None."""
    return _first_use(kernel, name, "field_expression")


def _first_use(kernel: Kernel, name: str, kind: str) -> str | None:
    """The first expression of type `kind` (`field_expression`, `subscript_expression`) of the kernel's
    body applied to `name` (`name.member`, `name[i][j]`), or None."""
    root = source.parser().parse(kernel.text.encode()).root_node
    for n in _walk(root):
        if n.type == kind and (arg := n.child_by_field_name("argument")) is not None \
                and arg.type == "identifier" and arg.text == name.encode():
            while n.parent is not None and n.parent.type == kind:   # `a[i][j]`, whole
                n = n.parent
            return " ".join(n.text.decode().split())[:60]
    return None


def _null_tested(kernel: Kernel, helpers: dict[str, Node] | None = None) -> set[str]:
    """Pointer parameters the kernel compares with null (`p != nullptr`, `p == NULL`, `!p`, `if (p)`,
    `p ? p[i] : x`), itself or in a device helper it hands them to (exllamav2's rope tests
    `past_lens` in the helper it calls): optional inputs its caller may leave out, a layout or a
    feature chosen by their absence (TransformerEngine rope's `cu_seqlens`: THD when given, SBHD when null)."""
    body = access.kernel_body(kernel)
    pointers = {p.name for p in kernel.params if p.is_pointer}
    if body is None or not pointers:
        return set()

    def bare(n, env):
        while n is not None and n.type == "parenthesized_expression" and n.named_child_count == 1:
            n = n.named_children[0]
        return env.get(n.text.decode()) if n is not None and n.type == "identifier" else None

    def is_null(n) -> bool:
        return n is not None and (n.type == "null" or (n.type == "number_literal" and n.text.decode() == "0"))

    out: set[str] = set()

    def walk(node, env: dict[str, str], depth: int) -> None:
        for n in _walk(node):
            if n.type == "binary_expression" and n.child_by_field_name("operator").type in ("==", "!="):
                left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                name = bare(left, env) if is_null(right) else bare(right, env) if is_null(left) else None
            elif n.type == "unary_expression" and n.child_by_field_name("operator").type == "!":
                name = bare(n.child_by_field_name("argument"), env)
            elif n.type in ("condition_clause", "conditional_expression"):
                name = bare(n.child_by_field_name("value") if n.type == "condition_clause"
                            else n.child_by_field_name("condition"), env)
            elif n.type == "call_expression" and depth < _NULL_HELPER_DEPTH:
                fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
                target = (helpers or {}).get(fn.text.decode().split("<")[0].split("::")[-1].strip()) \
                    if fn is not None else None
                if target is not None and target.type == "function_definition" and args is not None:
                    given = [a for a in args.named_children if a.type != "comment"]
                    bound = {h: k for h, a in zip(param_names(target), given) if h and (k := bare(a, env))}
                    inner = target.child_by_field_name("body")
                    if bound and inner is not None:
                        walk(inner, bound, depth + 1)
                continue
            else:
                continue
            if name is not None:
                out.add(name)
    walk(body, {p: p for p in pointers}, 0)
    return out


def _shift_counts(kernel: Kernel, size_names: list[str]) -> list[str]:
    """The kernel's integer parameters it shifts by (`hidden_dim >> merge_count`) and uses for
    nothing else a size is used for: bit counts, which a size's values (128, 4096) would shift
    every bit out of."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    shifts: set[str] = set()
    for n in _walk(body):
        if n.type == "binary_expression" and n.child_by_field_name("operator").type in ("<<", ">>"):
            right = n.child_by_field_name("right")
            while right is not None and right.type == "parenthesized_expression" and right.named_child_count == 1:
                right = right.named_children[0]
            if right is not None and right.type == "identifier" and right.text.decode() in size_names:
                shifts.add(right.text.decode())
    return [n for n in size_names if n in shifts]


def _modes(kernel: Kernel, size_names: list[str]) -> list[tuple[str, int, list[int]]]:
    """(name, value, the numbers it is compared with) for each integer parameter the kernel's body
    names only in `==`/`!=` comparisons with numbers (`if (int8_mode == 2)`): a mode, whose sizes'
    values would pick a path by accident; the value is the least non-negative number none of the
    comparisons names, so each of them takes its `else` (the plain path: FasterTransformer's int8_mode 0)."""
    body = access.kernel_body(kernel)
    if body is None:
        return []
    tested: dict[str, set[int]] = {n: set() for n in size_names}
    plain: set[str] = set()
    for n in _walk(body):
        if n.type != "identifier" or n.text.decode() not in tested:
            continue
        parent = n.parent
        while parent is not None and parent.type == "parenthesized_expression":
            parent = parent.parent
        op = parent.child_by_field_name("operator") if parent is not None and parent.type == "binary_expression" \
            else None
        other = [c for c in (parent.child_by_field_name("left"), parent.child_by_field_name("right"))
                 if c is not None and c.end_byte <= n.start_byte or c is not None and c.start_byte >= n.end_byte] \
            if op is not None else []
        literal = other[0].text.decode().rstrip("uUlL") if len(other) == 1 and other[0].type == "number_literal" else ""
        if op is not None and op.type in ("==", "!=") and literal.isdigit():
            tested[n.text.decode()].add(int(literal))
        else:
            plain.add(n.text.decode())
    out = []
    for name, values in tested.items():
        if values and name not in plain:
            out.append((name, next(v for v in range(len(values) + 1) if v not in values), sorted(values)))
    return out


def _written_as_constants(kernel: Kernel, name: str) -> bool:
    """A status output: every use of the pointer in the body stores a literal through it
    (FlashInfer sampling's `valid[bx] = true;` and `valid[bx] = false;`) — nothing it computes."""
    body = access.kernel_body(kernel)
    uses = [n for n in _walk(body) if n.type == "identifier" and n.text.decode() == name] if body is not None else []
    for u in uses:
        store = u.parent
        if store is None or store.type not in ("subscript_expression", "pointer_expression") or \
                store.child_by_field_name("argument") != u:
            return False
        assign = store.parent
        if assign is None or assign.type != "assignment_expression" or assign.child_by_field_name("left") != store \
                or assign.child_by_field_name("operator").type != "=":
            return False
        value = assign.child_by_field_name("right")
        while value is not None and value.type in ("parenthesized_expression", "unary_expression") \
                and value.named_child_count == 1:
            value = value.named_children[0]   # `(-1)`, `-1`
        if value is None or value.type not in ("true", "false", "number_literal"):
            return False
    return bool(uses)


def _reduces(kernel: Kernel) -> bool:
    """The kernel combines values across threads (warp shuffles, cooperative-groups reductions,
    shared-memory partials, atomics): its rounding differs from a sequential version's."""
    body = access.kernel_body(kernel)
    calls = {n.child_by_field_name("function").text.decode().split("<")[0].split("::")[-1]
             for n in _walk(body) if n.type == "call_expression" and n.child_by_field_name("function") is not None} \
        if body is not None else set()
    return any(c.startswith(("__shfl", "atomicAdd", "warp_sum", "warp_reduce", "block_reduce", "block_sum"))
               or c in ("reduce", "__syncthreads") for c in calls)


def _version(name: str) -> tuple[str, int] | None:
    """'gelu_forward_kernel2' -> ('gelu_forward_kernel', 2)."""
    stem = name.rstrip("0123456789")
    return (stem, int(name[len(stem):])) if stem != name else None


def _earlier_version(kernel: Kernel, model: SourceModel) -> str | None:
    """The closest lower-numbered version of this kernel in the file with the same parameters
    and template parameters (kernel-development files keep kernel1, kernel2, ... side by side);
    the reference is instantiated with this kernel's `instantiate`, so another template list
    (`reduce5<T, blockSize>` beside `reduce6<T, blockSize, nIsPow2>`) cannot be one."""
    mine = _version(kernel.name)
    if mine is None:
        return None
    def sig(k: Kernel) -> list[tuple[str, str]]:   # __restrict__ does not change the interface
        return [(p.name, " ".join(p.type.replace("__restrict__", " ").split())) for p in k.params]

    def kinds(k: Kernel) -> list[str]:   # `class T` and `typename U` are one kind; names and defaults aside
        out = []
        for t in k.template_params:
            words = t.split("=")[0].replace("...", " ... ").split()[:-1]
            out.append(" ".join("typename" if w == "class" else w for w in words))
        return out
    older = [(v[1], k.name) for k in model.kernels if k is not kernel and (v := _version(k.name)) is not None
             and v[0] == mine[0] and v[1] < mine[1] and sig(k) == sig(kernel) and kinds(k) == kinds(kernel)]
    return max(older)[1] if older else None


def _within_launch_bounds(kernel: Kernel, block: list[str], values: dict[str, str], notes: list[str]) -> list[str]:
    """A block no larger than the kernel's `__launch_bounds__` (the launcher keeps to it)."""
    if not kernel.launch_bounds or "(" not in kernel.launch_bounds:
        return block
    first = exprs.split_top_level(kernel.launch_bounds.split("(", 1)[1].rsplit(")", 1)[0])[0]
    bound = value_of(first, values)
    if bound is None or bound < 1:
        return block
    try:
        fixed = [exprs.evaluate_int(b, {}) for b in block] if all(not exprs.names(b) for b in block) else None
    except exprs.ExprError:
        fixed = None
    if fixed is not None:
        while _prod(fixed) > bound and fixed[0] > 1:
            fixed[0] //= 2
        out = [str(v) for v in fixed]
    elif len(block) == 1:
        out = [f"min({block[0]}, {bound})"]
    else:
        return block
    if out != block:
        notes.append(f"block kept within the kernel's {kernel.launch_bounds}: {', '.join(out)}")
    return out


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _called_template_params(kernel: Kernel) -> list[str]:
    """The kernel's template parameters its body calls as functions (`template <auto Fn>` … `Fn(p, i)`)."""
    names = set(kernel.template_param_names)
    body = access.kernel_body(kernel)
    out: list[str] = []
    for n in _walk(body) if body is not None and names else ():
        fn = n.child_by_field_name("function") if n.type == "call_expression" else None
        if fn is not None and fn.type == "identifier" and fn.text.decode() in names and fn.text.decode() not in out:
            out.append(fn.text.decode())
    return out


def _bound_functions(kernel: Kernel, targs: dict[str, str], helpers: dict[str, Node]) -> dict[str, Node]:
    """Each template parameter the kernel calls as a function (`SrcOffsetFn(base, tbl, layer, ...)`,
    sgl-kernel transfer_kernel_impl) under the name of the device function `instantiate` binds it
    to (`get_global_offset_lf<const char>`), so the accesses follow the call into that function
    as into any helper: what the kernel reaches through its result is then measured."""
    out: dict[str, Node] = {}
    for name in _called_template_params(kernel):
        bound = targs.get(name, "").strip().lstrip("&").strip()
        short = bound.split("<")[0].split("::")[-1].strip()
        for key, fn in helpers.items():   # the function and its overloads by their count of arguments
            if key == short or key.startswith(short + "#"):
                out[name + key[len(short):]] = fn
    return out


def _holds_true(r: str) -> bool:
    try:
        return bool(exprs.evaluate(r, {}))
    except exprs.ExprError:
        return False


def _substituted(parts: list[str] | None, values: dict[str, str]) -> list[str] | None:
    """Spec expressions with some names replaced by expressions of their own."""
    if parts is None or not values:
        return parts
    import ast

    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return ast.parse(f"({values[node.id]})", mode="eval").body if node.id in values else node
    return [ast.unparse(_Sub().visit(exprs.parse(x).body)) if x else x for x in parts]


def _launch_value(site, kernel: Kernel, name: str, constants: dict[str, str]) -> str | None:
    """A scalar argument the launch passes as a number or a constant (`RISKFREE` = 0.02)."""
    idx = next((i for i, p in enumerate(kernel.params) if p.name == name), None)
    if idx is None or idx >= len(site.args):
        return None
    text, seen = site.args[idx].strip(), 0
    while text in constants and seen < 8:
        text, seen = constants[text].strip(), seen + 1
    text = text.strip("()").rstrip("fF") if text.count("(") <= 1 else text
    try:
        value = float(text)
    except ValueError:
        return None
    return repr(value) if value == value and abs(value) < 1e30 else None


def _names_used(kernel: Kernel, items) -> set[str]:
    """The names the kernel uses, and those the device functions and classes it reaches use
    (`THREADS_X` in the helper the kernel calls, the view class's method)."""
    by_name: dict[str, list] = {}
    for it in items:
        if it.kind in ("device_function", "type"):
            for n in it.defines:
                by_name.setdefault(n, []).append(it)
    seen, todo = set(kernel.uses), list(kernel.uses)
    while todo:
        for it in by_name.pop(todo.pop(), []):
            new = set(it.uses) - seen
            seen |= new
            todo += new
    return seen


def _integer_constants(constants: dict[str, str], used: set[str]) -> dict[str, int]:
    """The integer value of each constant the kernel's code names (macros through macros)."""
    out = {}
    for name in sorted(used):
        if name in constants:
            v = value_of(name, constants)
            if v is not None:
                out[name] = v
    return out


def _requirements(grid: list[str], block: list[str], found: InferredShapes | None, size_names: list[str],
                  kernel: Kernel, values: dict[str, int] | None = None) -> list[str]:
    """`n % 8 == 0` when the launch gives each thread a fixed chunk (`cdiv(n, 256 * 8)`) or
    divides a size by a constant (`width / 32` blocks): the kernel then handles no tail, as its
    launcher assumes."""
    out = []
    for g in grid:   # `size / 32` blocks of a tile: the launcher assumes whole tiles
        node = source.parse_expression(g)
        if node is not None and node.type == "binary_expression" and node.child_by_field_name("operator").type == "/":
            a, b = node.child_by_field_name("left"), node.child_by_field_name("right")
            if a.type == "identifier" and a.text.decode() in size_names and b.type == "number_literal" \
                    and b.text.decode().isdigit() and int(b.text.decode()) > 1:
                out.append(f"{a.text.decode()} % {b.text.decode()} == 0")
    # `hidden_dim / heads` threads: the launcher's heads divide the row
    out += [r for r in dict.fromkeys(f"{a} % {b} == 0" for a, b in size_pairs(grid + block, size_names, DIVISIONS)) if r not in out]
    # `(max - min) / 8` blocks: the launcher has the first above the second
    out += [r for r in dict.fromkeys(f"{a} > {b}" for a, b in size_pairs(grid + block, size_names, DIFFERENCES)) if r not in out]
    # a loop over `size / 8` packets handles no tail: the size must be a multiple of 8
    body = source.parser().parse(kernel.text.encode()).root_node
    dead = compiled_branches.not_compiled(body, values or {})   # `if constexpr (use_vec)` of an instance without it
    for n in _walk(body):
        if n.type == "for_statement" and n.child_by_field_name("condition") is not None \
                and not any(a <= n.start_byte < b for a, b in dead):
            for d in _walk(n.child_by_field_name("condition")):
                if d.type == "binary_expression" and d.child_by_field_name("operator").type == "/":
                    a, b = d.child_by_field_name("left"), d.child_by_field_name("right")
                    if a is not None and b is not None and a.type == "identifier" and a.text.decode() in size_names \
                            and b.type == "number_literal" and b.text.decode().isdigit() and int(b.text.decode()) > 1:
                        req = f"{a.text.decode()} % {b.text.decode()} == 0"
                        if req not in out:
                            out.append(req)
    # warps per block (`blockDim.x >> 5`, `blockDim.x / WARP_SIZE`): a block under a warp has none,
    # and a loop stepping by them (`head += warps_per_block`) never ends — the launcher's block
    # is at least a warp (vLLM reshape_and_cache_flash: `min(num_heads * head_size, 512)` threads)
    if block and not block[0].strip().isdigit() and _counts_warps(body, values or {}) \
            and (r := f"{block[0]} >= 32") not in out:
        out.append(r)
    out += [r for r in clamped_block_requires(block, kernel.text, size_names) if r not in out]
    if "gridDim" in kernel.text:   # a grid-stride loop takes any size
        return out
    for g in grid:
        node = source.parse_expression(g)
        if node is None or node.type != "call_expression":
            continue
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or fn.text.decode() != "cdiv" or args is None or len(args.named_children) != 2:
            continue
        total, per = (a.text.decode() for a in args.named_children)
        if total not in size_names:
            continue
        factors = [f.strip() for f in per.split("*")]
        chunk = [f for f in factors if f.isdigit() and f not in block and int(f) > 1]
        if len(factors) > 1 and chunk:
            out.append(f"{total} % {chunk[-1]} == 0")
    return out


def _counts_warps(body, values: dict[str, int]) -> bool:
    """Whether the kernel divides `blockDim.x` into warps (`>> 5`, `/ 32`, `/ WARP_SIZE`)."""
    for n in _walk(body):
        if n.type != "binary_expression" or n.child_by_field_name("operator").type not in (">>", "/"):
            continue
        a, b = n.child_by_field_name("left"), n.child_by_field_name("right")
        if a is None or b is None or a.text.decode().replace(" ", "") != "blockDim.x":
            continue
        word = b.text.decode().strip()
        number = int(word) if word.isdigit() else values.get(word, 32 if word in ("warpSize", "WARP_SIZE") else 0)
        if number == (5 if n.child_by_field_name("operator").type == ">>" else 32):
            return True
    return False


def _vector_requirements(found: InferredShapes | None, buffers: dict[str, tuple[list[str], int, bool]],
                         size_names: list[str], require: list[str], notes: list[str]) -> list[str]:
    """`hidden % 4 == 0` where the kernel moves a buffer W elements at a time (a `uint4` or
    `vec_n_t<float, 4>` over floats): its rows then start on a W-element boundary, as a vector
    access needs on a GPU (else a misaligned-address fault) and as the launcher that picks the
    width arranges; a vector loop also leaves a partial vector's tail unwritten."""
    import math
    widths: dict[str, int] = {}      # size -> the width every vector access over it needs (their lcm)
    names: dict[str, list[str]] = {}
    for name, width in (found.vectors if found is not None else {}).items():
        shape = buffers.get(name, ([], 0, False))[0]
        last = shape[-1].strip() if shape else ""
        if last not in size_names or any(r.replace(" ", "").startswith(f"{last}%") for r in require):
            continue
        widths[last] = math.lcm(widths.get(last, 1), width)
        names.setdefault(last, []).append(name)
    out = [f"{last} % {w} == 0" for last, w in widths.items()]
    for req, last in zip(out, widths):
        notes.append(f"{', '.join(f'`{n}`' for n in names[last])} moved {widths[last]} elements at a time (vector "
                     f"accesses): `{req}` keeps each row aligned to a vector, as a GPU needs — CHECK whether the "
                     f"kernel handles a tail")
    return out


def _cast_type(casts: set[str], shape: list[str] | None) -> tuple[dtypes.DType, list[str]] | None:
    """A `void*` buffer's element type, the widest scalar the kernel casts it to, and its shape
    in those elements (a row of `4 * dim` bytes is `dim` floats), or None where it is not one."""
    types = [dt for c in casts if (dt := dtypes.BY_NAME.get(c)) is not None]
    if not types or not shape:
        return None
    widest = max(types, key=lambda t: t.itemsize)
    last = shape[-1].replace(" ", "")
    if widest.itemsize == 1:
        return widest, shape
    if last.startswith(f"{widest.itemsize}*"):
        return widest, shape[:-1] + [shape[-1].split("*", 1)[1].strip()]
    if last.isdigit() and int(last) % widest.itemsize == 0:   # a slot of 4 bytes an atomic updates: 1 float
        return widest, shape[:-1] + [str(int(last) // widest.itemsize)]
    return None


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"
