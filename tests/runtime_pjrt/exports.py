"""Entries made here from a real ``jax.export`` of small functions.

The runtime is tested against what jax itself serializes, not against bytes
written by hand, so these helpers export the function and wrap the result in
the ``Entry`` a build would have written.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jaxlib
from ppy.artifact.entry import Entry
from ppy.kinds.jax_export import JaxExport, Variant
from ppy.kinds.pytrees import recipe, structure
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
    """Export ``function`` (jitted) for ``inputs`` and describe it as an entry.

    As the jax plugin's worker does: the export takes the inputs' leaves
    and returns the output's leaves, and the entry says what tree they make.
    """
    jitted = function if hasattr(function, "lower") else jax.jit(function)
    python = inspect.unwrap(function)
    names = list(inspect.signature(python).parameters)[: len(inputs)]
    leaves = shape_structs(inputs)
    in_tree = jax.tree_util.tree_structure(tuple(leaves))
    out_trees = []

    def flat(*args: Any) -> Any:
        out_leaves, out_tree = jax.tree_util.tree_flatten(jitted(*args))
        out_trees.append(out_tree)
        return out_leaves

    exported = jax.export.export(jax.jit(flat), platforms=platforms)(*leaves)
    outputs = tuple(
        TensorSpec(tuple(d if isinstance(d, int) else str(d) for d in a.shape), str(a.dtype))
        for a in exported.out_avals
    )
    named = tuple(
        TensorSpec(s.dims, s.dtype, s.name or name) for s, name in zip(inputs, names, strict=True)
    )
    variant = Variant(
        static={},
        in_tree=structure(in_tree),
        out_tree=recipe(out_trees[0], in_tree),
        inputs=named,
        outputs=outputs,
        calling_convention_version=exported.calling_convention_version,
        nr_devices=exported.nr_devices,
        uses_shape_polymorphism=any(isinstance(d, str) for s in inputs for d in s.dims),
        export=bytes(exported.serialize()),
        stablehlo=exported.mlir_module().encode(),
    )
    contract = JaxExport(
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        traced=tuple(names),
        static=(),
        variants=(variant,),
        # As a build on this machine would: it compiles a symbolic export here.
        compared_on=(jax.export.default_export_platform(),),
    )
    return Entry(
        module=module,
        qualname=qualname or function.__name__,
        kind=JaxExport.KIND,
        inputs=named,
        outputs=outputs,
        platforms=tuple(exported.platforms),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
    )
