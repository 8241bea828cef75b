"""The ``ppy run --warm`` side: find or start the key's server, hand it the
run, pass signals on, and end as the run ended.

Whatever keeps a server from serving (not Linux, an untrusted folder, a
server that will not start, is stopping or full, a fork it refuses) sends
the run down the cold path, with one warning saying why: a warm run is
never lost and never served by the wrong server. Once the server has forked
the run, the run is the child's: its exit status becomes this process's,
and a child killed by a signal kills this process with the same signal, so
a shell sees what it would see of ``python``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ppy.warm.protocol import FORWARDED, ProtocolError, Request, receive, send

if TYPE_CHECKING:
    from ppy.config import Config
    from ppy.request import RunRequest
    from ppy.warm.key import Key
    from ppy.warm.place import Place

__all__ = ["START_TIMEOUT", "Cold", "IDLE_ENV", "run_warm", "wants_warm"]

#: How long a first run waits for its server to import jax and listen.
START_TIMEOUT: Final = 120.0
#: Overrides ``[tool.ppy.run] idle-timeout`` (seconds) for the servers started.
IDLE_ENV: Final = "PPY_WARM_IDLE_TIMEOUT"
WARM_ENV: Final = "PPY_WARM"


class Cold(Exception):
    """This run cannot be served warm; the message says why, ``remedy`` what to do."""

    def __init__(
        self,
        reason: str,
        remedy: str = (
            "this run went cold and lost nothing; for the next to run warm, act on the reason "
            "(docs/warm-start.md): set a JAX_ variable in the environment ppy runs in or with "
            "jax.config.update, not in the program; make the warm folder this user's alone "
            "(chmod 700, not a link); `ppy server stop` a server that does not serve; or pass "
            "--no-warm to run cold without this warning"
        ),
    ) -> None:
        super().__init__(reason)
        self.remedy = remedy


def wants_warm(flag: bool | None, config: Config) -> bool:
    """``--warm``/``--no-warm``, else ``PPY_WARM``, else ``[tool.ppy.run] warm``."""
    if flag is not None:
        return flag
    value = os.environ.get(WARM_ENV, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return config.run.warm


def run_warm(config: Config, run: RunRequest) -> int | None:
    """Serve ``run`` from the warm server: its exit code, or None to run
    cold (a warning has said why)."""
    try:
        return _serve(config, run)
    except Cold as why:
        from ppy.log import get_logger

        get_logger().warning("run.cold", reason=str(why), remedy=why.remedy)
        return None


def _serve(config: Config, run: RunRequest) -> int:
    if not sys.platform.startswith("linux"):
        raise Cold(
            f"warm start runs on Linux only, not {sys.platform}",
            "warm start needs Linux; the run is as fast as without --warm",
        )
    from ppy.warm.source import environment_write

    written = environment_write(Path(run.program))
    if written is not None:
        raise Cold(written)
    stdio = tuple(fd for fd in (0, 1, 2) if _is_open(fd))
    _check_folder()
    from ppy.warm.key import make_key
    from ppy.warm.place import Place, Untrusted, prepare_folder, warm_folder

    key = make_key(config.root, config.run.preload, os.environ)
    try:
        folder = prepare_folder(warm_folder())
    except Untrusted as error:
        raise Cold(str(error)) from None
    place = Place(folder, key.name)
    request = Request(
        op="run",
        key=key.digest,
        run=run,
        orig_argv=tuple(sys.orig_argv),
        stdio=stdio,
        env=dict(os.environ),
        umask=_umask(),
        ignored=tuple(n for n in FORWARDED if signal.getsignal(n) is signal.SIG_IGN),
    )
    try:
        # The working folder itself, which may have been deleted or renamed.
        here = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise Cold(f"the working folder cannot be opened: {error.strerror}") from None
    try:
        sock = _connect(place) or _start(place, key, config)
        answer = _hand_over(sock, request, (*stdio, here))
        if "stale" in answer:
            sock.close()
            from ppy.log import get_logger

            get_logger().info("run.warm_stale", server=place.name, reason=str(answer["stale"]))
            sock = _connect(place) or _start(place, key, config)
            answer = _hand_over(sock, request, (*stdio, here))
    finally:
        os.close(here)
    with sock:
        if "started" not in answer:
            why = answer.get("cold") or answer.get("refused") or answer.get("error")
            raise Cold(str(why or answer.get("stale") or "the server closed"))
        from ppy.log import get_logger

        get_logger().info("run.warm", server=place.name, pid=answer["started"])
        return _wait(sock)


def _check_folder() -> None:
    """Cold where the working folder was deleted and the child could not run
    there: CPython 3.13 looks up the working folder whenever an attribute is
    missing from a module, to say whether a file shadows it, and in an
    interpreter started with ``-c`` (the server's entry) that fails there with
    a ``SystemError`` instead of the ``AttributeError``."""
    if sys.version_info < (3, 13):
        return
    try:
        os.getcwd()
    except FileNotFoundError:
        raise Cold(
            "the working folder was deleted, where this Python cannot run a warm "
            "server's child (a missing module attribute raises SystemError there)",
            "the run went cold and was not lost; run it from a folder that exists to run warm",
        ) from None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _hand_over(sock: socket.socket, request: Request, fds: Sequence[int]) -> dict[str, Any]:
    """Send the run and its descriptors; the server's answer."""
    try:
        send(sock, request.to_json(), fds=fds)
        reply = receive(sock)
    except (OSError, ProtocolError) as error:
        sock.close()
        raise Cold(f"the server did not take the run: {error}") from None
    return reply or {}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _connect(place: Place) -> socket.socket | None:
    """A connection to the key's server, or None where none listens (a
    socket a crashed server left behind is removed)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(place.address())
        return sock
    except FileNotFoundError:
        sock.close()
        return None
    except ConnectionRefusedError:
        sock.close()
        place.remove()  # nobody listens: left by a server that died
        return None
    except OSError as error:
        sock.close()
        raise Cold(f"cannot reach the server at {place.socket}: {error.strerror}") from None


def _start(place: Place, key: Key, config: Config) -> socket.socket:
    """Start the key's server and connect; one run starts it while others wait."""
    with place.starting():
        sock = _connect(place)
        if sock is not None:
            return sock
        from ppy.log import get_logger
        from ppy.warm.server import ENTRY

        idle = os.environ.get(IDLE_ENV) or str(config.run.idle_timeout)
        with open(place.log, "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    *_interpreter_flags(),
                    "-c",
                    ENTRY,
                    str(place.folder),
                    place.name,
                    key.digest,
                    str(config.root),
                    idle,
                    *config.run.preload,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=place.folder,
                start_new_session=True,
                close_fds=True,
            )
        get_logger().info("run.warm_start", server=place.name, pid=process.pid)
        from ppy.progress import waiting

        try:
            # On a terminal, a line while the server imports jax; cleared
            # before the run, which prints what python would.
            with waiting("starting the warm server (it imports jax once; later runs skip that)"):
                return _listening(place, process)
        finally:
            _let_go(process)


def _listening(place: Place, process: subprocess.Popen[bytes]) -> socket.socket:
    """A connection to the server once it listens; Cold if it ends or does not listen."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        sock = _connect(place)
        if sock is not None:
            return sock
        if process.poll() is not None:
            said = _last_line(place)
            place.remove_start_files(held=True)
            raise Cold(f"the server did not start: {said}")
        time.sleep(0.02)
    process.kill()
    process.wait()
    place.remove_start_files(held=True)
    raise Cold(f"the server did not listen within {START_TIMEOUT:g} s")


def _let_go(process: subprocess.Popen[bytes]) -> None:
    """Forget the server process: it outlives this run by design, so the
    ResourceWarning ``Popen`` gives for a child still running when it is
    collected (under ``-X dev`` or ``PYTHONWARNINGS``) is not the program's."""
    if process.returncode is None:
        process.returncode = 0  # not ours to wait for: it runs in a session of its own


def _interpreter_flags() -> list[str]:
    """The interpreter options this process runs with (``-X``, ``-W``, ``-O``...),
    so the server's interpreter is set up as this one: they are in the key.
    ``subprocess`` passes on some ``-X`` options only; the rest are added."""
    args: list[str] = list(subprocess._args_from_interpreter_flags())  # type: ignore[attr-defined]
    given = {value.partition("=")[0] for flag, value in itertools.pairwise(args) if flag == "-X"}
    for name, value in sys._xoptions.items():
        if name not in given:
            args += ["-X", name if value is True else f"{name}={value}"]
    return args


#: What a run sent cold by the check of its first import of jax can do.
_COLD_REMEDY: Final = (
    "the run went cold and was not lost; set such variables in the environment ppy "
    "runs in (they are in the warm key) rather than in the program"
)


def _last_line(place: Place) -> str:
    try:
        lines = place.log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return lines[-1] if lines else "it exited without a word"


def _wait(sock: socket.socket) -> int:
    """Pass signals on until the run ends; its exit code, or its signal.
    Cold where the child found, before the program did anything, that it
    could not serve the run (``ppy.warm.watch``)."""
    previous: dict[int, Any] = {}

    def forward(number: int, _frame: object) -> None:
        with contextlib.suppress(OSError, ProtocolError):
            send(sock, {"signal": number})

    for forwarded in FORWARDED:
        # Not one ignored (the run ignores it too), nor one whose handler is
        # not Python's (``-X faulthandler``'s on SIGABRT: it stays).
        if signal.getsignal(forwarded) not in (signal.SIG_IGN, None):
            with contextlib.suppress(OSError, ValueError):
                previous[forwarded] = signal.signal(forwarded, forward)
    try:
        try:
            reply = receive(sock)
        except (OSError, ProtocolError):
            reply = None
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
    if reply is not None and isinstance(reply.get("cold"), str):
        raise Cold(reply["cold"], _COLD_REMEDY)
    if reply is None or type(reply.get("exit")) is not int:
        if sys.stderr is not None:
            print("ppy: error: the warm server ended during the run", file=sys.stderr)
        return 1
    status: int = reply["exit"]
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        return 128 + number  # where the signal does not end the process
    return os.waitstatus_to_exitcode(status)
