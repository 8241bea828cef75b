"""Every example under examples/ prints the same under ``python`` and ``ppy run``.

Each numbered example (``examples/NN_name/model.ppy``) is copied, run under
plain Python and built once with ``ppy build`` for the session
(``built_examples``, shared with the other tests of that example), then run
with ``ppy run``, cold and warm, in the test's own copy of the build: stdout
must be identical and something must have been bound. The third-party plugin example is
installed for real with pip and used by a project of its own.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import (
    EXAMPLE_OUTPUTS,
    EXAMPLES,
    ON_ACCELERATOR,
    ROOT,
    BuiltExample,
    cpu_backend,
    models,
    pip_install_target,
    run_ppy,
    stop_servers,
    uses_host_devices,
    uses_model_library,
)
from tests.support.events import json_events

NUMBERED = sorted(
    p
    for p in EXAMPLES.iterdir()
    if re.fullmatch(r"\d\d_\w+", p.name) and (p / "model.ppy").is_file()
)
#: Each example, marked ``models`` where it imports a model library, and
#: ``cpu_backend`` where it asks for several host devices.
EACH = [
    pytest.param(
        p,
        id=p.name,
        marks=[
            *([models] if uses_model_library(p) else []),
            *([cpu_backend] if uses_host_devices(p) else []),
        ],
    )
    for p in NUMBERED
]
CONDITIONS = ("captured", "config", "device")
IGNORE = EXAMPLE_OUTPUTS
#: Examples 70-75 with every ppy and jaxtyping annotation taken out, one
#: project of six programs, by the example each was copied from.
UNANNOTATED = ROOT / "tests" / "record" / "unannotated"
COPIES = {
    "70_namedtuple_mlp": "namedtuple_mlp",
    "71_optax_training": "optax_training",
    "72_flax_linen": "flax_linen",
    "73_flax_nnx": "flax_nnx",
    "74_equinox": "equinox_mlp",
    "75_jaxtyping": "jaxtyping_classifier",
}


def _python(program: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, program.name],
        cwd=program.parent,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=False,
    )


def _bound(stderr: str) -> set[str]:
    return {str(e["function"]) for e in json_events(stderr, "run.bind")}


def test_every_numbered_example_has_a_readme_and_a_pyproject() -> None:
    assert len(NUMBERED) >= 6
    for folder in NUMBERED:
        assert (folder / "pyproject.toml").is_file(), folder
        readme = (folder / "README.md").read_text()
        assert "python model.ppy" in readme and "ppy run model.ppy" in readme, folder


@dataclass(frozen=True)
class ExampleRun:
    """An example built for the session, copied, and run once with ``ppy -vv
    --log-format json run model.ppy``, cold, with a cache of its own."""

    folder: Path
    cache: Path
    staged: subprocess.CompletedProcess[str]

    def ppy(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_ppy(*args, cwd=self.folder, env={"PPY_CACHE_DIR": str(self.cache)})


@pytest.fixture(scope="module")
def example_runs(
    built_examples: Callable[[str], BuiltExample], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], ExampleRun]:
    """``example_runs(name)``: the example's first ``ppy run``, made once for
    the tests of this file that read it (what it prints, what it logs)."""
    runs: dict[str, ExampleRun] = {}

    def get(name: str) -> ExampleRun:
        if name not in runs:
            base = tmp_path_factory.mktemp(f"run-{name}")
            folder = built_examples(name).copy(base)
            cache = base / "cache"
            # -vv: the cache events are debug events.
            staged = run_ppy(
                "-vv", "--log-format", "json", "run", "model.ppy",
                cwd=folder, env={"PPY_CACHE_DIR": str(cache)},
            )  # fmt: skip
            runs[name] = ExampleRun(folder, cache, staged)
        return runs[name]

    return get


@pytest.mark.parametrize("example", EACH)
def test_ppy_run_prints_what_python_prints(
    example: Path,
    built_examples: Callable[[str], BuiltExample],
    example_runs: Callable[[str], ExampleRun],
) -> None:
    shared = built_examples(example.name)
    plain, built = shared.plain, shared.build
    assert plain.returncode == 0, plain.stderr
    assert built.returncode == 0, built.stdout + built.stderr
    run = example_runs(example.name)
    program = run.folder / "model.ppy"
    staged = run.staged
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout == plain.stdout
    assert _bound(staged.stderr), "nothing was staged and bound"
    # An example's program changes nothing its traces read: none may fall
    # back for a captured value or the configuration.
    odd = [e for e in json_events(staged.stderr, "run.fallback") if e["category"] in CONDITIONS]
    assert not odd, odd
    # From a warm server, what the first run compiled that stayed unstaged
    # (eager ops, unstaged jits) is loaded from the cache; an eager op is not
    # even lowered. A quiet run prints the warnings: this one has none.
    try:
        warm = run.ppy("-vv", "--log-format", "json", "run", "--warm", "model.ppy")
    finally:
        stop_servers(run.cache)
    assert warm.stdout == plain.stdout
    loud = [e for e in json_events(warm.stderr, "") if e["level"] not in ("debug", "info")]
    assert not loud, "a run with a current artifact should say nothing"
    assert not [line for line in warm.stderr.splitlines() if not line.startswith("{")]
    compiled = json_events(staged.stderr, "cache.unstaged")
    loaded = json_events(warm.stderr, "cache.unstaged")
    assert len(loaded) == len(compiled)
    assert all(e["source"] == "cache" for e in loaded), loaded
    if "import jax" in program.read_text():  # a program of jax does eager ops
        assert compiled and any(not e["lowered"] for e in loaded), loaded
    if not ON_ACCELERATOR:
        readme = (example / "README.md").read_text()
        assert plain.stdout.strip() in readme, "the README shows what the example prints"


#: An outcome word between the columns of a build line.
_OUTCOME = re.compile(
    r"(?:^|\S {2,})(?:exported|compiled|tabulated|reused|stays)(?: {2,}| \.\.\.|$)"
)
#: An event as the console shows it: ``run.fallback category=dtype reason='...'``.
_EVENT = re.compile(
    r"((?:build|run|record|cache|registry)\.[a-z_]+)((?: [a-z_]+=(?:'[^']*'|\"[^\"]*\"|\S+))*)"
)
_FIELD = re.compile(r" ([a-z_]+)=('[^']*'|\"[^\"]*\"|\S+)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)


def _quotes(text: str) -> tuple[list[str], list[str]]:
    """The build lines and the log events a page quotes: inline code, and
    comments after a command in a code block (``ppy build  # model  f  ...``)."""
    comments = [
        line.split("#", 1)[1].strip()
        for block in _FENCE.findall(text)
        for line in block.splitlines()
        if line.startswith(("ppy ", "$ ppy ")) and "#" in line
    ]
    spans = [" ".join(s.split("\n")) for s in re.findall(r"`([^`]+)`", _FENCE.sub("", text))]
    spans += comments
    lines = [s for s in spans if "  " in s and _OUTCOME.search(s)]
    events = [s for s in spans if _EVENT.fullmatch(s)]
    return lines, events


def _printed(quote: str, lines: list[str]) -> bool:
    """Whether a line printed holds ``quote``, ``...`` standing for anything."""
    pieces = " ".join(quote.split()).split("...")
    pattern = re.compile(".*?".join(re.escape(p) for p in pieces))
    return any(pattern.search(" ".join(line.split())) for line in lines)


def _logged(quote: str, events: list[dict[str, object]]) -> bool:
    """Whether an event has the quoted name and every quoted field's value."""
    match = _EVENT.fullmatch(quote)
    assert match is not None
    fields = {
        key: ast.literal_eval(value) if value[0] in "'\"" else value
        for key, value in _FIELD.findall(match.group(2))
    }
    return any(
        e["event"] == match.group(1)
        and all(k in e and str(v) in (str(e[k]), json.dumps(e[k])) for k, v in fields.items())
        for e in events
    )


#: Events a README quotes of a situation its example's own run never meets
#: (another input, another install), and the test that meets it: its source
#: holds the quoted values.
ELSEWHERE = {
    ("50_runtime_only", "run.stale"): "tests/runtime_only/check.py",
    ("60_sharded", "run.fallback category=sharding"): "tests/fidelity/test_sharded.py",
    (
        "71_optax_training",
        "run.fallback category=dtype reason=\"params['w'] is a weakly typed float32 (made from "
        'a Python scalar)"',
    ): "tests/programs/test_scalars.py::"
    "test_a_weakly_typed_leaf_in_a_call_of_a_strongly_typed_example_takes_jits_path",
    ("85_main_block", "run.fallback"): "tests/record/test_live.py::"
    "test_another_step_size_in_the_run_falls_back_naming_what_changed",
}


def _pinned(quote: str, where: str) -> bool:
    path, _, name = where.partition("::")
    source = (ROOT / path).read_text()
    match = _EVENT.fullmatch(quote)
    assert match is not None
    values = [v.strip("'\"") for _, v in _FIELD.findall(match.group(2))] or [match.group(1)]
    return (not name or f"def {name}(" in source) and all(v in source for v in values)


@pytest.mark.parametrize("example", EACH)
def test_the_readme_quotes_what_ppy_prints(
    example: Path,
    built_examples: Callable[[str], BuiltExample],
    example_runs: Callable[[str], ExampleRun],
) -> None:
    """Every build line and log event an example's README quotes is one the
    example's build (``ppy build``, ``ppy -v build``) or its ``ppy -v run``
    printed; ``...`` in a quote stands for what it leaves out."""
    lines, events = _quotes((example / "README.md").read_text())
    build = built_examples(example.name).build
    wrong = [q for q in lines if not _printed(q, build.stdout.splitlines())]
    for quote in events:
        where = ELSEWHERE.get((example.name, quote))
        if where is not None:
            if not _pinned(quote, where):
                wrong.append(f"{quote} (not what {where} checks)")
            continue
        if quote.startswith("build."):
            logged = json_events(build.stderr, "")
        else:
            logged = json_events(example_runs(example.name).staged.stderr, "")
        if not _logged(quote, logged):
            wrong.append(quote)
    assert not wrong, "the README quotes what ppy does not print:\n" + "\n".join(wrong)


def test_the_recorded_example_stages_step_at_its_recorded_sizes(
    built_examples: Callable[[str], BuiltExample],
) -> None:
    """The recorded training step's symbol is not faithful on this jax: it is
    staged at the sizes its recording saw, and the README quotes the line."""
    build = built_examples("80_recorded").build
    assert build.returncode == 0, build.stdout + build.stderr
    (step,) = [line for line in build.stdout.splitlines() if line.startswith("model  step ")]
    said = step.split(" -> ")[-1].split(")  ", 1)[-1]
    assert said.startswith("exported for cpu"), step
    assert said in (EXAMPLES / "80_recorded" / "README.md").read_text(), said
    assert _staged(build.stdout) == {"step", "accuracy"}


def _staged(report: str) -> set[str]:
    """The functions a build report says are staged."""
    rows = [line.split() for line in report.splitlines()]
    return {row[1] for row in rows if len(row) > 2 and row[2] in ("exported", "compiled")}


@models
def test_unannotated_copies_of_the_examples_stage_from_a_recording_what_the_examples_stage(
    tmp_path: Path,
    ppy: Callable[..., subprocess.CompletedProcess[str]],
    built_examples: Callable[[str], BuiltExample],
    cache_dir: Path,
) -> None:
    """``ppy record`` then ``ppy build`` stages, with no annotation at all, every
    function its annotated example stages, and the runs (from one warm server)
    take the staged path."""
    project = tmp_path / "unannotated"
    shutil.copytree(UNANNOTATED, project, ignore=IGNORE)
    for example, copy in COPIES.items():
        recorded = ppy("record", f"{copy}.ppy", cwd=project)
        assert (recorded.returncode, recorded.stdout) == (0, built_examples(example).plain.stdout)
    built = ppy("build", cwd=project)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "recorded:" in built.stdout
    try:
        for example, copy in COPIES.items():
            annotated = _staged(built_examples(example).build.stdout)
            own = [line for line in built.stdout.splitlines() if line.startswith(f"{copy} ")]
            assert _staged("\n".join(own)) == annotated, (example, own)
            run = ppy("-v", "--log-format", "json", "run", "--warm", f"{copy}.ppy", cwd=project)
            assert (run.returncode, run.stdout) == (0, built_examples(example).plain.stdout)
            calls = json_events(run.stderr, "run.call")
            assert {str(e["function"]) for e in calls if e["path"] == "staged"} == annotated
    finally:
        stop_servers(cache_dir)


def test_the_third_party_plugin_example_installs_builds_and_runs(
    tmp_path: Path, ppy: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    source = tmp_path / "plugin"
    shutil.copytree(EXAMPLES / "third_party_plugin", source, ignore=IGNORE)
    site = tmp_path / "site"
    pip_install_target(site, source)
    env = {"PYTHONPATH": str(site)}
    listed = ppy("plugins", **env)
    assert "ppy-plugin-tabulate 0.1.0" in listed.stdout and "FAILED" not in listed.stdout
    project = source / "project"
    plain = _python(project / "model.ppy", **env)
    assert plain.returncode == 0, plain.stderr
    built = ppy("build", cwd=project, **env)
    assert built.returncode == 0, built.stdout + built.stderr
    line = next(ln for ln in built.stdout.splitlines() if " collatz_steps " in ln)
    assert "tabulated" in line and "tabulate.table" in line, line
    quoted, _ = _quotes((source / "README.md").read_text())
    assert quoted and all(_printed(q, built.stdout.splitlines()) for q in quoted), quoted
    staged = ppy("-v", "--log-format", "json", "run", "model.ppy", cwd=project, **env)
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout == plain.stdout
    assert _bound(staged.stderr) == {"collatz_steps"}
    # Without the permission the plugin's function stays, and the build says why.
    (project / "pyproject.toml").write_text('[project]\nname = "tabulate-example"\n')
    denied = ppy("build", cwd=project, **env)
    assert " stays " in denied.stdout, denied.stdout
    assert 'build-execution is not "allow"' in denied.stdout, denied.stdout


#: Docs pages that show an example's build: the example, and whether the page
#: shows the whole output (``$ ppy build`` and every line after it) or some lines.
DOC_BUILDS = {
    "getting-started.md": ("25_jax_export", "whole"),
    "plugin-xla.md": ("40_xla_scalar", "lines"),
}


@pytest.mark.parametrize("page", sorted(DOC_BUILDS))
def test_the_docs_show_what_the_examples_build_prints(
    page: str, built_examples: Callable[[str], BuiltExample]
) -> None:
    name, how = DOC_BUILDS[page]
    shared = built_examples(name)
    printed = shared.build.stdout.replace(str(shared.folder), f"/path/to/examples/{name}")
    blocks = [
        block.splitlines()
        for block in _FENCE.findall((ROOT / "docs" / page).read_text())
        if block.startswith("$ ppy build\n")
        or any(_OUTCOME.search(ln) for ln in block.splitlines())
    ]
    assert blocks, f"docs/{page} shows no build of {name}"
    for block in blocks:
        if how == "whole":
            assert block == ["$ ppy build", *printed.splitlines()]
        else:  # a line out of the table: its columns padded for itself alone
            shown = {" ".join(line.split()) for line in printed.splitlines()}
            assert {" ".join(line.split()) for line in block} <= shown, block
