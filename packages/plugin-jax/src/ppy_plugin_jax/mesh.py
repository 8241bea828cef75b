"""Sharded exports: the project's mesh as a ``jax.sharding.AbstractMesh``, and
each input leaf laid out over it as its ``ppy.Sharding`` says.

The build has no devices of the mesh's count, and needs none: an export
traced over an ``AbstractMesh`` serializes its shardings by axis name, and
``jax.export`` binds them to a concrete ``Mesh`` of the same names, sizes and
axis types when the program calls it. The leaves carry their sharding in
their abstract value (``ShapeDtypeStruct(..., sharding=...)``), as the
program's arrays carry it, so the trace sees the types a jitted call sees
(under explicit axes, ``float32[8@data,4]``). Imported by the worker only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ppy.plugin import Axis, MeshSpec

__all__ = ["Unplaced", "abstract_mesh", "axis_names", "out_shardings", "place", "scaled", "spec_of"]


class Unplaced(Exception):
    """A sharding that cannot be laid over the mesh: the reason, for rule ``sharding``,
    and the remedy for this reason."""

    def __init__(self, reason: str, remedy: str) -> None:
        super().__init__(reason)
        self.remedy = remedy


def abstract_mesh(mesh: MeshSpec) -> Any:
    """The ``AbstractMesh`` of the project's mesh, with its axis types."""
    from jax.sharding import AbstractMesh, AxisType

    types = tuple(getattr(AxisType, t.capitalize()) for t in mesh.types)
    return AbstractMesh(mesh.sizes, mesh.names, axis_types=types)


def place(
    leaves: Sequence[Any], specs: Sequence[Mapping[str, Any]], mesh: MeshSpec | None
) -> list[Any]:
    """Each leaf with its sharding over ``mesh`` (``specs[i]["sharding"]``).

    Raises ``Unplaced`` when the function is described with ``ppy.Sharding``
    and the project has no mesh, or names an axis the mesh lacks, or shards
    a leaf over more dims than it has.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    if mesh is None:
        first = next(s["name"] for s in specs if s["sharding"])
        raise Unplaced(
            f"{first} is described with ppy.Sharding, but the project has no mesh",
            "describe the mesh: [tool.ppy.plugins.jax] mesh = { data = 4 }, say",
        )
    over = abstract_mesh(mesh)
    placed = []
    for leaf, spec in zip(leaves, specs, strict=True):
        axes: tuple[Axis, ...] = spec["sharding"]
        _check(spec["name"], axes, len(leaf.shape), mesh)
        _divides(spec, leaf.shape, mesh)
        # jax leaves the constructors of PartitionSpec and ShapeDtypeStruct unannotated.
        sharding = NamedSharding(over, PartitionSpec(*axes))  # type: ignore[no-untyped-call]
        placed.append(jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding))  # type: ignore[no-untyped-call]
    return placed


def _check(name: str, axes: tuple[Axis, ...], rank: int, mesh: MeshSpec) -> None:
    if len(axes) > rank:
        raise Unplaced(
            f"{name} has {rank} dims, but its ppy.Sharding gives {len(axes)}",
            "give ppy.Sharding one entry per dim at most, None for a dim that is not split",
        )
    used = [a for entry in axes if entry is not None for a in axis_names(entry)]
    unknown = sorted({a for a in used if a not in mesh.names})
    if unknown:
        raise Unplaced(
            f"{name} is sharded over {', '.join(unknown)}, which the mesh ({mesh}) does not have",
            f"name axes of the mesh ({', '.join(mesh.names)}) in ppy.Sharding, or add "
            f"{', '.join(unknown)} to [tool.ppy.plugins.jax] mesh",
        )
    twice = sorted({a for a in used if used.count(a) > 1})
    if twice:
        raise Unplaced(
            f"{name} is sharded over {', '.join(twice)} in more than one dim",
            "split each mesh axis over one dim only; a dim may take several axes: "
            '("data", "model")',
        )


def _divides(spec: Mapping[str, Any], shape: Sequence[Any], mesh: MeshSpec) -> None:
    """Every sharded dim splits evenly over its axes, at every size it may take.

    jax requires it of an export: ``"B"`` over ``data = 4`` fails for
    ``B = 5``, so the description must say ``"4*B"``.
    """
    sizes = dict(zip(mesh.names, mesh.sizes, strict=True))
    for axis, (dim, entry) in enumerate(zip(shape, spec["sharding"], strict=False)):
        if entry is None:
            continue
        parts = 1
        for name in axis_names(entry):
            parts *= sizes[name]
        remainder = dim % parts
        if not (isinstance(remainder, int) and remainder == 0):
            written = spec["dims"][axis]
            over = f"{'x'.join(axis_names(entry))} ({parts} devices)"
            if not isinstance(written, str):
                raise Unplaced(
                    f"{spec['name']} dim {axis} is {written}, which does not divide over {over}",
                    f"give the dim a multiple of {parts}, or split it over fewer devices",
                )
            raise Unplaced(
                f"{spec['name']} dim {axis} is {written!r}, which does not divide over {over} "
                "at every size",
                f"write it as a multiple of {parts}: {_multiple(written, parts)!r}",
            )


def _multiple(written: str, parts: int) -> str:
    """The smallest multiple of ``parts`` written like ``written``: ``'B'`` over 4
    is ``'4*B'``, ``'4*B'`` over 6 is ``'12*B'``."""
    import math

    found = scaled(written)
    if found is None:
        return f"{parts}*({written})"
    factor, symbol = found
    return f"{math.lcm(factor, parts)}*{symbol}"


def scaled(written: str) -> tuple[int, str] | None:
    """``(k, "B")`` for a dim written ``"k*B"`` or ``"B"`` (k = 1); None for any other form."""
    import re

    match = re.fullmatch(r"\s*(?:(\d+)\s*\*\s*)?([A-Za-z_]\w*)\s*", written)
    return None if match is None else (int(match.group(1) or 1), match.group(2))


def axis_names(entry: str | tuple[str, ...]) -> tuple[str, ...]:
    """The mesh axes one ``ppy.Sharding`` entry splits its dim over."""
    return (entry,) if isinstance(entry, str) else tuple(entry)


def out_shardings(function: Any, leaves: Sequence[Any]) -> list[Any] | None:
    """The shardings a jitted call's outputs get from their types, or None if
    the compiler chooses them.

    Under explicit axes an output's sharding is part of its type: a jitted
    call returns ``P('data', None)`` where the compiler, left to choose,
    would write ``P('data',)``, which compares unequal. Pinning the export's
    outputs to their types keeps what ``ppy run`` returns equal to what
    ``python`` returns.
    """
    import jax
    from jax.sharding import NamedSharding

    outputs = jax.tree_util.tree_leaves(jax.eval_shape(function, *leaves))
    shardings = [getattr(o, "sharding", None) for o in outputs]
    if not all(isinstance(s, NamedSharding) and s.mesh.axis_names for s in shardings):
        return None
    return shardings


def spec_of(sharding: Any) -> tuple[Axis, ...] | None:
    """A sharding's ``PartitionSpec`` entries, as the artifact records them."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return None
    return tuple(
        entry if entry is None or isinstance(entry, str) else tuple(entry) for entry in spec
    )
