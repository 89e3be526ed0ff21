"""A launch's grid or block given as the name of a `dim3` variable (`ConfigVar`): its one
declaration in the launching host function, followed along the launch's own path — a member set
after it (`g.x /= 2`) read with the value so far, a change after the launch, in another branch
or `case` ignored, one that may happen in a loop or through a pointer making it not followed,
with the reason (`dim3_var`)."""
from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from .file_model import ConfigVar
from .syntax import declarator_name, text, walk


def _is_dim3_type(node: Node | None) -> bool:
    return node is not None and text(node) in ("dim3", "::dim3")


def _dim3_call(value: Node | None) -> Node | None:
    """The argument list of `dim3(a, b)` or `dim3{a, b}`."""
    if value is None:
        return None
    if value.type == "call_expression" and _is_dim3_type(value.child_by_field_name("function")):
        return value.child_by_field_name("arguments")
    if value.type == "compound_literal_expression" and _is_dim3_type(value.child_by_field_name("type")):
        return value.child_by_field_name("value")
    return None


def local_declarations(name: str, fn: Node) -> list[tuple[Node, Node]]:
    """(declaration, declarator) for every declaration of `name` in a function, parameters included."""
    out = []
    for n in walk(fn):
        if n.type == "declaration":
            for d in n.children_by_field_name("declarator"):
                if declarator_name(d)[0] == name:
                    out.append((n, d))
        elif n.type in ("parameter_declaration", "optional_parameter_declaration"):
            pd = n.child_by_field_name("declarator")
            if pd is not None and declarator_name(pd)[0] == name:
                out.append((n, pd))
    return out


def declares_dim3(decl: Node, declarator: Node) -> bool:
    type_node = decl.child_by_field_name("type")
    if _is_dim3_type(type_node):
        return True
    # `auto g = dim3(...)`
    return (type_node is not None and type_node.type == "placeholder_type_specifier"
            and declarator.type == "init_declarator"
            and _dim3_call(declarator.child_by_field_name("value")) is not None)


def _product_read_as_pointer(param: Node) -> bool:
    """`a * b` parsed as the parameter `a *b` (a type name and a pointer to it): the type a plain
    name, not a built-in one (`int *p` is a parameter), the declarator one pointer to a name."""
    kind, declarator = param.child_by_field_name("type"), param.child_by_field_name("declarator")
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    return kind is not None and kind.type == "type_identifier" and declarator is not None \
        and declarator.type == "pointer_declarator" and inner is not None and inner.type == "identifier" \
        and len(param.children) == 2


def dim3_args(decl: Node, declarator: Node) -> tuple[str, ...] | None:
    """The constructor arguments of a dim3 declaration, or None for a form we do not follow."""
    args: list[Node]
    if declarator.type == "identifier":                       # dim3 g;  -> (1, 1, 1)
        args = []
    elif declarator.type == "function_declarator":            # dim3 g(a, b): parsed as a declaration
        params = declarator.child_by_field_name("parameters")
        args = [p for p in params.named_children if p.type != "comment"] if params is not None else []
        # Each argument must be a bare name read as a type, or a product of two names read as a pointer
        # parameter (`dim3 g(blocks_per_sm * num_sms)`: a launcher declares no function returning a
        # dim3 taking a `blocks_per_sm*`); `dim3 g(int a)` or `dim3 g()` declare functions.
        if not args or any(p.type != "parameter_declaration" or p.child_by_field_name("declarator") is not None
                           and not _product_read_as_pointer(p) for p in args):
            return None
    elif declarator.type == "init_declarator":
        target = declarator.child_by_field_name("declarator")
        value = declarator.child_by_field_name("value")
        if target is None or target.type != "identifier" or value is None:
            return None                                        # a reference or pointer to a dim3
        call = _dim3_call(value)
        if call is not None:                                   # = dim3(a, b)  /  = dim3{a, b}
            value = call
        elif not _is_dim3_type(decl.child_by_field_name("type")):
            return None                                        # auto g = <something else>
        if value.type in ("argument_list", "initializer_list"):   # g(a, b)  g{a, b}  g = {a, b}
            args = [a for a in value.named_children if a.type != "comment"]
        else:                                                  # dim3 g = n;
            args = [value]
    else:
        return None
    if len(args) > 3:
        return None
    return tuple(text(a) for a in args) or ("1",)


def may_change(ident: Node) -> bool:
    """Whether this use of a dim3 variable may change it: only launches and `g.x` reads may not."""
    parent = ident.parent
    if parent is None or parent.type == "kernel_call_syntax":
        return False
    if parent.type == "field_expression" and parent.child_by_field_name("argument") == ident:
        outer = parent.parent
        if outer is None:
            return False
        if outer.type == "assignment_expression" and outer.child_by_field_name("left") == parent:
            return True
        if outer.type == "update_expression":
            return True
        if outer.type == "pointer_expression" and outer.children[0].type == "&":
            return True
        return False
    return True


