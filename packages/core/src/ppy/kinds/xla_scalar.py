"""``xla.scalar``: an ``@xla.jit`` function compiled to StableHLO, and the scalar facts.

The xla plugin writes it and the PJRT runtime reads it; neither imports the
other. docs/kinds.md documents the fields, the member and the convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from ppy.kinds.base import Fields, Kind, KindError, member

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MIN_NORMAL_FLOAT64",
    "READ_KINDS",
    "SCALAR_DTYPES",
    "XlaScalar",
]

#: The Python scalar types an ``xla.scalar`` function takes and returns, and
#: the dtype each is staged as.
SCALAR_DTYPES: Final[Mapping[str, str]] = {"float": "float64", "int": "int64", "bool": "bool"}
#: The range of a staged ``int``; a Python int outside it goes to the body.
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
#: The smallest normal float64. XLA's CPU runtime flushes subnormals to zero,
#: so a subnormal argument goes to the body and a subnormal result raises the
#: fallback flag.
MIN_NORMAL_FLOAT64: Final = 2.2250738585072014e-308
#: What a compiled body may read from its module when it runs, as
#: ``metadata.reads`` writes it (``kind:what``): a constant's value (``int:3``,
#: ``bool:True``, ``float:`` and its IEEE bits in hex), a compiled function
#: inlined (``function:h``), a builtin the module does not bind
#: (``builtin:abs``), ``math`` itself (``module:math``), or a name imported
#: from it (``math:sqrt``).
READ_KINDS: Final = frozenset({"int", "float", "bool", "function", "builtin", "module", "math"})


@dataclass(frozen=True)
class XlaScalar(Kind):
    """An ``@xla.jit`` function compiled to StableHLO by the xla plugin.

    The module's ``main`` takes its parameters as one ``tensor<Nxi64>``, a
    64-bit word each (an int as it is, a float's IEEE bits, a bool as 0 or
    1; no argument at all for a function of none), and returns one
    ``tensor<2xi64>``: the result's word, then the flag (0 or 1). When the
    flag is set the Python body is called instead. One input and one output
    make a call one transfer each way.

    ``reads`` are the module-level names the body reads when it runs, which
    the module folded in; the runtime compares them before a staged call,
    since a program can rebind any of them (``steps.STEP = 10``).
    """

    KIND: ClassVar[str] = "xla.scalar"
    #: ``stablehlo``: the module's text, UTF-8.
    MEMBERS: ClassVar[tuple[str, ...]] = ("stablehlo",)
    CONVENTION: ClassVar[int] = 3
    #: What ``metadata.outputs`` says, for a person reading the manifest.
    OUTPUTS: ClassVar[str] = (
        "one int64[2]: the result's 64 bits, then a flag: when 1 the Python body is called instead"
    )

    param_names: tuple[str, ...]
    #: ``float``, ``int`` or ``bool`` for each parameter.
    param_types: tuple[str, ...]
    result_type: str
    plugin_version: str
    stablehlo: bytes
    #: name -> ``kind:what`` (``READ_KINDS``), in name order.
    reads: Mapping[str, str] = field(default_factory=dict)

    def to_metadata(self) -> dict[str, Any]:
        return {
            "calling_convention": self.CONVENTION,
            "outputs": self.OUTPUTS,
            "param_names": list(self.param_names),
            "param_types": list(self.param_types),
            "plugin_version": self.plugin_version,
            "reads": dict(sorted(self.reads.items())),
            "result_type": self.result_type,
        }

    def to_payload(self) -> dict[str, bytes]:
        return {"stablehlo": self.stablehlo}

    @property
    def text(self) -> str:
        return self.stablehlo.decode("utf-8")

    @classmethod
    def _from_fields(cls, fields: Fields, payload: Mapping[str, bytes]) -> XlaScalar:
        names = fields.texts("param_names")
        types = fields.texts("param_types", SCALAR_DTYPES)
        if len(names) != len(types):
            raise KindError(
                cls.KIND,
                "metadata.param_types",
                f"has {len(types)} types for {len(names)} parameters (metadata.param_names)",
            )
        stablehlo = member(payload, cls.KIND, "stablehlo")
        try:
            stablehlo.decode("utf-8")
        except UnicodeDecodeError as error:
            raise KindError(cls.KIND, "payload.stablehlo", f"is not UTF-8 text ({error})") from None
        reads = fields.text_map("reads")
        for name, read in reads.items():
            if read.partition(":")[0] not in READ_KINDS or not name.isidentifier():
                raise fields.wrong(
                    "reads", {name: read}, f"name: one of {', '.join(sorted(READ_KINDS))}:..."
                )
        return cls(
            reads=reads,
            param_names=names,
            param_types=types,
            result_type=fields.choice("result_type", SCALAR_DTYPES),
            plugin_version=fields.text("plugin_version"),
            stablehlo=stablehlo,
        )
