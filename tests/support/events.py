"""ppy's log events, as ``--log-format json`` writes them on stderr."""

from __future__ import annotations

import json


def json_events(stderr: str, name: str = "") -> list[dict[str, object]]:
    """The events on ``stderr`` named ``name`` (every one for ""), in order;
    a line that is not one (the program's own) is left out."""
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e for e in events if not name or e.get("event") == name]
