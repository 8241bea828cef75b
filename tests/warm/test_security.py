"""Who may use a server: this user only, through a private folder, with a
request that is a bounded JSON object and nothing else."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.warm.support import servers

PROGRAM = "print('ran')\n"


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(PROGRAM)
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    return root


def _socket(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "cache" / "warm").glob("*.sock")
    return found


def _cold(done: subprocess.CompletedProcess[str], reason: str) -> None:
    assert done.returncode == 0 and done.stdout == "ran\n"
    (line,) = done.stderr.splitlines()
    assert "run.cold" in line and reason in line, line


def test_the_folder_is_private(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        assert warm.warm().stdout == "ran\n"
        folder = tmp_path / "cache" / "warm"
        assert folder.stat().st_mode & 0o777 == 0o700
        assert _socket(tmp_path).stat().st_mode & 0o777 == 0o600


def test_a_folder_open_to_others_is_not_used(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = tmp_path / "cache" / "warm"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    with servers(root, tmp_path / "cache") as warm:
        _cold(warm.warm(), "open to other users")
        assert not list(folder.iterdir())


def test_a_link_in_the_socket_path_is_not_followed(tmp_path: Path) -> None:
    root = _project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "warm").symlink_to(elsewhere)
    with servers(root, tmp_path / "cache") as warm:
        _cold(warm.warm(), "symbolic link")
        assert not list(elsewhere.iterdir())


def _address(path: Path) -> str:
    """Where to connect: the path may be longer than a socket address holds."""
    from ppy.warm.place import Place

    return Place(path.parent, path.stem).address()


def _send_raw(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(_address(path))
        reply = b""
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                reply += chunk
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server hung up on it
    return reply


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(struct.pack(">I", 1 << 30) + b"{", id="oversized"),
        pytest.param(struct.pack(">I", 9) + b"not json!", id="garbled"),
        pytest.param(struct.pack(">I", 2) + b"[]", id="not an object"),
        pytest.param(
            struct.pack(">I", 43) + b'{"op":"run","key":"x","__reduce__":"os.sy"}', id="unknown"
        ),
        pytest.param(b"\x00\x00", id="cut short"),
        pytest.param(
            struct.pack(">I", 200_000) + b"[" * 100_000 + b"]" * 100_000, id="nested 100000 deep"
        ),
        pytest.param(struct.pack(">I", 10) + b'{"op":[1]}', id="an op that is a list"),
    ],
)
def test_a_bad_request_is_refused_and_the_server_serves_on(tmp_path: Path, data: bytes) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        reply = _send_raw(_socket(tmp_path), data)
        assert b"started" not in reply
        assert warm.warm().stdout == "ran\n"
        (server,) = warm.servers()
        assert server["served"] == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_another_user_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        path = _socket(tmp_path)
        # Let the other user reach the socket, so the server's own check is what refuses.
        for opened in (tmp_path, tmp_path / "cache", path.parent):
            opened.chmod(0o755)
        path.chmod(0o777)
        probe = (
            "import os, socket, sys\n"
            "os.chdir(os.path.dirname(sys.argv[1]))\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "s.connect(os.path.basename(sys.argv[1]))\n"
            "print(s.recv(4096)[4:].decode())\n"
            "try:\n"
            '    s.sendall(bytes([0, 0, 0, 13]) + b\'{"op":"stop"}\')\n'
            "    print(s.recv(4096)[4:].decode())\n"
            "except OSError as error:\n"
            "    print('hung up:', error)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert "refused" in done.stdout and "stopping" not in done.stdout
        assert len(warm.servers()) == 1  # still there, still serving
        path.parent.chmod(0o700)
        assert warm.warm().stdout == "ran\n"


def test_a_request_with_another_key_is_sent_cold(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        request = (
            b'{"op":"run","key":"' + b"0" * 64 + b'","run":{"program":"model.ppy",'
            b'"argv":[],"build":true,"warm":true,"verbosity":0,"log_format":"console"},'
            b'"orig_argv":[],"stdio":[0,1,2],"env":{},"umask":18,"ignored":[]}'
        )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(30)
            sock.connect(_address(_socket(tmp_path)))
            sock.sendmsg(
                [struct.pack(">I", len(request)) + request],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2))],
            )
            reply = sock.recv(4096)
        assert b"another key" in reply and b'"started"' not in reply


def test_a_run_is_never_lost_to_a_dead_server_folder(tmp_path: Path) -> None:
    """Socket files that answer nothing (a crash left them) are cleaned, not trusted."""
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        path = _socket(tmp_path)
        warm.stop()
        # A plain file where the socket was: not a server; the run still runs.
        path.unlink(missing_ok=True)
        path.write_text("")
        done = warm.run("run", "--warm", "model.ppy")
        assert done.stdout == "ran\n" and done.returncode == 0


def test_a_slow_client_does_not_hold_the_server(tmp_path: Path) -> None:
    """One byte every 3 seconds from one client: another run is served while
    that request is still arriving, and the slow client is hung up on once
    its whole request has not come within the deadline, unanswered."""
    import threading

    from ppy.warm.server import REQUEST_TIMEOUT

    body = b'{"op":"status"}'
    request = struct.pack(">I", len(body)) + body
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(_address(_socket(tmp_path)))
        stop = threading.Event()

        def dribble() -> None:
            for byte in request:
                try:
                    slow.send(bytes([byte]))
                except OSError:
                    return
                if stop.wait(3.0):
                    return

        sender = threading.Thread(target=dribble)
        sender.start()
        try:
            done = warm.run("-v", "--log-format", "json", "run", "--warm", "model.ppy")
            assert done.stdout == "ran\n" and '"run.warm"' in done.stderr, done.stderr
            assert sender.is_alive()  # still sending: the run did not wait for it
            slow.settimeout(REQUEST_TIMEOUT + 20)
            reply = b""
            try:
                while chunk := slow.recv(4096):
                    reply += chunk
            except ConnectionResetError:
                pass
            assert b"pid" not in reply  # hung up on, never answered
            assert sender.is_alive()  # before its request was whole
        finally:
            stop.set()
            sender.join()
            slow.close()
        assert warm.servers()[0]["served"] == 2


def test_a_run_request_carries_the_run_parsed_once_and_nothing_to_parse() -> None:
    """The child runs the request the client's command line was parsed into:
    a run comes as typed fields, each checked, never as ppy arguments to
    parse a second time."""
    from ppy.request import RunRequest
    from ppy.warm.protocol import ProtocolError, Request, parse_request

    run = RunRequest("model.ppy", ("a b", "--", "-v"), build=False, warm=True, verbosity=1)
    message = Request("run", key="0" * 64, run=run, env={}).to_json()
    assert parse_request(message).run == run
    as_argv = {**message, "ppy_argv": ["run", "model.ppy"]}
    del as_argv["run"]
    with pytest.raises(ProtocolError, match="unknown fields: 'ppy_argv'"):
        parse_request(as_argv)
    for field, value, said in (
        ("build", "yes", "run.build is not a boolean"),
        ("verbosity", 7, "run.verbosity"),
        ("log_format", "xml", "run.log_format"),
        ("argv", ["a", 1], "run.argv"),
    ):
        broken = {**message, "run": {**message["run"], field: value}}
        with pytest.raises(ProtocolError, match=said):
            parse_request(broken)
