"""Template arguments: the `instantiate` a proposal writes — one argument per template parameter,
from the launch, the launcher's callers and explicit instantiations, defaults, constants, and
guesses the notes name — each spelled as seen from the global scope, where Astra's instantiation
is appended to the user's file. Each source of an argument is the fallback of the one before (the
launch, the launcher's parameters and callers, defaults, enumerators, specializations:
`_resolve_arg`, `_launcher_param`, `_fallback_arg`); how a name is spelled and checked is in
`template_names`, a dispatch macro's types in `dispatch_types`, the project's own instances in
`project_instances`."""
from __future__ import annotations

import math
import re

from ..model import dtypes, source
from ..model.source import Kernel, LaunchSite
from ..model.syntax import walk as _walk
from .dispatch_types import DISPATCH_TYPE, dispatch_names, dispatch_type
from .sizes import MOE_EXPERTS
from .types import Types
from .project_choices import device_function_for, objects_of, project_class_for
from .template_names import (acceptable, constant_value, is_pack, is_type_param, qualified_names, qualify,
                             replace_word, split, template_param_defaults, template_param_names_of, usable_arg)


# a note that begins so says what no reading of the program can give (a value only the caller or
# a running program knows): the draft is never proposed, and this is why (`proposal.infer`)
CANNOT = "cannot be inferred: "
def infer_template_args(kernel: Kernel, site: LaunchSite | None, notes: list[str], program=None,
                   constants: dict[str, str] | None = None, known: frozenset[str] = frozenset(),
                   items=None, site_model=None, declared=None) -> str | None:
    """`instantiate`: one argument per template parameter, from (in this order) the launch's own
    template arguments — a launcher's template parameter followed to its callers, explicit
    instantiations and default, a dispatch macro's scalar_t taken as float, names evaluated as
    constants —, the file's explicit instantiations of the kernel, the parameter's default;
    otherwise a type parameter is float, an enumeration its first enumerator, a device-function
    parameter the first matching device function of the file, each with a note. A parameter pack
    left to guess is empty. Names are written as seen from the global scope, where Astra's
    instantiation stands (the file's and its headers' `items` say where each is defined).
    `declared`: a host function's name -> the type names the macros it uses declare
    (`types.dispatch_types`), each the type taken and all it may be. `items` given as the program's
    `Types` (whose items they are): a value argument that is a compile-time local of the launcher,
    or of its caller, is evaluated (`class_numbers.compile_time_value`) — otherwise it is guessed."""
    types = items if isinstance(items, Types) else None
    items = items.items if isinstance(items, Types) else items
    if not kernel.is_template:
        return None
    given: list[str] = split(site.template_args) if site is not None and site.template_args else []
    explicit = program.instantiations(kernel.name) if program is not None else []
    qualified = qualified_names(items or [])
    scalar = dispatch_type(site, site_model, items or [])
    usable = [e for e in explicit if all(acceptable(qualify(a, qualified), known) for a in e)]
    if not given and usable:
        given = list(usable[0])
        notes.append(f"template arguments from the file's explicit instantiation `{kernel.name}<{', '.join(given)}>`")
        site = None   # the arguments are the instantiation's own: nothing of a launcher's to follow
    out: list[str] = []
    bound: dict[str, str] = {}
    constants = dict(constants or {})
    params = list(zip(kernel.template_params, kernel.template_param_names))
    # type arguments the launch gives first: a value argument may be the launcher's constant over
    # their sizes (`constexpr uint32_t vec_size = std::max(16U / sizeof(DTypeIn), HEAD_DIM / 32U)`
    # before `DTypeIn` in `kernel<vec_size, DTypeIn, DTypeO>`); a defaulted one keeps its place, as
    # its default may name the arguments before it (`std::conditional_t<SCALE_UE8M0, uint32_t, float>`)
    order = list(range(len(params)))
    if not any(is_pack(p) for p, _ in params):
        order.sort(key=lambda k: not (is_type_param(params[k][0]) and k < len(given)))
    chosen: dict[int, str] = {}
    guessed: dict[int, list[str]] = {}   # argument -> the notes its guess wrote
    for k in order:
        param, name = params[k]
        if is_pack(param):   # the rest of the launch's arguments, or none
            rest = [_resolve_arg(g.strip(), site, program, constants, notes, name, known, scalar, declared)
                    for g in given[k:]]
            if all(r is not None for r in rest):
                out += [qualify(r, qualified) for r in rest if r is not None]
            if not rest:
                notes.append(f"template parameter pack `{name}`: no launch gives it; left empty")
            break
        arg = given[k].strip() if k < len(given) else None
        if arg is not None:
            spelled = arg
            arg = _resolve_arg(arg, site, program, constants, notes, name, known, scalar, declared, types)
            if arg is None and not is_type_param(param):
                # what the launch hands on as it is (`T`, taken as float here) binds the launcher's own
                taken = {given[j].strip(): chosen[j] for j in chosen if j < len(given) and given[j].strip().isidentifier()}
                arg = _launcher_constant(spelled, site, program, constants, notes, name, known, types, taken)
            arg = qualify(arg, qualified) if arg is not None else None
        if arg is None and "=" in param:   # a default argument, over the arguments so far
            default = param.split("=", 1)[1].strip()
            for pname, value in bound.items():
                default = replace_word(default, pname, value)
            arg = default
        if arg is None:
            mark = len(notes)
            arg = _fallback_arg(param, name, kernel, program, bound, notes, items or [], qualified)
            guessed[k] = notes[mark:]
        bound[name] = arg
        chosen[k] = arg
        out.append(arg)
        dt = dtypes.from_cpp(arg) if is_type_param(param) else None
        if dt is not None:   # `sizeof(DTypeIn)` as the launcher spells it, and as the kernel does
            for spelled in {name, given[k].strip() if k < len(given) else name}:
                constants.setdefault(f"sizeof({spelled})", str(dt.itemsize))
    if len(chosen) == len(params):
        out = [chosen[k] for k in range(len(params))]
        out = _explicit_for_guesses(kernel.name, [n for _, n in params], out, guessed, usable, qualified, notes)
    # a dispatch name a macro of the project declares became that macro's type, not the scalar
    given = [g for g in given if _declared_type(g.strip(), site, program, [], declared) is None]
    if any(dispatch_names(g) for g in given) and scalar == DISPATCH_TYPE:
        notes.append(f"instantiate: the dispatch macro's scalar_t became {DISPATCH_TYPE} "
                     f"(use __half or __nv_bfloat16 to test those)")
    elif any(dispatch_names(g) for g in given):
        notes.append(f"instantiate: the dispatch macro around the launch offers no float; its scalar_t became "
                     f"{scalar}, the first type it dispatches over")
    return "<" + ", ".join(out) + ">"


