"""One-value float inputs that scale the data a kernel quantizes — every output it stores an
integer one (FasterTransformer's int8 quantizer: `const float scale = __ldg(scale_ptr);
tmp.x = float_to_int8_rn(x.x * scale);`).

Drawn like the data (normal), such a scale is near zero in some draws and rounds every output of
an integer type to 0: a constant output that says nothing about the kernel, and only sometimes.
The program passes a scale that maps the data onto the integer range, so the draw follows what the
code shows: a multiplier is drawn far above the data, a divisor far below it — decided from the
kernel's text, never from a trial run's luck."""
from __future__ import annotations

from tree_sitter import Node

from ..model import access, source, syntax
from ..model.syntax import walk

MULTIPLIER = "uniform(1000, 10000)"   # x * s: the gate's tiny data (1e-3) still reaches whole numbers
DIVISOR = "uniform(0.0001, 0.001)"     # x / s: the same, as its reciprocal


def _bare(n: Node | None) -> Node | None:
    while n is not None and n.type in ("parenthesized_expression", "cast_expression") and n.named_child_count >= 1:
        n = n.child_by_field_name("value") if n.type == "cast_expression" else n.named_children[0]
    return n


def _is_load(n: Node | None, name: str) -> bool:
    """`*p`, `p[0]` or a load helper of `p` alone (`__ldg(p)`)."""
    n = _bare(n)
    if n is None:
        return False
    if n.type == "pointer_expression" and syntax.field(n, "operator").type == "*":
        arg = _bare(n.child_by_field_name("argument"))
        return arg is not None and arg.type == "identifier" and syntax.text(arg) == name
    if n.type == "subscript_expression":
        arg = _bare(n.child_by_field_name("argument"))
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        return arg is not None and arg.type == "identifier" and syntax.text(arg) == name and \
            idx is not None and syntax.text(idx).strip("[] ") == "0"
    if n.type == "call_expression":
        args = n.child_by_field_name("arguments")
        kids = [c for c in args.named_children if c.type != "comment"] if args is not None else []
        return len(kids) == 1 and (bare := _bare(kids[0])) is not None and bare.type == "identifier" \
            and syntax.text(bare) == name
    return False


def _holders(body: Node, name: str) -> set[str]:
    """Locals that hold the pointer's one value (`const float scale = __ldg(scale_ptr);`)."""
    out: set[str] = set()
    for d in walk(body):
        if d.type == "init_declarator":
            decl = d.child_by_field_name("declarator")
            if decl is not None and decl.type == "identifier" and _is_load(d.child_by_field_name("value"), name):
                out.add(syntax.text(decl))
    return out


def _is_value(n: Node | None, name: str, holders: set[str]) -> bool:
    n = _bare(n)
    return n is not None and (_is_load(n, name) or (n.type == "identifier" and syntax.text(n) in holders))


def scale_role(kernel: source.Kernel, name: str) -> str | None:
    """"multiplies" where the kernel multiplies a value by the one value `name` points to,
    "divides" where it divides by it; None where it does neither (or both)."""
    body = access.kernel_body(kernel)
    if body is None:
        return None
    holders = _holders(body, name)
    roles = set()
    for b in walk(body):
        if b.type != "binary_expression" or syntax.field(b, "operator").type not in ("*", "/"):
            continue
        left, right = b.child_by_field_name("left"), b.child_by_field_name("right")
        if syntax.field(b, "operator").type == "*" and (_is_value(left, name, holders) or
                                                             _is_value(right, name, holders)):
            roles.add("multiplies")
        elif syntax.field(b, "operator").type == "/" and _is_value(right, name, holders):
            roles.add("divides")
    return roles.pop() if len(roles) == 1 else None


def quantization_scale(kernel: source.Kernel, name: str, integer_output: bool) -> str | None:
    """The draw of a one-value float input that scales data into an integer output (a quantizer's
    scale): far above the data where it multiplies, far below where it divides; None otherwise."""
    if not integer_output:
        return None
    role = scale_role(kernel, name)
    return MULTIPLIER if role == "multiplies" else DIVISOR if role == "divides" else None
