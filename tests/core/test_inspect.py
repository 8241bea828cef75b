"""What ``ppy inspect`` shows for an artifact read back from disk."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from ppy.artifact.entry import Entry
from ppy.artifact.model import MANIFEST, Artifact, ModuleRecord
from ppy.artifact.read import read_artifact
from ppy.artifact.write import write_artifact
from ppy.cli.inspection import render_text, to_json
from ppy.decision import Decision, Outcome
from ppy.spec import TensorSpec

EXPORT = b"\x00serialized export\xff" * 50


def _decision(qualname: str, outcome: Outcome, reason: str, remedy: str | None) -> Decision:
    return Decision(
        module="model",
        qualname=qualname,
        location=f"model.ppy:{len(qualname) * 3}",
        outcome=outcome,
        rule="staged" if outcome is Outcome.STAGED else "needs-annotation",
        reason=reason,
        remedy=remedy,
        plugin="jax",
        kind="jax.export",
        signature=f"{qualname}(x)",
    )


@pytest.fixture
def artifact_path(tmp_path: Path) -> Path:
    # A build settles a staged decision with its entry's signature.
    staged = replace(
        _decision("score", Outcome.STAGED, "exported for cpu", None),
        signature="score(x: float32[B,4]) -> float32[B]",
    )
    stays = _decision(
        "helper", Outcome.STAYS, "x has no shape annotation", "annotate x with ppy.Shape"
    )
    score = Entry(
        module="model",
        qualname="score",
        kind="jax.export",
        inputs=(TensorSpec(("B", 4), "float32", "x"),),
        outputs=(TensorSpec(("B",), "float32"),),
        platforms=("cpu", "cuda"),
        payload={"export": EXPORT},
        metadata={"calling_convention_version": 9},
        decision=staged,
    )
    artifact = Artifact(
        project="demo",
        config_digest="9f" * 32,
        written_by={"jaxlib": "0.10.2", "ppy": "0.1.0", "jax": "0.10.2"},
        modules=(ModuleRecord("model", "model.ppy", "ab" * 32),),
        entries=(score,),
        decisions=(staged, stays),
    )
    path = tmp_path / ".ppy" / "artifact.ppyz"
    write_artifact(artifact, path)
    return path


def test_text_shows_the_header_modules_and_each_entry(artifact_path: Path) -> None:
    text = render_text(read_artifact(artifact_path), artifact_path)
    assert str(artifact_path) in text
    assert "ppy-artifact version 1" in text
    assert "ppy 0.1.0, jax 0.10.2, jaxlib 0.10.2" in text
    assert "demo" in text and "9f" * 32 in text
    assert "model.ppy" in text and "ab" * 32 in text
    assert "score(x: float32[B,4]) -> float32[B]" in text
    assert "jax.export" in text and "cpu, cuda" in text
    member = next(line for line in text.splitlines() if "entries/model/score/export" in line)
    assert f"{len(EXPORT)} bytes" in member
    assert hashlib.sha256(EXPORT).hexdigest() in member
    assert "staged: exported for cpu" in text


def test_text_lists_the_functions_that_stay_with_their_reasons(artifact_path: Path) -> None:
    text = render_text(read_artifact(artifact_path), artifact_path)
    stayed = text[text.index("stay ordinary calls (1)") :]
    assert "model.helper" in stayed and "model.ppy:18" in stayed
    assert "x has no shape annotation" in stayed
    assert "remedy: annotate x with ppy.Shape" in stayed
    assert "model.score" not in stayed


def test_json_is_the_manifest_in_the_file(artifact_path: Path) -> None:
    shown = to_json(read_artifact(artifact_path))
    with zipfile.ZipFile(artifact_path) as archive:
        stored = json.loads(archive.read(MANIFEST))
    assert json.loads(json.dumps(shown)) == stored
    assert [e["qualname"] for e in shown["entries"]] == ["score"]
    assert [d["outcome"] for d in shown["decisions"]] == ["staged", "stays"]
