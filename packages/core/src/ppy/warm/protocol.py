"""What crosses a server's socket: length-framed JSON, checked field by field.

No pickles and no code: a request is a JSON object of known fields, each of
a known type and size, and anything else is refused before it is used. A run
request carries the client's open standard streams and its working folder
as file descriptors (SCM_RIGHTS), so the child writes to the very pipe, file
or terminal the client was given, in the very folder, even one that was
deleted.

Frames: 4 bytes of big-endian length, then that many bytes of UTF-8 JSON,
nested at most ``MAX_DEPTH`` deep (checked before it is parsed: a frame of
nested brackets must not exhaust the parser's stack). The server reads
frames as they arrive (``FrameReader``), so a client that sends slowly holds
only its own connection.
"""

from __future__ import annotations

import array
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ppy.request import RunRequest

__all__ = [
    "FORWARDED",
    "MAX_DEPTH",
    "MAX_FRAME",
    "FrameReader",
    "ProtocolError",
    "Request",
    "decode",
    "parse_request",
    "receive",
    "send",
]

#: The largest frame either side accepts: room for a large environment.
MAX_FRAME: Final = 4 << 20
#: The deepest nesting of arrays and objects a frame may have (requests have 2).
MAX_DEPTH: Final = 8


_NOT_FORWARDED: Final = (
    "SIGKILL",
    "SIGSTOP",
    "SIGCHLD",
    "SIGSEGV",
    "SIGBUS",
    "SIGILL",
    "SIGFPE",
    "SIGSYS",
    "SIGTRAP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
)


def _forwarded() -> tuple[int, ...]:
    """Every signal a program can handle that a client passes on to its run.

    Not passed on: SIGKILL and SIGSTOP (no process can catch them), SIGCHLD
    (the client's own child, the server it started, sends it), the faults a
    process raises on itself (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGSYS,
    SIGTRAP: a handler in the client could not go on after a real one), and
    job control's SIGTSTP, SIGTTIN and SIGTTOU, which stop the client, as
    the shell expects (docs/warm-start.md)."""
    kept = {getattr(signal, name) for name in _NOT_FORWARDED if hasattr(signal, name)}
    return tuple(sorted(int(n) for n in signal.valid_signals() if n not in kept))


#: The signals a client passes on to its run.
FORWARDED: Final = _forwarded()
_HEADER: Final = struct.Struct(">I")
_MAX_ITEMS: Final = 65536
_OPS: Final = frozenset({"run", "status", "stop"})
_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKET: Final = re.compile(rb"[^\[\]{}]+")
_INNERMOST: Final = re.compile(rb"\[\]|\{\}")


class ProtocolError(Exception):
    """A frame or request that is not what the protocol allows."""


@dataclass(frozen=True)
class Request:
    """A checked request. ``op`` is ``run`` (with the rest), ``status`` or ``stop``.

    ``run`` is the run as the client's command line asked for it, parsed
    there once; the child runs it as it is.

    ``stdio`` names the standard streams the client has open, in order (a
    closed one stays closed in the run); their descriptors come with the
    request, then the working folder's."""

    op: str
    key: str = ""
    run: RunRequest | None = None
    orig_argv: tuple[str, ...] = ()
    stdio: tuple[int, ...] = (0, 1, 2)
    env: Mapping[str, str] | None = None
    umask: int = 0o022
    ignored: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "key": self.key,
            "run": None if self.run is None else self.run.to_json(),
            "orig_argv": list(self.orig_argv),
            "stdio": list(self.stdio),
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
    if data:  # a send of nothing to a peer that already answered and hung up fails
        sock.sendall(data)


def receive(sock: socket.socket) -> dict[str, Any] | None:
    """One frame as a JSON object, read from a blocking socket; None at end
    of stream before a frame starts."""
    head = _exactly(sock, _HEADER.size, started=False)
    if head is None:
        return None
    (length,) = _HEADER.unpack(head)
    if length > MAX_FRAME:
        raise ProtocolError(f"a frame of {length} bytes is over the limit of {MAX_FRAME}")
    body = _exactly(sock, length, started=True)
    assert body is not None
    return decode(body)


def _exactly(sock: socket.socket, size: int, *, started: bool) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 16))
        if not chunk:
            if data or started:
                raise ProtocolError("the stream ended inside a frame")
            return None
        data += chunk
    return bytes(data)


def decode(body: bytes) -> dict[str, Any]:
    """A frame's body as a JSON object, its depth checked before it is parsed."""
    _check_depth(body)
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ProtocolError(f"a frame is not JSON: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a frame is not a JSON object")
    return message


