"""Does XLA compile an export with symbolic dims, given sizes, as it compiles the jitted function?

An export with a symbolic dim ("B") is one module for every size. A call of
a given size has jax refine the module's shapes first
(``refine_polymorphic_shapes``), and that pass also inlines every function
the module calls. jit's own module keeps the functions it calls apart
(``jnp.linspace``, the program's nested jits), and XLA may simplify a
called function before it inlines it: ``stop / 15`` with ``stop`` a
parameter becomes ``stop * (1/15)``, where the inlined module folds
``3 / 15`` to 0.2 exactly. On jax 0.12.1, ``x + jnp.linspace(-3, 3, 64)``
then differs from jit's result in 222 of 384 elements, in the last bit:
a staged call that silently computes something else.

So each export with symbolic dims is compiled at one set of sizes
(``PROBES``) and compared with what XLA compiles for the jitted function at
the same sizes, instruction for instruction (``diverges``). Where the two
programs differ, the export stays unstaged: the difference is in the
module's structure, not in the sizes. A program that compiles the same
computes the same bits. The check is conservative: two programs can differ
in an operand order and still agree on every bit, and such a function
stays too.

An export of fixed sizes is compared too where jit hands its program
constants as arguments, which the export embeds (jax 0.12,
``ppy_plugin_jax.constants``): the two are one program where XLA left each
embedded constant as it is, and jit's parameter is taken as that constant.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ppy.kinds.jax_programs import (
    Uncompared,
    compile_both,
    constant_texts,
    export_platform,
    jit_numbers,
    print_options,
    program,
)

__all__ = ["PROBES", "Uncompared", "diverges"]

#: The sizes tried, in turn, for every symbol: the first that both the
#: export and the jitted function compile for is compared.
PROBES: Final = (8, 3, 16, 2, 1, 32, 64)

#: The most bytes of constants jit hands its program that are compared,
#: printed in full, with the export's: beyond, the function stays.
CONSTANT_BYTES: Final = 1 << 22


def _sized(
    leaves: Sequence[Any], exported: Any, sizes: Mapping[str, int], mesh: Any
) -> list[Any] | None:
    """``leaves`` (the export's ``ShapeDtypeStruct`` inputs) with each symbol
    at its size, and laid out over ``mesh`` where they are over its abstract
    one; None where a dim would not be positive."""
    import jax
    from jax.sharding import NamedSharding

    sized = []
    for leaf, aval in zip(leaves, exported.in_avals, strict=True):
        shape = tuple(d if isinstance(d, int) else int(d._evaluate(sizes)) for d in aval.shape)
        if any(n < 1 for n in shape):
            return None
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and mesh is not None:
            sharding = NamedSharding(mesh, sharding.spec)
        weak = bool(getattr(leaf, "weak_type", False))
        sized.append(jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=sharding, weak_type=weak))  # type: ignore[no-untyped-call]  # jax leaves it unannotated
    return sized


def _mesh(leaves: Sequence[Any]) -> Any:
    """A mesh of this process's devices for the leaves' abstract one; None
    where they are laid out over none, False where this process has too
    few devices for it."""
    import jax
    from jax.sharding import AbstractMesh, NamedSharding

    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
            abstract = sharding.mesh
            if abstract.size > len(jax.devices()):
                return False
            return jax.make_mesh(
                abstract.axis_sizes,
                abstract.axis_names,
                axis_types=abstract.axis_types,
                devices=jax.devices()[: abstract.size],
            )
    return None


def diverges(
    jitted: Callable[[list[Any]], Any],
    exported: Any,
    leaves: Sequence[Any],
    order: Sequence[int] | None = None,
) -> dict[str, int] | None:
    """The sizes at which ``exported`` compiles to another program than jit's
    (``{}`` for an export without symbols: at its own sizes); None where they
    compile the same, where the export has no symbol and jit hands its
    program no constant (``ppy_plugin_jax.constants``), or where this process
    cannot compile it (another platform, by jax.export's name of this one:
    ``ppy.kinds.jax_programs.export_platform``; a mesh of more devices than it has:
    the run's compiler is not here to ask); ``Uncompared`` where no size of
    ``PROBES`` compiles for both.

    ``jitted`` lowers the jitted function, as the program calls it, for the
    export's inputs at given sizes (a list of ``ShapeDtypeStruct``).
    ``order`` is where each input jit takes, in the order it takes them, is
    among the export's, where the two orders differ: jit takes keyword
    arguments by sorted name, the export in the signature's order.
    """
    import jax

    from ppy_plugin_jax.constants import hoisting
    from ppy_plugin_jax.verify import symbols

    names = symbols(exported)
    if (not names and not hoisting()) or export_platform() not in exported.platforms:
        return None
    mesh = _mesh(leaves)
    if mesh is False:
        return None
    options = print_options()
    served = jax.jit(exported.call)
    if not names:
        sized = _sized(leaves, exported, {}, mesh)
        if sized is None:
            raise Uncompared("an input has no elements")
        lowered = jitted(sized)
        if not _given(lowered):
            return None
        try:
            compiled = compile_both(served.lower(*sized), lowered)
        except Exception as error:  # the export's own sizes: nothing else to try
            raise Uncompared(f"XLA cannot compile both here ({type(error).__name__})") from None
        return None if _same(compiled, lowered, order, options) else {}
    for size in PROBES:
        sizes = dict.fromkeys(names, size)
        sized = _sized(leaves, exported, sizes, mesh)
        if sized is None:
            continue
        try:
            lowered = jitted(sized)
            compiled = compile_both(served.lower(*sized), lowered)
        except Exception:  # a constraint of the export, or sizes jit refuses
            continue
        return None if _same(compiled, lowered, order, options) else sizes
    raise Uncompared(f"none of the sizes {', '.join(map(str, PROBES))} compiles for both")


def _same(
    compiled: tuple[Any, Any], lowered: Any, order: Sequence[int] | None, options: Any
) -> bool:
    """Whether the export and jit (``lowered``), compiled, are one program:
    the constants jit hands its own as its first arguments taken as the
    constants the export embeds."""
    theirs, ours = compiled
    values = _given(lowered)
    if sum(getattr(value, "nbytes", 0) for value in values) > CONSTANT_BYTES:
        raise Uncompared(
            f"the constants jit hands its program hold over {CONSTANT_BYTES >> 20} MiB"
        )
    numbers = None if order is None else jit_numbers(lowered, order, len(values))
    given = {number: _text(value, options) for number, value in enumerate(values)}
    return bool(program(theirs, options) == program(ours, options, numbers, given))


def _given(lowered: Any) -> list[Any]:
    """The constants jit hands the program ``lowered`` as its first arguments
    (jax 0.12's ``const_args``; none on a jax that embeds them all)."""
    return list(getattr(getattr(lowered, "_lowering", None), "const_args", None) or ())


def _text(value: Any, options: Any) -> str:
    """``value`` as the compiled program of an export that embeds it prints it."""
    import jax

    exported = jax.export.export(jax.jit(lambda: value))()
    texts = constant_texts(jax.jit(exported.call).lower().compile(), options)
    if len(texts) != 1:
        raise Uncompared("XLA compiles a constant of the trace to no constant of its own")
    return texts[0]
