"""The launcher's locals as the launch sees them: each local's value along the launch's path (a
change an `#if` rules out, or in another branch, ignored; an enclosing `if (bs == 16)` or `case`
fixing a name), device limits read as their numbers, the launch's byte offset. Separate because
the launch, its checks and the callers' values all read the locals this way."""
from __future__ import annotations

import re

from ..model import exprs, source
from ..model import dim3
from ..model import syntax
from ..model.source import LaunchSite, SourceModel
from ..model.syntax import walk as _walk
from tree_sitter import Node
from .hostexprs import HostExprs
from .program import function_nodes, param_names
from .launch_paths import auto_zero_params, path_locals


BLOCK_DEFAULT = 256
RUNTIME = "<runtime>"       # a host local set through its address by a call (a device query)
_DEVICE_QUERIES = ("Properties", "maxGridSize", "multiProcessorCount", "maxThreadsPerBlock", "sharedMemPerBlock",
                   "getDevice", "num_sms", "sm_count")


def host_functions(model: SourceModel, function: str) -> list[Node]:
    """The definitions of the host function `function` (by its last name) in `model`, in order."""
    short = function.split("::")[-1]
    return [n for n in function_nodes(model.text) if (syntax.declarator_name(
        syntax.function_declarator(n.child_by_field_name("declarator")))[0] or "").split("::")[-1] == short]


def declared_names(model: SourceModel, function: str | None) -> set[str]:
    """Every name the host function declares (locals and parameters)."""
    if function is None:
        return set()
    fn = next(iter(host_functions(model, function)), None)
    if fn is None:
        return set()
    out = {syntax.declarator_name(d)[0] for n in _walk(fn) if n.type == "declaration"
           for d in n.children_by_field_name("declarator")}
    return {n for n in out if n} - set(param_names(fn))


def constexpr_names(model: SourceModel, function: str | None) -> set[str]:
    """The locals the host function declares `constexpr`: compile-time choices (`constexpr int
    tile_size = 512`), never a size of the problem."""
    if function is None:
        return set()
    fn = next(iter(host_functions(model, function)), None)
    if fn is None:
        return set()
    return {name for n in _walk(fn) if n.type == "declaration"
            and any(c.type == "type_qualifier" and c.text.decode() == "constexpr" for c in n.children)
            for d in n.children_by_field_name("declarator") if (name := syntax.declarator_name(d)[0])}


def compile_time_names(model: SourceModel, function: str | None, constants: dict[str, str]) -> set[str]:
    """The host function's locals fixed at compile time: `constexpr` ones, and `const` ones whose
    initialiser names only template parameters, constants and such locals (sgl-kernel's
    `ROWS_PER_WARP = Constants::ROWS_PER_WARP` of its `TopkConstants<T, EXPERTS, ...>`). Each is
    one number of the instance, never a size of the problem, even where the spec cannot read it."""
    from .template_names import template_param_names_of
    fn = next(iter(host_functions(model, function)), None) if function else None
    if fn is None:
        return set()
    fixed = constexpr_names(model, function)
    known = fixed | set(template_param_names_of(fn)) | set(constants)
    consts = []
    for n in _walk(fn):
        if n.type == "declaration" and any(c.type == "type_qualifier" and c.text.decode() == "const"
                                           for c in n.children):
            for d in n.children_by_field_name("declarator"):
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                name = syntax.declarator_name(d)[0]
                if name and value is not None and any(c.type in ("identifier", "qualified_identifier")
                                                      for c in _walk(value)):
                    # `C::ROWS_PER_WARP`: a member of a type or namespace is compile-time too. A
                    # const of numbers alone (main's `const int num_tokens = 16`) is the program's
                    # own size, kept as one
                    consts.append((name, {c.text.decode() for c in _walk(value) if c.type == "identifier"
                                          and (c.parent is None or c.parent.type != "qualified_identifier")}))
    grew = True
    while grew:   # `const int b = a * 2` after `const int a = TILE`: fixed in turn
        grew = False
        for name, used in consts:
            if name not in fixed and used <= known | fixed:
                fixed.add(name)
                grew = True
    return fixed


