"""The device session's runner, rehearsed on the CPU: where there is no
accelerator it says so and runs nothing; with ``--allow-cpu`` it runs its one
pytest process, stops at its deadline, writes what passed and what was not
reached, and a second run picks up what the first left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

RUNNER = ROOT / "tests" / "device" / "run.py"
#: Two quick tests that start no jax process.
FIRST = "tests/fidelity/test_machine_noise.py::test_the_hugepages_warning_alone_is_set_apart"
SECOND = "tests/benchmarks/test_report.py::test_each_platform_is_held_to_its_own_targets"


def _runner(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RUNNER), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
    )


def test_without_an_accelerator_it_says_so_and_runs_nothing(tmp_path: Path) -> None:
    done = _runner("--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no accelerator: jax's default backend here is the CPU")
    assert "pytest" not in done.stdout and not (tmp_path / "results").exists()
    probed = json.loads(_runner("--probe").stdout)
    assert (probed["platform"], probed["device_count"]) == ("cpu", 1)
    assert probed["versions"]["jax"] and probed["backend_start_s"] >= 0


def test_a_run_stopped_by_its_deadline_is_continued_by_the_next(tmp_path: Path) -> None:
    results = tmp_path / "results"
    rehearsal = ("--allow-cpu", "--results", str(results), "--parts", "")
    first = _runner(*rehearsal, "--deadline", "0", "--", FIRST, SECOND)
    assert first.returncode == 0, first.stdout + first.stderr
    document = json.loads((results / "fidelity.json").read_text())
    assert document["selected"] == [FIRST, SECOND]
    assert set(document["tests"]) == {FIRST}
    assert document["tests"][FIRST]["outcome"] == "passed"
    assert "deadline passed" in document["runs"][0]["stopped"]
    text = (results / "fidelity.txt").read_text()
    assert "outcome   2 selected: 1 passed, 1 not run yet" in text
    assert f"  not run           {SECOND}" in text
    assert "PPY_TESTS_WARM" not in text and "-m 'not cpu_backend'" in text

    # The runtime's cost settings a run had are written beside it.
    second = _runner(*rehearsal, "--resume", "--", FIRST, SECOND, TPU_PREMAPPED_BUFFER_SIZE="256")
    assert second.returncode == 0, second.stdout + second.stderr
    document = json.loads((results / "fidelity.json").read_text())
    assert [run["stopped"] for run in document["runs"]][1] is None
    assert {nodeid: test["run"] for nodeid, test in document["tests"].items()} == {
        FIRST: 0,
        SECOND: 1,
    }
    text = (results / "fidelity.txt").read_text()
    assert "outcome   2 selected: 2 passed\n" in text and "  not run  " not in text
    assert f"--deselect {FIRST}" in document["runs"][1]["command"]
    assert [run["settings"] for run in document["runs"]] == [
        {},
        {"TPU_PREMAPPED_BUFFER_SIZE": "256"},
    ]
    assert text.count("     with TPU_PREMAPPED_BUFFER_SIZE=256\n") == 1


def test_resume_runs_a_failure_again(tmp_path: Path) -> None:
    """A test that failed is run again by ``--resume`` (the code it failed on
    may have moved); one that passed is not."""
    fixed = tmp_path / "fixed"
    tests = tmp_path / "test_once.py"
    tests.write_text(
        "from pathlib import Path\n\n\n"
        "def test_passes() -> None:\n    pass\n\n\n"
        f"def test_fails_until_fixed() -> None:\n    assert Path({str(fixed)!r}).exists()\n"
    )
    results = tmp_path / "results"
    rehearsal = ("--allow-cpu", "--results", str(results), "--parts", "", "--", str(tests))
    first = _runner(*rehearsal)
    assert first.returncode == 1, first.stdout + first.stderr
    fixed.touch()
    second = _runner("--resume", *rehearsal)
    assert second.returncode == 0, second.stdout + second.stderr
    document = json.loads((results / "fidelity.json").read_text())
    # pytest names each test from the root it finds above the file.
    named = {nodeid.rpartition("/")[2]: nodeid for nodeid in document["tests"]}
    found = {name: document["tests"][nodeid] for name, nodeid in named.items()}
    assert {name: (test["outcome"], test["run"]) for name, test in found.items()} == {
        "test_once.py::test_passes": ("passed", 0),
        "test_once.py::test_fails_until_fixed": ("passed", 1),
    }
    command = document["runs"][1]["command"]
    assert f"--deselect {named['test_once.py::test_passes']}" in command
    assert "test_fails_until_fixed" not in command
