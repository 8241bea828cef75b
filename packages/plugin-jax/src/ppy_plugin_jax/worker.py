"""The export worker: ``python -m ppy_plugin_jax.worker``, one per build.

It reads one JSON request, one line, from stdin, starts its watchdog
(``watchdog.py``), imports each module under its own name (so ``if __name__ ==
"__main__":`` does not run), exports each function with ``jax.export``, and
writes one JSON line per result to the protocol fd. The build keeps stdin
open for the worker's life: its end-of-file tells the watchdog the build is gone.
The user's code may print, raise, exit or crash: fds 1 and 2 are pointed at a
capture file before any user code runs, so nothing it writes can corrupt the
protocol, and what it wrote is sent back with each result.

Protocol (version ``PROTOCOL_VERSION``), one JSON object per line:

- ``{"event": "module", "module": NAME, "offset": N}`` before a module is
  imported; ``N`` is where its output starts in the capture file.
- one result per function: ``{"module", "qualname", "ok": true, "payload"
  (member name -> base64), "platforms", "metadata", "output"}``, the
  ``JaxExport`` contract's payload and metadata; or ``{"module",
  "qualname", "ok": false, "rule", "reason", "output"}``.
- ``{"event": "done"}`` at the end.

This module imports neither jax nor the user's code at import time: the
parent imports it for ``PROTOCOL_VERSION``.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib
import json
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

from ppy_plugin_jax.watchdog import Watchdog, high_copy

if TYPE_CHECKING:
    from ppy.plugin import MeshSpec

    from ppy_plugin_jax.dependence import Use
    from ppy_plugin_jax.inputs import Abstract

__all__ = ["PROTOCOL_VERSION", "main"]

PROTOCOL_VERSION: Final = 3
#: Input dtypes jax gives only with jax_enable_x64 on.
_WIDE: Final = frozenset({"float64", "int64", "uint64", "complex128"})


class Capture:
    """Output the user's code wrote since the last ``take``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0

    def flush(self) -> int:
        """Flush Python's buffers into the file; the file's size."""
        for stream in (sys.stdout, sys.stderr):
            # The user's code may have closed or replaced it.
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        return os.path.getsize(self.path)

    def take(self) -> str:
        self.flush()
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        self.offset += len(data)
        return data.decode("utf-8", "replace")


def _runtime_annotations(fn: Any, function: Mapping[str, Any]) -> str | None:
    """Disagreement between the live annotations and what the source said, if any.

    Discovery reads annotations from the AST; this is the check that the code,
    once run, means the same thing (an alias rebound at run time, a shape built
    from a variable). It covers ``ppy.Shape``, ``ppy.DType`` and the axes a
    ``ppy.Like`` marks (which decide what the export accepts as much as a
    shape does); a jaxtyping annotation is read from the source only.
    """
    import typing

    import ppy
    from ppy.kinds.fingerprint import traced_function

    target = traced_function(fn) or fn
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception as error:  # annotations that do not evaluate are the user's to fix
        return f"its annotations do not evaluate at run time: {type(error).__name__}: {error}"
    for param in function["params"]:
        metadata = getattr(hints.get(param["name"]), "__metadata__", ())
        likes = [m for m in metadata if isinstance(m, ppy.Like)]
        if param.get("like") is not None and likes:
            read_axes = tuple((int(a), str(n)) for a, n in param.get("like_axes") or ())
            if likes[0].axes != read_axes:
                written = ppy.Like(param["like"], axes=dict(read_axes))
                return (
                    f"parameter {param['name']} is {likes[0]!r} at run time but the source "
                    f"reads {written!r}"
                )
        array = param["array"]
        if array is None or not array["ppy"]:
            continue
        shapes = [m.dims for m in metadata if isinstance(m, ppy.Shape)]
        dtypes = [m.name for m in metadata if isinstance(m, ppy.DType)]
        live = (list(shapes[0]) if shapes else None, dtypes[0] if dtypes else None)
        read = (array["dims"], array["dtype"])
        if live != read:
            return (
                f"parameter {param['name']} is {_spec_text(*live)} at run time but the source "
                f"reads {_spec_text(*read)}"
            )
    return None


def _spec_text(dims: list[int | str] | None, dtype: str | None) -> str:
    shape = "[" + ",".join(str(d) for d in dims) + "]" if dims is not None else " (no ppy.Shape)"
    return f"{dtype or '(no ppy.DType)'}{shape}"


def _dims(aval: Any) -> list[int | str]:
    return [d if isinstance(d, int) else str(d) for d in aval.shape]


