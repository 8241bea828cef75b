"""The pytest plugin of the device session (``tests/device/run.py`` loads it with ``-p``).

Two jobs, both for a machine whose time is counted:

- a deadline (``PPY_DEVICE_DEADLINE``, seconds since the epoch): once it has
  passed, no further test starts; the session stops after the running one,
  as ``-x`` stops after a failure, and says why;
- the outcome of every test, written as JSON to ``PPY_DEVICE_OUTCOMES`` when
  the session ends (also when it stopped), with the ids it had selected, so
  the runner can say what passed, what failed and what was not reached.

Without either variable it does nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

DEADLINE = "PPY_DEVICE_DEADLINE"
OUTCOMES = "PPY_DEVICE_OUTCOMES"
STOPPED = "the session's time was spent (its deadline passed); the tests after this one did not run"

_state: dict[str, Any] = {"selected": [], "tests": {}, "stopped": None, "session": None}


def pytest_sessionstart(session: pytest.Session) -> None:
    _state["session"] = session


def pytest_collection_finish(session: pytest.Session) -> None:
    _state["selected"] = [item.nodeid for item in session.items]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    test = _state["tests"].setdefault(
        report.nodeid, {"outcome": "passed", "seconds": 0.0, "message": None}
    )
    test["seconds"] += report.duration
    if report.outcome == "passed" or test["outcome"] != "passed":
        return
    if report.outcome == "skipped":
        test["outcome"] = "skipped"
    else:
        test["outcome"] = "failed" if report.when == "call" else "error"
    message = str(report.longrepr) if report.longrepr is not None else ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    # The assertion pytest reports ("E   AssertionError: ..."), else the last line.
    said = [line for line in lines if line.startswith("E ")]
    test["message"] = (said[0] if said else lines[-1] if lines else "")[:300]


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    deadline = os.environ.get(DEADLINE)
    session = _state["session"]
    if deadline and session is not None and time.time() >= float(deadline):
        _state["stopped"] = STOPPED
        session.shouldstop = STOPPED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(OUTCOMES)
    if not target:
        return
    document = {
        "selected": _state["selected"],
        "tests": _state["tests"],
        "stopped": _state["stopped"],
        "exit_status": int(exitstatus),
    }
    Path(target).write_text(json.dumps(document, indent=2) + "\n")
