"""A module of the program's folder named like one ppy has imported before it.

python puts the script's folder first on ``sys.path``, so a ``calendar.py``
beside ``model.ppy`` is the ``calendar`` every later import gets, the
program's own and those of the libraries it imports (jax imports
``calendar``). ppy has imported dozens of modules by the time the program
starts, the standard library's ``calendar`` among them, and an import that
finds a module in ``sys.modules`` does not look on ``sys.path``: the program
would get another module than under python.

Taking the module out of ``sys.modules`` would not make the run python's:
what ppy imported holds the first one (``email.utils`` holds ``calendar``),
and jax, in a warm run, too. So where the folder holds such a module, and a
fresh python would not have it at start (``os.py`` never shadows ``os``),
the program is run by python itself, in this process (``exec``), with no
function staged, and ``run.shadowed`` says why. Finding out costs one listing
of the folder; asking a fresh python what it has at start, only where the
listing names a module ppy has.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Sequence

__all__ = ["run_as_python", "shadowed", "unless_shadowed"]


def unless_shadowed(program: str, argv: Sequence[str]) -> None:
    """Where a module of the program's folder would be imported in place of
    one this process imported first, say so (``run.shadowed``) and run the
    program as python, in this process: this does not return then. Nothing
    is looked for where python leaves the folder off ``sys.path``.

    For ``ppy run`` and ``ppy record`` as commands, just before the program
    starts; not for ``run_program``, whose caller's process goes on."""
    from ppy.run.program import safe_path, script_filename

    if safe_path():
        return
    folder = os.path.dirname(os.path.realpath(script_filename(program)))
    names = shadowed(folder)
    if not names:
        return
    from ppy.log import get_logger

    listed = ", ".join(names)
    get_logger().warning(
        "run.shadowed",
        modules=listed,
        reason=f"the program's folder holds {listed}, which python imports in place of "
        "the module of that name ppy imported before the program started; the program "
        "runs as `python` runs it, with nothing staged or recorded",
        remedy=f"rename {listed} in {folder}: under python it also takes the place of "
        "the module of that name in every library the program imports",
    )
    run_as_python(program, argv)


def shadowed(folder: str) -> list[str]:
    """The modules of ``folder`` an import would find first under python,
    which this process has already imported from elsewhere and a fresh
    python does not have at start, sorted."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    suffixes = importlib.machinery.all_suffixes()
    found = set()
    for name in names:
        stem = name.partition(".")[0]
        if stem not in sys.modules or not stem.isidentifier():
            continue
        path = os.path.join(folder, name)
        if name == stem:  # a package wins only where it is a regular one
            if any(os.path.isfile(os.path.join(path, f"__init__{s}")) for s in suffixes):
                found.add(stem)
        elif name[len(stem) :] in suffixes:
            found.add(stem)
    real = os.path.join(os.path.realpath(folder), "")
    found = {name for name in found if not _within(sys.modules[name], real)}
    if not found:
        return []
    return sorted(found - _at_start())


def _within(module: object, folder: str) -> bool:
    """Whether ``module`` was loaded from ``folder`` (a warm server's preload of it)."""
    location = getattr(module, "__file__", None)
    return isinstance(location, str) and os.path.realpath(location).startswith(folder)


def _at_start() -> set[str]:
    """The modules a fresh python of this interpreter, options and environment
    has imported before a script's first line (those of ``site`` and the
    ``.pth`` files among them); none where it cannot be asked."""
    import subprocess

    try:
        ran = subprocess.run(
            [sys.executable, *_options(), "-c", "import sys; print(*sys.modules)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(ran.stdout.split())


def _options() -> list[str]:
    """This interpreter's command-line options (``-P``, ``-X``, ``-W``, ...)."""
    import subprocess

    options = getattr(subprocess, "_args_from_interpreter_flags", None)
    return list(options()) if options is not None else []


def run_as_python(program: str, argv: Sequence[str]) -> None:
    """Replace this process by ``python PROGRAM ARGV``, with this interpreter
    and its options; returns only where that cannot be done."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execv(sys.executable, [sys.executable, *_options(), program, *argv])
    except OSError:
        return
