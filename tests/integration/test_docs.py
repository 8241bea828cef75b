"""The docs say what the code does: every log event the code emits is listed with its fields.

The events are read from the sources of the four distributions (every call
``<logger>.debug/info/warning/error("dotted.name", field=...)``) and from a real
build's JSON log, so an event added or a field renamed without its row in
docs/logging.md fails here.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {"debug", "info", "warning", "error", "exception"}
EVENT = re.compile(r"[a-z_]+(\.[a-z_]+)+")


def emitted() -> dict[str, set[str]]:
    """Event name -> every field name any call site passes with it."""
    events: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LEVELS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and EVENT.fullmatch(node.args[0].value)
            ):
                events[node.args[0].value].update(k.arg for k in node.keywords if k.arg)
    return dict(events)


EVENTS = emitted()


def rows(event: str) -> list[str]:
    text = (ROOT / "docs" / "logging.md").read_text()
    return [line for line in text.splitlines() if line.startswith("|") and f"`{event}`" in line]


def test_the_scan_finds_the_events_a_run_emits() -> None:
    assert {"build.decision", "run.bind", "run.fallback", "cache.hit"} <= set(EVENTS)


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_event_and_field_is_documented(event: str) -> None:
    found = rows(event)
    assert found, f"docs/logging.md has no row for `{event}`"
    fields = " ".join(row.split("|")[3] for row in found)
    missing = [f for f in sorted(EVENTS[event]) if not re.search(rf"\b{f}\b", fields)]
    assert not missing, f"docs/logging.md: `{event}` lacks fields {missing}"


def test_the_events_of_a_real_build_are_documented_with_their_fields(
    make_project: Callable[..., Path], ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """build.decision's fields come from a record, not keywords: read them from a build."""
    root = make_project(
        {
            "model.ppy": "from ppy import xla\n\n@xla.jit\ndef twice(n: int) -> int:\n"
            "    return 2 * n\n\nprint(twice(4))\n"
        },
        pyproject='[project]\nname = "demo"\n',
    )
    built = ppy("-vv", "--log-format", "json", "build", cwd=root)
    assert built.returncode == 0, built.stderr
    events = [json.loads(line) for line in built.stderr.splitlines() if line.startswith("{")]
    assert "build.decision" in {e["event"] for e in events}
    for event in events:
        found = rows(event["event"])
        assert found, f"docs/logging.md has no row for `{event['event']}`"
        documented = " ".join(row.split("|")[3] for row in found)
        fields = set(event) - {"event", "level", "timestamp"}
        missing = [f for f in sorted(fields) if not re.search(rf"\b{f}\b", documented)]
        assert not missing, f"docs/logging.md: `{event['event']}` lacks fields {missing}"
