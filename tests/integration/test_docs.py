"""The docs say what the code does: every log event the code emits is listed with its fields.

The events are read from the sources of the four distributions (every call
``<logger>.debug/info/warning/error("dotted.name", field=...)``) and from a real
build's JSON log, so an event added or a field renamed without its row in
docs/logging.md fails here.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {"debug", "info", "warning", "error", "exception"}
EVENT = re.compile(r"[a-z_]+(\.[a-z_]+)+")


def emitted() -> dict[str, set[str]]:
    """Event name -> every field name any call site passes with it."""
    events: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LEVELS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
                and EVENT.fullmatch(node.args[0].value)
            ):
                events[node.args[0].value].update(k.arg for k in node.keywords if k.arg)
    return dict(events)


EVENTS = emitted()


def rows(event: str) -> list[str]:
    text = (ROOT / "docs" / "logging.md").read_text()
    return [line for line in text.splitlines() if line.startswith("|") and f"`{event}`" in line]


def test_the_scan_finds_the_events_a_run_emits() -> None:
    assert {"build.decision", "run.bind", "run.fallback", "cache.hit"} <= set(EVENTS)


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_event_and_field_is_documented(event: str) -> None:
    found = rows(event)
    assert found, f"docs/logging.md has no row for `{event}`"
    fields = " ".join(row.split("|")[3] for row in found)
    missing = [f for f in sorted(EVENTS[event]) if not re.search(rf"\b{f}\b", fields)]
    assert not missing, f"docs/logging.md: `{event}` lacks fields {missing}"


def test_the_events_of_a_real_build_are_documented_with_their_fields(
    make_project: Callable[..., Path], ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """build.decision's fields come from a record, not keywords: read them from a build."""
    root = make_project(
        {
            "model.ppy": "from ppy import xla\n\n@xla.jit\ndef twice(n: int) -> int:\n"
            "    return 2 * n\n\nprint(twice(4))\n"
        },
        pyproject='[project]\nname = "demo"\n',
    )
    built = ppy("-vv", "--log-format", "json", "build", cwd=root)
    assert built.returncode == 0, built.stderr
    events = [json.loads(line) for line in built.stderr.splitlines() if line.startswith("{")]
    assert "build.decision" in {e["event"] for e in events}
    for event in events:
        found = rows(event["event"])
        assert found, f"docs/logging.md has no row for `{event['event']}`"
        documented = " ".join(row.split("|")[3] for row in found)
        fields = set(event) - {"event", "level", "timestamp"}
        missing = [f for f in sorted(fields) if not re.search(rf"\b{f}\b", documented)]
        assert not missing, f"docs/logging.md: `{event['event']}` lacks fields {missing}"


#: Where a variable's name is read: ``os.environ.get(NAME)``, ``os.getenv(NAME)``,
#: ``os.environ[NAME]``, ``NAME in os.environ``.
_LOOKUPS = {"get", "pop", "setdefault", "getenv"}
#: ppy's own variables, wherever their names are written.
_OWN = re.compile(r"(PPY|XDG)_[A-Z0-9_]+")
#: Modules that read or set variables named by data, not by ppy: a warm child
#: compares (and sets) what the server's imports of jax and numpy read (and
#: set). The page links where those names are listed, as given here.
_NAMED_BY_DATA = {
    "packages/core/src/ppy/warm/environment.py": "warm-start.md#the-key",
    "packages/core/src/ppy/warm/watch.py": "warm-start.md#the-key",
}


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def variables_read() -> dict[str, set[str]]:
    """Each environment variable the packages read -> the files that read it.

    A name is a string constant or a module-level constant holding one
    (``CACHE_ENV = "PPY_CACHE_DIR"``); a ``PPY_``/``XDG_`` name written
    anywhere counts as read. A read whose name cannot be told fails the test:
    its variable must be named on the page by hand and the scan taught it.
    """
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(ROOT))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        exported = {  # the names in ``__all__`` are Python's, not the environment's
            id(item)
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            for item in ast.walk(node.value)
        }
        for node in ast.walk(tree):
            named: ast.expr | None = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in _LOOKUPS:
                    if _is_environ(func.value) or func.attr == "getenv":
                        named = node.args[0]
                elif isinstance(func, ast.Name) and func.id == "getenv":
                    named = node.args[0]
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                named = node.slice
            elif isinstance(node, ast.Compare) and any(
                isinstance(op, ast.In | ast.NotIn) for op in node.ops
            ):
                if any(_is_environ(c) for c in node.comparators):
                    named = node.left
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _OWN.fullmatch(node.value)
                and id(node) not in exported
            ):
                found[node.value].add(where)
            if named is None:
                continue
            if isinstance(named, ast.Constant) and isinstance(named.value, str):
                found[named.value].add(where)
            elif isinstance(named, ast.Name) and named.id in constants:
                found[constants[named.id]].add(where)
            elif where not in _NAMED_BY_DATA:
                found[f"<unknown at {where}:{node.lineno}>"].add(where)
    return dict(found)


