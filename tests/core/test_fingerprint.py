"""Fingerprints of captured values: equal content, equal print; any change, another."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ppy.kinds.fingerprint import Unreadable, fingerprint, resolve

from tests.conftest import models


class Pair(NamedTuple):
    a: float
    b: float


@dataclasses.dataclass(frozen=True)
class Config:
    scale: float
    names: tuple[str, ...]


def make_scaler(factor: float):
    def scale(x):
        return x * factor

    return scale


SAME = [
    (3, 3),
    (0.1 + 0.2, 0.30000000000000004),
    ("relu", "relu"),
    (np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32)),
    ({"w": [1, 2], "b": (3,)}, {"w": [1, 2], "b": (3,)}),
    (Pair(1.0, 2.0), Pair(1.0, 2.0)),
    (Config(2.0, ("x",)), Config(2.0, ("x",))),
    (make_scaler(2.0), make_scaler(2.0)),
    (functools.partial(max, 1), functools.partial(max, 1)),
    (np.float32, np.float32),
]

DIFFERENT = [
    (3, 3.0),
    (True, 1),
    (0.0, -0.0),
    (np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float64)),
    (np.arange(4, dtype=np.float32), np.arange(4, dtype=np.float32).reshape(2, 2)),
    (np.zeros(3), np.array([0.0, 0.0, 1e-300])),
    ({"w": 1, "b": 2}, {"b": 2, "w": 1}),
    ((1.0, 2.0), Pair(1.0, 2.0)),
    (Config(2.0, ("x",)), Config(3.0, ("x",))),
    (make_scaler(2.0), make_scaler(3.0)),
    ([1, 2], (1, 2)),
]


@pytest.mark.parametrize(("one", "other"), SAME)
def test_equal_content_has_one_fingerprint(one: object, other: object) -> None:
    assert fingerprint(one) == fingerprint(other)


@pytest.mark.parametrize(("one", "other"), DIFFERENT)
def test_any_difference_changes_the_fingerprint(one: object, other: object) -> None:
    assert fingerprint(one) != fingerprint(other)


def test_what_cannot_be_read_is_refused_with_a_reason() -> None:
    with pytest.raises(Unreadable, match=r"cannot compare values of type _thread\.lock"):
        fingerprint(threading.Lock())
    with pytest.raises(Unreadable, match="over the 64-byte limit"):
        fingerprint(np.zeros(100), limit=64)
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(Unreadable, match="nests too deep"):
        fingerprint(loop)


K = 3.0


def reads_k(x):
    return x * K


def test_a_path_is_followed_through_globals_and_attributes() -> None:
    assert resolve(reads_k, ("K",)) == 3.0
    assert resolve(reads_k, ("np", "pi")) == np.pi
    assert resolve(reads_k, ("len",)) is len  # a builtin
    assert resolve(make_scaler(5.0), ("<defaults>",))[1:] == (None, None, (5.0,))
    with pytest.raises(AttributeError):  # the program has no such name
        resolve(reads_k, ("nothing_here",))


def test_a_stateless_instance_is_read_with_its_class_data() -> None:
    class Sentinel:
        def __repr__(self) -> str:
            return "Missing"

    class Config:
        scale = 2.0

    assert fingerprint(Sentinel()) == fingerprint(Sentinel())
    before = fingerprint(Config())
    Config.scale = 3.0
    assert fingerprint(Config()) != before


#: Two bare sentinels, as libraries make them (jax's ``core.no_axis_name``).
FIRST = object()
SECOND = object()


def test_a_bare_sentinel_is_told_apart_by_the_global_that_holds_it() -> None:
    """What code asks of a bare ``object()`` is which one it is, so one
    fingerprints as the module global it is, not as an empty value; one
    that no module holds cannot be compared."""
    import jax

    assert fingerprint(FIRST) == fingerprint(FIRST) != fingerprint(SECOND)
    # jax.vmap's function holds jax's own; another vmap of it holds the same.
    batched = (jax.vmap(reads_k), jax.vmap(reads_k))
    assert fingerprint(batched[0]) == fingerprint(batched[1])
    with pytest.raises(Unreadable, match="a bare object"):
        fingerprint(object())


def test_an_object_of_plain_settings_is_read_by_its_values() -> None:
    """jaxtyping's config: flags in ``__dict__``, set by ``update``."""

    class Settings:
        def __init__(self) -> None:
            self.disable = False
            self.stack = "0"

        def update(self, disable: bool) -> None:
            self.disable = disable

    first, second = Settings(), Settings()
    assert fingerprint(first) == fingerprint(second)
    second.update(True)
    assert fingerprint(first) != fingerprint(second)

    class Computed(Settings):
        @property
        def scale(self) -> float:  # what it gives is not in its state
            return 2.0

    with pytest.raises(Unreadable):
        fingerprint(Computed())


