"""Moved to ``ppy.kinds.jax_compat``; this path re-exports it until the next release."""

from ppy.kinds.jax_compat import *  # noqa: F403
from ppy.kinds.jax_compat import __all__ as __all__
