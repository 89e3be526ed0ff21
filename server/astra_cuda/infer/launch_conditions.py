"""The conditions a launch is written under, as `require`: the launcher's `assert`/`TORCH_CHECK`
checks, the negated conditions of an `if` that throws, the `if`/`else` and `case` branches around
the launch, and the ranges a helper's value takes in a `switch` case. Separate because they are
read from the launcher's control flow, not from the launch's arguments."""
from __future__ import annotations

import ast
import math

from ..model import exprs, source
from ..model import syntax
from ..model.source import LaunchSite, SourceModel
from ..model.syntax import walk as _walk
from . import hostcalls
from .hostexprs import HostExprs, raises
from .program import Program, param_names
from .template_names import template_param_names_of
from .launch_locals import fixed_by_branches, host_functions, host_locals, launch_byte, site_locals


CHECKS = ("assert", "TORCH_CHECK", "TORCH_INTERNAL_ASSERT")
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


def launcher_checks(model: SourceModel, function: str | None, before: int,
                    raising: dict[str, int | None] | None = None) -> list[str]:
    """The conditions a launcher asserts before it launches (`assert(n % 4 == 0)`,
    `TORCH_CHECK(a >= 4 && a <= 1024, ...)`, a project check macro `raising` names), split at
    `&&`, and those an `if` that throws rules out (`if (head_dim < rotary_dim) { ...; throw ...; }`:
    `head_dim >= rotary_dim`, split at `||`), or returns before the launch (`if (d % 16 != 0) { k4<<<…>>>;
    return; }` before `k16<<<…>>>`): the sizes it accepts. Only checks on the launch's own path:
    written in a block that encloses it, not in another branch."""
    if function is None:
        return []
    fn = next(iter(host_functions(model, function)), None)
    if fn is None:
        return []
    raising = raising or {}
    checks = {**{c: 0 for c in CHECKS}, **{m: i for m, i in raising.items() if i is not None}}
    out: list[str] = []
    for n in _walk(fn):
        if n.start_byte >= before:
            continue
        held = None   # (the condition, whether the launcher needs it true)
        if n.type == "call_expression" and n.child_by_field_name("function").text.decode() in checks:
            args = n.child_by_field_name("arguments")
            given = [c for c in args.named_children if c.type != "comment"] if args is not None else []
            i = checks[n.child_by_field_name("function").text.decode()]
            held = (given[i], True) if i < len(given) else None
        elif n.type == "if_statement" and n.child_by_field_name("alternative") is None and (
                raises(n.child_by_field_name("consequence"), raising)
                or n.end_byte <= before and _returns(n.child_by_field_name("consequence"))):
            cond = n.child_by_field_name("condition")
            held = (cond.named_children[0], False) if cond is not None and cond.named_children else None
        if held is None:
            continue
        block = n.parent
        while block is not None and block.type != "compound_statement":
            block = block.parent
        if block is None or not block.start_byte <= before < block.end_byte:
            continue   # in a branch the launch is not in
        stack = [held]
        while stack:
            c, true = stack.pop()
            while c.type == "parenthesized_expression" and len(c.named_children) == 1:
                c = c.named_children[0]
            if c.type == "unary_expression" and c.child_by_field_name("operator").type == "!":
                stack.append((c.child_by_field_name("argument"), not true))
                continue
            op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
            if op is not None and op.type == ("&&" if true else "||"):
                stack += [(c.child_by_field_name("right"), true), (c.child_by_field_name("left"), true)]
            elif op is not None and op.type in _COMPARISONS:
                left, right = (c.child_by_field_name(f).text.decode() for f in ("left", "right"))
                out.append(c.text.decode() if true else f"{left} {_NEGATED[op.type]} {right}")
    return out


