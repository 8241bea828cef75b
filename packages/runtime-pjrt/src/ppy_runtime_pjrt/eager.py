"""Eager ops loaded from the cache before they are lowered: the front layer of ``unstaged``.

A hit under jax's own cache key (``unstaged``) still pays for lowering to
MLIR, and for a small program that is most of what it spends after ``import
jax``. So jax's call of a jaxpr (``jax._src.pjit._pjit_call_impl_python``) is
wrapped, and a jaxpr made only of plain lax primitives is looked up under a
key of everything its executable depends on before anything is lowered.

docs/runtime.md ("The unstaged compile cache") says what the key holds,
which jaxprs qualify, and when this layer steps aside; ``_key`` and
``_jaxpr_text`` below are those lists in code, and change with the page.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import inspect
import io
import os
import threading
from collections.abc import Callable
from typing import Any

from ppy.kinds.jax_programs import export_platform
from ppy.runtime import ExecutableCache

from ppy_runtime_pjrt import behind

__all__ = ["install", "produced", "skip", "uninstall", "waiting"]

#: The parameters of the call this module wraps, in order.
_PARAMETERS = (
    "args",
    "jaxpr",
    "in_shardings",
    "out_shardings",
    "in_layouts",
    "out_layouts",
    "donated_invars",
    "ctx_mesh",
    "name",
    "keep_unused",
    "inline",
    "compiler_options_kvs",
)
_MARK = "__ppy_eager__"
#: Bumped whenever what a key covers changes.
_FORMAT = "ppy-eager 3"
_cache: ExecutableCache | None = None
_state = threading.local()
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


class _Refused(Exception):
    """This computation is not one the cache can key; jax handles it."""


def install(cache: ExecutableCache, steps_aside: Callable[[], bool]) -> str | None:
    """Wrap jax's call of a jaxpr, keeping executables in ``cache``; why not,
    or None when wrapped. ``steps_aside()`` says, per call, that jax's own
    handling applies (its persistent cache is on, a staged entry compiles)."""
    global _cache
    from jax._src import pjit

    original = pjit._pjit_call_impl_python
    if not getattr(original, _MARK, False):
        try:
            names = tuple(inspect.signature(original).parameters)
        except (TypeError, ValueError):
            names = ()
        if names != _PARAMETERS:
            return f"this jax's jaxpr call takes ({', '.join(names)}), not the one ppy knows"
        pjit._pjit_call_impl_python = _wrapped(original, steps_aside)
    _cache = cache
    return None


def uninstall() -> None:
    """Give jax its own call back."""
    global _cache
    _cache = None
    import sys

    pjit = sys.modules.get("jax._src.pjit")
    call = getattr(pjit, "_pjit_call_impl_python", None)
    if call is not None and getattr(call, _MARK, False):
        pjit._pjit_call_impl_python = call.__wrapped__  # type: ignore[union-attr]  # call implies pjit


def waiting() -> bool:
    """Whether a miss of this layer is compiling in this thread: what the
    compile step makes is then kept here, under this layer's key."""
    return bool(getattr(_state, "waiting", False))


def produced(executable: Any) -> None:
    """The compile step compiled ``executable`` for the miss this thread waits on."""
    if waiting():
        _state.produced = executable


