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
import numpy as np
import pytest
from ppy.kinds.fingerprint import BOUND, CLOSURE, DEFAULTS, fingerprint
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
from captures_helper import scale

W = np.arange(4, dtype=np.float32)
BIG = np.zeros(LIMIT // 4 + 1, np.float32)
LOCK = threading.Lock()
LOG = open(__file__)


class Settings:
    FACTOR = 2.0


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
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, Path]]:
    """The model module, imported from its project folder, and the folder."""
    root = tmp_path_factory.mktemp("project")
    (root / "captures_helper.py").write_text(HELPER)
    (root / "captures_model.py").write_text(MODEL.replace("LIMIT", str(LIMIT)))
    sys.path.insert(0, str(root))
    try:
        import captures_model  # type: ignore[import-not-found]  # written above

        yield captures_model, root
    finally:
        sys.path.remove(str(root))
        model = sys.modules.pop("captures_model", None)
        sys.modules.pop("captures_helper", None)
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