def _returns(node) -> bool:
    """Whether a branch ends by returning (`if (d % 16 != 0) { k4<<<…>>>(…); return; }`): a launch
    written after it is reached only where its condition is false."""
    while node is not None and node.type == "compound_statement":
        stmts = [c for c in node.named_children if c.type != "comment"]
        node = stmts[-1] if stmts else None
    return node is not None and node.type == "return_statement"


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def negated(cond: str) -> str | None:
    """`a % 8 != 0` for `a % 8 == 0`: a spec comparison with its operator reversed."""
    import ast
    try:
        tree = exprs.parse(cond).body
    except exprs.ExprError:
        return None
    if not isinstance(tree, ast.Compare) or len(tree.ops) != 1:
        return None
    op = next((o for o, cls in (("<", ast.Lt), ("<=", ast.LtE), (">", ast.Gt), (">=", ast.GtE), ("==", ast.Eq),
                                ("!=", ast.NotEq)) if isinstance(tree.ops[0], cls)), None)
    return f"{ast.unparse(tree.left)} {_NEGATED[op]} {ast.unparse(tree.comparators[0])}" if op else None


def branch_conditions(model: SourceModel, site: LaunchSite, local: dict[str, str]) -> list[tuple[str, bool]]:
    """(condition, taken) of each `if` the launch is written under: True in its `then` branch,
    False in its `else` — the sizes the launcher sends this launch (`if (width % 8 == 0) k8<<<..>>>
    else k<<<..>>>`: k sees only widths that are not multiples of 8). A `then` condition is split at
    `&&`; a local flag (`use_vec = (d % 4 == 0)`) read as its value."""
    tree = source.parser().parse(model.text.encode()).root_node
    node = tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte)
    return [(c, True) for c in _case_conditions(tree, node, site)] + _conditions_above(node, local)


def if_conditions(model: SourceModel, site: LaunchSite, local: dict[str, str]) -> list[tuple[str, bool]]:
    """branch_conditions without a `switch`'s case labels."""
    tree = source.parser().parse(model.text.encode()).root_node
    return _conditions_above(tree.descendant_for_byte_range(site.span.start_byte, site.span.start_byte), local)


def _conditions_above(node, local: dict[str, str], stop: set | None = None) -> list[tuple[str, bool]]:
    """(condition, taken) of each `if` whose `then` or `else` branch holds `node` (below `stop`'s
    nodes, as (start, end, type))."""
    out: list[tuple[str, bool]] = []
    while node is not None and (stop is None or (node.start_byte, node.end_byte, node.type) not in stop):
        parent = node.parent
        if parent is not None and parent.type in ("if_statement", "else_clause") and parent.type == "else_clause":
            node = parent   # `else { ... }`: the if_statement above decides
            continue
        if parent is not None and parent.type == "if_statement" and node in (
                parent.child_by_field_name("consequence"), parent.child_by_field_name("alternative")):
            taken = node == parent.child_by_field_name("consequence")
            cond = parent.child_by_field_name("condition")
            while cond is not None and (cond.type in ("condition_clause", "parenthesized_expression") and
                                        len(cond.named_children) == 1 or _negation(cond)):
                taken ^= _negation(cond)   # `if (!use_vec16)`: its `then` sees the test false
                cond = cond.named_children[0]
            if cond is not None and cond.type == "identifier" and cond.text.decode() in local:
                cond = _flag(source.parse_expression(local[cond.text.decode()]))
            stack = [cond] if cond is not None else []
            while stack:
                c = stack.pop()
                while c.type == "parenthesized_expression" and len(c.named_children) == 1:
                    c = c.named_children[0]
                op = c.child_by_field_name("operator") if c.type == "binary_expression" else None
                if taken and op is not None and op.type == "&&":
                    stack += [c.child_by_field_name("right"), c.child_by_field_name("left")]
                elif op is not None and op.type in _COMPARISONS:
                    out.append((c.text.decode(), taken))
        node = parent
    return out


def _negation(n) -> bool:
    o = n.child_by_field_name("operator") if n is not None and n.type == "unary_expression" else None
    return o is not None and o.type == "!"


