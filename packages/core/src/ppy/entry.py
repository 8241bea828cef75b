"""Moved to ``ppy.artifact.entry``; this path re-exports it until the next release."""

from ppy.artifact.entry import *  # noqa: F403
from ppy.artifact.entry import __all__ as __all__
