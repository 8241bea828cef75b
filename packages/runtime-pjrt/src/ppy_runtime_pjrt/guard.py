"""The run-time guard: do a call's array leaves match what was staged, and if not, why.

A call is first bound to the function's signature and its pytrees checked
(``calls``); what reaches this guard is the leaves, in order. The staged
path is only for concrete ``jax.Array`` or ``numpy.ndarray`` leaves whose
rank, fixed dims and dtype match the entry's input description and whose
symbolic dims fit one value of each symbol across the leaves
(``dims.solve``: ``B`` binds it, ``2*B`` or ``B + 1`` is checked against it
or solved for it). Everything else goes to the original function with a
``Fallback`` that says why.

This module is the slow path: it runs once per new call signature (and on
every call that falls back). The steady-state check is jax's own
dispatcher, which serves a signature only after ``Guard.check`` accepted it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ppy.runtime import WEAK_SCALARS, WIDE_SCALARS, TensorSpec

from ppy_runtime_pjrt.dims import DimExpr, Unfit, Use, parse_dim, solve

__all__ = ["Fallback", "Guard", "Signature", "type_name"]

#: The concrete (shape, dtype) of each positional argument.
Signature = tuple[tuple[tuple[int, ...], Any], ...]

_SCALARS = (bool, int, float, complex)


@dataclass(frozen=True)
class Fallback:
    """Why one call went to the original: a stable category and a sentence."""

    #: signature (the call does not bind, or leaves an input to its default),
    #: static (a static value that was not staged), tree (another pytree
    #: structure), tracer, scalar, list, type, count, rank, dim, dtype, symbolic
    #: (no one value of a symbol fits), size (a symbolic dim below 1, or a size
    #: its expression cannot have, as 5 for ``2*B``), device (sharded, or
    #: committed to different devices, for an export on one device), sharding (not laid
    #: out over a mesh as a sharded export's inputs are), compile (the export
    #: refused the shape), config (another jax configuration), captured (a
    #: global the trace read changed) or platform (the export is for another
    #: platform, found at the first call where binding ran before jax's
    #: backend started).
    category: str
    detail: str


def _name(spec: TensorSpec, index: int) -> str:
    return spec.name or f"argument {index}"


class Guard:
    """The input description of one entry, resolved against this process's jax.

    ``dtypes`` are the dtype objects of the specs (resolved by the caller, so
    that this module needs no jax); ``array_types`` the exact types that may
    take the staged path; ``tracer_type`` jax's ``Tracer``. A string dim that
    is not a dimension expression raises ValueError here, at bind time.
    """

    def __init__(
        self,
        specs: Sequence[TensorSpec],
        dtypes: Sequence[Any],
        *,
        array_types: tuple[type, ...],
        tracer_type: type,
        sharded: bool = False,
        constraints: Sequence[str] = (),
        host_types: tuple[type, ...] = (),
        canonical: Callable[[Any], Any] | None = None,
    ) -> None:
        self.specs = tuple(specs)
        #: What the export assumes of its symbols: ``(text, left, comparison, right)``.
        self.constraints = tuple(_constraint(text) for text in constraints)
        #: Inputs are laid out over a mesh (``placement.Placement`` checks how),
        #: so they are committed to their devices, as a sharded array is.
        self.sharded = sharded
        self.dtypes = tuple(dtypes)
        self.array_types = array_types
        #: Host data (NumPy arrays and scalars) among ``array_types``: jit
        #: converts it to the dtype ``canonical`` gives (``float64`` to
        #: ``float32`` where x64 is off), and so does the executable.
        self.host_types = host_types
        self.canonical = canonical
        self.tracer_type = tracer_type
        self.dims: tuple[tuple[int | DimExpr, ...], ...] = tuple(
            tuple(d if isinstance(d, int) else parse_dim(d) for d in spec.dims)
            for spec in self.specs
        )

    def check(self, args: Sequence[Any]) -> Signature | Fallback:
        """The leaves' signature if they may take the staged path, else why not."""
        for index, arg in enumerate(args):
            if isinstance(arg, self.tracer_type):
                name = _name(self.specs[index], index) if index < len(self.specs) else "an input"
                return Fallback("tracer", f"{name} is a tracer (called inside jit, grad or vmap)")
        if len(args) != len(self.specs):
            return Fallback(
                "count", f"called with {len(args)} arrays, staged for {len(self.specs)}"
            )
        uses: list[Use] = []
        signature = []
        for index, (arg, spec, dtype, dims) in enumerate(
            zip(args, self.specs, self.dtypes, self.dims, strict=True)
        ):
            name = _name(spec, index)
            if spec.weak and not spec.dims:  # a Python scalar, as jit traces one
                refused = _weak(arg, spec, name, self.array_types)
                if refused is not None:
                    return refused
                # Keyed apart from a strongly typed 0-d leaf of the same dtype:
                # jit traces the two apart, and their executables differ in
                # the outputs' weak types (``export._weakly``).
                signature.append(((), type(arg) if type(arg) in _WEAK else ("weak", arg.dtype)))
                continue
            if type(arg) not in self.array_types:
                return _not_an_array(arg, name)
            shape = tuple(arg.shape)
            if len(shape) != len(spec.dims):
                return Fallback(
                    "rank", f"{name} has rank {len(shape)}, staged for {len(spec.dims)} ({spec})"
                )
            if arg.dtype != dtype and not self._converted(arg, dtype):
                return Fallback("dtype", f"{name} is {arg.dtype}, staged for {spec.dtype}")
            if bool(getattr(arg, "weak_type", False)) != spec.weak:
                # jit traces a weakly typed leaf apart: what it returns is
                # weakly typed too, and promotes otherwise later.
                return Fallback(
                    "dtype",
                    f"{name} is a weakly typed {arg.dtype} (made from a Python scalar)"
                    if not spec.weak
                    else f"{name} is a strongly typed {arg.dtype}, staged weakly typed",
                )
            for axis, (size, dim) in enumerate(zip(shape, dims, strict=True)):
                if isinstance(dim, int):
                    if size != dim:
                        return Fallback(
                            "dim", f"{name} has {size} in dim {axis}, staged for {dim} ({spec})"
                        )
                else:
                    uses.append(Use(dim, size, name, axis))
            # A weakly typed leaf is its own signature, as jit keys it: another
            # variant's executable (``export._weakly``). Host data is keyed by
            # the dtype jit converts it to: the executable is the same.
            signature.append((shape, ("weak", dtype) if spec.weak else dtype))
        if uses:
            solved = solve(uses)
            if isinstance(solved, Unfit):
                return Fallback(solved.category, solved.detail)
            for text, left, holds, right in self.constraints:
                if not holds(left.value(solved), right.value(solved)):
                    named = sorted(left.symbols | right.symbols)
                    values = ", ".join(f"{symbol}={solved[symbol]}" for symbol in named)
                    return Fallback("constraint", f"{text} does not hold for {values}")
        return tuple(signature)

    def _converted(self, arg: Any, dtype: Any) -> bool:
        """Whether jit gives host data ``arg`` the staged ``dtype`` (a NumPy
        ``float64`` array is ``float32`` to jit where x64 is off)."""
        return (
            self.canonical is not None
            and type(arg) in self.host_types
            and self.canonical(arg.dtype) == dtype
        )


_COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
}


def _constraint(text: str) -> tuple[str, DimExpr, Callable[[int, int], bool], DimExpr]:
    """``"F <= N"`` as its two sides and the comparison (ValueError: not one)."""
    for symbol, compare in _COMPARISONS.items():
        left, found, right = text.partition(symbol)
        if found:
            return text, parse_dim(left.strip()), compare, parse_dim(right.strip())
    raise ValueError(f"constraint {text!r} is not e1 >= e2, e1 <= e2 or e1 == e2")


#: The Python scalars a weakly typed input takes (``WEAK_SCALARS``), and the
#: dtype jit gives each where x64 is on.
_WEAK = (int, float)
#: The Python ints each weakly typed int dtype holds; jit raises
#: OverflowError for any other.
_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _weak(arg: Any, spec: TensorSpec, name: str, array_types: tuple[type, ...]) -> Fallback | None:
    """A weakly typed input (``step: int``) takes what jit traces as one: a
    Python scalar of its kind, or a weakly typed array of its dtype, shape ()."""
    kind = type(arg)
    if kind in _WEAK:
        # A 64-bit one was traced with x64 on, and the configuration, checked
        # before the guard, says it still is: jit traces the scalar so too.
        if spec.dtype not in (WEAK_SCALARS[kind.__name__], WIDE_SCALARS[kind.__name__]):
            return Fallback("dtype", f"{name} is a Python {kind.__name__}, staged for {spec}")
        low, high = _RANGES.get(spec.dtype, (arg, arg))
        if kind is int and not low <= arg <= high:
            # jit refuses it too, with jax's own OverflowError
            return Fallback("scalar", f"{name} is an int outside {spec.dtype}")
        return None
    weak = getattr(arg, "weak_type", False)
    if kind in array_types and weak and tuple(arg.shape) == () and str(arg.dtype) == spec.dtype:
        return None
    if kind in array_types:
        return Fallback(
            "dtype",
            f"{name} is a {'' if weak else 'strongly typed '}"
            f"{arg.dtype}{list(arg.shape)}, staged for {spec} (a Python scalar)",
        )
    return _not_an_array(arg, name)


def _not_an_array(arg: Any, name: str) -> Fallback:
    if isinstance(arg, _SCALARS):
        return Fallback("scalar", f"{name} is a Python scalar ({type(arg).__name__})")
    if type(arg).__module__ == "numpy" and getattr(arg, "ndim", None) == 0:
        return Fallback("scalar", f"{name} is a NumPy scalar ({type(arg).__name__})")
    if isinstance(arg, list | tuple):
        return Fallback("list", f"{name} is a {type(arg).__name__}, not an array")
    return Fallback("type", f"{name} is a {type_name(type(arg))}, not an array")


def type_name(kind: type) -> str:
    """A type as a reader tells it apart: ``numpy.int64``, not ``int64``; a
    builtin by its own name."""
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