def test_the_scan_finds_the_variables_ppy_reads() -> None:
    found = variables_read()
    assert {"PPY_CACHE_DIR", "PPY_WARM", "NO_COLOR", "XDG_RUNTIME_DIR"} <= set(found), found


def test_every_environment_variable_ppy_reads_is_on_one_page() -> None:
    """docs/environment.md names each, ``ppy --help`` points to it, and the
    site lists it."""
    page = (ROOT / "docs" / "environment.md").read_text()
    missing = {
        name: sorted(files) for name, files in variables_read().items() if f"`{name}`" not in page
    }
    assert not missing, f"docs/environment.md does not name {missing}"
    for where, listed in _NAMED_BY_DATA.items():
        assert f"({listed})" in page, f"docs/environment.md links {listed} for {where}"
    assert "environment.md" in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.parametrize(("value", "coloured"), [(None, True), ("", True), ("1", False)])
def test_no_color_is_what_the_docs_say_it_is(
    value: str | None, coloured: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https://no-color.org: set and not empty turns colour off; set but empty
    is as if unset. The docs say so, and the log does so on a real terminal."""
    import os
    import pty

    from ppy.log import _colors

    for page in ("cli.md", "environment.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        assert "`NO_COLOR` is set and not empty" in text or "set and not empty" in text, page
        assert "set to anything" not in text, page
    monkeypatch.setenv("TERM", "xterm")
    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    leader, follower = pty.openpty()
    try:
        with open(follower, "w", closefd=False) as terminal:
            assert _colors(terminal) is coloured
    finally:
        os.close(leader)
        os.close(follower)


#: The configurations behind each error config.md shows, in its order.
CONFIG_ERRORS = (
    '[tool.ppy]\nbuild-execution "allow"\n',
    '[tool.ppy]\nbuild_execution = "allow"\n',
    "[tool.ppy]\nbuild-execution = true\n",
    '[tool.ppy]\nbuild-execution = "yes"\n',
    '[tool.ppy]\nplugins = ["jax"]\n',
    "[tool.ppy.plugins]\njax = true\n",
)


def test_the_configuration_errors_config_md_shows_are_what_ppy_says(tmp_path: Path) -> None:
    from ppy.config import load_config
    from ppy.errors import ConfigError

    text = (ROOT / "docs" / "config.md").read_text()
    section = text[text.index("## Errors") :]
    shown = section[section.index("```\n") + 4 :]
    shown = shown[: shown.index("```")].splitlines()
    said = []
    for pyproject in CONFIG_ERRORS:
        (tmp_path / "pyproject.toml").write_text(pyproject)
        with pytest.raises(ConfigError) as raised:
            load_config(tmp_path)
        message = str(raised.value).splitlines()[0]
        said.append(message.replace(str(tmp_path / "pyproject.toml"), "/p/pyproject.toml"))
    assert shown == said


_FENCED = re.compile(r"^```.*?^```", re.S | re.M)


@pytest.mark.parametrize(
    "page",
    sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])
    + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*/README.md")),
)
def test_no_table_is_broken_by_a_blank_line(page: str) -> None:
    """A row after a blank line starts a new table, which needs a header and a
    separator: without them the row renders as stray pipes."""
    lines = _FENCED.sub("", (ROOT / page).read_text()).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].strip()):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", following.strip()), (page, line)
