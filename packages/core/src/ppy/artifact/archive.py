"""The artifact: one zip file per project that ``ppy build`` writes and ``ppy run`` reads.

The archive holds ``manifest.json`` and the payload of every staged entry, at
``entries/<module>/<qualname>/<name>``. Nothing in it is ever executed: the
reader parses JSON and hands out bytes; a payload is interpreted only by the
runtime registered for its entry's ``kind`` (StableHLO text, jax's own export
serialization). There is no pickle and no marshalled code, and compiled
executables never go in (they are native code for one machine and live in the
per-user cache).

The format is versioned explicitly (``FORMAT_VERSION``). A reader refuses a
version it does not know, and any change to the manifest, additions included,
bumps the version; so a file that reads is a file this ppy understands
completely. docs/artifact.md is the reference for the layout and every field.

The same ``Artifact`` always gives the same bytes: members in sorted order,
timestamps fixed at 1980-01-01 00:00:00, fixed attributes, canonical JSON and
deflate at a fixed level. That keeps builds reproducible and lets a rebuild
that changed nothing leave the file identical.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import stat
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

from ppy.artifact.entry import Entry
from ppy.decision import Check, Decision, Outcome
from ppy.errors import ArtifactError
from ppy.spec import TensorSpec

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "MEMBER_SIZE_LIMIT",
    "ARCHIVE_SIZE_LIMIT",
    "MANIFEST_DEPTH_LIMIT",
    "MANIFEST_SIZE_LIMIT",
    "READABLE_VERSIONS",
    "Artifact",
    "ArtifactError",
    "ModuleRecord",
    "dumps",
    "loads",
    "manifest",
    "member_name",
    "read_artifact",
    "write_artifact",
]

FORMAT = "ppy-artifact"
FORMAT_VERSION = 1
#: The versions this reader understands; anything else is refused.
READABLE_VERSIONS: tuple[int, ...] = (1,)
MANIFEST = "manifest.json"
#: The most bytes one member may hold once decompressed, and the most all of
#: them together may, checked against the archive's headers before anything
#: is decompressed: a zip bomb is refused, not inflated. An export of a
#: function with large constants is still far below them.
MEMBER_SIZE_LIMIT = 1 << 30
ARCHIVE_SIZE_LIMIT = 4 << 30
#: The most bytes the manifest may hold, and how deep its JSON may nest. A
#: project of thousands of entries needs a few megabytes and a dozen levels;
#: the bounds keep a hostile manifest from costing gigabytes of memory or
#: exhausting the parser's recursion before it is refused.
MANIFEST_SIZE_LIMIT = 64 << 20
MANIFEST_DEPTH_LIMIT = 128

#: 1980-01-01 is the earliest time a zip header can hold.
_EPOCH = (1980, 1, 1, 0, 0, 0)
#: A regular file, rw-r--r--, recorded as written on Unix.
_EXTERNAL_ATTR = (0o100644 & 0xFFFF) << 16
_CREATE_SYSTEM = 3
_COMPRESSLEVEL = 6
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: A payload's short name: one path segment, nothing a file system reads specially.
_SHORT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ModuleRecord:
    """One ``.ppy`` module the artifact was built from."""

    #: Dotted module name (``pkg.model``).
    name: str
    #: Source path relative to the project root, with ``/`` separators.
    path: str
    #: sha256 of the source bytes, so staleness is one hash per module.
    sha256: str
    #: Plugin name -> the key this module's entries were staged under; an
    #: equal key on the next build means the entries are reused unchanged.
    stage_keys: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Artifact:
    """Everything one build produced, as written to and read from the file."""

    project: str
    config_digest: str
    #: Versions of the tools that wrote it: ``{"ppy": ..., "jax": ..., "jaxlib": ...}``.
    written_by: Mapping[str, str]
    modules: tuple[ModuleRecord, ...]
    entries: tuple[Entry, ...]
    #: Every candidate's decision, staged or not, so ``ppy explain`` can read
    #: the trail from the artifact without rerunning the policy.
    decisions: tuple[Decision, ...]

    @cached_property
    def _entries_by_key(self) -> dict[tuple[str, str], Entry]:
        return {e.key: e for e in self.entries}

    @cached_property
    def _modules_by_name(self) -> dict[str, ModuleRecord]:
        return {m.name: m for m in self.modules}

    def entry(self, module: str, qualname: str) -> Entry | None:
        return self._entries_by_key.get((module, qualname))

    def module(self, name: str) -> ModuleRecord | None:
        return self._modules_by_name.get(name)

    def decision(self, module: str, qualname: str) -> Decision | None:
        return next(
            (d for d in self.decisions if (d.module, d.qualname) == (module, qualname)), None
        )


# -- writing ------------------------------------------------------------------


def member_name(module: str, qualname: str, name: str) -> str:
    """Where an entry's payload ``name`` lives in the archive."""
    return f"entries/{module}/{qualname}/{name}"


