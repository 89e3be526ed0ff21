"""Help inside a `/* @astra ... */` comment, so the spec teaches itself: what each key means (hover),
what may be written where the cursor is (completion: keys, table names, element types, init
kinds, the kernel's own parameter and size names), and which lines of a proposed spec were
guessed, with the evidence inference gave (`guessed_lines`, from `infer`'s ranked notes).

Pure: text and the source model in, plain data out; positions are 0-based lines and columns of
the file. The language server turns these into LSP types.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .. import plain
from . import dtypes, tomlpos
from .source import Kernel
from .harness import ACCESSOR, CONSTRUCT, RECORDS
from .spec import ARRAY_KEYS, INITS, SCALAR_KEYS, TOP_KEYS

# One sentence or two per key: the README's "Harness spec" section, where the cursor is.
KEY_DOCS: dict[str, str] = {
    "grid": "Launch grid: up to 3 integer expressions over the sizes, e.g. `grid = [\"cdiv(n, 256)\"]`.",
    "block": "Threads per block: up to 3 integer expressions over the sizes, e.g. `block = [256]` "
             "(at most 1024 threads in all).",
    "shared_mem": "Dynamic shared memory in bytes, an expression over the sizes (default `\"0\"`).",
    "reference": "Another kernel of this file, taking the same parameters, that this one must match. "
                 "Default: this kernel's pinned baseline (the first passing check pins it).",
    "instantiate": "Template arguments of a templated kernel, e.g. `instantiate = \"<__half, 4>\"`: types "
                   "and integer constants only.",
    "require": "Preconditions over the sizes, e.g. `require = [\"d % 2 == 0\"]`: cases that break one "
               "are not generated.",
    "sizes": "`[sizes]`: the test sizes, one list per size name (`n = [1, 1000, 4096]`); the cases are "
             "their cartesian product (capped by `max_cases`).",
    "bench": "`[bench]`: the sizes that are timed (names left out take their largest test size). "
             "Default: the largest test case.",
    "args": "`[args]`: every kernel parameter by name: a pointer as `{ type = ..., shape = [...] }`, a "
            "scalar as an expression over the sizes, a struct passed by value by its fields "
            "(`p.out = { type = ..., shape = [...] }`, `p.n = \"n\"`), a pointer to structs by `records` and "
            "their fields, a tensor accessor passed by value as a buffer with `accessor = true`, an object of a class "
            "passed by value by the call that builds it (`{ construct = \"fastdiv(n)\" }`).",
    "flops": "FLOP count of one launch, an expression over the sizes (for FLOP/s in the profile).",
    "seeds": "Input seeds per case (1 to 16, default 2).",
    "max_cases": "At most this many test cases (1 to 1024, default 24): the smallest, the largest and an "
                 "even spread.",
    # inside a pointer's or a scalar's table in [args]
    "type": "Element type: `half`, `bfloat16`, `float`, `double`, `float8_e4m3fn`, `float8_e5m2`, `int8`…`int64`, `uint8`…`uint64`, "
            "`bool`. A vector pointer (`half2*`) is described by its lane type.",
    "shape": "The buffer's shape: a list of size expressions, e.g. `[\"num_tokens\", \"2 * d\"]` "
             "(a vector pointer's shape counts lanes).",
    "output": "`output = true`: the kernel writes this buffer; it is compared with the reference's.",
    "inout": "`inout = true`: read, then written in place; compared with the reference's.",
    "init": "How inputs are filled: `normal`, `normal(mean, std)`, `uniform(a, b)`, `randint(a, b)` "
            "(b excluded; the bounds may use sizes), `arange`, `zeros`, `ones`, `permutation` (0 … n-1 each once, "
            "shuffled: the indices of a scatter; `permutation(V)`: n distinct values of 0 … V-1, a scatter into V "
            "slots, V a size or number), `offsets(total)` (segment boundaries, a CSR `indptr`: 0 first, "
            "`total` last, never decreasing).",
    "flag": "`flag = true`: an output that reports a status, written only as constants (`valid[b] = true`): "
            "the same value everywhere is no failure; it is still compared with the reference's.",
    "atol": "Absolute tolerance of this output (default: by its type).",
    "rtol": "Relative tolerance of this output (default: by its type).",
    "value": "The scalar's value: an expression over the sizes.",
    "table": "`table = \"layers\"`: this `T**` (or pointer to 64-bit integers holding addresses) is a "
             "table of that many device pointers, each to its own buffer of `shape`.",
    "accessor": "`accessor = true`: this parameter is a tensor accessor passed by value (torch's "
                "`PackedTensorAccessor32<T, N>`): Astra fills its data pointer, sizes (the `shape`, N of them) "
                "and contiguous strides from the buffer, where the compiler lays them out.",
    "construct": "`construct = \"fastdiv(page)\"`: an object of a class passed by value (a parameter or a "
                 "struct's field), built by this constructor or function call over the sizes in a host program "
                 "compiled with the kernel; its bytes are passed.",
    "records": "`records = \"n\"`: this pointer points to that many structs in device memory (descriptor "
               "records), given by their fields: `{ records = \"n\", start = { init = \"randint(0, t)\" }, len = 1 }`.",
}
TABLES = ("sizes", "bench", "args")
FUNCTIONS = ("min", "max", "cdiv", "gcd", "next_pow2", "last_pow2")


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str            # 'key' | 'table' | 'type' | 'init' | 'size' | 'param' | 'function'
    detail: str = ""
    doc: str = ""
    insert: str = ""     # a snippet ($1, ${1:...}); '' means the label
    replace: tuple[int, int] | None = None   # file columns on the cursor's line the item replaces


@dataclass(frozen=True)
class Where:
    """Where the cursor is inside a spec comment."""
    section: str | None          # None: the top level; 'sizes', 'bench', 'args'
    inline: str | None           # in [args], inside this parameter's `{ ... }`
    key: str | None              # the key of the value the cursor is in (None: at a key position)
    in_string: bool              # inside a quoted string
    word: str                    # the identifier being typed
    span: tuple[int, int] = (0, 0)   # file columns of what a chosen item replaces: the word under
                                     # the cursor, or inside a string its whole text between the quotes


def _body_position(kernel: Kernel, line: int, col: int) -> tuple[int, int] | None:
    c = kernel.spec
    if c is None or not (c.span.start_line <= line <= c.span.end_line):
        return None
    first = c.body_first_line
    if line < first:
        return None
    i = line - first
    return i, (col - c.body_first_col if i == 0 else col)


def where(kernel: Kernel, line: int, col: int) -> Where | None:
    """What the cursor at (line, col) of the file is inside the kernel's spec comment, or None."""
    pos = _body_position(kernel, line, col)
    if pos is None or pos[1] < 0:
        return None
    assert kernel.spec is not None
    lines = kernel.spec.body.split("\n")
    if pos[0] >= len(lines):
        return None
    section = None
    for text in lines[:pos[0]]:
        m = re.match(r"\s*\[\s*([A-Za-z0-9_.-]+)\s*\]", text)
        if m:
            section = m.group(1).split(".")[0]
    text = lines[pos[0]]
    before, after = text[:pos[1]], text[pos[1]:]
    shift = col - pos[1]   # body columns -> file columns (the comment's first line starts mid-line)
    if re.match(r"\s*\[[A-Za-z0-9_]*$", before):
        word = before.strip()[1:]
        end = pos[1] + len(re.match(r"[A-Za-z0-9_]*", after).group(0))  # type: ignore[union-attr]
        return Where("[", None, None, False, word, (shift + pos[1] - len(word), shift + end))
    word = re.search(r"[A-Za-z0-9_]*$", before).group(0)  # type: ignore[union-attr]
    in_string = before.count('"') % 2 == 1
    if in_string:   # the string's whole text: choosing `bfloat16` in `"fl|oat"` gives `"bfloat16"`
        start, close = before.rfind('"') + 1, after.find('"')
        span = (shift + start, shift + pos[1] + (close if close >= 0 else len(after)))
    else:
        end = pos[1] + len(re.match(r"[A-Za-z0-9_]*", after).group(0))  # type: ignore[union-attr]
        span = (shift + pos[1] - len(word), shift + end)
    plain = re.sub(r'"[^"]*"?', '""', before)   # strings blanked: their commas and braces do not count
    inline = None
    brace = plain.rfind("{")
    scope = plain
    if brace >= 0 and plain.rfind("}") < brace:
        m = re.match(r"\s*\"?([A-Za-z0-9_]+)\"?\s*=", before)
        inline = m.group(1) if m else None
        scope = plain[brace + 1:]
    depth, segment = 0, ""
    for ch in scope:   # the last entry of the scope: after its last comma outside brackets
        depth += (ch == "[") - (ch == "]")
        segment = "" if ch == "," and depth == 0 else segment + ch
    m = re.match(r"\s*\"?([A-Za-z0-9_]+)\"?\s*=", segment)
    key = m.group(1) if m else None
    return Where(section, inline, key, in_string, word, span)


