"""The signatures file: what ``ppy record`` saw, meant to be reviewed and committed.

``.ppy/signatures.json`` under the project root; its format, and the record
it is read into, are ``ppy.record.format``'s. Each write recomputes every
function's description (``ppy.record.generalise``) for the reader.

The file is data: it is parsed as JSON within size limits and checked field
by field, and a problem is an error naming the file, the line and what is
wrong (exit 2). Nothing in it is executed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ppy.errors import ConfigError
from ppy.layout import not_a_folder
from ppy.record.format import (
    ARRAY,
    CLOSURE,
    DTYPES,
    FILE,
    FORMAT,
    MAX_BYTES,
    MAX_CLOSURE,
    MAX_DEPTH,
    MAX_DIM,
    MAX_FUNCTIONS,
    MAX_LEAVES,
    MAX_SIGNATURES,
    NAME,
    REF,
    VERSION,
    FunctionCalls,
    Signatures,
    parse_array,
)
from ppy.record.generalise import generalise
from ppy.snapshot import Recording, read_file

__all__ = ["read_signatures", "recorded", "signatures_path", "unreadable", "write_signatures"]


def signatures_path(root: Path) -> Path:
    return root / FILE


def read_signatures(path: Path) -> Signatures | None:
    """The file at ``path``, read now and checked; None where there is none;
    ``ConfigError`` (exit 2) naming the line where it is not what ``ppy
    record`` writes.

    Only a regular file is read, and opening it never waits (a FIFO there is
    an error, not a hang).
    """
    try:
        data: bytes | None = read_file(path, MAX_BYTES)
    except FileNotFoundError:
        data = None
    except OSError as error:
        return recorded(Recording(path, None, error))
    return recorded(Recording(path, data))


def recorded(recording: Recording) -> Signatures | None:
    """The signatures a snapshot's recording holds (``ppy.snapshot``), checked
    as ``read_signatures`` checks them: what a build stages is the bytes its
    configuration digest is of. JSON's non-finite numbers (``NaN``,
    ``Infinity``, ``1e999``) are refused where they are: no static value ppy
    stages is one."""
    path, data = recording.path, recording.data
    problem = unreadable(recording)
    if problem is not None:
        raise problem from None
    if data is None:
        return None
    if len(data) > MAX_BYTES:
        raise _bad(path, 1, f"it is over {MAX_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8")
        document = json.loads(text, parse_constant=_non_finite, parse_float=_finite)
    except UnicodeDecodeError:
        raise _bad(path, 1, "it is not UTF-8 text") from None
    except _NonFinite as error:
        raise _bad(
            path,
            _line_of_number(text, str(error)),
            f"{error} is not a finite number; a recording holds none",
        ) from None
    except json.JSONDecodeError as error:
        raise _bad(path, error.lineno, f"not JSON: {error.msg}") from None
    except RecursionError:
        raise _bad(path, 1, "it nests too deeply") from None
    return _Checker(path, text).signatures(document)


def unreadable(recording: Recording) -> ConfigError | None:
    """Why a recording that is there could not be read, naming the real cause:
    where a folder on its path is a file (``.ppy`` made a file), that folder,
    not the file that was asked for; None where it was read or is not there.
    ``recorded`` raises it; ``ppy run`` warns with it and runs the program
    on jit's path."""
    error = recording.error
    if error is None:
        return None
    blocked = not_a_folder(recording.path) if error.errno == errno.ENOTDIR else None
    if blocked is not None:
        return blocked
    return ConfigError(
        f"cannot read it: {error.strerror or error}",
        path=str(recording.path),
        remedy="make it a readable file, or remove it and record again with `ppy record`",
    )


class _NonFinite(ValueError):
    """A number JSON can write but a recording never holds; the message is its text."""


def _non_finite(constant: str) -> float:
    raise _NonFinite(constant)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 reads as inf
        raise _NonFinite(text)
    return value


#: A JSON string (skipped), or a number or constant written outside one.
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|(-?(?:Infinity|NaN|[0-9][0-9.eE+-]*))')


def _line_of_number(text: str, number: str) -> int:
    """The line where ``number`` is written outside a string; 1 where it is not found."""
    for match in _TOKEN.finditer(text):
        if match.group(1) in (number, f"-{number}"):
            return text.count("\n", 0, match.start(1)) + 1
    return 1