def chain_conditions(model: SourceModel, site: LaunchSite) -> list[tuple[str, bool]]:
    """(condition, taken) of the `if`/`else if` chain that sets a local the launch's branch tests:
    DeepSpeed's rotary launcher sets `alignment = 16`, `= 8` or `= 4` by `half_dim % (16 /
    sizeof(T)) == 0`, `% (8 / ...)`, `% (4 / ...)` in turn, and launches its `<T, .., 4>` instance
    under `if (alignment == 4)`: that instance sees only the sizes of the branch that assigns 4 (not
    the first two, the third), as the launcher's other branches send other sizes to other
    instances. The first assignment of the value the launch's branch fixes, before the launch."""
    fixed = fixed_by_branches(model, site)
    fn = next(iter(host_functions(model, site.function)), None) if site.function else None
    at = launch_byte(model, site)
    if not fixed or fn is None or not fn.start_byte <= at < fn.end_byte:
        return []
    out: list[tuple[str, bool]] = []
    for name, value in fixed.items():
        for n in _walk(fn):
            if n.type != "assignment_expression" or n.start_byte >= at \
                    or n.child_by_field_name("operator").type != "=":
                continue
            left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
            if left is None or right is None or left.text.decode() != name or not _same_number(right.text.decode(), value):
                continue
            # the conditions over the assignment up to the block that holds the launch too (those
            # over both are the launch's own, already counted)
            launch = fn.descendant_for_byte_range(at, at)
            common = {(x.start_byte, x.end_byte, x.type) for x in _ancestors(launch)}
            out += _conditions_above(n, {}, common)
            break
    return out


def _ancestors(node):
    while node is not None:
        yield node
        node = node.parent


def _same_number(text: str, value: str) -> bool:
    try:
        return int(text.strip().rstrip("uUlL"), 0) == int(value.strip().rstrip("uUlL"), 0)
    except ValueError:
        return text.strip() == value.strip()


def _case_conditions(tree, node, site: LaunchSite) -> list[str]:
    """`k >= 1`, `k <= 16` where the launch stands under `case 1 ... 16:` (a GNU case range) or
    `k == 20` under `case 20:` of a `switch (k)` — written in place, or in the body of the launch
    macro the switch's body uses (FasterTransformer's `CASE_K(1, 16, ...)`: `case K_MIN ... K_MAX:`)."""
    label = None
    at = node
    while at is not None and at.type not in ("case_statement", "switch_statement", "function_definition"):
        at = at.parent
    if at is not None and at.type == "case_statement":
        text = at.text.decode()
        label = text[len("case"):text.index(":")] if text.startswith("case") and ":" in text else None
    elif site.via_macro:
        macro = next((n for n in syntax.walk(tree) if n.type == "preproc_function_def"
                      and n.child_by_field_name("name") is not None
                      and n.child_by_field_name("name").text.decode() == site.via_macro), None)
        call = node
        while call is not None and call.type != "call_expression":
            call = call.parent
        value = macro.child_by_field_name("value") if macro is not None else None
        body = value.text.decode().replace("\\\n", " ").strip() if value is not None else ""
        if call is not None and body.startswith("case") and ":" in body:
            params = [c.text.decode() for c in macro.child_by_field_name("parameters").named_children
                      if c.type == "identifier"]
            args = [a.text.decode() for a in call.child_by_field_name("arguments").named_children
                    if a.type != "comment"]
            words = dict(zip(params, args))
            label = " ".join(words.get(w, w) for w in body[len("case"):body.index(":")].split())
        at = call
    if label is None:
        return []
    while at is not None and at.type != "switch_statement":
        at = at.parent
    cond = at.child_by_field_name("condition") if at is not None else None
    if cond is None:
        return []
    subject = cond.text.decode().strip().strip("()").strip()
    lo, dots, hi = label.partition("...")
    return [f"{subject} >= {lo.strip()}", f"{subject} <= {hi.strip()}"] if dots else [f"{subject} == {label.strip()}"]


