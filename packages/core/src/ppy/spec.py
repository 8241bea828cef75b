"""Descriptions of staged inputs and outputs, and how a signature reads.

A ``TensorSpec`` is what the artifact stores for each input and output of a
staged entry and what the run-time guard checks a call against. A scalar is a
spec with no dims (``float64[]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Dim", "TensorSpec", "format_signature"]

Dim = int | str


@dataclass(frozen=True)
class TensorSpec:
    """One input or output: its dims (ints fixed, strings symbolic) and dtype."""

    dims: tuple[Dim, ...]
    dtype: str
    name: str | None = None

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.dims)}]"

    @property
    def symbols(self) -> frozenset[str]:
        return frozenset(d for d in self.dims if isinstance(d, str))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"dims": list(self.dims), "dtype": self.dtype}
        if self.name is not None:
            data["name"] = self.name
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
        return cls(tuple(dims), dtype, name)


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
