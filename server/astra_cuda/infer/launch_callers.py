"""Which launch site is read and what the launcher's callers pass: the site picked among several,
a launcher parameter every caller passes as another, values followed up through callers, a
value zero at every call, and the ranges a program fills an input with. Separate because it
reads the program around the launcher, not the launch itself."""
from __future__ import annotations

from ..model import dtypes, exprs, source
from ..model.source import Kernel, LaunchSite, SourceModel
from ..model.syntax import walk as _walk
from . import hostcalls
from .hostexprs import HostExprs
from .program import Program, param_names
from .template_names import split, template_param_names_of
from .launch_conditions import admitted_share, helper_ranges, unaligned_tests
from .launch_locals import BLOCK_DEFAULT, host_functions, host_locals
from .sizes import usual_flag


def same_at_callers(program: Program, function: str | None) -> dict[str, str]:
    """Parameter -> an earlier parameter of `function` that every call of it passes the same
    argument as (apex's `dispatch_…(dst, src, scale, seq_len, seq_len, attn_batches)`)."""
    found = program.function(function) if function is not None else None
    calls = program.calls_beside(function) if found is not None else []
    if found is None or not calls:
        return {}
    params = param_names(found[0])
    out: dict[str, str] = {}
    for j, b in enumerate(params):
        for i, a in enumerate(params[:j]):
            if a and b and a not in out and all(len(c.args) > j and " ".join(c.args[i].split()) == " ".join(
                    c.args[j].split()) for c in calls):
                out[b] = a
                break
    return out


def launcher_params(model: SourceModel, function: str | None) -> list[str]:
    """The parameter names of the host function `function` in `model` ([] when not found)."""
    if function is None:
        return []
    fn = next(iter(host_functions(model, function)), None)
    return param_names(fn) if fn is not None else []


def pick_site(kernel: Kernel, program: Program, constants: dict[str, str] | None = None
              ) -> tuple[LaunchSite, SourceModel] | tuple[None, None]:
    """The launch to read: in the kernel's own file first, one outside `main` first (a launcher
    function says what the kernel expects; `main` often loops over block sizes); of launches under
    branches over the sizes, the one that most of them reach (`admitted_share`: DeepSpeed's
    softmax `if (seq <= 8) … else if … else` chain sends a real model's sequence to its last
    launch, not its first), before the one with the smallest template arguments. Before the share, the
    launch its branches send aligned sizes (`unaligned_tests`: `hidden_dim % 16 == 0` picks the 16-wide
    instance, not the fallback every width reaches, as a model's widths are aligned)."""
    sites = program.launches(kernel.name)
    if not sites:
        return None, None
    # outside main first; among launches that differ in template arguments, the general one
    # (`<scalar_t, 1>` rather than the `<scalar_t, 8>` a launcher takes only for aligned widths;
    # `<scalar_t, false>` rather than the `use_vec = true` or `use_256b = true` it takes only for
    # aligned rows or a newer GPU: a switched-on feature counts one)
    trees: dict[int, object] = {}
    seen: dict[str, list[bool]] = {}   # a condition's verdicts, shared by the sites of one chain

    def rank(pair: tuple[LaunchSite, SourceModel]):
        s, m = pair
        args = [t.strip() for t in split(s.template_args or "<>")]
        numbers = [int(t) for t in args if t.isdigit()] + [1 for t in args if t == "true"]
        if id(m) not in trees:
            trees[id(m)] = source.parser().parse(m.text.encode("utf-8")).root_node
        case = _block_case(trees[id(m)], s)
        # of the cases a helper of the launcher's sizes picks (`switch (log2_ceil(n))`), the one the
        # most sizes reach (`case 0` takes n = 1 alone)
        mapping = {arg.strip(): p.name for p, arg in zip(kernel.params, s.args) if not p.is_pointer}
        reached = [max(0, min(hi, TESTED_SIZES) - lo + 1) for _, lo, hi, _ in helper_ranges(m, s, program, mapping)]
        # a launch under `switch (threads) case 256:` is the one for the block it takes by default
        return (program.original(m) is not program.model, s.function == "main", case is not None and case != BLOCK_DEFAULT,
                hostcalls.LIMIT - min(reached) if reached else 0,
                unaligned_tests(m, s, constants or {}) if len(sites) > 1 else 0,
                -admitted_share(m, s, program, constants or {}, seen) if len(sites) > 1 else 0.0, sum(numbers))
    return min(sites, key=rank)


def identifiers(node) -> set[str]:
    return {n.text.decode() for n in _walk(node) if n.type == "identifier"} if node is not None else set()