def _check_depth(body: bytes) -> None:
    """``ProtocolError`` where arrays and objects nest deeper than ``MAX_DEPTH``.

    Strings are set aside, then the innermost empty pairs are taken away,
    one level a pass: what is left after ``MAX_DEPTH`` passes nests deeper
    (or does not pair, which the parser refuses anyway)."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", body))
    for _ in range(MAX_DEPTH):
        if not brackets:
            return
        brackets = _INNERMOST.sub(b"", brackets)
    if brackets:
        raise ProtocolError(f"a frame nests deeper than {MAX_DEPTH} levels")


class FrameReader:
    """The frames of one non-blocking connection, read as its bytes arrive.

    ``fill`` takes what the socket has now (with at most ``max_fds``
    descriptors, which come with a request's first bytes); ``next_frame``
    gives a complete frame once there is one. A connection that sends more
    descriptors than allowed, or a frame over the limit, is refused."""

    def __init__(self, sock: socket.socket, *, max_fds: int = 0) -> None:
        self.sock = sock
        self.max_fds = max_fds
        self.fds: list[int] = []
        self.ended = False
        self._buffer = bytearray()

    def fill(self) -> None:
        """Read what is there; ``ended`` at end of stream."""
        try:
            if self.max_fds:
                data, fds, flags, _ = socket.recv_fds(self.sock, 1 << 16, self.max_fds + 1)
                self.fds.extend(fds)
                if len(self.fds) > self.max_fds or flags & socket.MSG_CTRUNC:
                    raise ProtocolError("a request brought more file descriptors than it may")
            else:
                data = self.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        if not data:
            self.ended = True
        self._buffer += data
        if len(self._buffer) > MAX_FRAME + _HEADER.size:
            raise ProtocolError(f"a frame is over the limit of {MAX_FRAME}")

    def next_frame(self) -> dict[str, Any] | None:
        """The next complete frame, or None until one has arrived."""
        if len(self._buffer) < _HEADER.size:
            if self.ended and self._buffer:
                raise ProtocolError("the stream ended inside a frame")
            return None
        (length,) = _HEADER.unpack_from(self._buffer)
        if length > MAX_FRAME:
            raise ProtocolError(f"a frame of {length} bytes is over the limit of {MAX_FRAME}")
        end = _HEADER.size + length
        if len(self._buffer) < end:
            if self.ended:
                raise ProtocolError("the stream ended inside a frame")
            return None
        body = bytes(self._buffer[_HEADER.size : end])
        del self._buffer[:end]
        return decode(body)

    def take_fds(self) -> list[int]:
        """The descriptors received, now the caller's to close."""
        fds, self.fds = self.fds, []
        return fds

    def close(self) -> None:
        """Close the connection and any descriptor not taken."""
        close_all(self.take_fds())
        self.sock.close()


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def parse_request(message: Mapping[str, Any]) -> Request:
    """The request ``message`` holds, every field checked; ``ProtocolError`` if not."""
    unknown = set(message) - {f.name for f in dataclasses.fields(Request)}
    if unknown:
        raise ProtocolError(f"unknown fields: {', '.join(sorted(map(repr, unknown)))}")
    op = message.get("op")
    if not isinstance(op, str) or op not in _OPS:
        raise ProtocolError(f"op is {op!r}; wanted one of {', '.join(sorted(_OPS))}")
    if op != "run":
        return Request(op)
    env = message.get("env")
    if not isinstance(env, dict) or len(env) > _MAX_ITEMS:
        raise ProtocolError("env is not an object of strings")
    for name, value in env.items():
        if not isinstance(value, str) or not name or "=" in name or not _encodable(name + value):
            raise ProtocolError(f"env holds {name!r:.40}, which is not a variable")
    umask = message.get("umask")
    if type(umask) is not int or not 0 <= umask <= 0o777:
        raise ProtocolError("umask is not a mode")
    ignored = _items(message.get("ignored"), "ignored", int)
    if any(n not in FORWARDED for n in ignored):
        raise ProtocolError("ignored holds a number that is not a signal passed on")
    stdio = _items(message.get("stdio"), "stdio", int)
    if list(stdio) != sorted(set(stdio)) or not set(stdio) <= {0, 1, 2}:
        raise ProtocolError("stdio is not a list of standard descriptors")
    key = message.get("key")
    if not isinstance(key, str) or len(key) != 64:
        raise ProtocolError("key is not a digest")
    try:
        run = RunRequest.from_json(message.get("run"))
    except ValueError as error:
        raise ProtocolError(str(error)) from None
    if not all(map(_encodable, (run.program, *run.argv))):
        raise ProtocolError("run holds an argument the OS cannot take")
    return Request(
        op="run",
        key=key,
        run=run,
        orig_argv=_items(message.get("orig_argv"), "orig_argv", str),
        stdio=stdio,
        env=dict(env),
        umask=umask,
        ignored=ignored,
    )


def _encodable(text: str) -> bool:
    """Whether ``text`` is something the OS takes (an argument, a variable)."""
    if "\0" in text:
        return False
    try:
        os.fsencode(text)
    except UnicodeError:
        return False
    return True


def _items(value: object, field: str, kind: type) -> tuple[Any, ...]:
    if not isinstance(value, list) or len(value) > _MAX_ITEMS:
        raise ProtocolError(f"{field} is not a list")
    for item in value:
        if type(item) is not kind or (isinstance(item, str) and not _encodable(item)):
            raise ProtocolError(f"{field} holds {item!r:.40}, not a {kind.__name__}")
    return tuple(value)
