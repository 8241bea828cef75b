"""Errors a user sees: what went wrong, where, and what to do about it.

The CLI turns a ``PpyError`` into one message on stderr and its exit code;
nothing that reaches a user as a ``PpyError`` prints a traceback.
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["ArtifactError", "ConfigError", "PpyError", "UsageError", "reader_gone"]


class PpyError(Exception):
    """Base of the errors the CLI reports without a traceback."""

    exit_code = 1

    def __init__(self, message: str, *, remedy: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy

    def __str__(self) -> str:
        if self.remedy:
            return f"{self.message}\n  remedy: {self.remedy}"
        return self.message


class UsageError(PpyError):
    """The command line asks for something that cannot be done (exit code 2)."""

    exit_code = 2


class ConfigError(PpyError):
    """``[tool.ppy]`` is malformed; names the file and the key (exit code 2)."""

    exit_code = 2

    def __init__(
        self, message: str, *, path: str, key: str | None = None, remedy: str | None = None
    ) -> None:
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {message}", remedy=remedy)
        self.path = path
        self.key = key


class ArtifactError(PpyError):
    """The artifact is missing, damaged or of another format version."""

    def __init__(
        self,
        message: str,
        *,
        path: str,
        member: str | None = None,
        remedy: str = "rebuild it with `ppy build`",
    ) -> None:
        where = f"{path} [{member}]" if member else path
        super().__init__(f"{where}: {message}", remedy=remedy)
        self.path = path
        self.member = member


def reader_gone() -> int:
    """The exit status after stdout's reader went away (``ppy inspect --json
    | head``): stdout now writes to nothing, so Python's exit-time flush does
    not complain, and the status is the SIGPIPE death coreutils report."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE
