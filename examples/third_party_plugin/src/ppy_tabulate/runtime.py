"""The run side: answer from the table, and call the function for anything else.

Registered under ``ppy.runtimes`` for the kind ``tabulate.table``. It reads
JSON from the payload and executes nothing from the artifact.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ppy.runtime import ORIGINAL, Entry, NotBound, Runtime

__all__ = ["TableRuntime"]


class TableRuntime:
    #: The version of ``ppy.runtime``'s contract it was written for (``ppy.runtime.CONTRACT``).
    contract = (1, 0)

    def bind(self, entry: Entry, original: Callable[..., Any]) -> Callable[..., Any]:
        try:
            table = json.loads(entry.payload["table"])
            lo, values = int(table["lo"]), list(table["values"])
        except (KeyError, TypeError, ValueError) as error:
            raise NotBound(f"the table payload is unreadable: {error}") from error
        hi = lo + len(values)

        def lookup(*args: Any, **kwargs: Any) -> Any:
            # Only a plain int in range was tabulated; bools, floats and the rest
            # get what the function itself returns.
            if not kwargs and len(args) == 1 and type(args[0]) is int and lo <= args[0] < hi:
                return values[args[0] - lo]
            return original(*args, **kwargs)

        lookup.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(lookup, ORIGINAL, original)  # what the program's name stands in for
        return lookup


#: The runtime satisfies core's contract; mypy checks this line.
_: type[Runtime] = TableRuntime