def _explicit_for_guesses(kernel: str, param_names: list[str], out: list[str], guessed: dict[int, list[str]], usable: list,
                          qualified: dict[str, str], notes: list[str]) -> list[str]:
    """Arguments no launch gave (the launcher's own instances made where the reader does not
    follow: a macro's) taken from the file's explicit instantiation of the kernel that agrees with
    the rest, not guessed: a guessed `1` may name no case of the kernel's switch (bitsandbytes'
    two-state optimizer kernel, instantiated for ADAM and ADEMAMIX only, did nothing at it)."""
    if not guessed:
        return out
    firm = {k: a for k, a in enumerate(out) if k not in guessed}
    fit = next((e for e in usable if len(e) == len(out) and all(
        "".join(qualify(e[k], qualified).split()) == "".join(a.split()) for k, a in firm.items())), None)
    if fit is None:
        return out
    dropped = [n for k in guessed for n in guessed[k]]
    notes[:] = [n for n in notes if n not in dropped]
    out = [qualify(fit[k], qualified) if k in guessed else a for k, a in enumerate(out)]
    names = ", ".join(f"`{param_names[k]}`" for k in sorted(guessed))
    notes.append(f"template arguments {names} (no launch binds them) from the file's explicit instantiation "
                 f"`{kernel}<{', '.join(fit)}>`")
    return out


