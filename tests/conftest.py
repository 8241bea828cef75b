"""Shared fixtures: real project folders on disk and the real ``ppy`` command.

Tests build small projects in a temporary directory and run ``python -m ppy``
in a subprocess, the way a user runs it, then read the real artifact.

An example under ``examples/`` that several tests read is built once per
session (``built_examples``); a test that runs or changes it works on its own
copy of that build (``BuiltExample.copy``). pytest-xdist keeps session and
module fixtures per worker, and the test command distributes whole files
(``--dist loadfile``): a module's fixtures are made once, an example at most
once per worker. tests/README.md has the map.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: What a copy of an example leaves out: build outputs of earlier runs (the
#: artifact and its side files; a committed ``.ppy/signatures.json`` is kept).
EXAMPLE_OUTPUTS = shutil.ignore_patterns("*.ppyz", "*.ppyz.*", "__pycache__", "build", "*.egg-info")

#: The model libraries real programs use (noxfile.MODEL_LIBRARIES): a test of a
#: program that imports one is marked ``models``, which ``nox -s quick`` leaves out.
MODEL_LIBRARIES = ("flax", "optax", "equinox", "jaxtyping")
models = pytest.mark.models


#: A program that needs jax's CPU backend: it asks for several host devices
#: (``--xla_force_host_platform_device_count``), joins processes with gloo, or
#: expects an export for another platform to fall back. On an accelerator its
#: devices are the accelerator's, so ``nox -s device`` leaves it out.
cpu_backend = pytest.mark.cpu_backend

#: Whether the suite runs on an accelerator (tests/device/run.py, which sets
#: PPY_DEVICE_OUTCOMES): the outputs the examples' READMEs quote are jax's CPU
#: backend's, whose last digits another backend need not share.
ON_ACCELERATOR = bool(os.environ.get("PPY_DEVICE_OUTCOMES"))


def uses_host_devices(folder: Path) -> bool:
    """Whether a project's sources ask XLA for several host (CPU) devices."""
    sources = sorted(p for p in folder.rglob("*.ppy") if p.is_file())
    return any("xla_force_host_platform_device_count" in p.read_text() for p in sources)


def uses_model_library(folder: Path) -> bool:
    """Whether a project's sources import one of ``MODEL_LIBRARIES``."""
    pattern = re.compile(rf"^\s*(?:import|from)\s+({'|'.join(MODEL_LIBRARIES)})\b", re.M)
    sources = sorted(p for p in folder.rglob("*.ppy") if p.is_file())
    return any(pattern.search(p.read_text()) for p in sources)


#: Warm servers the tests start live in the test's own cache folder (never in
#: the user's runtime folder), and exit soon after a test that did not stop them.
os.environ.pop("XDG_RUNTIME_DIR", None)
os.environ["PPY_WARM_IDLE_TIMEOUT"] = "60"

#: The processes the tests start get the dispositions an interactive shell
#: gives: a background job of a script (``nox &``) starts with SIGINT and
#: SIGQUIT ignored, which every child inherits, and python then ignores them
#: too, so the tests that send them would see another program.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def stop_servers(cache: Path) -> None:
    """Stop the warm servers started with ``PPY_CACHE_DIR=cache``."""
    from ppy.cli.servers import ask
    from ppy.warm.place import places

    for place in places(cache / "warm"):
        ask(place, "stop")


