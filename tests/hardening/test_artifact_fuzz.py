"""The artifact reader under fuzzing: whatever the bytes, one clear artifact error or the artifact.

Every case starts from a real artifact (the xla example's, built by a real
``ppy build``) or from nothing, and is read in-process with ``loads``. A case
passes when the reader raises ``ArtifactError`` naming the file and the
remedy, or reads back exactly the original artifact (a damaged byte the
reader has no use for: a timestamp); anything else, another exception, a
different artifact, a partial one, fails it. Hypothesis runs a bounded,
fixed number of examples (``*_EXAMPLES``), which docs/reliability.md counts.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ppy.artifact.model import MANIFEST, Artifact
from ppy.artifact.read import loads
from ppy.errors import ArtifactError

from tests.hardening.support import real_artifact

PATH = "/project/.ppy/artifact.ppyz"
RANDOM_EXAMPLES = 300
SPLICE_EXAMPLES = 300
MANIFEST_EXAMPLES = 300

_FUZZ = settings(
    max_examples=1,  # each test sets its own
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _bounded(examples: int) -> settings:
    return settings(_FUZZ, max_examples=examples)


@pytest.fixture(scope="module")
def original() -> bytes:
    return real_artifact()


@pytest.fixture(scope="module")
def artifact(original: bytes) -> Artifact:
    return loads(original, path=PATH)


def refused_or_intact(data: bytes, intact: Artifact | None) -> str:
    """``"refused"`` or ``"intact"``; fails the test on any other outcome."""
    try:
        loaded = loads(data, path=PATH)
    except ArtifactError as error:
        text = str(error)
        assert text.startswith(PATH), text
        assert "remedy: rebuild it with `ppy build`" in text, text
        assert "Traceback" not in text
        return "refused"
    if intact is not None:
        assert loaded == intact, "damage changed what was read instead of being refused"
    return "intact"


#: Every byte of a member's header and name, then every ``DATA_STRIDE``-th
#: byte of its compressed data, gets one bit flipped.
DATA_STRIDE = 8


def member_regions(data: bytes) -> Iterator[tuple[str, list[int]]]:
    """Where each member's bits are flipped: its local header and name, and its data."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            at = info.header_offset
            names = int.from_bytes(data[at + 26 : at + 28], "little")
            extra = int.from_bytes(data[at + 28 : at + 30], "little")
            start = at + 30 + names + extra
            offsets = [*range(at, start), *range(start, start + info.compress_size, DATA_STRIDE)]
            yield info.filename, offsets


def bit_flip_cases(data: bytes) -> int:
    return sum(len(offsets) for _, offsets in member_regions(data))


def test_random_bytes_are_never_an_artifact() -> None:
    ran = []

    @_bounded(RANDOM_EXAMPLES)
    @given(st.binary(max_size=4096))
    def case(data: bytes) -> None:
        ran.append(refused_or_intact(data, None))

    case()
    assert len(ran) == RANDOM_EXAMPLES
    assert set(ran) == {"refused"}


def test_random_bytes_spliced_into_the_artifact_are_refused_or_harmless(
    original: bytes, artifact: Artifact
) -> None:
    ran = []

    @_bounded(SPLICE_EXAMPLES)
    @given(
        st.integers(0, len(original) - 1),
        st.binary(min_size=1, max_size=64),
        st.booleans(),
    )
    def case(at: int, junk: bytes, insert: bool) -> None:
        tail = original[at:] if insert else original[at + len(junk) :]
        ran.append(refused_or_intact(original[:at] + junk + tail, artifact))

    case()
    assert len(ran) == SPLICE_EXAMPLES
    assert "refused" in ran


def test_truncation_at_every_offset_is_refused(original: bytes) -> None:
    outcomes = [refused_or_intact(original[:cut], None) for cut in range(len(original))]
    assert outcomes == ["refused"] * len(original)


