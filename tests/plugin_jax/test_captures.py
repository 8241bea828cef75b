"""What a jitted function's trace reads besides its arguments (``ppy_plugin_jax.captures``).

The functions live in a project folder, a module and a helper module beside
it, imported for real; each is handed to ``captures`` as the worker hands it
a jitted function, and what comes back is what the run compares: each
global's path from the function, its name in the refusal's and the fallback's
words, and its fingerprint. Nothing is traced: the scan reads bytecode.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from ppy.kinds.fingerprint import BOUND, CLOSURE, DEFAULTS, fingerprint, resolve
from ppy_plugin_jax.captures import Refused, captures

#: The largest captured array, in bytes, these tests allow.
LIMIT = 1024

HELPER = """\
import threading

import numpy as np

K = 3.0
TABLE = np.arange(4.0)
LOCK = threading.Lock()


def scale(x):
    return x * K


def locked(x):
    with LOCK:
        return x
"""

MODEL = """\
import functools
import math
import os
import random
import threading
import time
from os import getenv

import jax
import jax.numpy as jnp
import numpy as np

import captures_helper as helper
import captures_settings
from captures_helper import scale

W = np.arange(4, dtype=np.float32)
BIG = np.zeros(LIMIT // 4 + 1, np.float32)
LOCK = threading.Lock()
LOG = open(__file__)


class Settings:
    FACTOR = 2.0
    act = staticmethod(jnp.tanh)

    @classmethod
    def scaled(cls, x):
        return x * cls.FACTOR + OFFSET


class Net:
    act = staticmethod(jnp.tanh)

    def forward(self, x):
        return self.act(x)


class Scaler:
    def __init__(self, x):
        self.x = x

    def value(self):
        return self.x * GAIN


OFFSET = 1.0
GAIN = 3.0
NAME = "SCALE"
NET = Net()


def direct(x):
    return x @ W + len(x)


def in_a_comprehension(x):
    return sum(v * W for v in [x])


def through_a_module(x):
    return x * helper.K + helper.TABLE


def through_a_function(x):
    return scale(x)


def through_a_class(x):
    return x * Settings.FACTOR


def library(x):
    return jnp.tanh(x) * math.pi


def environment(x):
    return x * float(os.getenv("SCALE", "1"))


def environment_imported(x):
    return x * float(getenv("SCALE", "1"))


def clock(x):
    return x * time.time()


def randomness(x):
    return x * random.random()


def numpy_randomness(x):
    return x * np.random.normal()


def big(x):
    return x + BIG


def lock(x):
    with LOCK:
        return x


def file(x):
    return x * len(LOG.read())


def helper_lock(x):
    return helper.locked(x)


def made(k):
    def inner(x):
        return x * k

    return inner


def weighted(w, x):
    return x * w


def by_classmethod(x):
    return Settings.scaled(x)


def by_getattr(x):
    return x * getattr(Settings, "FACTOR") + getattr(captures_settings, "SCALE")


def by_a_callable_class_attribute(x):
    return Settings.act(x) + NET.act(x)


def by_a_method(x):
    return NET.forward(x)


def by_a_class_it_calls(x):
    return Scaler(x).value()


def made_in_a_function():
    import captures_settings as settings

    config = Settings

    def inner(x):
        return x * settings.SCALE * config.FACTOR

    return inner


def by_a_module_argument(module, x):
    return x * module.SCALE


def passing_a_module_on(x):
    return by_a_module_argument(captures_settings, x)


def by_a_computed_name(x):
    return x * getattr(captures_settings, NAME)


def importing_while_traced(x):
    from captures_settings import SCALE

    return x * SCALE
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, Path]]:
    """The model module, imported from its project folder, and the folder."""
    root = tmp_path_factory.mktemp("project")
    (root / "captures_helper.py").write_text(HELPER)
    (root / "captures_settings.py").write_text("SCALE = 2.0\n")
    (root / "captures_model.py").write_text(MODEL.replace("LIMIT", str(LIMIT)))
    sys.path.insert(0, str(root))
    try:
        import captures_model  # type: ignore[import-not-found]  # written above

        yield captures_model, root
    finally:
        sys.path.remove(str(root))
        model = sys.modules.pop("captures_model", None)
        sys.modules.pop("captures_helper", None)
        sys.modules.pop("captures_settings", None)
        if model is not None:
            model.LOG.close()


def _read(fn: Any, root: Path) -> dict[tuple[str, ...], tuple[str, str]]:
    """Each capture's path: its name and fingerprint."""
    found = captures(fn, root=str(root), limit=LIMIT, flatten=jax.tree_util.tree_flatten)
    return {c.path: (c.name, c.fingerprint) for c in found}


def _names(fn: Any, root: Path) -> dict[tuple[str, ...], str]:
    return {path: name for path, (name, _) in _read(fn, root).items()}