def _resolve_arg(arg: str, site: LaunchSite | None, program, constants: dict[str, str], notes: list[str],
                 name: str, known: frozenset[str], scalar: str = DISPATCH_TYPE, declared=None,
                 types=None) -> str | None:
    """One template argument of a launch as something the spec can name, or None."""
    typed = _declared_type(arg, site, program, notes, declared)
    if typed is not None:
        return typed
    for host in dispatch_names(arg):   # the type a dispatch macro's lambda names
        arg = replace_word(arg, host, scalar)
    arg = " ".join(re.sub(r"\btypename\s+", "", arg).split())   # not needed outside a template
    # a template parameter of the launching function: what its callers give it, else its default;
    # a type alias of its body (`using T2 = typename TypeConverter<T>::Type;`) over those — both
    # hide a name of the same spelling outside the launcher (flash-attention's `using
    # Kernel_traits = Kernel_traits<...>`)
    fn = program.function(site.function) if site is not None and program is not None and site.function else None
    params = template_param_names_of(fn[0]) if fn is not None else []
    alias = _local_alias(fn[0], arg) if fn is not None else None
    if site is not None and fn is not None and arg in params:
        return _launcher_param(site.function, fn[0], arg, program, constants, notes, name, known, types)
    if site is not None and fn is not None and alias is not None:
        for p in params:
            if re.search(rf"\b{re.escape(p)}\b", alias):
                value = _launcher_param(site.function, fn[0], p, program, constants, [], name, known, types)
                if value is None:
                    return None
                alias = replace_word(alias, p, value)
        if not acceptable(alias, known):
            return None
        notes.append(f"template parameter `{name}`: `{arg}` of `{site.function}` is `{alias}`")
        return alias
    if acceptable(arg, known):
        return arg
    value = constant_value(arg, constants)
    if value is not None:
        return value
    return None


def _declared_type(arg: str, site: LaunchSite | None, program, notes: list[str], declared) -> str | None:
    """The type a macro of the project declares `arg` as (`TYPE_SWITCH(dtype, Type, ...)` around
    the launch), or a launcher's template parameter as its callers pass such a name — before a
    dispatch name (`input_t`) is taken as float: the instance the program makes."""
    if declared is None or site is None or not site.function or not arg.isidentifier():
        return None
    found = declared(site.function).get(arg)
    fn = program.function(site.function) if program is not None else None
    where = f"the macro around the launch in `{site.function}` declares `{arg}`"
    if found is None and fn is not None and arg in template_param_names_of(fn[0]):
        idx = template_param_names_of(fn[0]).index(arg)
        for call in program.calls(site.function):
            passed = call.template_args[idx].strip() if idx < len(call.template_args) else ""
            found = declared(call.caller).get(passed) if call.caller and passed.isidentifier() else None
            if found is not None:
                where = (f"`{arg}` of `{site.function}` is `{passed}` where `{call.caller}` calls it, which the "
                         f"macro around that call declares")
                break
    if found is None:
        return None
    chosen, types = found
    offers = " or ".join(types)
    notes.append(f"template parameter `{arg}`: {where} as {offers}: took {chosen}"
                 + ("" if chosen == types[0] or len(types) == 1 else " (float, one of its cases)")
                 + (" (it offers no float)" if chosen == types[0] and len(types) > 1 else ""))
    return chosen


CALLERS_CHOICE = "the first of the values its callers give"   # one case of several, not evidence


