"""Pass 2: the IR to StableHLO text, one registered rule per op.

Importing the package registers every rule (``registry.RULES``); ``lower``
writes a function. A new op is declared in ``ir.OPS`` and gets its rule in
the module of its kind, with ``@register_lowering("kind.name")``.
"""

from __future__ import annotations

from ppy_plugin_xla.lowering import convert, floats, ints, logic, maths
from ppy_plugin_xla.lowering.registry import RULES, lower, register_lowering

__all__ = ["RULES", "lower", "register_lowering"]

#: The modules that register rules, imported for that.
_RULE_MODULES = (convert, floats, ints, logic, maths)
