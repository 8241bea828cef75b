"""The build side: which functions can be tabulated, and the tabulating itself.

Imported by every ``ppy build``, so it imports nothing heavy. Calling the
function runs project code, so the plugin declares ``build_execution`` and a
permission of its own: core's policy keeps it off until the project sets both.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ppy.plugin import (
    Check,
    Entry,
    FunctionInfo,
    ModuleInfo,
    Plugin,
    Requirements,
    Setting,
    StageFailure,
    StageRequest,
    TensorSpec,
    validate_table,
)

__all__ = ["SETTINGS", "TabulatePlugin", "domain"]

DECORATOR = "ppy_tabulate.tabulate"
#: A table larger than this is refused: the artifact is not a database.
MAX_ROWS = 100_000

SETTINGS: Mapping[str, Setting] = {
    "allow-tabulate": Setting(
        (bool,), False, "let the build call @tabulate functions to fill their tables"
    ),
}


def domain(function: FunctionInfo, module: ModuleInfo) -> tuple[int, int] | str:
    """``(lo, hi)`` from ``@tabulate(lo, hi)`` as written, or why it cannot be read."""
    tree = ast.parse(module.source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function.qualname:
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and len(decorator.args) == 2:
                    values = [
                        a.value
                        for a in decorator.args
                        if isinstance(a, ast.Constant) and type(a.value) is int
                    ]
                    if len(values) == 2:
                        lo, hi = values
                        if not 0 < hi - lo <= MAX_ROWS:
                            return f"range({lo}, {hi}) must hold 1 to {MAX_ROWS} values"
                        return lo, hi
    return "write the range as two int literals: @tabulate(0, 100)"


class TabulatePlugin:
    name = "tabulate"
    kind = "tabulate.table"
    verb = "tabulated"
    #: The version of ``ppy.plugin``'s contract it was written for (``ppy.plugin.CONTRACT``).
    contract = (1, 0)
    decorators = frozenset({DECORATOR})
    requirements = Requirements(build_execution=True, permission="allow-tabulate")
    version = "0.1.0"

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        return validate_table(table, SETTINGS, path=path, prefix="tool.ppy.plugins.tabulate")

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        return f"ppy-plugin-tabulate={self.version};python={sys.version_info[:2]}"

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        checks = []
        if function.scope == "module":
            checks.append(Check("tabulate-scope", True, "module-level function"))
        else:
            checks.append(
                Check(
                    "tabulate-scope",
                    False,
                    f"a {function.scope} function cannot be bound by its module's name",
                    "move it to module level",
                )
            )
        positional = [p for p in function.parameters if p.kind == "positional"]
        if len(positional) == len(function.parameters) == 1:
            checks.append(Check("tabulate-arity", True, "one positional parameter"))
        else:
            checks.append(
                Check(
                    "tabulate-arity",
                    False,
                    "a tabulated function takes exactly one positional parameter",
                    "leave the function untabulated, or give it one int parameter",
                )
            )
        found = domain(function, module) if function.scope == "module" else (0, 1)
        if isinstance(found, str):
            checks.append(Check("tabulate-range", False, found, found))
        else:
            checks.append(Check("tabulate-range", True, f"range({found[0]}, {found[1]})"))
        return checks

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        results: list[Entry | StageFailure] = []
        for target in request.targets:
            wanted = []
            for function in target.functions:
                found = domain(function, target.module)
                if isinstance(found, str):  # check() refused it: policy does not ask for it
                    name = target.module.name
                    results.append(StageFailure(name, function.qualname, "tabulate-range", found))
                    continue
                wanted.append({"qualname": function.qualname, "lo": found[0], "hi": found[1]})
            results.extend(_tabulate_module(request, target.module.name, wanted))
        return results


def _tabulate_module(
    request: StageRequest, module: str, wanted: list[dict[str, Any]]
) -> list[Entry | StageFailure]:
    """Import the module in a child process and call each function over its range.

    A child keeps the project's code, its prints and its crashes out of the build.
    """
    order = {"root": str(request.root), "module": module, "functions": wanted}
    child = subprocess.run(
        [sys.executable, "-P", "-m", "ppy_tabulate.evaluate"],
        input=json.dumps(order),
        capture_output=True,
        text=True,
        cwd=request.root,
        timeout=120,
        check=False,
    )
    if child.returncode != 0:
        return [
            StageFailure(
                module,
                w["qualname"],
                "tabulate-failed",
                f"importing or calling {module} failed (exit code {child.returncode})",
                "run the program under python to see the error",
                output=child.stderr,
            )
            for w in wanted
        ]
    tables = json.loads(child.stdout.splitlines()[-1])
    results: list[Entry | StageFailure] = []
    for w in wanted:
        table = tables[w["qualname"]]
        if isinstance(table, str):
            results.append(StageFailure(module, w["qualname"], "tabulate-failed", table))
            continue
        payload = json.dumps({"lo": w["lo"], "values": table}, separators=(",", ":"))
        results.append(
            Entry(
                module=module,
                qualname=w["qualname"],
                kind=TabulatePlugin.kind,
                inputs=(TensorSpec((), "int64", "n"),),
                outputs=(TensorSpec((), "int64", "result"),),
                platforms=("any",),
                payload={"table": payload.encode()},
                metadata={"lo": w["lo"], "hi": w["hi"], "plugin_version": TabulatePlugin.version},
            )
        )
    return results


#: The plugin satisfies core's contract; mypy checks this line.
_: type[Plugin] = TabulatePlugin
