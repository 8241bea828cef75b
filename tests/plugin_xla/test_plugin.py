"""The plugin's decisions: what compiles, what stays Python and why, with file:line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from ppy.discovery.module import discover_source
from ppy.errors import ConfigError
from ppy.plugin import Plugin, StageRequest, StageTarget
from ppy_plugin_xla.plugin import XlaScalarPlugin


def _checks(source: str, name: str = "f"):
    module = discover_source(textwrap.dedent(source), module="m", path="m.ppy")
    function = next(f for f in module.functions if f.qualname == name)
    return XlaScalarPlugin().check(function, module, {})


def _failure(source: str, name: str = "f"):
    checks = _checks(source, name)
    assert len(checks) == 1 and not checks[0].passed, checks
    return checks[0]


HEADER = "from ppy import xla\n\n"


def test_plugin_satisfies_the_protocol_and_needs_no_build_execution() -> None:
    plugin = XlaScalarPlugin()
    assert isinstance(plugin, Plugin)
    assert plugin.requirements.build_execution is False
    assert plugin.decorators == frozenset({"ppy.xla.jit"})
    assert (plugin.name, plugin.kind, plugin.verb) == ("xla", "xla.scalar", "compiled")
    check = _checks(HEADER + "@xla.jit\ndef f(x: float) -> float:\n    return x * 2.0\n")[0]
    assert check.passed and "no build-time execution" in check.detail


def test_unknown_setting_is_rejected_with_its_key() -> None:
    with pytest.raises(ConfigError) as info:
        XlaScalarPlugin().validate_settings({"fast": True}, "pyproject.toml")
    assert info.value.key == "tool.ppy.plugins.xla.fast"
    assert XlaScalarPlugin().validate_settings({}, "pyproject.toml") == {"force-staging": False}


@pytest.mark.parametrize("value", ["yes", 1, 0.0, None])
def test_force_staging_takes_only_a_boolean(value: object) -> None:
    with pytest.raises(ConfigError, match="wanted a boolean") as info:
        XlaScalarPlugin().validate_settings({"force-staging": value}, "pyproject.toml")
    assert info.value.key == "tool.ppy.plugins.xla.force-staging"


@pytest.mark.parametrize(
    "body,line,words",
    [
        ("    s = 'text'\n    return x", 6, "str literal"),
        ("    xs = [x]\n    return x", 6, "a list"),
        ("    print(x)\n    return x", 6, "print(x)"),
        ("    return f(x - 1.0)", 6, "recursion"),
        ("    y = x\n    for c in 'ab':\n        y += 1.0\n    return y", 7, "for loop over"),
        ("    global COUNTER\n    return x", 6, "global"),
        ("    return x + COUNTER", 6, "'COUNTER'"),
        ("    return math.exp(x)", 6, "math.exp"),
        ("    return math.log(x, 10.0)", 6, "math.log: XLA's CPU result differs"),
        ("    return math.sin(x) + 1.0", 6, "math.sin: XLA's CPU result differs"),
        ("    return math.cos(x) + 1.0", 6, "math.cos: XLA's CPU result differs"),
        ("    try:\n        return x\n    except ValueError:\n        return 0.0", 6, "try"),
    ],
)
def test_first_unsupported_construct_is_named_with_file_and_line(body, line, words) -> None:
    head = "import math\nfrom ppy import xla\nCOUNTER = 0\n@xla.jit\ndef f(x: float) -> float:\n"
    source = f"{head}{body}\nCOUNTER += 1\n"
    check = _failure(source)
    assert check.rule == "xla-unsupported"
    assert check.detail.startswith(f"m.ppy:{line}:"), check.detail
    assert words in check.detail, check.detail


@pytest.mark.parametrize(
    "source,line,words",
    [
        ("@xla.jit\ndef f(x: float) -> int:\n    return x\n", 5, "returns float"),
        (
            "@xla.jit\ndef f(x: int) -> int:\n    y = 1\n    y = 0.5\n    return y\n",
            6,
            "changes type",
        ),
        (
            "@xla.jit\ndef f(x: int) -> float:\n    t: float = 0\n    return t\n",
            5,
            "annotated float",
        ),
        ("@xla.jit\ndef f(x: int) -> int:\n    return min(x, 1.0)\n", 5, "min() of float and int"),
        ("@xla.jit\ndef f(x: int) -> int:\n    return x and 1\n", 5, "'and' on a int"),
        ("@xla.jit\ndef f(x: list) -> int:\n    return 1\n", 4, "annotated list"),
        (
            "@xla.jit\ndef g(x: float) -> float:\n    return x\n@xla.jit\ndef f(x: int) -> float:\n"
            "    return g(x)\n",
            8,
            "g() takes x: float but is given int",
        ),
    ],
)
def test_type_errors_are_decisions_with_file_and_line(source, line, words) -> None:
    check = _failure(HEADER + source)
    assert check.rule == "xla-type", check
    assert check.detail.startswith(f"m.ppy:{line}:"), check.detail
    assert words in check.detail, check.detail


def test_stage_writes_a_scalar_entry_with_stablehlo_text() -> None:
    source = (
        HEADER
        + "@xla.jit\ndef f(x: float, n: int, b: bool) -> float:\n    return x * n if b else x\n"
    )
    module = discover_source(source, module="m", path="m.ppy")
    plugin = XlaScalarPlugin()
    request = StageRequest(
        root=__import__("pathlib").Path("."),
        settings={},
        targets=(StageTarget(module, module.functions),),
    )
    (entry,) = plugin.stage(request)
    assert entry.kind == "xla.scalar" and entry.platforms == ("cpu",)
    assert [(s.name, s.dtype, s.dims) for s in entry.inputs] == [
        ("x", "float64", ()),
        ("n", "int64", ()),
        ("b", "bool", ()),
    ]
    assert [s.dtype for s in entry.outputs] == ["float64", "bool"]
    assert entry.metadata["result_type"] == "float"
    assert entry.metadata["param_types"] == ["float", "int", "bool"]
    text = entry.payload["stablehlo"].decode()
    assert "func.func public @main" in text and "tensor<f64>" in text


def test_the_compiler_never_imports_jax() -> None:
    program = textwrap.dedent(
        '''
        import sys
        from ppy.discovery.module import discover_source
        from ppy_plugin_xla.plugin import XlaScalarPlugin
        source = """
        import math
        from ppy import xla
        @xla.jit
        def f(x: float, n: int) -> float:
            t = 0.0
            for i in range(n):
                t += math.sqrt(x) ** i
            return t
        """
        module = discover_source(source, module="m", path="m.ppy")
        checks = XlaScalarPlugin().check(module.functions[0], module, {})
        assert all(check.passed for check in checks), checks
        loaded = sorted(m for m in sys.modules if m == "jax" or m.startswith(("jax.", "jaxlib")))
        print("loaded:", loaded)
        assert not loaded
        '''
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


TWICE = """\
def twice_jit(fn):
    def run(x):
        return fn(fn(x))
    return run

