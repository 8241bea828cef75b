"""Moved to ``ppy.kinds.pytrees``; this path re-exports it until the next release."""

from ppy.kinds.pytrees import *  # noqa: F403
from ppy.kinds.pytrees import __all__ as __all__
