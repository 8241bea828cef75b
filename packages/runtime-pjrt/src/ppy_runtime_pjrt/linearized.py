"""Serve a call under ``jax.grad`` by jit's own programs, as the build exported them.

Under ``jax.grad`` jax runs a jitted call as two programs of its own
(``ppy.kinds.linearized``): a primal one, at the call, and a transposed one
per pattern of output cotangents, when the backward pass reaches it. The
build exported both for the calls a recording saw, so this serves such a
call without tracing the function: a ``jax.custom_vjp`` whose forward pass
runs the primal program and keeps its outputs and the call's inputs as
residuals, and whose backward pass, told which cotangents are symbolic
zeros (``symbolic_zeros=True``), runs the transposed program of that
pattern. The backward pass of a pattern the recording did not see, or one
given traced cotangents (``jax.jacrev`` batches them, an outer ``jax.jit``
traces them), is jax's own: the transposed program captured by tracing the
function, as jit would, and ``traced`` is told why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ppy.kinds.linearized import Captured, Linearized, capture, leaf_aval, wiring

__all__ = ["Programs", "serving"]


class Programs:
    """One ``Linearized``'s exports, deserialized at first use."""

    def __init__(self, linearized: Linearized) -> None:
        self.linearized = linearized
        self._primal: Any = None
        self._constants: list[Any] | None = None
        self._transposed: dict[tuple[int, ...], tuple[Any, Any]] = {}
        self._traced: dict[tuple[int, ...], tuple[Any, Captured]] = {}
        self._misfit: str | None = None

    def misfit(self) -> str | None:
        """Why these programs do not fit together, or None; checked once,
        before the first call they would serve. The artifact's reader checks
        each record's form, but how many values each program takes and
        gives is known only once it is deserialized: a source or a gradient
        naming a value no program gives (a damaged or edited artifact) would
        fail inside a backward pass, where nothing can fall back."""
        if self._misfit is None:
            try:
                self._misfit = self._fit() or ""
            except Exception as error:  # bytes jax cannot read as an export
                self._misfit = f"a program cannot be read ({type(error).__name__})"
        return self._misfit or None

    def _fit(self) -> str | None:
        """``misfit``'s reason, every program deserialized (and kept)."""
        import jax

        linearized = self.linearized
        primal = self.primal()
        constants = (
            len(jax.export.deserialize(bytearray(linearized.constants)).out_avals)
            if linearized.constants
            else 0
        )
        counts = {
            "input": len(linearized.inputs),
            "primal": len(primal.out_avals),
            "constant": constants,
        }
        named = [("the primal program's inputs", linearized.primal_inputs)]
        named.append(("the outputs", linearized.outputs))
        if any(kind == "primal" for kind, _ in linearized.primal_inputs):
            return "the primal program's inputs name its own outputs"
        if len(linearized.primal_inputs) != len(primal.in_avals):
            return f"the primal program takes {len(primal.in_avals)} inputs"
        for record in linearized.transposed:
            program = jax.export.deserialize(bytearray(record.export))
            self._transposed[record.cotangents] = (program, record)
            where = f"the transposed program of cotangents {record.cotangents}"
            if len(record.residuals) + len(record.cotangents) != len(program.in_avals):
                return f"{where} takes {len(program.in_avals)} inputs"
            if len(record.gradients) != sum(linearized.perturbed):
                return f"{where} gives {len(record.gradients)} gradients"
            if any(g is not None and not 0 <= g < len(program.out_avals) for g in record.gradients):
                return f"{where} gives no output that a gradient names"
            named.append((f"the residuals of {where}", record.residuals))
        for what, sources in named:
            for kind, index in sources:
                if not 0 <= index < counts[kind]:
                    return f"{what} name {kind} value {index} of {counts[kind]}"
        return None

    def primal(self) -> Any:
        if self._primal is None:
            import jax

            self._primal = jax.export.deserialize(bytearray(self.linearized.primal))
        return self._primal

    def constants(self) -> list[Any]:
        """The trace's constants the programs take, computed once."""
        if self._constants is None:
            self._constants = []
            if self.linearized.constants:
                import jax

                program = jax.export.deserialize(bytearray(self.linearized.constants))
                self._constants = list(program.call())  # type: ignore[no-untyped-call]
        return self._constants

    def transposed(self, pattern: tuple[int, ...]) -> tuple[Any, Any] | None:
        """The transposed program for ``pattern`` and its record, or None."""
        found = self._transposed.get(pattern)
        if found is None:
            import jax

            for record in self.linearized.transposed:
                if record.cotangents == pattern:
                    found = (jax.export.deserialize(bytearray(record.export)), record)
                    self._transposed[pattern] = found
        return found

    def traced(
        self, pattern: tuple[int, ...], original: Callable[..., list[Any]], values: list[Any]
    ) -> tuple[Any, Captured]:
        """jax's transposed program for a pattern not exported, captured from
        a trace of ``original`` at the leaves' avals, as a jitted function."""
        found = self._traced.get(pattern)
        if found is None:
            import jax
            from jax.extend.core import jaxpr_as_fun

            avals = [
                jax.ShapeDtypeStruct(shape, dtype, weak_type=weak)  # type: ignore[no-untyped-call]
                for dtype, shape, weak in map(leaf_aval, values)
            ]
            captured = capture(original, avals, self.linearized.perturbed, pattern)
            found = self._traced[pattern] = (jax.jit(jaxpr_as_fun(captured.transposed)), captured)
        return found


