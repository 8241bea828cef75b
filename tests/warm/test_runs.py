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


def test_an_error_a_module_raises_as_it_is_imported_shows_python_s_frames(
    tmp_path: Path,
) -> None:
    """The module is imported before numpy and jax, while the warm child
    still watches the program's imports (``ppy.warm.watch``): the traceback,
    printed by the program or left uncaught, through ``import`` and
    ``importlib.import_module``, shows python's frames and none of ppy's."""
    root = _project(
        tmp_path,
        """
        import importlib, traceback
        try:
            import plain
        except ValueError:
            print(traceback.format_exc())
        try:
            importlib.import_module("plain")
        except ValueError:
            print(traceback.format_exc())
        import plain
        """,
    )
    (root / "plain.py").write_text("X = 1\nraise ValueError('plain failed as it was imported')\n")
    with servers(root, tmp_path / "cache") as warm:
        plain = warm.python()
        served = warm.warm()
    assert 'plain.py", line 2' in plain.stderr and plain.returncode == 1
    assert (served.stdout, served.returncode) == (plain.stdout, plain.returncode), served.stderr
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


def test_a_server_starting_shows_a_line_on_a_terminal_then_clears_it(tmp_path: Path) -> None:
    """The first warm run waits while its server imports jax: a terminal sees a
    line saying so, erased before the program runs; the rest is python's."""
    root = _project(tmp_path, 'import sys\nprint("out")\nprint("err", file=sys.stderr)\n')
    with servers(root, tmp_path / "cache") as warm:
        plain = _in_a_terminal(warm, [_py(), "model.ppy"])
        starting = _in_a_terminal(warm, warm.command("run", "--warm", "model.ppy"))
        served = _in_a_terminal(warm, warm.command("run", "--warm", "model.ppy"))
        quiet = _in_a_terminal(warm, warm.command("-q", "run", "--warm", "model.ppy"))
    assert plain == "out\r\nerr\r\n"
    line, _, rest = starting.partition("\r\n\x1b[?25h")  # the line ends; the cursor is back
    assert "starting the warm server" in line and "0:00:0" in line, repr(starting)
    assert rest.startswith("\r\x1b[1A\x1b[2K"), repr(rest)  # the line erased
    assert rest.removeprefix("\r\x1b[1A\x1b[2K") == plain
    assert served == quiet == plain  # the server is up: nothing to wait for


SLEEPER = """
import signal, sys, time
print("ready", flush=True)
time.sleep(60)
print("not reached")
"""


@pytest.mark.parametrize(
    "number",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT],
    ids=lambda number: signal.Signals(number).name,
)
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


#: A program that reports which standard streams it has, on one it still has,
#: and ends without the final flush (``os._exit``) so only what it wrote counts.
STREAMS = """
import os, sys
report = f"in={sys.stdin is None} out={sys.stdout is None} err={sys.stderr is None}\\n"
for fd in (1, 2, 0):
    try:
        os.write(fd, report.encode())
        break
    except OSError:
        continue
os._exit(3)
"""


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_a_closed_standard_stream_stays_closed(tmp_path: Path, closed: int) -> None:
    root = _project(tmp_path, STREAMS)
    with servers(root, tmp_path / "cache") as warm:
        warm.warm()  # the server is up
        redirect = {0: "<&-", 1: ">&-", 2: "2>&-"}[closed]
        ppy = " ".join(warm.command("run", "--warm", "model.ppy"))
        plain = _shell(warm, f"{_py()} model.ppy {redirect}")
        for _ in range(2):
            served = _shell(warm, f"{ppy} {redirect}")
            assert (served.returncode, served.stdout) == (plain.returncode, plain.stdout)
            assert served.stderr == plain.stderr
        assert warm.servers()[0]["served"] == 3


def test_a_program_runs_with_its_stderr_closed(tmp_path: Path) -> None:
    """The client has no stderr to say anything on, and the run still runs."""
    root = _project(tmp_path, "import sys\nprint('ran', sys.stderr is None)\n")
    with servers(root, tmp_path / "cache") as warm:
        ppy = " ".join(warm.command("run", "--warm", "model.ppy"))
        plain = _shell(warm, f"{_py()} model.ppy 2>&-")
        for _ in range(2):  # starting the server, then served by it
            served = _shell(warm, f"{ppy} 2>&-")
            assert (served.returncode, served.stdout) == (plain.returncode, plain.stdout)
    assert plain.stdout == "ran True\n"


