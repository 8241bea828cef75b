"""The sizes a recording saw, put into a worker request's descriptions
(``ppy_plugin_jax.sizes``): pure JSON, no jax."""

from __future__ import annotations

from ppy_plugin_jax.sizes import named, sized


def test_only_a_recorded_description_takes_the_sizes() -> None:
    recorded = {"name": "x", "array": {"dims": ["B", 2], "dtype": "float32", "recorded": True}}
    written = {"name": "y", "array": {"dims": ["B", 2], "dtype": "float32", "ppy": True}}
    nest = {
        "name": "batch",
        "array": None,
        "nest": {"tuple": [{"dims": ["B", "N"], "dtype": "float32"}, {"none": True}]},
    }
    sizes = {"B": 24, "N": 3}
    assert sized(recorded, sizes)["array"]["dims"] == [24, 2]
    assert sized(written, sizes) == written  # the source's symbol is its own claim
    assert sized(nest, sizes)["nest"] == {
        "tuple": [{"dims": [24, 3], "dtype": "float32"}, {"none": True}]
    }
    assert recorded["array"]["dims"] == ["B", 2]  # the request itself is left as it was


def test_the_sizes_are_named_smallest_first() -> None:
    assert named([{"B": 64}, {"B": 24}]) == "B=24, 64"
    assert named([{"B": 8, "N": 5}, {"B": 4, "N": 3}]) == "(B=4, N=3), (B=8, N=5)"
