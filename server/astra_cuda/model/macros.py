"""What the source model reads of a file's macros: the function-like macros that write a kernel's
head and the object-like ones (`kernel_macros`), the macros that launch a kernel with their
uses of each other expanded (`launch_macros`, bounded), one use's parameters replaced
(`substitute`), and a macro written between `__global__` and a kernel's return type, which the
parse reads as blanks (`attribute_macros`)."""
from __future__ import annotations

from tree_sitter import Node

from .syntax import IDENT_TYPES, nodes_of, parser, text, walk

MAX_MACRO_NESTING = 4          # launch macros used inside launch macros, levels expanded
MAX_EXPANSION = 1 << 16        # bytes of one expanded launch macro (a hostile file's nesting blows up)


def kernel_macros(root: Node) -> tuple[dict[str, tuple[list[str], bool, str]], dict[str, str]]:
    """The file's function-like macros that write a kernel's head (`__global__` in the body):
    name -> (parameters, variadic, body); and its object-like macros: name -> the first
    definition's value."""
    kernels: dict[str, tuple[list[str], bool, str]] = {}
    objects: dict[str, str] = {}
    for n in nodes_of(root, ("preproc_def", "preproc_function_def")):   # a query: not a walk of every node
        name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
        if name is None:
            continue
        body = text(value).replace("\\\n", " ") if value is not None else ""
        if n.type == "preproc_function_def" and "__global__" in body:
            ps = n.child_by_field_name("parameters")
            kids = ps.children if ps is not None else []
            kernels[text(name)] = ([text(c) for c in kids if c.type == "identifier"],
                                           any(c.type == "..." for c in kids), body)
        elif n.type == "preproc_def":
            objects.setdefault(text(name), body.strip())
    return kernels, objects


def launch_macros(every: dict[str, tuple[list[str], str]]) -> dict[str, tuple[list[str], str]]:
    """The function-like macros that launch a kernel, with their bodies expanded: one whose body
    writes `<<<`, and one whose body uses such a macro (`#define LAUNCH_ALL(U) if (pre) { LAUNCH_PRE(U) }
    else { LAUNCH(U) }`), its uses of them replaced by their expansions, as the preprocessor would."""
    launching = {name: m for name, m in every.items() if "<<<" in m[1]}
    for _ in range(MAX_MACRO_NESTING):
        grown = False
        for name, (params, body) in every.items():
            expanded = expand_uses(body, launching)
            if expanded != body and len(expanded) <= MAX_EXPANSION and launching.get(name, (None, body))[1] != expanded:
                launching[name], grown = (params, expanded), True
        if not grown:
            break
    return launching


def expand_uses(body: str, macros: dict[str, tuple[list[str], str]]) -> str:
    """`body` with its uses of `macros` replaced by their expansions (one level)."""
    code = ("void __astra_m() { " + body + "; }").encode()
    tree = parser().parse(code).root_node
    edits: list[tuple[int, int, str]] = []
    for call in (n for n in walk(tree) if n.type == "call_expression"):
        callee = call.child_by_field_name("function")
        args_node = call.child_by_field_name("arguments")
        if callee is None or callee.type != "identifier" or text(callee) not in macros or args_node is None \
                or any(s <= call.start_byte and call.end_byte <= e for s, e, _ in edits):
            continue
        params, inner = macros[text(callee)]
        args = [text(a) for a in args_node.named_children if a.type != "comment"]
        edits.append((call.start_byte, call.end_byte, "{ " + substitute(inner, dict(zip(params, args))) + "; }"))
    for start, end, value in sorted(edits, reverse=True):
        code = code[:start] + value.encode() + code[end:]
    written = code.decode("utf-8", errors="replace")
    return written[len("void __astra_m() { "):-len("; }")]


def substitute(body: str, args: dict[str, str]) -> str:
    """A macro body with its parameters replaced by the arguments of one use (identifier
    tokens only, as the preprocessor does; `#p` and `a##b` are left as written)."""
    code = ("void __astra_m() { " + body + "; }").encode()
    tree = parser().parse(code).root_node
    edits = [(n.start_byte, n.end_byte, args[text(n)]) for n in walk(tree)
             if n.type in IDENT_TYPES and text(n) in args]
    for start, end, value in sorted(edits, reverse=True):
        code = code[:start] + value.encode() + code[end:]
    written = code.decode("utf-8", errors="replace")
    return written[len("void __astra_m() { "):-len("; }")]


def attribute_macros(root: Node, data: bytes) -> list[tuple[int, int]]:
    """Byte ranges of a macro invocation written between `__global__` and the kernel's return
    type (`__global__ LAUNCH_BOUNDS(256) void k(...)`: FlashInfer's sampling kernels). Without the
    macro's definition tree-sitter reads `LAUNCH_BOUNDS` as the return type and the rest as an
    error (or a declaration missing its `;`, the kernel then a host function without its
    template). The parse reads those bytes as blanks (offsets and lines unchanged: every span
    still points into the user's text). A kernel returns void, so a type name right after
    `__global__` followed by `(` in a node that does not parse is such a macro."""
    out = []
    for n in walk(root):
        if n.type not in ("declaration", "function_definition") or not n.has_error:
            continue
        kids = n.children
        for g, name in zip(kids, kids[1:]):
            if g.type != "__global__" or name.type != "type_identifier":
                continue
            i = name.end_byte
            while i < len(data) and data[i] in b" \t\r\n":
                i += 1
            depth, j = 0, i
            for j in range(i, len(data)):
                depth += {0x28: 1, 0x29: -1}.get(data[j], 0)
                if depth == 0:
                    break
            if i < len(data) and data[i] == 0x28 and depth == 0:
                out.append((name.start_byte, j + 1))
    return out


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def conditions_within(node: Node | None, start: int) -> tuple[str, ...]:
    """The conditions of the `if`s above `node` that begin at or after byte `start` (the ones a
    launch macro's own body writes: `if (threads_per_head == 4) { LAUNCH(4); } else if (…)`), as
    comparisons that hold where the launch runs: a `then` branch's split at `&&`, an `else`
    branch's one comparison reversed (`threads_per_head != 4`); other conditions say nothing here."""
    out: list[str] = []
    while node is not None and node.parent is not None:
        parent = node.parent
        if parent.type == "else_clause":
            node = parent   # the if_statement above decides
            continue
        if parent.type == "if_statement" and parent.start_byte >= start and node in (
                parent.child_by_field_name("consequence"), parent.child_by_field_name("alternative")):
            taken = node == parent.child_by_field_name("consequence")
            stack = [parent.child_by_field_name("condition")]
            while stack:
                c = stack.pop()
                while c is not None and c.type in ("condition_clause", "parenthesized_expression") \
                        and len(c.named_children) == 1:
                    c = c.named_children[0]
                if c is None or c.type != "binary_expression":
                    continue
                op = c.child_by_field_name("operator")
                if op is None:
                    continue
                if taken and op.type == "&&":
                    stack += [c.child_by_field_name("right"), c.child_by_field_name("left")]
                elif op.type in _NEGATED:
                    left, right = text(c.child_by_field_name("left")), text(c.child_by_field_name("right"))
                    out.append(text(c) if taken else f"{left} {_NEGATED[op.type]} {right}")
        node = parent
    return tuple(out)