"""


@pytest.mark.parametrize(
    "decorators", ["@twice_jit\n@xla.jit\n", "@xla.jit\n@twice_jit\n"], ids=["outer", "inner"]
)
def test_another_decorator_keeps_the_function_python(decorators: str, tmp_path) -> None:
    """Only ``xla.jit`` itself counts: a name that merely ends in "jit" changes
    what the call does, and the compiled body alone would lose it."""
    source = HEADER + TWICE + decorators + "def f(x: int) -> int:\n    return x * 2\n"
    check = _failure(source)
    assert check.rule == "xla-unsupported"
    assert "@twice_jit besides @xla.jit" in check.detail, check.detail

    from tests.conftest import run_ppy

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "twice"\n')
    (tmp_path / "model.ppy").write_text(source + "\nprint(f(1))\n")
    plain = subprocess.run(
        [sys.executable, "model.ppy"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    staged = run_ppy("run", "model.ppy", cwd=tmp_path)
    assert (staged.returncode, staged.stdout) == (0, plain.stdout) == (0, "4\n"), staged.stderr


def test_the_smallest_int64_literal_compiles() -> None:
    from tests.plugin_xla.harness import bind_module, check

    source = HEADER + (
        "@xla.jit\ndef f(x: int) -> int:\n"
        "    return -9223372036854775808 if x else -9223372036854775807 - 1\n"
    )
    staged = bind_module(source)["f"]
    for x in (0, 1):
        check(staged, x)


#: Locals assigned only where control never reaches: Python runs these fine.
DEAD_CODE = {
    "after a break": (
        "def f(x: int) -> int:\n    for i in range(x):\n        break\n        y = 2\n"
        "    return x\n",
        (0, 3),
    ),
    "under a test that folds to False, in a while": (
        "def f(x: int) -> int:\n    while x > 0:\n        x -= 1\n        if False:\n"
        "            y = 1.0\n    return x\n",
        (0, 5),
    ),
    "read where Python raises UnboundLocalError": (
        "def f(x: int) -> int:\n    t = 0\n    for i in range(x):\n        if i > 100:\n"
        "            t += y\n        if 1 > 2:\n            y = 1\n    return t\n",
        (0, 3, 200),
    ),
}


@pytest.mark.parametrize("case", list(DEAD_CODE))
def test_a_local_assigned_only_in_dead_code_compiles(case: str) -> None:
    from tests.plugin_xla.harness import bind_module, check

    source, inputs = DEAD_CODE[case]
    staged = bind_module(HEADER + "@xla.jit\n" + source)["f"]
    for x in inputs:
        check(staged, x)
