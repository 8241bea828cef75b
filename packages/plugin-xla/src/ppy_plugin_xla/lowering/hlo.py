"""A writer of StableHLO text for rank-0 values, in MLIR's generic form.

The generic form (``"stablehlo.add"(%a, %b) : (...) -> ...``) is verbose but
stable across StableHLO releases, and it is all the compiler needs: scalars
of three element types, elementwise ops, ``compare``, ``select`` and
``while``. Values are named ``%vN`` from one counter for the whole module, so
a name is unique even across nested regions (which may read values defined
above them).

Constants of i1 are folded here too (``folding.Folding``, as the front folds
them), so conditions the lowering rules build from constants never reach
the module; that keeps straight-line code free of selects.

Two rewrites happen on the way from this text to machine code that IEEE
arithmetic does not allow, and no compile option turns them off, so the
module is written so that they cannot apply:

- The compiler's folders rewrite ``x + 0.0`` to ``x`` (and ``-x + 0.0`` to
  ``-x``), which is wrong at ``x = -0.0``.
- XLA's CPU backend lets LLVM contract ``a * b + c`` into one fused
  multiply-add, rounded once instead of twice.

So a float constant +0.0, and every float product, goes through ``opaque``:
an integer ``xor`` with ``replica_id``, which is 0 in a one-device
executable but unknown to every compiler stage, so none can fold or fuse
across it. (An ``optimization_barrier`` is not enough: XLA removes it
before the passes that fold.)

A third rewrite changes a library function when an operand is a constant:
``atan2(y, 1.0)`` and ``pow(2.0, y)`` are computed by other approximations
than the general ones (1 ulp off libm in about a third of the inputs), so
every operand of a library function goes through ``opaque`` too
(``Builder.library``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ppy_plugin_xla.folding import Constant, Folding

__all__ = ["ELEMENT", "Builder", "Value"]

#: Python scalar type -> StableHLO element type.
ELEMENT = {"float": "f64", "int": "i64", "bool": "i1"}


@dataclass(frozen=True)
class Value:
    """One SSA value: its name, its Python type, and its value when constant."""

    name: str
    type: str  # "float" | "int" | "bool"
    const: Constant | None = None

    @property
    def tensor(self) -> str:
        return f"tensor<{ELEMENT[self.type]}>"


def _literal(kind: str, value: float | int | bool) -> str:
    if kind == "float":
        bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0]
        return f"0x{bits:016X}"
    if kind == "bool":
        return "true" if value else "false"
    return str(int(value))


@dataclass
class Builder(Folding[Value]):
    """Appends ops to the current region."""

    lines: list[str] = field(default_factory=list)
    counter: list[int] = field(default_factory=lambda: [0])
    depth: int = 2
    #: Ops at the top of ``main``, before the body: what every region reads.
    prologue: list[str] = field(default_factory=list)
    #: The mask ``negate`` flips a sign with, once written (``_sign_mask``).
    sign: Value | None = None

    def fresh(self) -> str:
        self.counter[0] += 1
        return f"%v{self.counter[0]}"

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    # -- constants and generic ops -------------------------------------------------

    def const(self, kind: str, value: Constant) -> Value:
        name = self.fresh()
        element = ELEMENT[kind]
        literal = _literal(kind, value)
        self.emit(
            f'{name} = "stablehlo.constant"() {{value = dense<{literal}> : '
            f"tensor<{element}>}} : () -> tensor<{element}>"
        )
        if kind == "float" and literal in (_literal("float", 0.0), _literal("float", -0.0)):
            # x + 0.0 and x - -0.0 are not x at -0.0, whatever a folder says
            name = self.opaque(Value(name, kind)).name
        if kind == "bool":
            return Value(name, kind, bool(value))
        return Value(name, kind, float(value) if kind == "float" else int(value))

    def op(self, opname: str, operands: Sequence[Value], kind: str, attrs: str = "") -> Value:
        name = self.fresh()
        args = ", ".join(v.name for v in operands)
        types = ", ".join(v.tensor for v in operands)
        attr = f" {{{attrs}}}" if attrs else ""
        self.emit(
            f'{name} = "stablehlo.{opname}"({args}){attr} : ({types}) -> tensor<{ELEMENT[kind]}>'
        )
        return Value(name, kind)

    def unary(self, opname: str, a: Value) -> Value:
        return self.op(opname, [a], a.type)

    def binary(self, opname: str, a: Value, b: Value) -> Value:
        return self.op(opname, [a, b], a.type)

    def _op(self, name: str, operands: Sequence[Value], kind: str, direction: str = "") -> Value:
        if name != "compare":
            return self.op(name, operands, kind)
        compared = {"float": "FLOAT", "int": "SIGNED", "bool": "UNSIGNED"}[operands[0].type]
        return self.op(
            "compare",
            operands,
            "bool",
            f"comparison_direction = #stablehlo<comparison_direction {direction}>, "
            f"compare_type = #stablehlo<comparison_type {compared}>",
        )

    def bitcast(self, a: Value, kind: str) -> Value:
        return self.op("bitcast_convert", [a], kind)

    def negate(self, a: Value) -> Value:
        """``-a`` for a float as CPython computes it: the sign bit flipped.

        XLA and LLVM fold a negation into the arithmetic around it (``-x +
        1.0`` becomes ``1.0 - x``), and x86 propagates a NaN operand with its
        own sign, so a NaN would come out with ``x``'s sign where CPython's
        comes out with its flip. LLVM reads a flip of the sign bit as a
        negation too, so the mask's sign bit is one the compiler cannot know:
        the unknown zero shifted into it (shifted, because LLVM knows that the
        top bit of a replica id widened to 64 bits is clear).
        """
        sign = self._sign_mask()
        return self.bitcast(self.binary("xor", self.bitcast(a, "int"), sign), "float")

    def _sign_mask(self) -> Value:
        """The sign bit, by the unknown zero shifted into it, written once at
        the top of ``main``: a negation in a loop pays one ``xor``."""
        if self.sign is None:
            lines, depth = self.lines, self.depth
            self.lines, self.depth = self.prologue, 2
            try:
                unknown = self.binary("shift_left", self._unknown_zero(), self.const("int", 63))
                self.sign = self.binary("xor", self.const("int", -(1 << 63)), unknown)
            finally:
                self.lines, self.depth = lines, depth
        return self.sign

    def opaque(self, a: Value) -> Value:
        """``a``, as a value the backend cannot fuse with what uses it."""
        bits = self.binary("xor", self.bitcast(a, "int"), self._unknown_zero())
        return self.bitcast(bits, "float")

    def _unknown_zero(self) -> Value:
        """An int64 0 the compiler cannot know: the replica's id, on one replica."""
        replica = self.fresh()
        self.emit(f'{replica} = "stablehlo.replica_id"() : () -> tensor<ui32>')
        zero = self.fresh()
        self.emit(f'{zero} = "stablehlo.convert"({replica}) : (tensor<ui32>) -> tensor<i64>')
        return Value(zero, "int")

    def library(self, opname: str, *operands: Value) -> Value:
        """A libm-like op (``sine``, ``atan2``, ``power``, ...) computed by its
        general approximation: no operand is a constant the backend could
        specialize it for."""
        return self.op(opname, [self.opaque(a) for a in operands], operands[0].type)

    # -- structured control flow ---------------------------------------------------

    def while_(
        self,
        init: Sequence[Value],
        cond: Callable[[list[Value]], Value],
        body: Callable[[list[Value]], list[Value]],
    ) -> list[Value]:
        """``stablehlo.while`` over ``init``; ``cond``/``body`` get the block arguments."""
        name = self.fresh()
        count = len(init)
        types = ", ".join(v.tensor for v in init)
        args = ", ".join(v.name for v in init)
        self.emit(f'{name}:{count} = "stablehlo.while"({args}) ({{')
        for index, _region in enumerate((cond, body)):
            params = [Value(self.fresh(), v.type) for v in init]
            header = ", ".join(f"{p.name}: {p.tensor}" for p in params)
            self.emit(f"^bb0({header}):")
            self.depth += 1
            if index == 0:
                result = cond(params)
                self.emit(f'"stablehlo.return"({result.name}) : ({result.tensor}) -> ()')
            else:
                results = body(params)
                if [r.type for r in results] != [v.type for v in init]:
                    raise AssertionError("while body changed the carried types")
                names = ", ".join(r.name for r in results)
                self.emit(f'"stablehlo.return"({names}) : ({types}) -> ()')
            self.depth -= 1
            if index == 0:
                self.emit("}, {")
        self.emit(f"}}) : ({types}) -> ({types})")
        return [Value(f"{name}#{i}", v.type) for i, v in enumerate(init)]

    # -- the calling convention ----------------------------------------------------

    def parameters(self, kinds: Sequence[str]) -> list[Value]:
        """The parameters, read from ``main``'s one ``tensor<Nxi64>`` argument.

        Each parameter is one 64-bit word: an int as it is, a float's bits,
        a bool as 0 or 1. One argument means one device buffer per call,
        however many parameters the function has.
        """
        count = len(kinds)
        found = []
        for index, kind in enumerate(kinds):
            piece = self.fresh()
            self.emit(
                f'{piece} = "stablehlo.slice"(%args) {{start_indices = array<i64: {index}>, '
                f"limit_indices = array<i64: {index + 1}>, strides = array<i64: 1>}} : "
                f"(tensor<{count}xi64>) -> tensor<1xi64>"
            )
            word = Value(self.fresh(), "int")
            self.emit(
                f'{word.name} = "stablehlo.reshape"({piece}) : (tensor<1xi64>) -> tensor<i64>'
            )
            if kind == "float":
                found.append(self.bitcast(word, "float"))
            elif kind == "bool":
                found.append(self.compare("NE", word, self.const("int", 0)))
            else:
                found.append(word)
        return found

    def _word(self, a: Value) -> str:
        """``a``'s 64 bits as a ``tensor<1xi64>``."""
        bits = self.bitcast(a, "int") if a.type == "float" else self.convert(a, "int")
        name = self.fresh()
        self.emit(f'{name} = "stablehlo.reshape"({bits.name}) : (tensor<i64>) -> tensor<1xi64>')
        return name

    def module(self, count: int, result: Value, flag: Value) -> str:
        """The whole module: ``@main`` taking ``count`` parameters as one
        ``tensor<Nxi64>`` (``parameters``), returning one ``tensor<2xi64>``:
        the result's 64 bits, then the flag as 0 or 1. One output is read
        back in one copy."""
        words = ", ".join((self._word(result), self._word(flag)))
        packed = self.fresh()
        self.emit(
            f'{packed} = "stablehlo.concatenate"({words}) {{dimension = 0 : i64}} : '
            "(tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>"
        )
        header = f"%args: tensor<{count}xi64>" if count else ""
        body = "\n".join([*self.prologue, *self.lines])
        return (
            "module @ppy_xla_scalar {\n"
            f"  func.func public @main({header}) -> (tensor<2xi64>) {{\n"
            f"{body}\n"
            f'    "func.return"({packed}) : (tensor<2xi64>) -> ()\n'
            "  }\n"
            "}\n"
        )
