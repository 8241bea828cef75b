"""tests/README.md maps every module of the four packages and every test file.

A module or test file added without its line is a map that lies by omission:
a reader looking for a module's tests, or a test's subject, finds nothing.
The files ``tests/conftest.py`` sends to the workers first are named by path
too, and checked the same way.
"""

from __future__ import annotations

from tests.conftest import LONGEST_FIRST, ROOT

MAP = ROOT / "tests" / "README.md"
#: Each package's source folder, as its section of the map names modules.
SOURCES = [
    ROOT / "packages/core/src/ppy",
    ROOT / "packages/plugin-jax/src/ppy_plugin_jax",
    ROOT / "packages/plugin-xla/src/ppy_plugin_xla",
    ROOT / "packages/runtime-pjrt/src/ppy_runtime_pjrt",
]


def unmapped(text: str) -> list[str]:
    """The modules and test files ``text`` (a map) does not name."""
    missing = []
    for source in SOURCES:
        for module in sorted(source.rglob("*.py")):
            relative = module.relative_to(source).as_posix()
            if (
                module.name != "__init__.py"
                and f"`{relative}`" not in text
                and (f"`{module.name}`" not in text)
            ):
                missing.append(f"{source.name}/{relative}")
    for test in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = test.relative_to(ROOT / "tests").as_posix()
        if "fixtures" not in test.parts and relative not in text and f"`{test.name}`" not in text:
            missing.append(f"tests/{relative}")
    return missing


def test_every_module_and_test_file_is_on_the_map() -> None:
    assert unmapped(MAP.read_text()) == []


def test_a_map_without_a_line_is_caught() -> None:
    text = MAP.read_text().replace("`worth.py`", "`worthless.py`")
    assert unmapped(text) == ["ppy_plugin_xla/worth.py"]


def test_the_files_sent_first_are_test_files_named_once() -> None:
    """``LONGEST_FIRST`` orders files by path: a file renamed or moved would
    silently go back to the end of the line."""
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert missing == []
