"""jit's own programs for a jitted call under ``jax.grad``, and how they are wired.

Under ``jax.grad``, ``jax.value_and_grad`` or ``jax.vjp`` jax does not run a
jitted function's program: it linearizes the function's jaxpr for the inputs
that carry a tangent (``perturbed``), and compiles two programs of its own.
The primal program computes the outputs and the residuals the backward pass
needs; the transposed one, made when the backward pass reaches the call,
takes those residuals and the cotangents of the outputs the rest of the
computation used, and gives the inputs' cotangents. Both depend on which
inputs are perturbed and on which outputs have a cotangent (jax prunes the
others before it transposes), so a gradient served by any other program (an
export's own VJP, say) can differ from python's in the last bits.

``capture`` asks jax for exactly those two programs, by tracing
``jax.vjp`` of the function with ``jax.make_jaxpr`` and reading the two jitted
calls out of the result, with where each of their inputs comes from: an
input of the call (``("input", i)``), an output of the primal program
(``("primal", j)``), or a constant of the trace (``("constant", k)``: an
array the function closes over, which jax hands the transposed program as
a residual as it is). The jax plugin exports them at the build, for the calls
a recording saw; the runtime serves such a call by them, and captures the
transposed program of a cotangent pattern the recording did not see as jax
would, tracing the function.

``Linearized`` is the artifact's record of them (a ``jax.export`` entry's
``linearized``). jax is imported only by ``capture``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Captured",
    "Linearized",
    "Transposed",
    "Unlinearizable",
    "capture",
    "leaf_aval",
    "wiring",
]

#: Where a program's input comes from: ``("input", i)``, the call's leaf ``i``;
#: ``("primal", j)``, the primal program's output ``j``; ``("constant", k)``,
#: the trace's constant ``k`` (the ``constants`` program's output ``k``).
Source = tuple[str, int]

#: The kinds of ``Source``.
SOURCES = ("input", "primal", "constant")


class Unlinearizable(Exception):
    """jax's programs for this call cannot be read out; the message says why."""


@dataclass(frozen=True)
class Transposed:
    """The transposed program for one pattern of output cotangents."""

    #: The output leaves with a cotangent, ascending: the program takes their
    #: cotangents after its residuals, in this order.
    cotangents: tuple[int, ...]
    #: Where each residual the program takes comes from.
    residuals: tuple[Source, ...]
    #: Per perturbed input, in order, which of the program's outputs is its
    #: cotangent; None where jax gives it none (a symbolic zero).
    gradients: tuple[int | None, ...]
    export: bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "cotangents": list(self.cotangents),
            "residuals": [list(s) for s in self.residuals],
            "gradients": list(self.gradients),
        }