class _Flat:
    """The function as its export takes it: the leaves of its traced inputs in,
    the leaves of its output out, one value of each static parameter."""

    def __init__(self, fn: Any, params: list[Mapping[str, Any]], inputs: _Inputs) -> None:
        self.fn = fn
        self.params = params
        #: The traced parameters, in the order the export takes their trees
        #: and the contract lists them (``traced``), which the run binds by.
        self.names = inputs.names
        self.in_tree = inputs.tree
        self.out_trees: list[Any] = []

    def bind(self, static: Mapping[str, Any], out_shardings: Any = None) -> Any:
        """The function jit traces for one value of each static parameter;
        ``out_shardings`` pins its outputs' shardings (a list, one per leaf)."""
        import functools

        import jax

        def flat(*leaves: Any) -> Any:
            args, kwargs = self.call(static, leaves)
            out_leaves, out_tree = jax.tree_util.tree_flatten(self.fn(*args, **kwargs))
            self.out_trees.append(out_tree)
            return out_leaves

        wrapped = functools.wraps(self.fn)(flat)
        if out_shardings is None:
            return jax.jit(wrapped)
        return jax.jit(wrapped, out_shardings=out_shardings)

    def donated(self) -> tuple[bool, ...]:
        """Per leaf the export takes, whether its parameter is donated."""
        import jax

        count = self.in_tree.num_leaves
        trees = jax.tree_util.tree_unflatten(self.in_tree, range(count))
        given = {p["name"] for p in self.params if p.get("donated")}
        return tuple(
            name in given
            for name, tree in zip(self.names, trees, strict=True)
            for _ in jax.tree_util.tree_leaves(tree)
        )

    def call(
        self, static: Mapping[str, Any], leaves: Sequence[Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments of a call of the function with these leaves and static values."""
        import jax

        trees = jax.tree_util.tree_unflatten(self.in_tree, leaves)
        values = dict(zip(self.names, trees, strict=True))
        values.update(static)
        args = [values[p["name"]] for p in self.params if p["kind"] == "positional"]
        kwargs = {p["name"]: values[p["name"]] for p in self.params if p["kind"] != "positional"}
        return args, kwargs

    def jit_order(self, leaves: Sequence[Any]) -> list[int] | None:
        """Where each leaf jit takes, in the order it takes them, is among the
        export's; None where the two orders agree.

        The export takes the traced parameters in the signature's order; jit
        takes the positional ones so, then the keyword ones by sorted name
        (it flattens them as a dict).
        """
        import jax

        trees = jax.tree_util.tree_unflatten(self.in_tree, leaves)
        places: dict[str, range] = {}
        start = 0
        for name, tree in zip(self.names, trees, strict=True):
            count = len(jax.tree_util.tree_leaves(tree))
            places[name] = range(start, start + count)
            start += count
        kinds = {p["name"]: p["kind"] for p in self.params}
        positional = [name for name in self.names if kinds[name] == "positional"]
        keywords = sorted(name for name in self.names if kinds[name] != "positional")
        order = [i for name in (*positional, *keywords) for i in places[name]]
        return None if order == sorted(order) else order

    def jitted(self) -> Any:
        """The jitted function as the program calls it: its own jit where it
        has one, else jit with its static parameters (a function the program
        jits where it makes it)."""
        import jax

        if callable(getattr(self.fn, "lower", None)):
            return self.fn
        names = [p["name"] for p in self.params if p["static"]]
        return jax.jit(self.fn, static_argnames=names)

    def lowered(self, static: Mapping[str, Any], leaves: Sequence[Any]) -> Any:
        """The jitted function lowered for a call of these leaves, as the program calls it."""
        args, kwargs = self.call(static, leaves)
        return self.jitted().lower(*args, **kwargs)

    def original(self, static: Mapping[str, Any]) -> Any:
        """The jitted function as the program calls it, taking the export's
        leaves and returning its output's, as ``jax.grad`` of a call of it
        differentiates it."""
        import jax

        jitted = self.jitted()

        def flat(*leaves: Any) -> Any:
            args, kwargs = self.call(static, leaves)
            return jax.tree_util.tree_leaves(jitted(*args, **kwargs))

        return flat


def _leaf_specs(
    names: list[str], trees: tuple[Any, ...], described: Abstract
) -> list[dict[str, Any]]:
    """Each leaf's description, named by its parameter and its path in the tree,
    with its dims as the source wrote them where it wrote them, and its
    ``ppy.Sharding`` entries (None where no leaf has one; replicated, ``()``,
    for a leaf with none beside one that has)."""
    import jax

    sharded = bool(described.shardings)
    specs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(trees)[0]:
        name = names[path[0].idx] + jax.tree_util.keystr(path[1:])
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            raise _Refusal(
                "missing-shape",
                f"{name} is a {type(leaf).__name__} leaf with no description: a call passes "
                "it as a traced value; describe it as an array, or make it a static field "
                "(not a pytree leaf) of its class",
            )
        written = described.written.get(id(leaf)) or _dims(leaf)
        # A symbol split over mesh axes is exported as its multiple (4*B):
        # the guard checks the export's dims, people read the source's.
        dims = _dims(leaf) if described.multiples else written
        sharding = described.shardings.get(id(leaf), ()) if sharded else None
        specs.append(
            {
                "name": name,
                "dims": dims,
                "shown": written,
                "dtype": str(leaf.dtype),
                "sharding": sharding,
                "weak": bool(leaf.weak_type),
            }
        )
    return specs


class _Refusal(Exception):
    """Why a function is not exported. ``symbolic``: only its symbolic dims are
    not faithful, and the sizes a recording saw would be (``ppy_plugin_jax.sizes``)."""

    def __init__(
        self,
        rule: str,
        reason: str,
        *,
        deliberate: bool = False,
        remedy: str | None = None,
        symbolic: bool = False,
    ) -> None:
        super().__init__(reason)
        self.rule = rule
        self.reason = reason
        self.symbolic = symbolic
        self.result: dict[str, Any] = {"ok": False, "rule": rule, "reason": reason}
        if deliberate:
            self.result["deliberate"] = True
        if remedy is not None:  # this reason's own, in place of the rule's
            self.result["remedy"] = remedy


def _static_values(params: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One mapping per combination of the static parameters' values."""
    import itertools

    static = [p for p in params if p["static"]]
    combinations = itertools.product(*(p["choices"] for p in static))
    return [dict(zip((p["name"] for p in static), values, strict=False)) for values in combinations]


def _export(module: Any, function: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return _export_variants(module, function, request)
    except _Refusal as refusal:
        return refusal.result
    except Exception as error:
        if type(error).__name__ != "InconclusiveDimensionOperation":
            raise
        # jax cannot tell how two symbols compare: the project can say it.
        return _Refusal(
            "export-failed",
            _describe(error, "exporting it", request["root"]),
            remedy="state how the dims relate, as jax.export's symbolic constraints: "
            '[tool.ppy.plugins.jax] constraints = ["N >= F"], say',
        ).result


@dataclass(frozen=True)
class _Inputs:
    """The traced parameters as the export takes them."""

    names: list[str]
    #: One ``{name, dims, dtype}`` per leaf.
    specs: list[dict[str, Any]]
    leaves: list[Any]
    tree: Any
    #: ``ppy.kinds.pytrees.structure`` of ``tree``.
    digest: str
    #: The mesh the leaves are laid out over, or None for one device.
    mesh: MeshSpec | None = None
    #: The constraints on its symbols the export assumes.
    constraints: tuple[str, ...] = ()
    #: Per leaf, the kinds of weak types in which a ``ppy.Like`` example
    #: gives it weakly typed, or a recording saw it so (``kinds``): these
    #: inputs are exported weakly typed too, one variant per kind (``weakened``).
    weakly: tuple[tuple[int, ...], ...] = ()

    def kinds(self) -> list[int]:
        """The kinds of weak types, most called first: jit traces each apart."""
        return sorted({kind for kinds in self.weakly for kind in kinds})

    def weakened(self, kind: int) -> _Inputs:
        """These inputs with the leaves weakly typed in ``kind`` weakly typed,
        as jit traces a call that passes them so (the example's own values,
        or a recorded call's)."""
        import jax

        flags = [kind in kinds for kinds in self.weakly]
        leaves = [
            jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
                leaf.shape, leaf.dtype, sharding=getattr(leaf, "sharding", None), weak_type=True
            )
            if weak
            else leaf
            for leaf, weak in zip(self.leaves, flags, strict=True)
        ]
        specs = [
            {**spec, "weak": True} if weak else spec
            for spec, weak in zip(self.specs, flags, strict=True)
        ]
        return dataclasses.replace(self, leaves=leaves, specs=specs, weakly=())


def _inputs(
    fn: Any, module: Any, params: list[Mapping[str, Any]], request: Mapping[str, Any]
) -> _Inputs:
    import jax
    from ppy.kinds.fingerprint import Unreadable, traced_function
    from ppy.kinds.pytrees import structure
    from ppy.plugin import MeshSpec

    from ppy_plugin_jax.inputs import Undescribed, abstract
    from ppy_plugin_jax.mesh import Unplaced, place

    python = traced_function(fn)
    namespace = python.__globals__ if python else vars(module)
    raw = request.get("mesh")
    layout = MeshSpec.from_json(raw) if raw is not None else None
    sizes = dict(zip(layout.names, layout.sizes, strict=True)) if layout is not None else None
    try:
        described = abstract(
            namespace, params, request["root"], request.get("constraints", ()), sizes
        )
    except Undescribed as undescribed:
        raise _Refusal(undescribed.rule, undescribed.reason, remedy=undescribed.remedy) from None
    # The signature's order, whatever order the descriptions came back in: the
    # contract lists the traced parameters so (``traced``), the run binds a
    # call's arguments by it, and the export takes their leaves in it.
    names = [p["name"] for p in params if not p["static"]]
    trees = tuple(described.values[name] for name in names)
    leaves, tree = jax.tree_util.tree_flatten(trees)
    weakly = tuple(described.weak.get(id(leaf), ()) for leaf in leaves)
    try:
        digest = structure(tree)
    except Unreadable as error:
        raise _Refusal(
            "input-tree", f"its inputs cannot be compared at run time: {error}"
        ) from None
    specs = _leaf_specs(names, trees, described)
    mesh = None
    if described.shardings:
        mesh = layout
        try:
            leaves = place(leaves, specs, mesh)
        except Unplaced as error:
            raise _Refusal("sharding", str(error), remedy=error.remedy) from None
    return _Inputs(
        names,
        specs,
        leaves,
        tree,
        digest,
        mesh,
        described.constraints,
        weakly if any(weakly) else (),
    )


def _captures(fn: Any, request: Mapping[str, Any], main: str | None = None) -> tuple[Any, ...]:
    import jax

    from ppy_plugin_jax.captures import Refused, captures

    try:
        return captures(
            fn,
            root=request["root"],
            limit=request["capture_limit"],
            flatten=jax.tree_util.tree_flatten,
            main=main,
        )
    except Refused as refused:
        raise _Refusal(
            "captures-runtime-value",
            f"its trace uses {refused.name}, which ppy cannot compare at run time: {refused.why}",
            deliberate=True,
        ) from None


def _export_variants(
    module: Any, function: Mapping[str, Any], request: Mapping[str, Any]
) -> dict[str, Any]:
    import jax
    from jax._src import config as jax_config
    from ppy.kinds.trace_config import read as read_config

    if function.get("scope", "module") in ("module", "method"):  # a method: a static one
        fn: Any = module
        for part in function["qualname"].split("."):
            fn = getattr(fn, part)
        mismatch = _runtime_annotations(fn, function)
        if mismatch:
            raise _Refusal("annotation-mismatch", mismatch)
    elif function.get("made"):  # jax.jit(...) called inside a function
        fn = _evaluated(module, function["made"])
    else:  # made where no name holds it: rebuilt from its code, annotations read from source
        fn = _rebuilt(module, function["qualname"], function.get("closure"))
    params = function["params"]
    inputs = _inputs(fn, module, params, request)
    read = _captures(fn, request)
    # A 64-bit input is traced as it would be under ppy run: only with x64 on,
    # which the trace records, so the staged path is taken only then.
    wide = any(spec["dtype"] in _WIDE for spec in inputs.specs)
    flat = _Flat(fn, params, inputs)
    sizes = function.get("sizes") or []
    vjp = bool(function.get("vjp"))
    with jax_config.enable_x64(True) if wide else contextlib.nullcontext():
        statics = _static_values(params)
        try:
            variants = [
                _variant(flat, static, form, request, recorded=bool(sizes), vjp=vjp)
                for static in statics
                for form in _forms(inputs, statics)
            ]
            note, trail = None, []
        except _Refusal as refusal:
            if not (refusal.symbolic and sizes):
                raise
            variants, note = _at_recorded_sizes(fn, module, function, request, statics, refusal)
            trail = [{"rule": refusal.rule, "detail": f"{refusal.reason}; exported {note} instead"}]
        traced_under = read_config(jax.config, jax_config.trace_context_names())
        linear, left = _linearized(flat, variants, function.get("gradients") or [], request)
    trail += [{"rule": "linearized", "detail": why} for why in left]
    contract = _contract(inputs, params, variants, read, traced_under, linear)
    payload = contract.to_payload()
    shown = [s["shown"] for s in inputs.specs]
    return {
        "ok": True,
        "payload": {k: base64.b64encode(v).decode("ascii") for k, v in payload.items()},
        "platforms": list(variants[0][1]),
        # The inputs' dims as the source wrote them, where the export's differ
        # (at recorded sizes, the export's first variant has the first sizes).
        "shown": shown if note or shown != [s["dims"] for s in inputs.specs] else None,
        "metadata": contract.to_metadata(),
        "note": note,
        "trail": trail,
    }


def _linearized(
    flat: _Flat,
    variants: Sequence[tuple[Any, tuple[str, ...]]],
    recorded: Sequence[Mapping[str, Any]],
    request: Mapping[str, Any],
) -> tuple[list[Any], list[str]]:
    """jit's own programs for the calls a recording saw under ``jax.grad``
    (``ppy_plugin_jax.linearize``), and why any was left out: such a call
    is then served as before, by the export's VJP or by jit. ``flat.fn``
    must be the jitted function itself: jax's trace of ``jax.vjp`` of it
    holds the programs jit compiles."""
    from ppy.kinds.jax_programs import export_platform

    from ppy_plugin_jax.linearize import linearized

    if not recorded or any(flat.donated()):
        return [], []

    def call_with(static: Mapping[str, Any], leaves: Sequence[Any]) -> Any:
        args, kwargs = flat.call(static, leaves)
        return flat.fn(*args, **kwargs)

    targets = request.get("platforms") or [export_platform()]
    try:
        return linearized(call_with, flat.names, [v for v, _ in variants], recorded, targets)
    except Exception as error:  # jax's own trace of jax.vjp: any failure leaves jit's path
        return [], [f"jit's programs under jax.grad were not exported: {type(error).__name__}"]


def _contract(
    inputs: _Inputs,
    params: Sequence[Mapping[str, Any]],
    variants: Sequence[tuple[Any, tuple[str, ...]]],
    read: tuple[Any, ...],
    traced_under: Mapping[str, str],
    linearized: Sequence[Any] = (),
) -> Any:
    """The ``JaxExport`` contract of these variants: what a build's worker and
    a recorded process (``ppy_plugin_jax.live``) both write."""
    import jax
    from ppy.kinds.jax_export import JaxExport
    from ppy.kinds.jax_programs import export_platform

    return JaxExport(
        jax_version=jax.__version__,
        jaxlib_version=importlib.import_module("jaxlib").__version__,
        traced=tuple(inputs.names),
        static=tuple(p["name"] for p in params if p["static"]),
        donated=tuple(p["name"] for p in params if p.get("donated")),
        variants=tuple(variant for variant, _ in variants),
        captures=read,
        trace_config=traced_under,
        mesh=inputs.mesh,
        constraints=inputs.constraints,
        linearized=tuple(linearized),
        # _compiles_as_jit compiled every symbolic variant here, for this
        # machine's platform only.
        compared_on=(export_platform(),)
        if any(v.uses_shape_polymorphism for v, _ in variants)
        else (),
    )


def _forms(inputs: _Inputs, statics: Sequence[Mapping[str, Any]]) -> list[_Inputs]:
    """The inputs as each variant of one static value takes them: as described,
    and in each kind of weak types a recording or an example saw, most called
    first, as many as an entry holds. A call of a kind left out takes jit's
    path, and the run names its weakly typed input (``export._weakly``)."""
    from ppy.kinds.jax_export import JaxExport

    room = JaxExport.MAX_VARIANTS // max(1, len(statics)) - 1
    return [inputs, *(inputs.weakened(kind) for kind in inputs.kinds()[:room])]


def _at_recorded_sizes(
    fn: Any,
    module: Any,
    function: Mapping[str, Any],
    request: Mapping[str, Any],
    statics: list[dict[str, Any]],
    refusal: _Refusal,
) -> tuple[list[tuple[Any, tuple[str, ...]]], str]:
    """The variants of a recorded function at the sizes its recording saw, most
    called first, as many as an entry holds; and the note that says which.

    ``refusal`` is why its symbols are not faithful: it stands where a symbol
    the source wrote stays symbolic (the claim is the program's, and no size
    of it was recorded), and where no recorded size fits in an entry.
    """
    from ppy.kinds.jax_export import JaxExport

    from ppy_plugin_jax.sizes import named, sized

    recorded = function["sizes"]
    variants: list[tuple[Any, tuple[str, ...]]] = []
    served: list[Mapping[str, int]] = []
    for sizes in recorded:
        params: list[Mapping[str, Any]] = [sized(p, sizes) for p in function["params"]]
        inputs = _inputs(fn, module, params, request)
        if any(not isinstance(d, int) for leaf in inputs.leaves for d in leaf.shape):
            raise refusal
        forms = _forms(inputs, statics)
        if len(variants) + len(statics) * len(forms) > JaxExport.MAX_VARIANTS:
            break
        flat = _Flat(fn, params, inputs)
        vjp = bool(function.get("vjp"))
        variants += [
            _variant(flat, static, form, request, vjp=vjp) for static in statics for form in forms
        ]
        served.append(sizes)
    if not served:
        raise refusal
    left = len(recorded) - len(served)
    more = f" (the {len(served)} most called of {len(recorded)})" if left else ""
    return variants, f"at the recorded sizes {named(served)}{more}"


def _evaluated(module: Any, call: str) -> Any:
    """What ``call`` (``jax.jit(partial(gram, kernel))``, found inside a function
    of the module) makes, evaluated over the module's globals as the program's
    statement evaluates it: discovery took only calls that read no variable
    of the function around them."""
    return eval(compile(call, module.__file__, "eval", dont_inherit=True), vars(module))


def _rebuilt(module: Any, qualname: str, held: Mapping[str, Any] | None) -> Any:
    """The function ``qualname`` as the program makes it: inside a function
    (``minimize.<locals>.update``) or under ``if __name__ == "__main__":``.

    No name holds it once the module is imported, so it is made anew from
    its code, compiled from the module's file, over the module's globals, as
    the program's ``def`` makes it. The variables it reads of the function
    around it are given the values a recording saw (``held``: literals, and
    objects a module names); the captures compare them at run time, as
    globals. A function that reads any other is refused, and so is a
    qualname the module defines twice, where the run could make either.
    """
    import types

    path = module.__file__
    with open(path, "rb") as file:
        code = compile(file.read(), path, "exec", dont_inherit=True)
    found = [c for c in _codes(code) if c.co_qualname == qualname]
    if len(found) != 1:
        raise _Refusal(
            "redefined",
            f"{qualname} is defined {len(found)} times in its module; the build cannot tell "
            "which one the program makes",
            deliberate=True,
            remedy="give each definition a name of its own",
        )
    (made,) = found
    cells = _cells(made.co_freevars, held or {})
    if cells is None:
        owner = qualname.rpartition(".<locals>.")[0]
        names = ", ".join(made.co_freevars)
        one = len(made.co_freevars) == 1
        them = "it as a parameter" if one else "them as parameters"
        raise _Refusal(
            "scope",
            f"it reads {names} from {owner}, which the build does not have: "
            f"{'it exists' if one else 'they exist'} only while {owner} runs",
            deliberate=True,
            remedy=f"pass {them}, or move the function to module level",
        )
    return types.FunctionType(made, vars(module), made.co_name, None, cells)


def _cells(names: tuple[str, ...], held: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A closure of ``names`` holding the recorded values, or None where one
    was not recorded, or names an object no imported module holds."""
    import types

    from ppy.kinds.pytrees import resolve

    cells = []
    for name in names:
        value = held.get(name)
        if value is None:
            return None
        if "ref" in value:
            found = resolve(value["ref"])
            if found is None:
                return None
            cells.append(types.CellType(found))
        else:
            cells.append(types.CellType(value["static"]))
    return tuple(cells)


def _codes(code: Any) -> Any:
    """Every code object ``code`` holds, nested ones included."""
    import types

    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield constant
            yield from _codes(constant)


def _variant(
    flat: _Flat,
    static: dict[str, Any],
    inputs: _Inputs,
    request: Mapping[str, Any],
    *,
    recorded: bool = False,
    vjp: bool = False,
) -> tuple[Any, tuple[str, ...]]:
    """The export for one value of each static parameter, and its platforms.

    ``vjp``: the program differentiates the function, so the export carries
    its VJP, once its gradients are jit's bit for bit (``_vjp_as_jit``).

    ``recorded``: the symbols are a recording's, not the source's, so a trace
    that asks one anything whose answer depends on its size refuses the
    export whatever ``verify-sizes`` says, and so does any other failure of
    the symbolic trace: the recorded sizes are exported instead.
    """
    from jax import export
    from ppy.kinds.jax_export import Variant
    from ppy.kinds.jax_programs import export_platform
    from ppy.kinds.pytrees import Unrebuildable, recipe
    from ppy.plugin import TensorSpec

    from ppy_plugin_jax.dependence import watched
    from ppy_plugin_jax.mesh import out_shardings, spec_of
    from ppy_plugin_jax.verify import specialized

    targets = request.get("platforms") or [export_platform()]
    verify = request.get("verify_sizes", True)
    function = flat.bind(static)
    if inputs.mesh is not None:
        function = flat.bind(static, out_shardings(function, inputs.leaves))
    where = f" with {', '.join(f'{k}={v!r}' for k, v in static.items())}" if static else ""
    with watched() as uses:
        try:
            exported = export.export(function, platforms=targets)(*inputs.leaves)
        except Exception as error:
            if not recorded:
                raise
            if uses:
                rule, reason = "specializes", _asked(uses[0], where, request["root"])
            else:
                rule = "export-failed"
                reason = _describe(error, "exporting it with symbolic dims", request["root"])
            raise _Refusal(rule, reason, symbolic=True) from None
    out_tree = flat.out_trees[-1]
    if uses and (verify or recorded):
        raise _Refusal(
            "specializes", _asked(uses[0], where, request["root"]), deliberate=True, symbolic=True
        )
    found = specialized(function, exported) if verify == "sample" else None
    if found is not None:
        sizes, why = found
        at = ", ".join(f"{name}={size}" for name, size in sizes.items())
        raise _Refusal(
            "specializes",
            f"at {at}{where}, {why}: the export does not serve every size its description claims",
            deliberate=True,
            symbolic=True,
        )
    _compiles_as_jit(flat, static, exported, inputs.leaves, where)
    _donation_as_jit(exported, flat.donated(), where)
    serialized = bytes(exported.serialize(vjp_order=1 if vjp else 0))
    if vjp:
        _vjp_as_jit(flat, static, serialized, inputs, where)
    try:
        out_recipe = recipe(out_tree, inputs.tree)
    except Unrebuildable as error:
        raise _Refusal("output-tree", str(error)) from None
    variant = Variant(
        static=static,
        in_tree=inputs.digest,
        out_tree=out_recipe,
        inputs=tuple(
            TensorSpec(tuple(s["dims"]), s["dtype"], s["name"], s["sharding"], s["weak"])
            for s in inputs.specs
        ),
        outputs=tuple(
            TensorSpec(tuple(_dims(a)), str(a.dtype), None, spec_of(sharding))
            for a, sharding in zip(exported.out_avals, _out_named(exported), strict=True)
        ),
        calling_convention_version=exported.calling_convention_version,
        nr_devices=exported.nr_devices,
        uses_shape_polymorphism=any(
            not isinstance(d, int) for a in exported.in_avals for d in a.shape
        ),
        export=serialized,
        stablehlo=exported.mlir_module().encode("utf-8"),
        weak_outputs=tuple(i for i, a in enumerate(exported.out_avals) if a.weak_type),
    )
    return variant, tuple(exported.platforms)


def _donation_as_jit(exported: Any, donated: Sequence[bool], where: str) -> None:
    """Refuse an export whose donated inputs jit could not all give to an
    output: jit warns of those at its first call, which a staged call
    loaded from the executable cache would not. Where every one is given,
    the run's executable donates as jit's does (``ppy_runtime_pjrt.compile``),
    deleting the same arrays."""
    import warnings

    import jax

    if not any(donated):
        return
    numbers = tuple(i for i, given in enumerate(donated) if given)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = jax.jit(exported.call, donate_argnums=numbers).trace(*exported.in_avals)
        traced.lower(lowering_platforms=tuple(exported.platforms))
    for warning in caught:
        text = str(warning.message)
        if "donated buffers were not usable" in text:
            unusable = text.splitlines()[0].rstrip(".")
            raise _Refusal(
                "static-args",
                f"{unusable}{where}: jit warns of it at its first call, and a staged call "
                "would not",
                remedy="donate only arguments of an output's shape and dtype",
                deliberate=True,
            )


def _asked(use: Use, where: str, root: str) -> str:
    """A question the trace asked of a symbolic dim, as a refusal's reason."""
    return f"{_shown(use.filename, root)}:{use.line} {use.asked}{where}, {use.why}"


def _compiles_as_jit(
    flat: _Flat, static: dict[str, Any], exported: Any, leaves: Sequence[Any], where: str
) -> None:
    """Refuse an export that XLA compiles to another program than jit's:
    one with symbolic dims, given sizes; one jit hands constants its export
    embeds (``ppy_plugin_jax.refinement``)."""
    from ppy_plugin_jax.refinement import Uncompared, diverges

    try:
        sizes = diverges(
            lambda sized: flat.lowered(static, sized), exported, leaves, flat.jit_order(leaves)
        )
    except Uncompared as error:
        if all(isinstance(d, int) for a in exported.in_avals for d in a.shape):
            raise _Refusal(
                "constants",
                f"{error}{where}, so ppy cannot check that the export, which embeds the "
                "constants jit gives its program as arguments, computes what jit does",
                deliberate=True,
                remedy="pass the arrays as arguments of the function",
            ) from None
        raise _Refusal(
            "refinement",
            f"{error}{where}, so ppy cannot check that the export computes what jit does",
            deliberate=True,
            remedy="give the dims fixed sizes",
            symbolic=True,
        ) from None
    if sizes == {}:
        raise _Refusal(
            "constants",
            f"jit gives its program constants of the trace as arguments (arrays it closes "
            f"over, or computes from them, over jax_embedded_constants_max_bytes){where}, "
            "where an export embeds them, and XLA computes with them at compile time: "
            "results can differ in the last bits",
            deliberate=True,
            remedy="pass the arrays as arguments of the function",
        )
    if sizes is not None:
        at = ", ".join(f"{name}={size}" for name, size in sizes.items())
        raise _Refusal(
            "refinement",
            f"at {at}{where}, XLA compiles the export to another program than the jitted "
            "function: jax inlines the functions it calls (jnp.linspace, nested jits) "
            "before XLA sees them, and XLA folds their constants otherwise, so results "
            "can differ in the last bits",
            deliberate=True,
            remedy="give the dims fixed sizes, which are compiled as jit compiles them",
            symbolic=True,
        )


def _vjp_as_jit(
    flat: _Flat, static: dict[str, Any], serialized: bytes, inputs: _Inputs, where: str
) -> None:
    """Refuse an export whose VJP gives other gradients than jit's
    (``ppy_plugin_jax.gradients``)."""
    import jax

    from ppy_plugin_jax.gradients import vjp_differs

    names = [spec["name"] for spec in inputs.specs]
    why = vjp_differs(
        flat.original(static), jax.export.deserialize(bytearray(serialized)), inputs.leaves, names
    )
    if why is not None:
        raise _Refusal(
            "vjp-bits",
            f"{why}{where}: jax.grad of the staged function would compute other bits than "
            "jax.grad of the jitted one",
            deliberate=True,
            remedy="nothing to do: it stays jitted, and jax differentiates it as python does",
        )


def _out_named(exported: Any) -> tuple[Any, ...]:
    """The export's output shardings over its abstract mesh: None where the
    compiler chooses (every output of a one-device export)."""
    named = getattr(exported, "_out_named_shardings", None)
    return tuple(named) if named is not None else (None,) * len(exported.out_avals)


def _describe(error: BaseException, doing: str, root: str) -> str:
    """One line: what was raised, where in the user's code, and its message."""
    if isinstance(error, SystemExit):
        return f"the code called sys.exit({error.code!r}) while {doing}"
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    prefix = os.path.join(os.path.abspath(root), "")
    user = [f for f in frames if os.path.abspath(f.filename).startswith(prefix)]
    last = (user or frames)[-1:]
    where = f" at {_shown(last[0].filename, root)}:{last[0].lineno}" if last else ""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    text = " ".join(lines[:4])
    return f"{type(error).__name__}{where} while {doing}: {text}"


def _shown(filename: str, root: str) -> str:
    """``filename`` relative to the project's ``root`` where it is inside it."""
    prefix = os.path.join(os.path.abspath(root), "")
    absolute = os.path.abspath(filename)
    return absolute[len(prefix) :] if absolute.startswith(prefix) else filename


def _side_effect(printed: str) -> dict[str, Any]:
    """The result for a function whose trace wrote output: a python run prints
    it at the first call, a staged run never traces, so it stays."""
    first = next(line for line in printed.splitlines() if line.strip()).strip()
    return {
        "ok": False,
        "rule": "trace-side-effect",
        "reason": f"its trace writes to stdout or stderr ({first[:80]!r}); a staged call is "
        "not traced, so ppy run would not print it",
        "deliberate": True,
    }


def _serve(request: Mapping[str, Any], out: IO[str], capture: Capture, watchdog: Watchdog) -> None:
    safe = bool(request.get("safe_path"))
    if not safe:  # python puts the program's folder first on sys.path
        sys.path.insert(0, request["root"])
    import ppy  # noqa: F401  (installs the .ppy import hook)

    def send(message: Mapping[str, Any]) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    for module_request in request["modules"]:
        name = module_request["name"]
        send({"event": "module", "module": name, "offset": capture.flush()})
        watchdog.module_started()
        capture.take()
        if not safe:
            _beside(request["root"], module_request["path"])
        try:
            module = _import(name, module_request, request["root"], safe)
        except BaseException as error:  # SystemExit and KeyboardInterrupt too: user code
            reason = _describe(error, f"importing {module_request['path']}", request["root"])
            output = capture.take()
            # A module not found: which, and where this process looked for it.
            missing = (
                {"missing": error.name, "searched": list(sys.path)}
                if isinstance(error, ModuleNotFoundError)
                else {}
            )
            for function in module_request["functions"]:
                send(
                    {
                        "module": name,
                        "qualname": function["qualname"],
                        "ok": False,
                        "rule": "import-failed",
                        "reason": reason,
                        "output": output,
                        **missing,
                    }
                )
            continue
        import_output = capture.take()
        for function in module_request["functions"]:
            try:
                with _named(module, "__main__" if module_request["program"] else name):
                    result = _export(module, function, request)
            except BaseException as error:  # whatever the user's function raises
                result = {
                    "ok": False,
                    "rule": "export-failed",
                    "reason": _describe(error, "exporting it", request["root"]),
                }
            traced = capture.take()
            # A trace that writes stays for that first: it is what python shows,
            # and a dim it wrote (``print(x.shape)``) would also be a question
            # asked of the dim (rule specializes).
            if traced.strip() and (result["ok"] or result.get("rule") == "specializes"):
                result = _side_effect(traced)
            result.update(module=name, qualname=function["qualname"], output=import_output + traced)
            send(result)
    send({"event": "done"})


def _import(name: str, module_request: Mapping[str, Any], root: str, safe: bool) -> Any:
    """The module, imported under its own name.

    Under ``python -P`` (or ``PYTHONSAFEPATH``) a program's folder is not on
    ``sys.path``: the program is loaded from its file, and what it imports is
    found where python finds it, or not at all, as under python.
    """
    if not (safe and module_request.get("program")):
        return importlib.import_module(name)
    from importlib import machinery, util

    path = os.path.join(os.path.abspath(root), module_request["path"])
    loader = machinery.SourceFileLoader(name, path)
    spec = util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@contextlib.contextmanager
def _named(module: Any, name: str) -> Iterator[None]:
    """Trace with the ``__name__`` the run gives the module.

    The module is imported under its own name, so that its main guard does
    not run; the program python runs is ``__main__``, and a trace that reads
    ``__name__`` bakes it in (and the run compares it as a captured global).
    """
    imported = module.__dict__["__name__"]
    module.__dict__["__name__"] = name
    try:
        yield
    finally:
        module.__dict__["__name__"] = imported


def _beside(root: str, path: str) -> None:
    """Let a module in a subfolder import its neighbours, as python lets a
    script: ``python app/model.ppy`` puts ``app/`` first on ``sys.path``."""
    folder = os.path.dirname(os.path.join(os.path.abspath(root), path))
    if folder != os.path.abspath(root) and folder not in sys.path:
        sys.path.insert(0, folder)


def _limit_memory(megabytes: int | None) -> None:
    """Cap what this process may allocate, soft and hard, so the user's code cannot lift it.

    ``RLIMIT_DATA`` counts the heap and private writable mappings (every
    array), not address space merely reserved, which GPU stacks reserve by
    the terabyte; an allocation beyond it is a ``MemoryError`` in the code
    that asked, instead of the machine swapping or the kernel killing
    something else.
    """
    if not megabytes:
        return
    import resource

    limit = int(megabytes) << 20
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def main() -> None:
    # The project's modules are imported here, where python runs the program
    # as ``__main__``: no bytecode cache may be left beside the sources.
    sys.dont_write_bytecode = True
    # One line: stdin stays open after it, as the watchdog's lifeline.
    request = json.loads(sys.stdin.readline())
    if request.get("protocol") != PROTOCOL_VERSION:
        raise SystemExit(
            f"ppy_plugin_jax.worker speaks protocol {PROTOCOL_VERSION}, "
            f"was sent {request.get('protocol')!r}"
        )
    _limit_memory(request.get("memory_limit_mb"))
    watchdog = Watchdog(0, float(request["timeout"]))
    # The protocol keeps the original stdout; fds 1 and 2 then point at the
    # capture file, so prints from the user's code (and from its C extensions
    # and children) land there.
    protocol = os.fdopen(high_copy(1), "w", encoding="utf-8")
    fd = os.open(request["capture"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    _serve(request, protocol, Capture(request["capture"]), watchdog)
    protocol.close()


if __name__ == "__main__":
    main()
