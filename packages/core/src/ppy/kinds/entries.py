"""The entry kinds ppy ships: what a plugin writes and a runtime reads, in one place.

An artifact entry is generic (``ppy.artifact.entry.Entry``: a kind, payload bytes, a
JSON metadata mapping), so that a third party's kind needs nothing from core.
The two kinds ppy's own plugins write, ``jax.export`` and ``xla.scalar``, are
contracts between a plugin and a runtime that never import each other; each
is declared here once -- its name, payload members, metadata fields and
calling-convention version -- and both sides go through ``to_metadata`` and
``read``. A constant that both sides need (the scalar types, the int64
range) lives here too, so that there is nothing to keep in step by hand.

The calling convention is the version of the contract: how the payload is
laid out and what the metadata means. A runtime binds only the convention it
reads; anything else is refused with the remedy to rebuild, never guessed at.
A change to a kind's fields or payload bumps its ``CONVENTION``. The fields,
the members and the versions are documented in ``docs/kinds.md``.

This module is plain data: it imports no jax and executes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from ppy.artifact.entry import Entry
from ppy.spec import MeshSpec, TensorSpec

__all__ = [
    "Captured",
    "INT64_MAX",
    "INT64_MIN",
    "MIN_NORMAL_FLOAT64",
    "SCALAR_DTYPES",
    "JaxExport",
    "KindError",
    "Variant",
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

_REBUILD = "rebuild the artifact with `ppy build`"


class KindError(ValueError):
    """An entry that does not follow its kind's contract.

    ``field`` names what is wrong (``metadata.param_types``,
    ``payload.stablehlo``); a runtime turns the error into ``NotBound`` with
    the message, which carries the remedy.
    """

    def __init__(self, kind: str, field: str, problem: str, remedy: str = _REBUILD) -> None:
        self.kind = kind
        self.field = field
        self.problem = problem
        self.remedy = remedy
        super().__init__(f"{kind} entry: {field} {problem}; {remedy}")


def _check_kind(entry: Entry, kind: str) -> None:
    if entry.kind != kind:
        raise KindError(
            kind, "kind", f"is {entry.kind!r}, not {kind!r}", "bind it with its own runtime"
        )


def _member(payload: Mapping[str, bytes], kind: str, name: str) -> bytes:
    data = payload.get(name)
    if not isinstance(data, bytes | bytearray):
        raise KindError(kind, f"payload.{name}", "is missing")
    return bytes(data)


class _Fields:
    """Reads typed fields out of one entry's metadata, naming the field on failure."""

    def __init__(self, kind: str, metadata: Mapping[str, Any]) -> None:
        self.kind = kind
        self.metadata = metadata

    def _get(self, key: str) -> Any:
        if key not in self.metadata:
            raise KindError(self.kind, f"metadata.{key}", "is missing")
        return self.metadata[key]

    def _wrong(self, key: str, value: Any, expected: str) -> KindError:
        return KindError(self.kind, f"metadata.{key}", f"is {value!r}, expected {expected}")

    def text(self, key: str) -> str:
        value = self._get(key)
        if not isinstance(value, str):
            raise self._wrong(key, value, "a string")
        return value

    def mesh(self, key: str, *, required: bool) -> MeshSpec | None:
        value = self._get(key)
        if value is None and not required:
            return None
        if not isinstance(value, Mapping) or set(value) != {"names", "sizes", "types"}:
            wanted = "a mesh {names, sizes, types}" if required else "null (one device)"
            raise self._wrong(key, value, wanted)
        try:
            return MeshSpec.from_json(value)
        except ValueError as error:
            raise KindError(self.kind, f"metadata.{key}", f"does not read: {error}") from None

    def integer(self, key: str) -> int:
        value = self._get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong(key, value, "an integer")
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise self._wrong(key, value, "true or false")
        return value

    def choice(self, key: str, choices: Mapping[str, Any]) -> str:
        value = self._get(key)
        if not isinstance(value, str) or value not in choices:
            raise self._wrong(key, value, f"one of {', '.join(choices)}")
        return value

    def texts(self, key: str, choices: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        value = self._get(key)
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        if ok and choices is not None:
            ok = all(v in choices for v in value)
        if not ok:
            what = "a list of strings" if choices is None else f"a list of {', '.join(choices)}"
            raise self._wrong(key, value, what)
        return tuple(value)

    def text_map(self, key: str) -> dict[str, str]:
        value = self._get(key)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self._wrong(key, value, "an object of strings")
        return dict(value)

    def captures(self, key: str) -> tuple[Captured, ...]:
        value = self._get(key)
        found = []
        for item in value if isinstance(value, list) else [None]:
            if not (isinstance(item, Mapping) and set(item) == {"path", "name", "fingerprint"}):
                raise self._wrong(key, item, "a list of {path, name, fingerprint}")
            path, name, digest = item["path"], item["name"], item["fingerprint"]
            if not (
                isinstance(path, list)
                and all(isinstance(step, str) for step in path)
                and isinstance(name, str)
                and isinstance(digest, str)
            ):
                raise self._wrong(key, item, "a list of {path, name, fingerprint}")
            found.append(Captured(tuple(path), name, digest))
        return tuple(found)

    def convention(self, key: str, expected: int) -> int:
        version = self._get(key)
        if version != expected or isinstance(version, bool):
            raise KindError(
                self.kind,
                f"metadata.{key}",
                f"is {version!r}; this ppy reads calling convention {expected}",
            )
        return expected


@dataclass(frozen=True)
class XlaScalar:
    """An ``@xla.jit`` function compiled to StableHLO by the xla plugin.

    The module's ``main`` takes its parameters as one ``tensor<Nxi64>``, a
    64-bit word each (an int as it is, a float's IEEE bits, a bool as 0 or
    1; no argument at all for a function of none), and returns one
    ``tensor<2xi64>``: the result's word, then the flag (0 or 1). When the
    flag is set the Python body is called instead. One input and one output
    make a call one transfer each way.
    """

    KIND: ClassVar[str] = "xla.scalar"
    #: ``stablehlo``: the module's text, UTF-8.
    MEMBERS: ClassVar[tuple[str, ...]] = ("stablehlo",)
    CONVENTION: ClassVar[int] = 2
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

    def to_metadata(self) -> dict[str, Any]:
        return {
            "calling_convention": self.CONVENTION,
            "outputs": self.OUTPUTS,
            "param_names": list(self.param_names),
            "param_types": list(self.param_types),
            "plugin_version": self.plugin_version,
            "result_type": self.result_type,
        }

    def to_payload(self) -> dict[str, bytes]:
        return {"stablehlo": self.stablehlo}

    @property
    def text(self) -> str:
        return self.stablehlo.decode("utf-8")

    @classmethod
    def read(cls, entry: Entry) -> XlaScalar:
        """The entry's contract, or ``KindError`` naming the first field that is wrong."""
        _check_kind(entry, cls.KIND)
        return cls.from_mapping(entry.metadata, entry.payload)

    @classmethod
    def from_mapping(cls, metadata: Mapping[str, Any], payload: Mapping[str, bytes]) -> XlaScalar:
        """The inverse of ``to_metadata`` and ``to_payload``, validated."""
        fields = _Fields(cls.KIND, metadata)
        fields.convention("calling_convention", cls.CONVENTION)
        names = fields.texts("param_names")
        types = fields.texts("param_types", SCALAR_DTYPES)
        if len(names) != len(types):
            raise KindError(
                cls.KIND,
                "metadata.param_types",
                f"has {len(types)} types for {len(names)} parameters (metadata.param_names)",
            )
        stablehlo = _member(payload, cls.KIND, "stablehlo")
        try:
            stablehlo.decode("utf-8")
        except UnicodeDecodeError as error:
            raise KindError(cls.KIND, "payload.stablehlo", f"is not UTF-8 text ({error})") from None
        return cls(
            param_names=names,
            param_types=types,
            result_type=fields.choice("result_type", SCALAR_DTYPES),
            plugin_version=fields.text("plugin_version"),
            stablehlo=stablehlo,
        )


@dataclass(frozen=True)
class Captured:
    """A value the export's trace read from the program, as it was at build time."""

    #: How to reach it from the staged function (``ppy.kinds.fingerprint.resolve``).
    path: tuple[str, ...]
    #: What to call it: ``helper.K``.
    name: str
    #: ``ppy.kinds.fingerprint.fingerprint`` of the value.
    fingerprint: str

    def to_json(self) -> dict[str, Any]:
        return {"path": list(self.path), "name": self.name, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class Variant:
    """One export of a ``jax.export`` entry: the function for one value of each
    static parameter (a function with none has one variant).

    The export is flat: it takes the leaves of the traced parameters'
    pytrees, in order, as positional arrays, and returns the leaves of the
    output. ``in_tree`` is the ``ppy.kinds.pytrees.structure`` of the traced
    parameters (a tuple of them, in signature order) and ``out_tree`` the
    ``ppy.kinds.pytrees.recipe`` of the output.
    """

    #: Static parameter name -> its value (a JSON literal).
    static: Mapping[str, Any]
    in_tree: str
    out_tree: Any
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    calling_convention_version: int
    nr_devices: int
    uses_shape_polymorphism: bool
    export: bytes
    stablehlo: bytes

    @staticmethod
    def members(index: int) -> tuple[str, str]:
        """The payload members of the variant at ``index``: its export and its text."""
        return ("export", "stablehlo") if index == 0 else (f"export.{index}", f"stablehlo.{index}")

    def to_json(self) -> dict[str, Any]:
        return {
            "static": dict(self.static),
            "in_tree": self.in_tree,
            "out_tree": self.out_tree,
            "inputs": [s.to_json() for s in self.inputs],
            "outputs": [s.to_json() for s in self.outputs],
            "calling_convention_version": self.calling_convention_version,
            "nr_devices": self.nr_devices,
            "uses_shape_polymorphism": self.uses_shape_polymorphism,
        }


@dataclass(frozen=True)
class JaxExport:
    """A ``@jax.jit`` function serialized by ``jax.export`` in the jax plugin's worker.

    ``traced`` names the parameters whose values the exports take (as the
    leaves of their pytrees), ``static`` the ones each ``Variant`` was traced
    for one value of. ``calling_convention_version`` in a variant is jax's
    own (of the export), ``calling_convention`` this contract's.
    ``captures`` are the values the trace read from the program's globals,
    and ``trace_config`` the jax configuration it ran under: the staged path
    is taken only while both still hold.
    """

    KIND: ClassVar[str] = "jax.export"
    #: Per variant (``Variant.members``): ``export``, the
    #: ``jax.export.Exported.serialize()`` bytes; ``stablehlo``, the module's
    #: text, UTF-8, for people and tools (the runtime reads ``export``).
    MEMBERS: ClassVar[tuple[str, ...]] = ("export", "stablehlo")
    CONVENTION: ClassVar[int] = 4
    #: How the inputs are laid out: on one device, or over ``mesh``.
    IN_SHARDINGS: ClassVar[tuple[str, ...]] = ("replicated", "mesh")
    #: The most variants one entry holds (the product of its static choices).
    MAX_VARIANTS: ClassVar[int] = 16

    jax_version: str
    jaxlib_version: str
    traced: tuple[str, ...]
    static: tuple[str, ...]
    variants: tuple[Variant, ...]
    captures: tuple[Captured, ...] = ()
    #: jax config name -> the value's repr, as the trace saw it.
    trace_config: Mapping[str, str] = field(default_factory=dict)
    #: The mesh a sharded export was made for; None for one device.
    mesh: MeshSpec | None = None

    def to_metadata(self) -> dict[str, Any]:
        return {
            "calling_convention": self.CONVENTION,
            "captures": [c.to_json() for c in self.captures],
            "trace_config": dict(sorted(self.trace_config.items())),
            "in_shardings": "replicated" if self.mesh is None else "mesh",
            "mesh": None if self.mesh is None else self.mesh.to_json(),
            "jax_version": self.jax_version,
            "jaxlib_version": self.jaxlib_version,
            "traced": list(self.traced),
            "static": list(self.static),
            "variants": [v.to_json() for v in self.variants],
        }

    def to_payload(self) -> dict[str, bytes]:
        payload: dict[str, bytes] = {}
        for index, variant in enumerate(self.variants):
            export, text = Variant.members(index)
            payload[export] = variant.export
            payload[text] = variant.stablehlo
        return payload

    @classmethod
    def read(cls, entry: Entry) -> JaxExport:
        """The entry's contract, or ``KindError`` naming the first field that is wrong."""
        _check_kind(entry, cls.KIND)
        return cls.from_mapping(entry.metadata, entry.payload)

    @classmethod
    def from_mapping(cls, metadata: Mapping[str, Any], payload: Mapping[str, bytes]) -> JaxExport:
        """The inverse of ``to_metadata`` and ``to_payload``, validated."""
        fields = _Fields(cls.KIND, metadata)
        fields.convention("calling_convention", cls.CONVENTION)
        shardings = fields.text("in_shardings")
        if shardings not in cls.IN_SHARDINGS:
            raise KindError(
                cls.KIND,
                "metadata.in_shardings",
                f"is {shardings!r}; this ppy reads {' or '.join(cls.IN_SHARDINGS)} only",
            )
        mesh = fields.mesh("mesh", required=shardings == "mesh")
        static = fields.texts("static")
        raw = fields._get("variants")
        if not isinstance(raw, list) or not 1 <= len(raw) <= cls.MAX_VARIANTS:
            raise fields._wrong("variants", raw, f"a list of 1 to {cls.MAX_VARIANTS} variants")
        variants = tuple(
            _variant(item, index, set(static), payload) for index, item in enumerate(raw)
        )
        return cls(
            jax_version=fields.text("jax_version"),
            jaxlib_version=fields.text("jaxlib_version"),
            traced=fields.texts("traced"),
            static=static,
            variants=variants,
            captures=fields.captures("captures"),
            trace_config=fields.text_map("trace_config"),
            mesh=mesh,
        )


_VARIANT_KEYS = frozenset(Variant.__dataclass_fields__) - {"export", "stablehlo"}


def _variant(item: Any, index: int, static: set[str], payload: Mapping[str, bytes]) -> Variant:
    kind = JaxExport.KIND
    where = f"variants[{index}]"
    if not isinstance(item, Mapping) or set(item) != _VARIANT_KEYS:
        raise KindError(kind, f"metadata.{where}", f"must have exactly {sorted(_VARIANT_KEYS)}")
    fields = _Fields(kind, {f"{where}.{k}": v for k, v in item.items()})
    values = item["static"]
    if not isinstance(values, Mapping) or set(values) != static:
        raise KindError(
            kind, f"metadata.{where}.static", f"must give a value to each of {sorted(static)}"
        )
    specs: dict[str, tuple[TensorSpec, ...]] = {}
    for name in ("inputs", "outputs"):
        raw = item[name]
        try:
            specs[name] = tuple(TensorSpec.from_json(s) for s in raw)
        except (TypeError, ValueError, KeyError) as error:
            raise KindError(kind, f"metadata.{where}.{name}", f"does not read: {error}") from None
    export, text = Variant.members(index)
    return Variant(
        static=dict(values),
        in_tree=fields.text(f"{where}.in_tree"),
        out_tree=item["out_tree"],
        inputs=specs["inputs"],
        outputs=specs["outputs"],
        calling_convention_version=fields.integer(f"{where}.calling_convention_version"),
        nr_devices=fields.integer(f"{where}.nr_devices"),
        uses_shape_polymorphism=fields.flag(f"{where}.uses_shape_polymorphism"),
        export=_member(payload, kind, export),
        stablehlo=_member(payload, kind, text),
    )
