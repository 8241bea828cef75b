"""Export from the recorded process itself: ``JaxExportPlugin.export_live``.

A program written before ppy makes its jitted step inside ``main()``, where it
reads what only the running program has: the optimizer's functions, a step
size, a config, arrays. The build imports the module and has none of them;
the process ``ppy record`` runs has all of them, after the program's last
line. Here the jitted function the program made is exported as it is, at
the signatures its calls had (one variant each, most called first), by the
worker's own code (``ppy_plugin_jax.worker``: the variant, the refinement
check, the dependence watch, the captures), so an entry made here is one a
build could have made. What the trace read besides its inputs is
fingerprinted with the program's module named as the build names it, and
``ppy run`` serves the entry only where every fingerprint matches.

The export may not print and may not raise into the program: what a trace
writes is caught in a file (and keeps the function unstaged, as in the
worker), and every failure is a ``StageFailure``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ppy.kinds.fingerprint import DEFAULT_LIMIT

if TYPE_CHECKING:
    from ppy.plugin import Entry, LiveCall, LiveRequest, StageFailure

__all__ = ["export_live"]


def export_live(request: LiveRequest) -> Entry | StageFailure:
    """The entry for ``request.function`` at its recorded signatures, or why not."""
    from ppy_plugin_jax import worker

    root = str(request.root)
    result: Entry | dict[str, Any]
    with _output() as printed:
        try:
            result = _exported(request)
        except worker._Refusal as refusal:
            result = refusal.result
        except Exception as error:  # whatever the user's function raises while traced
            result = {
                "ok": False,
                "rule": "export-failed",
                "reason": worker._describe(error, "exporting it", root),
            }
    text = printed[0]
    if isinstance(result, dict):  # refused
        if text.strip() and result.get("rule") == "specializes":
            result = worker._side_effect(text)
        return _failure(request, result, text)
    if text.strip():  # python prints it at the first call; a staged call would not
        return _failure(request, worker._side_effect(text), text)
    return result


def _failure(request: LiveRequest, result: dict[str, Any], output: str) -> StageFailure:
    from ppy.plugin import StageFailure

    from ppy_plugin_jax.supervisor import _EXPORT_REMEDY, _REMEDIES

    rule = str(result["rule"])
    return StageFailure(
        request.module,
        request.qualname,
        rule,
        str(result["reason"]),
        str(result.get("remedy") or _REMEDIES.get(rule, _EXPORT_REMEDY)),
        output[-4000:],
        deliberate=bool(result.get("deliberate", False)),
    )


def _exported(request: LiveRequest) -> Entry:
    import jax
    from jax._src import config as jax_config
    from ppy.kinds.fingerprint import python_function
    from ppy.kinds.jax_export import JaxExport
    from ppy.kinds.trace_config import read as read_config
    from ppy.plugin import Entry

    from ppy_plugin_jax import worker

    settings = request.settings
    shared = {
        "root": str(request.root),
        "platforms": settings.get("platforms"),
        "verify_sizes": settings.get("verify-sizes", True),
        "capture_limit": settings.get("captured-array-limit", DEFAULT_LIMIT),
    }
    main = request.module if request.program else None
    static = set(request.calls[0].static)
    # A parameter the calls left to its default is none of the export's: its
    # trace holds the default, as jit's does.
    taken = static | set(request.calls[0].traced)
    params: list[Mapping[str, Any]] = [
        {
            "name": name,
            "kind": kind,
            "static": name in static,
            "donated": name in request.donated,
            "choices": None,
        }
        for name, kind in request.parameters
        if name in taken
    ]
    # The Python function the jit wraps, traced anew: the jit's own cache
    # holds the program's trace, and a trace that prints must be seen to.
    fn = python_function(request.function) or request.function
    read = worker._captures(fn, shared, main)
    vjp = request.differentiated and bool(request.settings.get("staged-vjp"))
    variants: list[tuple[Any, tuple[str, ...]]] = []
    first = None
    served = 0
    notes: list[str] = []
    for family in _families(request.calls):
        room = JaxExport.MAX_VARIANTS - len(variants)
        if room <= 0:
            break
        general = family[0].dims if len(family) > 1 else None
        if general is not None:
            try:
                inputs = _inputs(family[0], main, general)
                first = first or inputs
                variants.append(
                    _variant(fn, params, family[0], inputs, shared, main, recorded=True, vjp=vjp)
                )
                served += sum(call.count for call in family)
                notes.append(_symbolic(general, family))
                continue
            except worker._Refusal as refusal:
                if not refusal.symbolic:
                    raise
                notes.append(f"at the recorded sizes, {refusal.rule}: {refusal.reason}")
        for call in family[:room]:
            inputs = _inputs(call, main)
            first = first or inputs
            variants.append(_variant(fn, params, call, inputs, shared, main, vjp=vjp))
            served += call.count
    traced_under = read_config(jax.config, jax_config.trace_context_names())
    assert first is not None
    # jit's own programs for the calls under jax.grad: of the jit itself.
    jitted = worker._Flat(request.function, params, first)
    linear, left = worker._linearized(jitted, variants, request.gradients, shared)
    notes += left
    contract = worker._contract(first, params, variants, read, traced_under, linear)
    head = contract.variants[0]
    seen = sum(call.count for call in request.calls)
    calls = f"{served} of " if served < seen else ""
    shapes = f"{len(variants)} signature{'s' if len(variants) != 1 else ''}"
    note = f"in the recorded run, at {shapes} ({calls}{seen} call{'s' if seen != 1 else ''})"
    if notes:
        note += "; " + "; ".join(notes)
    return Entry(
        module=request.module,
        qualname=request.qualname,
        kind=JaxExport.KIND,
        inputs=head.inputs,
        outputs=head.outputs,
        platforms=tuple(variants[0][1]),
        payload=contract.to_payload(),
        metadata=contract.to_metadata(),
        note=note,
    )


def _families(calls: Sequence[LiveCall]) -> list[list[LiveCall]]:
    """The recorded signatures by family (those that differ only in sizes,
    ``LiveCall.dims``), the family of the most calls first."""
    families: dict[Any, list[LiveCall]] = {}
    for index, call in enumerate(calls):
        key: Any = (index,) if call.dims is None else (call.dims, *_but_sizes(call))
        families.setdefault(key, []).append(call)
    return sorted(families.values(), key=lambda family: -sum(c.count for c in family))


def _but_sizes(call: LiveCall) -> tuple[Any, ...]:
    leaves = tuple(leaf[:1] + leaf[2:] if leaf[0] == "array" else leaf for leaf in call.leaves)
    return (repr(sorted(call.static.items())), call.tree, leaves)


def _symbolic(dims: Sequence[Sequence[int | str]], family: Sequence[LiveCall]) -> str:
    """What a build line says of a family exported with symbols."""
    symbols = list(dict.fromkeys(d for each in dims for d in each if isinstance(d, str)))
    seen: dict[str, set[int]] = {symbol: set() for symbol in symbols}
    for call in family:
        for general, leaf in zip(dims, call.leaves, strict=True):
            for dim, size in zip(general, leaf[1] if leaf[0] == "array" else (), strict=True):
                if isinstance(dim, str):
                    seen[dim].add(int(size))
    recorded = ", ".join(f"{s}={', '.join(str(v) for v in sorted(seen[s]))}" for s in symbols)
    return f"symbolic in {', '.join(symbols)} (recorded {recorded})"


def _variant(
    fn: Any,
    params: list[Mapping[str, Any]],
    call: LiveCall,
    inputs: Any,
    shared: Mapping[str, Any],
    main: str | None,
    *,
    recorded: bool = False,
    vjp: bool = False,
) -> tuple[Any, tuple[str, ...]]:
    """One variant of the export, as the build's worker makes one: with its
    dependence watch and, where ``inputs`` hold symbols, its refinement check
    (a refusal ``symbolic`` where only the symbols are not faithful); with
    its VJP where ``vjp`` (the program differentiated it)."""
    import contextlib

    from jax._src import config as jax_config

    from ppy_plugin_jax import worker

    wide = any(spec["dtype"] in worker._WIDE for spec in inputs.specs)
    flat = worker._Flat(fn, params, inputs)
    with jax_config.enable_x64(True) if wide else contextlib.nullcontext():
        variant, platforms = worker._variant(
            flat, dict(call.static), inputs, shared, recorded=recorded, vjp=vjp
        )
    static = {name: _static(name, value, shared, main) for name, value in call.static.items()}
    return replace(variant, static=static), platforms


def _static(name: str, value: Any, shared: Mapping[str, Any], main: str | None) -> Any:
    """A static value as the variant's metadata holds it (``ppy.kinds.statics``):
    a function the program made (a lambda of ``main()``) by its fingerprint
    and what its trace read, which the run compares where jit would trace."""
    import jax
    from ppy.kinds import statics
    from ppy.kinds.fingerprint import Unreadable, fingerprint

    from ppy_plugin_jax import worker

    def function(fn: Any) -> dict[str, Any]:
        try:
            digest = fingerprint(fn, flatten=jax.tree_util.tree_flatten, main=main)
        except Unreadable as error:
            raise worker._Refusal(
                "static-args", f"static argument {name} cannot be compared at run time: {error}"
            ) from None
        reads = worker._captures(fn, shared, main)
        label = getattr(fn, "__qualname__", type(fn).__name__)
        return {
            "function": label,
            "fingerprint": digest,
            "reads": [
                replace(c, name=f"{c.name} (read by static argument {name}, {label})").to_json()
                for c in reads
            ],
        }

    try:
        return statics.to_json(value, function)
    except ValueError as error:
        raise worker._Refusal("static-args", str(error)) from None


def _inputs(
    call: LiveCall, main: str | None, dims: Sequence[Sequence[int | str]] | None = None
) -> Any:
    """The worker's ``_Inputs`` for one recorded signature: each leaf as jit
    traces it (its dtype canonicalised by the x64 setting; a Python scalar
    weakly typed), with ``dims`` in place of its sizes where given (symbols
    of one scope)."""
    import jax
    import numpy as np
    from ppy.kinds.fingerprint import Unreadable
    from ppy.kinds.keys import KEY_DTYPES, jax_dtype
    from ppy.kinds.pytrees import structure
    from ppy.plugin import WIDE_SCALARS, MeshSpec

    from ppy_plugin_jax import worker
    from ppy_plugin_jax.inputs import Abstract
    from ppy_plugin_jax.mesh import Unplaced, place

    leaves = []
    layouts: dict[int, tuple[Any, ...]] = {}
    meshes = set()
    scope = jax.export.SymbolicScope()
    for index, leaf in enumerate(call.leaves):
        if leaf[0] == "array":
            _, shape, dtype, weak, *laid = leaf
            if laid:  # laid out over several devices: its mesh, and its spec over it
                axes, sizes, types, entries = laid[0]
                meshes.add(MeshSpec(axes, sizes, types))
                layouts[index] = entries
            general = dims[index] if dims is not None else shape
            if any(isinstance(d, str) for d in general):
                text = ",".join(str(d) for d in general)
                shape = jax.export.symbolic_shape(text, scope=scope)
            kind = (
                jax_dtype(dtype)
                if dtype in KEY_DTYPES
                else jax.dtypes.canonicalize_dtype(np.dtype(dtype))
            )
        elif leaf[0] == "python" and leaf[1] in WIDE_SCALARS:
            shape, weak = (), True
            kind = jax.dtypes.canonicalize_dtype(np.dtype(WIDE_SCALARS[leaf[1]]))
        else:
            raise worker._Refusal(
                "missing-shape",
                f"a call passed a Python {leaf[1]} as a traced input, which ppy does not stage",
            )
        leaves.append(jax.ShapeDtypeStruct(shape, kind, weak_type=weak))  # type: ignore[no-untyped-call]
    trees = tuple(jax.tree_util.tree_unflatten(call.tree, leaves))
    try:
        digest = structure(call.tree, main=main)
    except Unreadable as error:
        raise worker._Refusal(
            "input-tree", f"its inputs cannot be compared at run time: {error}"
        ) from None
    names = list(call.traced)
    if len(meshes) > 1:
        raise worker._Refusal(
            "sharding", "a call passed arrays laid out over different meshes, which jit refuses"
        )
    # Beside a laid out leaf, one with no layout of its own is replicated, as
    # jit lays out an uncommitted input (the run checks each call's).
    shardings = {id(leaf): layouts.get(i, ()) for i, leaf in enumerate(leaves)} if meshes else {}
    described = Abstract(dict(zip(names, trees, strict=True)), {}, shardings)
    specs = worker._leaf_specs(names, trees, described)
    mesh = next(iter(meshes), None)
    if mesh is not None:
        try:
            leaves = place(leaves, specs, mesh)
        except Unplaced as error:  # a symbol over a split dim: the recorded sizes are exported
            raise worker._Refusal(
                "sharding", str(error), remedy=error.remedy, symbolic=dims is not None
            ) from None
    return worker._Inputs(names, specs, leaves, call.tree, digest, mesh)


@contextlib.contextmanager
def _output() -> Iterator[list[str]]:
    """What is written to fds 1 and 2 meanwhile, kept from the program's
    own output (a trace that prints): ``printed[0]`` once the block ends."""
    printed = [""]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        try:
            yield printed
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            capture.seek(0)
            printed[0] = capture.read().decode("utf-8", "replace")
