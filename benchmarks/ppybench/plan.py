"""How much each case samples: the full run, and the quick pass."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["FULL", "QUICK", "Plan"]


@dataclass(frozen=True)
class Plan:
    """Counts for one run. The start-up rounds are fresh processes per mode."""

    mode: str
    startup_rounds: int
    depths: tuple[int, ...]
    overhead_processes: int
    overhead_calls: int
    xla_rounds: int
    xla_limit: int
    xla_terms: int
    xla_calls: int
    build_rounds: int
    build_sizes: tuple[int, ...]


#: The start-up issue asks for medians of at least 9 interleaved fresh processes.
FULL = Plan(
    mode="full",
    startup_rounds=9,
    depths=(10, 40, 80),
    overhead_processes=5,
    overhead_calls=20000,
    xla_rounds=5,
    xla_limit=300000,
    xla_terms=3000000,
    xla_calls=20000,
    build_rounds=5,
    build_sizes=(1, 10, 50),
)

#: The same cases on the same inputs, with fewer samples.
QUICK = replace(
    FULL,
    mode="quick",
    startup_rounds=1,
    overhead_processes=1,
    overhead_calls=2000,
    xla_rounds=1,
    xla_calls=2000,
    build_rounds=1,
    build_sizes=(1, 10),
)
