"""Pointers to records read through their fields (issue 25, item 6): DeepSpeed's ragged ops read
counts and offsets from descriptor structs in device memory (`batch->n_sequences`,
`const Seq s = seqs[i]; s.start_idx`).

As `structs` does for a struct passed by value, `flatten` writes the kernel into a copy of the file
with each such pointer split into its fields: a pointer read only at its first record
(`batch->n`) becomes one number per field (`int batch__n`), one read at an index (`seqs[i].start`,
or through a local copy of `seqs[i]`) one array per field (`const int* seqs__start`, read at
`seqs__start[i]`) — so every other part of inference reads counts as sizes and offsets as index
arrays. `unflatten` writes the proposal back in the spec format's terms: `batch = { records = 1,
n = "n" }`, `seqs = { records = "<the arrays' length>", start = { init = "…" } }`. Only fields the
kernel reads are given (the others are zero), and only numbers (a record holding a pointer is
not flattened); a pointer used any other way (passed on whole, offset) is left as it is.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import source
from ..model.source import Kernel, SourceModel
from ..model.syntax import walk
from .program import launches_in
from .structs import SEP, block_dim, enclosing_function, function_at, launch_call, struct_fields


@dataclass(frozen=True)
class Records:
    model: SourceModel
    kernel: Kernel
    fields: dict[str, tuple[str, ...]]   # pointer parameter -> the fields the kernel reads, in order
    single: frozenset[str]               # parameters read only at their first record: numbers, not arrays
    # a count the kernel returns early at (`if (blockIdx.y >= batch->n_seqs) return;`) -> the grid
    # dimension: given as the grid's count along it (a padded batch's every block works)
    counts: dict[tuple[str, str], int]


def flatten(kernel: Kernel, model: SourceModel, items, known) -> Records | None:
    """The file with the kernel's pointers to records split into their fields; None when it has
    none (`known` resolves a type Astra reads as a number: no struct)."""
    data = model.text.encode("utf-8")
    tree = source.parser().parse(data)
    fn = function_at(tree.root_node, kernel.span.start_byte, kernel.name)
    body = fn.child_by_field_name("body") if fn is not None else None
    if body is None:
        return None
    edits: list[tuple[int, int, str]] = []
    fields: dict[str, tuple[str, ...]] = {}
    single: set[str] = set()
    counts: dict[tuple[str, str], int] = {}
    for p in kernel.params:
        base = " ".join(w for w in p.base_type.split() if w not in ("const", "volatile", "__restrict__", "struct"))
        if not p.is_pointer or p.type.count("*") != 1 or base == "void" or known(base):
            continue
        members = struct_fields(base, items)
        if members is None:
            continue
        uses = _uses(body, p.name)
        types = dict((f, t) for t, f in members)
        if uses is None or not uses[0] or any(f not in types or "*" in types[f] for _, f, _ in uses[0]):
            continue
        reads, copies = uses
        read = tuple(dict.fromkeys(f for _, f, _ in reads))
        one = all(idx == "0" for _, _, idx in reads)
        fields[p.name] = read
        if one:
            single.add(p.name)
        typed = [_number(types[f]) for f in read]
        edits.append((p.span.start_byte, p.span.end_byte, ", ".join(
            f"{t} {p.name}{SEP}{f}" if one else f"const {t}* {p.name}{SEP}{f}" for t, f in zip(typed, read))))
        for node, f, idx in reads:
            dim = _guard_dim(node, body) if one else None
            if dim is not None:   # read as the grid's count, so inference does not take it for a size of its own
                counts[(p.name, f)] = dim
                edits.append((node.start_byte, node.end_byte, f"gridDim.{'xyz'[dim]}"))
                continue
            edits.append((node.start_byte, node.end_byte, f"{p.name}{SEP}{f}" if one else f"{p.name}{SEP}{f}[{idx}]"))
        edits += [(d.start_byte, d.end_byte, "") for d in copies]
    if not fields:
        return None
    index = {p.name: i for i, p in enumerate(kernel.params)}
    for site in launches_in(model, kernel.name):
        call = launch_call(tree.root_node, site)
        args = call.child_by_field_name("arguments") if call is not None else None
        if args is None or enclosing_function(call) is None:
            continue
        for name, read in fields.items():
            i = index[name]
            if i < len(args.named_children):
                a = args.named_children[i]
                edits.append((a.start_byte, a.end_byte, ", ".join(f"{name}{SEP}{f}" for f in read)))
    out = bytearray(data)
    for start, end, new in sorted(set(edits), reverse=True):
        out[start:end] = new.encode("utf-8")
    flat_model = source.parse(out.decode("utf-8"), model.items[0].path if model.items else None)
    flat = next((k for k in flat_model.kernels if k.qualified_name == kernel.qualified_name), None)
    if flat is None:
        return None
    return Records(flat_model, flat, fields, frozenset(single), counts)


def _guard_dim(node, body) -> int | None:
    """The grid dimension D where `node` is the count of `if (i >= node) return;`, i a block index
    along D (or a local set from it)."""
    up = node.parent
    while up is not None and up.type == "parenthesized_expression":
        up = up.parent
    if up is None or up.type != "binary_expression" or up.child_by_field_name("right") != node:
        return None
    op = up.child_by_field_name("operator")
    cond = up.parent
    while cond is not None and cond.type in ("parenthesized_expression", "condition_clause"):
        cond = cond.parent
    if op is None or op.text != b">=" or cond is None or cond.type != "if_statement":
        return None
    then = cond.child_by_field_name("consequence")
    if then is None or not then.text.decode().strip(" {};\n").startswith("return"):
        return None
    left = up.child_by_field_name("left")
    return block_dim(left.text.decode().strip(), body) if left is not None else None


def _number(type_text: str) -> str:
    return " ".join(w for w in type_text.split() if w not in ("const", "volatile")) or "int"


def _uses(body, name: str):
    """How the kernel reads pointer `name`: ([(node, field, index text)], [local copies' declarations])
    where every use is `name->f`, `name[i].f` or a local copy `T v = name[i];` read as `v.f`;
    None where it is used any other way."""
    reads: list[tuple[object, str, str]] = []
    copies: list = []
    covered: set[int] = set()
    copy_of: dict[str, str] = {}
    copy_ids: set[int] = set()
    for n in walk(body):
        if n.type == "init_declarator":
            value, decl = n.child_by_field_name("value"), n.child_by_field_name("declarator")
            if value is not None and value.type == "subscript_expression" and decl is not None \
                    and decl.type == "identifier" and _is(value.child_by_field_name("argument"), name) \
                    and n.parent is not None and n.parent.type == "declaration" \
                    and len([c for c in n.parent.named_children if c.type == "init_declarator"]) == 1:
                copy_of[decl.text.decode()] = _index(value)
                copies.append(n.parent)
                covered.add(value.child_by_field_name("argument").start_byte)
                copy_ids.add(decl.start_byte)
    for n in walk(body):
        if n.type != "field_expression":
            continue
        arg, op, fld = n.child_by_field_name("argument"), n.child_by_field_name("operator"), n.child_by_field_name("field")
        if arg is None or fld is None or op is None:
            continue
        if op.text == b"->" and _is(arg, name):
            reads.append((n, fld.text.decode(), "0"))
            covered.add(arg.start_byte)
        elif op.text == b"." and arg.type == "subscript_expression" and _is(arg.child_by_field_name("argument"), name):
            reads.append((n, fld.text.decode(), _index(arg)))
            covered.add(arg.child_by_field_name("argument").start_byte)
        elif op.text == b"." and arg.type == "identifier" and arg.text.decode() in copy_of:
            reads.append((n, fld.text.decode(), copy_of[arg.text.decode()]))
            copy_ids.add(arg.start_byte)
    for n in walk(body):
        if n.type != "identifier":
            continue
        if n.text.decode() == name and n.start_byte not in covered:
            return None   # passed on whole, offset, compared: not only its fields are read
        if n.text.decode() in copy_of and n.start_byte not in copy_ids:
            return None
    return reads, copies


def _grid(comment: str) -> list[str]:
    m = re.search(r"^grid = \[(.*)\]$", comment, re.M)
    return [x.strip().strip('"') for x in m.group(1).split('", ')] if m else []


def _is(node, name: str) -> bool:
    return node is not None and node.type == "identifier" and node.text.decode() == name


def _index(subscript) -> str:
    idx = subscript.child_by_field_name("indices") or subscript.child_by_field_name("index")
    text = idx.text.decode().strip() if idx is not None else "0"
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    return text if re.fullmatch(r"\w+", text) else f"({text})"


def unflatten(comment: str, notes: list[str], rec: Records) -> tuple[str, list[str]]:
    """The proposal in the spec format's terms: the `r__f = …` lines of one pointer become one
    `r = { records = …, f = … }` line (an array's init becomes the field's, its length the records'
    count); a size named `r__f` becomes `f` where no other name of the proposal is `f`."""
    flat = {f"{r}{SEP}{f}": (r, f) for r, fs in rec.fields.items() for f in fs}
    taken = set(re.findall(r"\w+", comment)) - set(flat)
    renames: dict[str, str] = {}
    for name, (r, f) in flat.items():
        # `n_tokens`, else `batch_metadata_n_tokens` (the pointer's last name: a struct's field)
        for new in (f, f"{r.split(SEP)[-1]}_{f}", name):
            if new == name or (new not in taken and new not in renames.values()):
                renames[name] = new
                break
    lines, table = comment.split("\n"), ""
    given: dict[str, list[tuple[str, str]]] = {}
    counts: dict[str, str] = {}
    first: dict[str, int] = {}
    width: dict[str, int] = {}
    dropped: set[int] = set()
    for i, line in enumerate(lines):
        if line.startswith("["):
            table = line.strip()
        m = re.match(r"(\w+)\s*=\s*(.*)$", line)
        if table != "[args]" or m is None or m.group(1) not in flat:
            continue
        r, f = flat[m.group(1)]
        value = m.group(2).strip()
        if r not in rec.single:
            shape = re.search(r'shape = \[\s*("[^"]*"|\d+)', value)
            init = re.search(r'init = ("[^"]*")', value)
            if shape is not None and shape.group(1) not in ('"1"', "1"):
                counts.setdefault(r, shape.group(1))
            value = f"{{ init = {init.group(1) if init else chr(34) + 'normal' + chr(34)} }}"
        given.setdefault(r, []).append((f, value))
        if r in first:
            dropped.add(i)
        else:
            first[r] = i
            width[r] = len(line) - len(line[len(m.group(1)):].lstrip())   # the column of `=`: kept
    grid = _grid(comment)
    for (r, f), dim in rec.counts.items():
        if dim < len(grid):
            given.setdefault(r, [])
            given[r] = [(g, v) for g, v in given[r] if g != f] + [(f, f'"{grid[dim]}"')]
            if r not in first:   # no line of its own (the count was its only field read)
                continue
    for r, i in first.items():
        count = "1" if r in rec.single else counts.get(r, "1")
        lines[i] = f"{r:<{width[r]}}= {{ records = {count}, " + ", ".join(f"{f} = {v}" for f, v in given[r]) + " }"
    comment = "\n".join(ln for i, ln in enumerate(lines) if i not in dropped)

    def sub(s: str) -> str:
        return re.sub(r"\w+", lambda m: renames.get(m.group(0), m.group(0)), s)
    named = [re.sub(r"`(\w+)`", lambda m: f"`{'->'.join(flat[m.group(1)])}`" if m.group(1) in flat else m.group(0), n)
             for n in notes]
    comment = sub(comment)
    for r, f in rec.counts:   # the size the count's own parameter was given, now unused
        size = renames.get(f"{r}{SEP}{f}", "")
        body = [ln for ln in comment.split("\n") if not re.match(rf"{re.escape(size)}\s*=", ln)]
        # a use is a value's word, not a field's key (`n_sequences = "n_seqs"` in the records' line)
        if size and not re.search(rf"\b{re.escape(size)}\b(?!\s*=[^=])", "\n".join(body)):
            comment = "\n".join(body)
    return comment, [sub(n) for n in named]
