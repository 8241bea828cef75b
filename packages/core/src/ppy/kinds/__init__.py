"""The entry kinds ppy ships and what a trace depends on: the contracts between plugin and runtime.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used. ``ppy.kinds``'s names from before 0.2 are still answered here
for one release (``ppy._moved``); import them from their modules instead.
"""

from ppy._moved import reexport

__getattr__ = reexport(
    "ppy.kinds",
    [
        "Captured",
        "INT64_MAX",
        "INT64_MIN",
        "MIN_NORMAL_FLOAT64",
        "SCALAR_DTYPES",
        "JaxExport",
        "KindError",
        "Variant",
        "XlaScalar",
    ],
    ["base", "xla_scalar", "jax_export"],
)
