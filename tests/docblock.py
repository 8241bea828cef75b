"""A generated block of a docs page: found between its markers, checked, rewritten.

docs/reliability.md carries tables generated from the test suites
(``tests.hardening.ledger``, ``tests.fidelity.ledger``); each suite's ledger
renders its block, a test compares it with the page, and ``--write``
replaces it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["current", "main"]


def current(text: str, begin: str, end: str) -> str:
    """The block of ``text`` between ``begin`` and ``end``, markers included ("" when absent)."""
    start, stop = text.find(begin), text.find(end)
    return text[start : stop + len(end)] if start >= 0 and stop > start else ""


def main(doc: Path, begin: str, end: str, render: Callable[[], str], argv: list[str] | None) -> int:
    """Print the rendered block, or with ``--write`` put it in ``doc``."""
    parser = argparse.ArgumentParser(description=f"the generated block of {doc.name}")
    parser.add_argument("--write", action="store_true", help=f"rewrite {doc}")
    table = render()
    if not parser.parse_args(argv).write:
        print(table)
        return 0
    text = doc.read_text()
    block = current(text, begin, end)
    if not block:
        print(f"{doc}: no {begin!r} marker to replace", file=sys.stderr)
        return 1
    doc.write_text(text.replace(block, table))
    return 0
