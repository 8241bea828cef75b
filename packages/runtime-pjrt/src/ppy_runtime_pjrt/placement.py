"""Where a sharded export runs: the program's mesh, found from the call's inputs.

A sharded export was made over an abstract mesh (``ppy.spec.MeshSpec``:
axis names, sizes and types). It runs on the program's own
``jax.sharding.Mesh``, which the call's inputs carry in their shardings. A
call takes the staged path only when every input is laid out over one mesh
of those names, sizes and types, each as the export's ``PartitionSpec``
says: then the compiled program is the one ``jax.jit`` would have compiled
for these inputs. Anything else (a NumPy array, an array on one device,
another mesh, another spec) goes to the original with a ``Fallback`` of
category ``sharding``, where jit lays it out as it always does.

Which devices, in which order, is part of an executable: ``Placed.devices``
goes into its cache key, and into what it is loaded onto.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppy.spec import Axis, MeshSpec, TensorSpec

from ppy_runtime_pjrt.guard import Fallback

__all__ = ["Placed", "Placement"]


@dataclass(frozen=True)
class Placed:
    """The program's mesh a call's inputs are laid out over."""

    mesh: Any
    #: The mesh's devices in its order: the executable's device assignment.
    devices: tuple[Any, ...]

    @property
    def key(self) -> str:
        """The device assignment, as the executable cache keys it."""
        import jax

        ids = ",".join(str(d.id) for d in self.devices)
        return f"devices={ids};process={jax.process_index()}/{jax.process_count()}"


def _normal(spec: Sequence[Axis]) -> tuple[Axis, ...]:
    """A spec as jax compares layouts: ``("data",)`` for ``("data", None)``,
    and a one-name tuple as the name."""
    entries = [e[0] if isinstance(e, tuple) and len(e) == 1 else e for e in spec]
    while entries and entries[-1] is None:
        entries.pop()
    return tuple(entries)


def _axes(mesh: Any) -> MeshSpec:
    types = tuple(str(getattr(t, "name", t)).lower() for t in mesh.axis_types)
    return MeshSpec(tuple(mesh.axis_names), tuple(mesh.axis_sizes), types)


class Placement:
    """The layout a sharded variant's inputs must have, checked per call."""

    def __init__(self, mesh: MeshSpec, inputs: Sequence[TensorSpec]) -> None:
        self.mesh = mesh
        self.inputs = tuple(inputs)
        self.specs = tuple(_normal(s.sharding or ()) for s in self.inputs)

    def check(self, leaves: Sequence[Any]) -> Placed | Fallback:
        """The mesh the leaves are laid out over, or why they do not fit the export."""
        from jax.sharding import NamedSharding

        mesh = None
        for index, (leaf, spec, expected) in enumerate(
            zip(leaves, self.inputs, self.specs, strict=True)
        ):
            name = spec.name or f"argument {index}"
            sharding = getattr(leaf, "sharding", None)
            if not isinstance(sharding, NamedSharding):
                what = type(leaf).__name__ if sharding is None else type(sharding).__name__
                return Fallback(
                    "sharding",
                    f"{name} is not laid out over a mesh ({what}); it is staged as {spec} "
                    f"over {self.mesh}",
                )
            if mesh is None:
                mesh = sharding.mesh
                found = _axes(mesh)
                if found != self.mesh:
                    return Fallback(
                        "sharding",
                        f"{name} is laid out over a mesh of {found}; the export's is {self.mesh}",
                    )
            elif sharding.mesh != mesh:
                return Fallback("sharding", f"{name} is on another mesh than the inputs before it")
            if _normal(tuple(sharding.spec)) != expected:
                return Fallback(
                    "sharding",
                    f"{name} is laid out as {sharding.spec}; it is staged as {spec} "
                    f"over {self.mesh}",
                )
        if mesh is None:  # no inputs: the export alone says where it runs
            return Fallback("sharding", "a sharded function with no inputs has no mesh to run on")
        return Placed(mesh, tuple(mesh.devices.flat))