def serving(
    programs: Programs,
    original: Callable[..., list[Any]],
    traced: Callable[[str], None],
) -> Callable[..., list[Any]]:
    """A function of the call's leaves to its output leaves, differentiable
    in reverse by ``programs``. ``original`` is the jitted function of the
    same leaves: it serves a call with no tangent, and its trace the
    transposed program of a pattern the build did not export."""
    import jax
    from jax.custom_derivatives import SymbolicZero

    linearized = programs.linearized
    mask = linearized.perturbed

    @jax.custom_vjp
    def call(*leaves: Any) -> list[Any]:
        return list(original(*leaves))

    def forward(*given: Any) -> tuple[list[Any], tuple[list[Any], list[Any]]]:
        values = [x.value for x in given]
        pools = {"input": values, "constant": programs.constants()}
        primal = list(programs.primal().call(*wiring(linearized.primal_inputs, pools)))
        return wiring(linearized.outputs, {**pools, "primal": primal}), (values, primal)

    def backward(residuals: tuple[list[Any], list[Any]], cotangents: list[Any]) -> tuple[Any, ...]:
        values, primal = residuals
        pattern = tuple(j for j, c in enumerate(cotangents) if not isinstance(c, SymbolicZero))
        if not pattern:
            return tuple(None for _ in values)
        given = [cotangents[j] for j in pattern]
        found = programs.transposed(pattern)
        concrete = not any(isinstance(c, jax.core.Tracer) for c in given)
        if found is not None and concrete:
            program, record = found
            pools = {"input": values, "primal": primal, "constant": programs.constants()}
            outputs = list(program.call(*wiring(record.residuals, pools), *given))
            gradients = record.gradients
        else:
            why = "traced cotangents" if found is not None else f"cotangents of outputs {pattern}"
            traced(f"its backward pass was given {why}, which the build did not export")
            outputs, gradients = _as_jit(programs, original, values, pattern, primal, given)
        found_gradients = iter(gradients)
        return tuple(_at(outputs, next(found_gradients)) if carried else None for carried in mask)

    call.defvjp(forward, backward, symbolic_zeros=True)
    return call


def _at(outputs: list[Any], index: int | None) -> Any:
    return None if index is None else outputs[index]


def _as_jit(
    programs: Programs,
    original: Callable[..., list[Any]],
    values: list[Any],
    pattern: tuple[int, ...],
    primal: list[Any],
    given: list[Any],
) -> tuple[list[Any], tuple[int | None, ...]]:
    """The transposed program jit would run for ``pattern``, traced once per
    pattern and run as jit runs it, and which of its outputs is each
    perturbed input's cotangent."""
    program, captured = programs.traced(pattern, original, values)
    pools = {"input": values, "primal": primal, "constant": captured.constants}
    return list(program(*wiring(captured.residuals, pools), *given)), captured.gradients
