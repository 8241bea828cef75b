"""Warm start: ``ppy run --warm`` from a resident process that has jax imported.

``key`` says which server may serve a run, ``place`` where servers listen,
``protocol`` what crosses the socket, ``server`` the resident process,
``child`` what a forked child does to become the run, and ``client`` the
``ppy run`` side. docs/warm-start.md has the design. Nothing is imported here.
"""
