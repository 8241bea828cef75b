"""Moved to ``ppy.kinds.trace_config``; this path re-exports it until the next release."""

from ppy.kinds.trace_config import *  # noqa: F403
from ppy.kinds.trace_config import __all__ as __all__
