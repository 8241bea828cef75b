"""The ``jax.export`` runtime: bind a serialized export in place of the original.

``ExportRuntime.bind`` reads the entry's ``jax.export`` serialization, refuses
(``NotBound``) what this process cannot run -- another platform, a calling
convention this jax does not support, an export outside this jax's
compatibility window, a description that disagrees with the export -- and
returns a ``StagedFunction``.

A ``StagedFunction`` is bound as a dispatcher of jax's own: a call of a
signature and configuration it has served before costs what a jitted call
costs, in C++. Anything else reaches ``StagedFunction.miss``: the
configuration is checked (``conditions.Conditions``), the call is bound to
the signature and its static values pick a variant (``calls.Calls``), its
pytree structure is compared with the build's, its leaves are checked
(``guard.Guard``), then the values the trace read; then an executable is
loaded for the call, or the original is called and the reason recorded.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ppy.kinds import statics
from ppy.kinds.base import KindError
from ppy.kinds.fingerprint import Unreadable, python_function
from ppy.kinds.jax_compat import outside_window
from ppy.kinds.jax_export import Captured, JaxExport, Variant, function_reads
from ppy.kinds.jax_programs import export_platform
from ppy.kinds.keys import is_key, jax_dtype, key_array_type
from ppy.kinds.linearized import leaf_aval
from ppy.kinds.pytrees import Unrebuildable, rebuild, structure
from ppy.kinds.tracers import perturbed, primals
from ppy.runtime import Entry, ManagedRuntime, NotBound, RunContext

from ppy_runtime_pjrt import unstaged
from ppy_runtime_pjrt.calls import Bound, Calls
from ppy_runtime_pjrt.conditions import Conditions
from ppy_runtime_pjrt.guard import Fallback, Guard, Signature, type_name
from ppy_runtime_pjrt.placement import Placed, Placement, committed

if TYPE_CHECKING:
    from ppy_runtime_pjrt.compile import Executables, Shaped
    from ppy_runtime_pjrt.linearized import Programs

__all__ = ["CallStats", "ExportRuntime", "StagedFunction"]


def _log() -> Any:
    from ppy.runtime import get_logger

    return get_logger()


def _verbose() -> bool:
    from ppy.runtime import verbose

    return verbose()


@dataclass
class CallStats:
    """What a ``StagedFunction`` has done, for tests, benchmarks and ``-v``.

    ``fallbacks`` counts calls that went to the original by ``Fallback``
    category; ``executables`` says where each signature's executable came
    from ("cache" or "compiled"). Staged calls are not counted: the fast path
    does nothing it does not need.
    """

    fallbacks: dict[str, int] = field(default_factory=dict)
    executables: dict[Signature, str] = field(default_factory=dict)


class Staged:
    """One variant of an entry in this process: its export, guard and executables.

    ``variant.in_tree`` is the build's ``ppy.kinds.pytrees.structure`` of the
    traced parameters; ``trees`` holds each call structure that matched it,
    with the output tree it gives, so the digest is computed once per
    structure.
    """

    def __init__(
        self,
        variant: Variant,
        exported: Any,
        guard: Guard,
        module: str,
        placement: Placement | None = None,
        static: tuple[str, ...] = (),
    ) -> None:
        """``static``: the entry's static parameters, in the order a call's
        values come (``Bound.values``)."""
        self.variant = variant
        self.exported = exported
        self.guard = guard
        self.module = module
        #: For an export over a mesh: the layout its inputs must have.
        self.placement = placement
        #: Why this process's platform cannot run the export, and whether the
        #: build compared it with jit here, asked at the first call where
        #: binding could not ask (see ``ExportRuntime._variant``).
        self.platform: Callable[[], tuple[str | None, bool]] | None = None
        self.unrunnable: str | None = None
        #: A variant with symbolic dims the build did not compare with jit on
        #: this platform: it is compared at its first call (``ontarget``), and
        #: ``differs`` then says why it is not served, or stays None.
        self.uncompared = False
        self.differs: str | None = None
        self.trees: dict[Any, Any] = {}
        self.executables: Executables | None = None
        #: jit's own programs for calls under ``jax.grad`` (``linearized``).
        self.linearized: tuple[Programs, ...] = ()
        #: The functions among its static values (``ppy.kinds.statics.reads``):
        #: each one's index among the statics, where it is in that value, and
        #: what must hold of it.
        self._reads = tuple(
            (index, where, function_reads(found))
            for index, name in enumerate(static)
            for where, found in statics.reads(variant.static[name])
        )

    def reads(self, values: tuple[Any, ...]) -> tuple[tuple[Any, tuple[Captured, ...]], ...]:
        """Each function among a call's static ``values`` with what must hold
        of it: its own fingerprint, and what its trace read."""
        found = []
        for index, where, captures in self._reads:
            value = values[index]
            for step in where:
                value = value[step]
            found.append((value, captures))
        return tuple(found)

    def serving(self, calls: Calls) -> Callable[..., Any]:
        """What jit compiles for a call of this variant: the call bound, the
        export run on its traced leaves, and the output tree rebuilt around
        the leaves it returns."""
        return self._served(calls, lambda leaves, call: list(self.exported.call(*leaves)))

    def reversing(self, calls: Calls, original: Callable[..., Any]) -> Callable[..., Any]:
        """What serves a call under reverse-mode differentiation: ``serving``'s
        call, with the pullback decided when it is called
        (``differentiated.reverse``): the export's VJP, or ``original``'s."""

        def run(leaves: list[Any], call: tuple[Any, Any, Any]) -> list[Any]:
            from ppy_runtime_pjrt.differentiated import reverse

            return reverse(self.exported, _flat(calls, original, call))(*leaves)

        return self._served(calls, run)

    def linearization(self, leaves: list[Any], at: list[Any]) -> Programs | None:
        """jit's programs the build exported for a call under ``jax.grad`` of
        these leaves (tracers, evaluated ``at``), or None."""
        if not self.linearized:
            return None
        key = (tuple(map(leaf_aval, at)), tuple(map(perturbed, leaves)))
        for programs in self.linearized:
            if (programs.linearized.inputs, programs.linearized.perturbed) == key:
                return programs
        return None

    def linearizing(
        self,
        calls: Calls,
        programs: Programs,
        original: Callable[..., Any],
        traced: Callable[[str], None],
    ) -> Callable[..., Any]:
        """What serves a call under ``jax.grad`` by jit's own programs."""

        def run(leaves: list[Any], call: tuple[Any, Any, Any]) -> list[Any]:
            from ppy_runtime_pjrt.linearized import serving

            return serving(programs, _flat(calls, original, call), traced)(*leaves)

        return self._served(calls, run)

    def _served(
        self, calls: Calls, run: Callable[[list[Any], tuple[Any, Any, Any]], list[Any]]
    ) -> Callable[..., Any]:
        """A call bound, its traced leaves handed to ``run`` (with the call
        and the leaves' tree), and the output tree rebuilt around what it
        returns, weakly typed where the trace typed it so."""

        def serve(*args: Any, **kwargs: Any) -> Any:
            import jax

            bound = calls.bind(args, kwargs)
            assert not isinstance(bound, Fallback), bound
            leaves, in_tree = jax.tree_util.tree_flatten(bound.traced)
            out_tree = self.out_tree(in_tree)  # the call's, as route found it
            assert not isinstance(out_tree, Fallback), out_tree
            outputs = run(leaves, (args, kwargs, in_tree))
            for index in self.variant.weak_outputs:  # as the trace typed them
                outputs[index] = _weak(outputs[index])
            return jax.tree_util.tree_unflatten(out_tree, outputs)

        return serve

    def out_tree(self, in_tree: Any) -> Any | Fallback:
        """The output tree for traced inputs of ``in_tree``, or why they do not match."""
        import jax

        try:
            known = self.trees.get(in_tree)
        except TypeError:  # a node's metadata jax cannot hash: not kept, decided each time
            known = None
        if known is not None:
            return known
        try:
            now = structure(in_tree, main=self.module)
        except Unreadable as error:
            return Fallback("tree", f"the inputs' tree cannot be compared: {error}")
        if now != self.variant.in_tree:
            shown = str(in_tree)
            shown = shown if len(shown) <= 160 else f"{shown[:157]}..."
            return Fallback("tree", f"the inputs are {shown}, another tree than the build's")
        try:
            out = rebuild(
                self.variant.out_tree,
                in_tree,
                unflatten=jax.tree_util.tree_unflatten,
                structure_of=jax.tree_util.tree_structure,
                main=self.module,
            )
        except Unrebuildable as error:
            return Fallback("tree", str(error))
        with contextlib.suppress(TypeError):
            self.trees[in_tree] = out
        return out


