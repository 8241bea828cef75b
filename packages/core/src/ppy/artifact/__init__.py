"""The artifact: one zip archive per project, its manifest and entries, written and read.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used.
"""
