"""What ``ppy run`` is asked to do, built once from the command line.

The CLI parses its arguments into one ``RunRequest``; a cold run hands it to
``ppy.commands.run``, and a warm run sends it to the server
(``ppy.warm.protocol``), whose child hands the same request to the same
command, so a run is parsed once, wherever it runs. ``warm`` is the user's
wish only (``--warm``, ``--no-warm`` or neither): a warm server's child runs
the request where it is, because it is the child, not because of a flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["LOG_FORMATS", "MAX_VERBOSITY", "RunRequest"]

#: The log formats ``--log-format`` takes.
LOG_FORMATS: Final = ("console", "json")
#: The most ``-v`` counts (``-vv``: debug events); more shows no more.
MAX_VERBOSITY: Final = 2


@dataclass(frozen=True)
class RunRequest:
    """``ppy run PROGRAM ARGV``: the program as typed (its ``sys.argv[0]``),
    its arguments, whether a stale artifact may be rebuilt (``--no-build``
    says not), the warm wish, and how ppy logs (``-v``/``-q``: -1 quiet, 0,
    1, 2; ``--log-format``)."""

    program: str
    argv: tuple[str, ...] = ()
    build: bool = True
    warm: bool | None = None
    verbosity: int = 0
    log_format: Literal["console", "json"] = "console"

    def to_json(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "argv": list(self.argv),
            "build": self.build,
            "warm": self.warm,
            "verbosity": self.verbosity,
            "log_format": self.log_format,
        }

    @classmethod
    def from_json(cls, data: object) -> RunRequest:
        """The request ``data`` holds, each field checked; ValueError saying
        which field is wrong where one is."""
        if not isinstance(data, dict):
            raise ValueError("run is not an object")
        unknown = set(data) - {"program", "argv", "build", "warm", "verbosity", "log_format"}
        if unknown:
            raise ValueError(f"run has unknown fields: {', '.join(sorted(map(repr, unknown)))}")
        program, argv = data.get("program"), data.get("argv")
        if not isinstance(program, str) or not program:
            raise ValueError("run.program is not a path")
        if not isinstance(argv, list) or not all(type(a) is str for a in argv):
            raise ValueError("run.argv is not a list of strings")
        build, warm, verbosity = data.get("build"), data.get("warm"), data.get("verbosity")
        if type(build) is not bool:
            raise ValueError("run.build is not a boolean")
        if warm is not None and type(warm) is not bool:
            raise ValueError("run.warm is not a boolean or null")
        if type(verbosity) is not int or not -1 <= verbosity <= MAX_VERBOSITY:
            raise ValueError("run.verbosity is not one of -1, 0, 1, 2")
        log_format = data.get("log_format")
        if log_format == "console" or log_format == "json":
            return cls(program, tuple(argv), build, warm, verbosity, log_format)
        raise ValueError(f"run.log_format is not one of {', '.join(LOG_FORMATS)}")