def helper_ranges(model: SourceModel, site: LaunchSite, program: Program,
                  mapping: dict[str, str]) -> list[tuple[str, int, int, str]]:
    """(size, lo, hi, the local) for each condition the launch is written under (`case 12:` of `switch
    (log2_elements)`, `if (log2_elements == 12)`) on a local the launcher computes with a helper of
    the project the spec cannot write (`log2_elements = log2_ceil(key_seq_len)`): the sizes that
    reach this launch, found by running the helper (`hostcalls`) — 2049 … 4096."""
    raw = host_locals(model, site.function, launch_byte(model, site))
    out: list[tuple[str, int, int, str]] = []
    for text, taken in branch_conditions(model, site, {}):
        node = source.parse_expression(text)
        if not taken or node is None or node.type != "binary_expression":
            continue
        left, right, op = (node.child_by_field_name(f) for f in ("left", "right", "operator"))
        if left.type != "identifier" or right.type != "number_literal" or left.text.decode() not in raw:
            continue
        call = source.parse_expression(raw[left.text.decode()])
        fn = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"] \
            if fn is not None else []
        found = program.function(fn.text.decode()) if fn is not None and fn.type == "identifier" else None
        size = HostExprs(mapping, {}).spec(args[0].text.decode()) if len(args) == 1 else None
        if found is None or size is None or not size.isidentifier():
            continue
        try:
            value = int(right.text.decode().rstrip("uUlL"), 0)
        except ValueError:
            continue
        rng = hostcalls.range_where(found[0], op.type, value)
        if rng is not None:
            out.append((size, *rng, left.text.decode()))
    return out


def range_requires(ranges: list[tuple[str, int, int, str]]) -> list[str]:
    return [c for size, lo, hi, _ in ranges
            for c in ([f"{size} >= {lo}"] if lo > 1 else []) + ([f"{size} <= {hi}"] if hi < hostcalls.LIMIT else [])]


def _flag(cond):
    """A local flag's value as the comparison it holds: `(n <= 128)`, `(n <= 128) ? true : false`."""
    while cond is not None and cond.type == "parenthesized_expression" and len(cond.named_children) == 1:
        cond = cond.named_children[0]
    if cond is not None and cond.type == "conditional_expression" and \
            (cond.child_by_field_name("consequence").type, cond.child_by_field_name("alternative").type) == ("true", "false"):
        return _flag(cond.child_by_field_name("condition"))
    return cond


def host_condition(text: str, hx: HostExprs) -> str | None:
    """A host comparison over the sizes as a spec condition, or None where a side is not a size."""
    node = source.parse_expression(text)
    op = node.child_by_field_name("operator") if node is not None and node.type == "binary_expression" else None
    if op is None or op.type not in _COMPARISONS:
        return None
    left, right = hx.spec(node.child_by_field_name("left").text.decode()), \
        hx.spec(node.child_by_field_name("right").text.decode())
    if left is None or right is None or not (exprs.names(left) or exprs.names(right)):
        return None
    return f"{left} {op.type} {right}"


ALIGNED = 64   # a model's feature sizes are multiples of it (4096, 11008, 14336, a 128-wide head)


def unaligned_tests(model: SourceModel, site: LaunchSite, constants: dict[str, str]) -> int:
    """How many of the branches a launch is written under send it sizes that are not aligned: `if
    (hidden_dim % 16 == 0) k16 else if (hidden_dim % 8 == 0) k8 else k4` — k8 takes widths that are
    not multiples of 16, k4 those that are not multiples of 8 (flags such as `use_vec16 = (hidden_dim
    % 16 == 0)` read as their test). The sizes such a test is about are a model's feature sizes,
    aligned in every program that runs the kernel: the aligned launch is the one they reach."""
    if site.function is None:
        return 0
    macros = {**constants, **model.constants}
    local = {**site_locals(model, site, macros), **host_locals(model, site.function, launch_byte(model, site), macros)}
    return sum(1 for text, taken in branch_conditions(model, site, local) if _alignment(text) == (not taken))


def _alignment(text: str) -> bool | None:
    """True for `x % c == 0`, False for `x % c != 0` (c dividing ALIGNED), None for any other test."""
    try:
        tree = exprs.parse(text)
    except exprs.ExprError:
        return None
    body = tree.body if isinstance(tree, ast.Expression) else tree
    if not (isinstance(body, ast.Compare) and len(body.ops) == 1 and isinstance(body.ops[0], (ast.Eq, ast.NotEq))):
        return None
    left, right = body.left, body.comparators[0]
    if not (isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod) and isinstance(left.right, ast.Constant)
            and isinstance(right, ast.Constant) and right.value == 0):
        return None
    c = left.right.value
    if not (isinstance(c, int) and 0 < c and ALIGNED % c == 0 and exprs.names(ast.unparse(left.left))):
        return None
    return isinstance(body.ops[0], ast.Eq)


