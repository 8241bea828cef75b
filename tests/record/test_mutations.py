"""The mutation harness: every value a staged function's trace read, changed
between the build and the run, along every path a trace reads one by.

A recorded program's staged call is faithful only while each value its trace
read is the one the build saw. Here each jitted function of a small program
(``MODEL``, a module and a project module beside it, imported for real)
reads one value along one access path: a global, a closure, a default, a
partial's argument, a class's attribute (data, a callable, through a
classmethod, ``getattr`` or a closure), an instance's attribute (a field or
not, a NamedTuple's class attribute), a module's attribute (a global, a
closure, an import in the trace), of a weak or strong type, of a dtype whose
bytes another shares, -0.0, nan. The build's captures are taken as the
export worker takes them, then hypothesis draws another value for that place
(``tests/support/mutations.py``), and the runtime's own check says whether
the staged call would be served. Served, what the export computed (jit's
output before the change) must be what jit computes now, traced afresh, bit
for bit; otherwise the check must name why it takes jit's path. Each case
also makes one change known to alter jit's output (its witness), which must
take jit's path: that shows the trace reads the place.

The same changes made for real, between a recording and its run, are
``test_live.py``'s
``test_what_a_trace_reads_through_classes_closures_and_partials_is_compared``
and ``fidelity/test_captured.py``'s
``test_classes_instances_and_weak_scalars_set_under_the_main_guard``: there
``ppy run`` prints what python prints, cold and warm, taking jit's path with
the reason this check gives.

Everything runs in one process, without a build per change: the file takes
seconds. ``test_every_access_path_is_covered`` prints the paths covered
(``pytest -rA`` shows it).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.record import test_live
from tests.support import mutations
from tests.support.mutations import (
    FAMILIES,
    NEGATIVE_NAN,
    Site,
    attribute,
    cell,
    changes,
    defaults,
    outcome,
    partial_argument,
    verdict,
)

#: A project module the program reads settings from.
SETTINGS = """
SCALE = 2.0
"""

#: One jitted function per access path, each reading one value besides its input.
MODEL = """
import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import mutations_settings as settings

SCALE = 2.0
TABLE = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
WEAK = jnp.asarray(2.0)
CODES = np.array([1, -2, 3, -4], dtype=ml_dtypes.int4)
HALF = np.array([1.5, -2.25, 0.5, 3.0], dtype=ml_dtypes.bfloat16)
ZERO = 0.0
NAN = float("nan")


def scaled(scale, x):
    return x * scale


def helper(x, scale=2.0):
    return x * scale


class Config:
    scale = 2.0
    act = staticmethod(jnp.tanh)

    @classmethod
    def apply(cls, x):
        return cls.act(x) * cls.scale


@dataclasses.dataclass
class Layer:
    width: int = 2
    gain = 2.0  # not a field: a class attribute


class Pair(NamedTuple):
    a: float
    b: float
    scale = 2.0  # not a field: a class attribute


LAYER = Layer()
LAYER.bias = 1.0
PAIR = Pair(1.0, 2.0)


@jax.jit
def by_global(x):
    return x * SCALE


@jax.jit
def by_global_array(x):
    return x * TABLE


def closing(scale):
    @jax.jit
    def by_closure(x):
        return x * scale

    return by_closure


by_closure = closing(2.0)


@jax.jit
def by_default(x):
    return helper(x)


by_partial = jax.jit(functools.partial(scaled, 2.0))


@jax.jit
def by_class_data(x):
    return x * Config.scale


@jax.jit
def by_classmethod(x):
    return Config.apply(x)


@jax.jit
def by_getattr(x):
    return x * getattr(Config, "scale")


def holding_class(config):
    @jax.jit
    def by_class_in_closure(x):
        return x * config.scale

    return by_class_in_closure


by_class_in_closure = holding_class(Config)


@jax.jit
def by_class_callable(x):
    return Config.act(x)


@jax.jit
def by_instance_attribute(x):
    return x * LAYER.bias + LAYER.width


@jax.jit
def by_instance_class_attribute(x):
    return x * LAYER.gain