def site_locals(model: SourceModel, site: LaunchSite, macros: dict[str, str] | None = None) -> dict[str, str]:
    local = host_locals(model, site.function, launch_byte(model, site), macros)
    # a guard fixes a name the caller chooses (`if (block_size == 16)`), not one the launcher
    # computes from the sizes (`if (unroll == 1)`, unroll = cdiv(width, step)): that one stays an
    # expression, and the guard a condition on the sizes (`branch_conditions`)
    # ... unless the spec cannot write what it is computed with (`log2_ceil(n)`, a helper of the
    # project): inside `case 12:` of `switch (log2_elements)` the launch sees 12, and the sizes that
    # reach that case are required (`helper_ranges`)
    computed = {k for k, v in local.items() if (e := source.parse_expression(v)) is not None
                and e.type != "number_literal" and HostExprs({}, macros or {}).spec(v, []) is not None}
    # a local set more than once, where the `if`s that set it are decided along the launch's path
    # (`x_thread = 8` under `if (thx == 0 && thy == 0)`, the caller's 0 asking the launcher to choose)
    local = {**path_values(model, site), **local}
    return {**local, **{k: v for k, v in fixed_by_branches(model, site).items() if k not in computed}}


def _launcher_and_call(model: SourceModel, site: LaunchSite) -> tuple[Node | None, Node | None]:
    at = launch_byte(model, site)
    fn = next((n for n in host_functions(model, site.function) if n.start_byte <= at < n.end_byte), None) \
        if site.function else None
    return fn, (fn.descendant_for_byte_range(at, at) if fn is not None else None)


def auto_zero(model: SourceModel, site: LaunchSite) -> list[str]:
    """The launcher's parameters read as 0, the value that asks it to choose the launch itself."""
    fn, _ = _launcher_and_call(model, site)
    return auto_zero_params(fn) if fn is not None else []


def path_values(model: SourceModel, site: LaunchSite) -> dict[str, str]:
    """The launcher's locals set more than once, as the launch sees them (`launch_paths`)."""
    fn, call = _launcher_and_call(model, site)
    if fn is None or call is None:
        return {}
    return path_locals(fn, call, {p: 0 for p in auto_zero_params(fn)})


def ruled_out_by_default(model: SourceModel, site: LaunchSite) -> dict[str, set[int]]:
    """Names the `default:` of an enclosing `switch` on them keeps from the values its cases take
    (vLLM's top-k launcher reaches its generic kernel only for an expert count no `case` takes)."""
    tree = source.parser().parse(model.text.encode()).root_node
    node = tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    out: dict[str, set[int]] = {}
    while node is not None:
        parent = node.parent
        switch = parent.parent if parent is not None else None
        if node.type == "case_statement" and node.child_by_field_name("value") is None and switch is not None \
                and switch.type == "switch_statement":
            subject = switch.child_by_field_name("condition")
            while subject is not None and subject.type in ("condition_clause", "parenthesized_expression") \
                    and len(subject.named_children) == 1:
                subject = subject.named_children[0]
            values = [c.child_by_field_name("value") for c in parent.named_children if c.type == "case_statement"]
            if subject is not None and subject.type == "identifier":
                out.setdefault(subject.text.decode(), set()).update(
                    int(v.text.decode()) for v in values if v is not None and v.text.decode().isdigit())
        node = parent
    return out


def fixed_by_branches(model: SourceModel, site: LaunchSite) -> dict[str, str]:
    """Names an enclosing `if (block_size == 16)` fixes where the launch is written: inside that
    branch the launch is `k<16><<<..., dim3(block_size, block_size)>>>` with block_size 16."""
    tree = source.parser().parse(model.text.encode()).root_node
    node = tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    out: dict[str, str] = {}
    while node is not None:
        parent = node.parent
        if node.type == "case_statement" and parent is not None and parent.parent is not None \
                and parent.parent.type == "switch_statement":   # `case 12:` of `switch (log2_elements)`
            value, subject = node.child_by_field_name("value"), parent.parent.child_by_field_name("condition")
            while subject is not None and subject.type in ("condition_clause", "parenthesized_expression") \
                    and len(subject.named_children) == 1:
                subject = subject.named_children[0]
            if value is not None and value.type == "number_literal" and subject is not None \
                    and subject.type == "identifier":
                out.setdefault(subject.text.decode(), value.text.decode())
        if parent is not None and parent.type == "if_statement" and parent.child_by_field_name("consequence") == node:
            cond = parent.child_by_field_name("condition")
            while cond is not None and cond.type in ("condition_clause", "parenthesized_expression") \
                    and len(cond.named_children) == 1:
                cond = cond.named_children[0]
            op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
            if op is not None and op.type == "==":
                a, b = cond.child_by_field_name("left"), cond.child_by_field_name("right")
                if b.type == "identifier" and a.type == "number_literal":
                    a, b = b, a
                if a.type == "identifier" and b.type == "number_literal":
                    out.setdefault(a.text.decode(), b.text.decode())
        node = parent
    return out


