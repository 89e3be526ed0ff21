"""The access walk's calls: a device helper, a functor's `operator()`, a method of a local object of
a project class (a view over the kernel's pointers), an explicit specialization, CUB's block
load/store, each followed with its parameters bound to the call's values. Separate because
following a call is its own scope handling (a mixin of `access.Analyzer`). Long because `call` is
one dispatch over every kind of call the walk meets (cooperative groups, casts, helpers, methods,
accessors a class Astra cannot read hides), whose order decides which reading wins."""
from __future__ import annotations

import re

from tree_sitter import Node

from . import accessors, exprs, source, syntax
from .access_nodes import (arity, assigned_only, call_operator, functional_cast, has_method, method_name, through_aliases,
    reference_params, unparen)
from .access_values import (ACCESSORS, EMPTY, Iv, MAX_HELPER_DEPTH, Poly, Ptr, UNKNOWN, VECTOR_METHODS, View,
    iv_add, join_values, poly_add)
from .compiled_branches import truth_of
from .template_list import split_template_args


class CallWalk:
    """How a call is followed into what it calls."""

    def _template_bindings(self, called: Node | None, fn: Node, vals: list) -> dict[str, int]:
        """The constants a call gives a function template's parameters: a number it spells
        (`copy<VEC_SIZE>(in, out, n)`: VEC_SIZE as known here) and `sizeof(T)` of a type it deduces
        from a pointer argument (`const InT* in` given a float buffer: 4) — so `WIDTH = VEC_SIZE *
        sizeof(InT)` and the masks made of it are numbers inside the helper."""
        decl = fn.parent if fn.parent is not None and fn.parent.type == "template_declaration" else None
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        if plist is None:
            return {}
        tparams = [(p.type, syntax.declarator_name(p.child_by_field_name("declarator"))[0]
                    if p.child_by_field_name("declarator") is not None else
                    next((c.text.decode() for c in p.named_children if c.type == "type_identifier"), None))
                   for p in plist.named_children if p.type != "comment"]
        out: dict[str, int] = {}
        spelled = called.child_by_field_name("arguments") if called is not None and called.type == "template_function" \
            else None
        for (kind, name), arg in zip(tparams, [a for a in spelled.named_children if a.type != "comment"]
                                     if spelled is not None else []):
            if name and kind in ("parameter_declaration", "optional_parameter_declaration"):
                node = source.parse_expression(arg.text.decode())
                v = self.expr(node, evaluate_only=True) if node is not None else None
                if isinstance(v, Iv) and v.lo is not None and v.lo == v.hi:
                    out[name] = v.lo
        types = {n for k, n in tparams if n and k in ("type_parameter_declaration", "optional_type_parameter_declaration")}
        fdecl = syntax.function_declarator(fn.child_by_field_name("declarator"))
        plist = fdecl.child_by_field_name("parameters") if fdecl is not None else None
        for p, v in zip([p for p in (plist.named_children if plist is not None else [])
                         if p.type in ("parameter_declaration", "optional_parameter_declaration")], vals):
            t, d = p.child_by_field_name("type"), p.child_by_field_name("declarator")
            if t is None or d is None or d.type != "pointer_declarator" or t.text.decode() not in types \
                    or not isinstance(v, Ptr) or v.base not in self.elem_bytes:
                continue
            out[f"sizeof({t.text.decode()})"] = self.elem_bytes[v.base] * v.scale
        return out

    def _aligned_beside(self, vals: list, tested: set[str], vectors: set[str]) -> None:
        """A helper that tests one pointer's address (a scalar prefix up to the boundary, then vectors)
        and moves another by vectors at the same offsets without testing it (vLLM's
        vectorize_with_alignment): the second is aligned only where its start is congruent to the
        first's modulo the width. Handed the same offset (`in + row * n`, `out + row * n`) it is; from
        another start (a cache slot beside a token's row) the spec's sizes must keep them congruent."""
        starts = {v.base: v.offset for v in vals if isinstance(v, Ptr)}
        firsts = [starts[b] for b in tested if b in starts]
        for b in vectors - tested:
            if b not in starts or not firsts or b not in self.facts.uses:
                continue
            use = self.facts.uses[b]
            if all(f == starts[b] for f in firsts):
                use.same_start = True
            else:
                use.congruent |= {t for t in tested if t in starts and starts[t] != starts[b]}
                for t in use.congruent:
                    self.facts.uses[t].congruent.add(b)

    def _passed_objects(self, names: list[str | None], arg_nodes: list[Node]) -> dict[str, str]:
        """A helper's parameters given a functor local of the caller (`k_op`, also through
        `std::forward<Op>(op)`) -> that functor's type: called in the helper (`scalar_op(out[i], in[i])`,
        vLLM's vectorize_with_alignment), it is the same functor, whose operator() says what it reads."""
        out: dict[str, str] = {}
        for n, a in zip(names, arg_nodes):
            while a is not None and a.type == "call_expression" and a.child_by_field_name("function") is not None \
                    and a.child_by_field_name("function").text.decode().split("<")[0].split("::")[-1] in ("forward", "move") \
                    and a.child_by_field_name("arguments") is not None and a.child_by_field_name("arguments").named_child_count == 1:
                a = a.child_by_field_name("arguments").named_children[0]
            if n and a is not None and a.type == "identifier" and a.text.decode() in self.objects \
                    and a.text.decode() in self.object_types:
                out[n] = self.object_types[a.text.decode()]
        return out

    def inline(self, fn: Node, vals: list, fields: dict[str, Iv | Ptr] | None = None,
               bound: dict[str, int] | None = None, arg_nodes: list[Node] | None = None) -> Iv | Ptr | None:
        """A device function of the file called with pointers into the parameters (`apply_rotary(query,
        ...)`): its body walked with its parameters bound to the call's values, so what it reads and
        writes counts for the kernel's own parameters. `fields`: a view object's fields, in scope
        in its methods. Returns what it returns where that is one pointer or interval."""
        decl = syntax.function_declarator(fn.child_by_field_name("declarator"))
        plist = decl.child_by_field_name("parameters") if decl is not None else None
        params = [p for p in (plist.named_children if plist is not None else [])
                  if p.type in ("parameter_declaration", "optional_parameter_declaration")]
        names = [syntax.declarator_name(p.child_by_field_name("declarator"))[0] for p in params]
        body = fn.child_by_field_name("body")
        if body is None:
            return
        saved, saved_defs, saved_defaults, saved_returns = self.env, self.defs, self.defaults, self.returns
        saved_moved, self.moved = self.moved, {}
        saved_declared, self.declared_at = self.declared_at, dict(self.declared_at)
        saved_constants, self.constants = self.constants, {**self.constants, **(bound or {})}
        passed = self._passed_objects(names, arg_nodes or [])
        saved_objects, saved_types = self.objects, self.object_types
        self.objects, self.object_types = self.objects | set(passed), {**self.object_types, **passed}
        self.env = {**(fields or {}),
                    **{n: (v if isinstance(v, (Iv, Ptr, View, accessors.Indexed)) else UNKNOWN)
                       for n, v in zip(names, vals) if n}}
        # its parameters are locals made at the call, inside the loops the call is: an update of one
        # outside the helper's own loops (vLLM's `len -= prefix_elems`) happens once per call, exactly
        self.declared_at.update({n: self.loops for n in names if n})
        self.returns = []
        # a parameter the call leaves out takes its default (`int32_t const group_size = 0`): a
        # branch that default rules out (`if (group_size > 0)`) is not this call's
        self.defaults = set()
        for p, n in list(zip(params, names))[len(vals):]:
            default = p.child_by_field_name("default_value")
            v = self.expr(default, evaluate_only=True) if default is not None else None
            if n and isinstance(v, Iv) and v.lo is not None and v.lo == v.hi:
                self.env[n] = v
                self.defaults.add(n)
        self.defs = {}
        self.depth += 1
        tests, vectors = len(self.address_tests), len(self.vector_bases)
        try:
            self.block_stmt(body)
            returned = join_values(self.returns)
            self._aligned_beside(vals, set(self.address_tests[tests:]), set(self.vector_bases[vectors:]))
        finally:
            self.depth -= 1
            self.env, self.defs, self.defaults, self.returns = saved, saved_defs, saved_defaults, saved_returns
            self.moved, self.declared_at, self.constants = saved_moved, saved_declared, saved_constants
            self.objects, self.object_types = saved_objects, saved_types
        return returned

    def _view(self, type_text: str, d: Node, value: Node | None) -> View | None:
        """A local object of a class of the project constructed from the kernel's values (`MatrixView_half_rw
        dest_(dest, height, width)`, which the grammar reads as a function declaration): its class and
        the fields its constructor's initializer list (or, without a constructor, a brace list in
        field order) sets to a pointer or an integer."""
        cls = self.helpers.get(type_text.split("<")[0].split("::")[-1].strip())
        if cls is None or cls.type not in ("class_specifier", "struct_specifier"):
            return None
        if d.type == "function_declarator":   # `View v(a, b);`: parameters that are only a name are arguments
            plist = d.child_by_field_name("parameters")
            params = plist.named_children if plist is not None else []
            if not params or any(p.type != "parameter_declaration" or p.child_by_field_name("declarator") is not None
                                 or len(p.named_children) != 1 for p in params):
                return None
            vals = [self._name_value(p.named_children[0].text.decode()) for p in params]
            brace = False
        elif value is not None and value.type in ("argument_list", "initializer_list"):
            vals = [self.expr(a) for a in value.named_children if a.type != "comment"]
            brace = value.type == "initializer_list"
        else:
            return None
        body = cls.child_by_field_name("body")
        members = body.named_children if body is not None else []
        cname = (cls.child_by_field_name("name").text.decode() if cls.child_by_field_name("name") is not None else "")
        ctors = [m for m in members if m.type == "function_definition" and method_name(m) == cname
                 and arity(m)[0] <= len(vals) <= arity(m)[1]]
        fields: dict[str, Iv | Ptr] = {}
        if ctors:
            decl = syntax.function_declarator(ctors[0].child_by_field_name("declarator"))
            plist = decl.child_by_field_name("parameters") if decl is not None else None
            names = [syntax.declarator_name(p.child_by_field_name("declarator"))[0]
                     for p in (plist.named_children if plist is not None else [])
                     if p.type in ("parameter_declaration", "optional_parameter_declaration")]
            saved = self.env
            self.env = {n: v for n, v in zip(names, vals) if n and isinstance(v, (Iv, Ptr))}
            try:
                inits = next((c for c in ctors[0].named_children if c.type == "field_initializer_list"), None)
                for fi in (inits.named_children if inits is not None else []):
                    fname = next((c.text.decode() for c in fi.named_children if c.type == "field_identifier"), None)
                    args = next((c for c in fi.named_children if c.type in ("argument_list", "initializer_list")), None)
                    inner = [a for a in args.named_children if a.type != "comment"] if args is not None else []
                    v = self.expr(inner[0], evaluate_only=True) if len(inner) == 1 else None
                    if fname and isinstance(v, (Iv, Ptr)):
                        fields[fname] = v
            finally:
                self.env = saved
        elif brace:   # an aggregate: `View v{ptr, rows, cols}` sets its fields in order
            order = [syntax.declarator_name(f.child_by_field_name("declarator"))[0]
                     for f in members if f.type == "field_declaration"]
            fields = {n: v for n, v in zip(order, vals) if n and isinstance(v, (Iv, Ptr))}
        else:
            return None
        return View(cls, tuple(fields.items())) if any(isinstance(v, Ptr) for v in fields.values()) else None

    def _class_of(self, type_text: str) -> Node | None:
        """The project's class a local's type names, directly or through the body's own aliases
        (`using Wvec = Vec<float, 4>;`), or None."""
        text = through_aliases(self.aliases, type_text)
        cls = self.helpers.get(text.split("<")[0].split("::")[-1].strip()) if text else None
        return cls if cls is not None and cls.type in ("class_specifier", "struct_specifier") else None

    def _object_class(self, obj: Node | None) -> Node | None:
        """The class of a local object a method is called on: `v` or an element of an array `v[it]`."""
        while obj is not None and obj.type == "subscript_expression":
            obj = obj.child_by_field_name("argument")
        return self.class_objects.get(obj.text.decode()) if obj is not None and obj.type == "identifier" else None

    def _name_value(self, name: str) -> Iv | Ptr | None:
        if name not in self.env and name in self.constants:
            return Iv.point(self.constants[name])
        v = self.env.get(name)
        return v if isinstance(v, (Iv, Ptr)) else None

    def _method(self, view: View, method: str, vals: list) -> Iv | Ptr | None:
        """A method of a view object called: its body followed with the object's fields in scope."""
        body = view.cls.child_by_field_name("body")
        members = []
        for m in (body.named_children if body is not None else []):
            m = next((c for c in m.named_children if c.type == "function_definition"), m) \
                if m.type == "template_declaration" else m
            if m.type == "function_definition" and method_name(m) == method:
                members.append(m)
        fn = next((m for m in members if arity(m)[0] <= len(vals) <= arity(m)[1]), None)
        if fn is None or self.depth >= MAX_HELPER_DEPTH:
            return None
        saved, self.view = self.view, view   # its own methods, called unqualified in its body, are on it
        try:
            return self.inline(fn, vals, dict(view.fields))
        finally:
            self.view = saved

    def _specialized(self, fn: Node | None, short: str) -> Node | None:
        """The explicit specialization a call with template arguments picks (`copy_vector<input_t,
        ELEMENTS>` with ELEMENTS 4 and input_t half: `copy_vector<c10::Half, 4>`, a float2 copy, not
        the first one written, `<c10::BFloat16, 1>`): its numbers equal, its types as wide."""
        targs = fn.child_by_field_name("arguments") if fn is not None and fn.type == "template_function" else None
        if targs is None:
            return None
        called = [a.strip() for a in exprs.split_top_level(targs.text.decode().strip()[1:-1])]
        for key, helper in self.helpers.items():
            if not key.startswith(short + "<"):
                continue
            written = [a.strip() for a in exprs.split_top_level(key[len(short) + 1:-1])]
            if len(written) == len(called) and all(self._same_argument(c, w) for c, w in zip(called, written)):
                return helper
        return None

    def _same_argument(self, called: str, written: str) -> bool:
        if re.fullmatch(r"-?\d+[uUlL]*", written):
            node = source.parse_expression(called)
            v = self.expr(node, evaluate_only=True) if node is not None else None
            return isinstance(v, Iv) and v.lo == v.hi == int(written.rstrip("uUlL"))
        if self.type_bytes is None:
            return False
        a, b = self.type_bytes(called), self.type_bytes(written)
        return a is not None and a == b

    def _call_op(self, name: str) -> Node | None:
        """The `operator()` of a functor local whose class the file defines (None otherwise)."""
        if name not in self.objects:
            return None
        return call_operator(self.helpers.get(self.object_types.get(name, "").split("<")[0].split("::")[-1].strip()))

    def _functor_unread(self, name: str) -> set[int]:
        op = self._call_op(name)
        return reference_params(op) & assigned_only(op) if op is not None else set()

    def _written_through(self, name: str, args: list[Node]) -> None:
        """An element passed to a helper's non-const reference parameter (`from_float(out[i], acc)`)
        is written there; one passed to a functor the kernel holds (`op(dst[i], src[i])`, a local
        object called) is taken as read and written, as its operator() is not read here."""
        short = name.split("<")[0].split("::")[-1]   # `ns::f<ns::k>`: f
        functor = name in self.objects
        helper = self.helpers.get(short)
        refs = set(range(len(args))) if functor else (reference_params(helper) if helper is not None else set())
        unread: set[int] = set()
        call_op = self._call_op(name)
        if call_op is not None:   # the functor's class is the file's (vLLM's CopyWithScaleOp): its operator() read
            refs, unread = reference_params(call_op), assigned_only(call_op)
        for i in sorted(refs):
            el = self._element(args[i]) if i < len(args) else None
            if el is not None and not self.const.get(el[0].base, True):
                self.access(el[0], el[1], write=True, read=functor and i not in unread)

    def call(self, n: Node, evaluate_only: bool):
        fn = n.child_by_field_name("function")
        name = fn.text.decode() if fn is not None else ""
        short = name.split("<")[0].split("::")[-1]   # `ns::f<ns::k>`: f
        args_node = n.child_by_field_name("arguments")
        args = [a for a in args_node.named_children if a.type != "comment"] if args_node is not None else []
        if fn is not None and fn.type == "field_expression":  # cooperative-groups methods
            obj = fn.child_by_field_name("argument")
            kind = self.env.get(obj.text.decode()) if obj is not None else None
            method = fn.child_by_field_name("field").text.decode() if fn.child_by_field_name("field") else ""
            if isinstance(kind, str) and kind.startswith("tile:"):
                size = self.block[0] * self.block[1] * self.block[2] if kind == "tile:block" else int(kind[5:])
                nthreads = self.block[0] * self.block[1] * self.block[2]
                for a in args:
                    self.expr(a, evaluate_only=evaluate_only)
                if method == "thread_rank":
                    return Iv(0, size - 1)
                if method in ("size", "num_threads"):
                    return Iv.point(size)
                if method == "meta_group_rank":
                    return Iv(0, max(1, nthreads // size) - 1)
                if method == "meta_group_size":
                    return Iv.point(max(1, nthreads // size))
                return None
            view = self.env.get(obj.text.decode()) if obj is not None else None
            if view is None and obj is not None and obj.type == "this":   # `this->item_ptr(r, c)`
                view = self.view
            if isinstance(view, View):
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                return None if evaluate_only else self._method(view, method, vals)
            nbytes = self.obj_bytes.get(obj.text.decode()) if obj is not None else None
            if nbytes is not None and method in VECTOR_METHODS:   # `v.cast_load(v_a + off)`: one vector's elements
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                p = next((v for v in vals if isinstance(v, Ptr)), None)
                if p is not None and not evaluate_only:
                    width = max(1, nbytes // max(1, self.elem_bytes.get(p.base, nbytes) * p.scale))
                    store = "store" in method
                    self.access(p, Iv.point(0), write=store, read=not store, width=width)
                return None
            cls = self._object_class(obj)
            if cls is not None and has_method(View(cls, ()), method, len(args)):
                # a method of a plain local object handed the kernel's pointers (flash-attention's layer
                # norm `gamma[it].load_from(params.gamma, idx)`, a cast and an index inside): followed,
                # the object's own fields unknown there; one handed none touches no parameter
                vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
                if evaluate_only or not any(isinstance(v, Ptr) for v in vals):
                    return None
                return self._method(View(cls, ()), method, vals)
        if fn is not None and fn.type == "qualified_identifier" and self._vector_class_call(fn, args, evaluate_only):
            return None
        if short in ("reinterpret_cast", "static_cast", "const_cast") and len(args) == 1:
            v = self.expr(args[0], evaluate_only=evaluate_only)
            targs = fn.child_by_field_name("arguments") if fn is not None else None
            to = targs.text.decode().strip("<> ") if targs is not None else ""
            if isinstance(v, Ptr) and "*" in to:
                return self._rescale(v, to)
            return v
        if len(args) == 1 and functional_cast(fn):   # `int64_t(d)`: d
            return self.expr(args[0], evaluate_only=evaluate_only)
        if self.view is not None and fn is not None and fn.type == "identifier" and name not in self.env:
            # inside a method, `item_ptr(row, column)` is another method of the same object
            vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
            if not evaluate_only and has_method(self.view, name, len(vals)):
                return self._method(self.view, name, vals)
            if has_method(self.view, name, len(vals)):
                return None
            args_vals = vals
        else:
            args_vals = None
        # an element a functor only assigns through its reference parameter (`op(dst[i], src[i])`
        # with `dst = ...`) is not read: not evaluated here, written by `_written_through`
        skip = self._functor_unread(name) if not evaluate_only else set()
        vals = args_vals if args_vals is not None else [
            None if i in skip and self._element(a) is not None else self.expr(a, evaluate_only=evaluate_only)
            for i, a in enumerate(args)]
        if not evaluate_only:
            self._written_through(name, args)
        if short in ("min", "fminf", "umin") and len(vals) == 2 and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            return Iv(None if a.lo is None or b.lo is None else min(a.lo, b.lo),
                      None if a.hi is None or b.hi is None else min(a.hi, b.hi) if a.hi is not None and b.hi is not None
                      else (a.hi if b.hi is None else b.hi))
        if short in ("max", "umax") and len(vals) == 2 and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            return Iv(None if a.lo is None or b.lo is None else max(a.lo, b.lo),
                      None if a.hi is None or b.hi is None else max(a.hi, b.hi))
        if short in ("__clz", "__clzll") and len(vals) == 1 and isinstance(vals[0], Iv) \
                and vals[0].lo is not None and vals[0].lo > 0 and vals[0].hi is not None:
            # leading zeros: `x >> (31 - __clz(blocksize))` divides by blocksize (a power of two)
            bits = 32 if short == "__clz" else 64
            return Iv(bits - vals[0].hi.bit_length(), bits - vals[0].lo.bit_length())
        if short in ("ceil_div", "cdiv", "CEIL_DIV", "div_up", "DIV_UP") and len(vals) == 2 \
                and all(isinstance(v, Iv) for v in vals):
            a, b = vals
            if a.hi is not None and b.lo and b.lo > 0:
                return Iv(0, -(-a.hi // b.lo))
            return None
        # the project's own `atomicAdd(half2*, half2)` (exllama's compat.cuh, for old GPUs: a CAS
        # loop over the address's bits) is an atomic all the same: one element read and written
        helper = None if short.startswith("atomic") else self._specialized(fn, short) \
            or self.helpers.get(f"{short}#{len(args)}") or self.helpers.get(short)
        if helper is not None and helper.type == "function_definition" and self.depth < MAX_HELPER_DEPTH and (
                not evaluate_only and (any(isinstance(v, (Ptr, View, accessors.Indexed)) for v in vals) or not args)
                or args and all(isinstance(v, Iv) for v in vals)):
            # one given pointers, one of no arguments whose value comes from the thread (`get_lane_id()`),
            # or index arithmetic over numbers only (`get_elem_offset(row, head, stride_n, stride_h)`)
            return self.inline(helper, vals, bound=self._template_bindings(fn, helper, vals), arg_nodes=args)
        # a method called on an object (`StoreT(tmp).Store(&out[i], v, n)`, CUB's block store): its name
        field = fn.child_by_field_name("field") if fn is not None and fn.type == "field_expression" else None
        method = field.text.decode().split("<")[0] if field is not None else short
        accessor = "128" in short or "256" in short or short.startswith(ACCESSORS) or method.startswith(ACCESSORS)
        # an accessor method of an object whose class is not read, handed a pointer and an index
        # (flash-attention's `x.store_to(params.x, idx_x)`, `x` of the traits class's `Ovec`): it
        # reaches `idx` vectors of a size Astra does not know — unknown, not the pointer's first
        # element (taken as that, `params.x` was one byte and the kernel's stores past it changed
        # the next buffer, `params.dmask`)
        indexed = field is not None and len(vals) == 2 and isinstance(vals[0], Ptr) and isinstance(vals[1], Iv) \
            and (vals[1].lo, vals[1].hi) != (0, 0)
        if not evaluate_only and accessor and indexed and vals[0].base in self.facts.uses:
            use = self.facts.uses[vals[0].base]
            store = method.startswith(("store", "Store", "write"))
            obj = fn.child_by_field_name("argument")
            while obj is not None and obj.type == "subscript_expression":   # `gamma[it].load_from(…)`
                obj = obj.child_by_field_name("argument")
            nbytes = self.obj_bytes.get(obj.text.decode()) if obj is not None else None
            if nbytes:   # an object of known size (the traits' `Vec<float, 4>`): `idx` whole vectors from the pointer
                p = vals[0]
                width = max(1, nbytes // max(1, self.elem_bytes.get(p.base, nbytes) * p.scale))
                self.access(p, vals[1], write=store, read=not store, width=width)
                return None
            use.read |= not store
            use.written |= store
            use.reach(None)
            return None
        if not evaluate_only and not accessor:
            # a function Astra cannot see into (a library's, a member): what it does with the
            # pointer is unknown — its extent is, and a non-const pointer may be written
            for v in vals:
                if isinstance(v, Ptr) and v.base in self.facts.uses:
                    use = self.facts.uses[v.base]
                    use.read = True
                    use.written |= not self.const.get(v.base, False)
                    use.reach(None)
            return None
        if not evaluate_only and method in ("Load", "Store") and len(args) >= 2 and isinstance(vals[0], Ptr):
            store, p = method == "Store", vals[0]
            span = self._valid_items_span(args[0], args[2]) if len(args) >= 3 else None
            tile = self._block_tile(fn)
            if span is not None and span.hi is not None and p.offset.hi is not None:
                # CUB's block load/store of `valid_items`: that many from the pointer, where the count
                # cancels the address (`min(TILE, n - i)`), and past where it points where the loop's
                # bound on `i` is a tile's start (a loop of one trip per block); never past the tile
                if tile is not None and p.scale == 1:
                    span = Iv(span.lo, min(span.hi, p.offset.hi + tile - 1))
                self.access(Ptr(p.base, span, 1), Iv.point(0), write=store, read=not store)
                return None
            if tile is not None:
                # no count, or one no polynomial bounds: the whole tile of THREADS * ITEMS from the
                # pointer, the most it reaches (FlashInfer's PackBits: one element before, the reads
                # of every block but the first unseen)
                self.access(p, Iv(0, tile - 1), write=store, read=not store)
                return None
        if not evaluate_only:
            wide = "128" in short or short.startswith(("load_vec", "store_vec"))
            for a, v in zip(args, vals):
                if isinstance(v, Ptr):
                    width = 16 // max(1, self.elem_bytes.get(v.base, 16) * v.scale) if wide else 1
                    write = short.startswith(("store", "__st", "atomic")) or method.startswith(("store", "Store"))
                    self.access(v, Iv.point(0), write=write, read=not (short.startswith(("store", "__st"))
                                                                      or method.startswith(("store", "Store"))),
                                width=max(1, width))
        if short in ("__ldg", "__ldcs", "__ldcg", "__ldlu", "__ldca") and vals and isinstance(vals[0], Ptr):
            return self.loaded(vals[0])
        return None


    def _vector_class_call(self, fn: Node, args: list[Node], evaluate_only: bool) -> bool:
        """A static method of a vector class template called through its class (FlashInfer's
        `vec_t<DType, vec_size>::memcpy(dst, src)`): one vector's elements through each pointer it is
        handed — `memcpy` writes its first and reads its second, a load reads, a store writes. False
        (nothing done) where the class's size is unknown or the method is no such one."""
        scope, method = fn.child_by_field_name("scope"), fn.child_by_field_name("name")
        if scope is None or method is None or scope.type != "template_type" or self.type_bytes is None:
            return False
        name = method.text.decode()
        if name != "memcpy" and name not in VECTOR_METHODS:
            return False
        nbytes = self.type_bytes(scope.text.decode())
        if not nbytes:
            return False
        vals = [self.expr(a, evaluate_only=evaluate_only) for a in args]
        if evaluate_only:
            return True
        for i, p in enumerate(vals):
            if isinstance(p, Ptr):
                store = i == 0 if name == "memcpy" else "store" in name
                width = max(1, nbytes // max(1, self.elem_bytes.get(p.base, nbytes) * p.scale))
                self.access(p, Iv.point(0), write=store, read=not store, width=width)
        return True

    def _block_tile(self, fn: Node) -> int | None:
        """The elements a CUB block load or store moves at most, THREADS * ITEMS (times BLOCK_DIM_Y and
        _Z where given) of its class's arguments (`cub::BlockLoad<bool, 256, 8, …>`), the class named
        where the object is made (`L(tmp).Load(…)`, `L` through the body's aliases); None where the
        class is not CUB's or an argument is no number here."""
        obj = unparen(fn.child_by_field_name("argument"))
        made = obj.child_by_field_name("function") if obj is not None and obj.type == "call_expression" else None
        text = through_aliases(self.aliases, made.text.decode()) if made is not None else ""
        name, _, rest = text.partition("<")
        if name.split("::")[-1].strip() not in ("BlockLoad", "BlockStore") or not rest.endswith(">"):
            return None
        targs = split_template_args("<" + rest)
        if len(targs) < 3:
            return None
        tile = 1
        for a in [targs[1], targs[2], *targs[4:6]]:   # <T, THREADS, ITEMS, ALGORITHM, BLOCK_DIM_Y, BLOCK_DIM_Z>
            node = source.parse_expression(a)
            v = self.expr(node, evaluate_only=True) if node is not None else None
            if not isinstance(v, Iv) or v.lo is None or v.lo != v.hi or v.lo < 1:
                return None
            tile *= v.lo
        return tile

    def _valid_items_span(self, address: Node, valid: Node) -> Iv | None:
        """The elements a CUB block load or store (`BlockStore<T, THREADS, N>(tmp).Store(&out[i], vals,
        valid_items)`) reaches from `&p[i]` (or `p + i`): `valid_items` of them, so the last is
        `i + valid_items - 1`, each side of a `min` an upper bound (`min(TILE, n - i)` reaches n - 1,
        which intervals alone, blind to the two `i` being one, put a whole tile past). None where the
        address or the count is no polynomial over the kernel's names."""
        a = unparen(address)
        index: Node | None = None
        if a is not None and a.type == "pointer_expression" and a.child_by_field_name("operator").type == "&":
            inner = unparen(a.child_by_field_name("argument"))
            if inner is None or inner.type != "subscript_expression":
                return None
            index = inner.child_by_field_name("indices") or inner.child_by_field_name("index")
            if index is not None and index.type == "subscript_argument_list":
                index = next((c for c in index.named_children if c.type != "comment"), None)
            base = unparen(inner.child_by_field_name("argument"))
        elif a is not None and a.type == "binary_expression" and a.child_by_field_name("operator").type == "+":
            base, index = unparen(a.child_by_field_name("left")), a.child_by_field_name("right")
        else:
            return None
        index = unparen(index)
        while index is not None and index.type == "conditional_expression":   # `(DATA_TYPE > 0) ? i * 2 : i`
            taken = truth_of(index.child_by_field_name("condition"), self.constants, self.sizes)
            if taken is None:
                taken = self._compared(index.child_by_field_name("condition"))
            if taken is None:
                return None
            index = unparen(index.child_by_field_name("consequence" if taken else "alternative"))
        start = self._expanded(index)
        if base is None or base.type != "identifier" or start is None \
                or self.env.get(base.text.decode()) != Ptr(base.text.decode(), Iv.point(0), 1):
            return None   # a pointer moved or rescaled first: its offset is not the index alone
        last = self._count_bound(start, valid, 0)
        lo = self._poly_value(start).lo
        return None if last is None or last == EMPTY or lo is None else Iv(lo, last)

    def _count_bound(self, start: Poly, count: Node | None, depth: int) -> int | None:
        """The most `start + count - 1` is: a `min`'s smallest side, a local's largest value given
        (each value it was assigned so far), None where no side is a polynomial."""
        count = unparen(count)
        if count is None or depth > 4:
            return None
        if count.type == "identifier" and count.text.decode() in self.assigned:
            bounds = [self._count_bound(start, v, depth + 1) for v in self.assigned[count.text.decode()]]
            return None if not bounds or None in bounds else max(b for b in bounds if b is not None)
        if count.type == "conditional_expression":   # a min (`n - i >= T ? T : n - i`): its smaller side, else the larger
            sides = [self._count_bound(start, count.child_by_field_name(f), depth + 1) for f in ("consequence", "alternative")]
            if self._picks_smaller(count):   # a min: a side known bounds it (`… > INT32_MAX ? INT32_MAX : n - i`)
                return min((b for b in sides if b is not None), default=None)
            return None if None in sides else max(b for b in sides if b is not None)
        fn = count.child_by_field_name("function") if count.type == "call_expression" else None
        if fn is not None and fn.text.decode().split("::")[-1] in ("min", "umin"):
            sides = [self._count_bound(start, c, depth + 1)
                     for c in count.child_by_field_name("arguments").named_children if c.type != "comment"]
            known = [b for b in sides if b is not None]
            return min(known) if known else None
        n = self._expanded(count)
        if n is None:
            return None
        if (self._poly_value(n).hi or 0) <= 0 and self._poly_value(n).hi is not None:
            return EMPTY   # a count of none (`int valid = 0;` before it is set): no element reached
        return self._poly_value(poly_add(poly_add(start, n), {(): -1})).hi

    def _poly_value(self, poly: Poly) -> Iv:
        value = Iv.point(0)
        for m, c in poly.items():
            value = iv_add(value, self._monomial(m, c))
        return value

