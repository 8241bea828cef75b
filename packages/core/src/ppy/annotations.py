"""The annotation model: ``ppy.Shape``, ``ppy.DType``, ``ppy.Like`` and ``ppy.Sharding``.

They are metadata inside ``typing.Annotated`` and do nothing at run time; the
build reads them from the source (see ``ppy.discovery``), and the jax plugin's
worker reads them again from the live annotations to catch disagreement.
Validation happens at construction so that a typo fails where it is written,
under plain ``python`` as well as under ``ppy build``.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Final

from ppy.spec import Axis

__all__ = [
    "DTYPE_NAMES",
    "DType",
    "Like",
    "Shape",
    "Sharding",
    "check_axis",
    "check_dim",
    "check_dtype",
    "check_like_axes",
    "format_like_axes",
]

#: Element types a staged input may have, spelled as numpy/jax name them.
DTYPE_NAMES: Final[frozenset[str]] = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    }
)

_DIM_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_DIM_FUNCTIONS = frozenset({"max", "min"})


def _check_dim_node(node: ast.expr, text: str) -> None:
    if isinstance(node, ast.Name):
        return
    if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, _DIM_OPERATORS):
        _check_dim_node(node.left, text)
        _check_dim_node(node.right, text)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check_dim_node(node.operand, text)
        return
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _DIM_FUNCTIONS
        and len(node.args) == 2
        and not node.keywords
    ):
        for arg in node.args:
            _check_dim_node(arg, text)
        return
    raise ValueError(
        f"ppy.Shape: {text!r} is not a dimension; use an int >= 0, a symbolic name "
        'such as "B", or a jax dimension expression such as "2*B" or "max(B, 1)"'
    )


def check_dim(dim: object) -> int | str:
    """Return ``dim`` if it is a valid dimension, else raise ValueError saying why."""
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        raise ValueError(
            f"ppy.Shape: {dim!r} is a {type(dim).__name__}; a dimension is an int >= 0 "
            'or a string such as "B" or "2*B"'
        )
    if isinstance(dim, int):
        if dim < 0:
            raise ValueError(f"ppy.Shape: dimension {dim} is negative; use an int >= 0")
        return dim
    text = dim.strip()
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        tree = None
    if tree is None or not text:
        raise ValueError(
            f"ppy.Shape: {dim!r} is not a dimension; use an int >= 0, a symbolic name "
            'such as "B", or a jax dimension expression such as "2*B"'
        )
    _check_dim_node(tree.body, dim)
    if isinstance(tree.body, ast.Constant):
        raise ValueError(f"ppy.Shape: {dim!r} is a number in a string; write it as the int {text}")
    return dim


def check_dtype(name: object) -> str:
    """Return ``name`` if it names a supported dtype, else raise ValueError listing them."""
    if not isinstance(name, str) or name not in DTYPE_NAMES:
        allowed = ", ".join(sorted(DTYPE_NAMES))
        raise ValueError(f"ppy.DType: {name!r} is not a dtype name; use one of: {allowed}")
    return name


def check_axis(axis: object) -> Axis:
    """Return one entry of a ``ppy.Sharding`` if it is valid, else raise ValueError saying why.

    An entry is what ``jax.sharding.PartitionSpec`` takes for one dim: None
    (not sharded), a mesh axis name, or a tuple of names (sharded over
    several axes at once).
    """
    if axis is None or (isinstance(axis, str) and axis.isidentifier()):
        return axis
    if (
        isinstance(axis, tuple)
        and axis
        and all(isinstance(a, str) and a.isidentifier() for a in axis)
    ):
        return axis
    raise ValueError(
        f"ppy.Sharding: {axis!r} is not a dim's sharding; use None (not sharded), a mesh "
        'axis name such as "data", or a tuple of names such as ("data", "model")'
    )


class Shape:
    """The dimensions of an array input: ints are fixed, strings are symbolic.

    ``Shape("B", 4)`` is an array of any number of rows of four. Symbolic
    names are scoped to one function, so ``"B"`` on two parameters of the same
    function is the same size.
    """

    __slots__ = ("dims",)
    dims: tuple[int | str, ...]

    def __init__(self, *dims: int | str) -> None:
        object.__setattr__(self, "dims", tuple(check_dim(d) for d in dims))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ppy.Shape is immutable")

    def __repr__(self) -> str:
        return f"ppy.Shape({', '.join(repr(d) for d in self.dims)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and other.dims == self.dims

    def __hash__(self) -> int:
        return hash(("Shape", self.dims))


class DType:
    """The element type of an array input, by name: ``DType("float32")``."""

    __slots__ = ("name",)
    name: str

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", check_dtype(name))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ppy.DType is immutable")

    def __repr__(self) -> str:
        return f"ppy.DType({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("DType", self.name))


class Like:
    """A pytree input described by an example: ``ppy.Like(example_params)``.

    ``target`` is a module-level function of no arguments that builds a value
    of the input's structure, shapes and dtypes (``model.init(key, x)``,
    ``opt.init(params)``), or its name as a string. The build evaluates it
    abstractly (``jax.eval_shape``): no FLOPs and no memory are spent, and
    the tree of shapes and dtypes it gives is the description.

    ``axes`` marks axes of the example symbolic, by position in every leaf:
    ``ppy.Like(make_batch, axes={0: "B"})`` says axis 0 of each leaf is
    ``B``, whatever size the example gave it. Positions, not sizes, name the
    axis, so a dim that merely equals the example's batch size is never
    marked by accident; the build refuses a leaf that lacks the axis, or an
    example whose leaves give one name two sizes.
    """

    __slots__ = ("axes", "target")
    target: object
    axes: tuple[tuple[int, str], ...]

    def __init__(self, target: object, *, axes: Mapping[int, str] | None = None) -> None:
        if isinstance(target, str):
            if not target.isidentifier():
                raise ValueError(
                    f"ppy.Like: {target!r} is not a name; give the example function "
                    "itself, or its name as written at module level"
                )
        elif not callable(target):
            raise ValueError(
                f"ppy.Like: {target!r} is a {type(target).__name__}; give a module-level "
                "function of no arguments that builds an example value"
            )
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "axes", check_like_axes(axes))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ppy.Like is immutable")

    @property
    def name(self) -> str:
        """The example function's name, as the source says it."""
        target = self.target
        return target if isinstance(target, str) else getattr(target, "__name__", repr(target))

    def __repr__(self) -> str:
        if not self.axes:
            return f"ppy.Like({self.name})"
        return f"ppy.Like({self.name}, axes={format_like_axes(self.axes)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Like) and (other.target, other.axes) == (self.target, self.axes)

    def __hash__(self) -> int:
        return hash(("Like", self.name, self.axes))