@jax.jit
def by_namedtuple_class_attribute(x):
    return x * PAIR.scale + PAIR.a


@jax.jit
def by_module_attribute(x):
    return x * settings.SCALE


def holding_module():
    import mutations_settings as local

    @jax.jit
    def by_module_in_closure(x):
        return x * local.SCALE

    return by_module_in_closure


by_module_in_closure = holding_module()


@jax.jit
def by_module_imported_in_trace(x):
    import mutations_settings as local

    return x * local.SCALE


@jax.jit
def by_weak(x):
    return x * WEAK


by_weak_partial = jax.jit(functools.partial(scaled, WEAK))


@jax.jit
def by_int4(x):
    return x + jnp.asarray(CODES).astype(jnp.int8)


@jax.jit
def by_bfloat16(x):
    return x * HALF


@jax.jit
def by_zero(x):
    return x * ZERO


@jax.jit
def by_nan(x):
    return x + NAN
"""

FLOATS = np.array([0.5, -1.0, 2.0, 3.5], np.float32)


@dataclass(frozen=True)
class Case:
    """One function, the place its trace reads a value, and how to call it."""

    #: The jitted function's name in ``MODEL``.
    function: str
    #: The access paths and sorts of value it covers (``FAMILIES``).
    families: tuple[str, ...]
    #: The place, found in the imported module.
    site: Callable[[ModuleType], Site]
    #: A change known to alter what jit computes, given the value there.
    witness: Callable[[Any], Any]
    #: Its input.
    inputs: Callable[[], tuple[Any, ...]] = lambda: (jnp.asarray(FLOATS),)


def _function(module: ModuleType, name: str) -> Any:
    return getattr(module, name).__wrapped__


def _times_three(value: Any) -> Any:
    return value * 3


CASES = {
    "global": Case("by_global", ("global",), lambda m: attribute(m, "SCALE"), _times_three),
    "global-array": Case(
        "by_global_array", ("global",), lambda m: attribute(m, "TABLE"), _times_three
    ),
    "closure": Case(
        "by_closure",
        ("closure",),
        lambda m: cell(_function(m, "by_closure"), "scale"),
        _times_three,
    ),
    "default": Case("by_default", ("default",), lambda m: defaults(m.helper, 0), _times_three),
    "partial-argument": Case(
        "by_partial",
        ("partial argument",),
        lambda m: partial_argument(m.by_partial.__wrapped__, 0),
        _times_three,
    ),
    "class-data": Case(
        "by_class_data",
        ("class attribute (data)",),
        lambda m: attribute(m.Config, "scale"),
        _times_three,
    ),
    "class-data-by-classmethod": Case(
        "by_classmethod",
        ("class attribute (data)",),
        lambda m: attribute(m.Config, "scale"),
        _times_three,
    ),
    "class-data-by-getattr": Case(
        "by_getattr",
        ("class attribute (data)",),
        lambda m: attribute(m.Config, "scale"),
        _times_three,
    ),
    "class-data-in-closure": Case(
        "by_class_in_closure",
        ("class attribute (data)", "closure"),
        lambda m: attribute(m.Config, "scale"),
        _times_three,
    ),
    "class-callable": Case(
        "by_class_callable",
        ("class attribute (callable)",),
        lambda m: attribute(m.Config, "act"),
        lambda _: jnp.sin,
    ),
    "class-callable-by-classmethod": Case(
        "by_classmethod",
        ("class attribute (callable)",),
        lambda m: attribute(m.Config, "act"),
        lambda _: jnp.sin,
    ),
    "instance-attribute": Case(
        "by_instance_attribute",
        ("instance attribute",),
        lambda m: attribute(m.LAYER, "bias"),
        _times_three,
    ),
    "instance-field": Case(
        "by_instance_attribute",
        ("instance attribute",),
        lambda m: attribute(m.LAYER, "width"),
        _times_three,
    ),
    "instance-class-attribute": Case(
        "by_instance_class_attribute",
        ("instance attribute", "class attribute (data)"),
        lambda m: attribute(m.Layer, "gain"),
        _times_three,
    ),
    "namedtuple-class-attribute": Case(
        "by_namedtuple_class_attribute",
        ("instance attribute", "class attribute (data)"),
        lambda m: attribute(m.Pair, "scale"),
        _times_three,
    ),
    "module-attribute": Case(
        "by_module_attribute",
        ("module attribute",),
        lambda m: attribute(m.settings, "SCALE"),
        _times_three,
    ),
    "module-in-closure": Case(
        "by_module_in_closure",
        ("module attribute", "closure"),
        lambda m: attribute(m.settings, "SCALE"),
        _times_three,
    ),
    "module-imported-in-trace": Case(
        "by_module_imported_in_trace",
        ("module attribute",),
        lambda m: attribute(m.settings, "SCALE"),
        _times_three,
    ),
    "weak-to-strong": Case(
        "by_weak",
        ("weak vs strong", "global"),
        lambda m: attribute(m, "WEAK"),
        lambda weak: jnp.array(weak, dtype=weak.dtype),
        inputs=lambda: (jnp.asarray(FLOATS, jnp.bfloat16),),
    ),
    "weak-to-strong-by-partial": Case(
        "by_weak_partial",
        ("weak vs strong", "partial argument"),
        lambda m: partial_argument(m.by_weak_partial.__wrapped__, 0),
        lambda weak: jnp.array(weak, dtype=weak.dtype),
        inputs=lambda: (jnp.asarray(FLOATS, jnp.bfloat16),),
    ),
    "int4-as-uint4": Case(
        "by_int4",
        ("dtype of the same bytes", "global"),
        lambda m: attribute(m, "CODES"),
        lambda codes: codes.view(ml_dtypes.uint4),
        inputs=lambda: (jnp.arange(4, dtype=jnp.int8),),
    ),
    "bfloat16-as-float16": Case(
        "by_bfloat16",
        ("dtype of the same bytes", "global"),
        lambda m: attribute(m, "HALF"),
        lambda half: half.view(np.float16),
    ),
    "negative-zero": Case(
        "by_zero", ("-0.0", "global"), lambda m: attribute(m, "ZERO"), lambda zero: -zero
    ),
    "nan-of-the-other-sign": Case(
        "by_nan", ("nan", "global"), lambda m: attribute(m, "NAN"), lambda _: NEGATIVE_NAN
    ),
}


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, Path]]:
    """``MODEL`` imported from its project folder, and the folder."""
    root = tmp_path_factory.mktemp("mutations")
    (root / "mutations_settings.py").write_text(textwrap.dedent(SETTINGS).lstrip())
    (root / "mutations_model.py").write_text(textwrap.dedent(MODEL).lstrip())
    sys.path.insert(0, str(root))
    try:
        import mutations_model  # type: ignore[import-not-found]  # written above

        yield mutations_model, root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("mutations_model", None)
        sys.modules.pop("mutations_settings", None)
        jax.clear_caches()


def _judged(jitted: Any, inputs: tuple[Any, ...], built: Any, before: Any) -> str:
    """What ``ppy run`` would do for ``jitted`` now, checked: where the
    staged call is served, jit traced afresh computes the export's bits.
    Returns the reason jit's path is taken, or "" where it is served."""
    why = verdict(jitted, built)
    if why is None:
        assert outcome(jitted, *inputs) == before, "served, but jit now computes otherwise"
        return ""
    assert why.strip(), "jit's path taken without a reason"
    return why


