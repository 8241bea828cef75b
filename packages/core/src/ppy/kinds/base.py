"""What every entry kind shares: the contract's reading, field by field, and its errors.

An artifact entry is generic (``ppy.artifact.entry.Entry``: a kind, payload bytes, a
JSON metadata mapping), so that a third party's kind needs nothing from core.
The two kinds ppy's own plugins write, ``jax.export`` and ``xla.scalar``, are
contracts between a plugin and a runtime that never import each other; each
is declared once, in a module of its own (``ppy.kinds.jax_export``,
``ppy.kinds.xla_scalar``) -- its name, payload members, metadata fields and
calling-convention version, and the constants both sides need -- and both
sides go through ``to_metadata`` and ``read``, so that there is nothing to
keep in step by hand. This module holds what the kinds share: ``Kind``,
which checks the kind and the calling convention once for all of them,
``Fields``, which reads the metadata, and ``KindError``.

The calling convention is the version of the contract: how the payload is
laid out and what the metadata means. A runtime binds only the convention it
reads; anything else is refused with the remedy to rebuild, never guessed at.
A change to a kind's fields or payload bumps its ``CONVENTION``. The fields,
the members and the versions are documented in ``docs/kinds.md``.

This module is plain data: it imports no jax and executes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from ppy.artifact.entry import Entry
from ppy.spec import MeshSpec

__all__ = ["Fields", "Kind", "KindError", "member"]

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


class Kind:
    """A kind's contract: ``read`` checks the entry's kind and calling
    convention, then hands the fields to the kind's own ``_from_fields``.

    Each kind is a frozen dataclass deriving from this, with ``KIND`` and
    ``CONVENTION`` set and ``to_metadata``/``to_payload`` as the inverse of
    ``from_mapping``.
    """

    KIND: ClassVar[str]
    CONVENTION: ClassVar[int]

    @classmethod
    def read(cls, entry: Entry) -> Self:
        """The entry's contract, or ``KindError`` naming the first field that is wrong."""
        if entry.kind != cls.KIND:
            raise KindError(
                cls.KIND,
                "kind",
                f"is {entry.kind!r}, not {cls.KIND!r}",
                "bind it with its own runtime",
            )
        return cls.from_mapping(entry.metadata, entry.payload)

    @classmethod
    def from_mapping(cls, metadata: Mapping[str, Any], payload: Mapping[str, bytes]) -> Self:
        """The inverse of ``to_metadata`` and ``to_payload``, validated."""
        fields = Fields(cls.KIND, metadata)
        fields.convention("calling_convention", cls.CONVENTION)
        return cls._from_fields(fields, payload)

    @classmethod
    def _from_fields(cls, fields: Fields, payload: Mapping[str, bytes]) -> Self:
        raise NotImplementedError


def member(payload: Mapping[str, bytes], kind: str, name: str) -> bytes:
    data = payload.get(name)
    if not isinstance(data, bytes | bytearray):
        raise KindError(kind, f"payload.{name}", "is missing")
    return bytes(data)


class Fields:
    """Reads typed fields out of one entry's metadata, naming the field on failure."""

    def __init__(self, kind: str, metadata: Mapping[str, Any]) -> None:
        self.kind = kind
        self.metadata = metadata

    def get(self, key: str) -> Any:
        if key not in self.metadata:
            raise KindError(self.kind, f"metadata.{key}", "is missing")
        return self.metadata[key]

    def wrong(self, key: str, value: Any, expected: str) -> KindError:
        return KindError(self.kind, f"metadata.{key}", f"is {value!r}, expected {expected}")

    def text(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str):
            raise self.wrong(key, value, "a string")
        return value

    def mesh(self, key: str, *, required: bool) -> MeshSpec | None:
        value = self.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, Mapping) or set(value) != {"names", "sizes", "types"}:
            wanted = "a mesh {names, sizes, types}" if required else "null (one device)"
            raise self.wrong(key, value, wanted)
        try:
            return MeshSpec.from_json(value)
        except ValueError as error:
            raise KindError(self.kind, f"metadata.{key}", f"does not read: {error}") from None

    def integer(self, key: str) -> int:
        value = self.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.wrong(key, value, "an integer")
        return value

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            raise self.wrong(key, value, "true or false")
        return value

    def choice(self, key: str, choices: Mapping[str, Any]) -> str:
        value = self.get(key)
        if not isinstance(value, str) or value not in choices:
            raise self.wrong(key, value, f"one of {', '.join(choices)}")
        return value

    def texts(self, key: str, choices: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        value = self.get(key)
        ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        if ok and choices is not None:
            ok = all(v in choices for v in value)
        if not ok:
            what = "a list of strings" if choices is None else f"a list of {', '.join(choices)}"
            raise self.wrong(key, value, what)
        return tuple(value)

    def text_map(self, key: str) -> dict[str, str]:
        value = self.get(key)
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise self.wrong(key, value, "an object of strings")
        return dict(value)

    def convention(self, key: str, expected: int) -> int:
        version = self.get(key)
        if version != expected or isinstance(version, bool):
            raise KindError(
                self.kind,
                f"metadata.{key}",
                f"is {version!r}; this ppy reads calling convention {expected}",
            )
        return expected
