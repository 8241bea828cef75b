"""The entry kinds ppy ships and what a trace depends on: the contracts between plugin and runtime.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used.
"""
