"""The artifact: one zip archive per project, its manifest and entries, written and read.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used. ``ppy.artifact``'s names from before 0.2 are still answered here
for one release (``ppy._moved``); import them from their modules instead.
"""

from ppy._moved import reexport

__getattr__ = reexport(
    "ppy.artifact",
    [
        "FORMAT",
        "FORMAT_VERSION",
        "MANIFEST",
        "MEMBER_SIZE_LIMIT",
        "ARCHIVE_SIZE_LIMIT",
        "MANIFEST_DEPTH_LIMIT",
        "MANIFEST_SIZE_LIMIT",
        "READABLE_VERSIONS",
        "Artifact",
        "ArtifactError",
        "ModuleRecord",
        "dumps",
        "loads",
        "manifest",
        "member_name",
        "read_artifact",
        "write_artifact",
    ],
    ["model", "write", "read"],
)