def _bad(path: Path, line: int, message: str) -> ConfigError:
    return ConfigError(
        f"line {line}: {message}",
        path=str(path),
        remedy="run `ppy record --replace FILE` to write it afresh, or fix it by hand",
    )


class _Checker:
    """Checks a parsed file field by field; errors name the line of the field."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, needle: str) -> int:
        quoted = json.dumps(needle)
        for number, line in enumerate(self.lines, 1):
            if quoted in line:
                return number
        return 1

    def fail(self, where: str, message: str) -> ConfigError:
        return _bad(self.path, self.line_of(where), message)

    def signatures(self, document: object) -> Signatures:
        if not isinstance(document, dict):
            raise _bad(self.path, 1, "wanted a JSON object")
        if document.get("format") != FORMAT:
            raise self.fail("format", f'"format" is not "{FORMAT}"')
        if document.get("version") != VERSION:
            raise self.fail("version", f'"version" is {document.get("version")!r}, not {VERSION}')
        runs = document.get("runs")
        if type(runs) is not int or runs < 0:
            raise self.fail("runs", '"runs" is not a count')
        functions = document.get("functions")
        if not isinstance(functions, dict) or len(functions) > MAX_FUNCTIONS:
            raise self.fail("functions", f'"functions" is not an object of at most {MAX_FUNCTIONS}')
        found = Signatures(runs)
        for name, entry in functions.items():
            found.functions[name] = self.function(name, entry)
        return found

    def function(self, name: str, entry: object) -> FunctionCalls:
        if not NAME.fullmatch(name):
            raise self.fail(name, f"{name!r} is not a module.function name")
        if not isinstance(entry, dict):
            raise self.fail(name, f"{name}: wanted an object")
        signatures = entry.get("signatures")
        if not isinstance(signatures, list) or not 0 < len(signatures) <= MAX_SIGNATURES:
            raise self.fail(name, f"{name}: wanted 1 to {MAX_SIGNATURES} signatures")
        calls = FunctionCalls()
        for signature in signatures:
            if not isinstance(signature, dict) or set(signature) != {"calls", "inputs"}:
                raise self.fail(
                    name, f'{name}: a signature is not {{"calls": N, "inputs": {{...}}}}'
                )
            count, inputs = signature["calls"], signature["inputs"]
            if type(count) is not int or count < 1:
                raise self.fail(name, f"{name}: a signature's calls is not a positive count")
            if not isinstance(inputs, dict):
                raise self.fail(name, f"{name}: a signature's inputs is not an object")
            for parameter, value in inputs.items():
                self.input(name, parameter, value)
            calls.add(inputs, count)
        for call in self.gradients(name, entry.get("gradients", [])):
            for pattern in call.pop("cotangents"):
                calls.differentiated(call, tuple(pattern))
        return calls

    def gradients(self, name: str, value: object) -> list[dict[str, Any]]:
        """``"gradients"``: calls under ``jax.grad`` (``ppy.record.format``)."""
        where = f"{name}: gradients"
        keys = {"inputs", "perturbed", "static", "cotangents"}
        if not isinstance(value, list) or len(value) > MAX_SIGNATURES:
            raise self.fail(name, f"{where} is not a list of at most {MAX_SIGNATURES}")
        for call in value:
            if not (isinstance(call, dict) and set(call) == keys):
                raise self.fail(name, f"{where}: a call is not {{{', '.join(sorted(keys))}}}")
            inputs, perturbed = call["inputs"], call["perturbed"]
            readable = (
                isinstance(inputs, dict)
                and isinstance(perturbed, dict)
                and set(inputs) == set(perturbed)
                and all(
                    isinstance(leaves, list)
                    and isinstance(flags, list)
                    and len(leaves) == len(flags) <= MAX_LEAVES
                    and all(_leaf_aval(leaf) for leaf in leaves)
                    and all(isinstance(flag, bool) for flag in flags)
                    for leaves, flags in ((inputs[k], perturbed[k]) for k in inputs)
                )
                and isinstance(call["static"], dict)
                and all(_literal(v) for v in call["static"].values())
                and isinstance(call["cotangents"], list)
                and all(
                    isinstance(p, list) and p and all(type(i) is int and i >= 0 for i in p)
                    for p in call["cotangents"]
                )
            )
            if not readable:
                raise self.fail(
                    name,
                    f"{where}: a call's inputs, perturbed leaves, static "
                    "values or cotangents do not read",
                )
        return [dict(call) for call in value]

    def input(self, name: str, parameter: str, value: object) -> None:
        where = f"{name}: input {parameter!r}"
        if not isinstance(value, dict) or not value:
            raise self.fail(parameter, f"{where} is not an object")
        kind = next(iter(value))
        if kind == "array":
            self.array(parameter, where, value)
        elif kind == "static":
            if set(value) != {"static"} or not _literal(value["static"]):
                raise self.fail(parameter, f"{where}: a static value is not a JSON literal")
        elif kind == "python":
            if set(value) != {"python"} or value["python"] not in (
                "bool",
                "int",
                "float",
                "complex",
            ):
                raise self.fail(parameter, f"{where}: not a Python scalar type")
        elif kind == "none":
            if value != {"none": True}:
                raise self.fail(parameter, f'{where}: wanted {{"none": true}}')
        elif kind == "nest":
            if set(value) != {"nest"}:
                raise self.fail(parameter, f"{where}: a nest takes nothing else")
            self.nest(name, parameter, value["nest"], 0, [0])
        elif kind == "closure" and parameter == CLOSURE:
            self.closure(parameter, where, value)
        else:
            raise self.fail(parameter, f"{where}: unknown kind {kind!r}")

    def closure(self, parameter: str, where: str, value: Mapping[str, Any]) -> None:
        """``{"closure": {name: {"static": literal} | {"ref": "module:name"}}}``."""
        variables = value["closure"]
        if set(value) != {"closure"} or not isinstance(variables, dict):
            raise self.fail(parameter, f"{where}: a closure is an object of variables")
        if len(variables) > MAX_CLOSURE:
            raise self.fail(parameter, f"{where}: more than {MAX_CLOSURE} variables")
        for variable, held in variables.items():
            literal = isinstance(held, dict) and set(held) == {"static"}
            named = isinstance(held, dict) and set(held) == {"ref"}
            readable = (literal and _literal(held["static"])) or (
                named and isinstance(held["ref"], str) and REF.fullmatch(held["ref"]) is not None
            )
            if not (variable.isidentifier() and readable):
                raise self.fail(
                    parameter,
                    f"{where}: {variable!r} is not "
                    '{"static": literal} or {"ref": "module:name"}',
                )

    def nest(self, name: str, parameter: str, node: object, depth: int, leaves: list[int]) -> None:
        """``{"list": [...]}``, ``{"tuple": [...]}``, ``{"dict": {...}}`` or
        ``{"node": {"type": ..., "data": ..., "children": [...]}}`` of arrays,
        Python scalars, Nones and nests, within the depth and leaf limits."""
        where = f"{name}: input {parameter!r}"
        if depth > MAX_DEPTH:
            raise self.fail(parameter, f"{where}: nests deeper than {MAX_DEPTH}")
        if not isinstance(node, dict) or len(node) != 1:
            raise self.fail(parameter, f"{where}: a nest is not one list, tuple, dict or node")
        kind, items = next(iter(node.items()))
        if kind in ("list", "tuple") and isinstance(items, list):
            values: list[object] = list(items)
        elif kind == "dict" and isinstance(items, dict):
            values = list(items.values())
        elif kind == "node" and self.node(items, depth):
            values = list(items["children"])
        else:
            raise self.fail(parameter, f"{where}: a nest is not one list, tuple, dict or node")
        for item in values:
            leaves[0] += 1
            if leaves[0] > MAX_LEAVES:
                raise self.fail(parameter, f"{where}: more than {MAX_LEAVES} leaves")
            if isinstance(item, dict) and set(item) == {"nest"}:
                self.nest(name, parameter, item["nest"], depth + 1, leaves)
            elif isinstance(item, dict) and next(iter(item), None) in ("array", "python", "none"):
                self.input(name, parameter, item)
            else:
                raise self.fail(parameter, f"{where}: a nest holds something not an input")

    def node(self, node: object, depth: int) -> bool:
        """A pytree node: its class's ``module:qualname``, its metadata, its children."""
        return (
            isinstance(node, dict)
            and set(node) == {"type", "data", "children"}
            and isinstance(node["type"], str)
            and REF.fullmatch(node["type"]) is not None
            and isinstance(node["children"], list)
            and _metadata(node["data"], depth)
        )

    def array(self, parameter: str, where: str, value: Mapping[str, Any]) -> None:
        text = value.get("array")
        if not isinstance(text, str) or not ARRAY.fullmatch(text):
            raise self.fail(parameter, f"{where}: {text!r} is not an array such as float32[32,4]")
        dtype, dims = parse_array(text)
        if dtype not in DTYPES:
            raise self.fail(
                parameter, f"{where}: {dtype!r} is not a dtype jax gives an array (in {text!r})"
            )
        if any(dim > MAX_DIM for dim in dims):
            raise self.fail(parameter, f"{where}: {text!r} has a dim no array has (over 2**63-1)")
        extra = set(value) - {"array", "weak", "sharded"}
        flags = [value.get(k, False) for k in ("weak", "sharded")]
        if extra or any(type(flag) is not bool for flag in flags):
            raise self.fail(parameter, f"{where}: an array takes only weak and sharded flags")


