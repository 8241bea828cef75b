"""The export worker as a process: it never outlives the build, its protocol is
out of the user's code's reach, and it gets no credentials.

Real ``ppy build`` runs with real workers. A module that loops at import
writes the worker's pid, and the pid of a child it started, to a file; the
build is then killed the way a user or a supervisor kills it, and both must
be gone within seconds, not left at full CPU under init.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import pytest
from ppy.artifact.read import read_artifact
from ppy.decision import Outcome
from ppy_plugin_jax.watchdog import GRACE
from ppy_plugin_jax.worker import PROTOCOL_VERSION

from tests.hardening.support import ROOT, copy_example, ppy, start_ppy

#: The distributions' folders under packages/.
PACKAGES = ("core", "plugin-jax", "plugin-xla", "runtime-pjrt")

pytestmark = pytest.mark.slow

PYPROJECT = """\
[project]
name = "worker"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
export-timeout = {timeout}
"""

FUNCTION = """
import jax
import ppy
from typing import Annotated

Vec = Annotated[jax.Array, ppy.Shape(3), ppy.DType("float32")]


@jax.jit
def f(x: Vec) -> jax.Array:
    return x + 1
"""

#: Writes the worker's pid and a child's, then spins for ever.
HANGS = """
import os
import subprocess
import sys

child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
with open(os.environ["JAX_PPY_TEST_PIDS"], "w") as pids:
    pids.write(f"{os.getpid()} {child.pid}")
while True:
    pass
"""


#: How the build is killed while its worker spins.
KILLS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM}


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process still running (a zombie is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_for(path: Path, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return [int(pid) for pid in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"the module never wrote {path}")


def _gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def _kill_left(pids_file: Path) -> None:
    """So that a failing test leaves nothing spinning on the machine."""
    for pid in [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("how", KILLS.values(), ids=KILLS.keys())
def test_a_killed_build_leaves_no_worker_behind(tmp_path: Path, how: signal.Signals) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(timeout=600))
    (tmp_path / "hangs.ppy").write_text(HANGS + FUNCTION)
    pids_file = tmp_path / "pids"
    build = start_ppy("build", str(tmp_path), env={"JAX_PPY_TEST_PIDS": str(pids_file)})
    try:
        pids = _wait_for(pids_file, 60)
        assert all(_alive(pid) for pid in pids)
        build.send_signal(how)
        build.wait(timeout=30)
        # Within seconds, not at the 600 s export-timeout.
        assert _gone(pids, 10), f"left running after {how.name}: {pids}"
    finally:
        build.kill()
        build.communicate()
        _kill_left(pids_file)


def test_the_worker_stops_itself_at_its_own_deadline(tmp_path: Path) -> None:
    """With the build alive but not acting (stopped, or stuck), the worker ends
    the module it is stuck in at export-timeout plus a grace."""
    (tmp_path / "hangs.ppy").write_text(HANGS + FUNCTION)
    pids_file = tmp_path / "pids"
    request = {
        "protocol": PROTOCOL_VERSION,
        "root": str(tmp_path),
        "timeout": 1.0,
        "platforms": None,
        "memory_limit_mb": None,
        "capture_limit": 0,
        "verify_sizes": False,
        "capture": str(tmp_path / "output.txt"),
        "modules": [{"name": "hangs", "path": "hangs.ppy", "functions": []}],
    }
    worker = subprocess.Popen(
        [sys.executable, "-P", "-m", "ppy_plugin_jax.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env={**os.environ, "JAX_PPY_TEST_PIDS": str(pids_file)},
        start_new_session=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        worker.stdin.write(json.dumps(request).encode() + b"\n")
        worker.stdin.flush()  # and stays open: the build is alive
        started = time.monotonic()
        pids = _wait_for(pids_file, 60)
        assert worker.wait(timeout=1.0 + GRACE + 30) == -signal.SIGKILL
        assert time.monotonic() - started >= 1.0
        assert _gone(pids, 10)
        assert json.loads(worker.stdout.readline())["event"] == "module"
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.communicate()
        _kill_left(pids_file)


def test_what_the_code_writes_to_low_fds_never_reaches_the_protocol(tmp_path: Path) -> None:
    scribbles = """
import os

for fd in range(3, 10):
    try:
        os.write(fd, b'garbage\\n{"event": "done"}\\n{"ok": true}\\n')
    except OSError:
        pass
"""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(timeout=120))
    (tmp_path / "scribbles.ppy").write_text(FUNCTION + scribbles)
    result = ppy("build", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "report this" not in result.stdout + result.stderr
    (decision,) = read_artifact(tmp_path / ".ppy" / "artifact.ppyz").decisions
    assert decision.outcome is Outcome.STAGED, decision.reason


#: Replaces the worker at import with a process that takes its time to exit,
#: as a module that re-executes the interpreter does: the protocol pipe,
#: close-on-exec, ends at once; the exit status comes seconds later.
REEXECS = """
import os
import sys

os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3)"])
"""


def test_a_worker_that_takes_its_time_to_exit_is_waited_for(tmp_path: Path) -> None:
    """The build waits for the exit status of a worker that closed its pipe
    (export-timeout at most) before it kills: on a loaded machine a worker
    misses any fixed moment, and the build then named its own SIGKILL. The
    module that ended the worker fails with how it really ended; what the
    worker exported before is kept."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(timeout=120))
    (tmp_path / "a_first.ppy").write_text(FUNCTION)
    (tmp_path / "b_reexecs.ppy").write_text(REEXECS + FUNCTION)
    result = ppy("build", str(tmp_path))
    assert result.returncode == 1, result.stdout + result.stderr
    decisions = {d.module: d for d in read_artifact(tmp_path / ".ppy" / "artifact.ppyz").decisions}
    assert decisions["a_first"].outcome is Outcome.STAGED, decisions["a_first"].reason
    reason = decisions["b_reexecs"].reason
    assert reason.startswith("the export worker exited with code 0 while importing"), reason