def _block_case(root, site: LaunchSite) -> int | None:
    """V where the launch stands in `case V:` of a `switch` over a name its block is sized by
    (cuda-samples' `switch (threads) { case 512: reduce6<T, 512, false><<<grid, dimBlock>>>`)."""
    node = root.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    parts = [site.block, *(site.block_var.dims or ())] if site.block_var is not None else [site.block]
    block_names = {n for x in parts for n in identifiers(source.parse_expression(x))}
    while node is not None:
        if node.type == "case_statement":
            value = node.child_by_field_name("value")
            switch = node.parent.parent if node.parent is not None else None
            cond = switch.child_by_field_name("condition") if switch is not None else None
            if value is None or switch is None or switch.type != "switch_statement" or cond is None:
                return None
            subject = identifiers(cond)
            digits = value.text.decode().rstrip("uUlL")
            return int(digits) if digits.isdigit() and subject & block_names else None
        node = node.parent
    return None


MAX_CALLER_DEPTH = 3   # callers followed up from a launcher for the value of one of its parameters
TESTED_SIZES = 4096    # sizes up to this are what tests draw: a case reached only above it is barely testable


def value_of(expr: str, values: dict[str, str]) -> int | None:
    """A host expression's integer value over constants and locals (name -> expression), or None."""
    spec_expr = HostExprs({}, values).spec(expr)
    if spec_expr is None:
        return None
    try:
        return exprs.evaluate_int(spec_expr, {})
    except exprs.ExprError:
        return None


def caller_values(program: Program, function: str | None, expr: str, constants: dict[str, str],
                  depth: int = 0) -> list[tuple[int, str]]:
    """(value, where) for a host expression of `function` that its callers fix: a literal, a
    local of the function, or one of its parameters followed to the calls of the function
    (`runTest<float>(argc, argv, 32)`, `int block_size = 32; MatrixMultiply(..., block_size, ...)`)."""
    if function is None or depth > MAX_CALLER_DEPTH:
        return []
    found = program.function(function)
    if found is None:
        return []
    fn, model = found
    values = {**constants, **host_locals(model, function)}
    v = value_of(expr, values)
    if v is not None:
        return [(v, function)]
    params = param_names(fn)
    if expr.strip() not in params:
        return []
    idx = params.index(expr.strip())
    out: list[tuple[int, str]] = []
    for call in program.calls(function):
        if idx < len(call.args):
            out += caller_values(program, call.caller, call.args[idx], constants, depth + 1)
    return list(dict.fromkeys(out))


def fixed_at_every_call(program: Program, function: str | None, expr: str, constants: dict[str, str],
                        depth: int = 0) -> int | None:
    """The value a host expression of `function` has however the program reaches it: a literal or a
    local, or a parameter every call of the function fixes to one same value in turn; None where a
    call leaves it open (passes a parameter no call above fixes) or calls disagree."""
    found = program.function(function) if function is not None and depth <= MAX_CALLER_DEPTH else None
    if found is None:
        return None
    fn, model = found
    v = value_of(expr, {**constants, **host_locals(model, function)})
    params = param_names(fn)
    if v is not None or expr.strip() not in params:
        return v
    idx = params.index(expr.strip())
    got = {fixed_at_every_call(program, c.caller, c.args[idx], constants, depth + 1) if idx < len(c.args) else None
           for c in program.calls(function)}   # type: ignore[arg-type]
    return next(iter(got)) if len(got) == 1 else None


def scalar_value(program: Program, site: LaunchSite | None, kernel: Kernel, name: str, dt: dtypes.DType,
                 given: str | None, guess: str, constants: dict[str, str]) -> tuple[str, str]:
    """A number parameter's spec value and its note: as the launch passes it (`given`, `true` and
    `false` among them); a `bool` the launch hands on as every call above fixes it; one nothing here
    fixes whose name says its usual value (`sizes.usual_flag`: TransformerEngine's rope `interleaved`,
    handed down from its C API and false by default in its Python API); else the name's guess."""
    at = next((i for i, p in enumerate(kernel.params) if p.name == name), -1)
    fixed = fixed_at_every_call(program, site.function, site.args[at], constants) \
        if given is None and dt.name == "bool" and site is not None and 0 <= at < len(site.args) else None
    usual = usual_flag(name) if dt.name == "bool" else None
    if given is None and fixed in (0, 1):
        return str(fixed), f"`{name}` = {fixed}, as every call of the launcher fixes it"
    if given is None and usual is not None:
        return str(usual[0]), f"`{name}` = {usual[0]}: {usual[1]} — CHECK the value the program passes"
    value = given if given is not None else guess
    return (value if dt.is_float else str(int(float(value))),
            f"`{name}` = {value}, as the launch passes it" if given is not None else f"`{name}` = {value} is a guess")


