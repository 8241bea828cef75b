"""The kind contracts in ``ppy.kinds``: what the plugins write is what the runtime reads.

The contracts are plain data, so most of this runs without jax: a round trip
through a real artifact file, the error each malformed field gives, and a
scan of the plugins' and the runtime's sources for anything they still
agree on by copy instead of through core.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import operator
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ppy.artifact.entry import Entry
from ppy.artifact.model import Artifact, ModuleRecord
from ppy.artifact.read import read_artifact
from ppy.artifact.write import write_artifact
from ppy.kinds import statics
from ppy.kinds.base import KindError
from ppy.kinds.jax_export import Captured, JaxExport, Variant
from ppy.kinds.linearized import Linearized, Transposed
from ppy.kinds.xla_scalar import XlaScalar
from ppy.spec import MeshSpec, TensorSpec

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
WRITERS = ("plugin-jax", "plugin-xla")
READER = "runtime-pjrt"

SCALAR = XlaScalar(
    param_names=("x", "n", "flag"),
    param_types=("float", "int", "bool"),
    result_type="float",
    plugin_version="0.1.0",
    stablehlo=b"module @m {}\n",
    reads={"STEP": "int:3", "abs": "builtin:abs"},
)


def _variant(training: bool) -> Variant:
    return Variant(
        static={"training": training},
        in_tree="sha256:" + "1" * 64,
        out_tree={"tuple": ["*", {"input": [0]}]},
        inputs=(TensorSpec(("B", 4), "float32", "x"),),
        outputs=(TensorSpec(("B",), "float32"),),
        calling_convention_version=9,
        nr_devices=1,
        uses_shape_polymorphism=True,
        export=bytes(range(256)) + bytes([training]),
        stablehlo=f"module @jit_score_{training} {{}}\n".encode(),
    )


EXPORT = JaxExport(
    jax_version="0.10.2",
    jaxlib_version="0.10.2",
    traced=("x",),
    static=("training",),
    variants=(_variant(False), _variant(True)),
    captures=(Captured(("helper", "K"), "helper.K", "sha256:" + "0" * 64),),
    trace_config={"jax_enable_x64": "False"},
)


SHARDED = dataclasses.replace(
    EXPORT,
    mesh=MeshSpec(("data", "model"), (2, 2), ("explicit", "explicit")),
    variants=tuple(
        dataclasses.replace(
            v,
            nr_devices=4,
            inputs=(TensorSpec(("4*B", 4), "float32", "x", ("data", ("model",))),),
            outputs=(TensorSpec(("4*B",), "float32", None, ("data",)),),
        )
        for v in EXPORT.variants
    ),
)


def entry_of(contract: XlaScalar | JaxExport, qualname: str) -> Entry:
    return Entry(
        module="model",
        qualname=qualname,
        kind=contract.KIND,
        inputs=(TensorSpec(("B", 4), "float32", "x"),),
        outputs=(),
        platforms=("cpu",),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
    )


def test_both_kinds_come_back_from_a_real_artifact_as_they_went_in(tmp_path: Path) -> None:
    path = tmp_path / "artifact.ppyz"
    write_artifact(
        Artifact(
            project="demo",
            config_digest="0" * 64,
            written_by={"ppy": "0.1.0"},
            modules=(ModuleRecord("model", "model.ppy", "1" * 64),),
            entries=(
                entry_of(SCALAR, "square"),
                entry_of(EXPORT, "score"),
                entry_of(SHARDED, "sharded"),
            ),
            decisions=(),
        ),
        path,
    )
    loaded = {e.qualname: e for e in read_artifact(path).entries}
    assert XlaScalar.read(loaded["square"]) == SCALAR
    assert JaxExport.read(loaded["score"]) == EXPORT
    assert JaxExport.read(loaded["sharded"]) == SHARDED
    assert str(SHARDED.variants[0].inputs[0]) == "float32[4*B@data,4@(model)]"


def test_the_manifest_fields_are_the_documented_ones() -> None:
    assert SCALAR.to_metadata() == {
        "calling_convention": 3,
        "outputs": XlaScalar.OUTPUTS,
        "param_names": ["x", "n", "flag"],
        "param_types": ["float", "int", "bool"],
        "plugin_version": "0.1.0",
        "reads": {"STEP": "int:3", "abs": "builtin:abs"},
        "result_type": "float",
    }
    assert set(EXPORT.to_metadata()) == {
        "calling_convention",
        "constraints",
        "compared_on",
        "captures",
        "donated",
        "linearized",
        "trace_config",
        "in_shardings",
        "mesh",
        "jax_version",
        "jaxlib_version",
        "traced",
        "static",
        "variants",
    }
    assert tuple(SCALAR.to_payload()) == XlaScalar.MEMBERS
    assert tuple(EXPORT.to_payload()) == (*JaxExport.MEMBERS, "export.1", "stablehlo.1")
    docs = (PACKAGES.parent / "docs" / "kinds.md").read_text()
    variant_fields = EXPORT.to_metadata()["variants"][0]
    for contract in (SCALAR, EXPORT):
        for name in [*contract.to_metadata(), *contract.MEMBERS]:
            assert f"`{name}`" in docs, f"docs/kinds.md does not describe {name}"
    for name in variant_fields:
        assert f"`{name}`" in docs, f"docs/kinds.md does not describe a variant's {name}"


def _broken(
    entry: Entry, *, drop: str = "", variant: dict[str, Any] | None = None, **metadata: Any
) -> Entry:
    fields = {k: v for k, v in {**entry.metadata, **metadata}.items() if k != drop}
    if variant is not None:
        first, *rest = fields["variants"]
        fields["variants"] = [{**first, **variant}, *rest]
    return dataclasses.replace(entry, metadata=fields)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"drop": "param_types"}, "metadata.param_types", "is missing"),
        ({"param_types": ["float", "complex", "bool"]}, "metadata.param_types", "float, int, bool"),
        ({"param_types": ["float"]}, "metadata.param_types", "1 types for 3 parameters"),
        ({"result_type": "str"}, "metadata.result_type", "'str'"),
        ({"calling_convention": 2}, "metadata.calling_convention", "reads calling convention 3"),
        ({"drop": "reads"}, "metadata.reads", "is missing"),
        ({"reads": {"STEP": "eval:3"}}, "metadata.reads", "one of bool, builtin"),
        ({"drop": "calling_convention"}, "metadata.calling_convention", "is missing"),
        ({"plugin_version": 3}, "metadata.plugin_version", "a string"),
    ],
)
def test_a_malformed_scalar_entry_names_its_field(
    change: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(KindError) as caught:
        XlaScalar.read(_broken(entry_of(SCALAR, "square"), **change))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"xla.scalar entry: {field} ")
    assert words in str(caught.value)
    assert str(caught.value).endswith("rebuild the artifact with `ppy build`")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"calling_convention": True}, "metadata.calling_convention"),
        ({"drop": "jaxlib_version"}, "metadata.jaxlib_version"),
        (
            {"variant": {"calling_convention_version": "9"}},
            "metadata.variants[0].calling_convention_version",
        ),
        ({"variant": {"nr_devices": False}}, "metadata.variants[0].nr_devices"),
        (
            {"variant": {"uses_shape_polymorphism": 1}},
            "metadata.variants[0].uses_shape_polymorphism",
        ),
        ({"variant": {"static": {}}}, "metadata.variants[0].static"),
        ({"variant": {"static": {"training": [1]}}}, "metadata.variants[0].static.training"),
        (
            {"variant": {"static": {"training": {"function": "f", "fingerprint": "sha256:0"}}}},
            "metadata.variants[0].static.training",
        ),
        ({"variant": {"inputs": [{"dims": "B"}]}}, "metadata.variants[0].inputs"),
        ({"variants": []}, "metadata.variants"),
        ({"drop": "traced"}, "metadata.traced"),
        ({"in_shardings": "sharded"}, "metadata.in_shardings"),
        ({"in_shardings": "mesh"}, "metadata.mesh"),
        ({"drop": "mesh"}, "metadata.mesh"),
        ({"mesh": {"names": ["data"], "sizes": [0], "types": ["explicit"]}}, "metadata.mesh"),
        ({"mesh": {"names": ["data"], "sizes": [4], "types": ["diagonal"]}}, "metadata.mesh"),
        ({"calling_convention": 1}, "metadata.calling_convention"),
        ({"drop": "captures"}, "metadata.captures"),
        ({"drop": "donated"}, "metadata.donated"),
        ({"captures": [{"path": "K", "name": "K", "fingerprint": "x"}]}, "metadata.captures"),
        ({"captures": [{"path": ["K"], "name": "K"}]}, "metadata.captures"),
        ({"trace_config": {"jax_enable_x64": False}}, "metadata.trace_config"),
        ({"linearized": {}}, "metadata.linearized"),
        ({"linearized": [{"variant": 0}]}, "metadata.linearized[0]"),
    ],
)
def test_a_malformed_export_entry_names_its_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(KindError, match=f"^jax.export entry: {re.escape(field)} ") as caught:
        JaxExport.read(_broken(entry_of(EXPORT, "score"), **change))
    assert caught.value.field == field


def test_jit_s_programs_under_grad_read_back_as_written() -> None:
    linearized = Linearized(
        variant=0,
        inputs=(("float32", (4,), False), ("int32", (), True)),
        perturbed=(True, False),
        primal_inputs=(("input", 0), ("input", 1)),
        outputs=(("primal", 0),),
        primal=b"primal",
        transposed=(Transposed((0,), (("primal", 1), ("constant", 0)), (0,), b"t"),),
        constants=b"constants",
    )
    contract = dataclasses.replace(EXPORT, linearized=(linearized,))
    entry = entry_of(contract, "score")
    assert JaxExport.read(entry) == contract
    assert {"linearized.0", "linearized.0.0", "linearized.0.constants"} <= set(entry.payload)
    gone = dataclasses.replace(
        entry, payload={k: v for k, v in entry.payload.items() if k != "linearized.0.0"}
    )
    with pytest.raises(KindError, match=r"metadata.linearized\[0\] does not read"):
        JaxExport.read(gone)


@pytest.mark.parametrize("member", JaxExport.MEMBERS)
def test_a_missing_member_is_named(member: str) -> None:
    entry = entry_of(EXPORT, "score")
    gone = dataclasses.replace(
        entry, payload={k: v for k, v in entry.payload.items() if k != member}
    )
    with pytest.raises(KindError, match=f"payload.{member} is missing"):
        JaxExport.read(gone)


def test_an_entry_of_another_kind_is_refused() -> None:
    with pytest.raises(KindError, match=r"kind is 'xla.scalar', not 'jax.export'"):
        JaxExport.read(entry_of(SCALAR, "square"))


def test_the_contracts_import_no_jax() -> None:
    code = (
        "import sys, ppy.kinds\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'numpy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- nothing agreed on by copy ------------------------------------------------


Sources = list[tuple[str, ast.Module]]


def _sources(package: str) -> Sources:
    root = PACKAGES / package / "src"
    return [
        (f"{package}/{path.relative_to(root)}", ast.parse(path.read_text(), str(path)))
        for path in sorted(root.rglob("*.py"))
    ]


def _literal(node: ast.expr) -> Any:
    """The value of a constant expression (``-(2**63)``, a dict of strings), else raise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_literal(node.operand)
    if isinstance(node, ast.BinOp):
        ops = {ast.Pow: pow, ast.Sub: operator.sub, ast.Add: operator.add, ast.Mult: operator.mul}
        if type(node.op) in ops:
            return ops[type(node.op)](_literal(node.left), _literal(node.right))
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return tuple(repr(_literal(e)) for e in node.elts)
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return tuple(sorted((repr(_literal(k)), repr(_literal(v))) for k, v in pairs if k))
    raise ValueError("not a constant")