@dataclass(frozen=True)
class Linearized:
    """jit's programs for calls of one variant at concrete inputs, with
    these inputs perturbed.

    ``inputs`` are the call's leaves as (dtype, shape, weakly typed), in the
    order the variant's export takes them; ``perturbed`` says, per leaf,
    whether it carries a tangent.
    """

    variant: int
    inputs: tuple[tuple[str, tuple[int, ...], bool], ...]
    perturbed: tuple[bool, ...]
    #: Where each input of the primal program comes from.
    primal_inputs: tuple[Source, ...]
    #: Where each output leaf of the function comes from.
    outputs: tuple[Source, ...]
    primal: bytes
    transposed: tuple[Transposed, ...]
    #: A program of no inputs that gives the trace's constants the others
    #: take (``("constant", k)``), as exported; empty where there are none.
    constants: bytes = b""

    #: The most linearizations one entry holds, and transposed programs each.
    MAX = 64
    MAX_TRANSPOSED = 64

    def members(self, index: int) -> dict[str, bytes]:
        """Its payload members, as the entry's ``index``-th linearization."""
        found = {f"linearized.{index}": self.primal}
        for j, transposed in enumerate(self.transposed):
            found[f"linearized.{index}.{j}"] = transposed.export
        if self.constants:
            found[f"linearized.{index}.constants"] = self.constants
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "inputs": [[dtype, list(shape), weak] for dtype, shape, weak in self.inputs],
            "perturbed": list(self.perturbed),
            "primal_inputs": [list(s) for s in self.primal_inputs],
            "outputs": [list(s) for s in self.outputs],
            "transposed": [t.to_json() for t in self.transposed],
            "constants": bool(self.constants),
        }

    @classmethod
    def from_json(cls, item: Any, index: int, payload: Mapping[str, bytes]) -> Linearized:
        """One linearization as an entry's metadata and payload hold it;
        ``ValueError`` naming what does not read."""
        keys = {
            "variant",
            "inputs",
            "perturbed",
            "primal_inputs",
            "outputs",
            "transposed",
            "constants",
        }
        if not isinstance(item, Mapping) or set(item) != keys:
            raise ValueError(f"must have exactly {sorted(keys)}")
        inputs = tuple(_aval(a) for a in _list(item["inputs"], "inputs"))
        perturbed = tuple(_list(item["perturbed"], "perturbed"))
        if len(perturbed) != len(inputs) or not all(isinstance(p, bool) for p in perturbed):
            raise ValueError("perturbed must be one true or false per input")
        transposed = []
        for j, raw in enumerate(_list(item["transposed"], "transposed")[: cls.MAX_TRANSPOSED + 1]):
            if not isinstance(raw, Mapping) or set(raw) != {"cotangents", "residuals", "gradients"}:
                raise ValueError("a transposed program must have cotangents, residuals, gradients")
            cotangents = tuple(_list(raw["cotangents"], "cotangents"))
            if not all(type(c) is int and c >= 0 for c in cotangents):
                raise ValueError("cotangents must be output positions")
            gradients = tuple(_list(raw["gradients"], "gradients"))
            if len(gradients) != sum(perturbed) or not all(
                g is None or (type(g) is int and g >= 0) for g in gradients
            ):
                raise ValueError("gradients must be an output position or null per perturbed input")
            export = payload.get(f"linearized.{index}.{j}")
            if not isinstance(export, bytes | bytearray):
                raise ValueError(f"payload linearized.{index}.{j} is missing")
            transposed.append(
                Transposed(
                    cotangents, _sources(raw["residuals"], len(inputs)), gradients, bytes(export)
                )
            )
        if len(transposed) > cls.MAX_TRANSPOSED:
            raise ValueError(f"holds more than {cls.MAX_TRANSPOSED} transposed programs")
        primal = payload.get(f"linearized.{index}")
        constants = payload.get(f"linearized.{index}.constants", b"")
        if not isinstance(item["constants"], bool) or item["constants"] != bool(constants):
            raise ValueError(f"constants must say whether payload linearized.{index}.constants is")
        variant = item["variant"]
        if type(variant) is not int or variant < 0:
            raise ValueError("variant must be a variant's position")
        if not isinstance(primal, bytes | bytearray):
            raise ValueError(f"payload linearized.{index} is missing")
        return cls(
            variant=variant,
            inputs=inputs,
            perturbed=perturbed,
            primal_inputs=_sources(item["primal_inputs"], len(inputs)),
            outputs=_sources(item["outputs"], len(inputs)),
            primal=bytes(primal),
            transposed=tuple(transposed),
            constants=bytes(constants),
        )