def dim3_var(ident: Node, fn: Node | None, fn_name: str | None, call: Node, root: Node) -> ConfigVar | None:
    """What a launch's `grid` or `block` name holds, when it names a dim3; None when it names
    something else (a size, a macro) — those are read as they are written."""
    name = text(ident)
    where = f"`{fn_name}`" if fn_name else "the launching function"
    every = local_declarations(name, fn) if fn is not None else []
    local = every
    if not local:
        at_file_scope = any(declares_dim3(n, d) and declarator_name(d)[0] == name
                            for n in outside_functions(root) if n.type == "declaration"
                            for d in n.children_by_field_name("declarator"))
        return ConfigVar(name, None, None, f"is declared outside {where}") if at_file_scope else None
    if not any(declares_dim3(d, dd) for d, dd in local):
        return None
    if len(local) > 1:
        # one name declared in several scopes (`if (use_vec) { dim3 block(d / 4); k<..>(..); } else
        # { dim3 block(d); ... }`): the launch sees the declaration C++ name lookup finds, the one
        # before it in the innermost block that encloses it
        enclosing = [(d, dd, block) for d, dd in local if d.type == "declaration" and (block := d.parent) is not None
                     and d.end_byte <= call.start_byte and block.start_byte <= call.start_byte
                     and call.end_byte <= block.end_byte]
        innermost = max((block.start_byte for _, _, block in enclosing), default=None)
        seen = [(d, dd) for d, dd, block in enclosing if block.start_byte == innermost]
        if len(seen) == 1:
            local = seen
    decl, declarator = local[0]
    line = decl.start_point[0]
    if len(local) > 1:
        lines = ", ".join(str(d.start_point[0] + 1) for d, _ in local)
        return ConfigVar(name, None, line, f"is declared more than once in {where} (lines {lines})")
    if decl.type != "declaration":
        return ConfigVar(name, None, line, f"is a parameter of {where}")
    scope = decl.parent
    if decl.end_byte > call.start_byte or scope is None or not (
            scope.start_byte <= call.start_byte and call.end_byte <= scope.end_byte):
        return ConfigVar(name, None, line, "is not declared before the launch in a scope enclosing it")
    declared_at = {declarator_name(dd)[1] for _, dd in every}
    # only uses in the declaration's own scope name it (another branch's `dim3 grid` is another variable)
    # a `const dim3` is never changed (TGI's `const dim3 blockDim(MAX_THREADS_PER_SM)`, also handed to
    # the kernel as an argument: read as a change, its launch took a guessed block)
    const = any(c.type == "type_qualifier" and text(c) == "const" for c in decl.children)
    changes = [n for n in walk(scope) if n.type == "identifier" and text(n) == name
               and n not in declared_at and not const and may_change(n) and reaches(n, call, scope)]
    dims = dim3_args(decl, declarator)
    if changes:   # `g.x = DIVIDE(n, 256);`, `if (c) g.x = 1024;` before the launch: its dimensions
        full = _member_values(name, changes, scope, call, list(dims or ()) + ["1"] * (3 - len(dims or ())))
        if full is None:
            changed = changes[0]
            return ConfigVar(name, None, line, f"may be changed on line {changed.start_point[0] + 1}")
        while len(full) > 1 and full[-1].strip() == "1":
            full.pop()
        dims = tuple(full) if dims is not None else None
    if dims is None:
        return ConfigVar(name, None, line, "is initialised in a form that is not a dim3 constructor call")
    return ConfigVar(name, dims, line)


_LOOPS = ("for_statement", "for_range_loop", "while_statement", "do_statement")
_LEAVES = ("break_statement", "return_statement", "continue_statement", "goto_statement")


def reaches(change: Node, call: Node, scope: Node) -> bool:
    """Whether a change written at `change` may run before the launch `call` on some path of
    one call of the launcher (`scope`: the block that declares the variable). Not when it comes
    after the launch with no loop inside `scope` around both, nor when the two sit in the two
    branches of one `if`/`else` (or `?:`), nor in an earlier `case` of a switch that leaves it
    (`break`) before the launch's case: another branch's `grid.x /= 2` is not this launch's."""
    def up(n: Node | None) -> list[Node]:
        out = []
        while n is not None and n != scope:
            out.append(n)
            n = n.parent
        return out
    mine, its = up(change), up(call)
    common = next((n for n in mine if n in its), scope)
    if common == change or common == call:
        return True
    n: Node | None = common
    while n is not None and n != scope:
        if n.type in _LOOPS:
            return True
        n = n.parent
    if change.start_byte > call.start_byte:
        return False
    a, b = (mine[mine.index(common) - 1], its[its.index(common) - 1]) if common != scope else (mine[-1], its[-1])
    if common.type in ("if_statement", "conditional_expression"):
        branches = {common.child_by_field_name("consequence"), common.child_by_field_name("alternative")}
        if a in branches and b in branches:
            return False
    if common.type == "compound_statement" and common.parent is not None \
            and common.parent.type == "switch_statement" and a.type == b.type == "case_statement":
        last = [c for c in a.named_children if c.type != "comment"][-1:]
        if last and last[0].type in _LEAVES:
            return False
    return True


