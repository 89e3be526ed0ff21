"""A rewrite a reviewer can read: the last pass over a verified optimization before it is offered
(`polish`), and the grid arithmetic the launch-changing transformations write (`div_up`,
`spec_div_up`).

While the offline team works, its names carry an `astra_` prefix (later transformations find
earlier ones by them, and they never clash with the user's). The offered text uses ordinary
names — `vec`, `i0`, `v0` — wherever such a name is free in the file (the prefix stays only on a
real clash), comments lose their `astra:` tag, and the changed lines follow the project's
`.clang-format` when there is one (clang-format from PyPI). Renaming identifiers that clash with
nothing and reformatting change no behaviour; the orchestrator still verifies (and, on a GPU,
times) the polished text before it replaces the best one.

A launch that covers k times fewer blocks is written as the file would write it: its own
ceil-division helper or `(n + 1023) / 1024`, not `(dim3((n + 256 - 1) / 256).x + 3) / 4`; the
spec's `cdiv(cdiv(n, 256), 4)` becomes `cdiv(n, 1024)` (equal for the non-negative sizes a spec has).
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
from pathlib import Path

from ...model import source
from ...model.syntax import walk
from . import helpers

PREFIX = "astra_"
# Names a rename must never produce: C++ keywords and CUDA's built-in variables.
RESERVED = frozenset("""alignas alignof and asm auto bool break case catch char class const constexpr const_cast
continue decltype default delete do double dynamic_cast else enum explicit export extern false float for friend
goto if inline int long mutable namespace new noexcept not nullptr operator or private protected public register
reinterpret_cast return short signed sizeof static static_assert static_cast struct switch template this
thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
threadIdx blockIdx blockDim gridDim warpSize half float2 float4 uint4 int4 dim3 min max""".split())
CEIL_DIV_HELPERS = ("ceil_div", "cdiv", "div_up", "DIV_UP", "CEIL_DIV", "DIVUP", "iDivUp", "divUp", "ceildiv",
                    "CeilDiv", "div_round_up", "DIV_ROUND_UP")
FORMAT_TIMEOUT_S = 20


_PROSE = ("comment", "string_literal", "raw_string_literal", "char_literal", "system_lib_string")


def _names(text: str) -> set[str]:
    """Every identifier-like name in `text` (identifiers, types, fields, macros and the words of
    macro bodies) outside comments and string literals: what a new name must not be. (`"%d\\n"`
    holds no variable `n`.)"""
    data = bytearray(text.encode("utf-8"))
    for n in walk(source.parser().parse(bytes(data)).root_node):
        if n.type in _PROSE:
            data[n.start_byte:n.end_byte] = b" " * (n.end_byte - n.start_byte)
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", data.decode("utf-8", "replace")))


def plain_names(text: str, original: str) -> str:
    """`astra_x` -> `x` for each name the rewrite introduced, where `x` is free: not a name of
    the file (before or after), not a keyword or built-in, not another rename's result."""
    tree = source.parser().parse(text.encode("utf-8"))
    ours = sorted({n.text.decode() for n in walk(tree.root_node)
                   if n.type in ("identifier", "field_identifier", "type_identifier")
                   and n.text.decode().startswith(PREFIX)} - _names(original))
    taken = (_names(text) - set(ours)) | RESERVED
    rename: dict[str, str] = {}
    for name in ours:
        plain = name[len(PREFIX):]
        if plain and not plain[0].isdigit() and plain not in taken:
            rename[name] = plain
            taken.add(plain)
    if not rename:
        return text
    data = text.encode("utf-8")
    edits = [(n.start_byte, n.end_byte, rename[n.text.decode()]) for n in walk(tree.root_node)
             if n.type in ("identifier", "field_identifier", "type_identifier") and n.text.decode() in rename]
    out, pos = [], 0
    for start, end, new in sorted(edits):
        out += [data[pos:start], new.encode("utf-8")]
        pos = end
    out.append(data[pos:])
    return b"".join(out).decode("utf-8")


def tidy_comments(text: str, original: str) -> str:
    """The offline team's `// astra: what` comments, on lines the rewrite added, read `// what`."""
    kept = set(original.split("\n"))
    return "\n".join(line if line in kept else re.sub(r"//\s*astra(-note)?:\s*", "// ", line, count=1)
                     for line in text.split("\n"))


def style_file(path: str | None, root: str | None = None) -> Path | None:
    """The project's `.clang-format` (or `_clang-format`) for `path`: in its folder or above, up
    to `root` (else the file system's top)."""
    if not path:
        return None
    d = Path(path).resolve().parent
    stop = Path(root).resolve() if root else None
    for folder in (d, *d.parents):
        for name in (".clang-format", "_clang-format"):
            if (folder / name).is_file():
                return folder / name
        if stop is not None and folder == stop:
            break
    return None