@dataclasses.dataclass(frozen=True)
class Constant:
    where: str
    words: frozenset[str]
    value: str

    def copies(self, other: Constant) -> bool:
        """The same value, and either worth sharing or named alike (``_CONVENTION = 1``)."""
        trivial = self.value in {repr(v) for v in (None, True, False, 0, 1, -1, "", ())}
        return self.value == other.value and (not trivial or bool(self.words & other.words))


def _pairs(targets: list[ast.expr], value: ast.expr) -> Iterator[tuple[ast.Name, ast.expr]]:
    """(name, value) of each target, ``LOW, HIGH = -(2**63), 2**63 - 1`` included."""
    for target in targets:
        if isinstance(target, ast.Name):
            yield target, value
        elif (
            isinstance(target, ast.Tuple)
            and isinstance(value, ast.Tuple)
            and len(target.elts) == len(value.elts)
        ):
            for name, item in zip(target.elts, value.elts, strict=True):
                if isinstance(name, ast.Name):
                    yield name, item


def _constants(sources: Sources) -> list[Constant]:
    """Every module- or class-level assignment of a constant expression."""
    found = []
    for name, tree in sources:
        bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
        for statement in (s for body in bodies for s in body):
            if not isinstance(statement, ast.Assign | ast.AnnAssign) or statement.value is None:
                continue
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target, value in _pairs(targets, statement.value):
                # A plugin's or runtime's ``contract``: the version of core's
                # contract it was written for, which each states on its own.
                if target.id in ("__all__", "contract"):
                    continue
                try:
                    text = repr(_literal(value))
                except (ValueError, TypeError):
                    continue
                words = frozenset(w for w in target.id.upper().split("_") if w)
                found.append(Constant(f"{name}:{statement.lineno}", words, text))
    return found