def _size_names(kernel: Kernel) -> list[str]:
    """Names a size could take: the kernel's integer scalar parameters."""
    return [p.name for p in kernel.params if not p.is_pointer and (dtypes.from_cpp(p.base_type) or
            dtypes.BY_NAME["float"]).name.startswith(("int", "uint"))]


def _present(kernel: Kernel) -> set[tuple[str, ...]]:
    """The key paths the comment has. While the user types the TOML is often broken: then each
    line's `key =` and `[table]` are read on their own (completion only filters by them)."""
    assert kernel.spec is not None
    found = set(tomlpos.index(kernel.spec.body))
    if found:
        return found
    section: tuple[str, ...] = ()
    for line in kernel.spec.body.split("\n"):
        m = re.match(r"\s*\[\s*([A-Za-z0-9_]+)\s*\]", line)
        if m:
            section = (m.group(1),)
            found.add(section)
            continue
        m = re.match(r"\s*\"?([A-Za-z0-9_]+)\"?\s*=", line)
        if m:
            found.add((*section, m.group(1)))
            brace = line.find("{")
            if section == ("args",) and brace >= 0:
                found.update(("args", m.group(1), k) for k in re.findall(r"([A-Za-z0-9_]+)\s*=", line[brace:]))
    return found


def completions(kernel: Kernel, line: int, col: int, sizes: list[str] | None = None) -> list[Completion]:
    """What may be written at (line, col) inside the kernel's spec comment ([] outside it), each
    with the columns of the cursor's line it replaces (the word, or a string's whole text).
    `sizes`: the size names the spec already defines (else read from the comment)."""
    w = where(kernel, line, col)
    if w is None:
        return []
    return [replace(c, replace=w.span) for c in _completions(kernel, w, sizes)]


