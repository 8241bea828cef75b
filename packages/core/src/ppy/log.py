"""structlog, configured once by the CLI and imported only when an event needs it.

Events go to stderr, because stdout belongs to the program under ``ppy run``
and to the build lines under ``ppy build``. By default only warnings show;
``-v`` adds the decision, bind and fallback events, ``-vv`` the debug ones,
``-q`` leaves errors only. ``--log-format json`` prints one JSON object per
event for machines.

``get_logger`` returns a small proxy that checks the level itself: importing
structlog costs about 0.1 s, which a ``ppy run`` that has nothing to say
should not pay at start-up. A console event of plain values is printed as
structlog's console renderer prints it without importing it (``_plain``),
so one that has a warning to give does not pay it either.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Literal, TextIO, cast

__all__ = [
    "Held",
    "LogFormat",
    "configure",
    "get_logger",
    "holding",
    "observe",
    "show",
    "status_allowed",
    "verbose",
]

LogFormat = Literal["console", "json"]

#: Until the CLI calls ``configure``, ppy is a library: every event goes to
#: structlog as the host application configured it.
_settings: dict[str, Any] = {"level": logging.NOTSET, "format": "console", "cli": False}
_logger: Any = None


def verbose() -> bool:
    """Whether ``-v`` was given, or every event is observed (``observe``): the
    runtime then logs every call's path."""
    return bool((_settings["cli"] and _settings["level"] <= logging.INFO) or _observer is not None)


#: What sees every event, whatever the level shows (``observe``); None mostly.
_observer: Callable[[str, dict[str, Any]], None] | None = None


def observe(observer: Callable[[str, dict[str, Any]], None] | None) -> None:
    """From now on, ``observer(event, fields)`` sees every event of every
    level before the level decides what is shown: how ``ppy doctor --program``
    counts what a run did (``ppy.run.timings``). None stops it."""
    global _observer
    _observer = observer


def status_allowed() -> bool:
    """Whether the CLI may draw a status line on stderr (``ppy.progress``): its
    events there are console lines for people, and not ``-q``'s errors only."""
    return bool(
        _settings["cli"]
        and _settings["format"] == "console"
        and _settings["level"] <= logging.WARNING
    )


def level_for(verbosity: int) -> int:
    """-q is -1, default 0, -v 1, -vv 2."""
    if verbosity < 0:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)


def configure(verbosity: int = 0, fmt: LogFormat = "console") -> None:
    """Remember the level and format; structlog is set up at the first shown event."""
    global _logger
    _settings.update(level=level_for(verbosity), format=fmt, cli=True)
    _logger = None


def _colors(stream: Any) -> bool:
    """Colour for a terminal, unless ``NO_COLOR`` is set (https://no-color.org) or it is dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return bool(stream.isatty())


def _structlog() -> Any:
    global _logger
    if _logger is None:
        import structlog

        if not _settings["cli"]:
            _logger = structlog.get_logger("ppy")
            return _logger
        renderer: Any
        processors: list[Any] = [structlog.processors.add_log_level]
        if _settings["format"] == "json":
            processors.append(structlog.processors.TimeStamper(fmt="iso", utc=True))
            renderer = structlog.processors.JSONRenderer(sort_keys=True)
        else:
            renderer = structlog.dev.ConsoleRenderer(colors=_colors(sys.stderr), pad_event_to=0)
        processors.append(renderer)
        structlog.configure(
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(_settings["level"]),
            # It needs only write and flush of a TextIO. It writes each line
            # and its newline in one write: stderr redirected is write-through,
            # and a warm run's child writes to the same file as its client.
            logger_factory=structlog.WriteLoggerFactory(cast("TextIO", _Stderr())),
            cache_logger_on_first_use=False,
        )
        _logger = structlog.get_logger("ppy")
    return _logger


class _Stderr:
    """``sys.stderr`` as it is at each event, not as it was when structlog was
    set up: while a status line is shown (``ppy.progress``), another object
    stands in for it and prints each event above the line."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text) if sys.stderr is not None else 0

    def flush(self) -> None:
        if sys.stderr is not None:
            sys.stderr.flush()


