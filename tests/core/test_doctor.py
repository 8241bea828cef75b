"""``ppy doctor``: the real command on real projects, and the ``-X importtime`` reader
on real output.

Nothing the user has is faked: versions are compared with the installed
distributions' metadata, ``import jax`` is timed in a real interpreter, and
the artifact is one ``ppy build`` wrote.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from ppy.cli.diagnosis import render_text
from ppy.commands.doctor import SLOW_VERSIONS, findings, gather, installed_versions
from ppy.commands.importtime import (
    BackendStart,
    ImportProfile,
    ModuleImport,
    by_package,
    imports_of,
    measure,
    parse,
)

Run = Callable[..., subprocess.CompletedProcess[str]]

#: A loop, so the xla plugin has a reason to compile it, and a jitted function
#: that stays: the project's pyproject does not allow build-time execution.
MODEL = """\
import jax
from ppy import xla


@xla.jit
def collatz(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@jax.jit
def shift(x):
    return x + 1


print(collatz(27))
"""
PLAIN = '[project]\nname = "demo"\n'


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2])


def _doctor_json(ppy: Run, *args: str) -> dict[str, Any]:
    result = ppy("doctor", "--json", *args)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


# -- the -X importtime reader ---------------------------------------------------------------


@pytest.fixture(scope="module")
def json_importtime() -> str:
    """What a real interpreter writes for ``import json``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stderr


def test_parse_reads_every_line_of_real_importtime_output(json_importtime: str) -> None:
    timed = [line for line in json_importtime.splitlines() if "|" in line and "[us]" not in line]
    records = parse(json_importtime)
    assert len(records) == len(timed)
    assert all(r.cumulative_us >= r.self_us >= 0 for r in records)
    top = [r for r in records if r.name == "json"]
    assert len(top) == 1 and top[0].depth == 0


def test_imports_of_is_the_import_and_what_it_caused_not_interpreter_start_up(
    json_importtime: str,
) -> None:
    records = parse(json_importtime)
    mine = imports_of(records, "json")
    assert mine[-1].name == "json"
    assert all(r.depth > 0 for r in mine[:-1])
    assert "json.decoder" in {r.name for r in mine}
    started = {r.name for r in records if r.depth == 0 and r.name != "json"}
    assert started, "interpreter start-up imports something before json"
    assert not started & {r.name for r in mine}
    # The modules of a top-level import account for its cumulative time.
    assert sum(r.self_us for r in mine) == pytest.approx(mine[-1].cumulative_us, abs=len(mine))


def test_by_package_sums_self_time_per_top_level_package(json_importtime: str) -> None:
    mine = imports_of(parse(json_importtime), "json")
    packages = by_package(mine)
    json_modules = [r for r in mine if r.name.split(".")[0] == "json"]
    row = next(p for p in packages if p.package == "json")
    assert row.self_us == sum(r.self_us for r in json_modules)
    assert row.modules == len(json_modules)
    assert [p.self_us for p in packages] == sorted((p.self_us for p in packages), reverse=True)


def test_parse_skips_malformed_lines_and_keeps_the_rest() -> None:
    text = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       120 |        150 |     numpy._core",
            "import time:        40 |         40 |   ",  # no name
            "import time:   12 | 3",  # cut short
            "import time:     abc |        1 | jax",  # not a number
            "import time:        10 |        10 |   two words",
            "WARNING: something jax printed",
            "import time:       300 |        450 |   numpy",
            "import time:      1000 |       1450 | jax",
        ]
    )
    assert parse(text) == (
        ModuleImport("numpy._core", 120, 150, 2),
        ModuleImport("numpy", 300, 450, 1),
        ModuleImport("jax", 1000, 1450, 0),
    )
    assert [r.name for r in imports_of(parse(text), "jax")] == ["numpy._core", "numpy", "jax"]
    assert imports_of(parse(text), "numpy") == ()  # nested, not a top-level import


def test_measure_reports_a_failed_import_as_its_error() -> None:
    profile = measure("ppy_doctor_no_such_module")
    assert profile.seconds is None
    assert profile.error is not None
    assert "ModuleNotFoundError" in profile.error and "Traceback" not in profile.error


