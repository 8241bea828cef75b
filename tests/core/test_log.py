"""What ppy prints of its events: the plain console line is structlog's own."""

from __future__ import annotations

import io
from typing import Any

import pytest
import structlog
from ppy import log

EVENTS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "warning",
        "run.nothing_staged",
        {"candidates": 1, "reason": "parameter 'x' is not described"},
    ),
    ("warning", "run.nothing_staged", {"remedy": 'say "why"', "candidates": 3}),
    ("info", "run.bind", {"module": "model", "function": "score", "staged": True}),
    ("info", "run.call", {"a": "x=1", "b": "tab\there", "c": "plain_word", "d": 7}),
    ("error", "build.failed", {"reason": "ünïcode\nand a line", "size": 1.5, "none": None}),
    ("debug", "cache.hit", {}),
]


#: Each test configures logging as a command does.
pytestmark = pytest.mark.usefixtures("own_logging")


def _structlog_line(method: str, event: str, fields: dict[str, Any]) -> str:
    """What structlog, configured as the command configures it, prints."""
    log.configure(2, "console")
    stream = io.StringIO()
    logger = log._structlog()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(stream))
    getattr(logger, method)(event, **fields)
    return stream.getvalue().removesuffix("\n")


@pytest.mark.parametrize(("method", "event", "fields"), EVENTS)
def test_the_plain_line_is_structlogs(method: str, event: str, fields: dict[str, Any]) -> None:
    log.configure(2, "console")
    assert log._plain(method, event, fields) == _structlog_line(method, event, fields)


def test_an_event_printed_plain_imports_no_structlog(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log.configure(0, "console")
    monkeypatch.setattr(log, "_structlog", lambda: pytest.fail("structlog was set up"))
    log.get_logger().warning("run.nothing_staged", candidates=1, reason="not described")
    assert (
        capsys.readouterr().err
        == "[warning  ] run.nothing_staged candidates=1 reason='not described'\n"
    )


def test_what_the_plain_line_cannot_say_goes_to_structlog() -> None:
    log.configure(0, "json")
    assert log._plain("warning", "e", {"a": 1}) is None
    log.configure(0, "console")
    assert log._plain("warning", "e", {"path": object()}) is None
    assert log._plain("error", "e", {"exc_info": True}) is None
