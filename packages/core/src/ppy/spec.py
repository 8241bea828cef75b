"""Descriptions of staged inputs and outputs, and how a signature reads.

A ``TensorSpec`` is what the artifact stores for each input and output of a
staged entry and what the run-time guard checks a call against. A scalar is a
spec with no dims (``float64[]``). A sharded one reads as jax prints a
sharded type: ``float32[4*B@data,8]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "AXIS_TYPES",
    "WEAK_SCALARS",
    "WIDE_SCALARS",
    "Axis",
    "Dim",
    "MeshSpec",
    "TensorSpec",
    "format_signature",
]

Dim = int | str
#: One entry of a ``PartitionSpec``: not sharded, one mesh axis, or several.
Axis = str | tuple[str, ...] | None

#: The Python scalars jit traces as a weakly typed scalar of one dtype
#: (without x64), by type name: a step counter, a learning rate. A parameter
#: annotated with one, or recorded with one, is a ``weak`` ``TensorSpec``.
WEAK_SCALARS: Final = {"int": "int32", "float": "float32"}
#: The same where x64 is on: jit traces a Python int as a weakly typed
#: int64, a float as a weakly typed float64.
WIDE_SCALARS: Final = {"int": "int64", "float": "float64"}
#: ``jax.sharding.AxisType`` members, as the configuration and the artifact name them.
AXIS_TYPES = ("explicit", "auto", "manual")


@dataclass(frozen=True)
class MeshSpec:
    """The mesh a sharded export was made for: axis names, sizes and types.

    It is an ``AbstractMesh`` in words: the build needs no devices, and a
    program's ``jax.sharding.Mesh`` serves it when its names, sizes and
    types are these (``jax.export`` requires the same).
    """

    names: tuple[str, ...]
    sizes: tuple[int, ...]
    types: tuple[str, ...]

    def __str__(self) -> str:
        axes = ", ".join(f"{n}={s}" for n, s in zip(self.names, self.sizes, strict=True))
        kinds = sorted(set(self.types))
        return f"{axes} ({', '.join(kinds)})"

    @property
    def devices(self) -> int:
        count = 1
        for size in self.sizes:
            count *= size
        return count

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "sizes": list(self.sizes), "types": list(self.types)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeshSpec:
        names, sizes, types = data["names"], data["sizes"], data["types"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"names must be a non-empty list of strings, got {names!r}")
        if not isinstance(sizes, list) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes
        ):
            raise ValueError(f"sizes must be a list of ints >= 1, got {sizes!r}")
        if not isinstance(types, list) or not all(t in AXIS_TYPES for t in types):
            raise ValueError(f"types must be a list of {', '.join(AXIS_TYPES)}, got {types!r}")
        if not len(names) == len(sizes) == len(types):
            raise ValueError("names, sizes and types must be as long as each other")
        return cls(tuple(names), tuple(sizes), tuple(types))


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its dims (ints fixed, strings symbolic) and dtype;
    on a mesh, its ``PartitionSpec`` entries (``()`` is replicated); ``weak``
    where it is weakly typed, as jit sees a Python scalar (``weak int32[]``)."""

    dims: tuple[Dim, ...]
    dtype: str
    name: str | None = None
    sharding: tuple[Axis, ...] | None = None
    weak: bool = False

    def __str__(self) -> str:
        spec = self.sharding or ()
        dims = [
            f"{d}{_placed(spec[i] if i < len(spec) else None)}" for i, d in enumerate(self.dims)
        ]
        return f"{'weak ' if self.weak else ''}{self.dtype}[{','.join(dims)}]"

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(d for d in self.dims if isinstance(d, str))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"dims": list(self.dims), "dtype": self.dtype}
        if self.name is not None:
            data["name"] = self.name
        if self.sharding is not None:
            data["sharding"] = [list(a) if isinstance(a, tuple) else a for a in self.sharding]
        if self.weak:
            data["weak"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TensorSpec:
        dims = data["dims"]
        dtype = data["dtype"]
        name = data.get("name")
        if not isinstance(dims, list) or not all(
            isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)) for d in dims
        ):
            raise ValueError(f"dims must be a list of ints and strings, got {dims!r}")
        if not isinstance(dtype, str):
            raise ValueError(f"dtype must be a string, got {dtype!r}")
        if name is not None and not isinstance(name, str):
            raise ValueError(f"name must be a string, got {name!r}")
        weak = data.get("weak", False)
        if not isinstance(weak, bool):
            raise ValueError(f"weak must be true or false, got {weak!r}")
        return cls(tuple(dims), dtype, name, _sharding(data.get("sharding")), weak)


def _placed(axis: Axis) -> str:
    if axis is None:
        return ""
    return f"@{axis}" if isinstance(axis, str) else f"@({','.join(axis)})"


def _sharding(raw: object) -> tuple[Axis, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ValueError(f"sharding must be a list, got {raw!r}")
    entries: list[Axis] = []
    for entry in raw:
        if entry is None or isinstance(entry, str):
            entries.append(entry)
        elif isinstance(entry, list) and entry and all(isinstance(a, str) for a in entry):
            entries.append(tuple(entry))
        else:
            raise ValueError(f"a sharding entry is None, a name or a list of names, got {entry!r}")
    return tuple(entries)


def format_signature(
    name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec] | None = None
) -> str:
    """``score(x: float32[B,4]) -> float32[B]``, as build lines and ``inspect`` print it."""
    params = ", ".join(f"{s.name}: {s}" if s.name else str(s) for s in inputs)
    text = f"{name}({params})"
    if outputs is not None:
        rendered = ", ".join(str(s) for s in outputs)
        text += f" -> {rendered if len(outputs) == 1 else f'({rendered})'}"
    return text
