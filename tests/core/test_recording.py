"""Recorded calls into one description (``ppy.record.generalise``) and the
file's checks (``ppy.record.signatures``, ``ppy.record.format``), without running anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from ppy.errors import ConfigError
from ppy.record.format import FunctionCalls, Signatures
from ppy.record.generalise import generalise
from ppy.record.signatures import read_signatures, write_signatures


def _array(text: str, **flags: bool) -> dict[str, object]:
    return {"array": text, **flags}


def test_dims_that_move_together_share_a_symbol_and_fixed_dims_stay() -> None:
    general = generalise(
        [
            ({"x": _array("float32[32,784]"), "y": _array("int32[32]")}, 3),
            ({"x": _array("float32[128,784]"), "y": _array("int32[128]")}, 1),
        ]
    )
    assert general.rendered() == {"x": "float32[B,784]", "y": "int32[B]"}
    assert general.dims == {"B": (32, 128)}


def test_dims_that_move_apart_get_their_own_symbols() -> None:
    general = generalise(
        [
            ({"a": _array("float32[2,3]"), "b": _array("float32[3,5]")}, 1),
            ({"a": _array("float32[4,3]"), "b": _array("float32[3,7]")}, 1),
            ({"a": _array("float32[4,3]"), "b": _array("float32[3,5]")}, 1),
        ]
    )
    assert general.rendered() == {"a": "float32[B,3]", "b": "float32[3,N]"}
    assert general.dims == {"B": (2, 4), "N": (5, 7)}


def test_each_call_s_sizes_are_kept_together_most_called_first() -> None:
    """What the build exports where a symbol is not faithful: the sizes each
    signature gave the symbols together, each set once."""
    general = generalise(
        [
            ({"a": _array("float32[4,3]"), "b": _array("float32[3,5]"), "k": {"static": 1}}, 5),
            ({"a": _array("float32[2,3]"), "b": _array("float32[3,5]"), "k": {"static": 1}}, 2),
            ({"a": _array("float32[4,3]"), "b": _array("float32[3,5]"), "k": {"static": 2}}, 1),
            ({"a": _array("float32[2,3]"), "b": _array("float32[3,7]"), "k": {"static": 1}}, 1),
        ]
    )
    assert general.rendered()["a"] == "float32[B,3]" and general.rendered()["b"] == "float32[3,N]"
    assert general.sizes == ({"B": 4, "N": 5}, {"B": 2, "N": 5}, {"B": 2, "N": 7})
    fixed = generalise([({"x": _array("float32[3]")}, 2)])
    assert fixed.sizes == ()


def test_static_values_are_variants_and_calls_of_another_dtype_are_left_out() -> None:
    general = generalise(
        [
            (
                {
                    "mode": {"static": "tanh"},
                    "lr": {"python": "float"},
                    "x": _array("float32[3]"),
                    "p": _node("model:State", _array("float32[3]")),
                },
                2,
            ),
            (
                {
                    "mode": {"static": "relu"},
                    "lr": {"python": "float"},
                    "x": _array("float64[3]"),
                    "p": _node("model:Other", _array("float32[3]")),
                },
                1,
            ),
        ]
    )
    described = general.parameters
    # Every static value is a variant, even one seen only in a call the
    # description does not serve.
    assert described["mode"].choices == ("tanh", "relu")
    # A Python float in every call is what jit traces as a weak float32.
    assert described["lr"].rendered() == "weak float32[]"
    # The second call passed float64 and another tree: it takes the original
    # path, and the description is the most called signature's.
    assert described["x"].rendered() == "float32[3]"
    assert described["p"].rendered() == "State(float32[3])"
    assert general.calls == 2


def _node(kind: str, *children: dict[str, object]) -> dict[str, object]:
    return {"nest": {"node": {"type": kind, "data": None, "children": list(children)}}}


def _nest(kind: str, *items: dict[str, object]) -> dict[str, object]:
    return {"nest": {kind: list(items)}}


def test_a_nest_of_arrays_shares_symbols_with_the_other_inputs() -> None:
    general = generalise(
        [
            ({"batch": _nest("tuple", _array("float32[8,4]"), _array("int32[8]"))}, 1),
            ({"batch": _nest("tuple", _array("float32[16,4]"), _array("int32[16]"))}, 1),
        ]
    )
    assert general.rendered() == {"batch": "(float32[B,4], int32[B])"}


def test_a_nest_whose_structure_changes_is_described_as_its_most_called_structure() -> None:
    general = generalise(
        [
            ({"xs": _nest("list", _array("float32[3]"), _array("float32[3]"))}, 3),
            ({"xs": _nest("list", _array("float32[3]"))}, 1),
            ({"xs": _nest("list", _array("float32[5]"), _array("float32[3]"))}, 1),
        ]
    )
    assert general.rendered() == {"xs": "[float32[B], float32[3]]"}
    assert general.calls == 4


def test_the_file_round_trips_and_merges(tmp_path: Path) -> None:
    path = tmp_path / "signatures.json"
    first = Signatures(runs=1)
    calls = FunctionCalls()
    calls.add({"x": _array("float32[8,4]")}, 2)
    first.functions["model.f"] = calls
    write_signatures(path, first)
    again = read_signatures(path)
    assert again is not None and again.runs == 1
    again.merge(first)
    write_signatures(path, again)
    merged = read_signatures(path)
    assert merged is not None and merged.runs == 2
    assert merged.functions["model.f"].calls == 4
    assert '"x": "float32[8,4]"' in path.read_text()


def test_calls_under_grad_round_trip_and_merge_their_cotangent_patterns(tmp_path: Path) -> None:
    """What a build needs to export jit's programs under ``jax.grad``: each
    call's leaves and perturbed leaves, and the union of its patterns over
    the runs merged."""
    path = tmp_path / "signatures.json"
    call = {
        "inputs": {"k": [["float32", [], False]], "x": [["int32", [], True]]},
        "perturbed": {"k": [True], "x": [False]},
        "static": {"mode": "fast"},
    }
    first = Signatures(runs=1)
    calls = FunctionCalls()
    calls.add({"k": _array("float32[]"), "x": {"python": "int"}})
    calls.differentiated(call, (0, 2))
    first.functions["model.solve"] = calls
    write_signatures(path, first)
    second = Signatures(runs=1)
    more = FunctionCalls()
    more.add({"k": _array("float32[]"), "x": {"python": "int"}})
    more.differentiated(call, (1, 3))
    more.differentiated(call, (0, 2))
    second.functions["model.solve"] = more
    again = read_signatures(path)
    assert again is not None
    again.merge(second)
    write_signatures(path, again)
    merged = read_signatures(path)
    assert merged is not None
    assert merged.functions["model.solve"].gradient_calls() == [
        {**call, "cotangents": [[0, 2], [1, 3]]}
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1: not JSON"),
        ('{"format": "other"}', '"format"'),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": -1, "functions": {}}',
            '"runs" is not a count',
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": '
            '{"os.system(1)": {"signatures": []}}}',
            "not a module.function name",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": '
            '{"m.f": {"signatures": [{"calls": 1, "inputs": {"x": {"static": [1]}}}]}}}',
            "not a JSON literal",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": '
            '{"m.f": {"signatures": [{"calls": 1, "inputs": {"x": {"array": "float99[3]"}}}]}}}',
            "'float99' is not a dtype",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {"m.f": '
            '{"signatures": [{"calls": 1, "inputs": {"x": {"array": "float32[4,'
            + str(2**63)
            + ']"}}}]}}}',
            "has a dim no array has",
        ),
        (
            '{"format": "ppy-signatures", "version": 1, "runs": 1, "functions": {"m.f": '
            '{"signatures": [{"calls": 1, "inputs": {"x": {"array": "float32[3]"}}}], '
            '"gradients": [{"inputs": {"x": [["float32", [3], false]]}, "perturbed": '
            '{"x": [true, false]}, "static": {}, "cotangents": [[0]]}]}}}',
            "perturbed leaves",
        ),
    ],
)
def test_a_bad_file_is_refused_with_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "signatures.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_signatures(path)
    assert message in str(refused.value) and str(path) in str(refused.value)


def test_no_file_is_no_recording(tmp_path: Path) -> None:
    assert read_signatures(tmp_path / "signatures.json") is None


def test_a_recorded_reference_resolves_only_among_imported_modules() -> None:
    """A signatures file names classes by ``module:qualname``; looking one up
    never imports (runs) a module the program did not."""
    import collections
    import sys

    from ppy.kinds.pytrees import reference, resolve

    assert reference(collections.OrderedDict) == "collections:OrderedDict"
    assert resolve("collections:OrderedDict") is collections.OrderedDict
    assert "antigravity" not in sys.modules
    assert resolve("antigravity:geohash") is None
    assert "antigravity" not in sys.modules
    # An instance is named only where its class's module holds it under a name.
    assert reference(object()) is None


def test_python_scalars_of_two_types_are_not_described() -> None:
    general = generalise([({"n": {"python": "int"}}, 2), ({"n": {"python": "float"}}, 1)])
    assert general.parameters["n"].rendered() == "weak int32[]"
    mixed = generalise([({"n": {"python": "complex"}}, 1)])
    assert "Python complex" in (mixed.parameters["n"].why_not or "")


def test_each_combination_of_weak_types_the_calls_had_is_a_kind_of_its_own() -> None:
    """jit keys its traces by each input's weak type, 0-d or not: each
    combination the recording saw is exported as a variant of its own, most
    called first, beside the strongly typed one."""
    weak, strong = _array("float32[]", weak=True), _array("float32[]")
    general = generalise(
        [
            ({"a": weak, "b": strong, "v": _array("float32[3]", weak=True)}, 3),
            ({"a": strong, "b": weak, "v": _array("float32[3]", weak=True)}, 2),
            ({"a": strong, "b": strong, "v": _array("float32[3]", weak=True)}, 1),
            ({"a": weak, "b": strong, "v": _array("float32[3]", weak=True)}, 1),
        ]
    )
    assert general.kinds == (frozenset({"a", "v"}), frozenset({"b", "v"}), frozenset({"v"}))
    assert [general.parameters[n].weakly for n in "abv"] == [(0,), (1,), (0, 1, 2)]
    assert general.rendered() == {
        "a": "(weak) float32[]",
        "b": "(weak) float32[]",
        "v": "(weak) float32[3]",
    }
    # A 0-d input weak in every call is a Python scalar's: weak in every variant.
    scalar = generalise([({"n": weak, "x": strong}, 1), ({"n": weak, "x": weak}, 1)])
    assert scalar.parameters["n"].weak and not scalar.parameters["n"].weakly
    assert scalar.kinds == (frozenset({"x"}),)
    assert generalise([({"x": strong}, 1)]).kinds == ()


def test_a_pytree_leaf_names_the_kinds_it_is_weak_in() -> None:
    def nest(first: bool, second: bool) -> dict[str, object]:
        leaves = [_array("float32[2]", weak=first), _array("float32[2]", weak=second)]
        return {"nest": {"tuple": leaves}}

    general = generalise([({"p": nest(True, False)}, 2), ({"p": nest(False, True)}, 1)])
    assert general.parameters["p"].nest == {
        "tuple": [
            {"dims": [2], "dtype": "float32", "weakly": [0]},
            {"dims": [2], "dtype": "float32", "weakly": [1]},
        ]
    }
    assert general.rendered() == {"p": "((weak) float32[2], (weak) float32[2])"}