def expert_count_case(values: list[str], *names: str) -> str | None:
    """Of the numbers several calls give a template parameter named for a MoE's experts, or given
    by the `case`s of a `switch` on such a name (`NUM_EXPERTS`, one `case` each of a launcher's
    `switch (num_experts)`), the one nearest
    MOE_EXPERTS (by ratio) — the first, one expert, routes nothing; None for other parameters."""
    numbers = [int(v) for v in values if v.strip().isdigit() and int(v) > 0]
    if not numbers or not any("expert" in n.lower() for n in names):
        return None
    best = min(numbers, key=lambda v: abs(math.log(v / MOE_EXPERTS)))
    return next(v for v in values if v.strip().isdigit() and int(v) == best)


def _launcher_constant(spelled: str, site: LaunchSite | None, program, constants: dict[str, str], notes: list[str],
                       name: str, known: frozenset[str], types, taken: dict[str, str] | None = None) -> str | None:
    """A launch's value argument written over the launcher's compile-time locals (`VPT`, a
    `static constexpr int VPT = Constants::VPT;` of a traits class over the launcher's template
    parameters), evaluated with those parameters bound as `_launcher_param` binds them — all from
    the one call it chooses, so the numbers are those of one instance the program makes (a guessed
    1 beside 256 experts named no instance, and failed the kernel's static_asserts); a parameter no
    call binds, as the launch's other arguments took it (`taken`: the launch's spelling -> the
    argument). None where something it names is not known at compile time here."""
    fn = program.function(site.function) if site is not None and site.function and program is not None else None
    if fn is None or types is None:
        return None
    from .class_numbers import compile_time_value
    bound = {}
    for p in template_param_names_of(fn[0]):
        value = _launcher_param(site.function, fn[0], p, program, constants, [], p, known, types) \
            or (taken or {}).get(p)
        if value is not None:
            bound[p] = value
    value = compile_time_value(fn[0], spelled, bound, types, constants)
    if value is None:
        return None
    shown = ", ".join(f"{k} = {v}" for k, v in bound.items())
    notes.append(f"template parameter `{name}`: `{spelled}` of `{site.function}` is {value}, its compile-time "
                 f"value" + (f" with {shown}" if shown else ""))
    return str(value)


def _call_arg(call, idx: int, program, known: frozenset[str], constants: dict[str, str], types) -> str | None:
    """What one call passes for the launcher's template parameter `idx`, as the spec can name it:
    a compile-time local of the caller evaluated (sgl-kernel's `static constexpr int WARPS_PER_TB
    = 4;` handed on through `LAUNCH_SOFTMAX(T, 256, WARPS_PER_TB)`), the caller's own template
    parameters left unbound."""
    if idx >= len(call.template_args):
        return None
    passed = call.template_args[idx].strip()
    given = usable_arg(passed, known, constants)
    if given is not None or types is None or not call.caller or program is None:
        return given
    found = program.function(call.caller)
    if found is None:
        return None
    from .class_numbers import compile_time_value
    value = compile_time_value(found[0], passed, {}, types, constants)
    return str(value) if value is not None else None


def _expert_call(function: str, fn, program, known: frozenset[str], constants: dict[str, str], types):
    """The call a MoE's expert count chooses (`expert_count_case`), or None: of calls standing in
    the `case`s of a `switch` on an expert count, the case nearest a real model's; else the call
    giving a parameter named for experts the value nearest. Every parameter of the launcher is
    taken from that one call, so that the arguments are one instance's (the 256-expert case's
    warps, not the first case's, nor the warps nearest 256)."""
    calls = program.calls(function)
    cased = [c for c in calls if c.case]
    if cased:
        experts = expert_count_case([c.case[1] for c in cased], *(c.case[0] for c in cased))
        if experts is not None:
            return next(c for c in cased if c.case[1] == experts)
    for idx, param in enumerate(template_param_names_of(fn)):
        given = [(g, c) for c in calls if (g := _call_arg(c, idx, program, known, constants, types)) is not None]
        experts = expert_count_case([g for g, _ in given], param)
        if experts is not None:
            return given[[g for g, _ in given].index(experts)][1]
    return None


