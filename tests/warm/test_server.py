"""The server's life: the switch that asks for it, the key that picks it,
status and stop, stale sockets, idle exit, load, and the runs it refuses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.support.events import json_events
from tests.warm.support import Warm, servers

PROGRAM = "import sys\nprint('ran', sys.argv[1:])\n"


def _project(tmp_path: Path, pyproject: str = "", program: str = PROGRAM) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(program)
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n' + textwrap.dedent(pyproject))
    return root


def _was_warm(done: subprocess.CompletedProcess[str]) -> bool:
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran []\n"
    return bool(json_events(done.stderr, "run.warm"))


@pytest.mark.parametrize(
    ("setting", "variable", "flag", "warm"),
    [
        (None, None, None, False),
        ("true", None, None, True),
        ("true", "0", None, False),
        ("false", "1", None, True),
        (None, "0", "--warm", True),
        ("true", "1", "--no-warm", False),
    ],
)
def test_the_flag_overrides_the_variable_which_overrides_the_setting(
    tmp_path: Path, setting: str | None, variable: str | None, flag: str | None, warm: bool
) -> None:
    pyproject = f"[tool.ppy.run]\nwarm = {setting}\n" if setting else ""
    root = _project(tmp_path, pyproject)
    env = {"PPY_WARM": variable} if variable is not None else {}
    with servers(root, tmp_path / "cache") as project:
        args = ["-v", "--log-format", "json", "run", *([flag] if flag else []), "model.ppy"]
        done = project.run(*args, env={**env})
        assert _was_warm(done) is warm


def test_the_run_table_is_checked_and_does_not_make_the_artifact_stale(tmp_path: Path) -> None:
    root = _project(tmp_path, '[tool.ppy.run]\npreload = ["json", 3]\n')
    project = Warm(root, tmp_path / "cache")
    done = project.run("run", "--warm", "model.ppy")
    assert done.returncode == 2
    assert "tool.ppy.run.preload" in done.stderr and "Traceback" not in done.stderr
    from ppy.config import load_config

    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n')
    before = load_config(root).digest
    (root / "pyproject.toml").write_text(
        '[project]\nname = "demo"\n[tool.ppy.run]\nwarm = true\nidle-timeout = 30\n'
    )
    assert load_config(root).digest == before
    assert load_config(root).run.idle_timeout == 30.0


def test_status_shows_each_server_and_stop_ends_it(tmp_path: Path) -> None:
    root = _project(tmp_path, '[tool.ppy.run]\npreload = ["json"]\n')
    with servers(root, tmp_path / "cache") as project:
        for _ in range(3):
            assert _was_warm(
                project.run("-v", "--log-format", "json", "run", "--warm", "model.ppy")
            )
        (server,) = project.servers()
        assert server["served"] == 3 and server["running"] == 0
        assert server["key"]["root"] == str(root.resolve())
        assert server["key"]["preload"] == ["json"]
        assert server["rss"] > 10 << 20 and server["fds"] > 0
        text = project.run("server", "status")
        assert str(server["pid"]) in text.stdout and "3 runs" in text.stdout
        stopped = project.run("server", "stop")
        assert stopped.stdout.startswith("stopped 1 warm server")
        assert project.servers() == []
        assert _gone(server["pid"])


def _gone(pid: int, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().split(") ")[1][0] == "Z":
                return True
        time.sleep(0.05)
    return False


def test_a_server_that_crashed_is_replaced(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as project:
        project.warm()
        (server,) = project.servers()
        os.kill(server["pid"], signal.SIGKILL)
        assert _gone(server["pid"])
        # The socket it left refuses connections: removed, and another server starts.
        assert list((tmp_path / "cache" / "warm").glob("*.sock"))
        done = project.run("-v", "--log-format", "json", "run", "--warm", "model.ppy")
        assert _was_warm(done)
        (again,) = project.servers()
        assert again["pid"] != server["pid"]


def test_an_idle_server_exits(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with servers(root, tmp_path / "cache") as project:
        project.warm(env={"PPY_WARM_IDLE_TIMEOUT": "1"})
        pid = json.loads(next((tmp_path / "cache" / "warm").glob("*.json")).read_text())["pid"]
        assert _gone(pid)
        # Its socket, note, start lock and log go with it.
        assert not list((tmp_path / "cache" / "warm").iterdir())


def test_a_stopped_server_leaves_nothing_in_the_folder(tmp_path: Path) -> None:
    root = _project(tmp_path)
    folder = tmp_path / "cache" / "warm"
    with servers(root, tmp_path / "cache") as project:
        project.warm()
        project.warm(env={"JAX_PLATFORMS": "cpu"})  # another key, another server
        pids = [server["pid"] for server in project.servers()]
        assert len(pids) == 2
        assert {p.suffix for p in folder.iterdir()} == {".sock", ".json", ".lock", ".log"}
        assert project.run("server", "stop").returncode == 0
        assert all(_gone(pid) for pid in pids)
        assert not list(folder.iterdir())
        # The next run starts a server as the first did.
        assert _was_warm(project.run("-v", "--log-format", "json", "run", "--warm", "model.ppy"))


@pytest.mark.parametrize(
    "change",
    [{"JAX_ENABLE_X64": "1"}, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}],
)
def test_an_import_time_variable_gets_another_server(
    tmp_path: Path, change: dict[str, str]
) -> None:
    root = _project(
        tmp_path,
        program="import jax, jax.numpy as jnp\nprint(jnp.ones(1).dtype, jax.device_count())\n",
    )
    with servers(root, tmp_path / "cache") as project:
        one = project.warm()
        other = project.warm(env=change)
        assert len(project.servers()) == 2
        assert one.stdout != other.stdout
        assert other.stdout == project.python(env=change).stdout


def test_another_installed_version_gets_another_server(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "somepackage-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: somepackage\nVersion: 1.0\n")
    program = "from importlib.metadata import version\nprint(version('somepackage'))\n"
    root = _project(tmp_path, program=program)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path}
    with servers(root, tmp_path / "cache") as project:
        assert project.warm(env=env).stdout == "1.0\n"
        # As pip leaves an upgrade: the folder renamed, the version rewritten.
        upgraded = info.rename(site / "somepackage-1.1.dist-info")
        (upgraded / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: somepackage\nVersion: 1.1\n"
        )
        assert project.warm(env=env).stdout == "1.1\n"
        assert len(project.servers()) == 2


def test_two_runs_at_once_are_both_served(tmp_path: Path) -> None:
    root = _project(tmp_path, program="import sys, time\ntime.sleep(1)\nprint(sys.argv[1])\n")
    with servers(root, tmp_path / "cache") as project:
        results: dict[str, subprocess.CompletedProcess[str]] = {}

        def one(tag: str) -> None:
            results[tag] = project.run(
                "-v", "--log-format", "json", "run", "--warm", "model.ppy", tag
            )

        threads = [threading.Thread(target=one, args=(tag,)) for tag in ("a", "b")]
        [t.start() for t in threads]
        [t.join() for t in threads]
        for tag, done in results.items():
            assert done.stdout == f"{tag}\n" and json_events(done.stderr, "run.warm"), done.stderr
        (server,) = project.servers()  # one server started for both
        assert server["served"] == 2


def test_fifty_runs_leave_the_servers_fds_and_memory_flat(tmp_path: Path) -> None:
    root = _project(tmp_path, program="import jax.numpy as jnp\nprint(jnp.arange(4).sum())\n")
    with servers(root, tmp_path / "cache") as project:
        for _ in range(5):
            project.warm()
        before = project.servers()[0]
        for _ in range(50):
            assert project.warm().stdout == "6\n"
        after = project.servers()[0]
    assert after["served"] == before["served"] + 50
    assert after["fds"] == before["fds"]
    assert after["rss"] - before["rss"] < 8 << 20, (before["rss"], after["rss"])


def test_a_preload_that_fails_sends_the_run_cold(tmp_path: Path) -> None:
    root = _project(tmp_path, '[tool.ppy.run]\npreload = ["no_such_module_here"]\n')
    with servers(root, tmp_path / "cache") as project:
        done = project.warm()
    assert done.returncode == 0 and done.stdout == "ran []\n"
    (line,) = done.stderr.splitlines()
    assert "run.cold" in line and "no_such_module_here" in line


def test_elsewhere_than_linux_the_run_goes_cold(tmp_path: Path) -> None:
    root = _project(tmp_path)
    project = Warm(root, tmp_path / "cache")
    as_if_elsewhere = (
        "import sys; sys.platform = 'darwin'\n"
        "from ppy.cli.main import main\n"
        "sys.exit(main(['run', '--warm', 'model.ppy']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", as_if_elsewhere],
        cwd=root,
        env=project.env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "ran []\n"
    (line,) = done.stderr.splitlines()
    assert "run.cold" in line and "Linux only" in line
    assert not (tmp_path / "cache" / "warm").exists()


@pytest.mark.parametrize(
    "line",
    [
        'os.environ["JAX_ENABLE_X64"] = "1"',
        'os.environ.setdefault("JAX_ENABLE_X64", "1")',
        'os.environ.update({"JAX_ENABLE_X64": "1"})',
        'os.environ[name] = "1"',
    ],
)
def test_a_program_that_sets_jax_variables_before_import_runs_cold(
    tmp_path: Path, line: str
) -> None:
    program = f'import os\nname = "JAX_ENABLE_X64"\n{line}\nimport jax.numpy as jnp\n'
    program += "print(jnp.ones(1).dtype)\n"
    root = _project(tmp_path, program=program)
    with servers(root, tmp_path / "cache") as project:
        done = project.warm()
        assert done.stdout == project.python().stdout == "float64\n"
    (warning,) = done.stderr.splitlines()
    # Seen in the source (line 3), or when the program imports jax (line 4).
    assert "run.cold" in warning and ("model.ppy:3" in warning or "model.ppy:4" in warning)
    assert "JAX_ENABLE_X64" in warning


def test_a_program_that_sets_xla_flags_is_served_warm(tmp_path: Path) -> None:
    program = (
        'import os\nos.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"\n'
        "import jax\nprint(jax.device_count())\n"
    )
    root = _project(tmp_path, program=program)
    with servers(root, tmp_path / "cache") as project:
        done = project.run("-v", "--log-format", "json", "run", "--warm", "model.ppy")
        assert done.stdout == project.python().stdout == "3\n"
        assert json_events(done.stderr, "run.warm")


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        pytest.param(
            "import threading, time\n"
            "threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()\n",
            "thread",
            id="a thread",
        ),
        pytest.param("import jax\njax.devices()\n", "backend", id="the backend"),
    ],
)
def test_a_preload_that_starts_what_a_fork_breaks_sends_runs_cold(
    tmp_path: Path, source: str, reason: str
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "starter.py").write_text(source)
    root = _project(tmp_path, '[tool.ppy.run]\npreload = ["starter"]\n')
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(lib), os.environ.get("PYTHONPATH")) if p)}
    with servers(root, tmp_path / "cache") as project:
        done = project.run("run", "--warm", "model.ppy", env=env)
    assert done.returncode == 0 and done.stdout == "ran []\n"
    (line,) = done.stderr.splitlines()
    assert "run.cold" in line and reason in line