# Device properties every CUDA GPU since compute capability 3.0 reports alike: read as the number,
# not as a run-time value (apex launches one block per row up to `maxGridSize[1]` rows; taken as
# RUNTIME_DEFAULT, its bench launch had 4 blocks and every rewrite that raised them looked like a win).
_FIXED_LIMITS = {("maxGridSize", "0"): "2147483647", ("maxGridSize", "1"): "65535", ("maxGridSize", "2"): "65535",
                 ("maxThreadsPerBlock", None): "1024", ("warpSize", None): "32"}


def _device_limit(value) -> str | None:
    """The number a device property that is the same on every GPU stands for
    (`props->maxGridSize[1]` -> '65535'), else None."""
    index = None
    if value.type == "subscript_expression":
        idx = value.child_by_field_name("indices") or value.child_by_field_name("index")
        nums = [c for c in (idx.named_children if idx is not None else []) if c.type == "number_literal"]
        if idx is None or (idx.type != "number_literal" and len(nums) != 1):
            return None
        index = (idx if idx.type == "number_literal" else nums[0]).text.decode()
        value = value.child_by_field_name("argument")
    if value is None or value.type != "field_expression":
        return None
    field_name = value.child_by_field_name("field")
    return _FIXED_LIMITS.get((field_name.text.decode(), index)) if field_name is not None else None


def launch_byte(model: SourceModel, site: LaunchSite) -> int:
    """Where the launch starts in the model's text. A launch inside a macro's argument (a lambda
    in vLLM's `VLLM_DISPATCH_…(…, [&] { … align_kernel<<<…>>>(…); })`) has its line right and the
    bytes of the function around it: its line's first character then."""
    text, at, line = model.text, site.span.start_byte, site.span.start_line
    if text.count("\n", 0, at) == line:
        return at
    start = 0
    for _ in range(line):
        start = text.find("\n", start) + 1
        if start == 0:
            return at
    return start + len(text[start:].split("\n", 1)[0]) - len(text[start:].split("\n", 1)[0].lstrip())


def host_locals(model: SourceModel, function: str | None, at: int | None = None,
                macros: dict[str, str] | None = None) -> dict[str, str]:
    """Plain local variables of a host function with one initialised declaration and no
    later assignment (`const int grid_size = ceil_div(N, block_size);`): name -> initializer.
    With `at` (a launch's byte offset), the function that holds it, and each name as the launch
    sees it: the declaration C++ name lookup finds there (`int threads = 32;` of its own branch,
    where another branch declares its own), unless a change reaches the launch. `macros`: what
    decides the function's own `#if`s (a change under `#if BNB_HIP` with BNB_HIP 0 is none)."""
    if function is None:
        return {}
    whole = _function_locals(model, function, None, macros)
    # over what the whole function says, what the launch's own scope says (a launch site read
    # from a rewritten launcher, cudaLaunchKernelEx's, may fall outside it: then the whole's)
    return whole if at is None else {**whole, **_function_locals(model, function, at, macros)}


def _dead_branches(fn, macros: dict[str, str] | None) -> list[tuple[int, int]]:
    """Byte ranges of the function's `#if` branches its macros rule out (each name in the
    condition a known number; `defined(X)` decided only by a known X)."""
    out: list[tuple[int, int]] = []
    for n in _walk(fn) if macros else ():
        if n.type not in ("preproc_if", "preproc_elif"):
            continue
        cond = n.child_by_field_name("condition")
        text = cond.text.decode() if cond is not None else ""
        text = re.sub(r"\bdefined\s*\(?\s*(\w+)\s*\)?", lambda m: "1" if m.group(1) in macros else "X_", text)
        names = set(re.findall(r"[A-Za-z_]\w*", text))
        if not names <= {k for k, v in macros.items() if re.fullmatch(r"-?\d+[uUlL]*", v.strip())}:
            continue
        try:
            taken = bool(exprs.evaluate(text.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
                                        .replace(" not =", "!="),
                                        {k: int(macros[k].strip().rstrip("uUlL")) for k in names}))
        except (exprs.ExprError, ValueError):
            continue
        alt = n.child_by_field_name("alternative")
        body_end = alt.start_byte if alt is not None else n.end_byte
        if not taken:
            out.append((cond.end_byte, body_end))
        elif alt is not None:
            out.append((alt.start_byte, alt.end_byte))
    return out


