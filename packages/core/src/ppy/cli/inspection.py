"""``ppy inspect``: what an artifact holds, for people and for scripts.

The artifact has already been validated by ``read_artifact`` when these run;
they only render it. ``to_json`` is the manifest itself, so ``--json`` output
is what the file says, field for field (docs/artifact.md describes it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ppy.artifact.model import FORMAT, FORMAT_VERSION, Artifact
from ppy.artifact.write import manifest
from ppy.decision import Outcome

__all__ = ["render_text", "to_json"]

#: The order the tools read in: ppy, then what it staged with.
_TOOLS = {"ppy": 0, "jax": 1, "jaxlib": 2}


def to_json(artifact: Artifact) -> dict[str, Any]:
    """The artifact's manifest as a JSON-able dict."""
    return manifest(artifact)


def _table(rows: list[tuple[str, ...]], indent: str = "  ") -> Iterator[str]:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for *cols, last in rows:
        text = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
        yield f"{indent}{text}  {last}".rstrip()


def _lines(artifact: Artifact, path: Path) -> Iterator[str]:
    data = manifest(artifact)
    tools = sorted(data["written_by"].items(), key=lambda kv: (_TOOLS.get(kv[0], 9), kv[0]))
    written = ", ".join(f"{k} {v}" for k, v in tools) or "unknown"
    yield from _table(
        [
            ("artifact", str(path)),
            ("format", f"{FORMAT} version {FORMAT_VERSION}"),
            ("written by", written),
            ("project", artifact.project),
            ("config", f"sha256 {artifact.config_digest}"),
        ],
        indent="",
    )

    yield ""
    yield f"modules ({len(data['modules'])})"
    yield from _table([(m["name"], m["path"], f"sha256 {m['sha256']}") for m in data["modules"]])

    yield ""
    yield f"entries ({len(data['entries'])})"
    by_key = {e.key: e for e in artifact.entries}
    for item in data["entries"]:
        entry = by_key[item["module"], item["qualname"]]
        platforms = ", ".join(entry.platforms) or "no platform"
        yield f"  {entry.module}.{entry.qualname}  {entry.kind}  on {platforms}"
        yield f"    {entry.decision.signature if entry.decision else entry.signature}"
        yield from _table(
            [(m["member"], f"{m['size']} bytes", f"sha256 {m['sha256']}") for m in item["members"]],
            indent="    ",
        )
        if entry.decision is not None:
            yield f"    {entry.decision.outcome.value}: {entry.decision.reason}"

    stayed = [d for d in artifact.decisions if d.outcome is Outcome.STAYS]
    yield ""
    yield f"functions that stay ordinary calls ({len(stayed)})"
    for decision in stayed:
        yield f"  {decision.module}.{decision.qualname}  {decision.location}  [{decision.rule}]"
        yield f"    {decision.reason}"
        if decision.remedy:
            yield f"    remedy: {decision.remedy}"


def render_text(artifact: Artifact, path: Path) -> str:
    """A readable summary: the header, modules, each entry with its signature
    and members, and every function that stays with the reason why."""
    return "\n".join(_lines(artifact, path))
