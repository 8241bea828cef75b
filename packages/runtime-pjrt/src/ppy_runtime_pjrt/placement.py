"""Where a sharded export runs: the program's mesh, found from the call's inputs.

A sharded export was made over an abstract mesh (``ppy.spec.MeshSpec``:
axis names, sizes and types). It runs on the program's own
``jax.sharding.Mesh``: the one the call's inputs carry in their shardings,
else the one the program set (``jax.set_mesh``). A call takes the staged
path only when every input is laid out over that mesh, of those names,
sizes and types, as the export's ``PartitionSpec`` says: then the compiled
program is the one ``jax.jit`` would have compiled for these inputs.

An input jax has not committed to a device (a NumPy array, ``jnp.ones``)
is laid out by jit, replicated over the mesh when its axes are explicit;
it fits an input the export replicates. Anything else (an array committed
to one device, another mesh, another spec, host memory such as
``pinned_host``, an unplaced input where the export splits it or where the
axes are auto) goes to the original with a ``Fallback`` of category
``sharding``, where jit lays it out as it always does, or refuses it as it
always would.

An export on one device runs where jit would run the call (``committed``):
on the default device where no input is committed to one, and on the one
device the committed inputs are on otherwise
(``jax.device_put(params, jax.devices()[1])``), its outputs committed
there, as jit's are. Inputs committed to different devices, which jit
refuses, or laid out over several, go to the original.

Which devices, in which order, is part of an executable: ``Placed.devices``
goes into its cache key, and into what it is loaded onto.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ppy.runtime import Axis, MeshSpec, TensorSpec

from ppy_runtime_pjrt.guard import Fallback

__all__ = ["Placed", "Placement", "committed"]


@dataclass(frozen=True)
class Placed:
    """The program's mesh a call's inputs are laid out over, or (``mesh``
    None) the one device its committed inputs are on."""

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
        if not leaves:  # the export alone would say where it runs
            return Fallback("sharding", "a sharded function with no inputs has no mesh to run on")
        mesh = _mesh_of(leaves)
        if isinstance(mesh, Fallback):
            return mesh
        if mesh is None:
            return Fallback(
                "sharding",
                "no input is laid out over a mesh and the program set none (jax.set_mesh); "
                f"the export runs over {self.mesh}",
            )
        found = _axes(mesh)
        if found != self.mesh:
            return Fallback(
                "sharding",
                f"the inputs are laid out over a mesh of {found}; the export's is {self.mesh}",
            )
        explicit = all(t == "explicit" for t in self.mesh.types)
        memory = mesh.devices.flat[0].default_memory().kind
        for index, (leaf, spec, expected) in enumerate(
            zip(leaves, self.inputs, self.specs, strict=True)
        ):
            name = spec.name or f"argument {index}"
            sharding = _named(leaf)
            if sharding is None:
                if not _uncommitted(leaf):
                    where = type(getattr(leaf, "sharding", None)).__name__
                    return Fallback(
                        "sharding",
                        f"{name} is committed to its devices ({where}), not laid out over "
                        f"the mesh; it is staged as {spec} over {self.mesh}",
                    )
                if expected or not explicit:
                    why = (
                        f"it is staged as {spec}"
                        if expected
                        else "over auto axes jit lays it out as it chooses"
                    )
                    return Fallback(
                        "sharding",
                        f"{name} is not laid out over a mesh ({type(leaf).__name__}); {why} "
                        f"over {self.mesh}",
                    )
            elif _normal(tuple(sharding.spec)) != expected:
                return Fallback(
                    "sharding",
                    f"{name} is laid out as {sharding.spec}; it is staged as {spec} "
                    f"over {self.mesh}",
                )
            elif sharding.memory_kind not in (None, memory):
                return Fallback(
                    "sharding",
                    f"{name} is in {sharding.memory_kind} memory; the export runs on the "
                    f"devices' own ({memory})",
                )
        return Placed(mesh, tuple(mesh.devices.flat))


def _named(leaf: Any) -> Any:
    """The leaf's ``NamedSharding``, or None."""
    from jax.sharding import NamedSharding

    sharding = getattr(leaf, "sharding", None)
    return sharding if isinstance(sharding, NamedSharding) else None


def _uncommitted(leaf: Any) -> bool:
    """Whether jit may place the leaf where it likes: host data, or a jax
    array jax has not committed to a device."""
    return getattr(leaf, "sharding", None) is None or getattr(leaf, "committed", True) is False


def _mesh_of(leaves: Sequence[Any]) -> Any | Fallback:
    """The one mesh the leaves are laid out over, else the program's mesh
    (``jax.set_mesh``), else None; a Fallback where they disagree, as jit
    refuses such a call."""
    import jax

    mesh = None
    for sharding in filter(None, map(_named, leaves)):
        if mesh is None:
            mesh = sharding.mesh
        elif sharding.mesh != mesh:
            return Fallback("sharding", "the inputs are laid out over different meshes")
    context = jax.sharding.get_mesh()
    if not context.axis_names:
        return mesh
    if mesh is not None and mesh != context:
        return Fallback(
            "sharding", "the inputs are laid out over another mesh than the program set"
        )
    return context


def committed(leaves: Sequence[Any], inputs: Sequence[TensorSpec]) -> Placed | Fallback | None:
    """Where jit runs a call of an export on one device: None for the
    default device (no input is committed), else the one device the
    committed inputs are on, where jit runs it and commits its outputs; or
    why the export cannot run it as jit would."""
    import jax

    found: Any = None
    for index, leaf in enumerate(leaves):
        if not getattr(leaf, "_committed", False):
            continue
        name = (inputs[index].name or f"argument {index}") if index < len(inputs) else "an input"
        sharding = leaf.sharding
        devices = sharding.device_set
        if len(devices) != 1:
            return Fallback(
                "device", f"{name} is laid out over {len(devices)} devices; the export is for one"
            )
        (device,) = devices
        if device.platform != jax.devices()[0].platform:
            return Fallback(
                "device", f"{name} is committed to {device}, a device the export does not run on"
            )
        if sharding.memory_kind not in (None, device.default_memory().kind):
            return Fallback(
                "device",
                f"{name} is in {sharding.memory_kind} memory; the export runs on the device's own",
            )
        if found is None:
            found = device
        elif device != found:
            # jit refuses the call; the original says so in its own words.
            return Fallback(
                "device",
                f"{name} is committed to {device}, another input to {found}: inputs committed "
                "to different devices",
            )
    return None if found is None else Placed(None, (found,))
