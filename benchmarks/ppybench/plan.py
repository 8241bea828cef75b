"""How much each case samples: the full run, the quick pass, and the device pass."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEVICE_QUICK", "FULL", "QUICK", "Plan"]


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
    #: Fresh processes of each floor mode (import jax; import jax and open the backend).
    floor_rounds: int
    #: Whether the start-up cases measure ``ppy run`` with an empty executable cache.
    cold: bool = True
    #: The cases run when ``--cases`` is not given; None: every case.
    cases: tuple[str, ...] | None = None


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
    floor_rounds=9,
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
    floor_rounds=1,
)

#: The pass for an accelerator, where every process that opens the device pays
#: for it (about 10-12 s a process on a TPU v5e, 8 s of it the chip's open), so
#: the count of processes is the budget. The accelerator issue's targets ask
#: for medians of at least 3 fresh processes; it names the deep model (40
#: layers), the whole process against the floor, and the per-call cost. So:
#: the floor, 40 layers without the cold mode (measured on CPU, not a target
#: here), the per-call case; 3 of each. About 31 processes opening the device
#: (benchmarks/README.md counts them): 6 to 7 minutes on a TPU v5e.
DEVICE_QUICK = replace(
    FULL,
    mode="device-quick",
    startup_rounds=3,
    depths=(40,),
    overhead_processes=3,
    overhead_calls=2000,
    xla_rounds=1,
    xla_calls=2000,
    build_rounds=1,
    build_sizes=(1,),
    floor_rounds=3,
    cold=False,
    cases=("floor", "depth", "overhead"),
)
