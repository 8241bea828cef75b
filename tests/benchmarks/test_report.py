"""The benchmark table and the README section say what the run's record says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from ppybench import floor, machine, report, targets  # noqa: E402
from ppybench.measure import Comparison  # noqa: E402
from ppybench.xla_scalar import TRIVIAL_VS_JAX  # noqa: E402


def _record() -> dict[str, object]:
    comparisons = [
        Comparison(
            "deep model, 40 layers",
            "whole process",
            "s",
            "python",
            {
                "python": [4.0, 5.0, 6.0],
                "python + jax cache": [3.0, 4.0, 5.0],
                "ppy run cold": [4.0, 4.5, 5.0],
                "ppy run warm": [2.0, 2.5, 3.0],
            },
            {"layers": 40},
        ),
        Comparison(
            "page example",
            "whole process",
            "s",
            "python",
            {"python": [1.2, 1.3], "python + jax cache": [1.1, 1.2], "ppy run --warm": [0.3, 0.3]},
        ),
        Comparison(
            "page example",
            "first --warm run (starts the server)",
            "s",
            "ppy run cold",
            {"ppy run cold": [1.4], "first ppy run --warm": [1.5]},
            {"server_idle_rss_mib": 161.2},
        ),
        Comparison(
            "per-call overhead",
            "small input (8x4)",
            "s",
            "jitted",
            {"jitted": [1e-5, 1e-5], "staged": [2e-5, 2e-5]},
        ),
        Comparison(
            "xla scalar",
            "trivial function, per call",
            "s",
            "CPython",
            {"CPython": [5.5e-8], "staged": [2e-5]},
        ),
        Comparison(
            "xla scalar",
            TRIVIAL_VS_JAX,
            "s",
            "jitted jax",
            {"jitted jax": [1e-5, 1.2e-5], "staged": [8e-6, 9e-6]},
        ),
    ]
    return {
        "mode": "quick",
        "date": "2026-01-01 00:00 UTC",
        "machine": {"cpu": "Some CPU", "cores": 2},
        "python": "3.11.0",
        "versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "ppy-core": "0.1.0"},
        "rounds": {"startup": 3},
        "comparisons": [c.to_json() for c in comparisons],
        "targets": targets.check(comparisons),
    }


def test_table_shows_each_ratio_and_which_targets_are_met() -> None:
    table = report.render(_record())
    assert (
        "| deep model, 40 layers | whole process | python | 5.00 s "
        "| ppy run warm | 2.50 s | 0.50x |" in table
    )
    assert (
        "| per-call overhead | small input (8x4) | jitted | 10.0 µs | staged | 20.0 µs | 2.00x |"
        in table
    )
    # A figure below a microsecond keeps its digits rather than reading 0.0 µs.
    assert "| CPython | 55 ns | staged | 20.0 µs | 364x |" in table
    lines = table.splitlines()
    [below_cache] = [line for line in lines if "ppy run warm / python + jax cache < 1" in line]
    assert "0.62x" in below_cache and "| met (3 rounds; indicative only) |" in below_cache
    [per_call] = [line for line in lines if "staged / jitted <= 1.3" in line]
    assert "**not met**" in per_call
    # A bound on a time shows the time, not a ratio.
    [absolute] = [line for line in lines if "staged <= 10 µs" in line]
    assert "| 8.5 µs | met" in absolute
    [against_jax] = [line for line in lines if "staged / jitted jax <= 1" in line]
    assert "| 0.77x | met" in against_jax
    # Warm start: 0.24x of python, against a bound of 0.3.
    [warm] = [line for line in lines if "ppy run --warm / python <= 0.3" in line]
    assert "| 0.24x | met" in warm
    [served] = [line for line in lines if "server idle RSS 161.2 MiB" in line]
    assert "| first ppy run --warm | 1.50 s | 1.07x |" in served


def test_readme_section_is_replaced_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{report.README_START}\nstale\n{report.README_END}\n\n## After\n")
    table = report.render(_record())
    assert report.update_readme(readme, report.readme_section(table, "benchmarks/results/x.png"))
    text = readme.read_text()
    assert "stale" not in text and table in text and "![" in text
    assert text.startswith("# Title\n") and text.endswith("## After\n")


def test_a_readme_without_markers_is_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n")
    assert not report.update_readme(readme, "section")
    assert readme.read_text() == "# Title\n"


# -- the floor, the accelerator's targets and results -------------------------------------


def _floor_run() -> list[Comparison]:
    """A run on an accelerator: the floor, 40 layers, the per-call case; 3 samples each."""
    return [
        Comparison(
            floor.FLOOR,
            floor.FLOOR_LABEL,
            "s",
            floor.IMPORT_MODE,
            {floor.IMPORT_MODE: [1.1, 1.2, 1.3], floor.FLOOR_MODE: [11.0, 11.2, 11.4]},
        ),
        Comparison(
            "deep model, 40 layers",
            "whole process",
            "s",
            "python",
            {
                "python": [21.0, 21.2, 21.5],
                "python + jax cache": [17.0, 17.2, 17.5],
                "ppy run warm": [12.5, 12.7, 12.9],
            },
            {"layers": 40},
        ),
        Comparison(
            "deep model, 40 layers",
            "first call",
            "s",
            "python",
            {"python": [0.6, 0.61, 0.62], "ppy run warm": [0.07, 0.07, 0.07]},
            {"layers": 40},
        ),
        Comparison(
            "per-call overhead",
            "small input (8x4)",
            "s",
            "jitted",
            {"jitted": [1.2e-4] * 3, "staged": [1.21e-4] * 3},
        ),
    ]


def test_whole_process_targets_on_an_accelerator_are_measured_above_the_floor() -> None:
    checked = {t["name"]: t for t in targets.check(_floor_run(), targets.DEVICE_TARGETS)}
    above = checked[
        "deep model, 40 layers, whole process: (ppy run warm - floor) / (python - floor) <= 0.2"
    ]
    # (12.7 - 11.2) / (21.2 - 11.2): the floor is the same run's median.
    assert above["ratio"] == pytest.approx(0.15)
    assert above["met"] is True and above["enough_rounds"] is True
    assert above["floor_s"] == 11.2
    cache = checked[
        "deep model, 40 layers, whole process: "
        "(ppy run warm - floor) / (python + jax cache - floor) <= 0.3"
    ]
    assert cache["ratio"] == pytest.approx(1.5 / 6.0) and cache["met"] is True
    first = checked["deep model, 40 layers, first call: ppy run warm / python <= 0.15"]
    assert first["ratio"] == pytest.approx(0.07 / 0.61)
    per_call = checked["per-call overhead, small input (8x4): staged / jitted <= 1.05"]
    assert per_call["met"] is True
    # The table names what bounds a target measured above the floor.
    table = report.render({**_record(), "targets": list(checked.values())})
    [line] = [ln for ln in table.splitlines() if "(python - floor) <= 0.2" in ln]
    assert "| 0.15x (12.70 s and 21.20 s; floor 11.20 s) | met |" in line


def test_a_run_without_the_floor_leaves_the_floor_targets_out() -> None:
    without = [c for c in _floor_run() if c.case != floor.FLOOR]
    names = [t["name"] for t in targets.check(without, targets.DEVICE_TARGETS)]
    assert names and not [name for name in names if "floor" in name]


def test_each_platform_is_held_to_its_own_targets() -> None:
    assert targets.for_platform("cpu") is targets.TARGETS
    assert targets.for_platform(None) is targets.TARGETS
    assert targets.for_platform("tpu") is targets.DEVICE_TARGETS
    assert targets.for_platform("gpu") is targets.DEVICE_TARGETS


@pytest.mark.parametrize(
    ("found", "name"),
    [
        ({"platform": "cpu", "device_kind": "cpu"}, None),
        ({"platform": None, "error": "no jax"}, None),
        ({"platform": "tpu", "device_kind": "TPU v5 lite"}, "tpu-v5e"),
        ({"platform": "tpu", "device_kind": "TPU v4"}, "tpu-v4"),
        ({"platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"}, "gpu-nvidia-h100-80gb-hbm3"),
    ],
)
def test_a_run_on_an_accelerator_has_a_results_folder_of_its_own(
    found: dict[str, object], name: str | None
) -> None:
    assert machine.results_name(found) == name


def _device_record() -> dict[str, object]:
    comparisons = _floor_run()
    return {
        **_record(),
        "mode": "device-quick",
        "accelerator": {"platform": "tpu", "device_kind": "TPU v5 lite", "device_count": 1},
        "versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "ppy-core": "0.1.0", "libtpu": "0.0.1"},
        "comparisons": [c.to_json() for c in comparisons],
        "targets": targets.check(comparisons, targets.DEVICE_TARGETS),
    }


def test_the_readme_shows_an_accelerator_s_table_beside_the_cpu_one(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results"
    for folder, record in (
        (results / "tpu-v5e", _device_record()),
        (results / "python3.13", _record()),  # another CPU run: not an accelerator's
    ):
        report.write_json(record, folder / "latest.json")
    devices = report.device_tables(results, tmp_path)
    assert [(d.device, d.folder) for d in devices] == [
        ("TPU v5 lite (tpu, 1 device)", "benchmarks/results/tpu-v5e")
    ]
    table = devices[0].table
    assert table.startswith(
        "Device-quick run, 2026-01-01 00:00 UTC: TPU v5 lite (tpu, 1 device); host Some CPU, "
        "2 cores; Python 3.11.0, jax 0.10.2, jaxlib 0.10.2, libtpu 0.0.1, ppy 0.1.0."
    )
    section = report.readme_section(report.render(_record()), None, devices)
    assert "On an accelerator, TPU v5 lite (tpu, 1 device), from " in section
    assert section.index(report.render(_record())) < section.index(table)
    assert "each accelerator's `latest.json`" in section


def test_a_device_run_names_the_runtime_settings_its_processes_had(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TPU_PREMAPPED_BUFFER_SIZE", "268435456")
    monkeypatch.delenv("TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES", raising=False)
    found = {"platform": "tpu", "device_kind": "TPU v5 lite", "device_count": 1}
    record = {**_device_record(), "settings": machine.describe(found)["settings"]}
    assert report.render(record).startswith(
        "Device-quick run, 2026-01-01 00:00 UTC: TPU v5 lite (tpu, 1 device) with "
        "TPU_PREMAPPED_BUFFER_SIZE=268435456; host Some CPU, 2 cores;"
    )


def test_the_readme_section_is_what_the_committed_results_render() -> None:
    results = ROOT / "benchmarks" / "results"
    plot = results / "startup_vs_depth.png"
    link = plot.relative_to(ROOT).as_posix() if plot.exists() else None
    expected = report.readme_section(
        (results / "latest.md").read_text(), link, report.device_tables(results, ROOT)
    )
    assert report.readme_text(ROOT / "README.md") == expected


#: The runner's last step in a process where ``import matplotlib`` fails, as on
#: a machine that does not have it.
NO_MATPLOTLIB = """\
import runpy
import sys

