"""An artifact built on another machine's platform: its symbolic exports.

A build compiles each export with a symbolic dim for its own platform and
compares it with what jit compiles (``ppy_plugin_jax.refinement``); the
entry lists where (``compared_on``). Here an artifact built on the CPU is
rewritten as a build on a TPU machine for ``["cpu", "tpu"]`` would have
written it: compared on ``tpu`` only. Run on the CPU, each symbolic variant
is then compared with jit at its first call (``ppy_runtime_pjrt.ontarget``),
and served only where the two programs are the same; the verdict is kept
in the executable cache for the next run.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppy.artifact.read import read_artifact
from ppy.artifact.write import write_artifact
from ppy.kinds.jax_export import JaxExport

from tests.conftest import BuiltExample
from tests.fidelity.test_refinement import PROGRAM
from tests.support.differential import project
from tests.support.events import json_events

Run = Callable[..., subprocess.CompletedProcess[str]]
RUN = ("-v", "--log-format", "json", "run", "--no-build", "model.ppy")


def _compared_on(artifact: Path, platforms: list[str]) -> None:
    """Rewrite ``artifact`` as if its build had compared it with jit on ``platforms``."""
    built = read_artifact(artifact)
    entries = tuple(
        dataclasses.replace(e, metadata={**e.metadata, "compared_on": platforms})
        for e in built.entries
    )
    write_artifact(dataclasses.replace(built, entries=entries), artifact)


def _paths(stderr: str) -> dict[str, set[str]]:
    paths: dict[str, set[str]] = {}
    for event in json_events(stderr, "run.call"):
        paths.setdefault(str(event["function"]), set()).add(str(event["path"]))
    return paths


def test_a_symbolic_export_compared_on_another_platform_is_compared_here_first(
    built_examples: Callable[[str], BuiltExample], built_example: Path, ppy: Run
) -> None:
    expected = built_examples("25_jax_export").plain.stdout
    artifact = built_example / ".ppy" / "artifact.ppyz"
    assert {tuple(e.metadata["compared_on"]) for e in read_artifact(artifact).entries} == {("cpu",)}
    here = ppy(*RUN, cwd=built_example)
    assert (here.returncode, here.stdout) == (0, expected), here.stderr
    assert not json_events(here.stderr, "run.compared")

    _compared_on(artifact, ["tpu"])
    first = ppy(*RUN, cwd=built_example)
    assert (first.returncode, first.stdout) == (0, expected), first.stderr
    compared = json_events(first.stderr, "run.compared")
    assert [(e["function"], e["same"], e["source"]) for e in compared] == [
        ("score", True, "compiled")
    ], first.stderr
    assert _paths(first.stderr)["score"] == {"staged"}

    again = ppy(*RUN, cwd=built_example)
    assert (again.returncode, again.stdout) == (0, expected), again.stderr
    compared = json_events(again.stderr, "run.compared")
    assert [(e["function"], e["same"], e["source"]) for e in compared] == [
        ("score", True, "cache")
    ], again.stderr
    assert _paths(again.stderr) == {"score": {"staged"}}
    assert not json_events(again.stderr, "run.fallback")


def _symbolic_export_of_ramp() -> Any:
    """What a build that could not compare ``ramp`` would have exported: it
    compiles to another program than jit's (tests/fidelity/test_refinement.py),
    so a build on this platform refuses it."""
    import jax

    scope: dict[str, Any] = {}
    exec(textwrap.dedent(PROGRAM).split("def bits")[0], scope)  # the test's own source
    (b,) = jax.export.symbolic_shape("B")
    spec = jax.ShapeDtypeStruct((b, 64), jax.numpy.float32)
    # As the jax plugin exports it: flat, the leaves of the output in a list.
    return jax.export.export(jax.jit(lambda x: [scope["ramp"](x)]))(spec)


def test_an_export_that_compiles_otherwise_on_the_target_is_not_served(
    tmp_path: Path, ppy: Run
) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    built = ppy("build", cwd=root)
    assert built.returncode == 0, built.stderr
    artifact = root / ".ppy" / "artifact.ppyz"
    read = read_artifact(artifact)
    normalize = next(e for e in read.entries if e.qualname == "normalize")
    contract = JaxExport.read(normalize)
    exported = _symbolic_export_of_ramp()
    variant = dataclasses.replace(
        contract.variants[0],
        export=bytes(exported.serialize()),
        stablehlo=exported.mlir_module().encode("utf-8"),
    )
    lent = dataclasses.replace(contract, variants=(variant,), captures=(), compared_on=("tpu",))
    ramp = dataclasses.replace(
        normalize,
        qualname="ramp",
        payload=lent.to_payload(),
        metadata=lent.to_metadata(),
    )
    write_artifact(dataclasses.replace(read, entries=(ramp, *read.entries)), artifact)
    expected = subprocess.run(
        [sys.executable, "model.ppy"], cwd=root, capture_output=True, text=True, check=True
    )

    for source in ("compiled", "cache"):
        ran = ppy(*RUN, cwd=root)
        assert (ran.returncode, ran.stdout) == (0, expected.stdout), ran.stderr
        compared = json_events(ran.stderr, "run.compared")
        assert [(e["function"], e["same"], e["source"]) for e in compared] == [
            ("ramp", False, source)
        ], ran.stderr
        (fallback,) = json_events(ran.stderr, "run.fallback")
        assert (fallback["function"], fallback["category"]) == ("ramp", "refinement")
        assert "XLA compiles the export to another program than the jitted" in str(
            fallback["reason"]
        )
        assert _paths(ran.stderr) == {
            "ramp": {"original"},
            "normalize": {"staged"},
            "ramp_of_three": {"staged"},
        }