def _list(value: Any, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list")
    return value


def _aval(value: Any) -> tuple[str, tuple[int, ...], bool]:
    if not (
        isinstance(value, list)
        and len(value) == 3
        and isinstance(value[0], str)
        and isinstance(value[1], list)
        and all(type(d) is int and d >= 0 for d in value[1])
        and isinstance(value[2], bool)
    ):
        raise ValueError(f"an input is {value!r}, not [dtype, [dims], weak]")
    return value[0], tuple(value[1]), value[2]


def _sources(value: Any, inputs: int) -> tuple[Source, ...]:
    found = []
    for item in _list(value, "sources"):
        if not (
            isinstance(item, list)
            and len(item) == 2
            and item[0] in SOURCES
            and type(item[1]) is int
            and item[1] >= 0
            and (item[0] != "input" or item[1] < inputs)
        ):
            raise ValueError(f"a source is {item!r}, not [input|primal|constant, position]")
        found.append((item[0], item[1]))
    return tuple(found)


@dataclass(frozen=True)
class Captured:
    """What ``capture`` read out of jax: the two programs as closed jaxprs,
    and where their inputs and the function's outputs come from."""

    primal: Any
    transposed: Any
    primal_inputs: tuple[Source, ...]
    outputs: tuple[Source, ...]
    residuals: tuple[Source, ...]
    gradients: tuple[int | None, ...]
    #: The trace's constants the sources name, as arrays.
    constants: tuple[Any, ...]


def capture(
    function: Callable[..., Sequence[Any]],
    avals: Sequence[Any],
    perturbed: Sequence[bool],
    cotangents: Sequence[int],
) -> Captured:
    """jit's primal and transposed programs for ``function`` (a jitted
    function of the call's leaves, returning its output leaves) at ``avals``
    (``jax.ShapeDtypeStruct``), with the ``perturbed`` leaves carrying a
    tangent and the outputs ``cotangents`` given one.

    ``Unlinearizable`` where jax's trace does not have the two jitted calls
    this reads.
    """
    import jax
    from jax.extend.core import Literal

    count = len(avals)
    outputs = jax.eval_shape(lambda *leaves: list(function(*leaves)), *avals)
    wanted = list(cotangents)
    if not wanted or max(wanted) >= len(outputs):
        raise Unlinearizable(f"no such outputs as {wanted}")

    def traced(*values: Any) -> Any:
        leaves, given = values[:count], values[count:]
        where = [i for i, p in enumerate(perturbed) if p]

        def of(*diff: Any) -> tuple[list[Any], list[Any]]:
            full = list(leaves)
            for i, value in zip(where, diff, strict=True):
                full[i] = value
            out = list(function(*full))
            return [out[j] for j in wanted], out

        _, pullback, out = jax.vjp(of, *[leaves[i] for i in where], has_aux=True)
        return out, pullback(list(given))

    try:
        closed = jax.make_jaxpr(traced)(*avals, *[outputs[j] for j in wanted])
    except Exception as error:
        raise Unlinearizable(f"jax.vjp of it does not trace: {type(error).__name__}") from None
    jaxpr = closed.jaxpr
    calls = [e for e in jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
    if len(calls) != 2:
        raise Unlinearizable(f"its trace under jax.vjp has {len(calls)} jitted calls, not 2")
    primal, transposed = calls
    sources: dict[Any, Source] = {v: ("input", i) for i, v in enumerate(jaxpr.invars[:count])}
    sources.update({v: ("primal", j) for j, v in enumerate(primal.outvars)})
    held = dict(zip(jaxpr.constvars, closed.consts, strict=True))
    constants: list[Any] = []

    def source(atom: Any) -> Source:
        if isinstance(atom, Literal):
            value = atom.val
        elif atom in sources:
            return sources[atom]
        elif atom in held:
            value = held[atom]
        else:
            raise Unlinearizable(f"a program takes {atom}, which the trace does not give")
        constants.append(jax.numpy.asarray(value, dtype=atom.aval.dtype))
        sources[atom] = ("constant", len(constants) - 1)
        return sources[atom]

    def wired(atoms: Sequence[Any]) -> tuple[Source, ...]:
        return tuple(source(a) for a in atoms)

    given = list(jaxpr.invars[count:])
    residuals = len(transposed.invars) - len(given)
    if residuals < 0 or list(transposed.invars[residuals:]) != given:
        raise Unlinearizable("the transposed program does not take the cotangents last")
    produced = {v: k for k, v in enumerate(transposed.outvars)}
    gradients = tuple(produced.get(v) for v in jaxpr.outvars[len(outputs) :])
    if len(gradients) != sum(perturbed):
        raise Unlinearizable("the trace does not give one cotangent per perturbed input")
    return Captured(
        primal=primal.params["jaxpr"],
        transposed=transposed.params["jaxpr"],
        primal_inputs=wired(primal.invars),
        outputs=wired(jaxpr.outvars[: len(outputs)]),
        residuals=wired(transposed.invars[:residuals]),
        gradients=gradients,
        constants=tuple(constants),
    )


def leaf_aval(value: Any) -> tuple[str, tuple[int, ...], bool]:
    """A call's leaf as a ``Linearized`` names it: dtype, shape, weakly typed
    (a Python scalar is, as jit traces it)."""
    import jax

    aval = jax.typeof(value)
    return str(aval.dtype), tuple(aval.shape), bool(aval.weak_type)


def wiring(sources: Sequence[Source], pools: Mapping[str, Sequence[Any]]) -> list[Any]:
    """The values ``sources`` name, among ``pools``: the call's inputs
    (``"input"``), its primal program's outputs (``"primal"``), the trace's
    constants (``"constant"``)."""
    return [pools[kind][i] for kind, i in sources]