def _uncast(node):
    """The value under casts (`static_cast<int>(t.size(-1))`, `(int)t.size(0)`) and parentheses."""
    while node is not None:
        if node.type == "parenthesized_expression" and node.named_children:
            node = node.named_children[0]
        elif node.type == "cast_expression":
            node = node.child_by_field_name("value")
        elif node.type == "call_expression" and (fn := node.child_by_field_name("function")) is not None \
                and fn.type == "template_function" and fn.child_by_field_name("name") is not None \
                and fn.child_by_field_name("name").text.decode() == "static_cast":
            args = node.child_by_field_name("arguments")
            node = args.named_children[0] if args is not None and len(args.named_children) == 1 else None
        else:
            return node
    return None


def _extent_call(text: str):
    """`query.size(2)`'s call node, under any casts; else None."""
    e = _uncast(source.parse_expression(text)) if text else None
    return e if e is not None and e.type == "call_expression" else None


def extent_read(text: str) -> bool:
    """`query.size(2)`: an extent of an object the caller passes, read with numbers only — a size the
    caller chooses, which the `case 32:` of a `switch` on it fixes (vLLM's paged attention launcher
    `switch (head_size)`), not one the launcher computes from other sizes."""
    e = _extent_call(text)
    fn = e.child_by_field_name("function") if e is not None else None
    obj = fn.child_by_field_name("argument") if fn is not None and fn.type == "field_expression" else None
    args = e.child_by_field_name("arguments") if e is not None else None
    return obj is not None and obj.type == "identifier" and args is not None and all(
        a.type == "number_literal" or a.type == "unary_expression" and a.text.decode().lstrip("-").isdigit()
        for a in args.named_children)


def extent_object(text: str) -> str:
    """The object an extent read is of (`topk_weights` of `topk_weights.size(-1)`); "" for another text."""
    e = _extent_call(text) if extent_read(text) else None
    fn = e.child_by_field_name("function") if e is not None else None
    obj = fn.child_by_field_name("argument") if fn is not None else None
    return obj.text.decode() if obj is not None else ""


def extent_dim(text: str) -> int | None:
    """The dimension an extent read names (3 of `input.size(3)`, -1 of `t.size(-1)`); None for another
    text, a stride's read (`input.stride(3)`: 1 where contiguous, no extent) among them."""
    e = _extent_call(text) if extent_read(text) else None
    fn = e.child_by_field_name("function") if e is not None else None
    field = fn.child_by_field_name("field") if fn is not None else None
    if field is None or field.text.decode() != "size":
        return None
    args = e.child_by_field_name("arguments").named_children if e is not None else []
    try:
        return int(args[0].text.decode().replace(" ", "")) if len(args) == 1 else None
    except ValueError:
        return None


def later_dim(text: str) -> bool:
    """`t.size(1)`, `t.size(-1)`: an extent read of one dimension past the first — not `t.numel()`
    (every entry) nor `t.size(0)` (the rows: a router's tokens, not its top-k)."""
    e = _extent_call(text) if extent_read(text) else None
    args = e.child_by_field_name("arguments").named_children if e is not None else []
    return len(args) == 1 and args[0].text.decode().strip() not in ("0", "-0")


def extent_chain(program: Program, function: str | None, expr: str, constants: dict[str, str],
                 depth: int = 0) -> tuple[str, list[str]] | None:
    """(`t.size(d)`, the names it went by) where a host expression of `function` is a parameter that
    every call of the function hands the same extent of a caller's tensor, read there or handed
    down in turn (`topk` of a launcher, passed `topk` by its dispatcher, whose caller sets
    `const int topk = topk_weights.size(-1)`); None where any call passes something else."""
    # the callers in a header's translation unit too (`calls_beside`): apex's header launcher is
    # called by the .cu that includes it, where the extents are read
    found = program.function_beside(function) if function is not None and depth <= MAX_CALLER_DEPTH else None
    if found is None:
        return None
    fn, model = found
    name = expr.strip()
    text = host_locals(model, function).get(name, name)
    if depth > 0 and extent_read(text):
        return text, [name]
    params = param_names(fn)
    calls = program.calls_beside(function) if name in params else []   # type: ignore[arg-type]
    idx = params.index(name) if calls else 0
    ups = [extent_chain(program, c.caller, c.args[idx], constants, depth + 1) if idx < len(c.args) else None
           for c in calls]
    if not ups or any(u is None for u in ups) or len({u[0] for u in ups if u is not None}) != 1:
        return None
    first = ups[0]
    assert first is not None
    return first[0], [name, *dict.fromkeys(n for u in ups if u is not None for n in u[1])]


