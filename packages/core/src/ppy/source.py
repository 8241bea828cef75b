"""Moved to ``ppy.discovery.records``; this path re-exports it until the next release."""

from ppy.discovery.records import *  # noqa: F403
from ppy.discovery.records import __all__ as __all__
