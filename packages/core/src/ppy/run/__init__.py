"""The engine ``ppy run`` and ``ppy record`` share: the program run as python
runs it (``program``), the staged functions bound in place (``binding``,
``made``), what waits for the program's own imports (``import_hooks``,
``collector``), and a module of the program's folder shadowed (``shadow``).
``ppy.commands`` puts it to work; nothing here imports a command, the build
or the CLI.

This ``__init__`` imports nothing: ``ppy run`` pays only for the modules it uses.
"""
