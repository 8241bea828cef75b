"""Executables for one export, one per concrete input signature.

An export with a symbolic dim ("B") is a single program for every B, but XLA
compiles for concrete shapes, so each new signature needs an executable.
Where one comes from, cheapest first:

1. this process (``StagedFunction`` keeps the ones it has in a dict);
2. the per-user ``ppy.cache.ExecutableCache``, loaded as
   ``jax.experimental.serialize_executable.deserialize_and_load`` would
   (``pickled.load_compiled``);
3. a compile: ``jax.jit(exported.call).lower(*shapes).compile()``, which
   refines the symbolic shapes and compiles, then is serialized into the cache
   on the writer thread (``behind``).

What is handed back for calls is the ``jax.stages.Compiled``'s C++ dispatch
function (``fast_call``): a ``Compiled`` called through its Python
``__call__`` pays for one more Python frame with ``*args, **kwargs`` on every
call, which on a small function is most of the difference between a loaded
executable and a plain jitted call. A loaded executable gets the same C++
fast path as a freshly compiled one; only that wrapper differs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jax
from jax.experimental import serialize_executable
from ppy.runtime import ExecutableCache, executable_key

from ppy_runtime_pjrt import behind, pickled, unstaged
from ppy_runtime_pjrt.guard import Signature
from ppy_runtime_pjrt.placement import Placed

__all__ = ["CompileRefused", "Executables", "Shaped", "fast_call"]


class CompileRefused(Exception):
    """The export could not be compiled for this signature.

    Mostly a constraint on its symbolic dims that these sizes break
    (``B >= 3``, ``B % 2 == 0``): a fresh export checks them while lowering,
    one read back from bytes only when shape refinement runs in ``compile``.
    Either way the call goes to the original, which says what it says.
    """


def fast_call(compiled: Any) -> Callable[..., Any]:
    """The C++ dispatch function behind ``compiled``, or ``compiled`` itself.

    ``Compiled.__call__`` builds this function lazily (``create_cpp_call``)
    and then forwards every call to it from Python; building it here lets the
    caller skip that forwarding frame. Where this jax has no such function the
    ``Compiled`` is returned and works, a little slower.
    """
    executable = getattr(compiled, "_executable", None)
    params = getattr(compiled, "_params", None)
    make = getattr(executable, "create_cpp_call", None)
    # ``compiled`` is a jax Compiled, callable; ``call`` is jaxlib's.
    if make is None or params is None:
        return compiled  # type: ignore[no-any-return]
    call = make(params)
    return compiled if call is None else call  # type: ignore[no-any-return]


def _versions() -> tuple[tuple[str, str], ...]:
    from jaxlib import version

    return (("jax", jax.__version__), ("jaxlib", str(version.__version__)))


@dataclass(frozen=True)
class Shaped:
    """What one executable is for: a call's structure and its leaves' shapes."""

    #: ``ppy.kinds.pytrees.structure`` of the call's non-static (args, kwargs).
    structure: str
    #: The tree of the non-static (args, kwargs): what the executable takes.
    in_tree: Any
    #: The tree of the output.
    out_tree: Any
    signature: Signature
    #: The call's arguments as it was made (static ones too), each array
    #: leaf as its ``ShapeDtypeStruct``: what jit lowers.
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    #: For a sharded export, the mesh the inputs are laid out over; None
    #: for one device.
    placed: Placed | None = None


class Executables:
    """Loads or compiles the executables of one export, one per ``Shaped`` call.

    ``serve`` is the function jit compiles for a call: it binds the call
    and runs the export on its leaves (``StagedFunction.serve``);
    ``static_argnums`` and ``static_argnames`` are the function's, as jit
    resolves them, and so are ``donate_argnums`` and ``donate_argnames``: the
    executable gives the same donated buffers to its outputs as jit's, and a
    call deletes the same arrays.
    """

    def __init__(
        self,
        exported: Any,
        *,
        payload: bytes,
        cache: ExecutableCache | None,
        module: str,
        qualname: str,
        serve: Callable[..., Any],
        static_argnums: Sequence[int] = (),
        static_argnames: Sequence[str] = (),
        donate_argnums: Sequence[int] = (),
        donate_argnames: Sequence[str] = (),
    ) -> None:
        self.exported = exported
        self.cache = cache
        self.module = module
        self.qualname = qualname
        self.serve = serve
        self.static_argnums = tuple(static_argnums)
        self.static_argnames = tuple(static_argnames)
        self.donate_argnums = tuple(donate_argnums)
        self.donate_argnames = tuple(donate_argnames)
        # An executable that donates is another program (its inputs alias outputs).
        donates = self.donate_argnums or self.donate_argnames
        donation = f"|donate={self.donate_argnums}{self.donate_argnames}" if donates else ""
        self.digest = hashlib.sha256(payload).hexdigest() + donation
        self.device = jax.devices()[0]
        self.platform = self.device.platform
        self.device_kind = f"{self.device.device_kind} ({self.device.client.platform_version})"
        self.versions = _versions()

    def key(self, shaped: Shaped) -> str:
        return executable_key(
            hashlib.sha256(f"{self.digest}|{shaped.structure}".encode()).hexdigest(),
            [(shape, str(dtype)) for shape, dtype in shaped.signature],
            platform=self.platform,
            device_kind=self.device_kind,
            versions=self.versions,
            placement=shaped.placed.key if shaped.placed is not None else "",
        )

    def load(self, shaped: Shaped, compiled: Any = None) -> tuple[Callable[..., Any], str]:
        """(the call, where it came from: "cache" or "compiled"); ``compiled``,
        where given, is ``compile(shaped)`` made already.

        On the default device its outputs are left uncommitted: compiled
        from ``exported.call``, whose shardings are explicit, it would commit
        them to the device, where jit commits an output only when an input
        was. Where an input is committed to a device (``placed`` of one
        device), or laid out over a mesh, the outputs are committed, as
        jit's are.
        """
        key = self.key(shaped)
        if self.cache is not None and compiled is None:
            data = self.cache.get(key)
            if data is not None:
                _lapack_ready(self.exported)
                compiled = self._deserialize(key, data, shaped)
                if compiled is not None:
                    return fast_call(compiled), "cache"
        if compiled is None:
            compiled = self.compile(shaped)
        fresh = compiled if shaped.placed is not None else _uncommitted(compiled)
        if fresh is None:  # this jax's Compiled is not built as known: read its bytes back
            data = self._serialize(compiled)
            if data is not None and self.cache is not None:
                self.cache.keep(key, data)
            fresh = (self._deserialize(key, data, shaped) if data is not None else None) or compiled
        elif self.cache is not None:
            behind.later(functools.partial(self._keep, key, compiled))
        return fast_call(fresh), "compiled"

    def _keep(self, key: str, compiled: Any) -> None:
        """Write ``compiled`` to the cache (on the writer thread, ``behind``)."""
        data = self._serialize(compiled)
        if data is not None and self.cache is not None:
            self.cache.keep(key, data)

    def _deserialize(self, key: str, data: bytes, shaped: Shaped) -> Any:
        placed = shaped.placed
        try:
            return pickled.load_compiled(
                data,
                shaped.in_tree,
                shaped.out_tree,
                self.device.client,
                list(placed.devices) if placed is not None else [self.device],
                committed=placed is not None,
            )
        except Exception as error:
            if self.cache is not None:
                self.cache.discard(key, error, module=self.module, function=self.qualname)
            return None

    def compile(self, shaped: Shaped) -> Any:
        """The export compiled for ``shaped``, as jit compiles the function that serves it."""
        function = jax.jit(
            self.serve,
            static_argnums=self.static_argnums,
            static_argnames=self.static_argnames,
            donate_argnums=self.donate_argnums,
            donate_argnames=self.donate_argnames,
        )
        try:
            with unstaged.staging(), _lapack_if_called(self.exported):
                return function.lower(*shaped.args, **shaped.kwargs).compile()
        except Exception as error:
            lines = str(error).splitlines() or [""]
            raise CompileRefused(f"{type(error).__name__}: {lines[0]}") from error

    def _serialize(self, compiled: Any) -> bytes | None:
        try:
            data, _, _ = serialize_executable.serialize(compiled)
        except (ValueError, NotImplementedError) as error:
            from ppy.runtime import get_logger

            get_logger().info(
                "cache.skip",
                module=self.module,
                function=self.qualname,
                reason=f"this executable cannot be serialized: {error}",
            )
            return None
        return bytes(data)


def _uncommitted(compiled: Any) -> Any:
    """``compiled`` with its outputs left uncommitted, as an executable read
    back from the cache has them (``pickled.load_compiled``), without the
    round trip through its bytes; where this jax's ``Compiled`` is not built
    as known, its bytes are read back as before."""
    import dataclasses

    try:
        unloaded = compiled._executable._unloaded_executable
        params = compiled._params
        return jax.stages.Compiled(
            dataclasses.replace(unloaded, committed=False).load(),
            params.const_args,
            compiled.args_info,
            compiled.out_tree,
            no_kwargs=params.no_kwargs,
            in_types=params.in_types,
            out_types=params.out_types,
        )
    except (AttributeError, TypeError):
        return None


def _calls_lapack(exported: Any) -> bool:
    """Whether the export's module calls a LAPACK routine: a custom call
    named ``lapack_...`` (``jnp.linalg.inv``, ``eigh``, ...)."""
    return b"lapack" in bytes(getattr(exported, "mlir_module_serialized", b"lapack"))


def _lapack_ready(exported: Any) -> None:
    """Fill in LAPACK's function pointers for an executable that calls them.

    jax does it while it lowers such a module; an executable read back from
    the cache is not lowered, and would call through null pointers.
    """
    if _calls_lapack(exported):
        from jax._src.lax import linalg

        linalg.initialize_lapack()  # type: ignore[no-untyped-call]  # jax leaves it unannotated


#: Set, in the thread lowering an export, while that export calls no LAPACK routine.
_no_lapack = threading.local()


@contextlib.contextmanager
def _lapack_if_called(exported: Any) -> Iterator[None]:
    """Lower ``exported`` without loading LAPACK where it calls none of it.

    jax's lowering of any export for the CPU first fills in LAPACK's
    function pointers, from ``scipy.linalg``, whose import is about a fifth
    of a second: a cost the jitted function never pays unless it calls a
    LAPACK routine (``jnp.linalg.inv``, ``eigh``, ...). Such a routine is a
    custom call named ``lapack_...`` in the module: where the module names
    none, the step is skipped for this thread's lowering.
    """
    if _calls_lapack(exported):
        yield
        return
    _no_lapack.active = True
    try:
        yield
    finally:
        _no_lapack.active = False


def _skip_lapack_where_unused() -> None:
    """Wrap jax's step once, so that ``_lapack_if_called`` can step it aside."""
    try:
        from jax._src.export import _export
    except ImportError:
        return
    step = getattr(_export, "_ensure_backends_initialized", None)
    if step is None or getattr(step, "__ppy__", False):
        return

    def ensure_backends_initialized(platforms: tuple[str, ...]) -> None:
        if not getattr(_no_lapack, "active", False):
            step(platforms)

    ensure_backends_initialized.__ppy__ = True  # type: ignore[attr-defined]
    _export._ensure_backends_initialized = ensure_backends_initialized


_skip_lapack_where_unused()
