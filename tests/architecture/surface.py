"""An import-linter contract type: packages that reach core only through its public surface.

``forbidden`` would list core's internal modules, a list to keep in step by
hand each time core grows a module. This contract lists what is allowed
instead: every import of ``core`` (or of a module in it) made anywhere in
``packages`` -- at module level, inside a function, under ``TYPE_CHECKING``
-- must name a module that one of ``allowed`` matches. grimp, which builds
the graph, reads every import statement of a module, not only those at its
top, so an import deferred for start-up speed is checked like any other.

The root ``pyproject.toml`` declares the contract (``[tool.importlinter]``);
``nox -s lint`` runs ``lint-imports``, and ``tests/architecture/test_surface.py``
runs it on the repository and on a fixture plugin that breaks it.
"""

from __future__ import annotations

from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.helpers import module_expressions_to_modules

__all__ = ["SurfaceContract"]


class SurfaceContract(Contract):
    """Options: ``packages`` (the importing packages), ``core`` (the package
    whose surface they must keep to) and ``allowed`` (module expressions:
    ``ppy.plugin``, ``ppy.kinds.*``)."""

    type_name = "surface"

    packages = fields.ListField(subfield=fields.StringField())
    core = fields.StringField()
    allowed = fields.ListField(subfield=fields.ModuleExpressionField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        core: str = self.core  # type: ignore[assignment]  # a field, set from the options
        packages: list[str] = self.packages  # type: ignore[assignment]
        allowed = {m.name for m in module_expressions_to_modules(graph, self.allowed)}  # type: ignore[arg-type]
        broken: list[dict[str, Any]] = []
        for package in packages:
            for importer in sorted({package, *graph.find_descendants(package)}):
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if imported != core and not imported.startswith(f"{core}."):
                        continue
                    if imported in allowed:
                        continue
                    for detail in graph.get_import_details(importer=importer, imported=imported):
                        broken.append(
                            {
                                "importer": importer,
                                "imported": imported,
                                "line_number": detail["line_number"],
                                "line_contents": detail["line_contents"],
                            }
                        )
        return ContractCheck(
            kept=not broken,
            metadata={"broken": broken, "allowed": sorted(str(e) for e in self.allowed)},  # type: ignore[attr-defined]
        )

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            output.print_error(
                f"{item['importer']}:{item['line_number']} imports {item['imported']}"
                f" ({item['line_contents']})",
                bold=False,
            )
        output.new_line()
        output.print(
            f"{', '.join(self.packages)} may import only these of {self.core}: "  # type: ignore[arg-type]
            f"{', '.join(check.metadata['allowed'])}. What a plugin or runtime needs of core "
            "is re-exported there (docs/plugins.md); add it there, not a way around it."
        )
