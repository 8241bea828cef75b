"""A line on the terminal while ppy works: the functions a build is exporting,
or a warm server starting.

A build of many functions exports for seconds or minutes before its table
can be printed, and the first ``ppy run --warm`` waits while its server
imports jax. Where stderr is a terminal, one line there says what is going on
(``exporting 3/10  0:00:04  model.loss``; ``starting the warm server ...``),
redrawn in place and cleared when the work ends, so that the terminal is
left with what it would have had without it: the table on stdout, the
program's own output. Nothing is drawn where stderr is a pipe or a file,
with ``--quiet``, or with ``--log-format json`` (``ppy.log.status_allowed``).

The build pipeline calls a ``Progress`` (``start``, ``begin``, ``done``,
``close``) and knows nothing of terminals; this module is the only one of
ppy that imports rich, which draws the line, and imports it only when a line
is drawn. Measured on a 2-core machine under load (the fastest of 7 fresh
interpreters): ``import rich.live, rich.console`` takes about 85 ms (about
65 ms after jax), ``rich.progress`` about 115 ms, which is why the line is a
``Live`` of our own text rather than rich's progress bars. A build pays that
against the seconds its export worker takes to import jax; ``ppy run``
without a build, and every run whose stderr is not a terminal, never imports
this module's rich half.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rich.live import Live

__all__ = ["SILENT", "Progress", "for_build", "shown", "waiting"]


class Progress(Protocol):
    """What the build says as it stages functions; a display may show it."""

    def start(self, total: int) -> None:
        """``total`` functions are about to be staged."""
        ...

    def begin(self, function: str) -> None:
        """``function`` (``module.qualname``) is being staged now."""
        ...

    def done(self, function: str, outcome: str) -> None:
        """``function`` has its result: ``staged`` or ``stays``."""
        ...

    def close(self) -> None:
        """Staging is over (or was interrupted): take the display away."""
        ...


class _Silent:
    """A ``Progress`` that shows nothing: a pipe, ``--quiet``, a library caller."""

    def start(self, total: int) -> None:
        pass

    def begin(self, function: str) -> None:
        pass

    def done(self, function: str, outcome: str) -> None:
        pass

    def close(self) -> None:
        pass


SILENT: Progress = _Silent()


def shown() -> bool:
    """Whether a line may be drawn on stderr: the CLI logs there for people
    (not ``--quiet``, not JSON), and stderr is a terminal that can redraw."""
    import os

    from ppy.log import status_allowed

    stream = sys.stderr
    if stream is None or not status_allowed() or os.environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError):  # closed under us
        return False


def for_build() -> Progress:
    """The build's display: a line on the terminal, or nothing (``shown``)."""
    return _Exports() if shown() else SILENT


@contextlib.contextmanager
def waiting(what: str) -> Iterator[None]:
    """Show ``what`` and the time it has taken, on one line, until the block ends."""
    if not shown():
        yield
        return
    started = time.monotonic()
    live = _live(lambda: f"{what}  {_clock(started)}")
    try:
        yield
    finally:
        live.stop()


def _clock(started: float) -> str:
    """The time since ``started`` as rich's elapsed column shows it: ``0:00:04``."""
    from datetime import timedelta

    return str(timedelta(seconds=int(time.monotonic() - started)))


def _live(line: Callable[[], str]) -> Live:
    """A line on stderr, redrawn four times a second (so the clock moves) and
    whenever ``refresh`` is called, and erased when stopped.

    What ppy writes to stderr meanwhile (a warning, ``-v``'s events) is
    printed above the line rather than through it: rich stands in for
    ``sys.stderr`` while the line is shown. stdout is left alone, since it
    is the build's table or the program's output.
    """
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def render() -> Any:
        # One line whatever the width: a long name is cut, never wrapped.
        return Text(line(), no_wrap=True, overflow="ellipsis")

    live = Live(
        console=Console(file=sys.stderr),
        get_renderable=render,
        refresh_per_second=4,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=True,
    )
    live.start()
    return live


class _Exports:
    """The build's line: ``exporting 3/10  0:00:04  model.loss``, and how many
    stay once any does."""

    def __init__(self) -> None:
        self._live: Live | None = None
        self._total = 0
        self._done = 0
        self._stays = 0
        self._current = ""
        self._started = time.monotonic()

    def _line(self) -> str:
        stays = f" ({self._stays} stay)" if self._stays else ""
        line = f"exporting {self._done}/{self._total}{stays}  {_clock(self._started)}"
        return f"{line}  {self._current}" if self._current else line

    def start(self, total: int) -> None:
        self._total = total
        self._started = time.monotonic()
        if self._live is None:
            self._live = _live(self._line)

    def begin(self, function: str) -> None:
        self._current = function
        self._refresh()

    def done(self, function: str, outcome: str) -> None:
        self._done += 1
        self._stays += outcome == "stays"
        if self._current == function:
            self._current = ""
        self._refresh()

    def close(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def _refresh(self) -> None:
        """Draw every change at once: a function can take less than the 0.25 s
        between the clock's redraws, and each count should show."""
        if self._live is not None:
            self._live.refresh()
