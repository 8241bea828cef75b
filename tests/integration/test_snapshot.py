"""Each command reads the project's files once (``ppy.snapshot``): the
configuration and the recorded signatures are each opened once by
``ppy build``, a cold ``ppy run`` that rebuilds, and ``ppy record``; and
what a build stages from the recording is what its digest says it staged,
even when the file is replaced while the build reads the project."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

from tests.conftest import PERMISSIONS

PROGRAM = """
import sys
import jax
import jax.numpy as jnp


@jax.jit
def predict(w, x):
    return jnp.tanh(x @ w)


if __name__ == "__main__":
    w = jnp.ones((4, 3), jnp.float32) / 4
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    x = jnp.arange(batch * 4, dtype=jnp.float32).reshape(batch, 4) / 100
    print(predict(w, x).shape)
"""

#: ``ppy`` with an audit hook that counts the opens of the project's two
#: files, written as JSON to ``PPY_TEST_OPENS`` when this process ends; and,
#: with ``PPY_TEST_SWAP`` (a file's path), that file's bytes written over the
#: signatures at the first open of any project file after the signatures'
#: first: a recording that lands while the command reads the project.
WRAPPER = """
import atexit, json, os, sys
root = os.path.realpath(os.environ["PPY_TEST_ROOT"])
swap = os.environ.get("PPY_TEST_SWAP")
signatures = os.path.join(root, ".ppy", "signatures.json")
me = os.getpid()
counts = {"pyproject.toml": 0, "signatures.json": 0}
busy = []

def hook(event, args):
    if event != "open" or busy or os.getpid() != me:
        return
    path = args[0]
    if not isinstance(path, (str, bytes, os.PathLike)):
        return
    path = os.path.realpath(os.fsdecode(path))
    if not path.startswith(root + os.sep):
        return
    name = os.path.basename(path)
    if swap and counts["signatures.json"] and not busy:
        busy.append(True)
        with open(swap, "rb") as source, open(signatures, "wb") as target:
            target.write(source.read())
        os.environ.pop("PPY_TEST_SWAP")
        globals()["swap"] = None
        busy.clear()
    if name in counts:
        counts[name] += 1

def report():
    if os.getpid() == me:
        with open(os.environ["PPY_TEST_OPENS"], "w") as out:
            json.dump(counts, out)

atexit.register(report)
sys.addaudithook(hook)
from ppy.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "model.ppy").write_text(textwrap.dedent(PROGRAM).lstrip())
    (root / "pyproject.toml").write_text(PERMISSIONS)
    return root


def _counted(
    root: Path, tmp_path: Path, *args: str, swap: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    """``ppy ARGS`` in ``root``, and how often it opened each of the two files."""
    opens = tmp_path / "opens.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PPY_WARM", "PPY_TEST_SWAP")}
    env.update(
        PPY_CACHE_DIR=str(tmp_path / "cache"), PPY_TEST_ROOT=str(root), PPY_TEST_OPENS=str(opens)
    )
    if swap is not None:
        env["PPY_TEST_SWAP"] = str(swap)
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    counts: dict[str, int] = json.loads(opens.read_text())
    return done, counts


def test_each_command_opens_the_configuration_and_the_recording_once(tmp_path: Path) -> None:
    root = _project(tmp_path)
    once = {"pyproject.toml": 1, "signatures.json": 1}
    done, counts = _counted(root, tmp_path, "record", "model.ppy")
    assert done.stdout == "(8, 3)\n"
    assert counts == once, "ppy record"
    # No artifact yet: the run builds one from the recording, then runs.
    done, counts = _counted(root, tmp_path, "run", "model.ppy")
    assert done.stdout == "(8, 3)\n"
    assert counts == once, "ppy run (cold, building first)"
    done, counts = _counted(root, tmp_path, "build")
    assert "1 reused" in done.stdout
    assert counts == once, "ppy build"


def _manifest(root: Path) -> dict[str, Any]:
    with zipfile.ZipFile(root / ".ppy" / "artifact.ppyz") as archive:
        manifest: dict[str, Any] = json.loads(archive.read("manifest.json"))
    return manifest


def test_the_digest_in_the_artifact_is_of_the_recording_it_staged(tmp_path: Path) -> None:
    root = _project(tmp_path)
    signatures = root / ".ppy" / "signatures.json"
    _counted(root, tmp_path, "record", "model.ppy", "5")
    five = tmp_path / "five.json"
    five.write_bytes(signatures.read_bytes())
    _counted(root, tmp_path, "record", "--replace", "model.ppy", "8")
    eight = signatures.read_bytes()
    assert five.read_bytes() != eight
    # The file holds the recording of 8 when the build starts, and that of 5
    # from the first open of a project file after the build first read it.
    _counted(root, tmp_path, "build", swap=five)
    assert signatures.read_bytes() == five.read_bytes(), "the swap did not happen"
    manifest = _manifest(root)
    (decision,) = [d for d in manifest["decisions"] if d["qualname"] == "predict"]
    assert decision["outcome"] == "staged", decision
    staged = eight if "8,4" in decision["signature"] else five.read_bytes()
    assert ("8,4" in decision["signature"]) != ("5,4" in decision["signature"]), decision
    recorded = manifest["config_digest"].partition("+")[2]
    assert recorded == hashlib.sha256(staged).hexdigest()