#: Names a credential goes by, under prefixes the worker otherwise keeps.
SECRETS = ("JAX_TOKEN", "XLA_SECRET_KEY", "CUDA_api_key", "TPU_PASSWORD", "LC_CREDENTIALS")


def test_a_credential_under_a_kept_prefix_does_not_reach_the_worker(tmp_path: Path) -> None:
    reads = f"""
import os

seen = sorted(name for name in {SECRETS!r} if name in os.environ)
if seen or os.environ.get("JAX_PLATFORMS") != "cpu":
    raise LookupError(f"the worker sees {{seen}}, JAX_PLATFORMS={{os.getenv('JAX_PLATFORMS')}}")
"""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(timeout=120))
    (tmp_path / "reads.ppy").write_text(FUNCTION + reads)
    env = {name: "hunter2" for name in SECRETS} | {"JAX_PLATFORMS": "cpu"}
    result = ppy("build", str(tmp_path), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (decision,) = read_artifact(tmp_path / ".ppy" / "artifact.ppyz").decisions
    assert decision.outcome is Outcome.STAGED, decision.reason


def _reachable() -> list[str]:
    """The folders this interpreter imports jax and ppy from: its site-packages,
    and the four packages' sources (an editable install reaches them through
    a ``.pth`` file or a finder that only its own site-packages runs)."""
    paths = sysconfig.get_paths()
    sources = [str(ROOT / "packages" / p / "src") for p in PACKAGES]
    return list(dict.fromkeys([paths["purelib"], paths["platlib"], *sources]))


def _python_env(**changes: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONUSERBASE", "PYTHONNOUSERSITE", "PYTHONSAFEPATH")
    }
    return env | changes


def _empty_venv(where: Path, how: str) -> tuple[Path, dict[str, str]]:
    """A venv with nothing installed, whose python reaches jax and ppy only as
    ``how`` says; the environment that says it."""
    venv.create(where, with_pip=False, system_site_packages=how != "PYTHONPATH")
    python = where / "bin" / "python"
    if how == "PYTHONPATH":
        return python, _python_env(PYTHONPATH=os.pathsep.join(_reachable()))
    # The user site (on by default where a venv sees the system's packages),
    # and a .pth file in it naming the folders.
    base = where / "userbase"
    site = Path(sysconfig.get_path("purelib", "posix_user", vars={"userbase": str(base)}))
    site.mkdir(parents=True)
    (site / "reach.pth").write_text("\n".join(_reachable()) + "\n")
    return python, _python_env(PYTHONUSERBASE=str(base))


#: Where the program's python finds jax and ppy, besides the venv it runs in.
IMPORT_PATHS = ("PYTHONPATH", "a .pth file in the user site")


@pytest.mark.parametrize("how", IMPORT_PATHS)
def test_the_worker_imports_from_where_python_imports(tmp_path: Path, how: str) -> None:
    """As on an accelerator machine whose image provides jax on PYTHONPATH:
    what ``python model.ppy`` imports, the build imports."""
    python, env = _empty_venv(tmp_path / "empty", how)
    project = copy_example("25_jax_export", tmp_path)
    env["PPY_CACHE_DIR"] = str(tmp_path / "cache")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(python), *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )

    plain = run("model.ppy")
    assert plain.returncode == 0, plain.stderr
    built = run("-m", "ppy", "build")
    assert built.returncode == 0, built.stdout + built.stderr
    for name in ("normalize", "score"):
        (line,) = [line for line in built.stdout.splitlines() if f"  {name}(" in line]
        assert " exported " in line, built.stdout
    ran = run("-m", "ppy", "-v", "run", "model.ppy")
    assert (ran.stdout, ran.returncode) == (plain.stdout, 0), ran.stderr
    assert "path=staged" in ran.stderr and "run.build" not in ran.stderr


NEIGHBOUR = """
import helper
"""


def test_under_pythonsafepath_the_worker_finds_no_neighbour_python_does_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(timeout=120))
    (tmp_path / "helper.py").write_text("SCALE = 2\n")
    (tmp_path / "model.ppy").write_text(NEIGHBOUR + FUNCTION)
    safe = _python_env(PYTHONSAFEPATH="1")

    def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    plain = run("model.ppy", env=safe)
    assert "No module named 'helper'" in plain.stderr, plain.stderr
    built = run("-m", "ppy", "build", env=safe)
    assert built.returncode == 1, built.stdout + built.stderr
    (decision,) = read_artifact(tmp_path / ".ppy" / "artifact.ppyz").decisions
    assert decision.rule == "import-failed", decision.reason
    assert "No module named 'helper'" in decision.reason
    # The remedy says where the worker looked, and that python looks there too.
    assert decision.remedy is not None
    assert "python does not find helper either (the export worker looked in " in decision.remedy
    # Where python finds it (PYTHONPATH here), the worker does too.
    found = safe | {"PYTHONPATH": str(tmp_path)}
    assert run("model.ppy", env=found).returncode == 0
    built = run("-m", "ppy", "build", env=found)
    assert built.returncode == 0, built.stdout + built.stderr
    (decision,) = read_artifact(tmp_path / ".ppy" / "artifact.ppyz").decisions
    assert decision.outcome is Outcome.STAGED, decision.reason