def test_measure_gives_up_after_its_timeout() -> None:
    profile = measure("jax", timeout=0.001)
    assert profile.seconds is None and profile.error == "`import jax` took over 0.001 s"


def test_measure_starts_jax_s_backend_in_the_same_interpreter_after_the_import() -> None:
    profile = measure("jax", start_backend=True)
    assert profile.error is None and profile.seconds is not None
    backend = profile.backend
    assert backend is not None and backend.error is None
    assert (backend.platform, backend.device_kind, backend.device_count) == ("cpu", "cpu", 1)
    assert backend.seconds is not None and backend.seconds >= 0
    # The import's lines end at jax's own: what the start imported is not counted in it.
    assert profile.imports[-1].name == "jax"
    assert measure("jax").backend is None


def test_a_backend_that_does_not_start_keeps_the_import_s_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A platform this machine does not have: jax.devices() raises, as on a
    # TPU whose chip another process holds.
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    profile = measure("jax", start_backend=True)
    assert profile.error is None and profile.seconds is not None and profile.seconds > 0
    backend = profile.backend
    assert backend is not None and backend.seconds is None
    assert backend.error is not None and backend.error.startswith("RuntimeError: ")
    assert "Traceback" not in backend.error and "\n" not in backend.error


def test_measure_gives_up_on_a_backend_after_its_timeout() -> None:
    profile = measure("jax", timeout=0.001, start_backend=True)
    assert profile.seconds is None and profile.error == "`import jax` took over 0.001 s"


# -- slow versions --------------------------------------------------------------------------


def test_the_ml_dtypes_row_flags_0_7_and_later_only() -> None:
    flagged = {
        version: bool(findings({"ml_dtypes": version}, None))
        for version in ("0.5.1", "0.6.0", "0.6.99", "0.7.0", "0.7.1", "0.8.0rc1", "nightly")
    }
    assert flagged == {
        "0.5.1": False,
        "0.6.0": False,
        "0.6.99": False,
        "0.7.0": True,
        "0.7.1": True,
        "0.8.0rc1": True,
        "nightly": False,
    }
    assert findings({"ml_dtypes": None}, None) == ()
    row = next(r for r in SLOW_VERSIONS if r.package == "ml_dtypes")
    assert row.remedy == 'pip install "ml_dtypes<0.7"'


def test_installed_versions_are_the_metadata_s() -> None:
    versions = installed_versions()
    for name in ("jax", "jaxlib", "ml_dtypes", "numpy"):
        assert versions[name] == metadata.version(name)


# -- the command ----------------------------------------------------------------------------