#: The files that take longest on two cores, longest first (each file's tests
#: summed from ``--junitxml``; the slowest took three times the last). Under
#: ``--dist loadfile`` a worker takes the next file in line as it nears the
#: end of its own; pytest-xdist lines files up by their number of tests, most
#: first, which sends the files of a few long tests (a program run under
#: python, cold and warm, each) last, and the suite ended on one worker while
#: the other sat idle. These go first; every other file follows, fewest tests
#: first: here a file of few tests is one of long ones, and the files of many
#: short unit tests end the suite on both workers at once. A file missing here
#: costs only that; one that grew long belongs here.
LONGEST_FIRST = (
    "tests/integration/test_examples.py",
    "tests/record/test_record.py",
    "tests/record/test_live.py",
    "tests/warm/test_environment.py",
    "tests/fidelity/test_captured.py",
    "tests/programs/test_libraries.py",
    "tests/record/test_foreign.py",
    "tests/record/test_foreign_keys.py",
    "tests/warm/test_server.py",
    "tests/fidelity/test_program.py",
    "tests/record/test_sizes.py",
    "tests/record/test_mutations.py",
    "tests/record/test_conventions.py",
    "tests/hardening/test_unusable_state.py",
    "tests/record/test_weak_types.py",
    "tests/warm/test_runs.py",
    "tests/fidelity/test_parameter_order.py",
    "tests/fidelity/test_paths.py",
    "tests/hardening/test_recording.py",
    "tests/fidelity/test_config.py",
    "tests/fidelity/test_sharded.py",
    "tests/hardening/test_hostile_artifacts.py",
    "tests/fidelity/test_dependencies.py",
    "tests/fidelity/test_stdio.py",
    "tests/fidelity/test_gradients.py",
    "tests/programs/test_pytrees.py",
    "tests/plugin_xla/test_exactness.py",
    "tests/integration/test_run_command.py",
    "tests/hardening/test_cache_trust.py",
    "tests/fidelity/test_specializes.py",
    "tests/plugin_xla/test_operators.py",
    "tests/runtime_pjrt/test_unstaged_cache.py",
    "tests/programs/test_scalars.py",
    "tests/warm/test_security.py",
    "tests/plugin_jax/test_build_export.py",
    "tests/hardening/test_worker_process.py",
    "tests/fidelity/test_collector.py",
    "tests/fidelity/test_frames.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist is installed
        config.option.loadscopereorder = False  # hand files out in LONGEST_FIRST's order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In pytest-xdist's workers (which collect; the controller hands out), the
    files of ``LONGEST_FIRST`` first, in its order, then the others, fewest
    tests first. In one process (the device runner's, which orders its own
    parts) the order stays pytest's."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    tests = Counter(item.nodeid.partition("::")[0] for item in items)

    def place(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.partition("::")[0]
        return (rank[path], 0) if path in rank else (len(rank), tests[path])

    items.sort(key=place)


@pytest.fixture(autouse=True)
def _stop_served() -> Iterator[None]:
    """Stop the warm servers a test's differential runs started, once it ends."""
    yield
    from tests.support.differential import SERVED

    while SERVED:
        stop_servers(SERVED.pop())


PERMISSIONS = """\
[project]
name = "demo"

[tool.ppy]
build-execution = "allow"

[tool.ppy.plugins.jax]
allow-build-export = true
"""


@pytest.fixture
def own_logging() -> Iterator[None]:
    """For a test that configures logging for the whole process, as a command
    does: put it back, so the tests that run next in this process capture
    their events as before."""
    import structlog
    from ppy import log

    settings, logger, config = dict(log._settings), log._logger, structlog.get_config()
    yield
    log._settings.clear()
    log._settings.update(settings)
    log._logger = logger
    structlog.configure(**config)


@pytest.fixture
def make_project(tmp_path: Path) -> Callable[..., Path]:
    """Write ``files`` (relative path -> text, dedented) under a fresh folder.

    ``pyproject`` defaults to one granting both permissions; pass None to
    write none.
    """

    def make(files: Mapping[str, str], pyproject: str | None = PERMISSIONS) -> Path:
        return write_project(tmp_path / "project", files, pyproject)

    return make


def write_project(
    root: Path, files: Mapping[str, str], pyproject: str | None = PERMISSIONS
) -> Path:
    """Write ``files`` (relative path -> text, dedented) and the pyproject under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private executable cache for the test and every ppy it starts."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PPY_CACHE_DIR", str(path))
    return path


def run_ppy(
    *args: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ppy ARGS`` the way a user does, and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "ppy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def pip_install_target(target: Path, *sources: Path) -> Path:
    """Install distributions into ``target`` with pip, as a user would, without
    touching the test environment: put ``target`` on PYTHONPATH to use them.

    pip builds a source folder in place (``build/``, ``*.egg-info``), so each
    source is copied first: two workers, or two test runs, installing one
    fixture at once would otherwise build in the same folder.
    """
    with tempfile.TemporaryDirectory(prefix="ppy-pip-") as tmp:
        copies = [
            shutil.copytree(source, Path(tmp) / f"{i}-{source.name}", ignore=EXAMPLE_OUTPUTS)
            for i, source in enumerate(sources)
        ]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                str(target),
                *map(str, copies),
            ],
            check=True,
            capture_output=True,
        )
    return target


@pytest.fixture
def ppy(cache_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_ppy`` with the test's private executable cache; ``**env`` adds variables."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 300, **env: str):
        return run_ppy(
            *args, cwd=cwd, timeout=timeout, env={"PPY_CACHE_DIR": str(cache_dir), **env}
        )

    return run


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the page's example project, without any build output."""
    target = tmp_path / "25_jax_export"
    shutil.copytree(
        EXAMPLES / "25_jax_export", target, ignore=shutil.ignore_patterns(".ppy", "__pycache__")
    )
    return target


@dataclass(frozen=True)
class BuiltExample:
    """An example copied and built once for the session, and what python printed.

    ``folder`` is shared by every test of the worker that asks for it: read it,
    never run or write in it (a run writes ``.ppy/artifact.ppyz.checked``);
    ``copy`` gives a test a built project of its own. The build used a cache
    of its own, and ``ppy build`` writes nothing there: a copy run with the
    test's ``cache_dir`` starts from an empty cache, as after its own build.
    """

    folder: Path
    #: ``python model.ppy`` in the fresh copy, before the build.
    plain: subprocess.CompletedProcess[str]
    #: ``ppy --log-format json -v build``: the report on stdout (the same as a
    #: plain ``ppy build``), one JSON object per event on stderr.
    build: subprocess.CompletedProcess[str]

    def copy(self, target: Path) -> Path:
        """A copy of the built project under ``target``, as the build left it."""
        destination = target / self.folder.name
        shutil.copytree(self.folder, destination)
        return destination


#: Examples staged by ``ppy record`` and ``ppy build`` alone: what the
#: recorded process exports (``.ppy/exports``) is made on the machine that
#: runs them, so they are recorded here, before the build.
RECORDED_HERE = frozenset({"85_main_block"})


def _build_example(name: str, base: Path) -> BuiltExample:
    folder = base / name
    shutil.copytree(EXAMPLES / name, folder, ignore=EXAMPLE_OUTPUTS)
    if name in RECORDED_HERE:
        recorded = run_ppy(
            "record", "model.ppy", cwd=folder, env={"PPY_CACHE_DIR": str(base / "cache")}
        )
        assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    plain = subprocess.run(
        [sys.executable, "model.ppy"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    build = run_ppy(
        "--log-format",
        "json",
        "-v",
        "build",
        cwd=folder,
        env={"PPY_CACHE_DIR": str(base / "cache")},
    )
    return BuiltExample(folder, plain, build)


@pytest.fixture(scope="session")
def built_examples(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], BuiltExample]:
    """``built_examples(name)``: ``examples/<name>`` built once for the session (per worker)."""
    built: dict[str, BuiltExample] = {}

    def get(name: str) -> BuiltExample:
        if name not in built:
            built[name] = _build_example(name, tmp_path_factory.mktemp(f"built-{name}"))
        return built[name]

    return get


@pytest.fixture
def built_example(built_examples: Callable[[str], BuiltExample], tmp_path: Path) -> Path:
    """The test's own copy of the page's example, built (``example``, after ``ppy build``)."""
    return built_examples("25_jax_export").copy(tmp_path)
