"""Entries made here from a real ``jax.export`` of small functions.

The runtime is tested against what jax itself serializes, not against bytes
written by hand, so these helpers export the function and wrap the result in
the ``Entry`` a build would have written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jaxlib
from ppy.entry import Entry
from ppy.kinds import JaxExport
from ppy.spec import Dim, TensorSpec


def shape_structs(specs: Sequence[TensorSpec]) -> list[jax.ShapeDtypeStruct]:
    symbols = sorted({d for s in specs for d in s.dims if isinstance(d, str)})
    scope = dict(zip(symbols, jax.export.symbolic_shape(",".join(symbols)), strict=True))
    return [
        jax.ShapeDtypeStruct(tuple(scope[d] if isinstance(d, str) else d for d in s.dims), s.dtype)
        for s in specs
    ]


def spec(dims: Sequence[Dim], dtype: str = "float32", name: str | None = None) -> TensorSpec:
    return TensorSpec(tuple(dims), dtype, name)


def make_entry(
    function: Callable[..., Any],
    inputs: Sequence[TensorSpec],
    *,
    module: str = "model",
    qualname: str | None = None,
    platforms: Sequence[str] | None = None,
) -> Entry:
    """Export ``function`` (jitted) for ``inputs`` and describe it as an entry."""
    jitted = function if hasattr(function, "lower") else jax.jit(function)
    exported = jax.export.export(jitted, platforms=platforms)(*shape_structs(inputs))
    outputs = tuple(
        TensorSpec(tuple(d if isinstance(d, int) else str(d) for d in a.shape), str(a.dtype))
        for a in exported.out_avals
    )
    contract = JaxExport(
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        calling_convention_version=exported.calling_convention_version,
        nr_devices=exported.nr_devices,
        uses_shape_polymorphism=any(isinstance(d, str) for s in inputs for d in s.dims),
        export=bytes(exported.serialize()),
        stablehlo=exported.mlir_module().encode(),
    )
    return Entry(
        module=module,
        qualname=qualname or function.__name__,
        kind=JaxExport.KIND,
        inputs=tuple(inputs),
        outputs=outputs,
        platforms=tuple(exported.platforms),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
    )
