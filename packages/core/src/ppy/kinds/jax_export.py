"""``jax.export``: a ``@jax.jit`` function serialized by ``jax.export``, variant by variant.

The jax plugin writes it from its worker and the PJRT runtime reads it;
neither imports the other. docs/kinds.md documents the fields, the members
and the convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ppy.kinds.base import Fields, Kind, KindError, member
from ppy.kinds.linearized import Linearized
from ppy.kinds.statics import key_of_json, reads
from ppy.spec import MeshSpec, TensorSpec

__all__ = ["Captured", "JaxExport", "Variant", "function_reads"]


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
    #: The output leaves the trace gave a weak type (``return x, 2.0``): a
    #: serialized export forgets it, and the runtime gives it back, so that
    #: ``c + bfloat16`` promotes as it does after jit.
    weak_outputs: tuple[int, ...] = ()

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
            "weak_outputs": list(self.weak_outputs),
        }


@dataclass(frozen=True)
class JaxExport(Kind):
    """A ``@jax.jit`` function serialized by ``jax.export`` in the jax plugin's worker.

    ``traced`` names the parameters whose values the exports take (as the
    leaves of their pytrees), in the signature's order, which is the order
    the exports take them in; ``static`` the ones each ``Variant`` was traced
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
    CONVENTION: ClassVar[int] = 9
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
    #: What the export assumes of its symbols (``"F <= N"``), as jax.export's
    #: symbolic constraints: a call where one does not hold is jit's.
    constraints: tuple[str, ...] = ()
    #: The platforms on which the build compiled each variant with symbolic
    #: dims and found it the program jit compiles (``ppy_plugin_jax.refinement``):
    #: the build machine's. On another platform of the export's list XLA
    #: would compile it unchecked, and such a variant is not served there.
    compared_on: tuple[str, ...] = ()
    #: The parameters the jit donates (``donate_argnums``): the run's
    #: executable donates them too, so a staged call deletes the arrays a
    #: jitted call would.
    donated: tuple[str, ...] = ()
    #: jit's own programs for the calls a recording saw under ``jax.grad``
    #: (``ppy.kinds.linearized``), each for one variant at concrete inputs.
    linearized: tuple[Linearized, ...] = ()

    def to_metadata(self) -> dict[str, Any]:
        return {
            "linearized": [g.to_json() for g in self.linearized],
            "donated": list(self.donated),
            "calling_convention": self.CONVENTION,
            "constraints": list(self.constraints),
            "compared_on": list(self.compared_on),
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
        for index, linearized in enumerate(self.linearized):
            payload.update(linearized.members(index))
        return payload

    @classmethod
    def _from_fields(cls, fields: Fields, payload: Mapping[str, bytes]) -> JaxExport:
        shardings = fields.text("in_shardings")
        if shardings not in cls.IN_SHARDINGS:
            raise KindError(
                cls.KIND,
                "metadata.in_shardings",
                f"is {shardings!r}; this ppy reads {' or '.join(cls.IN_SHARDINGS)} only",
            )
        mesh = fields.mesh("mesh", required=shardings == "mesh")
        static = fields.texts("static")
        raw = fields.get("variants")
        if not isinstance(raw, list) or not 1 <= len(raw) <= cls.MAX_VARIANTS:
            raise fields.wrong("variants", raw, f"a list of 1 to {cls.MAX_VARIANTS} variants")
        variants = tuple(
            _variant(item, index, set(static), payload) for index, item in enumerate(raw)
        )
        return cls(
            jax_version=fields.text("jax_version"),
            jaxlib_version=fields.text("jaxlib_version"),
            traced=fields.texts("traced"),
            static=static,
            variants=variants,
            captures=_captures(fields, "captures"),
            trace_config=fields.text_map("trace_config"),
            mesh=mesh,
            constraints=fields.texts("constraints"),
            compared_on=fields.texts("compared_on"),
            donated=fields.texts("donated"),
            linearized=_linearized(fields.metadata.get("linearized", []), len(variants), payload),
        )


_VARIANT_KEYS = frozenset(Variant.__dataclass_fields__) - {"export", "stablehlo"}


def _variant(item: Any, index: int, static: set[str], payload: Mapping[str, bytes]) -> Variant:
    kind = JaxExport.KIND
    where = f"variants[{index}]"
    if not isinstance(item, Mapping) or set(item) != _VARIANT_KEYS:
        raise KindError(kind, f"metadata.{where}", f"must have exactly {sorted(_VARIANT_KEYS)}")
    fields = Fields(kind, {f"{where}.{k}": v for k, v in item.items()})
    values = item["static"]
    if not isinstance(values, Mapping) or set(values) != static:
        raise KindError(
            kind, f"metadata.{where}.static", f"must give a value to each of {sorted(static)}"
        )
    for name, value in values.items():
        try:
            key_of_json(value)
            for _, found in reads(value):
                function_reads(found)
        except (ValueError, TypeError, KeyError) as error:
            raise KindError(kind, f"metadata.{where}.static.{name}", str(error)) from None
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
        export=member(payload, kind, export),
        stablehlo=member(payload, kind, text),
        weak_outputs=_indices(item["weak_outputs"], len(specs["outputs"]), where),
    )


