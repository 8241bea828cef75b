"""mkdocs hooks: the parts of the site that are read from the code and the results.

Markers in a page are replaced when the site is built, so the text cannot
drift from what it describes:

- ``<!-- ppy:policy-rules -->``: every policy rule with the reason and remedy
  the code gives, decided on samples by the real policy (``docs/rules.py``).
- ``<!-- ppy:benchmarks -->``: ``benchmarks/results/latest.md`` and the plots
  beside it; ``<!-- ppy:benchmarks-3.13 -->``: the table of the run on
  Python 3.13 (``benchmarks/results/python3.13/``). A missing results file
  fails the (strict) build.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _policy_rules() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import rules
    finally:
        sys.path.pop(0)
    return rules.table()


def _table(folder: Path) -> str:
    latest = folder / "latest.md"
    if not latest.is_file():
        raise FileNotFoundError(
            f"{latest} is missing: run the benchmark runner (see benchmarks/README.md) "
            "and commit its results"
        )
    return latest.read_text().strip()


def _benchmarks() -> str:
    plots = sorted(RESULTS.glob("*.png"))
    figures = [f"![{p.stem}](results/{p.name})" for p in plots]
    return "\n\n".join([_table(RESULTS), *figures])


MARKERS = {
    "<!-- ppy:policy-rules -->": _policy_rules,
    "<!-- ppy:benchmarks -->": _benchmarks,
    "<!-- ppy:benchmarks-3.13 -->": lambda: _table(RESULTS / "python3.13"),
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


def on_files(files: Any, config: Any) -> Any:
    """Serve the benchmark plots at ``results/NAME.png``, where the page links them."""
    from mkdocs.structure.files import File

    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/{plot.name}", abs_src_path=str(plot)))
    return files
