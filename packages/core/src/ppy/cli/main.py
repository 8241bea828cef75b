"""The ``ppy`` command: build, run, record, server, inspect, explain, plugins,
cache, doctor.

Exit codes: 0 success, 1 the program or the build failed, 2 bad usage or bad
configuration. Errors a user can act on are one message on stderr with the
remedy, never a traceback.

What a command does is in ``ppy.commands`` (run, record, build, explain,
doctor) or the room it belongs to; here are the parser and what each command
prints. Each command
imports its modules inside its own function, for start-up speed: ``ppy run``
imports nothing of the build, ``inspect`` or ``doctor``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ppy.errors import PpyError, UsageError, reader_gone

TYPE_CHECKING = False  # typing is not imported for it: the warm client does without
if TYPE_CHECKING:
    from ppy.run.program import Program

__all__ = ["main"]


#: What ``-v`` shows, by command: each logs its own events (docs/logging.md).
_VERBOSE = {
    None: "more log events on stderr: what -v shows for the command (-vv: debug events too)",
    "build": "show each function's decision and the staging steps (-vv: debug events too)",
    "run": "show the binds, the fallbacks and every staged call's path (-vv: cache events too)",
    "record": "show what was recorded and where it was written (-vv: debug events too)",
}


def _common(command: str | None = None) -> argparse.ArgumentParser:
    """The logging options every command takes, before or after its name."""
    verbose = _VERBOSE.get(
        command, f"accepted, but ppy {command} has no events of its own beyond warnings"
    )
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("logging")
    group.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=verbose)
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show errors only",
    )
    group.add_argument(
        "--log-format",
        choices=("console", "json"),
        default=argparse.SUPPRESS,
        help="console lines for people (default) or one JSON object per event",
    )
    return common


#: Each command and its one-line help, in the order ``ppy --help`` lists them.
_COMMANDS = {
    "build": "stage what can be staged and write the artifact",
    "run": "run a program with its staged functions in place",
    "record": "run a program and write down the signatures of its jitted calls",
    "inspect": "print an artifact's manifest, entries and signatures",
    "explain": "print the decision trail for one function",
    "server": "show or stop the warm-start servers",
    "plugins": "list installed plugins and runtimes",
    "cache": "show or clear the compiled-executable cache",
    "doctor": "show where a program's start-up goes",
}


def _asked(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, where it names one: the first word that is
    not an option of ppy's own (``--log-format`` takes the word after it)."""
    words = iter(argv)
    for word in words:
        if word == "--log-format":
            next(words, None)
        elif word == "--" or not word.startswith("-"):
            return word if word in _COMMANDS else None
    return None


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only``, one whose other commands are names and help
    alone (as pip's command table), so that ``ppy run`` does not build the
    arguments of eight commands it does not run."""
    parser = argparse.ArgumentParser(
        prog="ppy",
        description="Stage JAX functions at build time and run them through PJRT.",
        epilog="Exit codes: 0 success; 1 the build failed, or an artifact could not be read; "
        "2 bad usage or bad configuration; ppy run and ppy record exit with the program's "
        "own exit status. The environment variables ppy reads are listed in "
        "docs/environment.md; `ppy COMMAND --help` describes each command.",
        parents=[_common()],
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    if only is not None:
        for name, text in _COMMANDS.items():
            if name != only:
                commands.add_parser(name, help=text)
        _COMMAND_PARSERS[only](commands)
        return parser
    for add in _COMMAND_PARSERS.values():
        add(commands)
    return parser


def _add_build(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:

    build = commands.add_parser(
        "build",
        parents=[_common("build")],
        help=_COMMANDS["build"],
        description="Read the project's .ppy files, decide function by function what can be "
        "staged, stage it, and write one artifact. Prints one line per candidate function.",
    )
    build.add_argument(
        "path",
        nargs="?",
        default=".",
        type=Path,
        help="the project folder or a file in it (default: .)",
    )
    build.add_argument(
        "--keep-going",
        action="store_true",
        help="exit 0 even when a function the policy allowed could not be staged",
    )


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser(
        "run",
        parents=[_common("run")],
        help=_COMMANDS["run"],
        description="Run FILE as `python FILE ARGS...` would, with each staged function bound "
        "in place of the original. Builds first when the artifact is missing or stale.",
    )
    run.add_argument(
        "--no-build", action="store_true", help="never build; run what the artifact holds"
    )
    run.add_argument(
        "--warm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run from a resident server that has jax imported (docs/warm-start.md); "
        "default: $PPY_WARM, else [tool.ppy.run] warm, else off",
    )
    run.add_argument("program", metavar="FILE", help="the .ppy program to run")
    remainder = run.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments passed to the program"
    )
    remainder.required = False  # argparse counts an empty remainder as missing


def _add_record(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    record = commands.add_parser(
        "record",
        parents=[_common("record")],
        help=_COMMANDS["record"],
        description="Run FILE as `python FILE ARGS...` would, on the original jitted path, "
        "and write the signature of every call of the project's jax.jit functions to "
        ".ppy/signatures.json (merged with what is there): decorated or made by "
        "`f = jax.jit(...)`, at module level, inside functions or under the main guard, in "
        "the project's .ppy modules. `ppy build` then stages each recorded function as if "
        "its inputs were annotated (docs/recording.md).",
    )
    record.add_argument(
        "--replace", action="store_true", help="start the file afresh instead of merging"
    )
    record.add_argument("program", metavar="FILE", help="the .ppy program to run")
    rest = record.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments passed to the program"
    )
    rest.required = False


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = commands.add_parser(
        "inspect",
        parents=[_common("inspect")],
        help=_COMMANDS["inspect"],
        description="Validate an artifact and print what it holds.",
    )
    inspect.add_argument("artifact", type=Path, metavar="ARTIFACT")
    inspect.add_argument(
        "--json",
        action="store_true",
        help="print the artifact's manifest.json as it holds it: the header, the modules, "
        "each entry with its members and signature, and every decision (docs/artifact.md)",
    )


def _add_explain(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = commands.add_parser(
        "explain",
        parents=[_common("explain")],
        help=_COMMANDS["explain"],
        description="Print every rule evaluated for a function and the one that decided.",
    )
    explain.add_argument(
        "name", metavar="NAME", help="function name, or module.name when several modules have it"
    )
    explain.add_argument(
        "path",
        nargs="?",
        default=".",
        type=Path,
        help="the project folder or a file in it (default: .)",
    )


def _add_server(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    server = commands.add_parser(
        "server",
        parents=[_common("server")],
        help=_COMMANDS["server"],
        description="The resident servers `ppy run --warm` starts, one per key "
        "(docs/warm-start.md): show them or stop them.",
    )
    actions = server.add_subparsers(dest="action", metavar="ACTION", required=True, title="actions")
    status = actions.add_parser(
        "status",
        parents=[_common("server")],
        help="each warm server of this user: key, pid, age, runs served, memory",
        description="Ask each warm server of this user for its key, pid, age, runs served "
        "and running, resident memory and open files.",
    )
    status.add_argument("--json", action="store_true", help="print one JSON object per server")
    stop = actions.add_parser(
        "stop",
        parents=[_common("server")],
        help="stop the servers of a project (--all: every one)",
        description="Stop the warm servers of the project at PATH (--all: every server of "
        "this user); each stops listening at once and exits when its runs have ended.",
    )
    stop.add_argument("--all", action="store_true", help="every server, not only this project's")
    stop.add_argument(
        "path",
        nargs="?",
        default=".",
        type=Path,
        help="the project folder or a file in it (default: .)",
    )


def _add_plugins(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "plugins",
        parents=[_common("plugins")],
        help=_COMMANDS["plugins"],
        description="List the distributions registered under ppy.plugins and ppy.runtimes, "
        "their versions, and whether each loaded.",
    )


def _add_cache(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cache = commands.add_parser(
        "cache",
        parents=[_common("cache")],
        help=_COMMANDS["cache"],
        description="The per-user cache of compiled executables (never part of an "
        "artifact). Without an ACTION, show.",
    )
    cache_actions = cache.add_subparsers(dest="action", metavar="ACTION", title="actions")
    cache_actions.add_parser(
        "show",
        parents=[_common("cache")],
        help="where the cache is and what it holds (the default)",
        description="Where the cache is, and its staged executables and unstaged "
        "computations (eager ops, fallbacks), with their sizes.",
    )
    cache_actions.add_parser(
        "clear",
        parents=[_common("cache")],
        help="remove every cached executable",
        description="Remove every cached executable, staged and unstaged; each is compiled "
        "again when next needed.",
    )


def _add_doctor(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = commands.add_parser(
        "doctor",
        parents=[_common("doctor")],
        help=_COMMANDS["doctor"],
        description="Time `import jax` in a fresh interpreter, name installed versions known "
        "to be slow with their remedy, and show the artifact's freshness, what it stages and "
        "what stays, the executable cache, and the versions and machine. With --program FILE "
        "ARGS, run the program once and say where its time went. Exits 0 whatever it finds, "
        "whatever the program's exit status.",
    )
    doctor.add_argument(
        "path",
        nargs="?",
        default=".",
        type=Path,
        help="the project folder or a file in it (default: .)",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as one JSON object")
    doctor.add_argument(
        "--no-import",
        action="store_true",
        help="do not time `import jax` (it takes a fresh interpreter and a second or two)",
    )
    doctor.add_argument(
        "--import-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="give up timing `import jax` after this long (default: 60)",
    )
    program = doctor.add_argument(
        "--program",
        nargs=argparse.REMAINDER,
        metavar="FILE [ARGS]",
        help="also run FILE ARGS once under `ppy run --no-warm`, its output captured and not "
        "shown, and report where that run's time went: import jax, the backend start, "
        "compiles and executable-cache loads, staged calls and fallbacks, the rest, and the "
        "exit (the last option: what follows is the program's)",
    )
    program.required = False


_COMMAND_PARSERS = {
    "build": _add_build,
    "run": _add_run,
    "record": _add_record,
    "inspect": _add_inspect,
    "explain": _add_explain,
    "server": _add_server,
    "plugins": _add_plugins,
    "cache": _add_cache,
    "doctor": _add_doctor,
}


def _seconds(text: str) -> float:
    """A positive number of seconds, for argparse."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"wanted a positive number of seconds, got {text!r}")
    return value


def _version() -> str:
    """``ppy 0.1.0 (python 3.11.7)``: what a bug report needs first."""
    import platform

    from ppy import __version__

    return f"ppy {__version__} (python {platform.python_version()})"


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit code.

    The program of ``ppy run`` runs in this frame, not in one a call deeper:
    the frames a program sees above its own are the caller's (the ``ppy``
    script's) and this one, and no more. A warm server's child runs it in
    ``ppy.commands.run.run`` instead, from the request this parsed.

    A run a warm server served ends here, as the ``ppy`` script (``argv``
    None), by ``os._exit`` once this process's streams are flushed: the
    program ran, and ended, in the server's child, and this process has
    nothing left to do but the interpreter's own tear-down."""
    try:
        program = _main(list(sys.argv[1:] if argv is None else argv))
        if isinstance(program, _Served) and argv is None:
            _leave(program)
        if isinstance(program, int):
            return program
        with program as run:
            run()
        return program.end()
    except BrokenPipeError:
        return reader_gone()


class _Served(int):
    """The exit code of a run a warm server served."""


def _leave(code: int) -> None:
    """End the process with ``code`` at once, its streams flushed; where one
    cannot be flushed (a reader gone), return, and the ordinary exit says so."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            try:
                stream.flush()
            except Exception:
                return
    os._exit(code)


def _main(argv: list[str]) -> int | Program:
    """The command's exit code; for ``ppy run``, the program ready to run."""
    args = _parser(_asked(argv)).parse_args(argv)
    from ppy.log import configure

    verbosity = -1 if getattr(args, "quiet", False) else min(getattr(args, "verbose", 0), 2)
    configure(verbosity, getattr(args, "log_format", "console"))
    try:
        if args.command == "build":
            return _build(args)
        if args.command == "run":
            return _run(args, verbosity)
        if args.command == "server":
            return _server(args)
        if args.command == "record":
            from ppy.commands.record import record  # for start-up speed, as every command

            return record(args.program, list(args.args), replace=args.replace)
        if args.command == "inspect":
            return _inspect(args)
        if args.command == "explain":
            return _explain(args)
        if args.command == "plugins":
            return _plugins()
        if args.command == "doctor":
            return _doctor(args)
        return _cache(args)
    except PpyError as error:
        _error(f"ppy: error: {error}")
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def _error(text: str) -> None:
    """A line on stderr; none where there is no stderr (fd 2 closed), since
    ``print(file=None)`` would put it on stdout."""
    if sys.stderr is not None:
        print(text, file=sys.stderr)


def _build(args: argparse.Namespace) -> int:
    from ppy.cli.report import build_lines, summary
    from ppy.commands.build import build
    from ppy.layout import shown
    from ppy.progress import for_build

    result = build(args.path, progress=for_build())
    for line in build_lines(result.decisions, result.project.plugins, width=_columns()):
        print(line)
    counts = {
        o: sum(d.outcome.value == o for d in result.decisions)
        for o in ("staged", "reused", "stays")
    }
    print(
        f"wrote {shown(result.project.config.artifact)}: {counts['staged']} staged, "
        f"{counts['reused']} reused, {counts['stays']} stay"
    )
    if result.decisions:
        print(summary(result.decisions))
    if result.failed and not args.keep_going:
        names = ", ".join(f"{d.module}.{d.qualname}" for d in result.failed)
        _error(f"ppy: error: could not stage {names} (see above); --keep-going accepts that")
        return 1
    return 0


def _columns() -> int | None:
    """The terminal's width where stdout is one (``COLUMNS`` first, as
    ``shutil`` reads it); None for a pipe or a file, which get whole lines."""
    if sys.stdout is None or not sys.stdout.isatty():  # None: started with stdout closed
        return None
    import shutil

    return shutil.get_terminal_size().columns


def _run(args: argparse.Namespace, verbosity: int) -> int | Program:
    """A warm run's exit code, or the program ready to run here."""
    from ppy.request import RunRequest

    request = RunRequest(
        program=args.program,
        argv=tuple(args.args),
        build=not args.no_build,
        warm=args.warm,
        verbosity=verbosity,
        log_format=getattr(args, "log_format", "console"),
    )
    config = None
    if request.warm is not False and Path(request.program).is_file():
        # Here for start-up speed: a warm run imports what it needs to decide
        # and connect, and the run command only if it goes cold.
        from ppy.config import load_config
        from ppy.warm.client import run_warm, wants_warm

        config = load_config(Path(request.program))
        if wants_warm(request.warm, config):
            code = run_warm(config, request)
            if code is not None:
                return _Served(code)
    from ppy.commands.run import launch  # for start-up speed, as every command

    return launch(request, config=config)


def _server(args: argparse.Namespace) -> int:
    from ppy.cli.servers import status, stop

    if args.action == "status":
        return status(as_json=args.json)
    return stop(args.path, every=args.all)


def _inspect(args: argparse.Namespace) -> int:
    from ppy.artifact.read import read_artifact
    from ppy.cli.inspection import render_text, to_json

    path: Path = args.artifact
    if not path.exists() and not path.is_symlink():
        raise UsageError(
            f"{path}: no such file", remedy="give the artifact's path (ppy build prints it)"
        )
    artifact = read_artifact(path)
    if args.json:
        print(json.dumps(to_json(artifact), indent=2, sort_keys=True))
    else:
        print(render_text(artifact, path))
    return 0


def _explain(args: argparse.Namespace) -> int:
    from ppy.cli.report import explained
    from ppy.commands.explain import explain

    print(explained(explain(args.name, args.path)))
    return 0


def _plugins() -> int:
    from ppy.cli.report import plugin_lines
    from ppy.registry import load_plugins, load_runtimes

    for line in plugin_lines(load_plugins(describe=True), load_runtimes(describe=True)):
        print(line)
    return 0


def _cache(args: argparse.Namespace) -> int:
    from ppy import cache

    if args.action == "clear":
        removed = cache.ExecutableCache().clear()
        print(f"removed {removed} cached executables from {cache.cache_dir()}")
    else:
        print(cache.render_cache_summary())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ppy.cli.diagnosis import render_text, to_json
    from ppy.commands.doctor import gather

    path: Path = args.path
    program: list[str] = args.program or []
    if args.program is not None and not program:
        raise UsageError(
            "--program needs a FILE", remedy="ppy doctor --program model.ppy [ARGS...]"
        )
    if program and path == Path("."):
        path = Path(program[0])  # the program's project
    report = gather(
        path, measure_import=not args.no_import, timeout=args.import_timeout, program=program
    )
    if args.json:
        print(json.dumps(to_json(report), indent=2, sort_keys=True))
    else:
        print(render_text(report))
    return 0
