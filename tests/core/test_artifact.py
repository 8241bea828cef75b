"""The artifact file: written deterministically, read back exactly, and refused
with a message naming the damage and the remedy whenever it is not intact.

Every test writes a real zip file to disk and reads it with ``read_artifact``;
tampering is done the way a person or a broken copy would do it, by rewriting
the archive or its bytes. Nothing here imports jax.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ppy.artifact.entry import BUILD_ONLY, Entry
from ppy.artifact.model import FORMAT, FORMAT_VERSION, MANIFEST, Artifact, ModuleRecord
from ppy.artifact.read import loads, read_artifact
from ppy.artifact.write import dumps, write_artifact
from ppy.decision import Check, Decision, Outcome
from ppy.errors import ArtifactError
from ppy.spec import TensorSpec

EXPORT = "entries/model/score/export"
STABLEHLO = "entries/model/score/stablehlo"


def _decision(qualname: str, outcome: Outcome, rule: str, reason: str, **kw: Any) -> Decision:
    return Decision(
        module="model",
        qualname=qualname,
        location=f"model.ppy:{len(qualname)}",
        outcome=outcome,
        rule=rule,
        reason=reason,
        remedy=kw.get("remedy"),
        plugin="jax",
        kind="jax.export",
        signature=kw.get("signature", f"{qualname}(x)"),
        trail=(
            Check("decorated", True, "@jax.jit"),
            Check(rule, outcome is not Outcome.STAYS, reason, kw.get("remedy")),
        ),
        output=kw.get("output", ""),
    )


def sample(*, reverse: bool = False) -> Artifact:
    """A two-entry artifact; ``reverse`` builds the same one in another order."""
    staged = _decision(
        "score",
        Outcome.STAGED,
        "staged",
        "exported for cpu",
        signature="score(x: float32[B,4]) -> float32[B]",
    )
    stays = _decision(
        "helper",
        Outcome.STAYS,
        "no-annotation",
        "x has no shape annotation",
        remedy="annotate x with ppy.Shape",
        output="printed while staging\n",
    )
    score = Entry(
        module="model",
        qualname="score",
        kind="jax.export",
        inputs=(TensorSpec(("B", 4), "float32", "x"),),
        outputs=(TensorSpec(("B",), "float32"),),
        platforms=("cpu",),
        payload={"export": bytes(range(256)) * 16, "stablehlo": b"module @score {}\n" * 40},
        metadata={"jax": "0.10.2", "calling_convention_version": 9, "nested": {"a": [1, 2]}},
        decision=staged,
    )
    collatz = Entry(
        module="pkg.loops",
        qualname="Search.collatz",
        kind="xla.scalar",
        inputs=(TensorSpec((), "int64", "n"),),
        outputs=(TensorSpec((), "int64"), TensorSpec((), "int64")),
        platforms=("cpu", "cuda"),
        payload={"stablehlo": b"func.func @main() {}\n"},
    )
    modules = (
        ModuleRecord("model", "model.ppy", "ab" * 32, {"jax": "cd" * 32}),
        ModuleRecord("pkg.loops", "pkg/loops.ppy", "ef" * 32),
    )
    entries = (score, collatz)
    written_by = {"ppy": "0.1.0", "jax": "0.10.2", "jaxlib": "0.10.2"}
    if reverse:
        modules, entries = modules[::-1], entries[::-1]
        written_by = dict(reversed(written_by.items()))
        score = dataclasses.replace(score, payload=dict(reversed(score.payload.items())))
        entries = (collatz, score)
    return Artifact(
        project="demo",
        config_digest="12" * 32,
        written_by=written_by,
        modules=modules,
        entries=entries,
        decisions=(staged, stays),
    )


@pytest.fixture
def written(tmp_path: Path) -> Path:
    path = tmp_path / "project" / ".ppy" / "artifact.ppyz"
    write_artifact(sample(), path)
    return path


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def _rewrite(
    path: Path,
    *,
    edit: Callable[[dict[str, Any]], None] | None = None,
    members: Callable[[dict[str, bytes]], None] | None = None,
) -> None:
    """Rewrite the archive as a hand edit would: new manifest, members changed."""
    contents = _members(path)
    if edit is not None:
        document = json.loads(contents[MANIFEST])
        edit(document)
        contents[MANIFEST] = json.dumps(document).encode()
    if members is not None:
        members(contents)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            archive.writestr(name, data)


def _refused(path: Path) -> ArtifactError:
    with pytest.raises(ArtifactError) as caught:
        read_artifact(path)
    error = caught.value
    assert str(path) in str(error)
    assert "ppy build" in str(error), "every refusal names the remedy"
    return error


def _sorted(artifact: Artifact) -> Artifact:
    return dataclasses.replace(
        artifact,
        modules=tuple(sorted(artifact.modules, key=lambda m: m.name)),
        entries=tuple(sorted(artifact.entries, key=lambda e: e.key)),
    )


# -- writing and reading back -------------------------------------------------


def test_round_trip_reads_back_what_was_written(written: Path) -> None:
    loaded = read_artifact(written)
    assert loaded == _sorted(sample())
    score = loaded.entry("model", "score")
    assert score is not None
    assert score.payload["export"] == bytes(range(256)) * 16
    assert score.signature == "score(x: float32[B,4]) -> float32[B]"
    assert score.decision is not None and score.decision.reason == "exported for cpu"
    assert loaded.entry("model", "missing") is None
    record = loaded.module("model")
    assert record is not None and record.stage_keys == {"jax": "cd" * 32}
    assert [d.outcome for d in loaded.decisions] == [Outcome.STAGED, Outcome.STAYS]
    assert loaded.decisions[1].remedy == "annotate x with ppy.Shape"
    assert loaded.decisions[1].output == "printed while staging\n"


def test_the_layout_is_a_manifest_and_one_member_per_payload(written: Path) -> None:
    contents = _members(written)
    assert sorted(contents) == [
        "entries/model/score/export",
        "entries/model/score/stablehlo",
        "entries/pkg.loops/Search.collatz/stablehlo",
        MANIFEST,
    ]
    document = json.loads(contents[MANIFEST])
    assert document["format"] == FORMAT and document["format_version"] == FORMAT_VERSION
    assert document["written_by"] == {"ppy": "0.1.0", "jax": "0.10.2", "jaxlib": "0.10.2"}
    assert document["modules"][0] == {
        "name": "model",
        "path": "model.ppy",
        "sha256": "ab" * 32,
        "stage_keys": {"jax": "cd" * 32},
    }
    score = document["entries"][0]
    assert score["inputs"] == [{"dims": ["B", 4], "dtype": "float32", "name": "x"}]
    export = bytes(range(256)) * 16
    assert score["members"][0] == {
        "name": "export",
        "member": EXPORT,
        "size": len(export),
        "sha256": hashlib.sha256(export).hexdigest(),
    }
    assert [d["outcome"] for d in document["decisions"]] == ["staged", "stays"]


def test_the_same_artifact_gives_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.ppyz", tmp_path / "b.ppyz"
    write_artifact(sample(), first)
    os.utime(tmp_path, (0, 0))
    write_artifact(sample(reverse=True), second)
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        infos = archive.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}


def test_write_is_atomic_and_leaves_no_temporary_file(written: Path) -> None:
    before = written.read_bytes()
    changed = dataclasses.replace(sample(), project="renamed")
    write_artifact(changed, written)
    assert written.read_bytes() != before
    assert read_artifact(written).project == "renamed"
    assert sorted(p.name for p in written.parent.iterdir()) == [written.name]


def test_a_write_that_cannot_happen_is_an_artifact_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ArtifactError, match="cannot write the artifact"):
        write_artifact(sample(), blocker / "artifact.ppyz")


def test_entries_that_cannot_be_laid_out_are_refused_on_write() -> None:
    bad = dataclasses.replace(sample().entries[0], payload={"../escape": b"x"})
    with pytest.raises(ValueError, match="payload name"):
        dumps(dataclasses.replace(sample(), entries=(bad,)))
    twice = sample().entries[0]
    with pytest.raises(ValueError, match="more than once"):
        dumps(dataclasses.replace(sample(), entries=(twice, twice)))


def test_loading_executes_nothing_in_a_payload(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Trap:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (marker,))

    payload = pickle.dumps(Trap())
    entry = dataclasses.replace(sample().entries[0], payload={"export": payload})
    path = tmp_path / "a.ppyz"
    write_artifact(dataclasses.replace(sample(), entries=(entry,)), path)
    loaded = read_artifact(path)
    assert loaded.entries[0].payload["export"] == payload
    assert not marker.exists()


def test_every_record_field_is_in_the_manifest() -> None:
    """A new field in a record is a new manifest field: it needs a new format
    version. (What a plugin tells the build only, it marks ``BUILD_ONLY``.)"""
    document = json.loads(_manifest_bytes(sample()))
    written = {f.name for f in dataclasses.fields(Entry) if f.metadata != BUILD_ONLY}
    entry_fields = written - {"payload"} | {"members"}
    assert {f.name for f in dataclasses.fields(Entry)} - written == {"note", "trail"}
    assert set(document["entries"][0]) == entry_fields
    assert set(document["decisions"][0]) == {f.name for f in dataclasses.fields(Decision)}
    assert set(document["decisions"][0]["trail"][0]) == {f.name for f in dataclasses.fields(Check)}
    assert set(document["modules"][0]) == {f.name for f in dataclasses.fields(ModuleRecord)}
    top = {f.name for f in dataclasses.fields(Artifact)} | {"format", "format_version"}
    assert set(document) == top


def _manifest_bytes(artifact: Artifact) -> bytes:
    import io

    with zipfile.ZipFile(io.BytesIO(dumps(artifact))) as archive:
        return archive.read(MANIFEST)


# -- what the reader refuses --------------------------------------------------


def test_a_missing_file_says_to_build(tmp_path: Path) -> None:
    error = _refused(tmp_path / "nowhere.ppyz")
    assert "no artifact" in str(error)


def test_a_folder_is_not_an_artifact(tmp_path: Path) -> None:
    """Named as what it is, with a remedy that works: a build replaces only
    an artifact it wrote, so a rebuild alone would fail on it too."""
    error = str(_refused(tmp_path))
    assert "not a file" in error and "remedy: move it away" in error, error


def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "artifact.ppyz"
    path.write_text('{"format": "ppy-artifact"}')
    assert "not a zip archive" in str(_refused(path))


def test_a_truncated_file_is_refused(written: Path) -> None:
    data = written.read_bytes()
    written.write_bytes(data[: len(data) // 2])
    assert "truncated" in str(_refused(written))


def test_every_truncation_is_refused(written: Path) -> None:
    data = written.read_bytes()
    for cut in range(len(data)):
        with pytest.raises(ArtifactError, match="ppy build"):
            loads(data[:cut], path=str(written))


def test_a_bit_flipped_inside_a_payload_names_the_member(written: Path) -> None:
    with zipfile.ZipFile(written) as archive:
        info = archive.getinfo(EXPORT)
    data = bytearray(written.read_bytes())
    # The member's data follows its 30-byte local header, name and extra field.
    name_length = int.from_bytes(data[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_length = int.from_bytes(data[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_length + extra_length
    data[start + info.compress_size // 2] ^= 0x10
    written.write_bytes(bytes(data))
    error = _refused(written)
    assert error.member == EXPORT
    assert EXPORT in str(error) and "damaged" in str(error)


def test_a_crc_error_names_the_member(tmp_path: Path) -> None:
    """A stored (uncompressed) member decompresses whatever its bytes; only the CRC catches it."""
    source = tmp_path / "deflated.ppyz"
    write_artifact(sample(), source)
    path = tmp_path / "stored.ppyz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, content in _members(source).items():
            archive.writestr(name, content)
    data = bytearray(path.read_bytes())
    where = data.find(b"module @score {}")
    data[where] ^= 0x01
    path.write_bytes(bytes(data))
    error = _refused(path)
    assert error.member == STABLEHLO and "CRC" in str(error)


def test_every_single_byte_corruption_is_refused_or_harmless(written: Path) -> None:
    data = written.read_bytes()
    original = read_artifact(written)
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        try:
            loaded = loads(bytes(damaged), path=str(written))
        except ArtifactError as error:
            assert "ppy build" in str(error)
        else:  # a header field the reader has no use for (a timestamp, say)
            assert loaded == original, f"byte {at} changed what was read"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the manifest field at ``path`` (``a.b[0].c``)."""
    keys: list[str | int] = []
    for part in path.replace("]", "").split("."):
        name, *indexes = part.split("[")
        keys.append(name)
        keys.extend(int(i) for i in indexes)

    def edit(document: dict[str, Any]) -> None:
        target: Any = document
        for key in keys[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value

    return edit


_DELETE = object()


def test_a_changed_sha256_names_the_member(written: Path) -> None:
    _rewrite(written, edit=_set("entries[0].members[0].sha256", "0" * 64))
    error = _refused(written)
    assert error.member == EXPORT and "sha256" in str(error)


def test_changed_content_names_the_member(written: Path) -> None:
    def flip(contents: dict[str, bytes]) -> None:
        contents[STABLEHLO] = contents[STABLEHLO].replace(b"score", b"scorn", 1)

    _rewrite(written, members=flip)
    error = _refused(written)
    assert error.member == STABLEHLO and "sha256" in str(error)


def test_a_changed_size_names_the_member(written: Path) -> None:
    _rewrite(written, edit=_set("entries[0].members[1].size", 7))
    error = _refused(written)
    assert error.member == STABLEHLO and "size" in str(error) and "7" in str(error)


def test_an_unlisted_member_is_refused(written: Path) -> None:
    _rewrite(written, members=lambda c: c.update({"entries/model/score/extra": b"?"}))
    error = _refused(written)
    assert error.member == "entries/model/score/extra" and "does not list" in str(error)


def test_a_listed_member_that_is_absent_is_refused(written: Path) -> None:
    _rewrite(written, members=lambda c: c.pop(STABLEHLO))
    error = _refused(written)
    assert error.member == STABLEHLO and "lacks" in str(error)


def test_a_manifest_member_name_with_dotdot_is_refused(written: Path) -> None:
    _rewrite(written, edit=_set("entries[0].members[0].member", "entries/../../etc/passwd"))
    error = _refused(written)
    assert "entries[0].members[0].member" in str(error) and "'..'" in str(error)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("entries/model/../../escape", "'..'"),
        ("/etc/artifact", "absolute"),
        ("C:/artifact", "absolute"),
        ("entries\\model", "backslash"),
    ],
)
def test_an_archive_member_with_an_unsafe_name_is_refused(
    written: Path, name: str, why: str
) -> None:
    _rewrite(written, members=lambda c: c.update({name: b"x"}))
    error = _refused(written)
    assert repr(name) in str(error) and why in str(error)