def _clang_format() -> str | None:
    try:
        import clang_format
    except ImportError:
        return None
    exe = clang_format.get_executable("clang-format")
    return exe if os.access(exe, os.X_OK) else None


def changed_lines(original: str, text: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of `text` that differ from `original`."""
    a, b = original.split("\n"), text.split("\n")
    out = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert") and j2 > j1:
            out.append((j1 + 1, j2))
    return out


def project_format(text: str, original: str, path: str | None, root: str | None = None) -> str:
    """The lines the rewrite changed, formatted by the project's `.clang-format`; the text as it
    is when the project has none, clang-format is missing, or it fails."""
    style = style_file(path, root)
    exe = _clang_format()
    lines = changed_lines(original, text)
    if style is None or exe is None or not lines:
        return text
    cmd = [exe, f"--style=file:{style}", f"--assume-filename={path}"] + [f"--lines={a}:{b}" for a, b in lines]
    try:
        p = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S,
                           cwd=str(style.parent))
    except (OSError, subprocess.SubprocessError):
        return text
    return p.stdout if p.returncode == 0 and p.stdout.strip() else text


_DECLARES = ("declaration", "type_definition", "alias_declaration", "using_declaration", "struct_specifier",
             "class_specifier", "enum_specifier", "union_specifier", "namespace_alias_definition")


def flat_blocks(text: str, original: str) -> str:
    """A block the rewrite wrote directly inside another (`for (...) { { x; } }`, the original
    loop body pasted under a new loop) loses its extra braces where that changes no scope: it is
    the loop body's only statement, or it declares nothing itself."""
    added = [range(a, b + 1) for a, b in changed_lines(original, text)]

    def new(row: int) -> bool:   # 0-based row of `text`
        return any(row + 1 in r for r in added)
    tree = source.parser().parse(text.encode("utf-8"))
    lines = text.split("\n")
    drop: set[int] = set()
    dedent: dict[int, int] = {}
    for n in walk(tree.root_node):
        p = n.parent
        if n.type != "compound_statement" or p is None or p.type != "compound_statement":
            continue
        whole_body = p.named_child_count == 1 and p.parent is not None \
            and p.parent.type in ("for_statement", "while_statement", "do_statement")
        if not whole_body and any(c.type in _DECLARES for c in n.named_children):
            continue   # its names would then live in the enclosing block
        top, bottom = n.start_point[0], n.end_point[0]
        if not (new(top) and new(bottom) and bottom > top + 1 and lines[top].strip() == "{"
                and lines[bottom].strip() == "}" and not drop & {top, bottom}):
            continue
        inner = [r for r in range(top + 1, bottom) if lines[r].strip()]
        by = min(len(lines[r]) - len(lines[r].lstrip(" ")) for r in inner) - (len(lines[top]) - len(lines[top].lstrip(" ")))
        drop |= {top, bottom}
        for r in range(top + 1, bottom):
            dedent[r] = max(dedent.get(r, 0), by) if by > 0 else dedent.get(r, 0)
    if not drop:
        return text
    out = []
    for r, line in enumerate(lines):
        if r in drop:
            continue
        k = dedent.get(r, 0)
        out.append(line[k:] if line[:k].strip() == "" else line)
    return "\n".join(out)


def polish(text: str, original: str, path: str | None = None, root: str | None = None) -> str:
    """The verified rewrite as a person would write it: ordinary names, plain comments, no
    doubled braces, the project's format on the changed lines."""
    text = flat_blocks(tidy_comments(plain_names(text, original), original), original)
    return project_format(text, original, path, root)


def readable(text: str, original: str, path: str | None = None) -> str | None:
    """`polish(text)` where it differs from `text`; None where it does not, or where polishing
    fails on a text this module did not foresee (the rewrite is then offered as written)."""
    try:
        out = polish(text, original, path)
    except Exception:   # noqa: BLE001 - a readable form is a nicety, never a reason to lose the rewrite
        return None
    return out if out != text else None


# ---- grids ---------------------------------------------------------------------------------------

def _int(s: str) -> int | None:
    s = s.strip()
    return int(s) if re.fullmatch(r"\d+", s) else None


def strip_parens(s: str) -> str:
    s = s.strip()
    while s.startswith("(") and s.endswith(")") and _balanced(s[1:-1]):
        s = s[1:-1].strip()
    return s


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def _split_call(expr: str) -> tuple[str, list[str]] | None:
    m = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_:]*)\s*\((.*)\)\s*", expr, re.S)
    if m is None or not _balanced(m.group(2)):
        return None
    parts, depth, cur = [], 0, ""
    for ch in m.group(2):
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch in "([{<") - (ch in ")]}>")
        cur += ch
    parts.append(cur)
    return m.group(1), [p.strip() for p in parts]


