"""The ``ppy`` command: argument parsing, and what each subcommand prints.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used. ``ppy.cli``'s names from before 0.2 are still answered here
for one release (``ppy._moved``); import them from their modules instead.
"""

from ppy._moved import reexport

__getattr__ = reexport("ppy.cli", ["main"], ["main"])