def test_doctor_times_import_jax_and_names_ml_dtypes_from_its_installed_version(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    report = _doctor_json(ppy, str(root))

    timed = report["import_jax"]
    assert timed["measured"] is True and timed["error"] is None
    assert timed["seconds"] > 0
    assert 1 <= len(timed["top"]) <= 5
    assert {"package", "self_seconds", "modules"} == set(timed["top"][0])
    assert sum(p["self_seconds"] for p in timed["top"]) <= timed["seconds"] + 0.01
    assert {p["package"] for p in timed["top"]} & {"jax", "jaxlib", "numpy", "ml_dtypes"}

    installed = metadata.version("ml_dtypes")
    found = [f for f in report["findings"] if f["package"] == "ml_dtypes"]
    if _release(installed) >= (0, 7):
        (finding,) = found
        assert finding["installed"] == installed
        assert finding["remedy"] == 'pip install "ml_dtypes<0.7"'
        assert "ufunc promoters" in finding["why"]
        assert 0 < finding["measured_seconds"] <= timed["seconds"]
        # Slow or not is what was measured here, not what the version promises.
        row = next(r for r in SLOW_VERSIONS if r.package == "ml_dtypes")
        assert finding["slow_here"] is (finding["measured_seconds"] >= row.slow_seconds)
        if finding["slow_here"]:
            saving = finding["measured_seconds"] - row.fast_seconds
            assert abs(finding["would_save_seconds"] - saving) < 0.002
        else:
            assert finding["would_save_seconds"] is None
    else:
        assert found == []


def test_doctor_reports_the_backend_start_after_import_jax(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    report = _doctor_json(ppy, str(root))
    backend = report["backend_start"]
    assert backend["measured"] is True and backend["error"] is None
    assert (backend["platform"], backend["device_kind"], backend["device_count"]) == (
        "cpu",
        "cpu",
        1,
    )
    assert backend["seconds"] >= 0
    for package in backend["imports"]:
        assert set(package) == {"package", "self_seconds", "modules"}
    text = ppy("doctor", str(root))
    [line] = [ln for ln in text.stdout.splitlines() if ln.startswith("backend start")]
    assert ": cpu (cpu, 1 device), the first jax.devices() after the import" in line
    assert "before its program's first call" in text.stdout


@pytest.mark.parametrize(
    ("setting", "said"), [(None, "libtpu's default, 4 GiB"), ("268435456", "268435456 bytes")]
)
def test_on_a_tpu_the_backend_start_names_the_transfer_buffer_it_pins(
    make_project: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    setting: str | None,
    said: str,
) -> None:
    """On a TPU most of the open is the pinned host buffer; the report says
    which size this environment gives it (a TPU's start, as measured there)."""
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    if setting is None:
        monkeypatch.delenv("TPU_PREMAPPED_BUFFER_SIZE", raising=False)
    else:
        monkeypatch.setenv("TPU_PREMAPPED_BUFFER_SIZE", setting)
    started = BackendStart(6.16, platform="tpu", device_kind="TPU v5 lite", device_count=1)
    profile = ImportProfile("jax", 1.18, (), backend=started)
    report = dataclasses.replace(gather(root, measure_import=False), import_jax=profile)
    text = " ".join(render_text(report).split())
    assert f"pinning host memory for transfers (TPU_PREMAPPED_BUFFER_SIZE: {said}" in text
    cpu = dataclasses.replace(
        report,
        import_jax=dataclasses.replace(
            profile, backend=dataclasses.replace(started, platform="cpu")
        ),
    )
    assert "TPU_PREMAPPED_BUFFER_SIZE" not in render_text(cpu)


def test_doctor_json_fields_on_a_project_with_no_artifact(
    make_project: Callable[..., Path], ppy: Run, cache_dir: Path
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    report = _doctor_json(ppy, "--no-import", str(root / "model.ppy"))

    assert set(report) == {
        "format_version",
        "python",
        "versions",
        "platform",
        "import_jax",
        "backend_start",
        "findings",
        "artifact",
        "cache",
        "program",
    }
    assert report["program"] is None  # no --program
    assert report["format_version"] == 1
    assert report["python"] == {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
    }
    for name in ("jax", "jaxlib", "ml_dtypes", "numpy"):
        assert report["versions"][name] == metadata.version(name)
    assert report["platform"]["cpus"] == os.cpu_count()
    assert report["platform"]["machine"] == platform.machine()
    assert report["import_jax"] == {"measured": False, "seconds": None, "top": [], "error": None}
    assert report["backend_start"] == {
        "measured": False,
        "seconds": None,
        "platform": None,
        "device_kind": None,
        "device_count": None,
        "imports": [],
        "error": None,
    }
    for finding in report["findings"]:
        assert finding["measured_seconds"] is None and finding["slow_here"] is None
        assert finding["would_save_seconds"] is None

    artifact = report["artifact"]
    assert artifact["state"] == "missing"
    assert artifact["root"] == str(root.resolve())
    assert artifact["path"] == str(root.resolve() / ".ppy" / "artifact.ppyz")
    assert "ppy build" in artifact["remedy"]
    assert (artifact["entries"], artifact["staged"], artifact["stays"]) == (0, [], [])

    assert report["cache"] == {
        "directory": str(cache_dir),
        "untrusted": None,
        "executables": 0,
        "bytes": 0,
        "unstaged": 0,
        "unstaged_bytes": 0,
        "warm": "cold",
        "note": report["cache"]["note"],
    }


def test_doctor_reads_a_built_artifact_as_inspect_does_and_sees_it_go_stale(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    built = ppy("build", "--keep-going", str(root))
    assert built.returncode == 0, built.stderr
    shown = ppy("inspect", "--json", str(root / ".ppy" / "artifact.ppyz"))
    manifest = json.loads(shown.stdout)

    report = _doctor_json(ppy, "--no-import", str(root))
    artifact = report["artifact"]
    assert artifact["state"] == "fresh"
    assert artifact["reason"] is None and artifact["remedy"] is None
    assert artifact["entries"] == len(manifest["entries"])
    decisions = {f"{d['module']}.{d['qualname']}": d for d in manifest["decisions"]}
    staged = {s["function"] for s in artifact["staged"]}
    stays = {s["function"]: s for s in artifact["stays"]}
    assert staged | set(stays) == set(decisions) == {"model.collatz", "model.shift"}
    assert staged == {n for n, d in decisions.items() if d["outcome"] != "stays"}
    assert stays["model.shift"]["rule"] == decisions["model.shift"]["rule"]
    assert stays["model.shift"]["reason"] == decisions["model.shift"]["reason"]
    expected = "cold" if manifest["entries"] else "nothing-staged"
    assert report["cache"]["warm"] == expected

    (root / "model.ppy").write_text(MODEL + "\n# edited\n")
    artifact = _doctor_json(ppy, "--no-import", str(root))["artifact"]
    assert artifact["state"] == "stale"
    assert artifact["reason"] == "model.ppy changed since the build"
    assert staged == {s["function"] for s in artifact["staged"]}


def test_doctor_text_names_every_section_and_exits_0(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    result = ppy("doctor", "--no-import", str(root))
    assert result.returncode == 0, result.stderr
    starts = [line.split("  ")[0] for line in result.stdout.splitlines() if line[:1].isalpha()]
    assert starts == [
        "python",
        "platform",
        "versions",
        "import jax",
        "backend start",
        "slow versions",
        "artifact",
        "executable cache",
    ]
    assert "import jax  not measured (--no-import)" in result.stdout
    assert "backend start  not measured (--no-import)" in result.stdout
    assert f"jax {metadata.version('jax')}" in result.stdout
    assert ": missing" in result.stdout


def test_a_bad_configuration_is_reported_not_an_error(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject='[tool.ppy]\nbuild-execution = "yes"\n')
    report = _doctor_json(ppy, "--no-import", str(root))
    assert report["artifact"]["state"] == "bad-config"
    assert "tool.ppy.build-execution" in report["artifact"]["reason"]
    assert report["artifact"]["path"] is None


def test_a_damaged_artifact_is_reported_not_an_error(
    make_project: Callable[..., Path], ppy: Run
) -> None:
    root = make_project({"model.ppy": MODEL, ".ppy/artifact.ppyz": "not a zip"}, pyproject=PLAIN)
    artifact = _doctor_json(ppy, "--no-import", str(root))["artifact"]
    assert artifact["state"] == "unreadable"
    assert "not a ppy artifact" in artifact["reason"]


@pytest.mark.parametrize(
    "args",
    [("--import-timeout", "0"), ("--import-timeout", "soon"), ("no-such-folder",), ("--bogus",)],
)
def test_usage_errors_exit_2(ppy: Run, tmp_path: Path, args: tuple[str, ...]) -> None:
    result = ppy("doctor", "--no-import", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_help(ppy: Run) -> None:
    result = ppy("doctor", "--help")
    assert result.returncode == 0 and "usage: ppy doctor" in result.stdout
    assert "--no-import" in result.stdout and "--json" in result.stdout


def test_gathering_never_imports_jax(make_project: Callable[..., Path]) -> None:
    root = make_project({"model.ppy": MODEL}, pyproject=PLAIN)
    code = (
        "import sys\nfrom pathlib import Path\nfrom ppy.cli.diagnosis import render_text\n"
        "from ppy.commands.doctor import gather\n"
        f"render_text(gather(Path({str(root)!r})))\n"
        "leaked = sorted(m for m in ('jax', 'jaxlib', 'ml_dtypes', 'numpy') if m in sys.modules)\n"
        "print(leaked)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
