"""The other issues' goals, checked against a run's comparisons.

A target is a ratio of two modes' medians in one comparison, and a bound;
or, where ``over`` is empty, one mode's median itself, in seconds; or, where
``above_floor`` is set, the ratio of the two medians less the floor (a
process that imports jax, opens the backend and exits, measured in the same
run: ``floor``). The runner prints which are met; nothing fails on a missed
one, since timing on a shared machine is no test.

The CPU targets (``TARGETS``) were set for the CPU; a run on an accelerator
is held to the accelerator issue's own (``DEVICE_TARGETS``), which are
written against the floor since on a TPU every process pays about 10 s to
open the chip before the program's first line (``for_platform``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .floor import FLOOR, FLOOR_LABEL, FLOOR_MODE
from .measure import Comparison
from .programs import MAIN_BLOCK, RECORDED, SHARDED, UNANNOTATED
from .xla_scalar import TRIVIAL_VS_JAX

__all__ = ["DEVICE_TARGETS", "TARGETS", "Target", "check", "for_platform"]

STARTUP = "start-up below jit + persistent cache"
WARM = "warm start"
RECORD = "recording"
RUNTIME = "runtime"
XLA = "plugin-xla"
XLA_SPEED = "xla calls and loops"
PROGRAMS = "real programs"
SHARDING = "sharded exports"
EDGES = "edges"
DEVICE = "accelerators"

_OPS = {"<": operator.lt, "<=": operator.le, ">=": operator.ge}


@dataclass(frozen=True)
class Target:
    """``mode``'s median over ``over``'s, in comparison (case, label), against ``limit``."""

    source: str
    case: str
    label: str
    mode: str
    over: str
    op: str
    limit: float
    #: Fresh processes per mode the source asks the figure to rest on.
    min_rounds: int = 0
    #: Compare the medians less the floor's (the time above what any jax
    #: process pays), where the run measured the floor.
    above_floor: bool = False

    @property
    def name(self) -> str:
        if not self.over:
            return f"{self.case}, {self.label}: {self.mode} {self.op} {self.limit * 1e6:g} µs"
        if self.above_floor:
            return (
                f"{self.case}, {self.label}: ({self.mode} - floor) / ({self.over} - floor) "
                f"{self.op} {self.limit:g}"
            )
        return f"{self.case}, {self.label}: {self.mode} / {self.over} {self.op} {self.limit:g}"


def _startup_targets(depths: Iterable[int]) -> list[Target]:
    found = [
        Target(
            STARTUP,
            "page example",
            "whole process",
            "ppy run warm",
            "python + jax cache",
            "<",
            1,
            9,
        )
    ]
    for layers in depths:
        case = f"deep model, {layers} layers"
        found.append(
            Target(STARTUP, case, "whole process", "ppy run warm", "python + jax cache", "<", 1, 9)
        )
        if layers >= 40:
            found.append(
                Target(STARTUP, case, "whole process", "ppy run warm", "python", "<=", 0.6, 9)
            )
        found.append(Target(STARTUP, case, "first call", "ppy run warm", "python", "<=", 0.2, 9))
        found.append(Target(RUNTIME, case, "first call", "ppy run warm", "python", "<=", 0.3))
    return found


#: ppy run --warm, whole process: below python, and below jax's persistent cache.
_WARM_TARGETS = (
    Target(WARM, "page example", "whole process", "ppy run --warm", "python", "<=", 0.3, 9),
    Target(
        WARM,
        "page example",
        "whole process",
        "ppy run --warm",
        "python + jax cache",
        "<=",
        1 / 3,
        9,
    ),
    Target(
        WARM, "deep model, 80 layers", "whole process", "ppy run --warm", "python", "<=", 0.25, 9
    ),
    Target(WARM, "optax training", "whole process", "ppy run --warm", "python", "<=", 0.3, 9),
    *(
        Target(WARM, "per-call overhead", label, "staged (--warm)", "staged", "<=", 1.1)
        for label in ("small input (8x4)", "medium input (64x256)", "10-leaf params tree")
    ),
)

#: ppy record against python, whole process; and the unannotated optax
#: program, staged from one recording, held to the annotated one's targets.
_RECORDING = (
    Target(RECORD, RECORDED, "whole process", "ppy record", "python", "<=", 1.05, 9),
    Target(RECORD, UNANNOTATED, "recording", "ppy record", "python", "<=", 1.05, 9),
    Target(RECORD, UNANNOTATED, "whole process", "ppy run warm", "python", "<", 0.6, 9),
    Target(RECORD, UNANNOTATED, "first call", "ppy run warm", "python", "<", 0.2, 9),
    # A program written as jax's own examples are, recorded as written.
    Target(RECORD, MAIN_BLOCK, "recording", "ppy record", "python", "<=", 1.05, 9),
    Target(RECORD, MAIN_BLOCK, "whole process", "ppy run warm", "python", "<=", 0.6, 9),
    Target(RECORD, MAIN_BLOCK, "first call", "ppy run warm", "python", "<=", 0.2, 9),
    Target(RECORD, MAIN_BLOCK, "whole process", "ppy run --warm", "python", "<=", 0.3, 9),
)

#: The edges' costs: a cold run (an empty executable cache) next to python
#: in every case that runs one, a call that falls back next to a jitted
#: call, and a cold build with verify-sizes next to one without.
_COLD_CASES = (
    "page example",
    *(f"deep model, {layers} layers" for layers in (10, 40, 80)),
    "optax training",
    "nothing staged",
    SHARDED,
)
_EDGES = (
    *(
        Target(EDGES, case, "whole process", "ppy run cold", "python", "<=", 1.02, 9)
        for case in _COLD_CASES
    ),
    Target(EDGES, "per-call overhead", "fallback (refused input)", "staged", "jitted", "<=", 1.5),
    *(
        Target(
            EDGES,
            f"ppy build, {n} functions",
            "build",
            "cold, no verify-sizes",
            "cold",
            ">=",
            1 / 1.5,
        )
        for n in (1, 10, 50)
    ),
)

TARGETS: tuple[Target, ...] = (
    *_startup_targets((10, 40, 80)),
    *_WARM_TARGETS,
    *_RECORDING,
    *_EDGES,
    Target(RUNTIME, "per-call overhead", "small input (8x4)", "staged", "jitted", "<=", 1.3),
    Target(RUNTIME, "per-call overhead", "medium input (64x256)", "staged", "jitted", "<=", 1.3),
    Target(PROGRAMS, "per-call overhead", "10-leaf params tree", "staged", "jitted", "<=", 1.1),
    Target(PROGRAMS, "optax training", "whole process", "ppy run warm", "python", "<", 0.6, 9),
    Target(PROGRAMS, "optax training", "first call", "ppy run warm", "python", "<", 0.2, 9),
    Target(PROGRAMS, "nothing staged", "whole process", "ppy run warm", "python", "<", 1.0, 9),
    Target(SHARDING, SHARDED, "whole process", "ppy run warm", "python + jax cache", "<", 1.0, 9),
    *(
        Target(XLA, "xla scalar", key, "CPython", "staged", ">=", 15)
        for key in ("collatz, longest chain below 300000", "Leibniz series, 3000000 terms")
    ),
    Target(
        XLA_SPEED, "xla scalar", "collatz, longest chain below 300000", "staged", "numba", "<=", 2
    ),
    Target(XLA_SPEED, "xla scalar", "Leibniz series, 3000000 terms", "staged", "numba", "<=", 1),
    Target(XLA_SPEED, "xla scalar", TRIVIAL_VS_JAX, "staged", "", "<=", 10e-6),
    Target(XLA_SPEED, "xla scalar", TRIVIAL_VS_JAX, "staged", "jitted jax", "<=", 1.0),
)


def _device_targets(depths: Iterable[int]) -> list[Target]:
    found = []
    for layers in depths:
        case = f"deep model, {layers} layers"
        found += [
            Target(DEVICE, case, "first call", "ppy run warm", "python", "<=", 0.15, 3),
            Target(DEVICE, case, "whole process", "ppy run warm", "python", "<=", 0.2, 3, True),
            Target(
                DEVICE,
                case,
                "whole process",
                "ppy run warm",
                "python + jax cache",
                "<=",
                0.3,
                3,
                True,
            ),
        ]
    return found


#: The accelerator issue's targets, for a run whose jax backend is not the
#: CPU: medians of at least 3 fresh processes; the whole process above the
#: floor measured in the same run.
DEVICE_TARGETS: tuple[Target, ...] = (
    *_device_targets((10, 40, 80)),
    *(
        Target(DEVICE, "per-call overhead", label, "staged", "jitted", "<=", 1.05, 3)
        for label in ("small input (8x4)", "medium input (64x256)", "10-leaf params tree")
    ),
)


def for_platform(platform: str | None) -> tuple[Target, ...]:
    """The targets a run on ``platform`` (jax's backend; None: not known) is held to."""
    return TARGETS if platform in (None, "cpu") else DEVICE_TARGETS


def _floor(by_key: dict[tuple[str, str], Comparison]) -> float | None:
    comparison = by_key.get((FLOOR, FLOOR_LABEL))
    if comparison is None or FLOOR_MODE not in comparison.samples:
        return None
    return comparison.medians[FLOOR_MODE]


def check(
    comparisons: Sequence[Comparison], targets: Iterable[Target] = TARGETS
) -> list[dict[str, object]]:
    """Each target whose comparisons this run measured, with its ratio and
    verdict; a target above the floor also names the figures that bound it."""
    by_key = {(c.case, c.label): c for c in comparisons}
    floor = _floor(by_key)
    found: list[dict[str, object]] = []
    for target in targets:
        comparison = by_key.get((target.case, target.label))
        sides = (target.mode, target.over) if target.over else (target.mode,)
        if comparison is None or any(side not in comparison.samples for side in sides):
            continue
        if target.above_floor and floor is None:
            continue
        medians = comparison.medians
        extra: dict[str, object] = {}
        if target.above_floor:
            assert floor is not None
            ratio = (medians[target.mode] - floor) / (medians[target.over] - floor)
            extra = {
                "floor_s": floor,
                "medians": {side: medians[side] for side in sides},
            }
        elif target.over:
            ratio = comparison.ratio(target.mode, target.over)
        else:
            ratio = medians[target.mode]
        rounds = min(len(comparison.samples[side]) for side in sides)
        found.append(
            {
                "name": target.name,
                "source": target.source,
                "case": target.case,
                "label": target.label,
                "mode": target.mode,
                "over": target.over,
                "op": target.op,
                "limit": target.limit,
                "ratio": ratio,
                "met": bool(_OPS[target.op](ratio, target.limit)),
                "rounds": rounds,
                "enough_rounds": rounds >= target.min_rounds,
                **extra,
            }
        )
    return found