def _check_writable(entry: Entry) -> None:
    where = f"entry {entry.module}:{entry.qualname}"
    for part, value in (("module", entry.module), ("qualname", entry.qualname)):
        if not value or "/" in value or "\\" in value or ".." in value.split("."):
            raise ValueError(f"{where}: {part} {value!r} cannot name an archive folder")
    if _depth(entry.metadata) > MANIFEST_DEPTH_LIMIT // 2:
        raise ValueError(f"{where}: metadata nests deeper than {MANIFEST_DEPTH_LIMIT // 2} levels")
    for short in entry.payload:
        if not _SHORT_NAME.fullmatch(short):
            raise ValueError(
                f"{where}: payload name {short!r} must be one segment of letters, "
                "digits, '_', '-' and '.', not starting with '.' or '-'"
            )


def _decision_json(decision: Decision) -> dict[str, Any]:
    return {
        "module": decision.module,
        "qualname": decision.qualname,
        "location": decision.location,
        "outcome": decision.outcome.value,
        "rule": decision.rule,
        "reason": decision.reason,
        "remedy": decision.remedy,
        "plugin": decision.plugin,
        "kind": decision.kind,
        "signature": decision.signature,
        "trail": [
            {"rule": c.rule, "passed": c.passed, "detail": c.detail, "remedy": c.remedy}
            for c in decision.trail
        ],
        "output": decision.output,
    }


def _manifest_spec(spec: TensorSpec) -> dict[str, Any]:
    """A spec as format 1 writes it: dims and dtype. How a sharded export's
    leaves are laid out is its payload's (the contract's variants and mesh);
    the build line and the decision's signature show it."""
    return replace(spec, sharding=None).to_json()


def _entry_json(entry: Entry) -> dict[str, Any]:
    return {
        "module": entry.module,
        "qualname": entry.qualname,
        "kind": entry.kind,
        "inputs": [_manifest_spec(s) for s in entry.inputs],
        "outputs": [_manifest_spec(s) for s in entry.outputs],
        "platforms": list(entry.platforms),
        "members": [
            {
                "name": short,
                "member": member_name(entry.module, entry.qualname, short),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            for short, data in sorted(entry.payload.items())
        ],
        "metadata": dict(entry.metadata),
        "decision": None if entry.decision is None else _decision_json(entry.decision),
    }


def manifest(artifact: Artifact) -> dict[str, Any]:
    """The manifest as a JSON-able dict, in the canonical order ``dumps`` writes.

    Modules are sorted by name and entries by (module, qualname), so the build's
    iteration order never shows in the file; decisions keep their order, which
    is the order of the functions in the sources.
    """
    keys = [e.key for e in artifact.entries]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"entries appear more than once: {duplicates}")
    for entry in artifact.entries:
        _check_writable(entry)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "written_by": dict(sorted(artifact.written_by.items())),
        "project": artifact.project,
        "config_digest": artifact.config_digest,
        "modules": [
            {
                "name": m.name,
                "path": m.path,
                "sha256": m.sha256,
                "stage_keys": dict(sorted(m.stage_keys.items())),
            }
            for m in sorted(artifact.modules, key=lambda m: m.name)
        ],
        "entries": [_entry_json(e) for e in sorted(artifact.entries, key=lambda e: e.key)],
        "decisions": [_decision_json(d) for d in artifact.decisions],
    }


def _zipinfo(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = _CREATE_SYSTEM
    info.external_attr = _EXTERNAL_ATTR
    return info


def dumps(artifact: Artifact) -> bytes:
    """The artifact as zip bytes; equal artifacts give equal bytes."""
    text = json.dumps(
        manifest(artifact), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False
    )
    members = {MANIFEST: (text + "\n").encode("utf-8")}
    for entry in artifact.entries:
        for short, data in entry.payload.items():
            members[member_name(entry.module, entry.qualname, short)] = bytes(data)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compresslevel=_COMPRESSLEVEL) as archive:
        for name in sorted(members):
            archive.writestr(_zipinfo(name), members[name])
    return buffer.getvalue()


