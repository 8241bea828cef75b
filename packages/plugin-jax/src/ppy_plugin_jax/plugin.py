"""The jax export plugin: what core needs to decide and stage ``@jax.jit`` functions.

This module is imported by every ``ppy build`` and must stay light: it never
imports jax. The trace itself happens in a worker process (``worker.py``)
started by ``stage``; see ``process.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

from ppy.config import Setting, validate_table
from ppy.decision import Check
from ppy.entry import Entry
from ppy.plugin import Requirements, StageFailure, StageRequest
from ppy.source import FunctionInfo, ModuleInfo

__all__ = ["PLATFORMS", "SETTINGS", "JaxExportPlugin"]

PLATFORMS = ("cpu", "cuda", "rocm", "tpu")

SETTINGS: Mapping[str, Setting] = {
    "allow-build-export": Setting(
        (bool,), False, "let the build import project modules and trace them with jax.export"
    ),
    "platforms": Setting(
        (list,),
        None,
        f"platforms to export for, any of {', '.join(PLATFORMS)}; "
        "default: the build machine's default jax backend",
    ),
    "export-timeout": Setting(
        (float,), 120.0, "seconds a module may take to import and export before it is stopped"
    ),
}

_STATIC_KEYWORDS = ("static_argnums", "static_argnames")

#: Distributions whose versions change what an export holds: jax itself and the
#: backend plugins that change the default platform.
_TOOLS = (
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "jax-cuda13-plugin",
    "jax-rocm6-plugin",
    "jax-rocm7-plugin",
    "libtpu",
)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


class JaxExportPlugin:
    name = "jax"
    kind = "jax.export"
    verb = "exported"
    decorators = frozenset({"jax.jit"})
    requirements = Requirements(
        build_execution=True,
        permission="allow-build-export",
        array_specs=True,
        differentiation="a serialized export carries no VJP, so jax.grad of it would fail",
    )

    def __init__(self) -> None:
        self.version = _version("ppy-plugin-jax")

    def validate_settings(self, table: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        from ppy.errors import ConfigError

        settings = validate_table(table, SETTINGS, path=path, prefix="tool.ppy.plugins.jax")
        platforms = settings["platforms"]
        if platforms is not None:
            bad = [p for p in platforms if p not in PLATFORMS]
            if bad or not platforms:
                raise ConfigError(
                    f"platforms {platforms!r} must be a non-empty list of {', '.join(PLATFORMS)}",
                    path=path,
                    key="tool.ppy.plugins.jax.platforms",
                )
            settings["platforms"] = sorted(set(platforms), key=PLATFORMS.index)
        if settings["export-timeout"] <= 0:
            raise ConfigError(
                f"export-timeout must be a number of seconds > 0, got {settings['export-timeout']}",
                path=path,
                key="tool.ppy.plugins.jax.export-timeout",
            )
        return settings

    def fingerprint(self, settings: Mapping[str, Any]) -> str:
        versions = ",".join(f"{t}={_version(t)}" for t in _TOOLS)
        return f"{versions};platforms={settings.get('platforms')}"

    def check(
        self, function: FunctionInfo, module: ModuleInfo, settings: Mapping[str, Any]
    ) -> Sequence[Check]:
        jit = next(d for d in function.decorators if d.name == "jax.jit")
        static = [k for k in jit.keywords if k in _STATIC_KEYWORDS]
        checks = [
            Check(
                "static-args",
                not static,
                f"static arguments ({', '.join(static)}) are compiled in per value, "
                "so one export cannot serve every call"
                if static
                else "no static arguments",
                "make the static value a module constant, or leave the function jitted"
                if static
                else None,
            )
        ]
        odd = [p for p in function.parameters if p.kind != "positional"]
        checks.append(
            Check(
                "parameter-kind",
                not odd,
                "keyword-only or variadic parameters cannot be described: "
                + ", ".join(f"{p.name} ({p.kind.replace('_', '-')})" for p in odd)
                if odd
                else "positional parameters only",
                "make them positional parameters with ppy.Shape and ppy.DType" if odd else None,
            )
        )
        checks.append(
            Check(
                "scope",
                function.scope == "module",
                f"a {function.scope} function is created at run time; only module-level "
                "functions are exported"
                if function.scope != "module"
                else "module-level function",
                "move it to module level" if function.scope != "module" else None,
            )
        )
        return checks

    def stage(self, request: StageRequest) -> Sequence[Entry | StageFailure]:
        from ppy_plugin_jax.process import export_in_worker

        return export_in_worker(request)
