"""What a run writes: the JSON record, the Markdown table, the README section.

The table is rendered from the JSON alone, so the committed record, the
table and the README's copy of it cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .measure import Comparison

__all__ = [
    "README_END",
    "README_START",
    "DeviceTable",
    "device_name",
    "device_tables",
    "readme_section",
    "readme_text",
    "render",
    "update_readme",
    "write_json",
]

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


def device_name(record: Mapping[str, Any]) -> str | None:
    """The accelerator a run measured (``TPU v5 lite (tpu, 1 device)``); None
    for a run on the CPU, or a record from before accelerators were recorded."""
    found = record.get("accelerator") or {}
    platform = found.get("platform")
    if platform in (None, "cpu"):
        return None
    count = found.get("device_count")
    devices = f", {count} device{'s' if count != 1 else ''}" if count else ""
    return f"{found.get('device_kind') or platform} ({platform}{devices})"


def _machine(record: Mapping[str, Any]) -> str:
    machine = record["machine"]
    host = f"{machine['cpu']}, {machine['cores']} cores"
    device = device_name(record)
    if device is None:
        return host
    settings = " ".join(f"{name}={value}" for name, value in record.get("settings", {}).items())
    return f"{device}{f' with {settings}' if settings else ''}; host {host}"


def _versions(record: Mapping[str, Any]) -> str:
    versions = record["versions"]
    libtpu = versions.get("libtpu")
    extra = f", libtpu {libtpu}" if libtpu and device_name(record) else ""
    return (
        f"Python {record['python']}, jax {versions.get('jax')}, "
        f"jaxlib {versions.get('jaxlib')}{extra}, ppy {versions.get('ppy-core')}"
    )


def _target_value(target: Mapping[str, Any]) -> str:
    if not target["over"]:
        return _seconds(target["ratio"])
    value = _ratio(target["ratio"])
    if "floor_s" in target:
        medians = target["medians"]
        value += (
            f" ({_seconds(medians[target['mode']])} and {_seconds(medians[target['over']])}; "
            f"floor {_seconds(target['floor_s'])})"
        )
    return value


def render(record: Mapping[str, Any]) -> str:
    """The Markdown table of a run's record: every comparison, then every target."""
    mode = str(record["mode"])
    lines = [
        f"{mode[:1].upper() + mode[1:]} run, {record['date']}: {_machine(record)}; "
        f"{_versions(record)}. Medians of fresh "
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
            value = _target_value(target)
            lines.append(f"| {target['name']} | {target['source']} | {value} | {met} |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DeviceTable:
    """The table of a run on an accelerator, for the README beside the CPU's."""

    #: The accelerator, as ``device_name`` gives it.
    device: str
    #: The results folder, relative to the repository (``benchmarks/results/tpu-v5e``).
    folder: str
    table: str


def device_tables(results: Path, root: Path) -> list[DeviceTable]:
    """The runs on an accelerator under ``results``: each folder whose
    ``latest.json`` names a device other than the CPU, in name order."""
    found = []
    for path in sorted(results.glob("*/latest.json")):
        record = json.loads(path.read_text())
        device = device_name(record)
        if device is None:
            continue
        folder = path.parent.resolve().relative_to(root.resolve()).as_posix()
        found.append(DeviceTable(device, folder, render(record)))
    return found


def readme_section(table: str, plot: str | None, devices: Sequence[DeviceTable] = ()) -> str:
    """The README's performance section: the table, the main plot, the tables
    of the runs on accelerators, how to regenerate."""
    image = f"![First call and whole process against depth]({plot})\n\n" if plot else ""
    beside = "".join(
        f"On an accelerator, {device.device}, from `{device.folder}/latest.json` "
        "(benchmarks/README.md says how it is run there):\n\n"
        f"{device.table}\n"
        for device in devices
    )
    sources = "`benchmarks/results/latest.json`"
    if devices:
        sources += " and each accelerator's `latest.json`"
    return (
        f"{README_START}\n"
        f"{table}\n"
        f"{image}"
        f"{beside}"
        "Regenerate with `nox -s bench-3.11` (full) or `nox -s bench-3.11 -- --quick`; "
        f"the runner rewrites this section from {sources}.\n"
        f"{README_END}"
    )


def readme_text(readme: Path) -> str | None:
    """The README's performance section as it stands, markers included; None without them."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return None
    return text[start : end + len(README_END)]


def update_readme(readme: Path, section: str) -> bool:
    """Replace the text between the markers; False where the README has none."""
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    readme.write_text(text[:start] + section + text[end + len(README_END) :])
    return True
