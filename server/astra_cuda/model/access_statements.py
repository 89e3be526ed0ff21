"""The access walk's statements: blocks, `if`/`else` (merging both sides' intervals), `switch`,
`#if` branches and declarations. Separate from the expressions, loops, conditions and calls,
each its own mixin of `access.Analyzer`, which holds the walk's state."""
from __future__ import annotations

import re

from tree_sitter import Node

from . import accessors, loop_steps, syntax
from .access_nodes import is_condition, through_aliases, tile_size, unparen
from .access_values import BUILTINS, BYTE_TYPE, GUARD, Iv, PREPROC_BRANCHES, Ptr, SEGMENT, Table, UNKNOWN, UNSET
from .compiled_branches import constexpr_branch, truth_of


# macros the compiler, the CUDA toolkit's headers or torch's define: never decided from the program's own
TOOLKIT_MACROS = (b"_", b"CUDA", b"CUDART", b"CUB_", b"THRUST_", b"NV", b"CUTLASS", b"TORCH", b"C10_", b"AT_")


class StatementWalk:
    """How each statement moves the walk's environment (`access.Analyzer` holds the state)."""


    def block_stmt(self, node: Node) -> bool:
        """Walk statements in order; True when the path certainly returned."""
        kids = [c for c in node.named_children if c.type != "comment"] if node.type == "compound_statement" else [node]
        for st in kids:
            if self.stmt(st):
                return True
        return False

    def stmt(self, st: Node) -> bool:
        t = st.type
        if t == "compound_statement":
            saved = dict(self.env)
            done = self.block_stmt(st)
            self.env = {k: v for k, v in self.env.items() if k in saved} | {
                k: v for k, v in saved.items() if k not in self.env}
            return done
        if t == "declaration":
            self.declaration(st)
        elif t in ("alias_declaration", "type_definition"):   # `using pack_128b_t = uint4;` in the body
            tn = st.child_by_field_name("type")
            names = [st.child_by_field_name("name")] if t == "alias_declaration" else \
                st.children_by_field_name("declarator")
            for n in names:
                if n is not None and tn is not None:
                    self.aliases[n.text.decode()] = tn.text.decode()
        elif t == "expression_statement":
            for c in st.named_children:
                self.expr(c)
        elif t == "return_statement":
            vals = [self.expr(c) for c in st.named_children if c.type != "comment"]
            if self.returns is not None:
                self.returns.append(vals[-1] if vals else None)
            return True
        elif t in ("break_statement", "continue_statement"):
            return True   # this iteration ends here: `if (column >= n) break;` narrows what follows, as a return does
        elif t == "if_statement":
            return self.if_stmt(st)
        elif t == "for_statement":
            self.for_stmt(st)
        elif t in ("while_statement", "do_statement"):
            cond = st.child_by_field_name("condition")
            trips = self._while_trips(st) if t == "while_statement" else None
            mine = self._per_trip(st, trips) if trips is not None else {}
            counted = loop_steps.while_counter(st)
            rel = self.offsets.get(counted[0]) if counted is not None else None
            saved = dict(self.env)
            for n in syntax.walk(st.child_by_field_name("body")):   # `i += stride` in the body: i runs up to the bound
                if n.type == "update_expression" or (n.type == "assignment_expression" and
                                                      n.child_by_field_name("operator").type == "+="):
                    target = n.child_by_field_name("argument") or n.child_by_field_name("left")
                    cur = self.env.get(target.text.decode()) if target is not None else None
                    if isinstance(cur, Iv):
                        self.env[target.text.decode()] = Iv(cur.lo, None)
            if cond is not None:
                self.expr(cond)
                self.refine(cond, True)
            body = st.child_by_field_name("body")
            if body is not None:
                self.loops += 1
                try:
                    self.stmt(body)
                finally:
                    self.loops -= 1
            self.env = self.merge(saved, self.env)
            self._after_trips(mine, trips)
            self._counted_past(st, trips, rel)
        elif t == "switch_statement":
            self.switch_stmt(st)
        elif t in ("attributed_statement", "labeled_statement"):
            for c in st.named_children:
                self.stmt(c)
        elif t in PREPROC_BRANCHES:
            return self.preproc_branch(st)
        else:
            for c in st.named_children:
                if c.type.endswith("expression"):
                    self.expr(c)
        return False

    def switch_stmt(self, st: Node) -> None:
        """`switch (DATA_TYPE) { case General8bit: ... break; case FP4: ... }`: the case the value
        picks where it is known (a template argument, an enumerator), from there to its `break`;
        otherwise each case from its label to its `break` as a branch, what any of them does counting."""
        cond = st.child_by_field_name("condition")
        inner = cond.named_children[0] if cond is not None and cond.type == "condition_clause" \
            and cond.named_children else cond
        value = self.expr(inner)
        body = st.child_by_field_name("body")
        # the statements in order, each case's label a mark: a `#pragma` after a label ends the
        # grammar's case_statement, the statements after it then being the body's own children
        flat: list[Node | int] = []
        cases: list[Node] = []
        for c in body.named_children if body is not None else []:
            if c.type == "case_statement":
                flat.append(len(cases))
                cases.append(c)
                flat.extend(x for x in c.named_children if x != c.child_by_field_name("value"))
            else:
                flat.append(c)
        if not cases:
            return

        def statements(i: int) -> list[Node]:   # from case i's label on, falling through to its break
            out: list[Node] = []
            for x in flat[flat.index(i) + 1:]:
                if isinstance(x, int) or x.type in ("comment", "preproc_call"):
                    continue
                out.append(x)
                if x.type in ("break_statement", "return_statement"):
                    break
            return out

        def walk(i: int) -> None:
            for x in statements(i):
                if self.stmt(x):
                    return
        picked: int | None = None
        # a kernel argument's value is the probe's, not the program's: every case is walked for it
        by_argument = inner is not None and any(x.type == "identifier" and x.text.decode() in self.sizes
                                                for x in syntax.walk(inner))
        if isinstance(value, Iv) and value.lo is not None and value.lo == value.hi and not by_argument:
            for i, c in enumerate(cases):
                label = self.expr(c.child_by_field_name("value"), evaluate_only=True) \
                    if c.child_by_field_name("value") is not None else None
                if isinstance(label, Iv) and label.lo == label.hi == value.lo:
                    picked = i
            if picked is None:
                picked = next((i for i, c in enumerate(cases) if c.child_by_field_name("value") is None), None)
                if picked is None:
                    return   # no case taken
        if picked is not None:
            walk(picked)
            return
        before, merged = dict(self.env), None
        for i in range(len(cases)):
            self.env = dict(before)
            walk(i)
            merged = self.env if merged is None else self.merge(merged, self.env)
        self.env = self.merge(before, merged) if merged is not None else before

    def preproc_branch(self, st: Node) -> bool:
        """`#if PTX_AVAILABLE asm(...) #else data[0] = src[0]; #endif` (DeepSpeed's load_global):
        which branch the build takes is not known here, so each is walked like an `if`'s and what
        either reaches counts."""
        alt = st.child_by_field_name("alternative")
        skip = {c.id for c in (st.child_by_field_name("name"), st.child_by_field_name("condition"), alt)
                if c is not None}
        taken = self._macro_branch(st)
        if taken is not None:   # the build's branch only (`#ifndef USE_ROCM` where nothing defines it)
            if taken:
                return any(self.stmt(c) for c in st.named_children if c.id not in skip and c.type != "comment")
            if alt is not None and alt.type == "preproc_else":
                return any(self.stmt(c) for c in alt.named_children if c.type != "comment")
            return self.preproc_branch(alt) if alt is not None and alt.type in PREPROC_BRANCHES else False
        before = dict(self.env)
        done = False
        for c in st.named_children:
            if c.id not in skip and c.type != "comment" and self.stmt(c):
                done = True
                break
        if alt is None:
            self.env = before if done else self.merge(before, self.env)
            return False
        after_this = self.env
        self.env = dict(before)
        alt_done = self.preproc_branch(alt) if alt.type in PREPROC_BRANCHES else False
        if done and alt_done:
            return True
        self.env = self.env if done else (after_this if alt_done else self.merge(after_this, self.env))
        return False

    def _macro_branch(self, st: Node) -> bool | None:
        """Whether an `#ifdef X` / `#ifndef X` in the body is the branch the build compiles, where the
        program's macros are known (`self.macros`: the file's, its project headers', the command
        line's), as the file's own items are decided: sgl-kernel's `#ifndef USE_ROCM` PTX copy, not
        its ROCm `__builtin_nontemporal_store`, which Astra cannot see into. A name with a leading
        underscore is the compiler's (`__CUDA_ARCH__` differs between nvcc's passes), and one of the
        toolkit's or torch's headers, which the program's macros do not list (`CUDART_VERSION`), may be
        defined there: both walked."""
        name = st.child_by_field_name("name")
        if self.macros is None or st.type != "preproc_ifdef" or name is None or name.text.startswith(TOOLKIT_MACROS):
            return None
        defined = name.text.decode() in self.macros
        return defined if st.children[0].type == "#ifdef" else not defined

    def merge(self, a: dict, b: dict) -> dict:
        out = {}
        for k in a.keys() | b.keys():
            x, y = a.get(k), b.get(k)
            if (k in BUILTINS or k.startswith((GUARD, SEGMENT))) and (x is None or y is None):
                continue   # narrowed on one branch only: the launch's own range again
            if isinstance(x, Iv) and isinstance(y, Iv):
                out[k] = x.join(y)
            elif x is not None and (x == y or y is None):
                out[k] = x
            elif y is not None and x is None:
                out[k] = y
            else:
                out[k] = UNKNOWN
        return out

    def if_stmt(self, st: Node) -> bool:
        cond = st.child_by_field_name("condition")
        cons = st.child_by_field_name("consequence")
        alt = st.child_by_field_name("alternative")
        decided = constexpr_branch(st, self.constants)
        if decided is None and cond is not None:   # `if (store_res && i < n)` with store_res false
            decided = truth_of(cond, self.constants, self.sizes)
        if decided is None and cond is not None:   # `if (past_len == -1)`: a sentinel no size takes
            decided = self.sentinel(cond)
        if decided is not None:   # `if constexpr (use_vec)`: only the branch the instance compiles
            taken = cons if decided else (
                next((c for c in alt.named_children), None) if alt is not None and alt.type == "else_clause" else alt)
            return self.stmt(taken) if taken is not None else False
        if cond is not None:
            self.expr(cond)
        names = {n.text.decode() for n in syntax.walk(cond) if n.type == "identifier"} if cond is not None else set()
        if names and names <= self.defaults:   # decided by defaults alone: only the branch they take
            before = dict(self.env)
            holds = self.refine_feasible(cond, True)
            self.env = before
            if not holds:
                inner = next((c for c in alt.named_children), None) if alt is not None and alt.type == "else_clause" \
                    else alt
                return self.stmt(inner) if inner is not None else False
        before = dict(self.env)
        # both branches are walked even where a condition cannot hold at the probe sizes: those
        # may miss what the launcher keeps (`head_size / x` whole), and the branch is then the kernel
        if cond is not None:
            self.refine(cond, True)
        then_ret = self.stmt(cons) if cons is not None else False
        after_then = self.env
        self.env = dict(before)
        if cond is not None:
            self.refine(cond, False)
        else_ret = False
        if alt is not None:
            inner = next((c for c in alt.named_children), None) if alt.type == "else_clause" else alt
            else_ret = self.stmt(inner) if inner is not None else False
        after_else = self.env
        if then_ret and else_ret:
            return True
        self.env = after_else if then_ret else (after_then if else_ret else self.merge(after_then, after_else))
        return False

    def sentinel(self, cond: Node) -> bool | None:
        """`n == -1` (`!=`) of a value that is never negative here (a size): false (true). A kernel
        marks a size it reads elsewhere with -1 (exllamav2's rope: `past_len == -1` takes it from
        `past_lens`), which no size of a spec is."""
        cond = unparen(cond)
        op = cond.child_by_field_name("operator") if cond is not None and cond.type == "binary_expression" else None
        if op is None or op.type not in ("==", "!="):
            return None
        sides = [unparen(cond.child_by_field_name(f)) for f in ("left", "right")]
        names = [x for x in sides if x is not None and x.type == "identifier"]
        numbers = [x for x in sides if x is not None and x.type in ("unary_expression", "number_literal")]
        if len(names) != 1 or len(numbers) != 1 or not re.fullmatch(r"-\s*\d+", numbers[0].text.decode()):
            return None
        value = self.env.get(names[0].text.decode())
        if not isinstance(value, Iv) or value.lo is None or value.lo < 0:
            return None
        return op.type == "!="

    def _object_bytes(self, type_text: str) -> int | None:
        """sizeof a local object's type named through the body's own alias of a member type of a
        class bound to a template parameter (`using Ivec = typename Ktraits::Ivec; Ivec x0;`, the
        traits' `Vec<input_t, NUM_ELTS>`: flash-attention's layer norm), where `type_bytes` knows it."""
        text = through_aliases(self.aliases, type_text)
        if text == type_text.strip() or "::" not in text or self.type_bytes is None:
            return None
        return self.type_bytes(text)

    def declaration(self, st: Node) -> None:
        type_node = st.child_by_field_name("type")
        type_text = type_node.text.decode() if type_node is not None else ""
        for d in st.children_by_field_name("declarator"):
            name, _ = syntax.declarator_name(d)
            if name is None:
                continue
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            target = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
            self.declared_at[name] = self.loops
            cls = self._class_of(type_text)
            if cls is not None:
                self.class_objects[name] = cls
            else:
                self.class_objects.pop(name, None)   # a name declared again, of another type
            nbytes = self._object_bytes(type_text) if cls is None and value is None and target is not None \
                and target.type in ("identifier", "array_declarator") else None
            if nbytes:   # `Ivec x0;`, `Wvec gamma[LDGS];`: a vector of the traits class (its methods measured by it)
                self.obj_bytes[name] = nbytes
            if target is not None and target.type == "array_declarator":
                self.env[name] = "array"
                if BYTE_TYPE.fullmatch(type_text.strip()):
                    self.byte_arrays.add(name)
                continue
            if "thread_block_tile" in type_text or "tiled_partition" in (value.text.decode() if value else ""):
                size = tile_size(type_text + (value.text.decode() if value else ""), self.constants)
                self.env[name] = f"tile:{size}"
                continue
            if "thread_block" in type_text or (value is not None and "this_thread_block" in value.text.decode()):
                self.env[name] = "tile:block"
                continue
            view = self._view(type_text, d, value)
            if view is not None:   # its methods are followed where it is called, here or in a helper it is passed to
                self.env[name] = view
                continue
            plain = target is not None and target.type == "identifier"
            if plain and "<" in type_text and self.type_bytes is not None:
                nbytes = self.type_bytes(type_text)
                if nbytes:
                    self.obj_bytes[name] = nbytes
            if plain and (type_node is not None and type_node.type in ("template_type", "type_identifier")
                          or value is not None and value.type == "lambda_expression"):
                self.objects.add(name)   # an object the kernel may call (a functor, a lambda)
                self.object_types[name] = type_text
            if value is None:   # declared, assigned later (`int x_index; if (..) x_index = ..`)
                self.env[name] = UNSET
                continue
            if value.type == "initializer_list":
                entries = [self.expr(c) for c in value.named_children if c.type != "comment"]
                arrays = target is not None and any(x.type == "array_declarator" for x in syntax.walk(target))
                # a local table of the parameters' pointers: a write through an entry writes them
                self.env[name] = Table(tuple(entries)) if arrays and entries and all(  # type: ignore[arg-type]
                    isinstance(e, Ptr) for e in entries) else UNKNOWN
                continue
            if any(c.type == "type_qualifier" and c.text == b"const" for c in st.children) and is_condition(value):
                flag = truth_of(value, self.constants, self.sizes)   # `use_len = input_lengths != nullptr` with it null: false
                if flag is not None:
                    self.constants[name] = int(flag)
            v = self.expr(value)
            self.assigned[name] = [value]
            rel = self._offset_of(value)
            if rel is not None and rel[0] != name:
                self.offsets[name] = rel
            up = self._upper_offset(value) if rel is None else None
            if up is not None and up[0] != name:
                self.upper[name] = up
            if isinstance(v, Ptr) and target is not None and target.type == "pointer_declarator":
                v = self._rescale(v, type_text)
            # (a row of a tensor accessor, `auto row = scores[r]`, is indexed further)
            self.env[name] = v if isinstance(v, (Iv, Ptr, accessors.Indexed)) else UNKNOWN
            self.moved.pop(name, None)
            self._forget(name)
            if isinstance(v, (Iv, Ptr)) or is_condition(value):   # a condition kept: `x_check ? x[i] : 0` narrows by it
                self.defs[name] = (value, frozenset(x.text.decode() for x in syntax.walk(value)
                                                    if x.type == "identifier"))
