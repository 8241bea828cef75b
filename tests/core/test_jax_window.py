"""Which jax may read an export another jax wrote: the window ppy enforces."""

from __future__ import annotations

import pytest
from ppy.kinds.jax_compat import outside_window


@pytest.mark.parametrize(
    ("written", "running"),
    [
        ("0.10.2", "0.10.2"),
        ("0.10.2", "0.12.0.1"),  # 4 months apart
        ("0.12.0", "0.12.0.1"),
        ("0.12.0.1", "0.13.0"),  # a release newer than the table: jax decides
        ("0.13.0", "0.13.1"),
        ("0.12.0.dev20261001", "0.12.0.1"),
        ("not a version", "0.12.0.1"),
    ],
)
def test_inside_the_window_nothing_is_said(written: str, running: str) -> None:
    assert outside_window(written, running) is None


def test_an_export_from_a_newer_jaxlib_is_refused() -> None:
    reason = outside_window("0.12.0.1", "0.10.2")
    assert reason is not None
    assert "0.12.0.1" in reason and "newer than this process's jaxlib 0.10.2" in reason


def test_an_export_more_than_six_months_older_is_outside_the_window() -> None:
    # 0.9.2 was released 2026-03-18, 0.12.0.1 on 2026-10-21: 217 days.
    reason = outside_window("0.9.2", "0.12.0.1")
    assert reason is not None and "backward-compatibility window" in reason
    assert "2026-03-18" in reason and "2026-10-21" in reason


def test_an_export_older_than_any_known_release_is_outside_the_window() -> None:
    reason = outside_window("0.4.30", "0.10.2")
    assert reason is not None and "backward-compatibility window" in reason


def test_an_unknown_newer_runtime_is_at_least_as_new_as_the_newest_known() -> None:
    assert outside_window("0.8.0", "0.14.0") is not None
