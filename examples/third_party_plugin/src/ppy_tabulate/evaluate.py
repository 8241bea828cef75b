"""Run by the plugin as ``python -P -m ppy_tabulate.evaluate``: one module's tables.

Reads the order as JSON on stdin and prints one JSON line: qualname to the list
of results, or to a message when a result is not an int.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys


def main() -> None:
    order = json.load(sys.stdin)
    sys.path.insert(0, order["root"])
    import ppy  # noqa: F401  (installs the .ppy import hook)

    with contextlib.redirect_stdout(io.StringIO()):  # the module's prints are not the protocol
        module = importlib.import_module(order["module"])
        tables: dict[str, list[int] | str] = {}
        for wanted in order["functions"]:
            function = getattr(module, wanted["qualname"])
            values = [function(n) for n in range(wanted["lo"], wanted["hi"])]
            bad = next((v for v in values if type(v) is not int), None)
            tables[wanted["qualname"]] = (
                f"returned {bad!r}, not an int" if bad is not None else values
            )
    print(json.dumps(tables))


if __name__ == "__main__":
    main()
