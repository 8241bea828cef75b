"""structlog, configured once by the CLI.

Events go to stderr, because stdout belongs to the program under ``ppy run``
and to the build lines under ``ppy build``. By default only warnings show;
``-v`` adds the decision, bind and fallback events, ``-vv`` the debug ones,
``-q`` leaves errors only. ``--log-format json`` prints one JSON object per
event for machines.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal

__all__ = ["LogFormat", "configure", "get_logger", "verbose"]

LogFormat = Literal["console", "json"]

_verbose = False


def verbose() -> bool:
    """Whether ``-v`` was given: the runtime then logs every call's path."""
    return _verbose


def level_for(verbosity: int) -> int:
    """-q is -1, default 0, -v 1, -vv 2."""
    if verbosity < 0:
        return logging.ERROR
    return {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)


def configure(verbosity: int = 0, fmt: LogFormat = "console") -> None:
    import structlog

    global _verbose
    _verbose = verbosity > 0
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=True)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), pad_event_to=0)
    processors: list[Any] = [structlog.processors.add_log_level]
    if fmt == "json":
        processors.append(structlog.processors.TimeStamper(fmt="iso", utc=True))
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(level_for(verbosity)),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger() -> Any:
    import structlog

    return structlog.get_logger("ppy")
