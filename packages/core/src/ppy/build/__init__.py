"""``ppy build``: discovery, policy, staging and the artifact, and whether an artifact is current.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used. ``ppy.build``'s names from before 0.2 are still answered here
for one release (``ppy._moved``); import them from their modules instead.
"""

from ppy._moved import reexport

__getattr__ = reexport(
    "ppy.build",
    ["BuildResult", "Project", "build", "build_project", "load_project", "read_previous"],
    ["pipeline"],
)
