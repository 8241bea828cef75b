"""Moved to ``ppy.kinds.fingerprint``; this path re-exports it until the next release."""

from ppy.kinds.fingerprint import *  # noqa: F403
from ppy.kinds.fingerprint import __all__ as __all__
