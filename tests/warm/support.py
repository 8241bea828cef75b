"""Running a program under ``python`` and under ``ppy run --warm``, with the
test's own servers (in the test's cache folder) stopped afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import stop_servers

__all__ = ["Warm", "servers"]


class Warm:
    """A project folder and a private cache (hence a private server folder)."""

    def __init__(self, root: Path, cache: Path) -> None:
        self.root = root
        self.cache = cache

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, "PPY_CACHE_DIR": str(self.cache), **(extra or {})}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "ppy", *args]

    def run(
        self, *args: str, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """``ppy ARGS`` in the project."""
        kwargs.setdefault("capture_output", True)
        return subprocess.run(
            self.command(*args),
            cwd=self.root,
            env=self.env(env),
            text=True,
            timeout=300,
            check=False,
            **kwargs,
        )

    def warm(self, *argv: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run("run", "--warm", "model.ppy", *argv, **kwargs)

    def python(
        self, *argv: str, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("capture_output", True)
        return subprocess.run(
            [sys.executable, "model.ppy", *argv],
            cwd=self.root,
            env=self.env(env),
            text=True,
            timeout=300,
            check=False,
            **kwargs,
        )

    def servers(self, env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """``ppy server status --json``."""
        done = self.run("server", "status", "--json", env=env)
        assert done.returncode == 0, done.stderr
        found: list[dict[str, Any]] = json.loads(done.stdout)
        return found

    def stop(self) -> None:
        stop_servers(self.cache)


@contextmanager
def servers(root: Path, cache: Path) -> Iterator[Warm]:
    """A ``Warm`` for ``root`` whose servers are stopped at the end."""
    warm = Warm(root, cache)
    try:
        yield warm
    finally:
        warm.stop()