def _completions(kernel: Kernel, w: Where, sizes: list[str] | None) -> list[Completion]:
    present = _present(kernel)
    if sizes is None:
        sizes = [p[1] for p in present if len(p) == 2 and p[0] == "sizes"]
    if w.section == "[":
        return [Completion(t, "table", f"[{t}]", KEY_DOCS[t]) for t in TABLES if (t,) not in present]
    params = {p.name: p for p in kernel.params}
    if w.key is None and not w.in_string:
        if w.section is None:
            keys = [k for k in sorted(TOP_KEYS - set(TABLES)) if (k,) not in present]
            return [Completion(k, "key", "spec key", KEY_DOCS[k], f"{k} = $0") for k in keys] + \
                   [Completion(f"[{t}]", "table", "table", KEY_DOCS[t], f"[{t}]\n$0") for t in TABLES
                    if (t,) not in present]
        if w.section in ("sizes", "bench"):
            names = list(dict.fromkeys([*_size_names(kernel), *sizes])) if w.section == "sizes" else sizes
            return [Completion(n, "size", f"size of [{w.section}]", "A size name: a list of integers.",
                               f"{n} = [$0]") for n in names if (w.section, n) not in present]
        if w.section == "args" and w.inline is None:
            out = []
            for name, p in params.items():
                if ("args", name) in present:
                    continue
                if p.is_pointer:
                    t = dtypes.from_cpp(p.base_type)
                    typ = t.name if t is not None else "float"
                    out.append(Completion(name, "param", p.type, f"Pointer parameter {plain.code(p.type)}.",
                                          f'{name} = {{ type = "${{1:{typ}}}", shape = [${{2}}] }}'))
                else:
                    out.append(Completion(name, "param", p.type, f"Scalar parameter {plain.code(p.type)}.",
                                          f'{name} = "${{1:{name if name in sizes else ""}}}"'))
            return out
        if w.section == "args" and w.inline in params:
            p = params[w.inline]
            arg_keys: set[str] = ARRAY_KEYS if p.is_pointer else SCALAR_KEYS
            if not p.is_pointer and "TensorAccessor" in p.type:   # a buffer in an object passed by value
                arg_keys = (ARRAY_KEYS - {"table"}) | {ACCESSOR}
            elif not p.is_pointer and dtypes.from_cpp(p.base_type) is None:
                arg_keys = arg_keys | {CONSTRUCT}   # an object of a class: built by a constructor
            if p.is_pointer and dtypes.from_cpp(p.base_type) is None and p.type.count("*") == 1:
                arg_keys = arg_keys | {RECORDS}   # a pointer to structs: records in device memory
            return [Completion(k, "key", f"{'pointer' if p.is_pointer else 'scalar'} key", KEY_DOCS[k],
                               f"{k} = $0") for k in sorted(arg_keys) if ("args", w.inline, k) not in present]
        return []
    if w.key == "type":
        return [Completion(d, "type", "element type", KEY_DOCS["type"],
                           d if w.in_string else f'"{d}"') for d in dtypes.BY_NAME]
    if w.key == "init":
        return [Completion(i, "init", "input values", KEY_DOCS["init"], i if w.in_string else f'"{i}"')
                for i in INITS]
    if w.key == "reference":
        return []
    if w.key in ("output", "inout"):
        return [Completion(v, "key", "", KEY_DOCS[w.key]) for v in ("true", "false")]
    if w.in_string:   # an expression: the sizes and the functions it may use
        return [Completion(s, "size", "size", "A size of [sizes].") for s in sizes] + \
               [Completion(f, "function", f"{f}(a, b)", "Integer function of expressions.", f"{f}($1, $2)")
                for f in FUNCTIONS]
    return []