def test_a_global_read_directly_is_found_with_its_fingerprint(
    project: tuple[ModuleType, Path],
) -> None:
    model, root = project
    read = _read(jax.jit(model.direct), root)
    # ``len`` is a builtin: not the program's to change, not compared.
    assert read == {("W",): ("captures_model.W", fingerprint(model.W))}
    assert _names(jax.jit(model.in_a_comprehension), root) == {("W",): "captures_model.W"}


def test_a_global_that_changes_changes_its_fingerprint(project: tuple[ModuleType, Path]) -> None:
    model, root = project
    before = _read(jax.jit(model.direct), root)[("W",)]
    kept = model.W
    try:
        model.W = kept * 10
        after = _read(jax.jit(model.direct), root)[("W",)]
        model.W = kept.copy()
        again = _read(jax.jit(model.direct), root)[("W",)]
    finally:
        model.W = kept
    assert after != before and again == before


def test_a_project_module_s_attributes_are_globals_of_their_own(
    project: tuple[ModuleType, Path],
) -> None:
    model, root = project
    assert _names(jax.jit(model.through_a_module), root) == {
        ("helper", "K"): "captures_model.helper.K",
        ("helper", "TABLE"): "captures_model.helper.TABLE",
    }
    assert _names(jax.jit(model.through_a_class), root) == {
        ("Settings", "FACTOR"): "captures_model.Settings.FACTOR"
    }


def test_a_project_function_it_calls_is_followed_into(project: tuple[ModuleType, Path]) -> None:
    model, root = project
    # Its own code and defaults are compared beside what it reads: a helper
    # in a plain ``.py`` module can change with no ``.ppy`` source changing.
    assert _names(jax.jit(model.through_a_function), root) == {
        ("scale", DEFAULTS): "captures_helper.scale",
        ("scale", "K"): "captures_helper.K",
    }


def test_a_function_outside_the_project_is_compared_whole_not_followed(
    project: tuple[ModuleType, Path], tmp_path: Path
) -> None:
    model, _ = project
    names = _names(jax.jit(model.through_a_function), tmp_path)
    assert ("scale",) in names and ("scale", "K") not in names


def test_a_library_s_data_and_functions_are_compared(project: tuple[ModuleType, Path]) -> None:
    model, root = project
    read = _read(jax.jit(model.library), root)
    assert read[("math", "pi")] == ("captures_model.math.pi", fingerprint(np.pi))
    # A program may patch ``jnp.tanh``: the function is compared by what it is.
    assert read[("jnp", "tanh")][0] == "captures_model.jnp.tanh"
    assert set(read) == {("math", "pi"), ("jnp", "tanh")}


def test_what_os_getenv_reads_is_the_environment(project: tuple[ModuleType, Path]) -> None:
    model, root = project
    assert _names(jax.jit(model.environment), root) == {
        ("os", "environ"): "captures_model.os.environ"
    }
    assert _names(jax.jit(model.environment_imported), root) == {
        ("getenv", "environ"): "os.environ"
    }


def test_a_function_s_closure_and_a_partial_s_arguments_are_compared(
    project: tuple[ModuleType, Path],
) -> None:
    model, root = project
    read = _read(jax.jit(model.made(2.0)), root)
    assert read == {(CLOSURE, "k"): ("k of the function around inner", fingerprint(2.0))}
    bound = _names(jax.jit(functools.partial(model.weighted, model.W)), root)
    assert bound == {(BOUND, "0"): "argument 0 that a partial binds to weighted"}


def test_a_function_that_is_not_python_reads_nothing(project: tuple[ModuleType, Path]) -> None:
    _, root = project
    assert captures(len, root=str(root), limit=LIMIT, flatten=jax.tree_util.tree_flatten) == ()


@pytest.mark.parametrize(
    ("function", "name", "why"),
    [
        ("clock", "captures_model.time.time", "answers anew in each process"),
        ("randomness", "captures_model.random.random", "answers anew in each process"),
        ("numpy_randomness", "captures_model.np.random.normal", "answers anew in each process"),
        ("big", "captures_model.BIG", f"over the {LIMIT}-byte limit on captured arrays"),
        ("lock", "captures_model.LOCK", "ppy cannot compare values of type _thread.lock"),
        ("file", "captures_model.LOG", "ppy cannot compare values of type"),
        ("helper_lock", "captures_helper.LOCK", "ppy cannot compare values of type _thread.lock"),
    ],
)
def test_a_global_with_no_fingerprint_refuses_the_export_by_name(
    project: tuple[ModuleType, Path], function: str, name: str, why: str
) -> None:
    model, root = project
    with pytest.raises(Refused) as refused:
        _read(jax.jit(getattr(model, function)), root)
    assert refused.value.name == name
    assert why in refused.value.why
    assert str(refused.value) == f"{name}: {refused.value.why}"