sys.modules["matplotlib"] = None
sys.argv = [{run!r}, *sys.argv[1:]]
sys.path.insert(0, {folder!r})
runpy.run_path({run!r}, run_name="__main__")
"""


def test_a_run_without_matplotlib_writes_its_results_and_says_no_plot_was_drawn(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    code = NO_MATPLOTLIB.format(
        run=str(ROOT / "benchmarks" / "run.py"), folder=str(ROOT / "benchmarks")
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--quick", "--cases", "floor", "--results", str(results)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "matplotlib is not installed: no plots drawn" in done.stdout
    record = json.loads((results / "latest.json").read_text())
    assert record["accelerator"]["platform"] == "cpu"
    assert {c["case"] for c in record["comparisons"]} == {floor.FLOOR}
    assert "| floor | whole process | import jax |" in (results / "latest.md").read_text()
    assert not list(results.glob("*.png"))
    # The report step of a run that has figures to plot (a deep model, the
    # per-call case), from its JSON: no plot, a notice, the table all the same.
    measured = tmp_path / "measured"
    report.write_json(_record(), measured / "latest.json")
    again = subprocess.run(
        [sys.executable, "-c", code, "--report", str(measured), "--no-readme"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    assert "matplotlib is not installed: no plots drawn" in again.stdout
    assert (measured / "latest.md").read_text() == report.render(_record())
    assert not list(measured.glob("*.png"))
