"""`astra_cuda.model.spec.load`'s checks of a spec comment: its TOML (a syntax error at its place),
one validator per section (`Validator`: every problem collected at the line and column of its key
or value, with the closest known word as a "did you mean" and the `fix` an editor applies); the
checks that evaluate every case are `spec_cases`.

Long because [args] is one validator over every kind of argument the format has (buffers,
scalars, null pointers, tables, structs by value, pointers to records, tensor accessors): they share its checks of
types, expressions and places, and split apart they would each need the whole `Validator`."""
from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Iterable
from typing import Any

from . import construct, dtypes, exprs
from ..diagnostics import Diagnostic
from .harness import (ACCESSOR, ARRAY_KEYS, CONSTRUCT, ArgSpec, DEFAULT_MAX_CASES, FIELD_STEP, Init, MAX_CASES_CAP,
                       MAX_COMBINATIONS, MAX_FIELDS, MAX_FIELD_DEPTH, MAX_SEEDS, MAX_SIZE_NAMES,
                       MAX_SIZE_VALUES, MAX_SPEC_ERRORS, NULL, DRAWN_KEYS, RECORDS, SCALAR_KEYS, SpecErrors, TOP_KEYS,
                       combinations, parse_init)
from .source import Kernel, Param, SourceModel
from .spec_places import Locator, diag, did_you_mean
from .template_list import parse_template_args, split_template_args


def toml_of(kernel: Kernel, loc: Locator) -> dict[str, Any]:
    """The comment's TOML, or SpecErrors at the syntax error's place."""
    assert kernel.spec is not None
    try:
        return tomllib.loads(kernel.spec.body)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        if m:
            line, col = loc.at(int(m.group(1)) - 1, int(m.group(2)) - 1)
        else:
            line, col = kernel.spec.span.start_line, kernel.spec.span.start_col
        raise SpecErrors([diag(line, col, col + 1, f"TOML syntax error: {msg}")]) from None
    except RecursionError:  # tomllib descends once per nested [ or {
        s = kernel.spec.span
        raise SpecErrors([diag(s.start_line, s.start_col, s.start_col + 2,
                                "TOML nested too deeply (arrays or tables inside each other)")]) from None