def _flat(
    calls: Calls, original: Callable[..., Any], call: tuple[Any, Any, Any]
) -> Callable[..., list[Any]]:
    """``original`` as a function of a call's traced leaves to its output
    leaves, the call's static values as they were."""
    import jax

    args, kwargs, in_tree = call

    def again(*at: Any) -> list[Any]:
        traced = jax.tree_util.tree_unflatten(in_tree, at)
        call_args, call_kwargs = calls.with_traced(args, kwargs, traced)
        return jax.tree_util.tree_leaves(original(*call_args, **call_kwargs))

    return again


def _weak(value: Any) -> Any:
    """``value`` weakly typed: within the trace, a change of type and no op."""
    from jax._src.lax.lax import _convert_element_type

    return _convert_element_type(value, weak_type=True)


class StagedFunction:
    """The state behind one bound function: its variants, conditions, executables and stats.

    What is bound in the original's place is ``StagedFunction.callable()``:
    a dispatcher of jax's own (``ppy.kinds.dispatch``), the C++ function a
    jitted call goes through, with ``miss`` as what it calls for any call it
    has not cached. jax keys that cache by each argument's pytree structure,
    type, shape, dtype, weak type, sharding and commitment, by the static
    arguments and by its trace context (the configuration that changes a
    trace), so a call of a signature and a configuration ``miss`` once
    staged costs what a jitted call costs, and anything new comes back to
    ``miss``: a fallback is never cached, and goes to the original every
    time. Calling the instance works too (the Python path, ``slow``); tests
    and tools may use either.
    """

    def __init__(
        self,
        original: Callable[..., Any],
        *,
        calls: Calls,
        variants: dict[Any, tuple[Staged, ...]],
        load: Callable[[Staged], Executables],
        module: str,
        qualname: str,
        conditions: Conditions,
    ) -> None:
        self.original = original
        self.calls = calls
        self.variants = variants
        self._load = load
        self.conditions = conditions
        self.module = module
        self.qualname = qualname
        #: (variant, call structure, leaf signature) -> the executable's call.
        self.executables: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self.seen: set[str] = set()
        self.stats = CallStats()
        #: The function bound in the original's place (``callable``).
        self._dispatcher: Callable[..., Any] | None = None
        #: Under ``-v`` every call's path is logged (``callable``).
        self._logged = False

    def __repr__(self) -> str:
        return f"<staged {self.module}.{self.qualname} of {self.original!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.slow(args, kwargs)

    def callable(self) -> Callable[..., Any]:
        """The function to bind in the original's place."""
        from ppy.kinds.dispatch import dispatcher, dress

        function = python_function(self.original) or self.original
        # Under jax.disable_jit the dispatcher calls ``function``, as jit does.
        bound = dispatcher(
            self.qualname,
            function,
            self.miss,
            self.calls.static_argnums,
            self.calls.static_argnames,
        )
        if bound is None:  # a jax without the dispatcher: the Python path

            def bound(*args: Any, **kwargs: Any) -> Any:
                return self.slow(args, kwargs)

        self._dispatcher = bound

        self._logged = _verbose()
        dress(bound, self.original, function)
        # (mypy does not let attributes be set on a function: the ignores below.)
        if callable(getattr(self.original, "clear_cache", None)):
            bound.clear_cache = self.clear_cache  # type: ignore[attr-defined]
        bound.ppy_stats = self.stats  # type: ignore[attr-defined]
        bound.ppy_staged = self  # type: ignore[attr-defined]
        return bound

    def clear_cache(self) -> None:
        """As jit's: its traces are dropped, so the globals are compared again."""
        self.original.clear_cache()  # type: ignore[attr-defined]  # checked where bound
        clear = getattr(self._dispatcher, "_clear_cache", None)
        if clear is not None:
            clear()
        self.conditions.traces.cache_clear()

    def route(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Route | Fallback:
        """What serves this call: a staged executable, or why the original does."""
        import jax

        configured = self.conditions.configuration()
        if configured is not None:
            return configured
        bound = self.calls.bind(args, kwargs)
        if isinstance(bound, Fallback):
            return bound
        try:
            choices = self.variants.get(bound.static)
        except TypeError:  # an unhashable static value: jit refuses it too
            choices = None
        if choices is None:
            pairs = zip(self.calls.static, bound.values, strict=True)
            shown = ", ".join(f"{name}={_shown(value)}" for name, value in pairs)
            return Fallback("static", f"{shown} is not among the values staged")
        leaves, in_tree = jax.tree_util.tree_flatten(bound.traced)
        # Under jax.grad the leaves are tracers at concrete points: those are checked.
        at = primals(leaves, jax.core.Tracer)
        traced_leaves = leaves
        if at is not None:
            leaves = at
        staged = _sized(_weakly(choices, leaves), leaves)
        if isinstance(staged, Fallback):
            return staged
        if staged.platform is not None:
            (staged.unrunnable, staged.uncompared), staged.platform = staged.platform(), None
        if staged.unrunnable is not None:
            return Fallback("platform", staged.unrunnable)
        if staged.differs is not None:
            return Fallback("refinement", staged.differs)
        out_tree = staged.out_tree(in_tree)
        if isinstance(out_tree, Fallback):
            return out_tree
        checked = staged.guard.check(leaves)
        if isinstance(checked, Fallback):
            return checked
        checked_placement = (
            staged.placement.check(leaves)
            if staged.placement is not None
            else committed(leaves, staged.variant.inputs)
        )
        if isinstance(checked_placement, Fallback):
            return checked_placement
        placed: Placed | None = checked_placement
        # Where jit would trace (a new abstract signature or configuration),
        # and read the globals again: a key as fine as jit's trace cache's,
        # which keeps keyword names in the order given.
        traced = (
            bound.static,
            bound.values,
            jax.tree_util.tree_structure((args, kwargs)),
            tuple(kwargs),
        )
        captured = self.conditions.captured((traced, checked), staged.reads(bound.values))
        if captured is not None:
            return captured
        if at is not None:
            return self._differentiated(staged, traced_leaves, at, args, kwargs)
        call = self._executable(staged, bound, out_tree, checked, placed, (args, kwargs))
        if isinstance(call, Fallback):
            return call
        return Route(call, bound.args, bound.kwargs)

    def _differentiated(
        self,
        staged: Staged,
        leaves: list[Any],
        at: list[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Route | Fallback:
        """A call under reverse-mode differentiation: served by jit's own
        programs where the build exported them for these inputs
        (``ppy_runtime_pjrt.linearized``), else by ``Exported.call``, whose
        VJP is the export's own, where the build exported one."""
        programs = staged.linearization(leaves, at)
        if programs is not None:
            misfit = programs.misfit()
            if misfit is not None:
                return Fallback(
                    "tracer",
                    f"differentiated, and jit's programs in the artifact do not fit: {misfit}",
                )
            call = staged.linearizing(self.calls, programs, self.original, self._traced)
            return Route(call, args, kwargs)
        if self.calls.donated:
            return Fallback(
                "tracer", "differentiated, and it donates arguments: jit's own path donates them"
            )
        if not staged.exported.has_vjp():
            return Fallback(
                "tracer",
                "differentiated, and its export carries no VJP: jit's gradient is python's "
                "to the bit (a VJP is exported with [tool.ppy.plugins.jax] staged-vjp = true)",
            )
        return Route(staged.reversing(self.calls, self.original), args, kwargs)

    def slow(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call through Python: routed, then served."""
        return self._serve(self.route(args, kwargs), args, kwargs)

    def miss(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, bool]:
        """A call jax's dispatcher had not cached: (outputs, what to cache
        for its signature or None, False), as jax's own misses answer.

        A call that falls back is decided once per signature, as jit decides
        its own: the original's miss answers it, and what it answers to cache
        is the original's executable, which the dispatcher then serves for
        every call of that signature at jit's own cost. Under ``-v`` nothing
        is cached, so every call comes here and is logged with its path.

        What the call raises reaches the program without this runtime's
        frames (``ppy.kinds.dispatch.hide_own_frames``), as a jitted call's
        error reaches it without jax's.
        """
        route = self.route(args, kwargs)
        try:
            if self._logged:
                return self._serve(route, args, kwargs), None, False
            if isinstance(route, Fallback):
                original_miss = getattr(self.original, "_cache_miss", None)
                if original_miss is None:
                    return self._fall_back(route, args, kwargs), None, False
                self._count(route)
                return original_miss(*args, **kwargs)  # type: ignore[no-any-return]  # jax's own
            jax_miss = getattr(route.call, "_cache_miss", None)
            if jax_miss is None:  # a Compiled with no C++ call of its own
                return route.call(*route.args, **route.kwargs), None, False
            return jax_miss(*route.args, **route.kwargs)  # type: ignore[no-any-return]  # jax's own
        except BaseException as error:
            from ppy.kinds.dispatch import hide_own_frames

            hide_own_frames(error)
            raise

    def _serve(self, route: Route | Fallback, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call what ``route`` chose; under ``-v``, log the call's path (``run.call``)."""
        if isinstance(route, Fallback):
            result, path = self._fall_back(route, args, kwargs), "original"
        else:
            result, path = route.call(*route.args, **route.kwargs), "staged"
        if self._logged:
            _log().info("run.call", module=self.module, function=self.qualname, path=path)
        return result

    def _executable(
        self,
        staged: Staged,
        bound: Bound,
        out_tree: Any,
        signature: Signature,
        placed: Placed | None,
        given: tuple[tuple[Any, ...], dict[str, Any]],
    ) -> Callable[..., Any] | Fallback:
        """The executable for this call: ``bound`` less its statics is what it
        takes; ``given``, the call as made, is what jit lowers; ``placed``,
        for a sharded export, the devices it runs on."""
        import jax

        from ppy_runtime_pjrt.compile import CompileRefused, Shaped

        call_tree = jax.tree_util.tree_structure((bound.args, bound.kwargs))
        devices = placed.devices if placed is not None else None
        shape_of = functools.partial(_shape_of, mesh=placed.mesh if placed is not None else None)
        key = (bound.static, call_tree, signature, devices)
        call = self.executables.get(key)
        if call is not None:
            return call
        if staged.executables is None:
            staged.executables = self._load(staged)
        shaped = Shaped(
            structure=structure(call_tree, main=self.module),
            in_tree=call_tree,
            out_tree=out_tree,
            signature=signature,
            args=jax.tree_util.tree_map(shape_of, given[0]),
            kwargs=jax.tree_util.tree_map(shape_of, given[1]),
            placed=placed,
        )
        try:
            compiled = self._compared(staged, shaped, given) if staged.uncompared else None
            if staged.differs is not None:
                return Fallback("refinement", staged.differs)
            call, source = staged.executables.load(shaped, compiled)
        except CompileRefused as error:
            return Fallback("compile", f"the export does not compile for these shapes: {error}")
        self.executables[key] = call
        self.stats.executables[signature] = source
        return call

    def _compared(
        self, staged: Staged, shaped: Shaped, given: tuple[tuple[Any, ...], dict[str, Any]]
    ) -> Any:
        """Compare a variant the build could not compare with jit on this
        platform (``ontarget``), once: the verdict kept in the executable
        cache, or the export compiled for this call beside the jitted
        function. Sets ``staged.differs`` where they differ; returns the
        export's executable where it compiled one, for ``load`` to use."""
        from ppy_runtime_pjrt.ontarget import Verdicts, compare

        assert staged.executables is not None
        verdicts = Verdicts(staged.executables, staged.executables.cache)
        kept, differs = verdicts.get()
        compiled = None
        if not kept:
            compiled = staged.executables.compile(shaped)
            differs = compare(self.original, compiled, given)
            verdicts.put(differs)
        staged.uncompared, staged.differs = False, differs
        _log().info(
            "run.compared",
            module=self.module,
            function=self.qualname,
            platform=staged.executables.platform,
            same=differs is None,
            source="cache" if kept else "compiled",
        )
        return compiled if differs is None else None

    def _traced(self, why: str) -> None:
        """A backward pass of a staged call that jax's own trace serves."""
        self._count(Fallback("tracer", why))

    def _fall_back(self, verdict: Fallback, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._count(verdict)
        return self.original(*args, **kwargs)

    def _count(self, verdict: Fallback) -> None:
        """Count a fallback, and log its reason the first time it is given."""
        counts = self.stats.fallbacks
        counts[verdict.category] = counts.get(verdict.category, 0) + 1
        if verdict.detail not in self.seen:
            self.seen.add(verdict.detail)
            _log().info(
                "run.fallback",
                module=self.module,
                function=self.qualname,
                category=verdict.category,
                reason=verdict.detail,
            )


def _weakly(choices: tuple[Staged, ...], leaves: list[Any]) -> tuple[Staged, ...]:
    """The variants traced for the leaves' weak types, as jit traces a weakly
    typed leaf apart (``jnp.full(s, 0.1)`` in a first call, the strong
    result of the step after), 0-d or not, one per kind of weak types the
    recording saw: the first where none was exported for them, and its guard
    says why. A variant's outputs are weakly typed as its trace typed them
    (``Staged.serving``), and the guard keys each kind's executable apart."""
    if len(choices) == 1:
        return choices
    weak = tuple(
        type(leaf) in (int, float) or bool(getattr(leaf, "weak_type", False)) for leaf in leaves
    )
    typed = tuple(s for s in choices if tuple(spec.weak for spec in s.variant.inputs) == weak)
    return typed or choices[:1]


def _sized(choices: tuple[Staged, ...], leaves: list[Any]) -> Staged | Fallback:
    """The variant exported at the leaves' sizes, where an entry holds one per
    size a recording saw (a symbol would not have been faithful): the one
    whose guard takes them; else why none does, naming the sizes there are."""
    if len(choices) == 1:
        return choices[0]
    refused = []
    for staged in choices:
        checked = staged.guard.check(leaves)
        if not isinstance(checked, Fallback):
            return staged
        refused.append(checked)
    if any(fallback.category != "dim" for fallback in refused):
        return refused[0]
    return _unrecorded(choices, leaves)


def _unrecorded(choices: tuple[Staged, ...], leaves: list[Any]) -> Fallback:
    """Why leaves of the right ranks and dtypes fit no variant: the inputs whose
    dims differ between the variants, as called and as each variant has them."""
    specs = [staged.variant.inputs for staged in choices]
    moving = [i for i in range(len(specs[0])) if len({s[i].dims for s in specs}) > 1]

    def name(index: int) -> str:
        return specs[0][index].name or f"argument {index}"

    called = ", ".join(f"{name(i)} {list(getattr(leaves[i], 'shape', ()))}" for i in moving)
    staged = " or ".join(", ".join(f"{name(i)}: {s[i]}" for i in moving) for s in specs)
    return Fallback(
        "dim", f"called with {called}, a size the recording did not see: staged for {staged}"
    )


@dataclass(frozen=True)
class Route:
    """A staged call: the executable and what it is given (the call less its statics)."""

    call: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def _shown(value: Any) -> str:
    """A static value as the variants tell it apart: by its exact type too, so a
    ``str`` subclass equal to a staged ``"a"`` is named as what it is; a
    function by its name (they are told apart by code, closure and defaults)."""
    if type(value) in (bool, int, str, type(None)):
        return repr(value)
    if statics.callable_static(value):
        return f"the function {getattr(value, '__qualname__', type_name(type(value)))}"
    return f"{value!r} (a {type_name(type(value))})"


def _shape_of(leaf: Any, *, mesh: Any = None) -> Any:
    """An array leaf as jit lowers it: its shape and dtype, and its sharding
    where it is laid out over a mesh or committed to a device; anything else
    as it is. On a ``mesh``,
    an array that is not laid out over it is replicated over it, as jit
    lays out an uncommitted input (``Placement.check`` lets no other through)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        sharding = getattr(leaf, "sharding", None)
        # jax leaves the constructors of PartitionSpec and ShapeDtypeStruct unannotated.
        if not isinstance(sharding, NamedSharding) and mesh is not None:
            sharding = NamedSharding(mesh, PartitionSpec())  # type: ignore[no-untyped-call]
        elif getattr(leaf, "_committed", False):
            # Committed to one device (``placement.committed``): jit lowers for
            # that device, and places the uncommitted inputs there too.
            return jax.ShapeDtypeStruct(  # type: ignore[no-untyped-call]
                leaf.shape,
                leaf.dtype,
                sharding=sharding,
                weak_type=bool(getattr(leaf, "weak_type", False)),
            )
        weak = bool(getattr(leaf, "weak_type", False))  # as jit types it
        # Host data as jit converts it: float64 is float32 where x64 is off
        # (a key array's dtype is jax's own, as it is).
        dtype = leaf.dtype if is_key(leaf.dtype) else jax.dtypes.canonicalize_dtype(leaf.dtype)
        if isinstance(sharding, NamedSharding):
            return jax.ShapeDtypeStruct(leaf.shape, dtype, sharding=sharding, weak_type=weak)  # type: ignore[no-untyped-call]
        return jax.ShapeDtypeStruct(leaf.shape, dtype, weak_type=weak)  # type: ignore[no-untyped-call]
    return leaf


@functools.cache
def _numpy_scalars() -> tuple[type, ...]:
    """NumPy's scalar types of numbers and bools (``numpy.float64(1.0)``),
    which jit takes as strongly typed arrays of shape ()."""
    import numpy

    kinds = {t for t in numpy.sctypeDict.values() if issubclass(t, numpy.number | numpy.bool_)}
    return tuple(sorted(kinds, key=lambda t: t.__name__))


def _jaxlib_version() -> str:
    from jaxlib import version

    return str(version.__version__)


def _backends_started() -> bool:
    from jax._src import xla_bridge

    started = getattr(xla_bridge, "backends_are_initialized", None)
    return True if started is None else bool(started())


def _platform(
    entry: Entry, contract: JaxExport, variant: Variant, exported: Any
) -> tuple[str | None, bool]:
    """(why this process's platform cannot run ``variant`` or None, whether
    it must be compared with jit here first).

    A variant with symbolic dims on a platform the build did not compile it
    for (``compared_on``) would be compiled unchecked against jit, which
    may inline what jit keeps apart and round otherwise: it is compared at
    its first call (``ppy_runtime_pjrt.ontarget``).
    """
    here = export_platform()
    platforms = tuple(exported.platforms) or tuple(entry.platforms)
    if here not in platforms:
        return (
            f"exported for {', '.join(platforms)}, but this process runs on {here}; "
            f'build on a {here} machine, or add "{here}" to '
            "[tool.ppy.plugins.jax] platforms"
        ), False
    return None, variant.uses_shape_polymorphism and here not in contract.compared_on


def _check_description(variant: Variant, exported: Any) -> None:
    """The variant's inputs must be the export's, or the guard would lie."""
    import jax

    arity = len(variant.inputs)
    if exported.in_tree != jax.tree_util.tree_structure((tuple(range(arity)), {})):
        raise NotBound(f"the export takes {exported.in_tree}, not {arity} positional arrays")
    for index, (spec, aval) in enumerate(zip(variant.inputs, exported.in_avals, strict=True)):
        dims = tuple(aval.shape)
        dtype = str(aval.dtype)
        fixed_agree = all(
            not isinstance(d, int) or (isinstance(a, int) and a == d)
            for d, a in zip(spec.dims, dims, strict=False)
        )
        if len(dims) != len(spec.dims) or dtype != spec.dtype or not fixed_agree:
            raise NotBound(
                f"input {index} is described as {spec} but the export takes "
                f"{dtype}[{','.join(str(d) for d in dims)}]; rebuild the artifact"
            )


class ExportRuntime:
    """Loads ``jax.export`` entries (registered under ``ppy.runtimes``)."""

    #: The ``ppy.runtime.CONTRACT`` it was written for.
    contract = (1, 0)

    def __init__(self, cache: Any = None) -> None:
        # None: the per-user cache, created on first use; False: no disk cache.
        self._cache = cache
        #: Each entry's contract and variants, read once: a jit the program
        #: makes inside a function is bound each time it is made, and its
        #: variants (their exports and executables) serve every one of them.
        self._read: dict[tuple[str, str], tuple[JaxExport, dict[Any, tuple[Staged, ...]]]] = {}
        #: Whether a bind has put the unstaged cache in place.
        self._installed = False

    def close(self) -> None:
        """The program has ended: jax's compile step is its own again."""
        unstaged.uninstall()

    def start(self, run: RunContext) -> None:
        """The program is about to run: once it imports jax, its compiles go
        through ppy's cache, whether or not anything is bound (a program with
        nothing staged is never slower than python)."""
        run.after_import("jax", self._cache_compiles)

    def _cache_compiles(self) -> None:
        cache = self._executable_cache()
        if cache is not None:
            unstaged.install(cache.unstaged())

    def _executable_cache(self) -> Any:
        from ppy.runtime import ExecutableCache

        if self._cache is None:
            self._cache = ExecutableCache()
        return self._cache or None

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        from ppy.runtime import ExecutableCache

        from ppy_runtime_pjrt.compile import Executables

        contract, variants = self._contract(entry)
        function = python_function(original) or original
        try:
            calls = Calls(
                function, contract.traced, contract.static, entry.module, contract.donated
            )
        except (TypeError, ValueError) as error:
            raise NotBound(f"the function's signature is not the build's: {error}") from error
        cache: ExecutableCache | None = self._executable_cache()
        if cache is not None and not self._installed:  # a jit made in a loop binds each time
            self._installed = unstaged.install(cache.unstaged())

        def load(staged: Staged) -> Executables:
            return Executables(
                staged.exported,
                payload=staged.variant.export,
                cache=cache,
                module=entry.module,
                qualname=entry.qualname,
                serve=functools.wraps(function)(staged.serving(calls)),
                static_argnums=calls.static_argnums,
                static_argnames=calls.static_argnames,
                donate_argnums=calls.donate_argnums,
                donate_argnames=calls.donate_argnames,
            )

        staged = StagedFunction(
            original,
            calls=calls,
            variants=variants,
            load=load,
            module=entry.module,
            qualname=entry.qualname,
            conditions=Conditions(
                original, contract.captures, dict(contract.trace_config), entry.module
            ),
        )
        return staged.callable()

    def _contract(self, entry: Entry) -> tuple[JaxExport, dict[Any, tuple[Staged, ...]]]:
        """The entry's contract and its variants by static values, each value's
        in the order exported (one per weak typing of the leaves), or
        ``NotBound``: why this process cannot run them."""
        read = self._read.get(entry.key)
        if read is not None:
            return read
        try:
            contract = JaxExport.read(entry)
        except KindError as error:
            raise NotBound(str(error)) from error
        outside = outside_window(contract.jaxlib_version, _jaxlib_version())
        if outside is not None:
            raise NotBound(f"{outside}; rebuild the artifact with this jax (`ppy build`)")
        variants: dict[Any, tuple[Staged, ...]] = {}
        for v in contract.variants:
            key = tuple(statics.key_of_json(v.static[name]) for name in contract.static)
            staged = self._variant(entry, contract, v)
            if contract.linearized:  # imported only where a recording saw jax.grad
                from ppy_runtime_pjrt.linearized import Programs

                staged.linearized = tuple(
                    Programs(g)
                    for g in contract.linearized
                    if contract.variants[g.variant].static == v.static
                )
            variants[key] = (*variants.get(key, ()), staged)
        self._read[entry.key] = contract, variants
        return contract, variants

    def _variant(self, entry: Entry, contract: JaxExport, variant: Variant) -> Staged:
        import jax
        import numpy
        from jax._src.array import ArrayImpl

        try:
            exported = jax.export.deserialize(bytearray(variant.export))
        except Exception as error:
            raise NotBound(
                f"jax {jax.__version__} cannot read this export (written by jax "
                f"{contract.jax_version}): {type(error).__name__}: {error}"
            ) from error
        low = jax.export.minimum_supported_calling_convention_version
        high = jax.export.maximum_supported_calling_convention_version
        version = exported.calling_convention_version
        if not low <= version <= high:
            raise NotBound(
                f"the export uses calling convention version {version}; jax {jax.__version__} "
                f"supports {low}..{high}; rebuild the artifact with this jax"
            )
        # Asking for the platform starts jax's backend, which a program that
        # calls jax.distributed.initialize has not done yet at import: then
        # the first call asks instead.
        deferred = not _backends_started()
        uncompared = False
        if not deferred:
            reason, uncompared = _platform(entry, contract, variant, exported)
            if reason is not None:
                raise NotBound(reason)
        _check_description(variant, exported)
        mesh = contract.mesh
        host = (numpy.ndarray, *_numpy_scalars())
        keys = key_array_type()
        try:
            guard = Guard(
                variant.inputs,
                [jax_dtype(spec.dtype) for spec in variant.inputs],
                array_types=(ArrayImpl, *host, *((keys,) if keys is not None else ())),
                tracer_type=jax.core.Tracer,
                sharded=mesh is not None,
                constraints=contract.constraints,
                host_types=host,
                canonical=jax.dtypes.canonicalize_dtype,
            )
        except (TypeError, ValueError) as error:
            raise NotBound(f"the input description does not read: {error}; rebuild") from error
        if mesh is not None and exported.nr_devices != mesh.devices:
            raise NotBound(
                f"the export is for {exported.nr_devices} devices, its mesh ({mesh}) has "
                f"{mesh.devices}; rebuild the artifact"
            )
        placement = Placement(mesh, variant.inputs) if mesh is not None else None
        staged = Staged(variant, exported, guard, entry.module, placement, contract.static)
        staged.uncompared = uncompared
        if deferred:
            staged.platform = functools.partial(_platform, entry, contract, variant, exported)
        return staged


#: It satisfies core's contract; mypy checks this line.
_: type[ManagedRuntime] = ExportRuntime
