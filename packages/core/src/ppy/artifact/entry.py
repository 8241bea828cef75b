"""An artifact entry: one staged function, as a plugin writes it and a runtime reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ppy.decision import Decision
from ppy.spec import TensorSpec, format_signature

__all__ = ["Entry"]


@dataclass(frozen=True)
class Entry:
    module: str
    qualname: str
    #: Which runtime loads it: "jax.export", "xla.scalar", or a third party's.
    kind: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    platforms: tuple[str, ...]
    #: Payload members by short name ("export", "stablehlo"); bytes only,
    #: nothing in them is ever executed as Python.
    payload: Mapping[str, bytes] = field(default_factory=dict)
    #: JSON-able facts the runtime needs (jax/jaxlib versions, calling
    #: convention version, ...).
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: The decision that staged it (filled in by the build).
    decision: Decision | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.qualname)

    @property
    def signature(self) -> str:
        return format_signature(self.qualname, self.inputs, self.outputs)
