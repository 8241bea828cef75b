"""Does jit hand the function's large constants to its program as arguments?

From jax 0.12 (``jax_use_simplified_jaxpr_constants``, on by default), jit
lowers every constant of a trace larger than
``jax_embedded_constants_max_bytes`` (1 KiB) as an argument of its program:
an array the function closes over, or one it computes from what it closes
over before the first traced value. ``jax.export`` embeds every constant in
the module instead, and XLA folds what an embedded constant feeds at compile
time, with its own evaluator. In ``tests/record/foreign/kernel_regression``
the kernel matrix's ``exp`` of a closed-over 30x30 array is then computed at
compile time, where jit's program computes it at run time, and the posterior
mean differs from python's in the last digits: a staged call that silently
computes something else.

So where jit hands its program constants, the export is compiled beside
jit's program and the two compared (``ppy_plugin_jax.refinement``), each of
jit's constant parameters taken as the constant the export embeds: where
XLA left every embedded constant as it is (``x @ W``) they are one program,
and the export is served; where it computed with one at compile time, the
function stays (rule ``constants``). jit's own programs for a call under
``jax.grad`` are not compared: where jit hands one constants, that call is
left to jit. With the flag off, and on jax 0.10, jit embeds constants as
an export does, and nothing is compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["hoisted", "hoisting"]


def hoisting() -> bool:
    """Whether this jax hands large constants to jit's programs as arguments."""
    import jax

    return bool(jax.config.values.get("jax_use_simplified_jaxpr_constants", False))


def hoisted(jitted: Any, leaves: Sequence[Any]) -> list[str]:
    """The constants (``f32[30,30]``) that jit passes to its program for a
    call of ``jitted`` on ``leaves`` as arguments, where an export embeds them."""
    if not hoisting():
        return []
    from jax._src import core  # jit's own list of them: jax has no public one

    traced = jitted.trace(*leaves)
    return [aval.str_short() for _, aval in core.jaxpr_const_args(traced.jaxpr.jaxpr)]
