"""Run a program as ``python FILE.ppy ARGS`` would, with its staged functions bound.

The program runs as ``__main__`` in this process, with ``sys.argv``,
``sys.path[0]`` and ``sys.modules["__main__"]`` as the interpreter would set
them, and ends with the exit code the interpreter would give. A traceback is
printed as python prints it, less ppy's own frames (and those of the loaded
runtimes), so a user reads their program's error and not ppy's plumbing.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import CodeType, FunctionType, ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, Final

from ppy.layout import module_name
from ppy.run.binding import BIND_NAME, Binder, BindingFinder, Binds
from ppy.run.import_hooks import after_import
from ppy.runtime import ManagedRuntime, RunContext, Runtime

if TYPE_CHECKING:
    from ppy.artifact.model import Artifact

__all__ = ["PROGRAM_STARTS", "Program", "run_program", "safe_path", "script_filename"]

#: The audit event raised as the program's own code is about to run, with its
#: file name: what ppy did before it (a build, its worker) is not the program's.
PROGRAM_STARTS: Final = "ppy.program.start"

_PPY_DIR = os.path.dirname(os.path.abspath(__file__))

#: What a program that does not compile runs: nothing (python compiles the
#: whole file before it runs a line of it).
_NOTHING = compile("", "<nothing>", "exec")


def run_program(
    program: str | Path,
    argv: Sequence[str],
    *,
    artifact: Artifact | None,
    runtimes: Mapping[str, Runtime],
    root: Path,
    binder: Binds | None = None,
) -> int:
    """Run ``program`` (the path as the user typed it) as ``__main__``; its exit
    code, as ``python`` would give it, with this process's ``sys.argv``,
    ``sys.path`` and ``__main__`` put back. An uncaught KeyboardInterrupt ends
    the process by SIGINT, as python's does. ``binder``: what replaces
    functions as modules execute, if not a ``Binder`` of the artifact's entries.

    The program's module frame has this function's above it; ``ppy run``
    runs a ``Program`` in the outermost frame it has (``ppy.cli.main.main``)."""
    ready = Program(program, argv, artifact=artifact, runtimes=runtimes, root=root, binder=binder)
    with ready as run:
        run()
    try:
        return ready.end()
    finally:
        ready.restore()


def script_filename(typed: str) -> str:
    """The program's ``__file__`` and the filename of its code, as python gives
    them for ``python TYPED``: absolute, the working folder and a ``/`` put in
    front of a relative path, and nothing normalized (``./model.ppy`` is
    ``/cwd/./model.ppy``; ``/`` as the working folder gives ``//model.ppy``),
    on 3.11 to 3.13 alike (CPython's ``_Py_abspath``)."""
    if typed.startswith(os.sep):
        return typed
    return f"{os.getcwd()}{os.sep}{typed}"


def safe_path() -> bool:
    """Whether python would leave the script's folder off ``sys.path``:
    ``-P``, ``-I`` or ``PYTHONSAFEPATH`` (not empty, and not under ``-E``).
    The variable is read too, not only the flag, because a warm run's
    interpreter is the server's: its environment is the run's own."""
    if sys.flags.safe_path:
        return True
    return not sys.flags.ignore_environment and bool(os.environ.get("PYTHONSAFEPATH"))


class Program:
    """A program set up to run as ``__main__`` in the frame of whoever runs it::

        with program as run:
            run()
        return program.end()

    python runs a script's module code with no frame above it; a frame cannot
    be taken out of the chain above the program's, so the program's code is
    run by the outermost frame ppy has, not by this class: what
    ``traceback.extract_stack()``, ``inspect.stack()`` and ``f_back`` show
    above the program is that frame and those above it only. ``run`` is the
    module's code as a function of the program's globals, which python's eval
    loop calls in line, as it calls any Python function: ``exec`` would start
    an eval loop of its own, one more level of recursion (on 3.11) than the
    frames show.

    Entering sets up what python sets up (argv, ``sys.path[0]``, the
    ``__main__`` module), installs the binding and starts the runtimes, and
    gives the program to run. Leaving keeps what the program raised; ``end``
    reports it and ends the binding after the ``with`` statement, where, as
    in python's own reporting and exit, no exception is being handled. What
    the program set up stays the process's, as under python, for its exit
    handlers (``atexit``) to see; ``restore`` puts back the caller's, for a
    caller that goes on in this process.
    """

    def __init__(
        self,
        program: str | Path,
        argv: Sequence[str],
        *,
        artifact: Artifact | None,
        runtimes: Mapping[str, Runtime],
        root: Path,
        binder: Binds | None = None,
        ended: Callable[[], None] | None = None,
    ) -> None:
        import ppy  # noqa: F401 - installs the .ppy hook the finder goes ahead of

        self._typed = program
        self._argv = list(argv)
        # As python has them: argv[0] as typed, __file__ and the code's
        # filename absolute but not normalized, sys.path[0] the script's real
        # folder (unless -P or PYTHONSAFEPATH leaves it off).
        self._filename = script_filename(str(program))
        self._path = Path(self._filename)
        self._ended = ended
        self._root = root
        self._runtimes = runtimes
        self._binder = binder if binder is not None else Binder(artifact, runtimes, root)
        self._finder = BindingFinder(self._binder)
        self._module = ModuleType("__main__")
        self._module.__dict__.update(
            __file__=self._filename,
            __builtins__=builtins,
            __cached__=None,
            __spec__=None,
            __loader__=importlib.machinery.SourceFileLoader("__main__", self._filename),
        )
        if sys.version_info < (3, 14):
            # python's __main__ starts with it (PEP 649 takes it away in 3.14).
            self._module.__dict__.update(__annotations__={})
        self._code: CodeType = _NOTHING
        self._unreadable: SyntaxError | None = None
        self._raised: BaseException | None = None
        self._saved: tuple[list[str], list[str], ModuleType | None] | None = None

    @property
    def namespace(self) -> dict[str, Any]:
        """The globals of the program's ``__main__`` module."""
        return self._module.__dict__

    def __enter__(self) -> Callable[[], None]:
        self._saved = (sys.argv, list(sys.path), sys.modules.get("__main__"))
        sys.argv = [str(self._typed), *self._argv]
        self._place_folder()
        sys.modules["__main__"] = self._module
        self._finder.install()
        _start(self._runtimes)
        try:
            module = module_name(self._root.resolve(), self._path.resolve())
            self._code, bind = self._binder.code(self._filename, module)
        except SyntaxError as error:
            self._unreadable = error
            self._code = _NOTHING
        else:
            if bind is not None:
                self.namespace[BIND_NAME] = bind
        # Module code as a function: no CO_OPTIMIZED, so its locals are its globals.
        run = FunctionType(self._code, self.namespace)
        # What runs from here on is the program's: a warm child counts what
        # it writes and starts from this point (ppy.warm.watch).
        sys.audit(PROGRAM_STARTS, self._filename)
        return run

    def _place_folder(self) -> None:
        """``sys.path[0]`` as python sets it for the script: its real folder,
        in place of the one the interpreter put first for ppy (the ``ppy``
        script's, ``-m``'s or ``-c``'s); under ``-P`` or ``PYTHONSAFEPATH``
        none, as python puts none."""
        inserted = not sys.flags.safe_path  # the interpreter put a folder first
        if safe_path():
            if inserted and sys.path:
                del sys.path[0]
            return
        folder = os.path.dirname(os.path.realpath(self._path))
        if inserted and sys.path:
            sys.path[0] = folder
        else:
            sys.path.insert(0, folder)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if value is not None:
            self._raised = value
        return True

    def end(self) -> int:
        """Report what the program raised and end the binding: the program's
        exit code, as python's. An uncaught KeyboardInterrupt ends the process
        by SIGINT, as python's does, and this does not return."""
        raised, self._raised = self._raised, None
        interrupted = False
        try:
            if self._unreadable is not None:
                _report(type(self._unreadable), self._unreadable, None)  # as python: just the line
                return 1
            if raised is None:
                return 0
            if isinstance(raised, SystemExit):
                return _exit_code(raised)  # python exits here, with __file__ left in place
            _report(type(raised), raised, self._own_frames_left(raised.__traceback__))
            if isinstance(raised, KeyboardInterrupt):
                interrupted = True
                return 130  # only if the signal does not end the process
            return 1
        finally:
            if not isinstance(raised, SystemExit):
                # As python's run of a script ends (CPython's _PyRun_SimpleFileObject).
                self.namespace.pop("__file__", None)
                self.namespace.pop("__cached__", None)
            if sys.stdout is not None:  # None: python found no fd 1 (`>&-`)
                sys.stdout.flush()
            self._finder.remove()
            self._binder.jits.remove()
            _close(self._runtimes)
            if self._ended is not None:
                self._ended()
            if interrupted:
                _end_by_sigint()

    def restore(self) -> None:
        """Put back the caller's ``sys.argv``, ``sys.path`` and ``__main__``."""
        if self._saved is not None:
            saved_argv, saved_path, saved_main = self._saved
            sys.argv = saved_argv
            sys.path[:] = saved_path
            if saved_main is not None:
                sys.modules["__main__"] = saved_main
            self._saved = None

    def _own_frames_left(self, tb: TracebackType | None) -> TracebackType | None:
        """The traceback from the program's module frame on: the frame that ran
        it, and any above, are not the program's."""
        while tb is not None and tb.tb_frame.f_code is not self._code:
            tb = tb.tb_next
        return tb


def _end_by_sigint() -> None:
    """What python does after an uncaught KeyboardInterrupt: run the exit
    handlers, then kill itself with SIGINT, so a parent sees the signal."""
    import atexit
    import signal

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _start(runtimes: Mapping[str, Runtime]) -> None:
    """Let each ``ManagedRuntime`` set up for the program, with the run's services."""
    run = RunContext(after_import=after_import)
    for runtime in runtimes.values():
        if isinstance(runtime, ManagedRuntime):
            runtime.start(run)


def _close(runtimes: Mapping[str, Runtime]) -> None:
    """Let each ``ManagedRuntime`` undo what its binding set up."""
    for runtime in runtimes.values():
        if isinstance(runtime, ManagedRuntime):
            runtime.close()


def _exit_code(done: SystemExit) -> int:
    """What the interpreter makes of ``sys.exit(value)``."""
    code = done.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    if sys.stderr is not None:
        print(code, file=sys.stderr)
    else:  # as python does: to the C stderr, which may be closed too
        with contextlib.suppress(OSError):
            os.write(2, f"{code}\n".encode(errors="backslashreplace"))
    return 1


def _report(
    kind: type[BaseException] | None,
    value: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """Report an uncaught exception as python would: through the program's
    ``sys.excepthook`` if it set one, else the traceback python prints;
    either way without ppy's own frames."""
    if kind is None or value is None:
        return
    own = _own_dirs()
    while tb is not None and _dir(tb.tb_frame.f_code.co_filename) in own:
        tb = tb.tb_next
    hook = sys.excepthook
    if hook is sys.__excepthook__:
        _print_exception(kind, value, tb, own)
        return
    try:
        hook(kind, value, tb)
    except BaseException as failed:
        if sys.stderr is None:
            return
        print("Error in sys.excepthook:", file=sys.stderr)
        _print_exception(type(failed), failed, failed.__traceback__, own)
        print("\nOriginal exception was:", file=sys.stderr)
        _print_exception(kind, value, tb, own)


def _print_exception(
    kind: type[BaseException],
    value: BaseException,
    tb: TracebackType | None,
    own: frozenset[str],
) -> None:
    """The traceback python would print, without ppy's own frames; nothing
    where ``sys.stderr`` is None (python started with fd 2 closed), as python."""
    if sys.stderr is None:
        return
    report = traceback.TracebackException(kind, value, tb, compact=True)
    _drop_own_frames(report, own, set())
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


def _dir(filename: str) -> str:
    return os.path.dirname(os.path.abspath(filename))


def _drop_own_frames(
    report: traceback.TracebackException, own: frozenset[str], done: set[int]
) -> None:
    if id(report) in done:
        return
    done.add(id(report))
    kept = [f for f in report.stack if _dir(f.filename) not in own]
    report.stack = traceback.StackSummary.from_list(kept)
    for linked in (report.__cause__, report.__context__):
        if linked is not None:
            _drop_own_frames(linked, own, done)
