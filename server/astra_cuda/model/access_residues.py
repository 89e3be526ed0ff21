"""The access walk's residue tests (a mixin of `access.Analyzer`, through `ConditionWalk`): an
index tested for its remainder (`d_id % 2 == 0`, `(i & 1) != 0`) keeps only values of that
residue. Separate because it is its own arithmetic on an interval's ends."""
from __future__ import annotations

from tree_sitter import Node

from .access_nodes import unparen
from .access_values import Iv


class ResidueWalk:
    """How a residue test narrows the index it tests."""

    def _residue(self, left: Node, right: Node, equal: bool) -> None:
        """`d_id % 2 == 0` (`i & 1` read as `i % 2`, a mask one below a power of two as that modulus;
        `!=` only where the modulus is 2, whose other residue is one): the index
        keeps only values of that residue, its interval's ends moved onto them — so a pair's partner
        read at `d_id + 1` reaches the last odd index below an even bound, not one past it. The
        modulus is recorded (`Facts.residues`): a bound that is no multiple of it leaves the last
        group partial, which `roles` probes for (TransformerEngine's interleaved RoPE pairs)."""
        for test, value in ((left, right), (right, left)):
            test = unparen(test)
            if test is None or test.type != "binary_expression":
                continue
            op = test.child_by_field_name("operator").type
            x, m = unparen(test.child_by_field_name("left")), self.expr(test.child_by_field_name("right"),
                                                                       evaluate_only=True)
            r = self.expr(value, evaluate_only=True)
            if op == "&" and isinstance(m, Iv) and m.lo is not None and m.lo == m.hi and m.lo > 0 \
                    and m.lo & (m.lo + 1) == 0:
                m = Iv.point(m.lo + 1)   # `i & 1`: i % 2
            elif op != "%":
                continue
            if x is None or x.type != "identifier" or not isinstance(cur := self.env.get(x.text.decode()), Iv) \
                    or not isinstance(m, Iv) or m.lo is None or m.lo != m.hi or m.lo < 2 \
                    or not isinstance(r, Iv) or r.lo is None or r.lo != r.hi or not 0 <= r.lo < m.lo:
                continue
            mod, res = m.lo, r.lo
            if not equal:   # `!= r`: the other residue, where there is only one other
                if mod != 2:
                    continue
                res = 1 - res
            if cur.lo is None or cur.hi is None or cur.lo < 0:
                continue
            self.facts.residues.add(mod)
            self.env[x.text.decode()] = Iv(cur.lo + (res - cur.lo) % mod, cur.hi - (cur.hi - res) % mod)
            self._narrow_defs(x.text.decode())
            return

