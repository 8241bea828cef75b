"""``ppy run``: the artifact made current, its runtimes loaded, the program run with its
staged functions bound.

This ``__init__`` imports nothing: ``ppy run`` pays only for the modules it uses.
"""
