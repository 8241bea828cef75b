"""The runtime-only deployment, end to end (run by ``nox -s runtime_only``).

The venv running this script holds only ppy-core and ppy-runtime-pjrt. The
artifact is built by ``--build-python``, a venv with every package. Here,
``ppy run --no-build`` must print what ``python model.ppy`` prints, with the
staged functions bound; after an edit, ``ppy run`` must warn that the artifact
is stale, run the edited program and keep the artifact; and ``ppy build`` must
say that no jax export plugin is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "50_runtime_only"


def run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    print(f"$ {' '.join(command)}  -> {result.returncode}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-python", required=True)
    args = parser.parse_args()
    # Absolute, but not resolved: a venv's python is a symlink to the base one.
    build_python = os.path.abspath(args.build_python)
    for name in ("ppy_plugin_jax", "ppy_plugin_xla"):
        if importlib.util.find_spec(name) is not None:
            print(f"FAIL: {name} is installed in the runtime-only venv")
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp) / "project"
        shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".ppy", "__pycache__"))
        built = run(build_python, "-m", "ppy", "build", cwd=project)
        if built.returncode != 0 or "exported" not in built.stdout:
            print(built.stdout, built.stderr, sep="\n")
            print("FAIL: the build venv did not export the example")
            return 1
        expected = run(sys.executable, "model.ppy", cwd=project)
        staged = run(
            sys.executable, "-m", "ppy", "-v", "run", "--no-build", "model.ppy", cwd=project
        )
        if staged.returncode != 0 or staged.stdout != expected.stdout:
            print(
                "python:",
                expected.stdout,
                expected.stderr,
                "ppy run:",
                staged.stdout,
                staged.stderr,
                sep="\n",
            )
            print("FAIL: ppy run --no-build printed something else than python")
            return 1
        if "run.bind" not in staged.stderr:
            print(staged.stderr)
            print("FAIL: ppy run did not bind the staged functions")
            return 1
        artifact = project / ".ppy" / "artifact.ppyz"
        shipped = artifact.read_bytes()
        program = project / "model.ppy"
        program.write_text(program.read_text() + "\n# edited on the server\n")
        edited = run(sys.executable, "-m", "ppy", "run", "model.ppy", cwd=project)
        if edited.stdout != expected.stdout or "run.stale" not in edited.stderr:
            print(edited.stdout, edited.stderr, sep="\n")
            print("FAIL: ppy run on an edited source did not warn and run it as python does")
            return 1
        if artifact.read_bytes() != shipped:
            print("FAIL: ppy run replaced the artifact with no plugin installed to build one")
            return 1
        rebuilt = run(sys.executable, "-m", "ppy", "build", cwd=project)
        if "no jax export plugin is installed" not in rebuilt.stdout:
            print(rebuilt.stdout, rebuilt.stderr, sep="\n")
            print("FAIL: ppy build did not say that no jax export plugin is installed")
            return 1
    print("runtime-only: 4 passed, 0 failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