def test_a_bit_flipped_in_any_member_is_refused_or_harmless(
    original: bytes, artifact: Artifact
) -> None:
    outcomes: dict[str, list[str]] = {}
    for name, region in member_regions(original):
        for at in region:
            damaged = bytearray(original)
            damaged[at] ^= 1 << (at // DATA_STRIDE % 8)
            outcomes.setdefault(name, []).append(refused_or_intact(bytes(damaged), artifact))
    assert sum(len(v) for v in outcomes.values()) == bit_flip_cases(original)
    # Every member's data is covered by its CRC and the manifest's sha256: a
    # flip there is always refused, so most of each member's flips are.
    for name, seen in outcomes.items():
        assert seen.count("refused") > len(seen) // 2, name


# -- the manifest, field by field ---------------------------------------------


def _rezip(original: bytes, manifest: bytes) -> bytes:
    """The archive with its manifest replaced, everything else as it was."""
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(original)) as source,
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            content = manifest if info.filename == MANIFEST else source.read(info)
            target.writestr(info.filename, content)
    return buffer.getvalue()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document, as the keys and indexes that reach it."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


def _document(original: bytes) -> dict[str, Any]:
    with zipfile.ZipFile(io.BytesIO(original)) as archive:
        document: dict[str, Any] = json.loads(archive.read(MANIFEST))
    return document


def _at(document: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        document = document[key]
    return document


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def test_a_manifest_changed_anywhere_is_refused_or_read_whole(original: bytes) -> None:
    document = _document(original)
    places = [p for p in _paths(document) if p]
    ran = []

    @_bounded(MANIFEST_EXAMPLES)
    @given(st.sampled_from(places), st.sampled_from(("replace", "delete", "add")), JSON)
    def case(path: tuple[Any, ...], how: str, value: Any) -> None:
        changed = json.loads(json.dumps(document))
        parent = _at(changed, path[:-1])
        key = path[-1]
        if how == "replace":
            parent[key] = value
        elif how == "delete":
            del parent[key]
        elif isinstance(parent, dict):
            parent[f"{key}_extra"] = value
        else:
            parent.insert(key, value)
        data = _rezip(original, json.dumps(changed).encode())
        ran.append(refused_or_intact(data, None))

    case()
    assert len(ran) == MANIFEST_EXAMPLES
    assert "refused" in ran


def _fields(document: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Every field the format defines: all keys, except inside the free-form ``metadata``."""
    return [
        p for p in _paths(document) if p and isinstance(p[-1], str) and "metadata" not in p[:-1]
    ]


def _optional(path: tuple[Any, ...]) -> bool:
    """A spec's ``name`` may be absent (outputs have none), and so may any one entry of
    the maps ``written_by`` and ``stage_keys``; every other field is required."""
    spec_name = len(path) >= 3 and path[-3] in ("inputs", "outputs") and path[-1] == "name"
    return spec_name or (len(path) >= 2 and path[-2] in ("written_by", "stage_keys"))


WRONG: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "missing": lambda parent, key: parent.pop(key),
    "a list of lists": lambda parent, key: parent.__setitem__(key, [[]]),
    "an object of numbers": lambda parent, key: parent.__setitem__(key, {"$": 1}),
}


def _wrongs(path: tuple[Any, ...]) -> list[str]:
    skip = set()
    if _optional(path):
        skip.add("missing")
    if path[-1] == "metadata":  # any object is valid metadata
        skip.add("an object of numbers")
    return [w for w in WRONG if w not in skip]


def manifest_field_cases(original: bytes) -> int:
    return sum(len(_wrongs(p)) for p in _fields(_document(original)))


def test_every_field_missing_or_of_a_wrong_type_is_refused(original: bytes) -> None:
    document = _document(original)
    refused = 0
    for path in _fields(document):
        for words in _wrongs(path):
            wrong = WRONG[words]
            changed = json.loads(json.dumps(document))
            wrong(_at(changed, path[:-1]), path[-1])
            data = _rezip(original, json.dumps(changed).encode())
            outcome = refused_or_intact(data, None)
            assert outcome == "refused", f"{'.'.join(map(str, path))} {words} was read"
            refused += 1
    assert refused == manifest_field_cases(original)