def hover(kernel: Kernel, line: int, col: int) -> tuple[str, tuple[int, int, int, int]] | None:
    """(Markdown, file range of the word) documenting the key or table name under (line, col)
    in the kernel's spec comment."""
    pos = _body_position(kernel, line, col)
    c = kernel.spec
    if pos is None or c is None:
        return None
    lines = c.body.split("\n")
    if pos[0] >= len(lines):
        return None
    text = lines[pos[0]]
    for m in re.finditer(r"[A-Za-z0-9_]+", text):
        if m.start() <= pos[1] <= m.end():
            break
    else:
        return None
    if "#" in re.sub(r'"[^"]*"?', '""', text[:m.start()]):
        return None   # a TOML comment's words
    name, after = m.group(0), text[m.end():].lstrip().lstrip('"').lstrip()
    header = re.match(r"\s*\[\s*$", text[:m.start()]) is not None
    w = where(kernel, line, (c.body_first_col if pos[0] == 0 else 0) + m.start())
    doc = None
    if header:
        doc = KEY_DOCS.get(name) if name in TABLES else None
    elif after.startswith("=") and w is not None:
        if w.section is None or w.inline is not None:
            doc = KEY_DOCS.get(name)
        elif w.section == "args":
            p = next((p for p in kernel.params if p.name == name), None)
            doc = f"Parameter `{name}` of `{kernel.name}`: {plain.code(p.type)}. " + (
                KEY_DOCS["shape"] if p.is_pointer else KEY_DOCS["value"]) if p is not None else None
        elif w.section in ("sizes", "bench"):
            doc = f"Size `{name}`: {'the values tested' if w.section == 'sizes' else 'the values timed'}."
    if doc is None:
        return None
    first = c.body_first_line + pos[0]
    shift = c.body_first_col if pos[0] == 0 else 0
    return doc, (first, shift + m.start(), first, shift + m.end())


@dataclass(frozen=True)
class Guess:
    line: int        # 0-based line of the proposal comment
    note: str        # what inference says about it (its evidence)


def guessed_lines(comment: str, notes: list[str]) -> list[Guess]:
    """Each of inference's notes on the line of the proposed comment it is about: a parameter's
    note on its [args] line, a size's on its [sizes] line, the launch's on grid/block; a note
    about the whole proposal (how it ran) on the marker line. Notes keep their rank."""
    lines = comment.split("\n")
    mark = next((i for i, t in enumerate(lines) if "@astra" in t), 0)
    body = "\n".join(lines[mark:]).split("@astra", 1)[1] if "@astra" in comment else ""
    if body.rstrip().endswith("*/"):
        body = body.rstrip()[:-2]
    places = tomlpos.index(body)

    def line_of(path: tuple[str, ...]) -> int | None:
        p = places.get(path)
        return mark + p.key[0] if p is not None else None

    out: list[Guess] = []
    for note in notes:
        names = re.findall(r"`([^`]+)`", note)
        low = note.lower()
        line = None
        if names and note.startswith(f"`{names[0]}`"):
            line = line_of(("args", names[0]))
        if line is None and re.search(r"\bsizes?\b", low):
            for n in names:
                line = line_of(("bench", n)) if "bench" in low else None
                line = line if line is not None else line_of(("sizes", n))
                if line is not None:
                    break
            if line is None and "bench" in low:
                line = line_of(("bench",))
        if line is None:
            line = next((line_of(("args", n)) for n in names if line_of(("args", n)) is not None), None)
        if line is None:   # the launch: every key the note names ("grid and block are guesses")
            keys = [line_of((key,)) for key in ("grid", "block", "shared_mem", "instantiate", "require")
                    if re.search(rf"\b{key}\b", low) or (key == "instantiate" and "template" in low)]
            if any(k is not None for k in keys):
                out.extend(Guess(k, note) for k in keys if k is not None)
                continue
        if line is None:
            line = next((line_of((n,)) for n in names if line_of((n,)) is not None), None)
        out.append(Guess(line if line is not None else mark, note))
    return out
