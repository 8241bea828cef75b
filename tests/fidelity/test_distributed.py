"""Two processes joined by ``jax.distributed``: one staged function over a global mesh.

Each process has two CPU devices and jax's gloo collectives; together they
make the four-device mesh the export was built for. The program starts jax's
backend only in ``main()``, after ``jax.distributed.initialize``, as such
programs must: ``ppy run`` binds the export at import without starting it.
Each process's output under ``ppy run`` is the same as under ``python``, and
both take the staged path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import PERMISSIONS, cpu_backend, run_ppy
from tests.support.differential import project

#: Two CPU devices a process, gloo collectives, a socket between the processes.
pytestmark = cpu_backend

PROGRAM = """\
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

from typing import Annotated

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import ppy

Batch = Annotated[jax.Array, ppy.Shape("4*B", 4), ppy.DType("float32"), ppy.Sharding("data")]


@jax.jit
def total(x: Batch) -> jax.Array:
    return (x * 2).sum(axis=-1)


def main():
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(sys.argv[2], num_processes=2, process_id=int(sys.argv[1]))
    mesh = jax.make_mesh((4,), ("data",))
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = jax.make_array_from_callback((8, 4), NamedSharding(mesh, P("data")), lambda i: data[i])
    y = total(x)
    shards = [np.asarray(s.data).tolist() for s in y.addressable_shards]
    print(jax.process_index(), jax.device_count(), y.sharding.spec, shards)


if __name__ == "__main__":
    main()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def _both(
    command: list[str], root: Path, env: dict[str, str]
) -> list[subprocess.CompletedProcess[str]]:
    """The two processes of one run, started together."""
    address = f"localhost:{_port()}"
    started = [
        subprocess.Popen(
            [*command, str(rank), address],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    done = []
    for process in started:
        out, err = process.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


def test_two_processes_run_one_staged_function_over_a_global_mesh(tmp_path: Path) -> None:
    root = project(tmp_path / "p", {"model.ppy": PROGRAM}, PERMISSIONS + "mesh = { data = 4 }\n")
    env = {**os.environ, "PPY_CACHE_DIR": str(tmp_path / "c")}
    plain = _both([sys.executable, "model.ppy"], root, env)
    for run in plain:
        assert run.returncode == 0, run.stderr
    assert plain[0].stdout.startswith("0 4 P('data',)")
    assert plain[1].stdout.startswith("1 4 P('data',)")
    built = run_ppy("build", cwd=root, env=env)
    assert built.returncode == 0, built.stderr
    ppy = [sys.executable, "-m", "ppy", "-v", "--log-format", "json", "run", "model.ppy"]
    for attempt in ("compiled", "from the cache"):
        staged = _both(ppy, root, env)
        for rank, (python, run) in enumerate(zip(plain, staged, strict=True)):
            assert run.returncode == 0, (attempt, run.stderr)
            assert run.stdout == python.stdout, (attempt, rank)
            events = [json.loads(x) for x in run.stderr.splitlines() if x.startswith("{")]
            paths = [e["path"] for e in events if e["event"] == "run.call"]
            assert paths == ["staged"], (attempt, rank, run.stderr)