def _wrapped(original: Callable[..., Any], steps_aside: Callable[[], bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _pjit_call_impl_python(*args: Any, **params: Any) -> Any:
        cache = _cache
        if cache is None or steps_aside():
            return original(*args, **params)
        name = f"jit_{params['name']}"
        try:
            key, device = _key(args, **params)
        except _Refused:
            return original(*args, **params)
        except Exception as error:  # a jax object this module does not know: jax's path
            skip(name, error)
            return original(*args, **params)
        executable = _load(cache, key, device, params["jaxpr"])
        if executable is not None:
            _log().debug("cache.unstaged", computation=name, source="cache", lowered=False)
            return executable.unsafe_call(*args), executable, None, []
        _state.waiting, _state.produced = True, None
        try:
            result = original(*args, **params)
        finally:
            made = _state.produced
            _state.waiting, _state.produced = False, None
        behind.later(functools.partial(_store, cache, key, name, result, made))
        return result

    setattr(_pjit_call_impl_python, _MARK, True)
    return _pjit_call_impl_python


def _log() -> Any:
    from ppy.runtime import get_logger

    return get_logger()


def skip(name: str, error: Exception) -> None:
    """The debug event of either unstaged layer for a computation it leaves to jax."""
    _log().debug("cache.unstaged_skip", computation=name, reason=f"{type(error).__name__}: {error}")


# --- the key ---------------------------------------------------------------


def _key(
    args: tuple[Any, ...],
    *,
    jaxpr: Any,
    in_shardings: Any,
    out_shardings: Any,
    in_layouts: Any,
    out_layouts: Any,
    donated_invars: Any,
    ctx_mesh: Any,
    name: str,
    keep_unused: bool,
    inline: bool,
    compiler_options_kvs: Any,
) -> tuple[str, Any]:
    """(the cache key, the device it runs on); ``_Refused`` when it has none."""
    import jax
    from jax._src import config
    from jax._src.interpreters import pxla
    from jax._src.lib import version_str
    from jax._src.named_sharding import UnspecifiedValue

    if (
        jaxpr.consts
        or jaxpr.effects
        or any(not isinstance(s, UnspecifiedValue) for s in (*in_shardings, *out_shardings))
        or any(layout is not None for layout in (*in_layouts, *out_layouts))
        or any(donated_invars)
        or not ctx_mesh.empty
        or compiler_options_kvs
        or config.enable_pgle.value
        or len(args) != len(jaxpr.in_avals)
    ):
        raise _Refused
    device = pxla.get_default_device()
    # What refuses most often is looked at first. Lowering rules are kept
    # under jax.export's platform names: a CUDA device says "gpu", its rules
    # are under "cuda".
    body = _jaxpr_text(jaxpr.jaxpr, export_platform(device))
    placement = " ".join(_placement(arg, device) for arg in args)
    parts = [
        _FORMAT,
        f"jax={jax.__version__} jaxlib={version_str}",
        f"device={device.platform} {device.client.platform_version} {device.device_kind} "
        f"{device.id} {device.process_index}",
        f"xla_flags={os.environ.get('XLA_FLAGS', '')}",
        f"libtpu={os.environ.get('LIBTPU_INIT_ARGS', '')}",
        f"config={_config_text()}",
        f"name={name} keep_unused={keep_unused} inline={inline}",
        f"args={placement}",
        body,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest(), device


def _config_text() -> str:
    """Every jax config value, as this thread sees the traced ones."""
    from jax._src import config, core

    traced = []
    for value in config.trace_context():
        if isinstance(value, core.AxisEnv):
            if value.axis_sizes or value.spmd_axis_names or value.explicit_mesh_axis_names:
                raise _Refused  # inside a named-axis context
            continue
        traced.append(_canon(value))
    return _values_text() + " " + " ".join(traced)


#: The last config values written out, as (name, type, value) each, and
#: their text: the values rarely change between two eager ops.
_last_values: tuple[tuple[tuple[str, type, Any], ...], str] | None = None
_IMMUTABLE = (*_PLAIN, enum.Enum)


def _values_text() -> str:
    """``jax.config.values`` written out; the text of the last call again
    while every value is the same immutable one (typed: ``1`` is not ``True``)."""
    global _last_values
    import jax

    values = sorted(jax.config.values.items())
    typed = tuple((name, type(value), value) for name, value in values)
    last = _last_values
    if last is not None and last[0] == typed:
        return last[1]
    text = _canon(values)
    if all(isinstance(value, _IMMUTABLE) for _, value in values):
        _last_values = (typed, text)
    return text


def _placement(arg: Any, device: Any) -> str:
    import numpy as np
    from jax._src.array import ArrayImpl
    from jax._src.sharding_impls import SingleDeviceSharding

    if isinstance(arg, ArrayImpl):
        sharding = arg.sharding
        if not isinstance(sharding, SingleDeviceSharding) or sharding._device != device:
            raise _Refused  # placed elsewhere: jax picks the devices
        return "committed" if arg._committed else "array"
    if isinstance(arg, (np.ndarray, np.generic, bool, int, float, complex)):
        return "host"
    raise _Refused


@functools.cache
def _primitives() -> frozenset[Any]:
    """The primitives of jax's own lax modules, whose lowering jax defines."""
    from jax._src import core
    from jax._src.lax import convolution, fft, lax, slicing, special, windowed_reductions

    modules = (lax, slicing, special, convolution, fft, windowed_reductions)
    return frozenset(
        value
        for module in modules
        for value in vars(module).values()
        if isinstance(value, core.Primitive)
    )


def _jaxpr_text(jaxpr: Any, platform: str) -> str:
    """The jaxpr written out in full: every equation, its lowering rule,
    parameters and types."""
    from jax._src import core

    names: dict[Any, str] = {}
    allowed = _primitives()

    def atom(var: Any) -> str:
        if isinstance(var, core.Literal):
            return f"literal({_canon(var.val)}:{_aval(var.aval)})"
        if isinstance(var, core.DropVar):
            return f"_:{_aval(var.aval)}"
        if var not in names:
            names[var] = f"v{len(names)}:{_aval(var.aval)}"
        return names[var]

    lines = ["in " + " ".join(atom(v) for v in jaxpr.invars)]
    for eqn in jaxpr.eqns:
        if eqn.effects:
            raise _Refused
        if eqn.primitive is _jit_primitive():
            params = _nested(eqn.params, platform)
        elif eqn.primitive in allowed:
            params = _canon(sorted(eqn.params.items()))
        else:
            raise _Refused
        ins = " ".join(atom(v) for v in eqn.invars)
        outs = " ".join(atom(v) for v in eqn.outvars)
        rule = _rule(eqn.primitive, platform)
        lines.append(f"{eqn.primitive.name} {rule} {params} ({ins}) -> ({outs})")
    lines.append("out " + " ".join(atom(v) for v in jaxpr.outvars))
    return "\n".join(lines)


@functools.cache
def _jit_primitive() -> Any:
    """jax's primitive for a jitted function called inside another (``jit``)."""
    from jax._src import pjit

    return getattr(pjit, "jit_p", None) or getattr(pjit, "pjit_p", None)


def _nested(params: dict[str, Any], platform: str) -> str:
    """A jitted function called inside the computation (a jitted loss under
    ``jax.grad``), written out as the call itself is: its jaxpr in full, and
    its parameters, which must ask for what the call's own do not (``_key``)."""
    from jax._src.named_sharding import UnspecifiedValue

    if set(params) != _NESTED_PARAMETERS:
        raise _Refused  # a jax whose nested call says more than this knows
    closed = params["jaxpr"]
    if (
        closed.consts
        or any(
            not isinstance(s, UnspecifiedValue)
            for s in (*params["in_shardings"], *params["out_shardings"])
        )
        or any(layout is not None for layout in (*params["in_layouts"], *params["out_layouts"]))
        or any(params["donated_invars"])
        or not params["ctx_mesh"].empty
        or params["compiler_options_kvs"]
    ):
        raise _Refused
    plain = _canon((params["name"], params["keep_unused"], params["inline"]))
    return f"{plain} {{\n{_jaxpr_text(closed.jaxpr, platform)}\n}}"


#: The parameters of a nested jit's equation: the call's own, less its arguments.
_NESTED_PARAMETERS = frozenset(_PARAMETERS) - {"args"}


def _rule(primitive: Any, platform: str) -> str:
    """The lowering rule jax has for the primitive here, which must be jax's
    own: a rule a program or library registered over it is not keyed."""
    from jax._src.interpreters import mlir

    entry = mlir._platform_specific_lowerings.get(platform, {}).get(primitive)
    entry = entry if entry is not None else mlir._lowerings.get(primitive)
    rule = getattr(entry, "rule", None)
    function = getattr(rule, "func", rule)  # through a functools.partial
    module = getattr(function, "__module__", None) or ""
    if not module.startswith("jax._src."):
        raise _Refused
    return f"{module}.{getattr(function, '__qualname__', '?')}"


def _aval(aval: Any) -> str:
    from jax._src import core

    if type(aval) is not core.ShapedArray or _layout(aval) is not None:
        raise _Refused
    fields = (
        aval.dtype,
        aval.shape,
        aval.weak_type,
        aval.sharding,
        getattr(aval, "vma", None),
        getattr(aval, "memory_space", None),
        getattr(aval, "manual_axis_type", None),
    )
    return _canon(fields)


def _layout(aval: Any) -> Any:
    """The aval's layout when one was asked for; None for jax's default
    (``AutoLayout`` since jax 0.11, absent before)."""
    from jax._src import layout

    chosen = getattr(aval, "layout", None)
    return None if chosen is None or chosen is getattr(layout, "AutoLayout", None) else chosen


def _canon(value: Any) -> str:
    """A text that differs whenever the value does; ``_Refused`` for a value
    that is not plain data (a callable, a jaxpr, an object of unknown state)."""
    import numpy as np

    if isinstance(value, _PLAIN):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, np.dtype):
        return f"dtype:{value.str}:{value.name}"
    if isinstance(value, np.generic | np.ndarray):
        array = np.asarray(value)
        if array.dtype.hasobject or array.size > 16:
            raise _Refused
        return f"np:{array.dtype.str}:{array.shape}:{array.tobytes().hex()}"
    if isinstance(value, enum.Enum):
        return f"{type(value).__module__}.{type(value).__qualname__}.{value.name}"
    if isinstance(value, tuple | list | frozenset | set):
        items = (
            sorted(_canon(v) for v in value)
            if isinstance(value, frozenset | set)
            else [_canon(v) for v in value]
        )
        return f"{type(value).__qualname__}({', '.join(items)})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f"{f.name}={_canon(getattr(value, f.name))}" for f in dataclasses.fields(value)]
        return f"{type(value).__module__}.{type(value).__qualname__}({', '.join(fields)})"
    if type(value).__module__.startswith(("jax.", "jaxlib.")) and _is_plain_jax(value):
        return f"{type(value).__module__}.{type(value).__qualname__}:{value!r}"
    raise _Refused


def _is_plain_jax(value: Any) -> bool:
    """jax's abstract shardings, partition specs and manual-axis types print
    all they hold; a sharding over concrete devices is not keyed."""
    from jax._src import core, mesh, named_sharding, partition_spec

    plain = (
        mesh.AbstractMesh,
        named_sharding.NamedSharding,
        partition_spec.PartitionSpec,
        core.ManualAxisType,
    )
    return isinstance(value, plain) and not isinstance(getattr(value, "mesh", None), mesh.Mesh)


# --- the executable --------------------------------------------------------


def _load(cache: ExecutableCache, key: str, device: Any, jaxpr: Any) -> Any:
    """The loaded executable, or None when absent or not the jaxpr's."""
    data = cache.get(key)
    if data is None:
        return None
    from jax._src.interpreters import pxla

    from ppy_runtime_pjrt import pickled

    try:
        unloaded = pickled.load(data, device.client, [device])
        if not isinstance(unloaded, pxla.UnloadedMeshExecutable) or (
            tuple(unloaded.output_avals) != tuple(jaxpr.out_avals)
        ):
            raise ValueError("the stored executable is not this computation's")
        return unloaded.load()
    except Exception as error:
        cache.discard(key, error)
        return None


def _store(cache: ExecutableCache, key: str, name: str, result: Any, produced: Any) -> None:
    """Keep what jax compiled, when the compile step handed it over and it
    carries nothing a file cannot (on the writer thread, ``behind``)."""
    _, executable, profiler, const_args = result
    unloaded = getattr(executable, "_unloaded_executable", None)
    if (
        unloaded is None
        or produced is None
        or produced is not unloaded.xla_executable
        or profiler is not None
        or const_args
        or unloaded.host_callbacks
        or unloaded.keepalive
        or unloaded.ordered_effects
        or unloaded.unordered_effects
        or unloaded.mut is not None
    ):
        return
    try:
        with io.BytesIO() as file:
            _pickler(file, produced, bytes(produced.serialize())).dump(unloaded)
            data = file.getvalue()
    except Exception as error:  # some executables do not serialize
        skip(name, error)
        return
    if cache.keep(key, data):
        _log().debug("cache.unstaged", computation=name, source="compiled", lowered=True)


def _pickler(file: io.BytesIO, executable: Any, data: bytes) -> Any:
    """jax's executable pickler, writing ``executable`` as ``data``."""
    from jax.experimental import serialize_executable

    # private: the pickler module's own imports of jaxlib, and its untyped methods.
    executables = (
        serialize_executable.xc.LoadedExecutable,  # type: ignore[attr-defined]
        serialize_executable._jax.Executable,  # type: ignore[attr-defined]
    )

    class Pickler(serialize_executable._JaxPjrtPickler):
        def persistent_id(self, obj: Any) -> Any:
            if obj is executable:
                return ("exec", data)
            if isinstance(obj, executables):
                raise ValueError("the executable holds another executable")
            return super().persistent_id(obj)  # type: ignore[no-untyped-call]

    return Pickler(file)
