"""A guarded CUB block load unswitched (part of `unswitch`): `BlockLoad(tmp).Load(p, items, valid,
dflt)` of a `cub::BlockLoad<T, X, ITEMS, BLOCK_LOAD_VECTORIZE>` is CUB's loop of ITEMS loads each
under `i < valid` (`LoadDirectBlocked`: one narrow load a step, never vectorized), while the
unguarded `Load(p, items)` is its vector load. Where every one of this thread's items is valid,
both load the same items, so

    if (valid >= (threadIdx.x + 1) * ITEMS && p is 16-byte aligned)  BlockLoad(tmp).Load(p, items);
    else                                                             BlockLoad(tmp).Load(p, items, valid, dflt);

Exact: `valid` is read once into the `int` CUB's parameter converts it to; the check is per thread
(the thread's linear index is threadIdx.x where the alias gives no y or z extent: exactly four
template arguments), which the vectorized and direct algorithms allow as they hold no barrier or
shuffle; the alignment check is there for CUB versions whose vector path does not check it
itself. Only calls whose arguments compute nothing (no call, assignment or increment) are taken,
so evaluating the pointer twice changes nothing."""
from __future__ import annotations

from tree_sitter import Node

from .base import pointer_params
from .tree import Edit, idents, line_indent, txt, unparenthesized, walk

IMPURE = {"call_expression", "assignment_expression", "update_expression", "comma_expression", "lambda_expression"}


def _vector_loaders(scopes: list[Node]) -> dict[str, str]:
    """Alias name -> ITEMS (as written) for each `typedef`/`using` of a vectorized `BlockLoad`
    with exactly four template arguments, in the given scopes (not below them into functions)."""
    out: dict[str, str] = {}
    for sc in scopes:
        for n in sc.named_children:
            if n.type == "type_definition":
                t, names = n.child_by_field_name("type"), [txt(d) for d in n.children_by_field_name("declarator")]
            elif n.type == "alias_declaration":
                ty = n.child_by_field_name("type")
                t = ty.named_children[0] if ty is not None and ty.named_children else None
                names = [txt(n.child_by_field_name("name"))]
            else:
                continue
            for name in names:
                out.pop(name, None)     # an inner scope's alias hides the file's
            while t is not None and t.type == "qualified_identifier":
                t = t.child_by_field_name("name")
            if t is None or t.type != "template_type" or txt(t.child_by_field_name("name")) != "BlockLoad":
                continue
            args = [a for a in t.child_by_field_name("arguments").named_children if a.type != "comment"]
            if len(args) == 4 and txt(args[3]).replace(" ", "").split("::")[-1] == "BLOCK_LOAD_VECTORIZE":
                for name in names:
                    out[name] = txt(args[2])
    return out


def guarded_loads(root: Node, fn: Node, kb: Node, data: bytes, taken: set[str]) -> list[tuple[Edit, str]]:
    """The edits that unswitch each guarded vectorized CUB block load in the kernel, with a line
    saying what each did."""
    loaders = _vector_loaders([root, kb])
    if not loaders:
        return []
    pointers = set(pointer_params(fn))
    out: list[tuple[Edit, str]] = []
    for call in (n for n in walk(kb) if n.type == "call_expression"):
        f = call.child_by_field_name("function")
        if f is None or f.type != "field_expression" or txt(f.child_by_field_name("field")) != "Load" or \
                txt(f.child_by_field_name("operator")) != ".":
            continue
        ctor = unparenthesized(f.child_by_field_name("argument"))
        if ctor.type != "call_expression" or txt(ctor.child_by_field_name("function")) not in loaders:
            continue
        ctor_args = [a for a in ctor.child_by_field_name("arguments").named_children if a.type != "comment"]
        args = [a for a in call.child_by_field_name("arguments").named_children if a.type != "comment"]
        stmt = call.parent
        if len(ctor_args) > 1 or len(args) not in (3, 4) or stmt is None or stmt.type != "expression_statement":
            continue    # a given linear index, the unguarded form, or a load inside an expression
        if any(n.type in IMPURE for a in [*ctor_args, *args] for n in walk(a)):
            continue
        if args[1].type != "identifier" or not idents(args[0]) & pointers or \
                any(i.startswith("astra_valid") for i in idents(args[2])):
            continue    # not a pointer, or the fallback of a load already unswitched
        items = loaders[txt(ctor.child_by_field_name("function"))]
        k = 0
        while f"astra_valid{k}" in taken:
            k += 1
        taken.add(f"astra_valid{k}")
        v = f"astra_valid{k}"
        ind = line_indent(data, stmt.start_byte)
        head = txt(f)
        ptr, dst = txt(args[0]), txt(args[1])
        rest = f", {txt(args[3])}" if len(args) == 4 else ""
        new = (f"{{\n{ind}  // astra: all of this thread's items valid and the start aligned: CUB's vector load\n"
               f"{ind}  const int {v} = {txt(args[2])};\n"
               f"{ind}  if ({v} >= ((long long)threadIdx.x + 1) * ({items}) &&\n"
               f"{ind}      reinterpret_cast<unsigned long long>({ptr}) % 16 == 0)\n"
               f"{ind}    {head}({ptr}, {dst});\n"
               f"{ind}  else\n"
               f"{ind}    {head}({ptr}, {dst}, {v}{rest});\n"
               f"{ind}}}")
        out.append((Edit(stmt.start_byte, stmt.end_byte, new),
                    f"the guarded block load `{txt(call)}` takes CUB's unguarded vector load where all "
                    f"{items} items of the thread are valid"))
    return out