def _seen(fn: Any, root: Path, owner: Any, name: str, value: Any) -> set[str]:
    """What a run sees changed, as the runtime looks (each capture's path
    followed from ``fn`` and fingerprinted again), once ``owner.name`` is
    ``value``: the names of the captures whose fingerprint differs."""
    found = captures(fn, root=str(root), limit=LIMIT, flatten=jax.tree_util.tree_flatten)
    # From a class, as it holds it: a staticmethod, not the function it gives.
    kept = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    try:
        now = {
            c.name: fingerprint(resolve(fn, c.path), flatten=jax.tree_util.tree_flatten)
            for c in found
        }
    finally:
        setattr(owner, name, kept)
    return {c.name for c in found if now[c.name] != c.fingerprint}


@pytest.mark.parametrize(
    ("function", "owner", "name", "value", "named"),
    [
        # cls.FACTOR read inside a classmethod, and the global it reads
        (
            "by_classmethod",
            "Settings",
            "FACTOR",
            5.0,
            "cls.FACTOR of captures_model.Settings.scaled",
        ),
        ("by_classmethod", "model", "OFFSET", 5.0, "captures_model.OFFSET"),
        # getattr with a literal name, of a class and of a project module
        ("by_getattr", "Settings", "FACTOR", 5.0, "captures_model.Settings.FACTOR"),
        ("by_getattr", "settings", "SCALE", 5.0, "captures_model.captures_settings.SCALE"),
        # a class attribute that is a callable, read through the class and an instance
        (
            "by_a_callable_class_attribute",
            "Net",
            "act",
            staticmethod(jnp.sin),
            "captures_model.NET.act",
        ),
        # self.act read inside a method called through an instance
        (
            "by_a_method",
            "Net",
            "act",
            staticmethod(jnp.sin),
            "self.act of captures_model.NET.forward",
        ),
        # a global read by a method of a class the trace calls
        ("by_a_class_it_calls", "model", "GAIN", 5.0, "captures_model.GAIN"),
    ],
)
def test_what_a_trace_reads_through_a_class_is_seen_to_change(
    project: tuple[ModuleType, Path], function: str, owner: str, name: str, value: Any, named: str
) -> None:
    """A value read through a class, an instance or a method is compared
    itself, not by the class's name: a program that sets it otherwise under
    the main guard is seen to."""
    model, root = project
    holders = {"model": model, "settings": sys.modules["captures_settings"]}
    holder = holders.get(owner) or getattr(model, owner)
    assert named in _seen(jax.jit(getattr(model, function)), root, holder, name, value)


def test_a_module_and_a_class_held_in_a_closure_are_compared_by_what_is_read_of_them(
    project: tuple[ModuleType, Path],
) -> None:
    """``import settings`` inside the function that makes the jit, and a
    class it names: what the trace reads of each, not their names."""
    model, root = project
    fn = jax.jit(model.made_in_a_function())
    settings = sys.modules["captures_settings"]
    assert _seen(fn, root, settings, "SCALE", 5.0) == {
        "settings.SCALE of the function around inner"
    }
    assert _seen(fn, root, model.Settings, "FACTOR", 5.0) == {
        "config.FACTOR of the function around inner"
    }


def test_a_module_a_partial_binds_is_compared_by_what_is_read_of_it(
    project: tuple[ModuleType, Path],
) -> None:
    model, root = project
    settings = sys.modules["captures_settings"]
    fn = jax.jit(functools.partial(model.by_a_module_argument, settings))
    assert _seen(fn, root, settings, "SCALE", 5.0) == {
        "module.SCALE that a partial binds to by_a_module_argument"
    }


@pytest.mark.parametrize("function", ["passing_a_module_on", "by_a_computed_name"])
def test_a_project_module_held_whole_refuses_the_export(
    project: tuple[ModuleType, Path], function: str
) -> None:
    """Passed on, or read by a computed name, what the trace reads of the
    module cannot be known: refused, not compared by the module's name."""
    model, root = project
    with pytest.raises(Refused) as refused:
        _read(jax.jit(getattr(model, function)), root)
    assert refused.value.name == "captures_model.captures_settings"
    assert "cannot tell which of its values the trace reads" in refused.value.why


def test_a_project_module_imported_while_traced_refuses_the_export(
    project: tuple[ModuleType, Path],
) -> None:
    """An import inside the traced function: no path from the function
    reaches what it read, so the export is refused, naming the import."""
    model, root = project
    with pytest.raises(Refused) as refused:
        _read(jax.jit(model.importing_while_traced), root)
    assert refused.value.name == "captures_model.importing_while_traced"
    assert "it imports captures_settings of the program while traced" in refused.value.why
