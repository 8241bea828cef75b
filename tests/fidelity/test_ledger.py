"""docs/reliability.md counts the fidelity suite's cases as pytest collects them."""

from __future__ import annotations

from tests.fidelity.ledger import DOC, current, render


def test_the_fidelity_table_matches_the_suite() -> None:
    assert current(DOC.read_text()) == render(), (
        "docs/reliability.md is out of date with tests/fidelity; "
        "run `python -m tests.fidelity.ledger --write`"
    )
