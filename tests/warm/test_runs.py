"""A warm run is the run python would make: stdout, exit status and stderr
compared with ``python model.ppy`` for what a process inherits and does.

Each test starts the project's server with its first warm run and stops it
at the end (``support.servers``).
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import PERMISSIONS
from tests.warm.support import Warm, servers

PROGRAMS = {
    "stdin piped": (
        """
        import sys
        data = sys.stdin.read()
        print(len(data), data.upper(), end="")
        print(sys.stdin.isatty(), sys.stdout.isatty(), sys.stdout.line_buffering)
        """,
        "alpha\nbeta\n",
    ),
    "sys.exit(3)": ("import sys\nprint('bye')\nsys.exit(3)\n", None),
    "sys.exit with a message": ("import sys\nsys.exit('no good')\n", None),
    "os._exit(4) loses buffered output": (
        "import os, sys\nprint('kept?')\nsys.stderr.write('err\\n')\nos._exit(4)\n",
        None,
    ),
    "an uncaught exception": ("def f():\n    raise ValueError('boom')\nf()\n", None),
    "atexit handlers": (
        """
        import atexit
        atexit.register(print, "second")
        atexit.register(print, "first")
        print("main")
        """,
        None,
    ),
    "threads": (
        """
        import threading, time
        out = []
        def work(i):
            time.sleep(0.01 * (3 - i))
            out.append(i)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print(sorted(out), threading.active_count())
        late = threading.Thread(target=lambda: (time.sleep(0.2), print("late thread")))
        late.start()
        print("main done")
        """,
        None,
    ),
    "a program that forks": (
        """
        import os, sys
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            print("child", os.getppid() != 0)
            sys.stdout.flush()
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        print("parent saw", os.waitstatus_to_exitcode(status))
        """,
        None,
    ),
    "multiprocessing with fork and spawn": (
        """
        import multiprocessing as mp

        def square(x):
            return x * x

        if __name__ == "__main__":
            for method in ("fork", "spawn"):
                with mp.get_context(method).Pool(2) as pool:
                    print(method, pool.map(square, range(5)))
        """,
        None,
    ),
    "the environment, folder, argv and path": (
        """
        import os, sys
        print(sys.argv, os.environ.get("PPY_TEST_VALUE"), os.getcwd() == os.environ["PWD"])
        print(sys.path[0] == os.path.dirname(os.path.realpath(__file__)), __name__)
        print(oct(os.umask(0)), sys.flags.optimize, sys.stdout.encoding, sys.stderr.errors)
        """,
        None,
    ),
    "jax under jit": (
        """
        from typing import Annotated
        import jax, jax.numpy as jnp
        import ppy

        @jax.jit
        def f(x: Annotated[jax.Array, ppy.Shape("N", "N"), ppy.DType("float32")]):
            return jnp.tanh(x) @ x

        print(f(jnp.ones((3, 3))))
        print(jax.devices())
        """,
        None,
    ),
}


def _project(tmp_path: Path, source: str) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(source).lstrip())
    (root / "pyproject.toml").write_text(PERMISSIONS)
    return root


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_warm_run_prints_and_ends_as_python(tmp_path: Path, name: str) -> None:
    source, stdin = PROGRAMS[name]
    root = _project(tmp_path, source)
    env = {"PPY_TEST_VALUE": "given"}
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python("x", "y z", input=stdin, env=env)
        first = warm.warm("x", "y z", input=stdin, env=env)  # starts the server
        second = warm.warm("x", "y z", input=stdin, env=env)  # a fresh child of it
        assert len(warm.servers()) == 1, (first.stderr, second.stderr)
    for served in (first, second):
        assert served.stdout == plain.stdout, served.stderr
        assert served.returncode == plain.returncode, served.stderr
        assert served.stderr == plain.stderr


def test_two_warm_runs_draw_fresh_randomness(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        """
        import random, numpy as np, tempfile, os
        print(random.random(), np.random.rand(), os.urandom(8).hex())
        """,
    )
    with servers(root, tmp_path / "cache") as warm:
        runs = [warm.warm() for _ in range(3)]
    outputs = [r.stdout for r in runs]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert len(set(outputs)) == 3, outputs
    # Every part differs, not only the OS's bytes.
    assert len({o.split()[0] for o in outputs}) == 3
    assert len({o.split()[1] for o in outputs}) == 3


def _shell(warm: Warm, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=warm.root,
        env=warm.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_reader_that_closes_early(tmp_path: Path) -> None:
    root = _project(tmp_path, "for i in range(100000):\n    print(i)\n")
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()  # the server is up
        ppy = " ".join(warm.command("run", "--warm", "model.ppy"))
        tail = '; echo "status ${PIPESTATUS[0]}"'
        plain = _shell(warm, f"{_py()} model.ppy | head -1{tail}")
        served = _shell(warm, f"{ppy} | head -1{tail}")
    assert served.stdout == plain.stdout
    assert served.stderr == plain.stderr


def _py() -> str:
    return sys.executable


def _in_a_terminal(warm: Warm, command: list[str]) -> str:
    """What ``command`` writes to a terminal it has as stdin, stdout and stderr."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        command, cwd=warm.root, env=warm.env(), stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        out += chunk
    process.wait(60)
    os.close(master)
    return out.decode()


def test_a_terminal_is_a_terminal(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        """
        import os, sys
        print(sys.stdin.isatty(), sys.stdout.isatty(), sys.stderr.isatty())
        print(sys.stdout.line_buffering, os.get_terminal_size().columns >= 0)
        print("no newline yet", end="", flush=False)
        sys.stderr.write("to the terminal\\n")
        """,
    )
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()
        plain = _in_a_terminal(warm, [_py(), "model.ppy"])
        served = _in_a_terminal(warm, warm.command("-q", "run", "--warm", "model.ppy"))
    assert "True True True" in plain
    assert served == plain


SLEEPER = """
import signal, sys, time
print("ready", flush=True)
time.sleep(60)
print("not reached")
"""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_to_the_client_reaches_the_run(tmp_path: Path, number: int) -> None:
    root = _project(tmp_path, SLEEPER)
    with servers(root, tmp_path / "cache") as warm:
        results = []
        for command in ([_py(), "model.ppy"], warm.command("-q", "run", "--warm", "model.ppy")):
            process = subprocess.Popen(
                command,
                cwd=root,
                env=warm.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert process.stdout is not None
            assert process.stdout.readline() == "ready\n"
            time.sleep(0.5)  # into the sleep, where python is too
            process.send_signal(number)
            out, err = process.communicate(timeout=60)
            results.append((process.returncode, out, err))
    assert results[0][0] == -number
    assert results[1] == results[0]


def test_a_run_whose_client_dies_is_killed(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        """
        import os, time
        print(os.getpid(), flush=True)
        time.sleep(60)
        """,
    )
    with servers(root, tmp_path / "cache") as warm:
        process = subprocess.Popen(
            warm.command("-q", "run", "--warm", "model.ppy"),
            cwd=root,
            env=warm.env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        child = int(process.stdout.readline())
        process.kill()
        process.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.05)
        assert not _alive(child), "the run outlived its client"
        assert warm.servers()[0]["running"] == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False