@pytest.mark.models  # absl comes with optax
def test_absl_flags_are_compared_by_their_parsed_values() -> None:
    """jax's dp-sgd example reads ``FLAGS.l2_norm_clip`` and ``_BATCH_SIZE.value``
    in its jitted update: the same values print the same, another value or
    flags not parsed yet do not."""
    from absl import flags

    def defined() -> tuple[flags.FlagValues, flags.FlagHolder[float]]:
        values = flags.FlagValues()
        holder = flags.DEFINE_float("clip", 1.5, "clip norm", flag_values=values)
        flags.DEFINE_integer("batch", 32, "batch size", flag_values=values)
        return values, holder

    one, clip = defined()
    with pytest.raises(Unreadable, match="cannot be read yet"):
        fingerprint(clip)
    one(["program"])
    two, _ = defined()
    two(["program"])
    assert fingerprint(one) == fingerprint(two)
    three, other_clip = defined()
    three(["program", "--batch=64"])
    assert fingerprint(one) != fingerprint(three)
    assert fingerprint(clip) == fingerprint(other_clip)  # the holder's own flag is the same
    four, changed = defined()
    four(["program", "--clip=2.5"])
    assert fingerprint(clip) != fingerprint(changed)


def test_two_lambdas_of_one_function_with_one_closure_differ() -> None:
    """Both are ``pick.<locals>.<lambda>`` and read ``k``: only their code
    tells a kernel jit(partial(gram, kernel)) was traced with from the other."""

    def pick(k: float, which: bool):
        return (lambda x: x * k) if which else (lambda x: x + k)

    assert fingerprint(pick(2.0, True)) == fingerprint(pick(2.0, True))
    assert fingerprint(pick(2.0, True)) != fingerprint(pick(2.0, False))


@models  # protobuf comes with flax (orbax-checkpoint)
def test_a_protobuf_message_is_compared_by_its_content() -> None:
    """An onnx ModelProto is a protobuf message: two of the same content have
    one fingerprint, another content another, and one over the limit none."""
    from google.protobuf import struct_pb2

    def message(scale: float, name: str = "w") -> struct_pb2.Struct:
        found = struct_pb2.Struct()
        found.update({"scale": scale, "name": name})
        return found

    assert fingerprint(message(0.5)) == fingerprint(message(0.5))
    assert fingerprint(message(0.5)) != fingerprint(message(0.25))
    assert fingerprint(message(0.5)) != fingerprint(message(0.5, "b"))
    with pytest.raises(Unreadable, match=r"Struct of \d+ bytes, over the 16-byte limit"):
        fingerprint(message(0.5, "x" * 64), limit=16)


def test_functions_of_one_line_and_one_bytecode_differ_by_their_constants_and_names() -> None:
    """Lambdas written on one line share their qualname, line and bytecode:
    what they compute differs in their constants and the names they read,
    and so do their fingerprints (a static argument is keyed by it)."""
    doubled, tripled = lambda x: x * 2, lambda x: x * 3
    sine, cosine = lambda x: np.sin(x), lambda x: np.cos(x)
    assert doubled.__code__.co_code == tripled.__code__.co_code
    assert fingerprint(doubled) != fingerprint(tripled)
    assert fingerprint(sine) != fingerprint(cosine)
    again = lambda x: x * 2  # noqa: E731
    assert fingerprint(again) != fingerprint(doubled)  # another line


