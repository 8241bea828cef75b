"""The mutation harness's verdict, checked against a real run.

``test_mutations.py`` decides in one process, with the runtime's own check,
whether a staged call would be served once a value its trace read changed.
Here one program is recorded as written, built, and run with a class
attribute changed under its main guard: ``ppy run`` prints what python
prints (cold and warm) and takes jit's path for the calls that read it, and
the harness's check, in this process, says the same. One build: it runs on
one Python, where the harness itself runs on both.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_ppy, write_project
from tests.support import mutations
from tests.support.differential import differential

#: A program recorded, built and run for real: the main guard changes the
#: class attribute a classmethod reads where ``MUTATION`` says so.
RECORDED = """
import os

import jax
import jax.numpy as jnp

SCALE = 2.0


class Config:
    scale = 2.0
    act = staticmethod(jnp.tanh)

    @classmethod
    def apply(cls, x):
        return cls.act(x) * cls.scale


@jax.jit
def by_global(x):
    return x * SCALE


@jax.jit
def by_classmethod(x):
    return Config.apply(x)


if __name__ == "__main__":
    if os.environ.get("MUTATION") == "class":
        Config.scale = 3.0
    for n in range(3):
        x = jnp.arange(4.0) + n
        print(by_global(x), by_classmethod(x))
"""


@pytest.mark.slow
def test_the_in_process_verdict_is_the_run_s(tmp_path: Path) -> None:
    """The program recorded as written, built, and run with ``Config.scale``
    set under the main guard: ``ppy run`` prints what python prints, takes
    jit's path for the classmethod's calls naming the value, and serves the
    other function's; in one process, the harness's check says the same."""
    root = write_project(tmp_path / "project", {"model.ppy": RECORDED})
    cache = tmp_path / "cache"
    environ = {**os.environ, "PPY_CACHE_DIR": str(cache)}
    recorded = run_ppy("record", "model.ppy", cwd=root, env=environ)
    assert recorded.returncode == 0, recorded.stderr
    compared = differential(root, cache=cache, env={"MUTATION": "class"})
    assert compared.staged_calls("by_global") == 3
    assert compared.staged_calls("by_classmethod") == 0
    reasons = {str(e["reason"]) for e in compared.fallbacks() if e["function"] == "by_classmethod"}
    assert reasons and all("not the value the build traced with" in r for r in reasons), reasons

    imported = tmp_path / "imported"
    imported.mkdir()
    (imported / "mutations_recorded.py").write_text(textwrap.dedent(RECORDED).lstrip())
    sys.path.insert(0, str(imported))
    try:
        import mutations_recorded  # type: ignore[import-not-found]  # written above

        jitted = mutations_recorded.by_classmethod
        built = mutations.build(jitted, str(imported))
        assert not isinstance(built, str), built
        mutations_recorded.Config.scale = 3.0
        assert mutations.verdict(jitted, built) is not None
    finally:
        sys.path.remove(str(imported))
        sys.modules.pop("mutations_recorded", None)
