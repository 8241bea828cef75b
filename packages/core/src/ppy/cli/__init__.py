"""The ``ppy`` command: argument parsing, and what each subcommand prints.

This ``__init__`` imports nothing, so the room costs nothing until one of its
modules is used.
"""
