"""ppy-plugin-xla: ``@xla.jit`` scalar functions compiled to StableHLO by ppy itself.

Nothing here imports jax: the compiler reads the source and writes StableHLO
text. ``ppy build`` loads ``ppy_plugin_xla.plugin:XlaScalarPlugin``.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