def test_a_member_held_twice_is_refused(written: Path) -> None:
    with (
        pytest.warns(UserWarning, match="Duplicate name"),
        zipfile.ZipFile(written, "a") as archive,
    ):
        archive.writestr(STABLEHLO, b"module @other {}\n")
    error = _refused(written)
    assert error.member == STABLEHLO and "twice" in str(error)


def test_an_archive_without_a_manifest_is_refused(written: Path) -> None:
    _rewrite(written, members=lambda c: c.pop(MANIFEST))
    assert MANIFEST in str(_refused(written))


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'{"format": "ppy-artifact", "format": "ppy-artifact"}', "twice"),
        (b'{"format_version": NaN}', "NaN"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"format": "other-thing", "format_version": 1}', "not a ppy artifact"),
        (b'{"format_version": 1}', "no format"),
        (b'{"format": "ppy-artifact", "format_version": "1"}', "format_version must be"),
    ],
)
def test_a_manifest_that_is_not_a_ppy_manifest_is_refused(
    written: Path, manifest: bytes, expected: str
) -> None:
    _rewrite(written, members=lambda c: c.update({MANIFEST: manifest}))
    error = _refused(written)
    assert error.member == MANIFEST and expected in str(error)


def test_an_unknown_format_version_says_which_this_ppy_reads(written: Path) -> None:
    def future(document: dict[str, Any]) -> None:
        document["format_version"] = 2
        document["written_by"]["ppy"] = "9.0.0"
        document["new_field"] = True

    _rewrite(written, edit=future)
    message = str(_refused(written))
    assert "format version 2" in message and "reads version 1" in message
    assert "ppy 9.0.0" in message


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("project", _DELETE, "project is missing"),
        ("project", 3, "project must be a string"),
        ("written_by.jax", 0.1, "written_by.jax must be a string"),
        ("modules", {}, "modules must be a list"),
        ("modules[1].sha256", "abc", "modules[1].sha256 must be 64 lowercase hex"),
        ("modules[0].stage_keys", [], "modules[0].stage_keys must be an object"),
        ("modules[0].extra", 1, "modules[0].extra is not a field of format version 1"),
        ("modules[1].name", "model", "module 'model' is listed twice"),
        ("entries[0].kind", "", "entries[0].kind is empty"),
        ("entries[0].inputs[0].dims[1]", 4.5, "entries[0].inputs[0].dims[1] must be"),
        ("entries[0].inputs[0].dims[0]", True, "entries[0].inputs[0].dims[0] must be"),
        ("entries[0].outputs[0].dtype", None, "entries[0].outputs[0].dtype must be a string"),
        ("entries[1].platforms[1]", 7, "entries[1].platforms[1] must be a string"),
        ("entries[0].metadata", [], "entries[0].metadata must be an object"),
        ("entries[0].members[0].size", "4096", "entries[0].members[0].size must be"),
        ("entries[0].members[0].size", -1, "entries[0].members[0].size must be"),
        ("entries[0].members[1].name", "export", "appears twice"),
        ("entries[1].members[0].member", EXPORT, "lists this member twice"),
        ("entries[0].decision.outcome", "maybe", "entries[0].decision.outcome 'maybe'"),
        ("decisions[1].trail[0].passed", "yes", "decisions[1].trail[0].passed must be"),
        ("decisions[1].remedy", 5, "decisions[1].remedy must be a string or null"),
        ("decisions[0]", _DELETE, None),
        ("decisions", _DELETE, "decisions is missing"),
    ],
)
def test_a_missing_or_ill_typed_field_is_named(
    written: Path, field: str, value: Any, expected: str | None
) -> None:
    _rewrite(written, edit=_set(field, value))
    if expected is None:  # removing a decision leaves a valid manifest
        assert len(read_artifact(written).decisions) == 1
        return
    error = _refused(written)
    assert expected in str(error)


def test_an_entry_listed_twice_is_refused(written: Path) -> None:
    def again(document: dict[str, Any]) -> None:
        document["entries"].append(dict(document["entries"][1], members=[]))

    _rewrite(written, edit=again)
    assert "pkg.loops:Search.collatz is listed twice" in str(_refused(written))