def _literal(value: object) -> bool:
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (bool, int, str)


def _metadata(value: object, depth: int) -> bool:
    """A node's metadata: literals, lists, ``{"tuple": [...]}`` and ``{"ref": "module:name"}``."""
    if depth > MAX_DEPTH:
        return False
    if _literal(value):
        return True
    if isinstance(value, list):
        return all(_metadata(item, depth + 1) for item in value)
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind == "tuple" and isinstance(inner, list):
            return all(_metadata(item, depth + 1) for item in inner)
        return kind == "ref" and isinstance(inner, str) and REF.fullmatch(inner) is not None
    return False


def write_signatures(path: Path, signatures: Signatures) -> None:
    """Write the file in a stable order, with each function's description,
    one signature per line so that a review reads it as a table."""
    lines = [
        "{",
        f'  "format": "{FORMAT}",',
        f'  "version": {VERSION},',
        f'  "runs": {signatures.runs},',
        '  "functions": {',
    ]
    names = sorted(signatures.functions)
    for index, name in enumerate(names):
        calls = signatures.functions[name]
        recorded = calls.signatures()
        general = generalise(recorded)
        dims = {symbol: list(values) for symbol, values in general.dims.items()}
        rows = [_compact({"calls": count, "inputs": inputs}) for inputs, count in recorded]
        lines += [
            f"    {json.dumps(name)}: {{",
            f'      "calls": {calls.calls},',
            f'      "description": {_compact(general.rendered())},',
            f'      "dims": {_compact(dims)},',
            '      "signatures": [',
            *(f"        {row}{',' if i < len(rows) - 1 else ''}" for i, row in enumerate(rows)),
            "      ]" + ("," if calls.gradients else ""),
            *(
                [
                    '      "gradients": [',
                    *(
                        f"        {_compact(g)}{',' if i < len(grads) - 1 else ''}"
                        for i, g in enumerate(grads)
                    ),
                    "      ]",
                ]
                if (grads := calls.gradient_calls())
                else []
            ),
            f"    }}{',' if index < len(names) - 1 else ''}",
        ]
    lines += ["  }", "}", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    # A file of its own name beside it, then renamed over it: a reader sees
    # the old file or the new one, and nothing put at a fixed temporary
    # name (a FIFO, a link) is written through.
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as open() makes a file: it is committed, and shared
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write("\n".join(lines))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _leaf_aval(value: object) -> bool:
    """Whether ``value`` is ``[dtype, [dims], weak]``."""
    return (
        isinstance(value, list)
        and len(value) == 3
        and value[0] in DTYPES
        and isinstance(value[1], list)
        and all(type(d) is int and 0 <= d <= MAX_DIM for d in value[1])
        and isinstance(value[2], bool)
    )


def _compact(value: object) -> str:
    # Never NaN or Infinity: the reader refuses them (a recording holds none).
    return json.dumps(value, separators=(", ", ": "), allow_nan=False)
