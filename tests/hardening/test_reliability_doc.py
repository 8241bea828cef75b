"""docs/reliability.md shows the counts the hardening suites run, not numbers typed by hand."""

from __future__ import annotations

from tests.hardening.ledger import DOC, current, render


def test_the_reliability_table_matches_the_suites() -> None:
    assert current(DOC.read_text()) == render(), (
        "docs/reliability.md is out of date with tests/hardening; "
        "run `python -m tests.hardening.ledger --write`"
    )
