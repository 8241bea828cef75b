"""Decisions: what the build does with each candidate function, and why.

A ``Decision`` is produced by the policy engine (``ppy.build.policy``) and then
settled by the build once a plugin has staged, reused or failed the function.
Every rule that was evaluated is in ``trail``, so ``ppy explain`` can show the
whole reasoning, not just the rule that decided.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

__all__ = ["Check", "Decision", "Outcome", "nothing_staged"]


class Outcome(StrEnum):
    #: Policy allows staging; the build has not staged it yet.
    ALLOWED = "allowed"
    #: Staged by the plugin in this build ("exported", "compiled" on build lines).
    STAGED = "staged"
    #: Staged by an earlier build and carried over unchanged.
    REUSED = "reused"
    #: Left as the ordinary call.
    STAYS = "stays"


@dataclass(frozen=True)
class Check:
    """One rule evaluated for one function."""

    rule: str
    passed: bool
    detail: str
    remedy: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "passed": self.passed,
            "detail": self.detail,
            "remedy": self.remedy,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Check:
        return cls(str(data["rule"]), bool(data["passed"]), str(data["detail"]), data.get("remedy"))


@dataclass(frozen=True)
class Decision:
    module: str
    qualname: str
    location: str
    outcome: Outcome
    #: The rule that decided: the first failing check, or "staged"/"reused"/
    #: "export-failed" once the build has settled the decision.
    rule: str
    reason: str
    remedy: str | None
    #: The plugin that handles the decorator, and the entry kind it writes.
    plugin: str | None
    kind: str | None
    signature: str
    trail: tuple[Check, ...] = ()
    #: Output the user's code printed while it was staged, when that failed.
    output: str = ""

    @property
    def stays(self) -> bool:
        return self.outcome is Outcome.STAYS

    def settle(
        self,
        outcome: Outcome,
        rule: str,
        reason: str,
        remedy: str | None = None,
        *,
        signature: str | None = None,
        output: str = "",
    ) -> Decision:
        """The decision once the build has acted on it; the trail records the step."""
        check = Check(rule, outcome is not Outcome.STAYS, reason, remedy)
        return replace(
            self,
            outcome=outcome,
            rule=rule,
            reason=reason,
            remedy=remedy,
            signature=signature or self.signature,
            trail=(*self.trail, check),
            output=output,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "qualname": self.qualname,
            "location": self.location,
            "outcome": self.outcome.value,
            "rule": self.rule,
            "reason": self.reason,
            "remedy": self.remedy,
            "plugin": self.plugin,
            "kind": self.kind,
            "signature": self.signature,
            "trail": [c.to_json() for c in self.trail],
            "output": self.output,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            module=str(data["module"]),
            qualname=str(data["qualname"]),
            location=str(data["location"]),
            outcome=Outcome(data["outcome"]),
            rule=str(data["rule"]),
            reason=str(data["reason"]),
            remedy=data.get("remedy"),
            plugin=data.get("plugin"),
            kind=data.get("kind"),
            signature=str(data["signature"]),
            trail=tuple(Check.from_json(c) for c in data.get("trail", ())),
            output=str(data.get("output", "")),
        )


def nothing_staged(decisions: Sequence[Decision]) -> tuple[str, str] | None:
    """(why, remedy) when there are candidates and none is staged, else None.

    ``ppy build``'s summary line and ``ppy run``'s ``run.nothing_staged``
    warning say the same, from the decisions alone. The reason is the most
    common first failing rule's, so a project that is not opted in hears that
    once, not once per function.
    """
    if not decisions or any(d.outcome is not Outcome.STAYS for d in decisions):
        return None
    rules = [d.rule for d in decisions]
    first = max(rules, key=rules.count)
    example = next(d for d in decisions if d.rule == first)
    return example.reason, example.remedy or "see `ppy explain NAME` for every rule"
