"""ppy's PJRT runtime: runs an artifact's staged entries in place of the originals.

``export.ExportRuntime`` loads ``jax.export`` entries; ``scalar.ScalarRuntime``
loads ``xla.scalar`` ones. Both are found through the ``ppy.runtimes`` entry
points, so this package imports nothing itself: jax is imported when the first
entry is bound, which a program with no staged entries never pays for.
"""

__all__: list[str] = []