#: The cases that fail until the named defect is fixed: strict, so a fix
#: turns them red until the mark goes.
DEFECTS: dict[str, str] = {}


def _cases() -> list[Any]:
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=DEFECTS[name])] if name in DEFECTS else [],
        )
        for name in sorted(CASES)
    ]


@pytest.mark.parametrize("case", _cases())
def test_a_value_the_trace_read_changed_is_served_only_where_jit_computes_the_same(
    program: tuple[ModuleType, Path], case: str
) -> None:
    module, root = program
    chosen = CASES[case]
    jitted = getattr(module, chosen.function)
    inputs = chosen.inputs()
    site = chosen.site(module)
    original = site.get()
    before = outcome(jitted, *inputs)
    assert before[0] != "raises", before
    built = mutations.build(jitted, str(root))
    assert isinstance(built, str) or verdict(jitted, built) is None, "not served as built"

    def judged(value: Any) -> str:
        site.put(value)
        try:
            return _judged(jitted, inputs, built, before)
        finally:
            site.put(original)

    # The witness: the trace reads this place, so the change must be seen.
    witness = chosen.witness(original)
    site.put(witness)
    try:
        changed = outcome(jitted, *inputs)
    finally:
        site.put(original)
    assert changed != before, "the witness does not change jit's output: the case reads nothing"
    assert judged(witness), f"{case}: served after {witness!r} replaced {original!r}"

    @settings(
        max_examples=12,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(changes(original))
    def explore(value: Any) -> None:
        judged(value)

    explore()


def test_every_access_path_is_covered() -> None:
    """The paths and sorts of value the cases cover, printed as a table."""
    covered: dict[str, list[str]] = {family: [] for family in FAMILIES}
    for name, case in sorted(CASES.items()):
        for family in case.families:
            covered[family].append(name)
    width = max(map(len, FAMILIES))
    print("access paths covered by the mutation harness:")
    for family in FAMILIES:
        print(f"  {family:<{width}}  {', '.join(covered[family]) or '-'}")
    assert all(covered.values()), [f for f, names in covered.items() if not names]
    assert {f for case in CASES.values() for f in case.families} <= set(FAMILIES)


FOREIGN = Path(__file__).parent / "foreign"
#: test_live.py's programs mutated here.
LIVE = (
    "OPTIMIZER",
    "MAIN_GUARD",
    "LOCAL_ARRAY",
    "BATCHES",
    "VARIABLES",
    "RETURNED",
    "GUARDED_LAMBDA",
    "LAMBDA",
    "FORMS",
    "STATIC_FUNCTIONS",
    "KEY_GLOBAL",
    "DONATING",
)

#: The recorded test programs mutated generically: test_live.py's (but those
#: needing four devices or absl's command line) and the quickest of
#: ``foreign/`` (the others take five to ten seconds each to train).
PROGRAMS = {
    **{name.lower(): getattr(test_live, name) for name in LIVE},
    "kernel_regression": FOREIGN / "kernel_regression.ppy",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_value_a_recorded_program_s_trace_read_changed_takes_jit_s_path(
    tmp_path: Path, name: str
) -> None:
    """Each jitted function the program makes, as ``ppy record`` finds it
    running: each value its trace read (each capture the build takes) and
    every leaf inside it, replaced by another that differs in a way a trace
    can see, must take jit's path with a reason."""
    source = PROGRAMS[name]
    if isinstance(source, Path):
        program = source
    else:
        program = tmp_path / "model.py"
        program.write_text(textwrap.dedent(source).lstrip())
    jits = mutations.jits_of(program)
    root = str(program.parent)
    covered: dict[str, int] = {}
    served: list[str] = []
    for label, jitted in sorted(jits.items()):
        built = mutations.build(jitted, root)
        if isinstance(built, str):
            continue  # not staged: jit's path, with the build's reason
        for capture in built:
            found = mutations.captured_site(jitted, capture.path)
            if found is None:
                continue
            family, top = found
            for where, site in mutations.within(top.get(), top, family):
                covered[where] = covered.get(where, 0) + 1
                served += _served_after_changes(jitted, built, site, f"{label} {capture.name}")
    print(f"{name}: {len(jits)} jitted functions; values changed by access path: {covered}")
    assert jits and covered, "nothing of the program was mutated"
    assert not served, served


def _served_after_changes(jitted: Any, built: Any, site: Site, label: str) -> list[str]:
    """The changes of the value at ``site`` that the runtime would still serve."""
    original = site.get()
    served: list[str] = []

    @settings(
        max_examples=6,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(changes(original))
    def explore(value: Any) -> None:
        if not mutations.distinct(original, value):
            return
        site.put(value)
        try:
            why = verdict(jitted, built)
        finally:
            site.put(original)
        if why is None:
            served.append(f"{label}: {original!r} -> {value!r}")

    explore()
    return served
