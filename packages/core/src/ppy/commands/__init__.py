"""The commands: each puts the rooms below it together for one ``ppy`` command.

``run`` (``ppy run``: the configuration, the artifact made current, its
runtimes loaded, the program ready to run on ``ppy.run``'s engine),
``record`` (``ppy record``: the same engine, with a recorder in place of the
staged functions), ``build`` (``ppy build``: the project loaded, staged and
written under its lock), ``explain`` and ``doctor`` (with ``importtime``).
``ppy.cli`` parses the command line, calls these, and prints what they
give; they import ``build``, ``record``, ``run`` and the leaves, and nothing
of them imports a command or the CLI.

This ``__init__`` imports nothing: a command pays only for the modules it uses.
"""
