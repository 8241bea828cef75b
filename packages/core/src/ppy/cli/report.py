"""What the CLI prints for people: build lines, decision trails, plugin lists."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from ppy.decision import Decision, Outcome
from ppy.errors import UsageError
from ppy.registry import Registry

__all__ = ["build_lines", "explain", "nothing_staged", "plugin_lines", "summary"]


def _word(decision: Decision, plugins: Registry) -> str:
    if decision.outcome is Outcome.STAGED:
        plugin = plugins.by_name.get(decision.plugin or "")
        return getattr(plugin, "verb", "staged")
    return decision.outcome.value


def build_lines(decisions: Sequence[Decision], plugins: Registry) -> Iterator[str]:
    """One line per candidate: module, name, outcome, kind, signature, reason.

    Columns are aligned so a project's lines read as a table; the remedy of a
    function that stays goes on the line under it.
    """
    if not decisions:
        yield "no candidate functions (nothing decorated with a stageable decorator)"
        return
    rows = [
        (d.module, d.qualname, _word(d, plugins), d.kind or "-", _clipped(d.signature))
        for d in decisions
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for cols, decision in zip(rows, decisions, strict=True):
        text = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
        yield f"{text}  {decision.reason}"
        if decision.outcome is Outcome.STAYS and decision.remedy:
            yield f"    remedy: {decision.remedy}"
        if decision.output:
            for line in decision.output.rstrip().splitlines():
                yield f"    | {line}"


#: The most of a signature a build line shows: a pytree of a thousand leaves
#: would pad every line of the table to its width. ``ppy explain`` and
#: ``ppy inspect`` show it whole.
SIGNATURE_WIDTH = 120


def _clipped(signature: str) -> str:
    if len(signature) <= SIGNATURE_WIDTH:
        return signature
    return signature[: SIGNATURE_WIDTH - 5] + " ...)"


def summary(decisions: Sequence[Decision]) -> str:
    """``staged 2 of 3 candidate functions``; when none is, the first reason why."""
    staged = sum(d.outcome in (Outcome.STAGED, Outcome.REUSED) for d in decisions)
    line = f"staged {staged} of {len(decisions)} candidate functions"
    why = nothing_staged(decisions)
    return line if why is None else f"{line}: {why[0]}"


def nothing_staged(decisions: Sequence[Decision]) -> tuple[str, str] | None:
    """(why, remedy) when there are candidates and none is staged, else None.

    The reason is the most common first failing rule's, so a project that is
    not opted in hears that once, not once per function.
    """
    if not decisions or any(d.outcome is not Outcome.STAYS for d in decisions):
        return None
    rules = [d.rule for d in decisions]
    first = max(rules, key=rules.count)
    example = next(d for d in decisions if d.rule == first)
    return example.reason, example.remedy or "see `ppy explain NAME` for every rule"


def _matches(name: str, decision: Decision) -> bool:
    return name in (
        decision.qualname,
        f"{decision.module}.{decision.qualname}",
        f"{decision.module}:{decision.qualname}",
    )


def explain(name: str, target: Path) -> str:
    """The decision trail for ``name``: the built one when the artifact is current,
    else what the policy decides now (before any staging)."""
    from ppy.artifact.read import ArtifactError, read_artifact
    from ppy.build.freshness import staleness
    from ppy.build.pipeline import load_project
    from ppy.config import load_config

    project = load_project(load_config(target))
    decisions: Sequence[Decision] = project.decisions
    note = "from the policy (not built yet)"
    config = project.config
    if config.artifact.exists():
        try:
            artifact = read_artifact(config.artifact)
        except ArtifactError:
            artifact = None
        installed = {p.name: p for p in project.plugins.by_name.values()}
        stale = staleness(config, artifact, lambda _names: installed)
        if artifact is not None and stale is None:
            decisions, note = artifact.decisions, f"from the artifact {config.artifact}"
        elif stale:
            note = f"from the policy; the artifact is stale: {stale}"
    found = [d for d in decisions if _matches(name, d)]
    if not found:
        known = ", ".join(sorted({d.qualname for d in decisions})) or "none"
        raise UsageError(
            f"no candidate function named {name!r} in {config.root}",
            remedy=f"candidates are: {known}",
        )
    return "\n\n".join(_trail(d, note) for d in found)


def _trail(decision: Decision, note: str) -> str:
    lines = [
        f"{decision.module}.{decision.qualname}  ({decision.location})  {note}",
        f"  outcome:   {decision.outcome.value} [{decision.rule}]",
        f"  kind:      {decision.kind or '-'}",
        f"  signature: {decision.signature}",
        f"  reason:    {decision.reason}",
    ]
    if decision.remedy:
        lines.append(f"  remedy:    {decision.remedy}")
    lines.append("  trail:")
    for check in decision.trail:
        mark = "pass" if check.passed else "FAIL"
        lines.append(f"    [{mark}] {check.rule}: {check.detail}")
        if not check.passed and check.remedy:
            lines.append(f"           remedy: {check.remedy}")
    if decision.output:
        lines.append("  output:")
        lines.extend(f"    | {line}" for line in decision.output.rstrip().splitlines())
    return "\n".join(lines)


def plugin_lines(plugins: Registry, runtimes: Registry) -> Iterator[str]:
    for title, registry in (
        ("plugins (ppy.plugins)", plugins),
        ("runtimes (ppy.runtimes)", runtimes),
    ):
        yield f"{title}:"
        if not registry.installed:
            yield "  none installed"
        for item in registry.installed:
            dist = f"{item.distribution} {item.version}" if item.distribution else "?"
            if item.loaded:
                extra = ""
                if registry is plugins:
                    decorators = ", ".join(sorted(item.obj.decorators))
                    extra = f"  kind {item.obj.kind}  decorators {decorators}"
                yield f"  {item.name:<12} {dist:<28} loaded{extra}"
            else:
                yield f"  {item.name:<12} {dist:<28} FAILED: {item.error} (skipped)"