# The allow-list (issue 55): a class by its attributes, an instance by every
# attribute it holds, an array by its dtype's name and weak type.


def test_a_class_is_compared_by_its_data_not_its_name() -> None:
    """``cls.scale`` read through a classmethod: the class is what is captured."""

    class Settings:
        scale = 2.0

        @classmethod
        def factor(cls) -> float:
            return cls.scale

    before = fingerprint(Settings)
    method = fingerprint(Settings.factor)
    Settings.scale = 3.0
    assert fingerprint(Settings) != before
    assert fingerprint(Settings.factor) != method


def test_a_class_is_compared_by_its_callables_by_code() -> None:
    """``act = staticmethod(jnp.tanh)`` replaced by ``jnp.sin`` under the main guard."""
    import jax.numpy as jnp

    class Layer:
        act = staticmethod(jnp.tanh)

        def apply(self, x: float) -> float:
            return x * 2

    layer = Layer()
    before, instance = fingerprint(Layer), fingerprint(layer)
    Layer.act = staticmethod(jnp.sin)
    assert fingerprint(Layer) != before and fingerprint(layer) != instance
    Layer.act = staticmethod(jnp.tanh)
    assert fingerprint(Layer) == before
    Layer.apply = lambda self, x: x * 3  # type: ignore[method-assign]
    assert fingerprint(Layer) != before


def test_an_inherited_attribute_counts() -> None:
    class Base:
        scale = 2.0

        @property
        def doubled(self) -> float:
            return self.scale * 2

    class Child(Base):
        pass

    before = fingerprint(Child)
    Base.scale = 3.0
    assert fingerprint(Child) != before
    Base.scale = 2.0
    assert fingerprint(Child) == before
    Base.doubled = property(lambda self: self.scale * 3)  # type: ignore[method-assign]
    assert fingerprint(Child) != before


def test_a_class_that_holds_itself_is_followed_once() -> None:
    """A class attribute holding the class, a method whose closure holds
    ``__class__`` (``super()``): each class is written once per fingerprint."""

    class Node:
        def __init__(self) -> None:
            super().__init__()

    Node.self = Node  # type: ignore[attr-defined]
    assert fingerprint(Node) == fingerprint(Node)
    assert fingerprint(Node()) == fingerprint(Node())


@dataclasses.dataclass
class Options:
    k: float = 1.0
    boost = 1.0  # not a field: a class attribute

    def factor(self) -> float:
        return self.k * self.boost


def test_a_dataclass_instance_is_compared_by_every_attribute_and_its_class() -> None:
    set_later, plain = Options(), Options()
    before = fingerprint(plain)
    set_later.boost = 5.0  # an attribute set on the instance, not a field
    assert fingerprint(set_later) != before
    Options.boost = 3.0  # the class attribute that is no field
    try:
        assert fingerprint(Options()) != before
    finally:
        Options.boost = 1.0
    assert fingerprint(Options()) == before


class Scaled(NamedTuple):
    a: float
    unit = 2.0  # a class attribute, no field


def test_a_namedtuples_class_attribute_counts() -> None:
    before = fingerprint(Scaled(1.0))
    Scaled.unit = 3.0  # type: ignore[misc]
    try:
        assert fingerprint(Scaled(1.0)) != before
    finally:
        Scaled.unit = 2.0  # type: ignore[misc]


def test_an_instance_with_slots_or_structured_state_is_compared() -> None:
    """Comparable now where every attribute is: slots, and a ``__dict__``
    holding more than plain values."""

    class Slotted:
        __slots__ = ("scale", "unset")

        def __init__(self, scale: float) -> None:
            self.scale = scale

    class Holding:
        def __init__(self, items: list[float]) -> None:
            self.items = items

    assert fingerprint(Slotted(2.0)) == fingerprint(Slotted(2.0)) != fingerprint(Slotted(3.0))
    assert fingerprint(Holding([1.0])) == fingerprint(Holding([1.0]))
    assert fingerprint(Holding([1.0])) != fingerprint(Holding([2.0]))


