"""``ppy server status`` and ``ppy server stop``: the warm servers of this user.

Each server is asked over its socket; one that does not answer is gone, and
what it left behind (a socket, a note) is removed as it is found.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

from ppy.warm.place import Place, places, warm_folder
from ppy.warm.protocol import ProtocolError, receive, send

__all__ = ["ask", "status", "stop"]


def ask(place: Place, op: str) -> dict[str, Any] | None:
    """The server's answer to ``op``, or None where nothing answers (its files
    are then removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(place.address())
        send(sock, {"op": op})
        reply = receive(sock)
    except (ConnectionRefusedError, FileNotFoundError):
        place.remove()
        return None
    except (OSError, ProtocolError):
        return None
    finally:
        sock.close()
    return reply


def _servers() -> list[tuple[Place, dict[str, Any]]]:
    found = []
    for place in places(warm_folder()):
        reply = ask(place, "status")
        if reply is not None:
            found.append((place, reply))
    return found


def status(*, as_json: bool) -> int:
    servers = _servers()
    if as_json:
        print(json.dumps([{"name": p.name, **r} for p, r in servers], indent=2, sort_keys=True))
        return 0
    if not servers:
        print(f"no warm servers ({warm_folder()})")
        return 0
    from ppy.cache import human_size

    for place, reply in servers:
        key = reply.get("key", {})
        age = time.time() - float(reply.get("started", time.time()))
        print(
            f"{place.name}  pid {reply.get('pid')}  up {_duration(age)}  "
            f"{reply.get('served', 0)} runs ({reply.get('running', 0)} now)  "
            f"rss {human_size(int(reply.get('rss', 0)))}  {reply.get('fds')} fds"
        )
        print(f"    project {key.get('root')}")
        preload = ", ".join(key.get("preload") or []) or "(jax only)"
        print(f"    python {key.get('python')}  preload {preload}")
    return 0


def stop(path: Path, *, every: bool) -> int:
    """Stop this project's servers (every server with ``every``)."""
    root = None
    if not every:
        from ppy.config import load_config

        root = str(load_config(path).root.resolve())
    stopped = 0
    for place, reply in _servers():
        if root is not None and reply.get("key", {}).get("root") != root:
            continue
        if ask(place, "stop") is not None:
            stopped += 1
    which = "" if every else f" for {root}"
    print(f"stopped {stopped} warm server{'s' if stopped != 1 else ''}{which}")
    return 0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
