"""Where the front writes IR: ops appended to the block being built.

``scratch`` discards what is written. The front lowers a loop's body once or
more in scratch before it writes it, to learn the types of the locals the
body assigns and whether a loop's test can fail; nothing of those rounds
reaches the function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ppy_plugin_xla.folding import Constant, Folding
from ppy_plugin_xla.ir import OPS, Block, Eqn, Guard, Loop, Stmt, Var

__all__ = ["Emitter"]


class Emitter(Folding[Var]):
    def __init__(self) -> None:
        self.stmts: list[Stmt] = []
        self.scratch = False

    def _add(self, stmt: Stmt) -> None:
        if not self.scratch:
            self.stmts.append(stmt)

    def const(self, kind: str, value: Constant) -> Var:
        if kind == "bool":
            var = Var(kind, bool(value))
        else:
            var = Var(kind, float(value) if kind == "float" else int(value))
        self._add(Eqn("const", (), var))
        return var

    def _op(self, name: str, operands: Sequence[Var], kind: str, direction: str = "") -> Var:
        return self.eqn(name, operands, kind, direction)

    def eqn(self, op: str, args: Sequence[Var], kind: str, param: str = "") -> Var:
        """``op(args)``, of type ``kind``, for an op that cannot fail here."""
        assert op in OPS, op
        out = Var(kind)
        self._add(Eqn(op, tuple(args), out, param))
        return out

    def guarded(
        self, op: str, args: Sequence[Var], kind: str, param: str, pred: Var, flag: Var
    ) -> tuple[Var, Var]:
        """``op(args)`` where it may fail: run under ``pred``, it adds to the
        fallback ``flag``. Returns the value and the flag after it, which is
        ``flag`` itself where ``pred`` is false: that op never runs."""
        assert op in OPS, op
        out, after = Var(kind), flag if pred.const is False else Var("bool")
        self._add(Eqn(op, tuple(args), out, param, Guard(pred, flag, after)))
        return out, after

    def while_(
        self,
        init: Sequence[Var],
        cond: Callable[[list[Var]], Var],
        body: Callable[[list[Var]], list[Var]],
    ) -> list[Var]:
        """A loop carrying ``init``; ``cond`` and ``body`` get the block's parameters."""
        outer = self.stmts
        blocks: list[Block] = []
        for region in (cond, body):
            params = [Var(v.type) for v in init]
            self.stmts = []
            try:
                got = region(params)
            finally:
                written, self.stmts = self.stmts, outer
            results = [got] if isinstance(got, Var) else got
            blocks.append(Block(tuple(params), tuple(written), tuple(results)))
        if [r.type for r in blocks[1].results] != [v.type for v in init]:
            raise AssertionError("while body changed the carried types")
        out = [Var(v.type) for v in init]
        self._add(Loop(tuple(init), blocks[0], blocks[1], tuple(out)))
        return out
