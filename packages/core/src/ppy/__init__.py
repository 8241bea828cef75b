"""ppy: move JAX's trace out of program start-up.

``import ppy`` is what a ``.ppy`` program does under plain CPython, so it must
stay cheap and inert: it exposes the annotation markers and installs the
``.ppy`` import hook, and loads none of jax, importlib.metadata or structlog. The
tooling (config, discovery, policy, artifact, CLI) lives in submodules that
are imported only by the ``ppy`` command.
"""

from __future__ import annotations

from ppy import xla
from ppy._hook import install as _install_hook
from ppy.annotations import DType, Like, Shape, Sharding

__version__ = "0.1.0"
__all__ = ["DType", "Like", "Shape", "Sharding", "__version__", "xla"]

_install_hook()