def case_template_param(program: Program, function: str | None, param: str) -> tuple[str, str] | None:
    """The template parameter of `function` that its parameter `param` always equals: every call
    stands in `case V:` of a `switch` over what it passes for `param` and gives V as that template
    argument (sgl-kernel's `switch (num_experts) { case 256: LAUNCH_SOFTMAX(T, 256, 4); …` hands its
    helper `num_experts` and `<T, 256, …>` alike): (its name, what the switch is on); None where any
    call says otherwise."""
    found = program.function(function) if function is not None else None
    params = param_names(found[0]) if found is not None else []
    calls = program.calls(function) if found is not None and param in params else []   # type: ignore[arg-type]
    if found is None or not calls:
        return None
    idx, names = params.index(param), template_param_names_of(found[0])
    common: set[int] | None = None
    for c in calls:
        if c.case is None or idx >= len(c.args) or " ".join(c.args[idx].split()) != c.case[0]:
            return None
        at = {i for i, t in enumerate(c.template_args) if t.strip() == c.case[1]}
        common = at if common is None else common & at
    picked = sorted(common or ())
    return (names[picked[0]], calls[0].case[0]) if picked and picked[0] < len(names) and calls[0].case else None


def zero_at_every_call(program: Program, function: str | None, expr: str, constants: dict[str, str],
                       depth: int = 0) -> bool:
    """Whether a host expression of `function` is 0 however the program reaches it: a literal or
    local 0, or a parameter every call of the function passes 0 for (sgl-kernel's
    `LAUNCH_SOFTMAX` hands its helper `0` as `start_expert` in every case of its switch)."""
    found = program.function(function) if function is not None and depth <= MAX_CALLER_DEPTH else None
    if found is None:
        return False
    fn, model = found
    v = value_of(expr, {**constants, **host_locals(model, function)})
    if v is not None:
        return v == 0
    params = param_names(fn)
    if expr.strip() not in params:
        return False
    idx = params.index(expr.strip())
    calls = program.calls(function)   # type: ignore[arg-type]
    return bool(calls) and all(idx < len(c.args) and zero_at_every_call(program, c.caller, c.args[idx], constants,
                                                                        depth + 1) for c in calls)


def program_inits(kernel: Kernel, model: SourceModel, site: LaunchSite) -> dict[str, tuple[str, str]]:
    """Parameter -> (low, high) where the program fills the host array it copies to the launch's
    argument with a random draw in a range (`h_S[i] = RandFloat(5.0f, 30.0f); cudaMemcpy(d_S, h_S, ..)`):
    the values the kernel expects (BlackScholes' prices and years are positive; a normal draw gives NaN)."""
    def bare(n):
        while n is not None and n.type in ("cast_expression", "parenthesized_expression", "pointer_expression"):
            n = n.child_by_field_name("value") or n.child_by_field_name("argument") or \
                (n.named_children[-1] if n.named_children else None)
        return n.text.decode() if n is not None and n.type == "identifier" else None
    root = source.parser().parse(model.text.encode()).root_node
    hosts: dict[str, str] = {}    # device array -> the host array copied into it
    ranges: dict[str, tuple[str, str]] = {}
    for n in _walk(root):
        if n.type == "call_expression":
            fn, args = n.child_by_field_name("function"), n.child_by_field_name("arguments")
            a = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            if fn is not None and "Memcpy" in fn.text.decode() and len(a) >= 2 and bare(a[0]) and bare(a[1]):
                hosts[bare(a[0])] = bare(a[1])
        elif n.type == "assignment_expression":
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or right is None or left.type != "subscript_expression" or right.type != "call_expression":
                continue
            fn, args = right.child_by_field_name("function"), right.child_by_field_name("arguments")
            a = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            nums = [c.text.decode().rstrip("fF") for c in a if c.type == "number_literal"]
            name = bare(left.child_by_field_name("argument"))
            if name and fn is not None and "rand" in fn.text.decode().lower() and len(a) == 2 and len(nums) == 2:
                ranges.setdefault(name, (nums[0], nums[1]))
    out = {}
    for p, arg in zip(kernel.params, site.args):
        device = bare(source.parse_expression(arg.strip()))
        host = hosts.get(device or "")
        if p.is_pointer and host in ranges:
            out[p.name] = ranges[host]
    return out