def _member_values(name: str, changes: list[Node], scope: Node, call: Node, dims: list[str]) -> list[str] | None:
    """The dimensions at the launch of a dim3 whose members the statements before it set, on the
    launch's own path down from the dim3's block: `g.x = e;` (also `g.x /= 2`, reading the value so
    far), and such statements in the branches of an `if`/`else` before it, whose value is then the
    C conditional `(c) ? (then) : (else)`. None when a change is of any other kind (`&g`,
    `tune(g)`, in a loop, in a condition)."""
    left = set(changes)
    values = run_until(name, scope, call, dict(zip("xyz", dims)), left)
    return [values[a] for a in "xyz"] if values is not None and not left else None


def _inside(c: Node, n: Node) -> bool:
    return n.start_byte <= c.start_byte < n.end_byte


def run_until(name: str, node: Node, call: Node, values: dict[str, str], left: set[Node]) -> dict[str, str] | None:
    """The members when the launch `call` inside `node` runs (see `_member_values`); the
    changes read are taken out of `left`."""
    if node.type in ("compound_statement", "case_statement"):
        for s in node.named_children:
            if _inside(call, s):
                return run_until(name, s, call, values, left)
            mine = {c for c in left if _inside(c, s)}
            out = run_members(name, s, values, mine)
            if out is None:
                return None
            values = out
            left -= mine
        return values
    if node.type == "if_statement":
        branch = next((b for f in ("consequence", "alternative") if (b := node.child_by_field_name(f)) is not None
                       and _inside(call, b)), None)
        cond = node.child_by_field_name("condition")
        if branch is not None and not (cond is not None and any(_inside(c, cond) for c in left)):
            return run_until(name, branch, call, values, left)
        return None
    if node.type == "else_clause":
        inner = next((c for c in node.named_children if _inside(call, c)), None)
        return run_until(name, inner, call, values, left) if inner is not None else None
    # the launch's own statement (or one this does not follow, such as a loop): no change inside
    return None if any(_inside(c, node) and c.start_byte < call.start_byte for c in left) else values


def run_members(name: str, stmt: Node, values: dict[str, str], changes: set[Node]) -> dict[str, str] | None:
    """The dim3's members after `stmt` runs (see `_member_values`)."""
    if not any(stmt.start_byte <= c.start_byte < stmt.end_byte for c in changes):
        return values
    if stmt.type in ("compound_statement", "case_statement"):
        for s in stmt.named_children:
            if s.type == "comment":
                continue
            out = run_members(name, s, values, changes)
            if out is None:
                return None
            values = out
        return values
    if stmt.type == "if_statement":
        cond = stmt.child_by_field_name("condition")
        then, other = stmt.child_by_field_name("consequence"), stmt.child_by_field_name("alternative")
        if cond is None or then is None or any(cond.start_byte <= c.start_byte < cond.end_byte for c in changes):
            return None
        branch = next((c for c in other.named_children if c.type != "comment"), None) if other is not None else None
        a = run_members(name, then, values, changes)
        b = run_members(name, branch, values, changes) if branch is not None else values
        if a is None or b is None:
            return None
        test = text(cond)
        test = test[1:-1].strip() if test.startswith("(") and test.endswith(")") else test
        return {k: a[k] if a[k] == b[k] else f"({test}) ? ({a[k]}) : ({b[k]})" for k in "xyz"}
    if stmt.type != "expression_statement":
        return None
    assign = next((c for c in stmt.named_children if c.type != "comment"), None)
    if assign is None or assign.type != "assignment_expression":
        return None
    target, right, op = (assign.child_by_field_name(f) for f in ("left", "right", "operator"))
    if target is None or right is None or op is None or target.type != "field_expression":
        return None
    arg, field = target.child_by_field_name("argument"), target.child_by_field_name("field")
    if arg is None or field is None or text(arg) != name or text(field) not in values:
        return None
    value = members_read(right, name, values)
    if value is None:
        return None
    axis = text(field)
    if op.type != "=":
        value = f"({values[axis]}) {op.type[:-1]} ({value})"
    return {**values, axis: value}


def members_read(expr: Node, name: str, values: dict[str, str]) -> str | None:
    """`expr`'s text with each `g.x` it reads replaced by the value so far; None if it names `g`
    otherwise (`f(g)`)."""
    edits = []
    for n in walk(expr):
        if n.type == "identifier" and text(n) == name:
            fe = n.parent
            field = fe.child_by_field_name("field") if fe is not None and fe.type == "field_expression" else None
            if fe is None or field is None or text(field) not in values or fe.child_by_field_name("argument") != n:
                return None
            edits.append((fe.start_byte, fe.end_byte, f"({values[text(field)]})"))
    data = expr.text or b""
    for a, b, v in sorted(edits, reverse=True):
        data = data[:a - expr.start_byte] + v.encode() + data[b - expr.start_byte:]
    return data.decode()


def outside_functions(root: Node) -> Iterator[Node]:
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        if n.type != "function_definition":
            stack.extend(reversed(n.children))
