"""What crosses a server's socket: length-framed JSON, checked field by field.

No pickles and no code: a request is a JSON object of known fields, each of
a known type and size, and anything else is refused before it is used. A run
request carries the client's stdin, stdout and stderr as file descriptors
(SCM_RIGHTS), so the child writes to the very pipe, file or terminal the
client was given.

Frames: 4 bytes of big-endian length, then that many bytes of UTF-8 JSON.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import json
import os
import signal
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "FORWARDED",
    "MAX_FRAME",
    "ProtocolError",
    "Request",
    "parse_request",
    "receive",
    "send",
]

#: The largest frame either side accepts: room for a large environment.
MAX_FRAME: Final = 4 << 20
#: The signals a client passes on to its run.
FORWARDED: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_HEADER: Final = struct.Struct(">I")
_MAX_ITEMS: Final = 65536
_OPS: Final = frozenset({"run", "status", "stop"})


class ProtocolError(Exception):
    """A frame or request that is not what the protocol allows."""


@dataclass(frozen=True)
class Request:
    """A checked request. ``op`` is ``run`` (with the rest), ``status`` or ``stop``."""

    op: str
    key: str = ""
    ppy_argv: tuple[str, ...] = ()
    orig_argv: tuple[str, ...] = ()
    cwd: str = ""
    env: Mapping[str, str] | None = None
    umask: int = 0o022
    ignored: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "key": self.key,
            "ppy_argv": list(self.ppy_argv),
            "orig_argv": list(self.orig_argv),
            "cwd": self.cwd,
            "env": dict(self.env or {}),
            "umask": self.umask,
            "ignored": list(self.ignored),
        }


def send(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    """Send one frame, with ``fds`` attached to its first byte."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=True).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"a frame of {len(body)} bytes is over the limit of {MAX_FRAME}")
    data = _HEADER.pack(len(body)) + body
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        sent = sock.sendmsg([data], ancillary)
        data = data[sent:]
    sock.sendall(data)


def receive(sock: socket.socket, *, fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One frame as a JSON object, and the descriptors that came with it (at
    most ``fds``); (None, []) at end of stream before a frame starts."""
    received: list[int] = []
    head = b""
    while len(head) < _HEADER.size:
        if fds and not received and not head:
            chunk, got, _, _ = socket.recv_fds(sock, _HEADER.size, fds)
            received.extend(got)
        else:
            chunk = sock.recv(_HEADER.size - len(head))
        if not chunk:
            _close_all(received)
            if head:
                raise ProtocolError("the stream ended inside a frame's length")
            return None, []
        head += chunk
    (length,) = _HEADER.unpack(head)
    if length > MAX_FRAME:
        _close_all(received)
        raise ProtocolError(f"a frame of {length} bytes is over the limit of {MAX_FRAME}")
    body = bytearray()
    while len(body) < length:
        chunk = sock.recv(min(length - len(body), 1 << 16))
        if not chunk:
            _close_all(received)
            raise ProtocolError("the stream ended inside a frame")
        body += chunk
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        _close_all(received)
        raise ProtocolError(f"a frame is not JSON: {error}") from None
    if not isinstance(message, dict):
        _close_all(received)
        raise ProtocolError("a frame is not a JSON object")
    return message, received


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def parse_request(message: Mapping[str, Any]) -> Request:
    """The request ``message`` holds, every field checked; ``ProtocolError`` if not."""
    unknown = set(message) - {f.name for f in dataclasses.fields(Request)}
    if unknown:
        raise ProtocolError(f"unknown fields: {', '.join(sorted(unknown))}")
    op = message.get("op")
    if op not in _OPS:
        raise ProtocolError(f"op is {op!r}; wanted one of {', '.join(sorted(_OPS))}")
    if op != "run":
        return Request(op)
    env = message.get("env")
    if not isinstance(env, dict) or len(env) > _MAX_ITEMS:
        raise ProtocolError("env is not an object of strings")
    for name, value in env.items():
        if not isinstance(value, str) or not name or "=" in name or "\0" in name + value:
            raise ProtocolError(f"env holds {name!r}, which is not a variable")
    umask = message.get("umask")
    if type(umask) is not int or not 0 <= umask <= 0o777:
        raise ProtocolError("umask is not a mode")
    ignored = _strings_or_ints(message.get("ignored"), "ignored", int)
    if any(n not in {int(s) for s in signal.Signals} for n in ignored):
        raise ProtocolError("ignored holds a number that is not a signal")
    cwd = message.get("cwd")
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\0" in cwd:
        raise ProtocolError("cwd is not an absolute path")
    key = message.get("key")
    if not isinstance(key, str) or len(key) != 64:
        raise ProtocolError("key is not a digest")
    ppy_argv = _strings_or_ints(message.get("ppy_argv"), "ppy_argv", str)
    if not ppy_argv:
        raise ProtocolError("ppy_argv is empty")
    return Request(
        op="run",
        key=key,
        ppy_argv=ppy_argv,
        orig_argv=_strings_or_ints(message.get("orig_argv"), "orig_argv", str),
        cwd=cwd,
        env=dict(env),
        umask=umask,
        ignored=ignored,
    )


def _strings_or_ints(value: object, field: str, kind: type) -> tuple[Any, ...]:
    if not isinstance(value, list) or len(value) > _MAX_ITEMS:
        raise ProtocolError(f"{field} is not a list")
    for item in value:
        if type(item) is not kind or (isinstance(item, str) and "\0" in item):
            raise ProtocolError(f"{field} holds {item!r}, not a {kind.__name__}")
    return tuple(value)