def _launcher_param(function: str, fn, param: str, program, constants: dict[str, str], notes: list[str],
                    name: str, known: frozenset[str], types=None) -> str | None:
    """What the launching function's template parameter `param` is bound to: by its explicit
    instantiations (written or deduced from their parameter types), its callers, its default. Of
    several calls, the one a MoE's expert count chooses (for this parameter or another: the
    arguments of one call, one instance), else the first."""
    idx = template_param_names_of(fn).index(param)
    for inst in program.instantiations(function):
        given = usable_arg(inst[idx], known, constants) if idx < len(inst) else None
        if given is not None:
            notes.append(f"template parameter `{name}`: `{param}` of `{function}` from its explicit "
                         f"instantiation `{function}<{', '.join(inst)}>`")
            return given
    calls = [(given, call) for call in program.calls(function)
             if (given := _call_arg(call, idx, program, known, constants, types)) is not None]
    if calls:
        given, call = calls[0]
        with_experts = False
        # the parameter that is the expert count itself (by its name or the kernel's)
        experts = expert_count_case([g for g, _ in calls], name, param)
        same = _expert_call(function, fn, program, known, constants, types) \
            if experts is None and len({g for g, _ in calls}) > 1 else None   # (one value: no choice to make)
        if experts is not None:
            given, call = calls[[g for g, _ in calls].index(experts)]
        elif same is not None and same in [c for _, c in calls]:
            given, call = calls[[c for _, c in calls].index(same)]
            # the value the switch's case gives is a MoE's expert count; another's, that call's
            experts = given if same.case and given == same.case[1] else None
            with_experts = experts is None
        others = list(dict.fromkeys(g for g, _ in calls if g != given))
        notes.append(f"template parameter `{name}`: `{param}` of `{function}` as "
                     f"`{call.caller or 'its caller'}` calls it (`{function}<{', '.join(call.template_args)}>`)"
                     + (f" — a MoE's expert count: of the values its callers give, the one nearest {MOE_EXPERTS}, "
                        f"the routed experts of DeepSeek-V3: {', '.join(others)} too" if experts is not None and others
                        else f" — the call whose expert count was chosen: {', '.join(others)} too" if with_experts and others
                        else " — the call whose expert count was chosen" if with_experts
                        else f" — {CALLERS_CHOICE}: {', '.join(others)} too" if others else ""))
        return given
    for model in program.models:
        deduced = _deduced(fn, param, function, model.text)
        given = usable_arg(deduced, known, constants) if deduced is not None else None
        if given is not None:
            notes.append(f"template parameter `{name}`: `{param}` of `{function}` is `{given}` in its first "
                         f"explicit instantiation")
            return given
    default = template_param_defaults(fn).get(param)
    given = usable_arg(default, known, constants) if default is not None else None
    if given is not None:
        notes.append(f"template parameter `{name}`: `{param}` of `{function}`, its default `{default}`")
    return given


def _param_types(node) -> list[str]:
    """The base type of each parameter of the first function declarator under `node`."""
    decl = next((n for n in _walk(node) if n.type == "function_declarator"), None)
    params = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in (params.named_children if params is not None else []):
        t = p.child_by_field_name("type")
        out.append(" ".join(t.text.decode().split()) if t is not None else "")
    return out


def _deduced(fn, param: str, function: str, text: str) -> str | None:
    """`param` as the first explicit instantiation without template arguments fixes it by its
    parameter types: `template void invoke(float* out, ...);` makes `T* out`'s T float."""
    if function.split("::")[-1] + "(" not in text.replace(" (", "("):
        return None
    mine = _param_types(fn)
    if param not in mine:
        return None
    root = source.parser().parse(text.encode("utf-8")).root_node
    for n in (n for n in _walk(root) if n.type == "template_instantiation"):   # in namespaces too
        decl = next((d for d in _walk(n) if d.type == "function_declarator"), None)
        head = decl.child_by_field_name("declarator") if decl is not None else None
        if head is None or head.type != "identifier" or head.text.decode() != function.split("::")[-1]:
            continue
        theirs = _param_types(n)
        if len(theirs) == len(mine):
            return theirs[mine.index(param)] or None
    return None


