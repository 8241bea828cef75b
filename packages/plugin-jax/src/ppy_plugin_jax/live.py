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
from collections.abc import Iterator, Mapping
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
    params: list[Mapping[str, Any]] = [
        {"name": name, "kind": kind, "static": name in static, "choices": None}
        for name, kind in request.parameters
    ]
    # The Python function the jit wraps, traced anew: the jit's own cache
    # holds the program's trace, and a trace that prints must be seen to.
    fn = python_function(request.function) or request.function
    read = worker._captures(fn, shared, main)
    variants = []
    first = None
    for call in request.calls[: JaxExport.MAX_VARIANTS]:
        inputs = _inputs(call, main)
        first = first or inputs
        wide = any(spec["dtype"] in worker._WIDE for spec in inputs.specs)
        flat = worker._Flat(fn, params, inputs)
        with jax_config.enable_x64(True) if wide else contextlib.nullcontext():
            variants.append(worker._variant(flat, dict(call.static), inputs, shared))
    traced_under = read_config(jax.config, jax_config.trace_context_names())
    assert first is not None
    contract = worker._contract(first, params, variants, read, traced_under)
    head = contract.variants[0]
    calls = sum(call.count for call in request.calls[: len(variants)])
    seen = sum(call.count for call in request.calls)
    served = f"{calls} of " if calls < seen else ""
    shapes = f"{len(variants)} signature{'s' if len(variants) != 1 else ''}"
    note = f"in the recorded run, at {shapes} ({served}{seen} call{'s' if seen != 1 else ''})"
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


def _inputs(call: LiveCall, main: str | None) -> Any:
    """The worker's ``_Inputs`` for one recorded signature: each leaf as jit
    traces it (its dtype canonicalised by the x64 setting; a Python scalar
    weakly typed)."""
    import jax
    import numpy as np
    from ppy.kinds.fingerprint import Unreadable
    from ppy.kinds.pytrees import structure
    from ppy.plugin import WIDE_SCALARS

    from ppy_plugin_jax import worker
    from ppy_plugin_jax.inputs import Abstract

    leaves = []
    for leaf in call.leaves:
        if leaf[0] == "array":
            _, shape, dtype, weak = leaf
            kind = jax.dtypes.canonicalize_dtype(np.dtype(dtype))
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
    specs = worker._leaf_specs(names, trees, Abstract(dict(zip(names, trees, strict=True)), {}, {}))
    return worker._Inputs(names, specs, leaves, call.tree, digest)


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