def _ml_dtypes_of(size: int) -> list[np.dtype[Any]]:
    import ml_dtypes

    found = {
        np.dtype(kind)
        for name in dir(ml_dtypes)
        if isinstance(kind := getattr(ml_dtypes, name), type) and issubclass(kind, np.generic)
    }
    return sorted((d for d in found if d.itemsize == size), key=lambda d: d.name)


def test_arrays_of_dtypes_with_one_layout_differ_by_dtype_name() -> None:
    """int4 and uint4 are both ``<V1`` to numpy: zeros of each hold one byte
    pattern, and a trace of each computes another type."""
    for size in (1, 2):
        dtypes = _ml_dtypes_of(size)
        prints = {d.name: fingerprint(np.zeros(3, d)) for d in dtypes}
        assert len(set(prints.values())) == len(dtypes), prints
        assert len({fingerprint(d) for d in dtypes}) == len(dtypes)


def test_a_weak_scalar_differs_from_a_strong_one() -> None:
    """``jnp.asarray(2.0)`` is weakly typed: ``x_bf16 * s`` stays bfloat16,
    where a float32 ``s`` of the same bytes makes it float32."""
    import jax.numpy as jnp

    weak, strong = jnp.asarray(2.0), jnp.float32(2.0)
    assert weak.dtype == strong.dtype and bytes(np.asarray(weak)) == bytes(np.asarray(strong))
    assert fingerprint(weak) == fingerprint(jnp.asarray(2.0))
    assert fingerprint(weak) != fingerprint(strong)


def test_a_kind_not_on_the_list_is_refused_with_its_name() -> None:
    """A list subclass holds its items where no attribute shows them."""

    class Items(list[int]):
        pass

    with pytest.raises(Unreadable, match=r"cannot compare values of type .*Items"):
        fingerprint(Items([1, 2]))
    with pytest.raises(Unreadable, match="cannot compare values of type"):
        fingerprint(x for x in ())


def test_the_allow_list_is_the_one_the_docs_give() -> None:
    """docs/reliability.md's table names each kind ``KINDS`` compares, in order."""
    from pathlib import Path

    from ppy.kinds.fingerprint import KINDS

    page = (Path(__file__).parents[2] / "docs" / "reliability.md").read_text()
    section = page.split("## What a fingerprint compares", 1)[1].split("\n## ", 1)[0]
    rows = [line[2:].split(" | ")[0] for line in section.splitlines() if line.startswith("| ")]
    assert rows[2:] == [kind.name for kind in KINDS]  # after the header and its rule


_ATTRIBUTES = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True),
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(_ATTRIBUTES, _ATTRIBUTES)
def test_classes_and_instances_compare_equal_exactly_where_their_attributes_do(
    one: dict[str, object], other: dict[str, object]
) -> None:
    """A class of the program made of either set of attributes, and an
    instance holding them, has the other's fingerprint only where every
    attribute's value does (-0.0 and nan included: compared as written)."""
    same = fingerprint(dict(sorted(one.items()))) == fingerprint(dict(sorted(other.items())))
    first, second = type("Made", (), dict(one)), type("Made", (), dict(other))
    assert (fingerprint(first) == fingerprint(second)) == same
    held, holding = first(), second()
    vars(held).update(one)
    vars(holding).update(other)
    assert (fingerprint(held) == fingerprint(holding)) == same


def test_a_bound_method_of_a_wrapped_function_is_compared_with_what_it_is_bound_to() -> None:
    """flax's ``model.apply``: the method reads ``__wrapped__`` through to its
    function's, and the module it is bound to holds the configuration."""

    def decorated(fn: Any) -> Any:
        @functools.wraps(fn)
        def inner(*args: Any) -> Any:
            return fn(*args)

        return inner

    @dataclasses.dataclass
    class Model:
        scale: float

        @decorated
        def apply(self, x: float) -> float:
            return x * self.scale

    assert fingerprint(Model(1.0).apply) == fingerprint(Model(1.0).apply)
    assert fingerprint(Model(1.0).apply) != fingerprint(Model(3.0).apply)
