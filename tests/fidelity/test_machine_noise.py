"""What the machine prints on stderr (jax's warning on a TPU host without
transparent hugepages) is set apart on both sides; the program's own stderr
is still compared."""

from __future__ import annotations

from pathlib import Path

from tests.support.differential import differential, machine_noise, project

#: As jax 0.10.2 prints it on a TPU v5e host, the source line included.
WARNING = (
    "/usr/lib/python3/dist-packages/jax/_src/cloud_tpu_init.py:88: UserWarning: Transparent "
    "hugepages are not enabled. TPU runtime startup and shutdown time should be significantly "
    "improved on TPU v5e and newer. If not already set, you may need to enable transparent "
    'hugepages in your VM image (sudo sh -c "echo always > '
    '/sys/kernel/mm/transparent_hugepage/enabled")\n'
    "  warnings.warn(\n"
)

#: The warning as ``import jax`` gives it: once a process, at the first import.
#: A warm run's program imports a jax its server imported, so it does not print it.
PROGRAM = """\
import sys
import warnings
from typing import Annotated

first = "jax" not in sys.modules
import jax
import jax.numpy as jnp

import ppy

if first:
    # At the line of jax's own warnings.warn call (88 in jax 0.10.2, 90 in 0.12.1).
    where = jax.__file__.replace("__init__.py", "_src/cloud_tpu_init.py")
    with open(where) as source:
        lines = source.read().splitlines()
    start = next(i for i, text in enumerate(lines) if "Transparent hugepages" in text)
    line = max(i for i in range(start) if "warnings.warn(" in lines[i]) + 1
    message = (
        "Transparent hugepages are not enabled. TPU runtime startup and shutdown time "
        "should be significantly improved on TPU v5e and newer."
    )
    warnings.warn_explicit(message, UserWarning, where, line)
print("the program's own line", file=sys.stderr)


@jax.jit
def double(x: Annotated[jax.Array, ppy.Shape("N"), ppy.DType("float32")]) -> jax.Array:
    return x * 2


print(double(jnp.arange(3.0)))
"""


def test_the_hugepages_warning_alone_is_set_apart() -> None:
    own = "program.py:3: UserWarning: Transparent hugepages are not enabled.\n"
    stderr = f"first\n{WARNING}second\n  warnings.warn(\n{own}"
    assert machine_noise(stderr) == f"first\nsecond\n  warnings.warn(\n{own}"
    # Without the quoted source line (the file unreadable), the message alone.
    assert machine_noise(WARNING.splitlines(keepends=True)[0] + "x\n") == "x\n"


def test_a_program_whose_python_run_has_the_warning_and_whose_warm_run_has_not(
    tmp_path: Path,
) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM})
    compared = differential(root, cache=tmp_path / "c")
    assert "Transparent hugepages are not enabled." in compared.python.stderr
    assert "the program's own line" in compared.python.stderr
    assert compared.bound() == {"double"}
