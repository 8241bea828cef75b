"""ppy: move JAX's trace out of program start-up.

``import ppy`` is what a ``.ppy`` program does under plain CPython, so it must
stay cheap and inert: it installs the ``.ppy`` import hook, and loads none of
jax, importlib.metadata or structlog. The annotation markers (``ppy.Shape``,
``ppy.DType``, ``ppy.Like``, ``ppy.Sharding``) and ``ppy.xla`` are loaded
when first named (a module ``__getattr__``, as jax and numpy do), so a
command that needs none of them (``ppy run --warm``'s client) does not pay
for ``typing`` and the annotation records. The tooling (config, discovery,
policy, artifact, CLI) lives in submodules that are imported only by the
``ppy`` command.
"""

from __future__ import annotations

from ppy._hook import install as _install_hook

TYPE_CHECKING = False  # typing is not imported for it: ppy.xla would pay for it at once

if TYPE_CHECKING:
    from ppy import xla
    from ppy.annotations import DType, Like, Shape, Sharding

__version__ = "0.1.0"
__all__ = ["DType", "Like", "Shape", "Sharding", "__version__", "xla"]

#: Where each lazily loaded name lives.
_LAZY = {
    "DType": "ppy.annotations",
    "Like": "ppy.annotations",
    "Shape": "ppy.annotations",
    "Sharding": "ppy.annotations",
}


def __getattr__(name: str) -> object:
    import importlib

    if name == "xla":
        return importlib.import_module("ppy.xla")
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'ppy' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_install_hook()
