"""The signatures file's format: its fields, its limits and what it holds in memory.

``.ppy/signatures.json`` under the project root holds, for each function
(``module.qualname``), its distinct call signatures with their counts, and
the description the build derives from them::

    {
      "format": "ppy-signatures",
      "version": 1,
      "runs": 2,
      "functions": {
        "model.score": {
          "calls": 12,
          "description": {"x": "float32[B,4]"},
          "dims": {"B": [32, 128]},
          "signatures": [
            {"calls": 10, "inputs": {"x": {"array": "float32[32,4]"}}},
            {"calls": 2, "inputs": {"x": {"array": "float32[128,4]"}}}
          ]
        }
      }
    }

An input is ``{"array": "float32[32,4]"}`` (with ``"weak": true`` for a
weakly typed one, ``"sharded": true`` for one laid out over several
devices), ``{"static": value}`` (a JSON literal), ``{"python": "float"}`` (a
Python scalar), ``{"none": true}``, or ``{"nest": {...}}``: a pytree, its
plain lists, tuples and dicts as ``{"list": [...]}``, ``{"tuple": [...]}``
and ``{"dict": {...}}``, and any other node (a NamedTuple, an optax state, a
flax or equinox structure) as ``{"node": {"type": "module:qualname", "data":
..., "children": [...]}}``, its metadata as JSON (``{"tuple": [...]}`` for a
tuple, ``{"ref": "module:name"}`` for a class or sentinel the module holds).
A function defined inside another has one more input, ``"<closure>"``:
``{"closure": {"lr": {"static": 0.1}, "f": {"ref": "model:loss"}}}``, the
variables it reads of the function around it, each a literal or an object
a module names (``{"ref": ...}``).
A function called under ``jax.grad`` has ``"gradients"`` too: per
concrete call, the leaves of its traced inputs (``[dtype, [dims], weak]``
each), which of them carried a tangent, its static values, and each set of
output leaves the backward pass gave a cotangent (``ppy.kinds.linearized``)::

    "gradients": [{"inputs": {"x": [["float32", [4], false]]},
                   "perturbed": {"x": [true]}, "static": {},
                   "cotangents": [[0], [0, 2]]}]

``description`` and ``dims`` are written for the reader and recomputed from
the signatures on every write; the build reads only the signatures.

Reading and writing the file are ``ppy.record.signatures``'s; turning a
function's signatures into one description, ``ppy.record.generalise``'s.
Both read the format here, which imports neither.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ppy.annotations import DTYPE_NAMES
from ppy.kinds.keys import KEY_DTYPES
from ppy.snapshot import SIGNATURES, SIGNATURES_LIMIT

__all__ = [
    "ARRAY",
    "CLOSURE",
    "DTYPES",
    "FILE",
    "FORMAT",
    "MAX_BYTES",
    "MAX_CLOSURE",
    "MAX_DEPTH",
    "MAX_DIM",
    "MAX_FUNCTIONS",
    "MAX_LEAVES",
    "MAX_SIGNATURES",
    "NAME",
    "REF",
    "VERSION",
    "FunctionCalls",
    "Input",
    "Signatures",
    "parse_array",
]

#: Where the file goes, relative to the project root (its digest is part of
#: the configuration's, ``ppy.config``).
FILE: Final = SIGNATURES
FORMAT: Final = "ppy-signatures"
VERSION: Final = 1
#: Limits on what is read, as on an artifact's manifest.
MAX_BYTES: Final = SIGNATURES_LIMIT
MAX_FUNCTIONS: Final = 10_000
MAX_SIGNATURES: Final = 1_000
MAX_LEAVES: Final = 10_000
MAX_DEPTH: Final = 16
#: What a recorded array and a function's name look like.
ARRAY: Final = re.compile(r"[a-z][a-z0-9_]*(<[a-z]+>)?\[(\d+(,\d+)*)?\]")
NAME: Final = re.compile(r"[\w-]+(\.[\w<>-]+)*")
#: ``module:qualname`` of a class or object a node names.
REF: Final = re.compile(r"[\w-]+(\.[\w-]+)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

#: The dtypes a recorded array may have: those ``ppy.DType`` names, and the
#: narrow ones jax takes besides (jax 0.10 to 0.12, from ml_dtypes). Any other
#: name is no array a jitted call was passed, and the build could not describe it.
#: Typed PRNG keys (``key<fry>``) are among them: ``ppy.kinds.keys``.
DTYPES: Final = (
    DTYPE_NAMES
    | frozenset(KEY_DTYPES)
    | frozenset(
        {
            "int1",
            "int2",
            "int4",
            "uint1",
            "uint2",
            "uint4",
            "float4_e2m1fn",
            "float6_e2m3fn",
            "float6_e3m2fn",
            "float8_e3m4",
            "float8_e4m3",
            "float8_e4m3b11fnuz",
            "float8_e4m3fnuz",
            "float8_e5m2fnuz",
            "float8_e8m0fnu",
        }
    )
)

#: The largest dim an array has: XLA's are 64-bit signed integers.
MAX_DIM: Final = 2**63 - 1

#: The input that holds what a function reads of the function around it.
CLOSURE: Final = "<closure>"
#: The most variables a closure may hold.
MAX_CLOSURE: Final = 256

#: One input as recorded: a JSON object of the forms above.
Input = Mapping[str, Any]


@dataclass
class FunctionCalls:
    """One function's distinct signatures: canonical JSON of the inputs -> calls."""

    counts: dict[str, int] = field(default_factory=dict)
    #: Calls under ``jax.grad``: canonical JSON of their inputs, perturbed
    #: leaves and static values -> the cotangent patterns their backward
    #: passes had.
    gradients: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return sum(self.counts.values())

    def add(self, inputs: Mapping[str, Input], calls: int = 1) -> None:
        key = _canonical(inputs)
        self.counts[key] = self.counts.get(key, 0) + calls

    def signatures(self) -> list[tuple[dict[str, Input], int]]:
        """Each signature's inputs and calls, most called first, then by text."""
        ordered = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
        return [(json.loads(key), calls) for key, calls in ordered]

    def differentiated(self, call: Mapping[str, Any], cotangents: tuple[int, ...]) -> None:
        """Note a backward pass through a call (``{"inputs", "perturbed",
        "static"}``) that gave ``cotangents`` a cotangent."""
        self.gradients.setdefault(_canonical(call), set()).add(cotangents)

    def patterns(self, call: Mapping[str, Any]) -> int:
        """How many cotangent patterns the backward passes through ``call`` had."""
        return len(self.gradients.get(_canonical(call), ()))

    def gradient_calls(self) -> list[dict[str, Any]]:
        """Each differentiated call with its patterns, in a stable order."""
        return [
            {**json.loads(key), "cotangents": [list(p) for p in sorted(patterns)]}
            for key, patterns in sorted(self.gradients.items())
        ]


@dataclass
class Signatures:
    """The whole file: how many runs were recorded, and each function's calls."""

    runs: int = 0
    functions: dict[str, FunctionCalls] = field(default_factory=dict)

    def merge(self, other: Signatures) -> None:
        self.runs += other.runs
        for name, calls in other.functions.items():
            mine = self.functions.setdefault(name, FunctionCalls())
            for key, count in calls.counts.items():
                mine.counts[key] = mine.counts.get(key, 0) + count
            for key, patterns in calls.gradients.items():
                mine.gradients.setdefault(key, set()).update(patterns)

    def for_function(self, module: str, qualname: str) -> FunctionCalls | None:
        return self.functions.get(f"{module}.{qualname}")


def _canonical(inputs: Mapping[str, Input]) -> str:
    return json.dumps(inputs, sort_keys=True, separators=(",", ":"))


def parse_array(text: str) -> tuple[str, tuple[int, ...]]:
    """``float32[32,4]`` -> (``float32``, (32, 4))."""
    dtype, _, rest = text.partition("[")
    dims = rest.rstrip("]")
    return dtype, tuple(int(d) for d in dims.split(",")) if dims else ()
