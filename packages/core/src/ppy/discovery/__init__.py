"""Static discovery: what a ``.ppy`` module defines and describes, from its AST alone.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used. ``ppy.discovery``'s names from before 0.2 are still answered here
for one release (``ppy._moved``); import them from their modules instead.
"""

from ppy._moved import reexport

__getattr__ = reexport(
    "ppy.discovery",
    ["TRANSFORMS", "discover_module", "discover_source"],
    ["module", "differentiation"],
)