def _linearized(value: Any, variants: int, payload: Mapping[str, bytes]) -> tuple[Linearized, ...]:
    """``metadata.linearized``: absent in an artifact built before it."""
    if not isinstance(value, list) or len(value) > Linearized.MAX:
        raise KindError(
            JaxExport.KIND, "metadata.linearized", f"must be a list of at most {Linearized.MAX}"
        )
    found = []
    for index, item in enumerate(value):
        try:
            linearized = Linearized.from_json(item, index, payload)
            if linearized.variant >= variants:
                raise ValueError("variant must be a variant's position")
        except ValueError as error:
            raise KindError(
                JaxExport.KIND, f"metadata.linearized[{index}]", f"does not read: {error}"
            ) from None
        found.append(linearized)
    return tuple(found)


def _indices(value: Any, outputs: int, where: str) -> tuple[int, ...]:
    """``weak_outputs``: distinct output positions, in order."""
    if not (
        isinstance(value, list)
        and all(type(i) is int and 0 <= i < outputs for i in value)
        and value == sorted(set(value))
    ):
        raise KindError(
            JaxExport.KIND,
            f"metadata.{where}.weak_outputs",
            f"must be increasing output positions below {outputs}",
        )
    return tuple(value)


def _captures(fields: Fields, key: str) -> tuple[Captured, ...]:
    """``metadata.captures``: the values the trace read, each with its path and fingerprint."""
    value = fields.get(key)
    try:
        return _captured_list(value)
    except ValueError as error:
        raise fields.wrong(key, error.args[0], "a list of {path, name, fingerprint}") from None


def function_reads(found: Mapping[str, Any]) -> tuple[Captured, ...]:
    """What a function among a variant's static values
    (``ppy.kinds.statics``) must be: its fingerprint, then what its trace
    read, each reached from the function. ``ValueError`` where it does not read."""
    digest = found.get("fingerprint")
    if set(found) != {"function", "fingerprint", "reads"} or not isinstance(digest, str):
        raise ValueError("a static function must have exactly function, fingerprint and reads")
    try:
        read = _captured_list(found["reads"])
    except ValueError:
        raise ValueError(
            "a static function's reads must be a list of {path, name, fingerprint}"
        ) from None
    return (Captured((), str(found["function"]), digest), *read)


def _captured_list(value: Any) -> tuple[Captured, ...]:
    """A JSON list of ``Captured``; ``ValueError`` with the first item that is not one."""
    found = []
    for item in value if isinstance(value, list) else [None]:
        if not (isinstance(item, Mapping) and set(item) == {"path", "name", "fingerprint"}):
            raise ValueError(item)
        path, name, digest = item["path"], item["name"], item["fingerprint"]
        if not (
            isinstance(path, list)
            and all(isinstance(step, str) for step in path)
            and isinstance(name, str)
            and isinstance(digest, str)
        ):
            raise ValueError(item)
        found.append(Captured(tuple(path), name, digest))
    return tuple(found)
