"""The worker's abstract values, built in this process from described parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
from ppy_plugin_jax.inputs import Undescribed, abstract


def _array(name: str, dtype: str) -> dict[str, object]:
    return {
        "name": name,
        "kind": "positional",
        "static": False,
        "array": {"dims": [3], "dtype": dtype, "ppy": False},
    }


def test_a_dtype_this_jax_does_not_have_is_a_refusal_not_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(Undescribed) as refused:
        abstract({}, [_array("x", "float99")], str(tmp_path))
    assert refused.value.rule == "invalid-spec"
    assert "'float99' is not a dtype this jax has" in refused.value.reason


def test_the_values_keep_the_signatures_order_when_a_constraint_remakes_them(
    tmp_path: Path,
) -> None:
    symbolic = [
        {**_array(name, "float32"), "array": {"dims": ["N"], "dtype": "float32", "ppy": False}}
        for name in ("z", "m", "a")
    ]
    found = abstract({}, symbolic, str(tmp_path), constraints=("N >= 2",))
    assert found.constraints == ("N >= 2",)
    assert list(found.values) == ["z", "m", "a"]
