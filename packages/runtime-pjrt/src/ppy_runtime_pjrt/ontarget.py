"""A symbolic export checked against jit on the platform it runs on, at its first use there.

The build compiles every export with a symbolic dim beside the jitted
function, for its own platform, and stages it only where the two programs
are the same (``ppy_plugin_jax.refinement``); the entry lists where
(``compared_on``). An artifact built on a CPU for ``["cpu", "tpu"]`` has not
been compared on the TPU: XLA compiles for each platform otherwise, and the
export may inline there what jit keeps apart, and round otherwise.

So on such a platform the first call that would be served compiles, for
that call as the program made it, both the export and the jitted function,
and compares the two programs as the build does (``ppy.kinds.jax_programs``).
The verdict is kept in the executable cache, keyed as the variant's
executables are (the export's bytes, the platform and device, jax's
versions, ``XLA_FLAGS``): the check costs one compile of the jitted function
on the machine's first run, and nothing after. Where the programs differ,
the variant is served nowhere in this process and no later one, and every
call takes the original path with that reason.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ppy.kinds.jax_programs import Uncompared, export_platform, print_options, program
from ppy.runtime import executable_key

if TYPE_CHECKING:
    from ppy.runtime import ExecutableCache

    from ppy_runtime_pjrt.compile import Executables

__all__ = ["Verdicts", "compare"]

#: What the cache holds for a variant found to compile as jit does; any
#: other content is the reason it does not.
SAME = b"same"


class Verdicts:
    """The on-target verdicts of one variant, in the executable cache."""

    def __init__(self, executables: Executables, cache: ExecutableCache | None) -> None:
        self.cache = cache
        self.key = executable_key(
            hashlib.sha256(f"compared with jit|{executables.digest}".encode()).hexdigest(),
            [],
            platform=executables.platform,
            device_kind=executables.device_kind,
            versions=executables.versions,
        )

    def get(self) -> tuple[bool, str | None]:
        """(whether a verdict is kept, why the programs differ or None)."""
        data = self.cache.get(self.key) if self.cache is not None else None
        if data is None:
            return False, None
        return True, None if data == SAME else data.decode("utf-8", "replace")

    def put(self, differs: str | None) -> None:
        if self.cache is not None:
            self.cache.keep(self.key, SAME if differs is None else differs.encode("utf-8"))


def compare(
    original: Any, served: Any, given: tuple[tuple[Any, ...], dict[str, Any]]
) -> str | None:
    """Why ``served`` (the export compiled for the call ``given``) is another
    program than the one jit compiles for ``original`` called so; None where
    they are the same. A pair this process cannot compare differs, and says
    why: only a program seen to be jit's is served."""
    import jax

    here = export_platform()
    lower = getattr(original, "lower", None)
    if lower is None:
        return (
            f"exported with symbolic dims and not compared with jit on {here}, and the "
            "original is not a function jax can lower to compare it with"
        )
    args, kwargs = given
    try:
        options = print_options()
        jitted = lower(*args, **kwargs).compile()
        if program(served, options) == program(jitted, options):
            return None
    except Uncompared as error:
        return f"exported with symbolic dims and not compared with jit on {here}: {error}"
    shapes = ", ".join(
        f"{leaf.dtype}[{','.join(map(str, leaf.shape))}]"
        for leaf in jax.tree_util.tree_leaves((args, kwargs))
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype")
    )
    return (
        f"for ({shapes}) on {here}, XLA compiles the export to another program than the "
        "jitted function, which the build could not compare on this platform: results "
        f"could differ in the last bits; build on a {here} machine, or give the dims "
        "fixed sizes"
    )