def write_artifact(artifact: Artifact, path: Path) -> None:
    """Write ``artifact`` to ``path`` atomically.

    The bytes go to a temporary file in the same folder, are flushed to disk,
    then renamed over ``path``: a reader (a concurrent ``ppy run``) sees the
    old artifact or the new one, never half of one.
    """
    data = dumps(artifact)
    path = Path(path)
    _check_replaceable(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # 0o666 before the umask, as for any file the user writes; the
        # artifact is meant to be copied to and run on other machines.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666)
        try:
            with os.fdopen(fd, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as error:
        raise ArtifactError(
            f"cannot write the artifact: {error.strerror or error}",
            path=str(path),
            remedy="check that the folder exists and is writable, then run `ppy build` again",
        ) from error


#: Opens the final path component itself, never what a link there points to,
#: and without waiting on a FIFO put there after the check that it was a file.
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: What an artifact's manifest says of itself; a file without it is not replaced.
_FORMAT_MARK = f'"format": "{FORMAT}"'.encode()


def _check_replaceable(path: Path) -> None:
    """Refuse to write over anything at ``path`` but a file ppy wrote.

    A build replaces the previous artifact, damaged or not, but never a
    link, a folder or a file of the user's that happens to have the name:
    it must be a zip that holds a manifest saying it is a ppy artifact. The
    manifest is searched, not parsed, so a damaged one (the reason to
    rebuild) does not stop the build.
    """

    def refuse(what: str) -> NoReturn:
        raise ArtifactError(
            f"{what}; ppy replaces only an artifact it wrote",
            path=str(path),
            remedy="move it away, or set [tool.ppy] artifact to another path",
        )

    try:
        status = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there to lose; the write says why it cannot happen, if it cannot
    except OSError as error:
        refuse(f"cannot be examined ({error.strerror or error})")
    if stat.S_ISLNK(status.st_mode):
        refuse("is a symbolic link")
    if not stat.S_ISREG(status.st_mode):
        refuse("is not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            refuse("is not a regular file")
        with os.fdopen(fd, "rb") as stream, zipfile.ZipFile(stream) as archive:
            marked = _says_format(archive)
    except (KeyError, zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError):
        # KeyError: no manifest; the rest: not a zip, or a damaged one.
        refuse("is not a ppy artifact (not a zip archive with a manifest)")
    except (NotImplementedError, RuntimeError):
        refuse("is not a ppy artifact (an encrypted or unknown kind of zip)")
    if not marked:
        refuse(f"is not a ppy artifact (its manifest does not say format {FORMAT!r})")


def _says_format(archive: zipfile.ZipFile) -> bool:
    """Whether the first ``MANIFEST_SIZE_LIMIT`` bytes of the manifest name ppy's format.

    Read a chunk at a time, keeping only a mark's length of the previous
    chunk, so even a huge manifest costs a megabyte of memory.
    """
    tail = b""
    seen = 0
    with archive.open(MANIFEST) as member:
        while seen < MANIFEST_SIZE_LIMIT and (chunk := member.read(_CHUNK)):
            if _FORMAT_MARK in tail + chunk:
                return True
            tail = chunk[-len(_FORMAT_MARK) :]
            seen += len(chunk)
    return False


# -- reading ------------------------------------------------------------------


class _Reader:
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


def _spec(r: _Reader, value: Any, where: str) -> TensorSpec:
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


def _decision(r: _Reader, value: Any, where: str) -> Decision:
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


def _entry(r: _Reader, value: Any, index: int) -> tuple[Entry, list[_Listed]]:
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
        if not _SHORT_NAME.fullmatch(short):
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


#: Members are inflated this many bytes at a time.
_CHUNK = 1 << 20


def _read_member(r: _Reader, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The member's bytes, inflated a chunk at a time.

    ``ZipFile.read`` asks zlib for everything at once and only then cuts the
    result to the header's size, so a member whose header understates it
    would be inflated whole first; reading in chunks keeps the memory to the
    declared size, and the CRC check at the end refuses the member.
    """
    parts: list[bytes] = []
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                parts.append(chunk)
        return b"".join(parts)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as error:
        r.fail(f"the archive member is damaged ({_describe(error)})", member=info.filename)
    except (NotImplementedError, RuntimeError) as error:
        # An unknown compression method or an encrypted member: not written by ppy.
        r.fail(f"the archive member cannot be read ({_describe(error)})", member=info.filename)


def _describe(error: Exception) -> str:
    return str(error) or type(error).__name__


def _open(r: _Reader, data: bytes) -> zipfile.ZipFile:
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


def _members(r: _Reader, archive: zipfile.ZipFile, limit: int) -> dict[str, zipfile.ZipInfo]:
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


def _document(r: _Reader, raw: bytes) -> Mapping[str, Any]:
    """The manifest's JSON, once it says it is a format and version this ppy reads."""
    try:
        document = json.loads(
            raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_reject_constant
        )
    except (UnicodeDecodeError, ValueError) as error:
        r.fail(f"the manifest is not valid JSON ({error})")
    except RecursionError:
        r.fail(f"the manifest nests deeper than {MANIFEST_DEPTH_LIMIT} levels")
    if _depth(document) > MANIFEST_DEPTH_LIMIT:
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


def _depth(document: Any) -> int:
    """How deep ``document`` nests, counted without recursion (so any depth is safe to ask)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MANIFEST_DEPTH_LIMIT:
                break
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _module(r: _Reader, value: Any, where: str) -> ModuleRecord:
    record = r.obj(value, where, _MODULE_KEYS)
    return ModuleRecord(
        name=r.text(record["name"], f"{where}.name"),
        path=r.text(record["path"], f"{where}.path"),
        sha256=r.sha256(record["sha256"], f"{where}.sha256"),
        stage_keys=r.str_map(record["stage_keys"], f"{where}.stage_keys"),
    )


def _unique(r: _Reader, names: Sequence[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            r.fail(f"{what} {name} is listed twice")
        seen.add(name)


def _payload(
    r: _Reader, archive: zipfile.ZipFile, members: Mapping[str, zipfile.ZipInfo], item: _Listed
) -> bytes:
    """A listed member's bytes, checked against the size and sha256 the manifest gives."""
    info = members.get(item.member)
    if info is None:
        r.fail("the manifest lists this member but the archive lacks it", member=item.member)
    # Compare the declared size first: nothing is decompressed beyond what was promised.
    if info.file_size != item.size:
        r.fail(f"size is {info.file_size} bytes, the manifest says {item.size}", member=item.member)
    content = _read_member(r, archive, info)
    if len(content) != item.size:
        r.fail(f"size is {len(content)} bytes, the manifest says {item.size}", member=item.member)
    if hashlib.sha256(content).hexdigest() != item.sha256:
        r.fail("sha256 does not match the manifest; the content changed", member=item.member)
    return content


def loads(
    data: bytes, *, path: str = "<bytes>", member_size_limit: int = MEMBER_SIZE_LIMIT
) -> Artifact:
    """Parse and validate artifact bytes; every problem is an ``ArtifactError``.

    ``path`` only names the file in error messages; ``member_size_limit`` is
    the most bytes any one member may decompress to. Checks run in an order
    that gives the most useful message first: the archive, then the format
    and its version, then the manifest's fields, then every member against
    what the manifest says about it.
    """
    r = _Reader(path)
    with _open(r, data) as archive:
        members = _members(r, archive, member_size_limit)
        if MANIFEST not in members:
            r.fail(f"not a ppy artifact: the archive has no {MANIFEST}", member=None)
        if members[MANIFEST].file_size > MANIFEST_SIZE_LIMIT:
            r.fail(
                f"the manifest would decompress to {members[MANIFEST].file_size} bytes, over "
                f"the limit of {MANIFEST_SIZE_LIMIT} (a damaged or hostile archive)"
            )
        top = _document(r, _read_member(r, archive, members[MANIFEST]))

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
            replace(entry, payload={i.short: _payload(r, archive, members, i) for i in items})
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
        raise ArtifactError("not a file", path=where)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, "rb") as stream:
            status = os.fstat(stream.fileno())
            if not stat.S_ISREG(status.st_mode):
                raise ArtifactError("not a file", path=where)
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
