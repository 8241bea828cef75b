"""What the CLI prints for people: build lines, decision trails, plugin lists."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ppy.decision import Decision, Outcome, nothing_staged
from ppy.registry import Installed, Registry

if TYPE_CHECKING:
    from ppy.commands.explain import Explained

__all__ = ["build_lines", "explained", "plugin_lines", "summary"]


def _word(decision: Decision, plugins: Registry) -> str:
    if decision.outcome is Outcome.STAGED:
        plugin = plugins.by_name.get(decision.plugin or "")
        return getattr(plugin, "verb", "staged")
    return decision.outcome.value


def build_lines(
    decisions: Sequence[Decision], plugins: Registry, *, width: int | None = None
) -> Iterator[str]:
    """One line per candidate: module, name, outcome, kind, signature, reason.

    Columns are aligned so a project's lines read as a table; the remedy of a
    function that stays goes on the line under it.

    ``width`` is the terminal's, where the lines go to one: a signature is
    then shortened so its line fits (``shortened``), and a last line says
    where the whole one is. Without it (a pipe, a file, CI) every line is
    whole, so what a log or a README quotes is what the build printed.
    """
    if not decisions:
        yield "no candidate functions (nothing decorated with a stageable decorator)"
        return
    heads = [(d.module, d.qualname, _word(d, plugins), d.kind or "-") for d in decisions]
    widths = [max(len(head[i]) for head in heads) for i in range(4)]
    whole = [d.signature for d in decisions]
    signatures, column = whole, min(max(map(len, whole)), SIGNATURE_WIDTH)
    if width is not None:
        used = sum(widths) + 2 * len(widths)  # the four columns and their gaps
        reasons = min(max(len(d.reason) for d in decisions), REASON_ROOM)
        room = max(width - used - 2 - reasons, MIN_SIGNATURE)
        signatures = [shortened(s, room) for s in whole]
        column = max(map(len, signatures))
    for head, signature, decision in zip(heads, signatures, decisions, strict=True):
        cols = [c.ljust(w) for c, w in zip(head, widths, strict=True)]
        yield "  ".join([*cols, signature.ljust(column), decision.reason])
        if decision.outcome is Outcome.STAYS and decision.remedy:
            yield f"    remedy: {decision.remedy}"
        if decision.output:
            for line in decision.output.rstrip().splitlines():
                yield f"    | {line}"
    if signatures != whole:
        yield f"(signatures cut to fit {width} columns: `ppy explain NAME` shows one whole)"


#: Signatures up to this long set the width of the table's signature column;
#: a longer one (a pytree of a thousand leaves) runs past it rather than pad
#: every line of the table to its width.
SIGNATURE_WIDTH = 120
#: On a terminal: the room kept for the reason after the signature (a
#: staged function's ``exported for cpu``; a longer reason wraps as prose
#: does), and the least of a signature shown, however narrow the terminal.
REASON_ROOM = 24
MIN_SIGNATURE = 32
#: The brackets a signature nests its parameters, dims and outputs in.
_OPEN, _CLOSE = "([{", ")]}"


def shortened(signature: str, room: int) -> str:
    """``signature`` in at most ``room`` characters, cut where a reader misses
    least: the parameters between the first ones and the last
    (``f(a: float32[4], ..., x: float32[B,4]) -> float32[B]``), then the last
    one too, then a tuple of outputs (``-> (...)``); what follows
    (``[recorded: 2 calls in 2 runs]``) stays. Where even that does not fit,
    the end is cut (`` ...``)."""
    if len(signature) <= room:
        return signature
    parts = _split(signature)
    if parts is not None:
        name, parameters, tail = parts
        for end in (tail, _short_outputs(tail)):
            kept = [
                [*parameters[:n], "...", parameters[-1]] for n in range(len(parameters) - 2, -1, -1)
            ]
            for shown in [parameters, *kept, ["..."]]:
                text = f"{name}({', '.join(shown)}){end}"
                if len(text) <= room:
                    return text
    return signature[: max(room - 4, 0)] + " ..."


def _split(signature: str) -> tuple[str, list[str], str] | None:
    """``f(a, b) -> c`` as ``("f", ["a", "b"], " -> c")``; None where the
    brackets do not pair up."""
    start = signature.find("(")
    end = _closing(signature, start) if start >= 0 else None
    if end is None:
        return None
    parameters: list[str] = []
    depth, begin = 0, start + 1
    for i in range(start + 1, end):
        char = signature[i]
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif depth == 0 and signature.startswith(", ", i):
            parameters.append(signature[begin:i])
            begin = i + 2
    parameters.append(signature[begin:end])
    return signature[:start], parameters, signature[end + 1 :]


def _closing(text: str, start: int) -> int | None:
    """The index of the bracket that closes the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    return None


def _short_outputs(tail: str) -> str:
    """`` -> (a, b, c) [recorded: ...]`` as `` -> (...) [recorded: ...]``."""
    arrow = " -> ("
    if not tail.startswith(arrow):
        return tail
    end = _closing(tail, len(arrow) - 1)
    return tail if end is None else f"{arrow}...){tail[end + 1 :]}"


def summary(decisions: Sequence[Decision]) -> str:
    """``staged 2 of 3 candidate functions``; when none is, the first reason why."""
    staged = sum(d.outcome in (Outcome.STAGED, Outcome.REUSED) for d in decisions)
    line = f"staged {staged} of {len(decisions)} candidate functions"
    why = nothing_staged(decisions)
    return line if why is None else f"{line}: {why[0]}"


def explained(found: Explained) -> str:
    """``ppy explain``'s text: each decision's trail, with where it comes from."""
    return "\n\n".join(_trail(d, found.note) for d in found.decisions)


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
    """Each installed plugin and runtime: name, distribution and version, and
    whether it loaded; one table, its columns as wide as their longest entry
    (a third party's kind, ``tabulate.table``, is longer than ppy's own)."""
    sections = (("plugins (ppy.plugins)", plugins), ("runtimes (ppy.runtimes)", runtimes))
    items = [item for _, registry in sections for item in registry.installed]
    names = max((len(item.name) for item in items), default=0)
    dists = max((len(_distribution(item)) for item in items), default=0)
    for title, registry in sections:
        yield f"{title}:"
        if not registry.installed:
            yield "  none installed"
        for item in registry.installed:
            head = f"  {item.name.ljust(names)}  {_distribution(item).ljust(dists)}"
            if not item.loaded:
                yield f"{head}  FAILED: {item.error} (skipped)"
            elif registry is plugins:
                decorators = ", ".join(sorted(item.obj.decorators))
                yield f"{head}  loaded  kind {item.obj.kind}  decorators {decorators}"
            else:
                yield f"{head}  loaded"


def _distribution(item: Installed) -> str:
    return f"{item.distribution} {item.version}" if item.distribution else "?"
