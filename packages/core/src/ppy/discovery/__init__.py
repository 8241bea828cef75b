"""Static discovery: what a ``.ppy`` module defines and describes, from its AST alone.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used.
"""
