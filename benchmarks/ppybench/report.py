"""What a run writes: the JSON record, the Markdown table, the README section.

The table is rendered from the JSON alone, so the committed record, the
table and the README's copy of it cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .measure import Comparison

__all__ = ["README_END", "README_START", "render", "update_readme", "write_json"]

README_START = "<!-- bench:start -->"
README_END = "<!-- bench:end -->"


def write_json(record: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=False) + "\n")


def _seconds(value: float) -> str:
    if value < 1e-6:
        return f"{value * 1e9:.0f} ns"
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if value < 100 else f"{value:.0f}x"


def render(record: Mapping[str, Any]) -> str:
    """The Markdown table of a run's record: every comparison, then every target."""
    machine = record["machine"]
    versions = record["versions"]
    lines = [
        f"{record['mode'].capitalize()} run, {record['date']}: {machine['cpu']}, "
        f"{machine['cores']} cores; Python {record['python']}, jax {versions.get('jax')}, "
        f"jaxlib {versions.get('jaxlib')}, ppy {versions.get('ppy-core')}. Medians of fresh "
        f"processes, modes alternated ({record['rounds']['startup']} per mode for start-up); "
        "ratio = the compared mode's median / the alternative's.",
        "",
        "| Case | Measure | Alternative | Median | Compared | Median | Ratio |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for data in record["comparisons"]:
        comparison = Comparison.from_json(data)
        medians = comparison.medians
        base = comparison.baseline
        label = comparison.label
        rss = comparison.params.get("server_idle_rss_mib")
        if rss is not None:
            label += f"; server idle RSS {rss} MiB"
        for mode, ratio in comparison.ratios.items():
            lines.append(
                f"| {comparison.case} | {label} | {base} | {_seconds(medians[base])} "
                f"| {mode} | {_seconds(medians[mode])} | {_ratio(ratio)} |"
            )
    targets = record.get("targets", [])
    if targets:
        lines += ["", "| Target | From | Ratio (or time) | Met |", "|---|---|---:|---|"]
        for target in targets:
            met = "met" if target["met"] else "**not met**"
            if not target["enough_rounds"]:
                met += f" ({target['rounds']} rounds; indicative only)"
            value = _ratio(target["ratio"]) if target["over"] else _seconds(target["ratio"])
            lines.append(f"| {target['name']} | {target['source']} | {value} | {met} |")
    return "\n".join(lines) + "\n"


def readme_section(table: str, plot: str | None) -> str:
    """The README's performance section: the table, the main plot, how to regenerate."""
    image = f"![First call and whole process against depth]({plot})\n\n" if plot else ""
    return (
        f"{README_START}\n"
        f"{table}\n"
        f"{image}"
        "Regenerate with `nox -s bench-3.11` (full) or `nox -s bench-3.11 -- --quick`; "
        "the runner rewrites this section from `benchmarks/results/latest.json`.\n"
        f"{README_END}"
    )


def update_readme(readme: Path, section: str) -> bool:
    """Replace the text between the markers; False where the README has none."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[:start] + section + text[end + len(README_END) :])
    return True
