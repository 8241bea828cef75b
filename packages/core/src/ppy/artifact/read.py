"""Reading the artifact: untrusted bytes, validated whole before anything is handed out.

An artifact may come from another machine, be truncated, or be made to
hurt: every member name, size, hash and manifest field is checked, sizes
against the headers before anything is inflated, and a file that fails any
check is refused with an ``ArtifactError`` that names what is wrong and the
remedy. Nothing read is executed. Members are hashed as they stream by,
a chunk at a time, and the payloads are handed out still in the archive
(``ppy.artifact.payload``): a small file that inflates to gigabytes costs
the reader a chunk, not its size.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from ppy.artifact.entry import Entry
from ppy.artifact.model import (
    ARCHIVE_SIZE_LIMIT,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MANIFEST_DEPTH_LIMIT,
    MANIFEST_SIZE_LIMIT,
    MEMBER_SIZE_LIMIT,
    NOFOLLOW,
    READABLE_VERSIONS,
    SHORT_NAME,
    Artifact,
    ModuleRecord,
    depth,
)
from ppy.artifact.payload import ArchivedPayload, StoredMember, chunks, inflate
from ppy.decision import Check, Decision, Outcome
from ppy.errors import ArtifactError
from ppy.spec import TensorSpec

__all__ = ["ArtifactError", "loads", "read_artifact"]

_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Validator:
    """Reads typed fields out of parsed JSON, naming the field path on failure."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, message: str, member: str | None = MANIFEST) -> NoReturn:
        raise ArtifactError(message, path=self.path, member=member)

    def obj(self, value: Any, where: str, keys: Iterable[str]) -> Mapping[str, Any]:
        """``value`` as an object with exactly ``keys``; ``where`` "" is the manifest itself."""
        if not isinstance(value, dict):
            self.fail(f"{where or 'the manifest'} must be an object, found {_json_type(value)}")
        prefix = f"{where}." if where else ""
        expected = set(keys)
        missing = sorted(expected - set(value))
        if missing:
            self.fail(f"{prefix}{missing[0]} is missing")
        extra = sorted(set(value) - expected)
        if extra:
            self.fail(
                f"{prefix}{extra[0]} is not a field of format version {FORMAT_VERSION} "
                "(a file with new fields has a new format version)"
            )
        return value

    def text(self, value: Any, where: str, *, optional: bool = False) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            wanted = "a string or null" if optional else "a string"
            self.fail(f"{where} must be {wanted}, found {_json_type(value)}")
        return value

    def count(self, value: Any, where: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(f"{where} must be a non-negative integer, found {_json_type(value)}")
        return value

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            self.fail(f"{where} must be true or false, found {_json_type(value)}")
        return value

    def array(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            self.fail(f"{where} must be a list, found {_json_type(value)}")
        return value

    def sha256(self, value: Any, where: str) -> str:
        text: str = self.text(value, where)
        if not _SHA256.fullmatch(text):
            self.fail(f"{where} must be 64 lowercase hex digits, found {text!r}")
        return text

    def str_map(self, value: Any, where: str) -> dict[str, str]:
        if not isinstance(value, dict):
            self.fail(f"{where} must be an object, found {_json_type(value)}")
        return {k: self.text(v, f"{where}.{k}") for k, v in value.items()}

    def str_list(self, value: Any, where: str) -> tuple[str, ...]:
        items = self.array(value, where)
        return tuple(self.text(v, f"{where}[{i}]") for i, v in enumerate(items))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


_MODULE_KEYS = ("name", "path", "sha256", "stage_keys")
_ENTRY_KEYS = (
    "module",
    "qualname",
    "kind",
    "inputs",
    "outputs",
    "platforms",
    "members",
    "metadata",
    "decision",
)
_MEMBER_KEYS = ("name", "member", "size", "sha256")
_DECISION_KEYS = (
    "module",
    "qualname",
    "location",
    "outcome",
    "rule",
    "reason",
    "remedy",
    "plugin",
    "kind",
    "signature",
    "trail",
    "output",
)
_CHECK_KEYS = ("rule", "passed", "detail", "remedy")
_TOP_KEYS = (
    "format",
    "format_version",
    "written_by",
    "project",
    "config_digest",
    "modules",
    "entries",
    "decisions",
)


def _spec(r: _Validator, value: Any, where: str) -> TensorSpec:
    if isinstance(value, dict) and "name" not in value:
        data = r.obj(value, where, ("dims", "dtype"))
    else:
        data = r.obj(value, where, ("dims", "dtype", "name"))
        r.text(data["name"], f"{where}.name")
    dims = r.array(data["dims"], f"{where}.dims")
    for i, dim in enumerate(dims):
        if not (isinstance(dim, str) or (isinstance(dim, int) and not isinstance(dim, bool))):
            r.fail(
                f"{where}.dims[{i}] must be an integer or a symbol name, found {_json_type(dim)}"
            )
    r.text(data["dtype"], f"{where}.dtype")
    return TensorSpec.from_json(data)


def _decision(r: _Validator, value: Any, where: str) -> Decision:
    data = r.obj(value, where, _DECISION_KEYS)
    outcome = r.text(data["outcome"], f"{where}.outcome")
    if outcome not in {o.value for o in Outcome}:
        known = ", ".join(o.value for o in Outcome)
        r.fail(f"{where}.outcome {outcome!r} is not one of {known}")
    trail = []
    for i, item in enumerate(r.array(data["trail"], f"{where}.trail")):
        at = f"{where}.trail[{i}]"
        check = r.obj(item, at, _CHECK_KEYS)
        trail.append(
            Check(
                rule=r.text(check["rule"], f"{at}.rule"),
                passed=r.flag(check["passed"], f"{at}.passed"),
                detail=r.text(check["detail"], f"{at}.detail"),
                remedy=r.text(check["remedy"], f"{at}.remedy", optional=True),
            )
        )
    return Decision(
        module=r.text(data["module"], f"{where}.module"),
        qualname=r.text(data["qualname"], f"{where}.qualname"),
        location=r.text(data["location"], f"{where}.location"),
        outcome=Outcome(outcome),
        rule=r.text(data["rule"], f"{where}.rule"),
        reason=r.text(data["reason"], f"{where}.reason"),
        remedy=r.text(data["remedy"], f"{where}.remedy", optional=True),
        plugin=r.text(data["plugin"], f"{where}.plugin", optional=True),
        kind=r.text(data["kind"], f"{where}.kind", optional=True),
        signature=r.text(data["signature"], f"{where}.signature"),
        trail=tuple(trail),
        output=r.text(data["output"], f"{where}.output"),
    )


def _safe_member(name: str) -> str | None:
    """Why ``name`` cannot be an archive member, or None when it can."""
    if not name:
        return "is empty"
    if name.startswith("/") or name.startswith("\\") or re.match(r"[A-Za-z]:", name):
        return "is an absolute path"
    if "\\" in name:
        return "contains a backslash"
    parts = name.split("/")
    if ".." in parts:
        return "contains '..'"
    if any(p in ("", ".") for p in parts):
        return "has an empty or '.' path segment"
    if any(ord(c) < 32 for c in name):
        return "contains a control character"
    return None


@dataclass(frozen=True)
class _Listed:
    """A payload member as the manifest lists it."""

    entry: int
    short: str
    member: str
    size: int
    sha256: str


def _entry(r: _Validator, value: Any, index: int) -> tuple[Entry, list[_Listed]]:
    where = f"entries[{index}]"
    data = r.obj(value, where, _ENTRY_KEYS)
    module = r.text(data["module"], f"{where}.module")
    qualname = r.text(data["qualname"], f"{where}.qualname")
    kind = r.text(data["kind"], f"{where}.kind")
    if not kind:
        r.fail(f"{where}.kind is empty")
    inputs = tuple(
        _spec(r, s, f"{where}.inputs[{i}]")
        for i, s in enumerate(r.array(data["inputs"], f"{where}.inputs"))
    )
    outputs = tuple(
        _spec(r, s, f"{where}.outputs[{i}]")
        for i, s in enumerate(r.array(data["outputs"], f"{where}.outputs"))
    )
    platforms = r.str_list(data["platforms"], f"{where}.platforms")
    metadata = data["metadata"]
    if not isinstance(metadata, dict):
        r.fail(f"{where}.metadata must be an object, found {_json_type(metadata)}")
    decision = (
        None if data["decision"] is None else _decision(r, data["decision"], f"{where}.decision")
    )
    listed: list[_Listed] = []
    shorts: set[str] = set()
    for i, item in enumerate(r.array(data["members"], f"{where}.members")):
        at = f"{where}.members[{i}]"
        member = r.obj(item, at, _MEMBER_KEYS)
        short = r.text(member["name"], f"{at}.name")
        if not SHORT_NAME.fullmatch(short):
            r.fail(f"{at}.name {short!r} is not a valid payload name")
        if short in shorts:
            r.fail(f"{at}.name {short!r} appears twice in the entry")
        shorts.add(short)
        name = r.text(member["member"], f"{at}.member")
        why = _safe_member(name)
        if why:
            r.fail(f"{at}.member {name!r} {why}")
        listed.append(
            _Listed(
                index,
                short,
                name,
                r.count(member["size"], f"{at}.size"),
                r.sha256(member["sha256"], f"{at}.sha256"),
            )
        )
    entry = Entry(
        module=module,
        qualname=qualname,
        kind=kind,
        inputs=inputs,
        outputs=outputs,
        platforms=platforms,
        payload={},
        metadata=metadata,
        decision=decision,
    )
    return entry, listed


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one object")
        seen[key] = value
    return seen


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__


def _open(r: _Validator, data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, NotImplementedError, EOFError, ValueError, OSError) as error:
        r.fail(
            f"not a ppy artifact: not a zip archive, or a truncated one ({_describe(error)})",
            member=None,
        )


def _file_type(info: zipfile.ZipInfo) -> str | None:
    """What a member is other than a plain file (a link, a folder, a device), or None.

    Unix writers keep the file's mode in the high half of ``external_attr``;
    a mode without a file type (other writers) reads as a plain file.
    """
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind in (0, stat.S_IFREG) and not info.is_dir():
        return None
    if kind == stat.S_IFLNK:
        return "a symbolic link"
    if kind == stat.S_IFDIR or info.is_dir():
        return "a folder"
    return "a special file"


def _members(r: _Validator, archive: zipfile.ZipFile, limit: int) -> dict[str, zipfile.ZipInfo]:
    """The archive's members by name, once each is known to be safe, unique and of bounded size.

    Sizes come from the headers, before any member is decompressed; a header
    that understates its member makes the read fail its CRC, since ``zipfile``
    never returns more than the header's size.
    """
    found: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        why = _safe_member(info.filename)
        if why:
            r.fail(f"archive member name {info.filename!r} {why}", member=None)
        if info.filename in found:
            r.fail("the archive holds this member twice", member=info.filename)
        other = _file_type(info)
        if other:
            r.fail(
                f"the member is {other}; an artifact holds plain files only", member=info.filename
            )
        if info.flag_bits & 0x1:
            r.fail("the member is encrypted; ppy never writes one", member=info.filename)
        if info.file_size > limit:
            r.fail(
                f"the member would decompress to {info.file_size} bytes, over the limit of "
                f"{limit} (a damaged or hostile archive)",
                member=info.filename,
            )
        total += info.file_size
        if total > ARCHIVE_SIZE_LIMIT:
            r.fail(
                f"the members would decompress to more than {ARCHIVE_SIZE_LIMIT} bytes together "
                "(a damaged or hostile archive)",
                member=None,
            )
        found[info.filename] = info
    return found


def _document(r: _Validator, raw: bytes) -> Mapping[str, Any]:
    """The manifest's JSON, once it says it is a format and version this ppy reads."""
    try:
        document = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_reject_constant
        )
    except (UnicodeDecodeError, ValueError) as error:
        r.fail(f"the manifest is not valid JSON ({error})")
    except RecursionError:
        r.fail(f"the manifest nests deeper than {MANIFEST_DEPTH_LIMIT} levels")
    if depth(document) > MANIFEST_DEPTH_LIMIT:
        r.fail(f"the manifest nests deeper than {MANIFEST_DEPTH_LIMIT} levels")
    if not isinstance(document, dict):
        r.fail(f"the manifest must be a JSON object, found {_json_type(document)}")
    if "format" not in document:
        r.fail(f"not a ppy artifact: the manifest has no format (expected {FORMAT!r})")
    if document["format"] != FORMAT:
        r.fail(
            f"not a ppy artifact: format is {_json_type(document['format'])}, expected {FORMAT!r}"
        )
    version = document.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        r.fail(f"format_version must be an integer, found {_json_type(version)}")
    if version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        writer = document.get("written_by")
        by = writer.get("ppy") if isinstance(writer, dict) else None
        r.fail(
            f"format version {version} is not one this ppy reads (it reads version "
            f"{readable})" + (f"; it was written by ppy {by}" if isinstance(by, str) else "")
        )
    return r.obj(document, "", _TOP_KEYS)


def _module(r: _Validator, value: Any, where: str) -> ModuleRecord:
    record = r.obj(value, where, _MODULE_KEYS)
    return ModuleRecord(
        name=r.text(record["name"], f"{where}.name"),
        path=r.text(record["path"], f"{where}.path"),
        sha256=r.sha256(record["sha256"], f"{where}.sha256"),
        stage_keys=r.str_map(record["stage_keys"], f"{where}.stage_keys"),
    )


def _unique(r: _Validator, names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            r.fail(f"{what} {name} is listed twice")
        seen.add(name)


def _stored(
    r: _Validator, archive: zipfile.ZipFile, members: Mapping[str, zipfile.ZipInfo], item: _Listed
) -> StoredMember:
    """A listed member, checked against the size and sha256 the manifest gives.

    The member is hashed as it streams by and none of it is kept: a member
    of a gigabyte of zeros, a few kilobytes zipped, costs one chunk here.
    """
    info = members.get(item.member)
    if info is None:
        r.fail("the manifest lists this member but the archive lacks it", member=item.member)
    # Compare the declared size first: nothing is decompressed beyond what was promised.
    if info.file_size != item.size:
        r.fail(f"size is {info.file_size} bytes, the manifest says {item.size}", member=item.member)
    digest = hashlib.sha256()
    size = 0
    for chunk in chunks(archive, info, r.path):
        size += len(chunk)
        digest.update(chunk)
    if size != item.size:
        r.fail(f"size is {size} bytes, the manifest says {item.size}", member=item.member)
    if digest.hexdigest() != item.sha256:
        r.fail("sha256 does not match the manifest; the content changed", member=item.member)
    return StoredMember(info, item.size, item.sha256)


def loads(
    data: bytes, *, path: str = "<bytes>", member_size_limit: int = MEMBER_SIZE_LIMIT
) -> Artifact:
    """Parse and validate artifact bytes; every problem is an ``ArtifactError``.

    ``path`` only names the file in error messages; ``member_size_limit`` is
    the most bytes any one member may decompress to. Checks run in an order
    that gives the most useful message first: the archive, then the format
    and its version, then the manifest's fields, then every member against
    what the manifest says about it. The entries' payloads stay in the
    archive (``ArchivedPayload``), which stays open over ``data`` for them.
    """
    r = _Validator(path)
    archive = _open(r, data)
    try:
        return _artifact(r, archive, member_size_limit)
    except BaseException:
        archive.close()
        raise


def _artifact(r: _Validator, archive: zipfile.ZipFile, member_size_limit: int) -> Artifact:
    """The artifact in ``archive``, every member checked; ``loads`` says in what order."""
    members = _members(r, archive, member_size_limit)
    if MANIFEST not in members:
        r.fail(f"not a ppy artifact: the archive has no {MANIFEST}", member=None)
    if members[MANIFEST].file_size > MANIFEST_SIZE_LIMIT:
        r.fail(
            f"the manifest would decompress to {members[MANIFEST].file_size} bytes, over "
            f"the limit of {MANIFEST_SIZE_LIMIT} (a damaged or hostile archive)"
        )
    top = _document(r, inflate(archive, members[MANIFEST], r.path))

    written_by = r.str_map(top["written_by"], "written_by")
    project = r.text(top["project"], "project")
    config_digest = r.text(top["config_digest"], "config_digest")
    modules = tuple(
        _module(r, m, f"modules[{i}]") for i, m in enumerate(r.array(top["modules"], "modules"))
    )
    _unique(r, [repr(m.name) for m in modules], "module")
    parsed = [_entry(r, e, i) for i, e in enumerate(r.array(top["entries"], "entries"))]
    _unique(r, [f"{e.module}:{e.qualname}" for e, _ in parsed], "entry")
    decisions = tuple(
        _decision(r, d, f"decisions[{i}]")
        for i, d in enumerate(r.array(top["decisions"], "decisions"))
    )

    listed = [item for _, items in parsed for item in items]
    claimed: set[str] = {MANIFEST}
    for item in listed:
        if item.member in claimed:
            r.fail("the manifest lists this member twice", member=item.member)
        claimed.add(item.member)
    extra = sorted(set(members) - claimed)
    if extra:
        r.fail("the archive holds a member the manifest does not list", member=extra[0])
    entries = tuple(
        replace(
            entry,
            payload=ArchivedPayload(
                archive, r.path, {i.short: _stored(r, archive, members, i) for i in items}
            ),
        )
        for entry, items in parsed
    )
    return Artifact(
        project=project,
        config_digest=config_digest,
        written_by=written_by,
        modules=modules,
        entries=entries,
        decisions=decisions,
    )


#: What to do where the artifact's path holds a folder, a FIFO or a device:
#: a build refuses to replace what it did not write, so "rebuild" alone fails.
_NOT_A_FILE = "move it away; `ppy build` then writes the artifact there"


def read_artifact(path: Path) -> Artifact:
    """Read and validate the artifact at ``path``."""
    path = Path(path)
    where = str(path)
    if path.is_symlink():
        raise ArtifactError(
            "is a symbolic link; ppy reads an artifact only from its own file",
            path=where,
            remedy="copy the artifact into place, or build it with `ppy build`",
        )
    if not path.exists():
        raise ArtifactError("no artifact here", path=where, remedy="build it with `ppy build`")
    if not path.is_file():
        raise ArtifactError("not a file", path=where, remedy=_NOT_A_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        with os.fdopen(fd, "rb") as stream:
            status = os.fstat(stream.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise ArtifactError("not a file", path=where, remedy=_NOT_A_FILE)
            size = status.st_size
            if size > ARCHIVE_SIZE_LIMIT:
                raise ArtifactError(
                    f"the file is {size} bytes, over the limit of {ARCHIVE_SIZE_LIMIT}", path=where
                )
            data = stream.read()
    except OSError as error:
        raise ArtifactError(
            f"cannot read the artifact: {error.strerror or error}", path=where
        ) from error
    return loads(data, path=where)
