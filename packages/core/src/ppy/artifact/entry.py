"""An artifact entry: one staged function, as a plugin writes it and a runtime reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ppy.decision import Check, Decision
from ppy.spec import TensorSpec, format_signature

__all__ = ["BUILD_ONLY", "Entry"]

#: The metadata of a field that a plugin hands the build and the manifest
#: does not hold as such.
BUILD_ONLY: Mapping[str, bool] = MappingProxyType({"manifest": False})


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
    #: How the plugin staged it, where the build line should say so (``at the
    #: recorded sizes B=24, 64``), and what it found on the way there, for the
    #: decision's trail. The build puts both into the decision, which the
    #: manifest holds; neither is a field of the manifest's entry (``BUILD_ONLY``).
    note: str | None = field(default=None, compare=False, metadata=BUILD_ONLY)
    trail: tuple[Check, ...] = field(default=(), compare=False, metadata=BUILD_ONLY)

    @property
    def key(self) -> tuple[str, str]:
        return (self.module, self.qualname)

    @property
    def signature(self) -> str:
        return format_signature(self.qualname, self.inputs, self.outputs)