def _function_locals(model: SourceModel, function: str, at: int | None,
                     macros: dict[str, str] | None = None) -> dict[str, str]:
    fns = host_functions(model, function)
    fn = next((n for n in fns if at is not None and n.start_byte <= at < n.end_byte), fns[0] if fns else None)
    if fn is None:
        return {}
    out: dict[str, str] = {}
    counts: dict[str, int] = {}
    changed: set[str] = set()
    launch = fn.descendant_for_byte_range(at, at) if at is not None and fn.start_byte <= at < fn.end_byte else None
    seen: dict[str, object] = {}   # name -> the scope of the declaration the launch sees
    for n in _walk(fn):
        if n.type == "declaration":
            scope = n.parent
            visible = launch is not None and scope is not None and n.end_byte <= at <= scope.end_byte \
                and scope.start_byte <= at   # type: ignore[operator]
            for d in n.children_by_field_name("declarator"):
                name = syntax.declarator_name(d)[0]
                if name is None:
                    continue
                value = d.child_by_field_name("value") if d.type == "init_declarator" else None
                if launch is not None:
                    if not visible or (name in seen and seen[name].start_byte > scope.start_byte):  # type: ignore[attr-defined]
                        counts.setdefault(name, 0)
                        continue
                    seen[name] = scope
                    counts[name] = 1
                    out.pop(name, None)
                else:
                    counts[name] = counts.get(name, 0) + 1
                if value is not None and value.type not in ("initializer_list", "argument_list"):
                    out[name] = _device_limit(value) or value.text.decode()
    dead = _dead_branches(fn, macros)
    folded: set[str] = set()
    for n in _walk(fn):
        if n.type in ("assignment_expression", "update_expression") \
                and not any(a <= n.start_byte < b for a, b in dead):
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            if target is None or target.type != "identifier":
                continue
            name = target.text.decode()
            scope = seen.get(name)
            # `threads = ((threads + WARP_SIZE - 1) / WARP_SIZE) * WARP_SIZE;` once, in the scope that
            # declares it, over itself and the program's constants: its value from there on
            if (at is None or n.start_byte < at) and _self_update(n, name, out, folded):
                out[name] = _replace_word(n.child_by_field_name("right").text.decode(), name, f"({out[name]})")
                folded.add(name)
                continue
            if launch is None or scope is None:
                changed.add(name)
            elif scope.start_byte <= n.start_byte < scope.end_byte and dim3.reaches(n, launch, scope):
                changed.add(name)
    for k, v in list(out.items()):   # `props->multiProcessorCount`, `getCurrentDeviceProperties()->...`
        if any(w in v for w in _DEVICE_QUERIES):
            out[k] = RUNTIME
    for n in _walk(fn):   # `cudaDeviceGetAttribute(&sms, ...)`: a value the host reads at run time
        if n.type == "pointer_expression" and n.child_by_field_name("operator") is not None \
                and n.child_by_field_name("operator").type == "&":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and arg.text.decode() in out:
                out[arg.text.decode()] = RUNTIME
    return {k: v for k, v in out.items() if counts.get(k) == 1 and (k not in changed or v == RUNTIME)}


def _self_update(n, name: str, values: dict[str, str], folded: set[str]) -> bool:
    """Whether `n` is `name = expr` of its own value and upper-case constants (`WARP_SIZE`) only, a
    statement of the block that declares `name` (run whenever the declaration is), changing a
    value read from its declaration (not already changed once)."""
    right = n.child_by_field_name("right")
    op = n.child_by_field_name("operator")
    if n.type != "assignment_expression" or right is None or op is None or op.type != "=" or name not in values \
            or name in folded or n.parent is None or n.parent.type != "expression_statement":
        return False
    words = {w.text.decode() for w in _walk(right) if w.type == "identifier"}
    if name not in words or any(w != name and not w.isupper() for w in words):
        return False
    block = n.parent.parent
    return block is not None and any(c.type == "declaration" and any(
        syntax.declarator_name(d)[0] == name for d in c.children_by_field_name("declarator"))
        for c in block.named_children if c.start_byte < n.start_byte)


def _replace_word(text: str, word: str, by: str) -> str:
    return re.sub(rf"\b{re.escape(word)}\b", lambda _: by, text)


def dim3_fields(param: str, index: int, site: LaunchSite | None, grid: list[str] | None,
                block: list[str] | None) -> tuple[list[tuple[str, str]], str]:
    """A launch's dim3 handed on to the kernel by value (TGI's `const dim3 blockDim`, the launch's
    own block): its fields as spec lines (`blockDim.x = "1024"`), the launch's grid or block where
    the argument is that variable, else 1, 1, 1 — and the note that says which."""
    arg = site.args[index].strip() if site is not None and index < len(site.args) else ""
    dims = block if site is not None and arg == site.block.strip() else \
        grid if site is not None and arg == site.grid.strip() else None
    values = list(dims or ["1"])
    lines = [(f"{param}.{axis}", f'"{v}"') for axis, v in zip("xyz", values + ["1"] * (3 - len(values)))]
    if dims is None:
        return lines, f"`{param}` (a dim3) took 1, 1, 1: the launch's value was not read — CHECK"
    return lines, f"`{param}` is the launch's {'block' if dims is block else 'grid'}, a dim3 handed to the kernel"