def _copied(writer: Sources, reader: Sources) -> list[str]:
    theirs = _constants(reader)
    return [
        f"{mine.value} in {mine.where} and {other.where}"
        for mine in _constants(writer)
        for other in theirs
        if mine.copies(other)
    ]


def test_no_constant_is_defined_both_in_a_plugin_and_in_the_runtime() -> None:
    reader = _sources(READER)
    assert [copy for writer in WRITERS for copy in _copied(_sources(writer), reader)] == []


def test_the_scan_finds_the_copies_it_is_there_to_find() -> None:
    def parsed(text: str) -> Sources:
        return [("example.py", ast.parse(textwrap.dedent(text)))]

    plugin = parsed(
        """
        _DTYPES = {"float": "float64", "int": "int64", "bool": "bool"}
        CALLING_CONVENTION = 1
        I64_MIN = -(2**63)
        VERBOSE = 1
        """
    )
    runtime = parsed(
        """
        class Runtime:
            _DTYPES = {"bool": "bool", "int": "int64", "float": "float64"}
        _CONVENTION = 1
        _I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
        LOW = -(2**63)
        """
    )
    found = _copied(plugin, runtime)
    assert [f.split(" in ")[1] for f in found] == [
        "example.py:2 and example.py:3",
        "example.py:3 and example.py:4",
        "example.py:4 and example.py:5",
        "example.py:4 and example.py:6",
    ]  # and not VERBOSE = 1: a small value counts only under a name alike