ADMIT_UP_TO = 4096   # the sizes a launch's conditions are counted over (what tests draw; a real model's sequence)
# every value, each once — a sample weighting every 8th past 256 counted `blocksize == 512` 8 times
# `blocksize == 128` (bitsandbytes' quantizer chain)
_ADMIT_SAMPLE = range(1, ADMIT_UP_TO + 1)


def admitted_share(model: SourceModel, site: LaunchSite, program: Program, constants: dict[str, str],
                   cache: dict[str, list[bool]] | None = None) -> float:
    """How much of the launcher's sizes reach this launch: the sum over its parameters of the log
    of the share of 1 … ADMIT_UP_TO its branch conditions on that parameter alone admit (a chain
    `if (seq <= 8) k<2> else if (seq <= 16) k<4> … else k<128>`: the first takes 8 values, the
    last 3584; `threads_per_head == 4`, `next_pow2(head_size) == 4`, two). 0 where no condition is
    read; -inf where none is admitted. A launcher's type parameter is read as float's 4 bytes in
    `sizeof`, the type the draft takes where no launch gives one — for ranking only."""
    found = program.function(site.function) if site.function is not None else None
    if found is None:
        return 0.0
    # a parameter the launch takes whole as a block dimension (cuda-samples' MatrixMulCUDA:
    # `threads(block_size, block_size)` under `if (block_size == 16) … else`) is a setting the program
    # picks, not a size of the data: its branches are no share of the sizes (the caller's value decides)
    dims = [site.block, *(site.block_var.dims or ())] if site.block_var is not None else [site.block]
    params = [p for p in param_names(found[0]) if p not in {d.strip() for d in dims}]
    sizes = {f"sizeof({t})": "4" for t in template_param_names_of(found[0])}
    macros = {**constants, **model.constants}
    # a local the launcher computes once (`per = pow2_up(head) / 4`) as computed, not as the number the
    # branch tests it against; one set several times (`alignment = 16` in a chain) as the branch fixes it
    local = {**site_locals(model, site, macros), **host_locals(model, site.function, launch_byte(model, site), macros)}
    hx = HostExprs({p: p for p in params}, {**constants, **model.constants, **sizes, **local},
                   helpers=hostcalls.helper_functions(program.function))
    by_name: dict[str, list[str]] = {}
    # a `switch` over a size (FasterTransformer's `CASE_K(65, 1024, …)` for top-k) is not ranked here:
    # its case ranges tie the size to the instance (helper_ranges), and the widest range is no
    # likelier a size than the first (topk_stage1 at `<T, 256, 8>` failed its check)
    for text, taken in [(c, True) for c in site.conditions] + if_conditions(model, site, {}) \
            + chain_conditions(model, site):
        try:   # a test of a local the launcher computes (DeepSpeed rotary's `threads_per_head == 32`, from
            # head_size) is not counted: its instance's shapes were not read (the `== 4` one's were)
            through_local = bool(exprs.names(text) & set(local))
        except exprs.ExprError:
            through_local = True
        c = None if through_local else host_condition(text, hx)
        c = c if c is None or taken else negated(c)
        names = exprs.names(c) if c is not None else set()
        if len(names) == 1 and names <= set(params):   # a size the caller passes, not a template argument
            by_name.setdefault(next(iter(names)), []).append(c)   # type: ignore[arg-type]
    cache = {} if cache is None else cache
    total = 0.0
    for name, conds in by_name.items():
        ok = [True] * len(_ADMIT_SAMPLE)
        for c in conds:
            if c not in cache:
                cache[c] = [_holds(c, name, v) for v in _ADMIT_SAMPLE]
            ok = [a and b for a, b in zip(ok, cache[c])]
        count = sum(ok)
        if count == 0:
            return float("-inf")
        total += math.log(count / ADMIT_UP_TO)
    return total


def _holds(cond: str, name: str, value: int) -> bool:
    try:
        return bool(exprs.evaluate(cond, {name: value}))
    except exprs.ExprError:
        return True   # a value the condition cannot be read at rules nothing out