def check_like_axes(axes: object) -> tuple[tuple[int, str], ...]:
    """``ppy.Like``'s ``axes`` as sorted ``(axis, name)`` pairs, else ValueError saying why.

    A key is an axis of every leaf, numbered as numpy numbers them (``-1``
    the last); a value is a symbolic name, as ``ppy.Shape`` takes one. An
    expression (``"2*B"``) is refused: the example gives the axis one size,
    which says what ``B`` is only if the axis is ``B`` itself.
    """
    if axes is None:
        return ()
    if not isinstance(axes, Mapping):
        raise ValueError(
            f"ppy.Like: axes={axes!r} is a {type(axes).__name__}; give a dict from an axis "
            'of every leaf to a symbolic name, such as axes={0: "B"}'
        )
    pairs: list[tuple[int, str]] = []
    for axis, name in axes.items():
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise ValueError(
                f"ppy.Like: axes key {axis!r} is a {type(axis).__name__}; a key is an axis "
                'number (0 for the first, -1 for the last), as in axes={0: "B"}'
            )
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"ppy.Like: axes[{axis}] is {name!r}, which is not a symbolic name; a marked "
                'axis takes a name such as "B" (not a size, not an expression), as in '
                'axes={0: "B"}'
            )
        pairs.append((axis, name))
    return tuple(sorted(pairs, key=lambda pair: (pair[0] < 0, pair[0])))


def format_like_axes(axes: tuple[tuple[int, str], ...]) -> str:
    """``{0: 'B', -1: 'T'}``: ``axes`` as the source writes them."""
    return "{" + ", ".join(f"{axis}: {name!r}" for axis, name in axes) + "}"


class Sharding:
    """How an array input is laid out over the mesh: a ``PartitionSpec``, by its entries.

    ``Sharding("data", None)`` splits dim 0 over the mesh axis ``data`` and
    keeps dim 1 whole; ``Sharding()`` replicates the input on every device.
    The mesh is the project's (``[tool.ppy.plugins.jax] mesh``). On a pytree
    input (``ppy.Like``, a described class) it applies to every leaf, as a
    sharding given to ``jax.jit`` for a whole argument does.
    """

    __slots__ = ("spec",)
    spec: tuple[Axis, ...]

    def __init__(self, *spec: Axis) -> None:
        object.__setattr__(self, "spec", tuple(check_axis(a) for a in spec))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ppy.Sharding is immutable")

    def __repr__(self) -> str:
        return f"ppy.Sharding({', '.join(repr(a) for a in self.spec)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sharding) and other.spec == self.spec

    def __hash__(self) -> int:
        return hash(("Sharding", self.spec))