def _kind_strings(package: str) -> list[str]:
    kinds = {XlaScalar.KIND, JaxExport.KIND}
    return [
        f"{name}:{node.lineno}"
        for name, tree in _sources(package)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in kinds
    ]


def test_kind_names_are_written_only_in_core() -> None:
    assert [where for p in (*WRITERS, READER) for where in _kind_strings(p)] == []


def test_plugins_and_runtime_read_no_entry_field_by_its_key() -> None:
    reads = []
    for package in (*WRITERS, READER):
        for name, tree in _sources(package):
            for node in ast.walk(tree):
                target = None
                if isinstance(node, ast.Subscript):
                    target = node.value
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get"
                ):
                    target = node.func.value
                if isinstance(target, ast.Attribute) and target.attr in ("metadata", "payload"):
                    reads.append(f"{name}:{node.lineno} reads .{target.attr} by key")
    assert reads == []


def test_a_static_value_keys_its_variant_as_the_metadata_writes_it() -> None:
    """A call's static value and the metadata's JSON of it pick the same
    variant: a tuple item by item, each by its exact type; a function by its
    fingerprint, whichever object it is."""

    def fingerprint(function: Any) -> str:
        return "sha256:" + ",".join(function.__code__.co_varnames)

    def described(function: Any) -> dict[str, Any]:
        return {"function": "f", "fingerprint": fingerprint(function), "reads": []}

    value = (-2, 2.0, lambda x: x)
    written = json.loads(json.dumps(statics.to_json(value, described)))
    assert statics.key(value, fingerprint) == statics.key_of_json(written)
    assert statics.key((-2, 2.0, lambda x: x + 1), fingerprint) == statics.key_of_json(written)
    assert statics.key((-2, 2.0, lambda y: y), fingerprint) != statics.key_of_json(written)
    assert statics.key((-2, 2, lambda x: x), fingerprint) != statics.key_of_json(written)
    assert statics.key(1, fingerprint) != statics.key_of_json(True)
    with pytest.raises(ValueError, match="cannot hold"):
        statics.to_json([1], described)
