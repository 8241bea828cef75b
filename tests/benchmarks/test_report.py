"""The benchmark table and the README section say what the run's record says."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from ppybench import report, targets  # noqa: E402
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
