"""ppy's benchmark runner: each case measures ppy against plain JAX side by side.

``benchmarks/run.py`` is the command; the modules here are its parts:
``measure`` samples fresh processes, ``projects`` writes the programs,
one module per case, ``targets`` checks the other issues' goals, and
``report`` and ``plots`` write what a run found.
"""