def test_a_deleted_working_folder(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        """
        import os, sys
        try:
            os.getcwd()
        except FileNotFoundError:
            print("no working folder", os.path.exists("."))
        print(sys.argv[0] == __file__)
        """,
    )
    gone = tmp_path / "gone"
    with servers(root, tmp_path / "cache") as warm:
        ppy = " ".join(warm.command("run", "--warm", str(root / "model.ppy")))
        script = f"mkdir {gone} && cd {gone} && rmdir {gone} && "
        plain = _shell(warm, script + f"{_py()} {root / 'model.ppy'}")
        assert plain.stdout.startswith("no working folder"), plain.stderr
        # CPython 3.13 cannot run a warm child there: cold, as docs/warm-start.md says.
        cold = sys.version_info >= (3, 13)
        for _ in range(2):
            served = _shell(warm, script + ppy)
            assert (served.returncode, served.stdout) == (plain.returncode, plain.stdout)
            if cold:
                (line,) = served.stderr.splitlines()
                assert "run.cold" in line and "working folder was deleted" in line
            else:
                assert served.stderr == plain.stderr
        assert [s["served"] for s in warm.servers()] == ([] if cold else [2])


HANDLES = """
import signal, sys, time
def handler(number, frame):
    print("handled", number, flush=True)
    sys.exit(0)
signal.signal(NUMBER, handler)
print("ready", flush=True)
time.sleep(20)
print("not reached")
"""


@pytest.mark.parametrize(
    "number",
    [
        *(
            pytest.param(int(getattr(signal, f"SIG{name}")), id=f"SIG{name}")
            for name in ["USR1", "USR2", "WINCH", "CONT", "ALRM", "URG", "PROF"]
        ),
        pytest.param(int(signal.SIGRTMIN) + 2, id="SIGRTMIN+2"),
    ],
)
def test_a_signal_the_program_handles_reaches_its_handler(tmp_path: Path, number: int) -> None:
    root = _project(tmp_path, HANDLES.replace("NUMBER", str(number)))
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
            time.sleep(0.5)
            process.send_signal(number)
            out, err = process.communicate(timeout=60)
            results.append((process.returncode, out, err))
    assert results[0] == (0, f"handled {number}\n", "")
    assert results[1] == results[0]


@pytest.mark.parametrize(
    ("options", "env"),
    [([], {"PYTHONWARNINGS": "default"}), (["-X", "dev"], {})],
    ids=["PYTHONWARNINGS=default", "-X dev"],
)
def test_the_first_warm_run_warns_as_python_does(
    tmp_path: Path, options: list[str], env: dict[str, str]
) -> None:
    root = _project(tmp_path, "print('ran')\n")
    with servers(root, tmp_path / "cache") as warm:
        runs = []
        for command in (
            [_py(), *options, "model.ppy"],
            [_py(), *options, "-m", "ppy", "-q", "run", "--warm", "model.ppy"],  # starts it
            [_py(), *options, "-m", "ppy", "-q", "run", "--warm", "model.ppy"],
        ):
            done = subprocess.run(
                command,
                cwd=root,
                env=warm.env(env),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            runs.append((done.returncode, done.stdout, done.stderr))
        # Both warm runs were served, by one server per key: not "one server",
        # since ppy's own source files are in the key (an editable install
        # changes code without a version), so a source saved between the two
        # runs, as in a checkout being edited while its tests run, rightly
        # gives the second run a server of its own.
        found = warm.servers(env=env)
        assert sum(server["served"] for server in found) == 2, found
        assert len({server["digest"] for server in found}) == len(found), found
    assert runs[1] == runs[0]
    assert runs[2] == runs[0]


def test_the_signal_tests_pass_when_started_with_sigint_ignored(tmp_path: Path) -> None:
    """As a background job of a script (``cmd &``) starts them: SIGINT and
    SIGQUIT ignored, which every process started without resetting them inherits."""

    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            _py(),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "tests/warm/test_runs.py",
            "-k",
            "a_signal_to_the_client and (SIGINT or SIGQUIT)",
            "--basetemp",
            str(tmp_path / "inner"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        preexec_fn=ignore,  # the test's own child, started before any thread
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