def spec_div_up(grid: str, k: int) -> str:
    """The spec's grid with k times fewer blocks: `cdiv(n, 256)` -> `cdiv(n, 256 * k)`."""
    call = _split_call(grid)
    if call is not None and call[0] == "cdiv" and len(call[1]) == 2 and _int(call[1][1]) is not None:
        return f"cdiv({call[1][0]}, {_int(call[1][1]) * k})"  # type: ignore[operator]
    return f"cdiv({grid}, {k})"


def spec_regrid(grid: str, block: str, per: int) -> str:
    """The spec's grid when each block of `block` threads now covers `per` elements:
    `cdiv(cdiv(n, 256) * 256, 2048)` is `cdiv(n, 2048)` (2048 a multiple of 256)."""
    call = _split_call(grid)
    b = _int(block)
    if call is not None and call[0] == "cdiv" and len(call[1]) == 2 and b is not None \
            and _int(call[1][1]) == b and per % b == 0:
        return f"cdiv({call[1][0]}, {per})"
    g = grid if re.fullmatch(r"[\w.]+", grid.strip()) or call is not None else f"({grid})"
    bl = block if re.fullmatch(r"[\w.]+", block.strip()) else f"({block})"
    return f"cdiv({g} * {bl}, {per})"


def div_up(grid: str, k: int, file_text: str = "", headers: tuple[str, ...] = ()) -> str:
    """C++ for ceil(grid / k) at a launch site, as the file would write it: a ceil-division of a
    literal folded (`(n + 255) / 256` -> `(n + 1023) / 1024`, `ceil_div(n, 256)` ->
    `ceil_div(n, 1024)`), else the file's own helper, else `(grid + k - 1) / k`; a grid that may
    be a `dim3` keeps its `.x`. The file's helper is one whose definition is a ceil division
    (`helpers.ceil_div`), whatever its name, in the file or the project headers it includes."""
    g = strip_parens(grid)
    call = _split_call(g)
    own = helpers.ceil_div(file_text, headers) if file_text or headers else None
    if call is not None and len(call[1]) == 2 and (
            call[0] == own or call[0].split("::")[-1] in CEIL_DIV_HELPERS
            and call[0].split("::")[-1] not in helpers.defined_functions(file_text, headers)):
        # the file's ceil-division (a helper of a well-known name it does not define otherwise):
        # ceil(ceil(x / b) / k) == ceil(x / (b * k)) for x >= 0, b, k >= 1
        b = _int(call[1][1])
        if b is not None:
            return f"{call[0]}({call[1][0]}, {b * k})"
        if re.fullmatch(r"[A-Za-z_]\w*", call[1][1]):
            return f"{call[0]}({call[1][0]}, {call[1][1]} * {k})"
    m = re.fullmatch(r"\((.+)\)\s*/\s*([A-Za-z_]\w*|\d+)", g, re.S)
    if m is not None and _balanced(m.group(1)):
        inner, a = strip_parens(m.group(1)), m.group(2)
        adds = [rf"\+\s*{a}\s*-\s*1", rf"\+\s*\(\s*{a}\s*-\s*1\s*\)"]
        adds += [rf"\+\s*{int(a) - 1}"] if a.isdigit() else []
        for add in adds:
            mm = re.fullmatch(rf"(.+?)\s*{add}", inner, re.S)
            if mm is not None and _balanced(mm.group(1)):
                # ceil(ceil(x / a) / k) == ceil(x / (a * k)) for x >= 0, a, k >= 1
                if a.isdigit():
                    return f"({mm.group(1).strip()} + {int(a) * k - 1}) / {int(a) * k}"
                return f"({mm.group(1).strip()} + {a} * {k} - 1) / ({a} * {k})"
    dim3 = call is not None and call[0] == "dim3" or (re.fullmatch(r"[A-Za-z_]\w*", g) is not None and
                                                      _declared_dim3(file_text, g))
    x = f"dim3({g}).x" if dim3 else (g if re.fullmatch(r"[\w.]+", g) or call is not None else f"({g})")
    if own is not None:
        return f"{own}({x}, {k})"
    return f"({x} + {k - 1}) / {k}"


def _declared_dim3(file_text: str, name: str) -> bool:
    """The file declares `name` as a `dim3` (`dim3 grid(...)`, `dim3 block, grid;` ...)."""
    from .tree import declared_name, txt
    if name not in file_text:
        return False
    r = source.parser().parse(file_text.encode("utf-8", "surrogateescape")).root_node
    return any(n.type == "declaration" and txt(n.child_by_field_name("type")).split("::")[-1] == "dim3" and
               any(declared_name(d)[0] == name for d in n.children_by_field_name("declarator")) for n in walk(r))
