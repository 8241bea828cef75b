"""The policy rules as the code words them, for the site's policy page.

Each rule gets a small project that fails it; the real discovery, policy and
the shipped plugins decide it, and the page shows the reason and remedy they
produced. If a sample no longer fails the rule it stands for, or a rule has
no sample, building the site fails: the page cannot drift from the code.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

GRANTED = (
    '[tool.ppy]\nbuild-execution = "allow"\n[tool.ppy.plugins.jax]\nallow-build-export = true\n'
)
HEAD = "from typing import Annotated\nimport jax\nimport ppy\nfrom ppy import xla\n"
X = 'x: Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]'

#: rule -> (the pyproject's [tool.ppy] tables, the module's source after HEAD)
SAMPLES: dict[str, tuple[str, str]] = {
    "no-plugin": (GRANTED, f"@jax.jit\ndef score({X}):\n    return x\n"),
    "build-execution": ("", f"@jax.jit\ndef score({X}):\n    return x\n"),
    "plugin-permission": (
        '[tool.ppy]\nbuild-execution = "allow"\n',
        f"@jax.jit\ndef score({X}):\n    return x\n",
    ),
    "package-init": (GRANTED, f"@jax.jit\ndef score({X}):\n    return x\n"),
    "redefined": (
        GRANTED,
        f"@jax.jit\ndef score({X}):\n    return x\n@jax.jit\ndef score({X}):\n    return -x\n",
    ),
    "invalid-spec": (
        GRANTED,
        "n = 4\n@jax.jit\ndef score(x: Annotated[jax.Array, ppy.Shape(n)]):\n    return x\n",
    ),
    "missing-shape": (GRANTED, "@jax.jit\ndef score(x):\n    return x\n"),
    "missing-dtype": (
        GRANTED,
        '@jax.jit\ndef score(x: Annotated[jax.Array, ppy.Shape("B")]):\n    return x\n',
    ),
    "differentiated": (
        GRANTED,
        f"@jax.jit\ndef loss({X}):\n    return x.sum()\ng = jax.jacrev(loss)\n",
    ),
    "allowed": (GRANTED, f"@jax.jit\ndef score({X}):\n    return x\n"),
    "static-args": (
        GRANTED,
        "from functools import partial\n"
        f"@partial(jax.jit, static_argnums=1)\ndef score({X}, n):\n    return x * n\n",
    ),
    "parameter-kind": (GRANTED, f"@jax.jit\ndef score({X}, *rest):\n    return x\n"),
    "library-jit": (
        GRANTED,
        "import equinox as eqx\n@eqx.filter_jit\ndef score(model, x):\n    return model(x)\n",
    ),
    "scope": (
        GRANTED,
        f"class Model:\n    @jax.jit\n    def score(self, {X}):\n        return x\n",
    ),
    "xla-unsupported": ("", '@xla.jit\ndef name(n: int) -> int:\n    return len("abc")\n'),
    "xla-type": ("", "@xla.jit\ndef half(n: int) -> int:\n    return n / 2\n"),
    "not-worth-staging": ("", "@xla.jit\ndef double(x: float) -> float:\n    return x * 2.0\n"),
}


#: Where a sample's module lies, where not at the root as model.ppy.
PATHS: dict[str, str] = {"package-init": "pkg/__init__.ppy"}


def _plugins(rule: str = "") -> dict[str, object]:
    from dataclasses import replace

    from ppy_plugin_jax.plugin import JaxExportPlugin
    from ppy_plugin_xla.plugin import XlaScalarPlugin

    jax, xla = JaxExportPlugin(), XlaScalarPlugin()
    if rule == "differentiated":
        # The jax plugin serves every transform, so only a plugin serving
        # fewer fails this rule: the page shows one that serves jax.grad only.
        jax.requirements = replace(  # type: ignore[misc]
            jax.requirements,
            differentiation="its export's VJP serves jax.grad only",
            differentiable=frozenset({"jax.grad"}),
        )
    return {"jax.jit": jax, "ppy.xla.jit": xla}


def _decide(rule: str, pyproject: str, source: str) -> tuple[str, str, str]:
    from ppy.build.policy import decide
    from ppy.config import load_config
    from ppy.discovery.module import discover_source

    plugins = {} if rule == "no-plugin" else _plugins(rule)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text('[project]\nname = "demo"\n' + pyproject)
        config = load_config(root)
        settings = {
            p.name: p.validate_settings(config.plugins.get(p.name, {}), str(config.config_path))  # type: ignore[attr-defined]
            for p in _plugins().values()
        }
        path = PATHS.get(rule, "model.ppy")
        name = path.removesuffix(".ppy").replace("/__init__", "").replace("/", ".")
        module = discover_source(HEAD + source, module=name, path=path)
        decision = next(
            d
            for f in module.functions
            if (d := decide(f, module, config, plugins, settings)) is not None  # type: ignore[arg-type]
        )
        remedy = (decision.remedy or "").replace(str(root), "/p")
    if decision.rule != rule:
        raise RuntimeError(
            f"docs/rules.py: the sample for {rule!r} is decided by {decision.rule!r}: "
            f"{decision.reason}; fix the sample or the policy page"
        )
    return decision.reason.replace(str(root), "/p"), remedy, decision.plugin or ""


def table() -> str:
    """The Markdown table: rule, what it checks, and the reason and remedy the code gives."""
    from ppy.build.policy import RULES

    missing = [rule for rule in RULES if rule not in SAMPLES]
    if missing:
        raise RuntimeError(f"docs/rules.py has no sample for the policy rules {missing}")
    rows = ["| rule | checks | reason, for example | remedy |", "| --- | --- | --- | --- |"]
    for rule, (pyproject, source) in SAMPLES.items():
        reason, remedy, plugin = _decide(rule, pyproject, source)
        checks = RULES.get(rule, f"the {plugin} plugin's own rule (`Plugin.check`)")
        cell = lambda text: text.replace("|", "\\|").replace("\n", " ")  # noqa: E731
        rows.append(f"| `{rule}` | {cell(checks)} | {cell(reason)} | {cell(remedy) or '-'} |")
    return "\n".join(rows)