#: The types of value ``_plain`` writes as structlog's console renderer does (``_shown``).
_LITERALS = (str, int, float, bool, type(None))
#: What makes the console renderer quote a string.
_QUOTED = frozenset(" \t=\r\n\"'")
#: The keys structlog's renderers treat apart (tracebacks, stacks).
_SPECIAL = frozenset({"exception", "exc_info", "stack", "stack_info", "timestamp", "logger"})
#: The widest level name: structlog pads each to it.
_LEVEL_WIDTH = len("exception")


def _plain(method: str, event: str, fields: dict[str, Any]) -> str | None:
    """The line structlog's console renderer prints for this event, where the
    command's output is plain console text; None where structlog must render
    it (JSON, colours, a library's configuration, a traceback).

    A ``ppy run`` that has one warning to give, such as ``run.nothing_staged``
    or ``run.unbound``, would otherwise import structlog on every run, and
    ``structlog.dev`` imports rich's traceback and pretty-printer wherever rich
    is installed: it is a dependency of ppy-core (``ppy.progress``) and of
    flax. Measured again on a 2-core machine under load (the fastest of 9
    fresh interpreters, with jax imported first): ``import structlog.dev``
    takes 159 ms with rich installed, 32 ms without it; this function
    imports nothing. A cold ``ppy run --no-build`` of examples/25_jax_export
    whose sources changed (two ``run.unbound`` warnings), 10 runs each:
    2964 ms fastest, 3224 ms median with this line; 3199 and 3587 ms through
    structlog's renderer. So the copy stays; the line is the same
    (``tests/core/test_log.py`` compares them).
    """
    if not _settings["cli"] or _settings["format"] != "console" or _colors(sys.stderr):
        return None
    if not fields.keys().isdisjoint(_SPECIAL):
        return None
    if not all(type(value) in _LITERALS for value in fields.values()):
        return None
    pairs = "".join(f" {key}={_shown(value)}" for key, value in sorted(fields.items()))
    return f"[{method.ljust(_LEVEL_WIDTH)}] {event}{pairs}"


def _shown(value: Any) -> str:
    """A value as the console renderer shows it: a string as it is unless a
    space, a quote, ``=`` or a line break would make it ambiguous."""
    if isinstance(value, str) and _QUOTED.isdisjoint(value):
        return value
    return repr(value)


#: Per thread: where its events are held instead of shown (``holding``).
_held = threading.local()

#: An event held back: (method, event, fields).
Held = tuple[str, str, dict[str, Any]]


def holding(into: list[Held]) -> None:
    """From now on, this thread's events go to ``into`` rather than stderr.

    For a thread of ppy's own that works beside the program (the cache
    writer): lines it printed could land in the middle of what the program
    writes to stderr, and one event split by another is no longer JSON. The
    thread that owns the program shows them later (``show``).
    """
    _held.events = into


def show(events: list[Held]) -> None:
    """Show events another thread held, in the order it held them."""
    for method, event, fields in events:
        _write(method, event, fields)


def _write(method: str, event: str, fields: dict[str, Any]) -> None:
    """Print one event: the plain line where it says it all, else through structlog.
    With stderr closed (``2>&-``) it goes nowhere, as python's own warnings
    do: never on stdout, which is the program's."""
    if sys.stderr is None:
        return
    line = _plain(method, event, fields) if _logger is None else None
    if line is not None:
        # One write, the newline in it: stderr redirected is write-through, and
        # a warm run's client and child write to the same file at once.
        sys.stderr.write(f"{line}\n")
        sys.stderr.flush()
    else:
        getattr(_structlog(), method)(event, **fields)


class _Logger:
    """The part of a structlog logger ppy uses, filtering before any import."""

    __slots__ = ()

    def _emit(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        if _observer is not None:
            _observer(event, fields)
        if level >= _settings["level"]:
            held = getattr(_held, "events", None)
            if held is not None:
                held.append((method, event, fields))
            else:
                _write(method, event, fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit(logging.ERROR, "error", event, fields)


_LOGGER = _Logger()


def get_logger() -> _Logger:
    return _LOGGER
