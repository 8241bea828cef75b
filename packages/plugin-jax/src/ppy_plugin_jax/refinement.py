"""Does XLA compile an export with symbolic dims, given sizes, as it compiles the jitted function?

An export with a symbolic dim ("B") is one module for every size. A call of
a given size has jax refine the module's shapes first
(``refine_polymorphic_shapes``), and that pass also inlines every function
the module calls. jit's own module keeps the functions it calls apart
(``jnp.linspace``, the program's nested jits), and XLA may simplify a
called function before it inlines it: ``stop / 15`` with ``stop`` a
parameter becomes ``stop * (1/15)``, where the inlined module folds
``3 / 15`` to 0.2 exactly. On jax 0.12.1, ``x + jnp.linspace(-3, 3, 64)``
then differs from jit's result in 222 of 384 elements, in the last bit:
a staged call that silently computes something else.

So each export with symbolic dims is compiled at one set of sizes
(``PROBES``) and compared with what XLA compiles for the jitted function at
the same sizes, instruction for instruction (``diverges``). Where the two
programs differ, the export stays unstaged: the difference is in the
module's structure, not in the sizes. A program that compiles the same
computes the same bits. The check is conservative: two programs can differ
in an operand order and still agree on every bit, and such a function
stays too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

__all__ = ["PROBES", "Uncompared", "diverges"]

#: The sizes tried, in turn, for every symbol: the first that both the
#: export and the jitted function compile for is compared.
PROBES: Final = (8, 3, 16, 2, 1, 32, 64)


class Uncompared(Exception):
    """No size of ``PROBES`` compiles for both: the export cannot be checked."""


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


def _options() -> Any:
    """How ``_program`` prints: canonical value names, no metadata, constants
    in full (computations keep their names: ``_program`` renames them)."""
    try:
        from jaxlib import _hlo  # type: ignore[attr-defined]  # jaxlib ships no stub for it
    except ImportError:
        raise Uncompared("this jaxlib cannot print a compiled program") from None
    options = _hlo.HloPrintOptions.canonical()
    options.print_large_constants = True
    return options


def _program(compiled: Any, options: Any, numbers: Sequence[int] | None = None) -> str:
    """The optimized HLO of ``compiled``, printed with ``options``, without
    computation names, and without the parameters it never reads; parameter
    ``k`` numbered ``numbers[k]`` where given (the export's order of the input
    jit takes ``k``-th)."""
    modules = compiled.runtime_executable().hlo_modules()
    text = "\n".join(module.to_string(options) for module in modules)
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
    return f"{head}{found}{_entry(body, numbers)}{end}{rest}"


def _entry(entry: str, numbers: Sequence[int] | None = None) -> str:
    """The entry computation ``entry`` less the parameters it never reads,
    the others numbered in order, each constant written where it is used,
    and its other values named in order.

    jit leaves out of its module an input the function never reads
    (``keep_unused=False``); an export takes every input it declares. An
    unread parameter is no part of what is computed, and neither is the
    place in the schedule of a constant, which two lowerings order apart.
    Nor is the order the parameters are declared in: renumbered by
    ``numbers``, they are listed in their new order.
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


def _sized(
    leaves: Sequence[Any], exported: Any, sizes: Mapping[str, int], mesh: Any
) -> list[Any] | None:
    """``leaves`` (the export's ``ShapeDtypeStruct`` inputs) with each symbol
    at its size, and laid out over ``mesh`` where they are over its abstract
    one; None where a dim would not be positive."""
    import jax
    from jax.sharding import NamedSharding

    sized = []
    for leaf, aval in zip(leaves, exported.in_avals, strict=True):
        shape = tuple(d if isinstance(d, int) else int(d._evaluate(sizes)) for d in aval.shape)
        if any(n < 1 for n in shape):
            return None
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and mesh is not None:
            sharding = NamedSharding(mesh, sharding.spec)
        weak = bool(getattr(leaf, "weak_type", False))
        sized.append(jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=sharding, weak_type=weak))  # type: ignore[no-untyped-call]  # jax leaves it unannotated
    return sized


def _compiled(first: Any, second: Any) -> tuple[Any, Any]:
    """Both lowerings compiled, side by side: XLA lets go of the GIL while it
    compiles, so the check costs the build about one compile, not two."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        other = pool.submit(second.compile)
        return first.compile(), other.result()


def _mesh(leaves: Sequence[Any]) -> Any:
    """A mesh of this process's devices for the leaves' abstract one; None
    where they are laid out over none, False where this process has too
    few devices for it."""
    import jax
    from jax.sharding import AbstractMesh, NamedSharding

    for leaf in leaves:
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, AbstractMesh):
            abstract = sharding.mesh
            if abstract.size > len(jax.devices()):
                return False
            return jax.make_mesh(
                abstract.axis_sizes,
                abstract.axis_names,
                axis_types=abstract.axis_types,
                devices=jax.devices()[: abstract.size],
            )
    return None


def _numbers(lowered: Any, order: Sequence[int]) -> list[int]:
    """For each parameter of jit's module, the export's number of its input.

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
    if (
        kept is None
        or taken is None
        or len(taken) != len(kept)
        or not all(0 <= i < len(order) for i in kept)
    ):
        raise Uncompared(
            "this jax does not say which inputs its lowering keeps, and jit takes the "
            "keyword arguments in another order than the export"
        )
    return [order[i] for i in sorted(kept)]


def diverges(
    jitted: Callable[[list[Any]], Any],
    exported: Any,
    leaves: Sequence[Any],
    order: Sequence[int] | None = None,
) -> dict[str, int] | None:
    """The sizes at which ``exported`` compiles to another program than jit's;
    None where they compile the same, where the export has no symbol, or
    where this process cannot compile it (another platform, a mesh of more
    devices than it has: the run's compiler is not here to ask);
    ``Uncompared`` where no size of ``PROBES`` compiles for both.

    ``jitted`` lowers the jitted function, as the program calls it, for the
    export's inputs at given sizes (a list of ``ShapeDtypeStruct``).
    ``order`` is where each input jit takes, in the order it takes them, is
    among the export's, where the two orders differ: jit takes keyword
    arguments by sorted name, the export in the signature's order.
    """
    import jax

    from ppy_plugin_jax.verify import symbols

    names = symbols(exported)
    if not names or jax.default_backend() not in exported.platforms:
        return None
    mesh = _mesh(leaves)
    if mesh is False:
        return None
    options = _options()
    served = jax.jit(exported.call)
    for size in PROBES:
        sizes = dict.fromkeys(names, size)
        sized = _sized(leaves, exported, sizes, mesh)
        if sized is None:
            continue
        try:
            lowered = jitted(sized)
            theirs, ours = _compiled(served.lower(*sized), lowered)
        except Exception:  # a constraint of the export, or sizes jit refuses
            continue
        numbers = None if order is None else _numbers(lowered, order)
        return None if _program(theirs, options) == _program(ours, options, numbers) else sizes
    raise Uncompared(f"none of the sizes {', '.join(map(str, PROBES))} compiles for both")