def _local_alias(fn, name: str) -> str | None:
    """What a type alias declared in the function's body stands for (`using` or `typedef`)."""
    for n in _walk(fn):
        if n.type == "alias_declaration" and n.child_by_field_name("name") is not None \
                and n.child_by_field_name("name").text.decode() == name:
            t = n.child_by_field_name("type")
            return " ".join(re.sub(r"\btypename\s+", "", t.text.decode()).split()) if t is not None else None
        if n.type == "type_definition" and any(d.text.decode() == name for d in n.children_by_field_name("declarator")):
            t = n.child_by_field_name("type")
            return " ".join(re.sub(r"\btypename\s+", "", t.text.decode()).split()) if t is not None else None
    return None


_INDEX_WORDS = ("indices", "index", "idx", "ids", "offsets", "positions", "indptr")


def _fallback_arg(param: str, name: str, kernel: Kernel, program, bound: dict[str, str], notes: list[str],
                  items=(), qualified: dict[str, str] | None = None) -> str:
    """No launch, instantiation or default gives this template parameter: a type becomes float,
    a device function the first device function of the file that fits, a bool `false`, an
    enumeration its first enumerator, an integer 1 — each a guess the notes name."""
    head = param.split("=", 1)[0].strip()
    # the file's own items first, then its project headers'
    everything = [*(program.model.items if program is not None else ()), *items]
    enumerator = _first_enumerator(head.rsplit(None, 1)[0] if len(head.split()) > 1 else "", everything,
                                   qualified or {})
    if enumerator is not None:
        notes.append(f"template parameter `{name}`: no launch gives it; took `{enumerator}`, the first enumerator")
        return enumerator
    if head.split()[0] in ("typename", "class"):
        # the type of index arrays (`IdType* batch_indices`) is an integer type
        if name.lower().startswith(("id", "idx", "index", "int")) or any(
                p.base_type == name and any(w in p.name.lower() for w in _INDEX_WORDS) for p in kernel.params):
            notes.append(f"template parameter `{name}`: no launch gives it; took int32 (it types indices)")
            return "int32_t"
        special = _specialized_type(name, kernel, [*(program.model.items if program is not None else ()), *items])
        if special is not None:
            traits, chosen, offered = special
            notes.append(f"template parameter `{name}`: no launch gives it; took {chosen}: `{traits}<{name}>` is "
                         f"defined only for {', '.join(offered)} (float would not compile)")
            return chosen
        used = class_use(name, kernel)
        if used is not None:
            # the project's own class that has every member the kernel names through it
            fit = project_class_for(name, kernel, everything)
            if fit is not None:
                notes.append(fit[1])
                return fit[0]
            notes.append(f"{CANNOT}template parameter `{name}`: no launch gives it, and it is a class the kernel "
                         f"reads members of (`{used}`), which no float stands for; no caller or instantiation in the "
                         f"project's C++ gives it, nor does a class of the project have every member it reads "
                         f"(its caller chooses it: a JIT template, a registry, another project) — write "
                         f"`instantiate` by hand")
            return DISPATCH_TYPE
        notes.append(f"template parameter `{name}`: no launch gives it; took {DISPATCH_TYPE}")
        return DISPATCH_TYPE
    if "(" in head and "*" in head:   # a function pointer: `T (*ACT)(const T&)`
        fn = device_function_for(head, bound, next(iter(bound.values()), DISPATCH_TYPE), everything)
        if fn is not None:
            notes.append(f"template parameter `{name}`: no launch gives it; took the device function `{fn}`, "
                         f"the first of the project's of its type")
            return fn
        notes.append(f"{CANNOT}template parameter `{name}`: no launch gives it, and it is a device function "
                     f"`{' '.join(head.split())}` that no file of the project read here defines with that type "
                     f"(its caller supplies it: a JIT template, another project) — define one and name it in "
                     f"`instantiate`")
        return "1"
    if head.split()[0] == "bool":
        notes.append(f"template parameter `{name}`: no launch gives it; took false")
        return "false"
    notes.append(f"template parameter `{name}`: no launch gives it; took 1")
    return "1"


