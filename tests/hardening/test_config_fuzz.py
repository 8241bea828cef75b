"""Every configuration key under fuzzing: any TOML value ends in a build or one clear error.

For each key ppy or an installed plugin reads (``KEYS``), hypothesis writes a
pyproject.toml that sets it to a value of any TOML type, extremes included
(``inf``, ``nan``, ``1e308``, ``2**63 - 1``, control characters, paths that
leave the project), and runs ``ppy build`` in-process through
``ppy.cli.main``. A case passes when the build succeeds, or exits 2 with one
``ppy: error:`` message naming the file and the key; in both, the project's
source is untouched and nothing is created outside the project. An exception
that escaped ``main`` fails the case with its traceback.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ppy.cli.main import main
from ppy.config import ALLOWED_KEYS
from ppy_plugin_jax.plugin import SETTINGS as JAX_SETTINGS

#: ``main`` configures logging for the whole process, as a command does.
pytestmark = pytest.mark.usefixtures("own_logging")

#: ``table.key`` for every key ppy's own table and the jax plugin's read.
KEYS = [f"tool.ppy.{k}" for k in ALLOWED_KEYS] + [f"tool.ppy.plugins.jax.{k}" for k in JAX_SETTINGS]
EXAMPLES = 40
SOURCE = 'print("the program ran")\n'

_EXTREME_FLOATS = st.sampled_from(
    [math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, -0.0, 0.0, 0.1, 86400.5]
)
_EXTREME_INTS = st.sampled_from([-(2**63), 2**63 - 1, -1, 0, 1, 127, 128, 1 << 30, (1 << 30) + 1])
_PATHS = st.sampled_from(
    [
        "model.ppy",
        "pyproject.toml",
        "../x/y.ppyz",
        "/tmp/ppy-config-fuzz/x.ppyz",
        "~/x.ppyz",
        "a\x00b.ppyz",
        "out/./../../x.ppyz",
        "out/app.ppyz",
        ".ppyz",
        "x.ppyz/..",
        "linked/x.ppyz",
        "a" * 300 + ".ppyz",
    ]
)
_SCALARS = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | _EXTREME_INTS
    | st.floats()
    | _EXTREME_FLOATS
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    | _PATHS
    | st.sampled_from(["allow", "deny", "cpu", "cuda"])
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.from_regex(r"[a-z][a-z-]{0,8}", fullmatch=True), inner, max_size=2)
    ),
    max_leaves=4,
)


def toml(value: Any) -> str:
    """``value`` as a TOML value (inline arrays and tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + "}"


def _document(key: str, value: Any) -> str:
    table, name = key.rsplit(".", 1)
    return f'[project]\nname = "fuzzed"\n\n[{table}]\n{name} = {toml(value)}\n'


def _outcome(key: str, value: Any, capsys: pytest.CaptureFixture[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="ppy-config-fuzz-") as tmp:
        root = Path(tmp)
        project = root / "project"
        project.mkdir()
        (root / "outside").mkdir()
        (project / "linked").symlink_to(root / "outside")
        pyproject = project / "pyproject.toml"
        pyproject.write_text(_document(key, value), encoding="utf-8")
        program = project / "model.ppy"
        program.write_text(SOURCE)

        code = main(["build", str(project)])

        _, err = capsys.readouterr()
        assert "Traceback" not in err, err
        assert program.read_text() == SOURCE, f"{key} = {value!r} changed the program"
        assert pyproject.read_text(encoding="utf-8") == _document(key, value)
        assert sorted(p.name for p in root.iterdir()) == ["outside", "project"], key
        assert not any((root / "outside").iterdir()), f"{key} = {value!r} wrote outside"
        if code == 0:
            return "built"
        assert code == 2, err
        (first, *rest) = err.rstrip("\n").splitlines()
        assert first.startswith(f"ppy: error: {pyproject}: "), err
        named = first.removeprefix(f"ppy: error: {pyproject}: ").split(":", 1)[0]
        assert key == named or key.startswith(f"{named}.") or named.startswith(f"{key}."), err
        assert len(rest) == 1 and rest[0].startswith("  remedy: "), err
        return "refused"


@pytest.mark.parametrize("key", KEYS)
def test_any_value_of_a_key_is_built_or_one_clear_error(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(VALUES)
    def case(value: Any) -> None:
        ran.append(_outcome(key, value, capsys))

    case()
    assert len(ran) == EXAMPLES
    assert "refused" in ran