class Validator:
    """One validator per section of a spec's TOML; every problem is collected (`errors`) at the
    line and column of its key, so a user sees them all at once."""

    def __init__(self, kernel: Kernel, model: SourceModel | None, loc: Locator, data: dict[str, Any]):
        self.kernel, self.model, self.loc, self.data = kernel, model, loc, data
        self.errors: list[Diagnostic] = []
        self.known: set[str] = set()  # the size names, once [sizes] is read

    def err(self, message: str, key: str, section: str | None = None) -> None:
        self.err_at(message, (key,) if section is None else (section, key))

    def err_at(self, message: str, path: tuple[str, ...], *, value: bool = False, fix: str = "") -> None:
        """A problem at the key of `path` (or its value), with what it should read instead."""
        line, col, end_line, end_col = self.loc.place(path, value)
        self.errors.append(diag(line, col, end_col, message, end_line=end_line, fix=fix))

    def unknown(self, what: str, word: str, known: Iterable[str], path: tuple[str, ...], *, value: bool = False,
                listing: bool = True) -> None:
        """`word` is not one of `known`: at its place, with the closest known word."""
        close = did_you_mean(word, known)
        hint = f"; did you mean {close!r}?" if close else (f" (known: {', '.join(sorted(known))})" if listing else "")
        fix = ""
        if close:
            table = isinstance(self._at(path), dict) and not value and len(path) == 1
            fix = f"[{close}]" if table else (f'"{close}"' if value else close)
        self.err_at(f"unknown {what} {word!r}{hint}", path, value=value, fix=fix)

    def _at(self, path: tuple[str, ...]) -> Any:
        node: Any = self.data
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        return node

    def top_keys(self) -> None:
        for k in [k for k in self.data if k not in TOP_KEYS][:MAX_SPEC_ERRORS]:
            self.unknown("key", k, TOP_KEYS, (k,))

    def dim_list(self, key: str) -> tuple[str, ...]:
        """`grid` or `block`: 1 to 3 integer expressions (required)."""
        v = self.data.get(key)
        if v is None:
            self.err(f"missing `{key}` (up to 3 integer expressions, e.g. {key} = [\"n\"])", key)
            return ()
        if isinstance(v, (str, int)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, list) or not (1 <= len(v) <= 3):
            self.err(f"`{key}` must be a list of 1 to 3 integer expressions", key)
            return ()
        return tuple(str(x) for x in v)

    def size_table(self, key: str, written: str | None = None) -> dict[str, list[int]]:
        """[key] (as `written`, when misspelt: its names still count, so one typo gives one error)."""
        key = written or key
        raw = self.data.get(key, {})
        if not isinstance(raw, dict):
            self.err(f"[{key}] must be a table of size name = list of integers", key)
            return {}
        if len(raw) > MAX_SIZE_NAMES:
            self.err(f"[{key}] names {len(raw)} sizes (at most {MAX_SIZE_NAMES})", key)
            return {}
        table = {}
        for name, vals in raw.items():
            if isinstance(vals, int) and not isinstance(vals, bool):
                vals = [vals]
            if not isinstance(vals, list) or not vals or not all(
                    isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in vals):
                self.err(f"size {name!r} must be a non-empty list of non-negative integers", name, key)
                continue
            if len(vals) > MAX_SIZE_VALUES:
                self.err(f"size {name!r} lists {len(vals)} values (at most {MAX_SIZE_VALUES})", name, key)
                continue
            if any(x >= 1 << 48 for x in vals):
                self.err(f"size {name!r}: {max(vals)} is too large for a size (at most 2**48)", name, key)
                continue
            table[name] = list(vals)
        if combinations(table) > MAX_COMBINATIONS:
            self.err(f"[{key}] makes {combinations(table)} combinations of sizes (at most {MAX_COMBINATIONS}): "
                     f"list fewer values", key)
            return {}
        return table

    def sizes(self) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        """[sizes] (required) and [bench], whose names must be among the sizes."""
        misspelt = None if "sizes" in self.data else next(
            (k for k in self.data if k not in TOP_KEYS and did_you_mean(k, TOP_KEYS) == "sizes"), None)
        sizes = self.size_table("sizes", misspelt)
        if "sizes" not in self.data and misspelt is None:
            self.err("missing [sizes] table (the test sizes, e.g. n = [1, 1000, 4096])", "sizes")
        bench = self.size_table("bench")
        for name in bench:
            if name not in sizes:
                close = did_you_mean(name, sizes)
                self.err_at(f"bench size {name!r} is not one of the [sizes] names ({', '.join(sizes) or 'none'})"
                            + (f"; did you mean {close!r}?" if close else ""), ("bench", name), fix=close)
        self.known = set(sizes)
        return sizes, bench

    def check_expr(self, expr: Any, key: str, section: str | None = None, what: str = "",
                   path: tuple[str, ...] | None = None) -> bool:
        """A size expression over the known sizes (parsed and bounded, never evaluated here);
        a problem lands on the expression itself when `path` names its place."""
        at = path if path is not None else ((key,) if section is None else (section, key))
        value = path is not None
        try:
            unknown = exprs.names(expr) - self.known
        except exprs.ExprError as e:
            self.err_at(f"{what}{e}", at, value=value)
            return False
        if unknown:
            close = [c for c in (did_you_mean(u, self.known) for u in sorted(unknown)) if c]
            self.err_at(f"{what}expression {expr!r} uses unknown size(s) {', '.join(sorted(unknown))} "
                        f"(sizes: {', '.join(sorted(self.known)) or 'none'})"
                        + (f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""), at, value=value)
            return False
        return True

    def launch(self, grid: tuple[str, ...], block: tuple[str, ...], shared_mem: str) -> None:
        for key, dims in (("grid", grid), ("block", block)):
            listed = isinstance(self.data.get(key), list)
            for i, e in enumerate(dims):
                self.check_expr(e, key, what=f"{key}: ", path=(key, str(i)) if listed else (key,))
        self.check_expr(shared_mem, "shared_mem", what="shared_mem: ",
                        path=("shared_mem",) if "shared_mem" in self.data else None)

    def require(self) -> tuple[str, ...]:
        require = self.data.get("require", [])
        if isinstance(require, str):
            require = [require]
        if not isinstance(require, list) or not all(isinstance(r, str) for r in require):
            self.err("`require` must be a list of condition strings, e.g. [\"d % 2 == 0\"]", "require")
            require = []
        for r in require:
            self.check_expr(r, "require", what="require: ")
        return tuple(require)

    def flops(self) -> str | None:
        flops = self.data.get("flops")
        if flops is None:
            return None
        self.check_expr(str(flops), "flops", what="flops: ")
        return str(flops)

    def reference(self) -> str | None:
        """Another kernel of the file, taking the same parameters."""
        reference = self.data.get("reference")
        if reference is None:
            return None
        if not isinstance(reference, str):
            self.err("`reference` must be the name of another kernel in this file", "reference")
            return None
        if self.model is not None:
            ref = self.model.kernel(reference)
            if ref is None:
                self.err(f"reference kernel {reference!r} is not in this file "
                         f"(kernels: {', '.join(k.name for k in self.model.kernels)})", "reference")
            elif [p.name for p in ref.params] != [p.name for p in self.kernel.params] and \
                    len(ref.params) != len(self.kernel.params):
                self.err(f"reference kernel {reference!r} must take the same parameters as {self.kernel.name!r}",
                         "reference")
        return reference

    def instantiate(self) -> tuple[str | None, dict[str, str]]:
        """Template arguments only (parsed with tree-sitter, re-emitted), and what each parameter
        of the template becomes."""
        kernel = self.kernel
        instantiate = self.data.get("instantiate")
        if kernel.is_template and not instantiate:
            self.err(f"kernel {kernel.name!r} is a template: add instantiate = \"<...>\" with its template "
                     "arguments", "instantiate" if "instantiate" in self.data else "grid")
        targs: dict[str, str] = {}
        if not instantiate:
            return instantiate, targs
        if not isinstance(instantiate, str):
            self.err("`instantiate` must be a string such as \"<__half>\"", "instantiate")
            return None, targs
        try:
            instantiate = parse_template_args(instantiate)
        except ValueError as e:
            self.err(str(e), "instantiate")
            return None, targs
        if instantiate:
            vals = split_template_args(instantiate)
            # a trailing parameter pack (`typename... ArgTypes`) takes any number of the arguments
            pack = bool(kernel.template_params) and "..." in kernel.template_params[-1].split("=", 1)[0]
            if kernel.is_template and not pack and len(vals) > len(kernel.template_params):
                self.err(f"`instantiate` gives {len(vals)} template arguments; {kernel.name!r} has "
                         f"{len(kernel.template_params)}", "instantiate")
            targs = kernel.template_bindings(vals)
        return instantiate, targs

    def counts(self) -> tuple[int, int]:
        """`seeds` and `max_cases`, within their caps."""
        seeds = self.data.get("seeds", 2)
        if not isinstance(seeds, int) or isinstance(seeds, bool) or not 1 <= seeds <= MAX_SEEDS:
            self.err(f"`seeds` must be an integer from 1 to {MAX_SEEDS}", "seeds")
            seeds = 2
        max_cases = self.data.get("max_cases", DEFAULT_MAX_CASES)
        if not isinstance(max_cases, int) or isinstance(max_cases, bool) or not 1 <= max_cases <= MAX_CASES_CAP:
            self.err(f"`max_cases` must be an integer from 1 to {MAX_CASES_CAP}", "max_cases")
            max_cases = DEFAULT_MAX_CASES
        return seeds, max_cases

    def args(self, targs: dict[str, str]) -> dict[str, ArgSpec]:
        """[args]: one entry per kernel parameter, each a pointer's, a scalar's or a struct's
        description (a struct's fields follow it, as entries of their own). A parameter whose
        type the instantiation makes a pointer (`scale_type` = `at::Half *`) is a pointer's."""
        kernel, data, loc = self.kernel.instantiated(targs), self.data, self.loc
        raw_args = data.get("args", {})
        if not isinstance(raw_args, dict):
            self.err("[args] must be a table with one entry per kernel parameter", "args")
            raw_args = {}
        if "args" not in data:
            self.err(f"missing [args] table (one entry per parameter of {kernel.name!r})", "args")
        args: dict[str, ArgSpec] = {}
        params = {p.name: p for p in kernel.params}
        for name in raw_args:
            if name not in params:
                close = did_you_mean(name, params)
                self.err_at(f"unknown parameter {name!r}: {kernel.name!r} takes {', '.join(params) or 'no parameters'}"
                            + (f"; did you mean {close!r}?" if close else ""), ("args", name), fix=close)
        for p in kernel.params:
            if p.name not in raw_args:
                if "args" in data:
                    sec_line = next((i for i, ln in enumerate(loc.lines) if ln.strip() == "[args]"), None)
                    if sec_line is not None:
                        line, col = loc.at(sec_line, loc.lines[sec_line].index("["))
                        self.errors.append(diag(line, col, col + 6, f"missing parameter {p.name!r} ({p.type}) in [args]"))
                    else:
                        self.err(f"missing parameter {p.name!r} ({p.type}) in [args]", "args")
                continue
            v = raw_args[p.name]
            cpp_dtype = dtypes.from_cpp(targs.get(p.base_type, p.base_type))
            if p.is_pointer and isinstance(v, dict) and RECORDS in v:
                if cpp_dtype is not None or p.type.count("*") != 1 or p.base_type.replace("const", "").strip() == "void":
                    self.err_at(f"parameter {p.name!r} ({p.type}): `{RECORDS}` describes a pointer to structs, "
                                f"not to numbers: give it {{ type = \"...\", shape = [...] }}", ("args", p.name, RECORDS))
                    continue
                for a in self.struct_arg(p.name, v, ("args", p.name)):
                    args[a.name] = a
                continue
            if p.is_pointer:
                arg = self.pointer_arg(p, v, cpp_dtype)
            elif isinstance(v, dict) and CONSTRUCT in v:
                arg = self.constructed(p.name, v, ("args", p.name)) if cpp_dtype is None else None
                if cpp_dtype is not None:
                    self.err_at(f"parameter {p.name!r} is a number ({p.type}): give it a value, e.g. "
                                f"{p.name} = \"n\"; `{CONSTRUCT}` builds an object of a class", ("args", p.name, CONSTRUCT))
            elif cpp_dtype is None and isinstance(v, dict) and (ACCESSOR in v or isinstance(v.get("shape"), list)):
                arg = self.accessor_arg(p, v)
            elif cpp_dtype is None and _describes_struct(v):
                for a in self.struct_arg(p.name, v, ("args", p.name)):
                    args[a.name] = a
                continue
            else:
                arg = self.scalar_arg(p, v, cpp_dtype)
            if arg is not None:
                args[p.name] = arg
        return args

    def pointer_arg(self, p: Param, v: Any, cpp_dtype: dtypes.DType | None) -> ArgSpec | None:
        if v == NULL:
            return ArgSpec(p.name, False, dtypes.BY_NAME["uint64"], value=0, null=True)
        if not isinstance(v, dict):
            self.err(f"parameter {p.name!r} is a pointer ({p.type}): describe it as "
                     f"{{ type = \"...\", shape = [...] }}, or as \"{NULL}\" for a null pointer", p.name, "args")
            return None
        if ACCESSOR in v:
            self.err_at(f"parameter {p.name!r} is a pointer ({p.type}): `{ACCESSOR}` describes a tensor accessor "
                        f"passed by value (torch's PackedTensorAccessor32); a pointer is a buffer without it",
                        ("args", p.name, ACCESSOR))
            return None
        table = v.get("table")
        if table is not None:
            return self.table_arg(p, v, table)
        if p.type.count("*") > 1:
            self.err(f"parameter {p.name!r} ({p.type}) points to pointers: describe it as a table of device "
                     f"pointers, e.g. {{ type = \"{p.base_type if dtypes.lookup(p.base_type) else 'float'}\", "
                     f"shape = [\"n\"], table = \"count\" }}", p.name, "args")
            return None
        return self.buffer(p.name, p.type, p.is_const, v, cpp_dtype, ("args", p.name))

    def buffer(self, name: str, ctype: str, is_const: bool, v: dict[str, Any], cpp_dtype: dtypes.DType | None, at: tuple[str, ...],
               member_of: str = "") -> ArgSpec | None:
        """A buffer the kernel reaches: a pointer parameter, a struct's pointer field, a table's entries."""
        for k in v:
            if k not in ARRAY_KEYS or (k == "table" and member_of):
                self.unknown(f"key for pointer {name!r}:", k, ARRAY_KEYS - {"table"} if member_of else ARRAY_KEYS,
                             (*at, k))
        tname = v.get("type")
        dt = dtypes.lookup(tname) if isinstance(tname, str) else None
        if dt is None:
            if tname is None and cpp_dtype is not None:
                dt = cpp_dtype
            else:
                self.unknown_type(at, tname)
                return None
        if cpp_dtype is not None and cpp_dtype.np != dt.np:
            self.err_at(f"parameter {name!r}: spec type {dt.name!r} does not match the C++ type {ctype!r}",
                        (*at, "type") if "type" in v else at, value="type" in v,
                        fix=f'"{cpp_dtype.name}"' if "type" in v else "")
        shape = v.get("shape")
        if not isinstance(shape, list) or not shape:
            self.err_at(f"parameter {name!r}: `shape` must be a non-empty list of size expressions",
                        (*at, "shape") if "shape" in v else at, value="shape" in v)
            return None
        shape = tuple(str(s) for s in shape)
        for i, s in enumerate(shape):
            self.check_expr(s, name, "args", what=f"parameter {name!r} shape: ", path=(*at, "shape", str(i)))
        output = bool(v.get("output", False))
        inout = bool(v.get("inout", False))
        if (output or inout) and is_const:
            self.err_at(f"parameter {name!r} is const ({ctype}) but the spec says it is written", at)
        try:
            init = parse_init(str(v.get("init", "normal")), self.known)
        except (ValueError, exprs.ExprError) as e:
            self.err_at(f"parameter {name!r}: {e}", (*at, "init"), value=True)
            init = Init("normal")
        flag = v.get("flag", False)
        if not isinstance(flag, bool) or flag and not (output or inout):
            self.err_at(f"parameter {name!r}: `flag = true` marks an output (a status it writes as constants)",
                        (*at, "flag"), value=True)
            flag = False
        tol: dict[str, float | None] = {"atol": None, "rtol": None}
        for tk in tol:
            if tk in v:
                if not isinstance(v[tk], (int, float)) or isinstance(v[tk], bool) or v[tk] < 0:
                    self.err_at(f"parameter {name!r}: `{tk}` must be a non-negative number", (*at, tk), value=True)
                else:
                    tol[tk] = float(v[tk])
        return ArgSpec(name, True, dt, shape, output=output and not inout, inout=inout, init=init,
                       member_of=member_of, flag=flag, atol=tol["atol"], rtol=tol["rtol"])

    def accessor_arg(self, p: Param, v: dict[str, Any]) -> ArgSpec | None:
        """A tensor accessor passed by value (`PackedTensorAccessor32<T, N> x`): a buffer of `shape`
        (N sizes), whose data pointer, sizes and contiguous strides the harness writes into the
        object, laid out as the compiler lays it out (`astra_cuda.model.layout.accessor_probe`)."""
        at = ("args", p.name)
        if v.get(ACCESSOR) is not True:
            if ACCESSOR in v:
                self.err_at(f"parameter {p.name!r}: `{ACCESSOR}` is true or left out", (*at, ACCESSOR), value=True)
            else:   # a buffer for a by-value parameter: only an accessor object holds one
                self.err_at(f"parameter {p.name!r} ({p.type}) is passed by value: a buffer is given to it only as "
                            f"a tensor accessor (a data pointer with its sizes and strides, torch's "
                            f"PackedTensorAccessor32): add `{ACCESSOR} = true`", at)
            return None
        if "table" in v:
            self.err_at(f"parameter {p.name!r}: a tensor accessor points to one buffer, not to a table of them",
                        (*at, "table"))
            return None
        a = self.buffer(p.name, p.type, p.is_const, {k: x for k, x in v.items() if k != ACCESSOR}, None, at)
        return dataclasses.replace(a, accessor=True) if a is not None else None

    def table_arg(self, p: Param, v: dict[str, Any], table: Any) -> ArgSpec | None:
        """`T** p` (or 64-bit integers holding addresses): `table` pointers, each to a buffer of
        `shape`; Astra allocates them as one buffer of [table, *shape] and passes a table of
        pointers to its rows."""
        at = ("args", p.name)
        stars = p.type.count("*")
        word = dtypes.from_cpp(p.base_type)
        if not (stars > 1 or (stars == 1 and word is not None and not word.is_float and word.itemsize == 8)):
            self.err_at(f"parameter {p.name!r} ({p.type}) cannot hold a table of pointers: a table is a `T**` "
                        f"(or a pointer to 64-bit integers holding addresses)", (*at, "table"))
            return None
        if not isinstance(table, (str, int)) or isinstance(table, bool):
            self.err_at(f"parameter {p.name!r}: `table` is the number of pointers, a size expression such as "
                        f"\"layers\"", (*at, "table"), value=True)
            return None
        if not self.check_expr(str(table), p.name, "args", what=f"parameter {p.name!r} table: ",
                               path=(*at, "table")):
            return None
        elem = dtypes.from_cpp(p.base_type) if stars > 1 else None
        data_const = "const" in p.type.split("*")[0].split() if stars > 1 else False
        a = self.buffer(p.name, p.type, data_const, v, elem, at)
        if a is None:
            return None
        return dataclasses.replace(a, shape=(str(table), *a.shape), table=str(table))

    def struct_arg(self, name: str, v: dict[str, Any], at: tuple[str, ...], member_of: str = "") -> list[ArgSpec]:
        """A struct passed by value: the fields the spec gives, each described like an argument
        (`p.out = { type = "float", shape = ["n"], output = true }`, `p.n = "n"`); fields left out
        are zero. Where each lies in the struct comes from the compiler (`astra_cuda.model.layout`).
        With `records` (a pointer to structs: a parameter, or a pointer field of a struct), that
        many structs lie in device memory, each field a number the same in every record or drawn
        per record (`start = { init = "randint(0, n)" }`)."""
        members: list[ArgSpec] = []
        paths: list[str] = []
        count = v.get(RECORDS)
        if count is not None:
            if not isinstance(count, (str, int)) or isinstance(count, bool) or \
                    not self.check_expr(str(count), name, "args", what=f"{name!r} records: ", path=(*at, RECORDS)):
                if not isinstance(count, (str, int)) or isinstance(count, bool):
                    self.err_at(f"{name!r}: `{RECORDS}` is the number of structs, a size expression such as \"seqs\"",
                                (*at, RECORDS), value=True)
                count = None

        def walk(table: dict[str, Any], prefix: str, here_at: tuple[str, ...], depth: int) -> None:
            for key, value in table.items():
                here = (*here_at, key)
                if key == RECORDS and not prefix and count is not None:
                    continue
                if not FIELD_STEP.fullmatch(key):
                    self.err_at(f"`{name}.{prefix}{key}`: a field is a member's name, or one element of an "
                                f"array member (\"stride[1]\", \"addresses[1][3]\")", here)
                    continue
                path = prefix + key
                leaf = isinstance(value, dict) and value.keys() & {"shape", "value", "type", "table", "init", RECORDS,
                                                                     CONSTRUCT}
                if isinstance(value, dict) and not leaf:
                    if depth + 1 >= MAX_FIELD_DEPTH:
                        self.err_at(f"`{name}.{path}`: fields nest at most {MAX_FIELD_DEPTH} deep", here)
                    else:
                        walk(value, path + ".", here, depth + 1)
                    continue
                if len(paths) >= MAX_FIELDS:
                    self.err_at(f"struct parameter {name!r}: at most {MAX_FIELDS} fields", here)
                    return
                full = f"{name}.{path}"
                got: list[ArgSpec | None]
                if count is not None and isinstance(value, dict) and value.keys() & {"shape", "table", RECORDS}:
                    self.err_at(f"`{full}`: a record's fields are numbers (the same in every record, or drawn per "
                                f"record with {{ init = \"...\" }}), not buffers", here)
                    got = []
                elif isinstance(value, dict) and CONSTRUCT in value and count is not None:
                    self.err_at(f"`{full}`: a record's fields are numbers; `{CONSTRUCT}` builds an object passed by "
                                f"value (a parameter, or a field of a struct passed by value)", (*here, CONSTRUCT))
                    got = []
                elif isinstance(value, dict) and CONSTRUCT in value:
                    got = [self.constructed(full, value, here, member_of=name)]
                elif isinstance(value, dict) and RECORDS in value:
                    got = list(self.struct_arg(full, value, here, member_of=name))
                elif isinstance(value, dict) and "shape" in value:
                    got = [self.buffer(full, "a field", False, value, None, here, member_of=name)]
                elif isinstance(value, dict) and "init" in value:
                    got = [self.drawn_field(full, value, here, name, count is not None)]
                else:
                    got = [self.scalar_value(full, "a field", value, None, here, member_of=name)]
                paths.append(path)
                members.extend(a for a in got if a is not None)

        walk(v, "", at, 0)
        head = ArgSpec(name, False, dtypes.BY_NAME["uint8"], struct=True, fields=tuple(paths), member_of=member_of,
                       records=str(count) if count is not None else "")
        return [head] + members

    def drawn_field(self, name: str, v: dict[str, Any], at: tuple[str, ...], owner: str, in_records: bool) -> ArgSpec | None:
        """A field of records drawn per record: `{ init = "...", type = "..." }` (without `type`,
        the compiler's type of the field decides, as for a number field)."""
        if not in_records:
            self.err_at(f"`{name}`: `init` draws a field per record, so it belongs to a pointer to structs "
                        f"(`{{ {RECORDS} = \"n\", ... }}`); a struct passed by value gives each field one value", (*at, "init"))
            return None
        for k in v:
            if k not in DRAWN_KEYS:
                self.unknown(f"key for a field drawn per record {name!r}:", k, DRAWN_KEYS, (*at, k))
        tname = v.get("type")
        dt = dtypes.lookup(tname) if isinstance(tname, str) else None
        if tname is not None and dt is None:
            self.unknown_type(at, tname)
            return None
        try:
            init = parse_init(str(v.get("init")), self.known)
        except (ValueError, exprs.ExprError) as e:
            self.err_at(f"field {name!r}: {e}", (*at, "init"), value=True)
            return None
        return ArgSpec(name, False, dt or dtypes.BY_NAME["double"], init=init, member_of=owner, typed=dt is not None,
                       drawn=True)

    def constructed(self, name: str, v: dict[str, Any], at: tuple[str, ...], member_of: str = "") -> ArgSpec | None:
        """An object of a class the host builds: `{ construct = "uint_fastdiv(n)" }`, C++ over the sizes
        (`astra_cuda.model.construct` checks it; a host program compiled with the unit runs it)."""
        for k in v:
            if k != CONSTRUCT:
                self.unknown(f"key for the object {name!r}:", k, {CONSTRUCT}, (*at, k))
        text = v[CONSTRUCT]
        try:
            if not isinstance(text, str):
                raise ValueError("a C++ expression over the sizes, e.g. \"uint_fastdiv(n)\"")
            unknown = construct.sizes_used(text) - self.known
        except ValueError as e:
            self.err_at(f"{name!r}: `{CONSTRUCT}`: {e}", (*at, CONSTRUCT), value=True)
            return None
        if unknown:
            self.err_at(f"{name!r}: `{CONSTRUCT}` reads {', '.join(sorted(unknown))}, which [sizes] does not give "
                        f"(sizes: {', '.join(sorted(self.known)) or 'none'})", (*at, CONSTRUCT), value=True)
            return None
        return ArgSpec(name, False, dtypes.BY_NAME["uint8"], member_of=member_of, construct=text)

    def unknown_type(self, where: tuple[str, ...], tname: Any) -> None:
        at = (*where, "type")
        name = ".".join(where[1:])
        if not isinstance(tname, str):
            self.err_at(f"parameter {name!r}: `type` must be a type name such as \"float\"", at, value=True)
            return
        self.unknown(f"type for parameter {name!r}:", tname, set(dtypes.BY_NAME), at, value=True, listing=False)
        if not did_you_mean(tname, dtypes.BY_NAME):
            d = self.errors[-1]
            self.errors[-1] = dataclasses.replace(d, message=d.message + " (types: half, bfloat16, float, double, "
                                                  "float8_e4m3fn, float8_e5m2, int8..int64, uint8..uint64, bool)")

    def scalar_arg(self, p: Param, v: Any, cpp_dtype: dtypes.DType | None) -> ArgSpec | None:
        return self.scalar_value(p.name, p.type, v, cpp_dtype, ("args", p.name))

    def scalar_value(self, name: str, ctype: str, v: Any, cpp_dtype: dtypes.DType | None, at: tuple[str, ...],
                     member_of: str = "") -> ArgSpec | None:
        value, tname = v, None
        if isinstance(v, dict):
            value, tname = v.get("value"), v.get("type")
            for k in v:
                if k not in SCALAR_KEYS:
                    self.unknown(f"key for scalar {name!r}:", k, SCALAR_KEYS, (*at, k))
        if value is None or isinstance(value, (bool, list, dict)):
            self.err_at(f"{'field' if member_of else 'parameter'} {name!r} is a scalar ({ctype}): give an "
                        f"expression over the sizes, e.g. {name} = \"n\"", at)
            return None
        dt = dtypes.lookup(tname) if isinstance(tname, str) else cpp_dtype
        typed = dt is not None
        if dt is None:
            if isinstance(tname, str):
                self.unknown_type(at, tname)
                return None
            if not member_of:
                self.err_at(f"parameter {name!r}: cannot tell the scalar type of {ctype!r}; write it as "
                            f"{name} = {{ value = ..., type = \"float\" }} (or the type it is)", at)
                return None
            dt = dtypes.BY_NAME["double"]   # a field: the compiler's type of the field decides (layout)
        if isinstance(value, str):
            self.check_expr(value, name, "args", what=f"parameter {name!r}: ",
                            path=(*at, "value") if isinstance(v, dict) else at)
        return ArgSpec(name, False, dt, value=value, member_of=member_of, typed=typed)


def _describes_struct(v: Any) -> bool:
    """A by-value parameter described by its fields (`p.out = {...}`), not `{ value, type }`."""
    return isinstance(v, dict) and not (v.keys() <= SCALAR_KEYS and "value" in v)