def class_use(name: str, kernel: Kernel) -> str | None:
    """How the kernel uses the type `name` as a class, where it does: a member named through it
    (`Params::DTypeQ`, `KT::kernel(...)`) or read from a parameter of that type passed by value
    (`params.q`) or a local of it; None where it does not (a plain element type, which float may stand for)."""
    root = source.parser().parse(kernel.text.encode()).root_node
    by_value = objects_of(name, kernel, root)   # a local of it too (`AttentionVariant variant(params, 0, smem)`)
    for n in _walk(root):
        if n.type == "qualified_identifier" or n.type == "nested_namespace_specifier":
            scope = n.child_by_field_name("scope")
            if scope is not None and scope.text.decode().split("<")[0].strip() == name:
                return " ".join(n.text.decode().split())[:60]
        if n.type == "field_expression" and (arg := n.child_by_field_name("argument")) is not None \
                and arg.type == "identifier" and arg.text.decode() in by_value:
            return " ".join(n.text.decode().split())[:60]
    return None


def _specialized_type(name: str, kernel: Kernel, items) -> tuple[str, str, list[str]] | None:
    """(traits, type, the types it offers) where the kernel uses `Traits<name>` and `Traits` is only
    declared, defined for explicit specializations that exclude float (FlashInfer's
    `ConcatMLAVecTraits<nv_half>`, `<nv_bfloat16>`, fp8): the first of them Astra has a dtype for."""
    root = source.parser().parse(kernel.text.encode()).root_node
    used = [n.child_by_field_name("name").text.decode().split("::")[-1] for n in _walk(root)
            if n.type == "template_type" and n.child_by_field_name("name") is not None
            and n.child_by_field_name("arguments") is not None
            and n.child_by_field_name("arguments").text.decode().replace(" ", "") == f"<{name}>"]
    for traits in dict.fromkeys(used):
        primary = [it for it in items if it.kind == "type" and it.defines == frozenset({traits})]
        offered = list(dict.fromkeys(d[len(traits) + 1:-1].strip() for it in items if it.kind == "type"
                                     for d in it.defines if d.startswith(traits + "<") and d.endswith(">")))
        if not primary or any("{" in it.text for it in primary) or not offered:
            continue
        known = [t for t in offered if dtypes.from_cpp(t) is not None]
        if known and not any(dtypes.from_cpp(t).name == "float" for t in known):
            return traits, known[0], offered
    return None


def _first_enumerator(type_name: str, items, qualified: dict[str, str]) -> str | None:
    """`ns::Enum::first` for a non-type template parameter whose type is an enumeration of the
    program (a scoped enumeration takes no integer: `1` would not compile)."""
    short = type_name.replace("const ", "").strip().split("::")[-1]
    if not short.isidentifier():
        return None
    for item in items:
        if item.kind != "type" or short not in item.defines or "enum" not in item.text:
            continue
        root = source.parser().parse(item.text.encode()).root_node
        for spec in (n for n in _walk(root) if n.type == "enum_specifier"):
            name, body = spec.child_by_field_name("name"), spec.child_by_field_name("body")
            first = next((e.child_by_field_name("name") for e in (body.named_children if body else ())
                          if e.type == "enumerator"), None)
            if name is not None and name.text.decode() == short and first is not None:
                return f"{qualified.get(short, short)}::{first.text.decode()}"
    return None
