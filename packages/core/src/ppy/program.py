"""Run a program as ``python FILE.ppy ARGS`` would, with its staged functions bound.

The program runs as ``__main__`` in this process, with ``sys.argv``,
``sys.path[0]`` and ``sys.modules["__main__"]`` as the interpreter would set
them, and ends with the exit code the interpreter would give. A traceback is
printed as python prints it, less ppy's own frames (and those of the loaded
runtimes), so a user reads their program's error and not ppy's plumbing.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING

from ppy.binding import BIND_NAME, Binder, BindingFinder, module_name
from ppy.runtime import Runtime

if TYPE_CHECKING:
    from ppy.artifact import Artifact

__all__ = ["run_program"]

_PPY_DIR = os.path.dirname(os.path.abspath(__file__))


def run_program(
    program: Path,
    argv: Sequence[str],
    *,
    artifact: Artifact | None,
    runtimes: Mapping[str, Runtime],
    root: Path,
) -> int:
    """Run ``program`` as ``__main__``; its exit code, as ``python`` would give it."""
    import ppy  # noqa: F401 - installs the .ppy hook the finder goes ahead of

    binder = Binder(artifact, runtimes, root)
    finder = BindingFinder(binder)
    main = ModuleType("__main__")
    main.__dict__.update(
        __file__=str(program),
        __builtins__=builtins,
        __cached__=None,
        __spec__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", str(program)),
    )
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    saved_main = sys.modules.get("__main__")
    sys.argv = [str(program), *argv]
    if sys.path:
        sys.path[0] = str(program.parent)
    else:
        sys.path.append(str(program.parent))
    sys.modules["__main__"] = main
    finder.install()
    try:
        try:
            code, bind = binder.code(program, module_name(program, root))
        except SyntaxError as error:
            _print_exception(type(error), error, None)  # as python: no frames, just the line
            return 1
        main.__dict__[BIND_NAME] = bind
        exec(code, main.__dict__)
    except SystemExit as done:
        return _exit_code(done)
    except KeyboardInterrupt:
        _print_exception(*sys.exc_info())
        return 130
    except BaseException:
        _print_exception(*sys.exc_info())
        return 1
    finally:
        sys.stdout.flush()
        finder.remove()
        _close(runtimes)
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
    return 0


def _close(runtimes: Mapping[str, Runtime]) -> None:
    """Let each runtime undo what its binding set up (the optional ``close``)."""
    for runtime in runtimes.values():
        close = getattr(runtime, "close", None)
        if callable(close):
            close()


def _exit_code(done: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(value)``."""
    code = done.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_exception(
    kind: type[BaseException] | None,
    value: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """The traceback python would print, without ppy's own frames."""
    if kind is None or value is None:
        return
    report = traceback.TracebackException(kind, value, tb, compact=True)
    _drop_own_frames(report, _own_dirs(), set())
    print("".join(report.format()), end="", file=sys.stderr)


def _own_dirs() -> frozenset[str]:
    """ppy's package and every loaded runtime package: their frames are ours."""
    dirs = {_PPY_DIR}
    for name, module in list(sys.modules.items()):
        if name.startswith("ppy_runtime_") and "." not in name:
            location = getattr(module, "__file__", None)
            if location:
                dirs.add(os.path.dirname(os.path.abspath(location)))
    return frozenset(dirs)


def _drop_own_frames(
    report: traceback.TracebackException, own: frozenset[str], done: set[int]
) -> None:
    if id(report) in done:
        return
    done.add(id(report))
    kept = [f for f in report.stack if os.path.dirname(os.path.abspath(f.filename)) not in own]
    report.stack = traceback.StackSummary.from_list(kept)
    for linked in (report.__cause__, report.__context__):
        if linked is not None:
            _drop_own_frames(linked, own, done)
