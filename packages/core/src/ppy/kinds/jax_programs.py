"""What XLA compiled, printed so that two compiles of one computation can be compared.

A symbolic export is checked against jit by compiling both at the same sizes
and comparing the optimized programs, instruction for instruction: a program
that compiles the same computes the same bits. The jax plugin compares them
at build time, on the build machine's platform (``ppy_plugin_jax.refinement``);
the PJRT runtime compares them on first use on a platform the build could
not compile for (a CPU build run on a TPU), and keeps the verdict. Both must
print a program alike, or one side would pass what the other refuses: so the
printing lives here, once; so does the name of the platform each side
compares on (``export_platform``), or one side would skip what the other counts as
compared.

It imports jaxlib only in ``print_options`` and jax only in ``export_platform``,
which run where jax has been imported already.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "Uncompared",
    "compile_both",
    "constant_texts",
    "jit_numbers",
    "export_platform",
    "print_options",
    "program",
]


class Uncompared(Exception):
    """The two programs cannot be compared here: its message says why."""


#: A computation's header (``region_0.2 {``, ``ENTRY main.1 {``): its name
#: counts the lowering's functions, so it is renamed by order of appearance.
_COMPUTATION: Final = re.compile(r"^(?:ENTRY )?(\S+) \{$", re.MULTILINE)
#: An instruction's name in the canonical print (``tmp_4``).
_VALUE: Final = re.compile(r"\btmp_\d+\b")
#: An instruction of the entry computation itself, not of a computation
#: printed inside one of its instructions (those are indented further).
_OWN: Final = re.compile(r"^  (?:ROOT )?tmp_")
#: A parameter of the entry computation: its name and number.
_PARAMETER: Final = re.compile(r"^  (tmp_\d+) = \S+ parameter\((\d+)\)")
#: A scalar or array constant of the entry computation: its name and what it is.
_CONSTANT: Final = re.compile(r"^  (tmp_\d+) = (\S+ constant\(.*\))$")


def export_platform(device: Any = None) -> str:
    """jax.export's name of the platform ``device`` is on (this process's
    default backend's where None): ``cuda`` or ``rocm`` where jax's backend
    and its devices say ``gpu``.

    An export lists its platforms, and jax keeps its lowering rules, under
    these names only: compared with ``jax.default_backend()`` (``gpu``), a
    CUDA machine's export would never be on this platform, and the check of
    it against jit would be skipped without a word.
    """
    import jax

    if device is None:
        return str(jax.export.default_export_platform())
    from jax._src import xla_bridge  # what default_export_platform calls: no public form

    return str(xla_bridge.canonicalize_platform(device.platform))


def print_options() -> Any:
    """How ``program`` prints: canonical value names, no metadata, constants
    in full (computations keep their names: ``program`` renames them)."""
    try:
        from jaxlib import _hlo  # type: ignore[attr-defined]  # jaxlib ships no stub for it
    except ImportError:
        raise Uncompared("this jaxlib cannot print a compiled program") from None
    options = _hlo.HloPrintOptions.canonical()
    options.print_large_constants = True
    return options


def program(
    compiled: Any,
    options: Any,
    numbers: Sequence[int] | None = None,
    given: Mapping[int, str] | None = None,
) -> str:
    """The optimized HLO of ``compiled``, printed with ``options``, without
    computation names, and without the parameters it never reads; parameter
    ``k`` numbered ``numbers[k]`` where given (the export's order of the input
    jit takes ``k``-th).

    ``given``: per parameter number, the constant it is given, as
    ``constant_texts`` prints it, written where it is used as a constant of
    the program is. From jax 0.12 jit hands a large constant of the trace to
    its program as an argument, where an export embeds it: the two compute
    the same where XLA left the embedded constant as it is.
    """
    text = _printed(compiled, options)
    # The module's header holds its name, from the jitted function's, and
    # the layout of every parameter, read ones and others alike.
    text = "\n".join(line for line in text.splitlines() if not line.startswith("HloModule "))
    names = {name: f"computation_{i}" for i, name in enumerate(_COMPUTATION.findall(text))}
    if names:
        named = re.compile("|".join(rf"(?<![\w.]){re.escape(name)}(?![\w.])" for name in names))
        text = named.sub(lambda match: names[match.group(0)], text)
    head, found, entry = text.partition("\nENTRY ")
    if not found:
        return text
    body, end, rest = entry.partition("\n}")
    return f"{head}{found}{_entry(body, numbers, given or {})}{end}{rest}"


def constant_texts(compiled: Any, options: Any) -> list[str]:
    """The constants of ``compiled``'s entry computation, in the order it
    lists them, as ``program`` writes them where they are used."""
    _, _, entry = _printed(compiled, options).partition("\nENTRY ")
    lines = entry.partition("\n}")[0].splitlines()
    return [m.group(2) for m in map(_CONSTANT.match, lines) if m]


def _printed(compiled: Any, options: Any) -> str:
    modules = compiled.runtime_executable().hlo_modules()
    return "\n".join(module.to_string(options) for module in modules)


def _entry(entry: str, numbers: Sequence[int] | None, given: Mapping[int, str]) -> str:
    """The entry computation ``entry`` less the parameters it never reads,
    the others numbered in order, each constant written where it is used,
    and its other values named in order.

    jit leaves out of its module an input the function never reads
    (``keep_unused=False``); an export takes every input it declares. An
    unread parameter is no part of what is computed, and neither is the
    place in the schedule of a constant, which two lowerings order apart.
    Nor is the order the parameters are declared in: renumbered by
    ``numbers``, they are listed in their new order. A parameter ``given``
    a constant is written as that constant.
    """
    lines = entry.splitlines()
    own = "\n".join(line for line in lines if _OWN.match(line))
    constants = {m.group(1): f"<{m.group(2)}>" for m in map(_CONSTANT.match, lines) if m}
    kept: list[str] = []
    found: dict[str, int] = {}
    for line in lines:
        if _CONSTANT.match(line):
            continue
        parameter = _PARAMETER.match(line)
        if parameter is not None:
            value, number = parameter.groups()
            if int(number) in given:
                constants[value] = f"<{given[int(number)]}>"
                continue
            if len(re.findall(rf"\b{value}\b", own)) == 1:
                continue
            if numbers is not None and int(number) >= len(numbers):
                raise Uncompared("jit's module has more parameters than the function has inputs")
            found[line] = int(number) if numbers is None else numbers[int(number)]
        kept.append(line)
    # Numbered 0, 1, ... in order; and as a parameter reads nothing, where it
    # is declared is no part of the program: the declarations are listed by
    # number, in the places they held.
    places = [i for i, line in enumerate(kept) if line in found]
    for number, (place, line) in enumerate(
        zip(places, sorted(found, key=found.__getitem__), strict=True)
    ):
        kept[place] = re.sub(r"parameter\(\d+\)", f"parameter({number})", line)
    # Its own values are named anew, in order; a computation printed inside
    # an instruction names its values apart, and keeps those names.
    defined = [_VALUE.search(line) for line in kept if _OWN.match(line)]
    renamed = {match.group(0): f"v{i}" for i, match in enumerate(defined) if match is not None}
    renamed.update(constants)
    return "\n".join(
        _VALUE.sub(lambda match: renamed.get(match.group(0), match.group(0)), line)
        if _OWN.match(line)
        else line
        for line in kept
    )


def compile_both(first: Any, second: Any) -> tuple[Any, Any]:
    """Both lowerings compiled, side by side: XLA lets go of the GIL while it
    compiles, so comparing costs about one compile, not two."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        other = pool.submit(second.compile)
        return first.compile(), other.result()


def jit_numbers(lowered: Any, order: Sequence[int], hoisted: int = 0) -> list[int]:
    """For each parameter of jit's module, the export's number of its input
    (-1 for the ``hoisted`` first, the constants jit hands its program).

    jit leaves out the inputs the function never reads, and numbers the rest
    in its own order; which it kept, jax says only in its lowering's
    arguments (``kept_var_idx``). Where that is not there to read, or names
    another count of inputs than ``order``'s, the programs cannot be matched
    parameter for parameter, and the check says so (``Uncompared``).
    """
    compile_args = getattr(getattr(lowered, "_lowering", None), "compile_args", None)
    if not isinstance(compile_args, dict):
        compile_args = {}
    kept = compile_args.get("kept_var_idx")
    taken = compile_args.get("global_in_avals")  # what the module's parameters are
    if kept is not None:
        kept = [i - hoisted for i in sorted(kept)[hoisted:]]
    if (
        kept is None
        or taken is None
        or len(taken) != len(kept) + hoisted
        or not all(0 <= i < len(order) for i in kept)
    ):
        raise Uncompared(
            "this jax does not say which inputs its lowering keeps, and jit takes the "
            "keyword arguments in another order than the export"
        )
    return [-1] * hoisted + [order[i] for i in kept]
