"""Static discovery of ``.ppy`` sources: what the build reads without running anything."""

from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path

import pytest
from ppy.discovery.module import discover_module, discover_source
from ppy.discovery.records import ArraySpec, FunctionInfo, ModuleInfo
from ppy.layout import find_sources, module_name


def discover(text: str, path: str = "model.ppy") -> ModuleInfo:
    return discover_source(textwrap.dedent(text), module="model", path=path)


def function(module: ModuleInfo, qualname: str) -> FunctionInfo:
    found = {f.qualname: f for f in module.functions}
    assert qualname in found, f"{qualname} not in {sorted(found)}"
    return found[qualname]


def spec_of(text: str, name: str = "f", parameter: int = 0) -> ArraySpec:
    return function(discover(text), name).parameters[parameter].spec


# -- files -------------------------------------------------------------------------------


def test_find_sources_is_sorted_and_skips_tool_directories(tmp_path: Path) -> None:
    for name in (
        "b.ppy",
        "a.ppy",
        "pkg/helpers.ppy",
        "pkg/sub/deep.ppy",
        ".venv/lib/x.ppy",
        "venv/y.ppy",
        "build/z.ppy",
        "dist/z.ppy",
        ".ppy/z.ppy",
        "node_modules/z.ppy",
        "__pycache__/z.ppy",
        ".hidden/z.ppy",
        "pkg/notes.txt",
        "pkg/model.py",
    ):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in find_sources(tmp_path)]
    assert found == ["a.ppy", "b.ppy", "pkg/helpers.ppy", "pkg/sub/deep.ppy"]


def test_module_name_is_the_dotted_relative_path(tmp_path: Path) -> None:
    assert module_name(tmp_path, tmp_path / "pkg" / "helpers.ppy") == "pkg.helpers"
    assert module_name(tmp_path, tmp_path / "model.ppy") == "model"
    assert module_name(tmp_path, tmp_path / "pkg" / "__init__.ppy") == "pkg"


def test_a_source_outside_the_project_has_no_module_name(tmp_path: Path) -> None:
    """A program run from outside its project binds nothing of the artifact."""
    assert module_name(tmp_path / "project", tmp_path / "elsewhere" / "model.ppy") is None


def test_discover_module_hashes_the_file_bytes(tmp_path: Path) -> None:
    data = b"import jax\r\n\r\n@jax.jit\r\ndef f(x):\r\n    return x\r\n"
    path = tmp_path / "pkg" / "m.ppy"
    path.parent.mkdir()
    path.write_bytes(data)
    module = discover_module(tmp_path, path)
    assert module.sha256 == hashlib.sha256(data).hexdigest()
    assert (module.name, module.path) == ("pkg.m", "pkg/m.ppy")
    assert [f.qualname for f in module.functions] == ["f"]
    assert module.functions[0].location == "pkg/m.ppy:4"


def test_discover_source_hashes_utf8() -> None:
    text = "x = 'é'\n"
    module = discover_source(text, module="m", path="m.ppy")
    assert module.sha256 == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_syntax_error_names_path_and_line() -> None:
    module = discover("import jax\n\ndef f(:\n    pass\n")
    assert module.syntax_error is not None
    assert module.syntax_error.startswith("model.ppy:3: ")
    assert module.functions == ()


# -- functions and decorators ------------------------------------------------------------


def test_functions_module_level_first_then_methods_and_nested() -> None:
    module = discover(
        """
        class Model:
            def apply(self, x):
                def step(y):
                    return y
                return step(x)

        def outer():
            async def inner():
                pass
            return inner

        async def fetch():
            pass
        """
    )
    assert [(f.qualname, f.scope) for f in module.functions] == [
        ("outer", "module"),
        ("fetch", "module"),
        ("Model.apply", "method"),
        ("Model.apply.<locals>.step", "nested"),
        ("outer.<locals>.inner", "nested"),
    ]


def test_a_jit_made_by_a_call_inside_a_function_is_found_with_the_variables_it_reads() -> None:
    module = discover(
        """
        from functools import partial
        import jax
        from jax import jit

        def kernel(x, y):
            return x * y

        def gram(k, xs, ys):
            return xs

        def train(xs, scale):
            gram_ = jit(partial(gram, kernel))
            for _ in range(2):
                rows = jax.jit(jax.vmap(kernel))
            scaled = jax.jit(partial(gram, scale))
            return gram_, rows, scaled

        def twice():
            g = jit(gram)
            g = jit(kernel)
            return g
        """
    )
    made = {f.qualname: f for f in module.functions if f.made is not None}
    # twice's g is bound twice: the run could bind either.
    assert sorted(made) == ["train.<locals>.gram_", "train.<locals>.rows", "train.<locals>.scaled"]
    # scaled's call reads train's scale: only a recording can make it.
    assert made["train.<locals>.scaled"].reads == ("scale",)
    assert made["train.<locals>.gram_"].reads == made["train.<locals>.rows"].reads == ()
    gram_ = made["train.<locals>.gram_"]
    assert (gram_.scope, gram_.lineno, gram_.made) == ("nested", 13, "jit(partial(gram, kernel))")
    # What the partial binds is not an input; vmap's inputs are kernel's names.
    assert [p.name for p in gram_.parameters] == ["xs", "ys"]
    assert [p.name for p in made["train.<locals>.rows"].parameters] == ["x", "y"]


def test_a_jit_of_a_variable_holding_a_function_is_found_through_it() -> None:
    module = discover(
        """
        from functools import partial
        import jax
        from jax import grad, jit

        def sgd(params, grads, learning_rate):
            return params

        optimizer = partial(sgd, learning_rate=1e-3)
        optimizer = jax.jit(optimizer)

        def main(scale):
            def gp(params, x, y, compute=False):
                return params * scale
            marginal = partial(gp, compute=True)
            grad_fun = jit(grad(marginal))
            other = partial(gp, compute=False)
            other = partial(gp, compute=True)
            either = jit(other)
            late = jit(after)
            after = partial(gp, compute=True)
            return grad_fun, either, late
        """
    )
    found = {f.qualname: f for f in module.functions}
    # optimizer is bound twice, by the partial it jits and by the jit: one name.
    optimizer = found["optimizer"]
    assert (optimizer.lineno, optimizer.rebound) == (10, ())
    assert [p.name for p in optimizer.parameters] == ["params", "grads"]
    grad_fun = found["main.<locals>.grad_fun"]
    assert [p.name for p in grad_fun.parameters] == ["params", "x", "y"]
    # marginal is main's variable: only the running program can make it.
    assert (grad_fun.made, grad_fun.reads) == ("jit(grad(marginal))", ("marginal",))
    # other holds either partial as the run goes; after is set after its jit.
    assert "main.<locals>.either" not in found and "main.<locals>.late" not in found


def test_a_jit_of_a_named_lambda_is_found_with_the_lambdas_parameters() -> None:
    module = discover(
        """
        import jax
        from jax import jit

        score = lambda x, w: x @ w
        score = jit(score)

        def main(model):
            predict = lambda inputs, scale=1.0: model(inputs) * scale
            compiled_predict = jit(predict)
            return compiled_predict
        """
    )
    found = {f.qualname: f for f in module.functions if f.decorators}
    assert sorted(found) == ["main.<locals>.compiled_predict", "score"]
    assert found["score"].rebound == ()
    assert [p.name for p in found["score"].parameters] == ["x", "w"]
    compiled = found["main.<locals>.compiled_predict"]
    assert [(p.name, p.has_default) for p in compiled.parameters] == [
        ("inputs", False),
        ("scale", True),
    ]
    assert (compiled.made, compiled.reads) == ("jit(predict)", ("predict",))


def test_a_jit_made_under_the_main_guard_is_made_where_the_guard_runs() -> None:
    """No name holds it once the build imports the module: it is a jit made
    as the program runs, which reads what only the guard binds."""
    module = discover(
        """
        import jax

        def g(x):
            return x

        if __name__ == "__main__":
            h = lambda x: x * 2
            compiled = jax.jit(h)
            other = jax.jit(g)
        """
    )
    found = {f.qualname: f for f in module.functions if f.decorators}
    assert {(f.scope, f.made, f.reads) for f in found.values()} == {
        ("main", "jax.jit(h)", ("h",)),
        ("main", "jax.jit(g)", ()),
    }


def test_a_jit_a_function_returns_is_found_under_its_return() -> None:
    module = discover(
        """
        import jax
        from jax import jit, vmap

        def train(xs):
            def predict(x):
                return (xs * x).sum()
            return jit(vmap(predict))

        def either(flag):
            def f(x):
                return x
            if flag:
                return jax.jit(f)
            return jax.jit(vmap(f))
        """
    )
    made = {f.qualname: f for f in module.functions if f.made is not None}
    # either returns two jits: which one a call gets is the run's.
    assert list(made) == ["train.<locals>.<return>"]
    returned = made["train.<locals>.<return>"]
    assert (returned.lineno, returned.made) == (8, "jit(vmap(predict))")
    assert [p.name for p in returned.parameters] == ["x"]
    assert returned.reads == ("predict",)


def test_a_lambda_written_in_the_jits_call_is_read_as_its_def() -> None:
    module = discover(
        """
        import jax

        norms = jax.jit(jax.vmap(lambda v: (v * v).sum()))

        def main(scale):
            predict = jax.jit(lambda inputs, bias=0.0: inputs * scale + bias)
            return predict
        """
    )
    found = {f.qualname: f for f in module.functions if f.decorators}
    assert sorted(found) == ["main.<locals>.predict", "norms"]
    assert [p.name for p in found["norms"].parameters] == ["v"]
    predict = found["main.<locals>.predict"]
    assert [(p.name, p.has_default) for p in predict.parameters] == [
        ("inputs", False),
        ("bias", True),
    ]
    assert predict.made == "jax.jit(lambda inputs, bias=0.0: inputs * scale + bias)"


def test_a_jit_called_where_it_is_made_is_found_by_its_line() -> None:
    """Alone on its line, in the function's own code: not two on one line,
    nor one in a lambda or a comprehension, which run in frames of their own
    (python 3.12 runs a list comprehension in the function's frame, so one
    beside it on its line is not told apart from it either)."""
    module = discover(
        """
        import jax

        def loss(w, x):
            return (w * x).sum()

        def main(w, xs):
            for x in xs:
                print(jax.jit(loss)(w, x))
            g = jax.jit(jax.grad(loss))(w, xs[0])
            both = jax.jit(loss)(w, xs[0]) + jax.jit(loss)(w, xs[1])
            later = lambda x: jax.jit(loss)(w, x)
            listed = [jax.jit(loss)(w, x) for x in xs]
            mixed = jax.jit(loss)(w, xs[0]), [jax.jit(loss)(w, x) for x in xs]
            return g, both, later, listed, mixed
        """
    )
    made = {f.qualname: f for f in module.functions if f.made is not None}
    assert sorted(made) == ["main.<locals>.<jit-10>", "main.<locals>.<jit-9>"]
    assert made["main.<locals>.<jit-9>"].made == "jax.jit(loss)"
    assert [p.name for p in made["main.<locals>.<jit-10>"].parameters] == ["w", "x"]


@pytest.mark.parametrize(
    ("imports", "decorator", "name", "keywords"),
    [
        ("import jax", "@jax.jit", "jax.jit", ()),
        ("import jax as j", "@j.jit", "jax.jit", ()),
        ("from jax import jit", "@jit", "jax.jit", ()),
        ("from jax import jit as J", "@J", "jax.jit", ()),
        ("import jax", "@jax.jit(static_argnums=0)", "jax.jit", ("static_argnums",)),
        (
            "import jax\nfrom functools import partial",
            '@partial(jax.jit, static_argnames=("n",))',
            "jax.jit",
            ("static_argnames",),
        ),
        (
            "import jax, functools",
            "@functools.partial(jax.jit, donate_argnums=0)",
            "jax.jit",
            ("donate_argnums",),
        ),
        ("from ppy import xla", "@xla.jit", "ppy.xla.jit", ()),
        ("import ppy", "@ppy.xla.jit", "ppy.xla.jit", ()),
        ("import ppy.xla", "@ppy.xla.jit", "ppy.xla.jit", ()),
        ("", "@mystery.wrap", "mystery.wrap", ()),
        ("", "@registry['x']", "registry['x']", ()),
    ],
)
def test_decorators_resolve_through_imports(
    imports: str, decorator: str, name: str, keywords: tuple[str, ...]
) -> None:
    module = discover_source(
        f"{imports}\n{decorator}\ndef f(x):\n    return x\n", module="m", path="m"
    )
    (found,) = module.functions[0].decorators
    assert (found.name, found.keywords) == (name, keywords)
    assert found.lineno == imports.count("\n") + 2


def test_static_and_donated_parameters_are_named_as_jax_resolves_them() -> None:
    module = discover(
        """
        import functools
        import jax

        @functools.partial(jax.jit, static_argnums=-1, donate_argnums=(0,), donate_argnames="c")
        def f(a, b, *, c, n):
            return a
        """
    )
    f = function(module, "f")
    assert (f.static, f.donated) == ({"b"}, {"a", "c"})


def test_parameters_kinds_annotations_defaults() -> None:
    module = discover(
        """
        def f(a, /, b: int = 1, *args: float, c, d: "str" = "x", **kw: bool) -> list[int]:
            pass
        """
    )
    f = function(module, "f")
    assert [(p.name, p.kind, p.annotation, p.has_default) for p in f.parameters] == [
        ("a", "positional", None, False),
        ("b", "positional", "int", True),
        ("args", "var_positional", "float", False),
        ("c", "keyword_only", None, False),
        ("d", "keyword_only", "'str'", True),
        ("kw", "var_keyword", "bool", False),
    ]
    assert f.returns == "list[int]"


# -- annotations -------------------------------------------------------------------------

HEADER = """\
from typing import Annotated
import jax
import ppy
"""


def test_inline_annotated_spec() -> None:
    spec = spec_of(
        HEADER
        + 'def f(x: Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]):\n  pass\n'
    )
    assert spec == ArraySpec(("B", 4), "float32")


@pytest.mark.parametrize(
    "alias",
    [
        'Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]',
        "from typing import TypeAlias\n"
        'Batch: TypeAlias = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]',
        'Inner = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]\nBatch = Inner',
        'Batch = Annotated[Annotated[jax.Array, ppy.Shape("B", 4)], ppy.DType("float32")]',
    ],
    ids=["assign", "type-alias", "alias-of-alias", "nested-annotated"],
)
def test_spec_through_module_aliases(alias: str) -> None:
    spec = spec_of(HEADER + alias + "\ndef f(x: Batch, y: 'Batch'):\n  pass\n")
    assert spec == ArraySpec(("B", 4), "float32")
    assert spec_of(HEADER + alias + "\ndef f(x: Batch, y: 'Batch'):\n  pass\n", parameter=1) == (
        spec
    )


@pytest.mark.skipif(sys.version_info < (3, 12), reason="the type statement is Python 3.12+")
def test_spec_through_type_statement() -> None:
    text = (
        HEADER
        + 'type Batch = Annotated[jax.Array, ppy.Shape("B", 4), ppy.DType("float32")]\n'
        + "def f(x: Batch):\n  pass\n"
    )
    assert spec_of(text) == ArraySpec(("B", 4), "float32")


@pytest.mark.parametrize(
    "header",
    [
        "import typing\nimport jax\nimport ppy as p\n"
        'B = typing.Annotated[jax.Array, p.Shape("N"), p.DType("int32")]',
        "from typing import Annotated as A\nfrom ppy import Shape, DType\n"
        'B = A[int, Shape("N"), DType("int32")]',
    ],
)
def test_spec_through_renamed_imports(header: str) -> None:
    assert spec_of(header + "\ndef f(x: B):\n  pass\n") == ArraySpec(("N",), "int32")


def test_unrelated_annotated_metadata_is_ignored() -> None:
    text = HEADER + "import other\ndef f(x: Annotated[int, other.Shape(3)], y: int):\n  pass\n"
    assert spec_of(text) == ArraySpec(None, None)
    # A bare ``int`` is what jit traces for a Python int: a weakly typed int32.
    assert spec_of(text, parameter=1) == ArraySpec((), "int32", weak=True)


def test_invalid_dim_and_dtype_are_problems_with_file_and_line() -> None:
    text = HEADER + '\nBad = Annotated[jax.Array, ppy.Shape("B", -1), ppy.DType("float33")]\n'
    spec = spec_of(text + "def f(x: Bad):\n  pass\n")
    assert spec.shape is None and spec.dtype is None
    assert spec.problems == (
        "model.ppy:5: ppy.Shape: dimension -1 is negative; use an int >= 0",
        "model.ppy:5: ppy.DType: 'float33' is not a dtype name; use one of: "
        + ", ".join(sorted(__import__("ppy.annotations").annotations.DTYPE_NAMES)),
    )


def test_non_literal_arguments_are_problems() -> None:
    text = HEADER + "n = 4\nV = Annotated[jax.Array, ppy.Shape(n), ppy.DType(jax.numpy.int32)]\n"
    spec = spec_of(text + "def f(x: V):\n  pass\n")
    assert spec.problems == (
        "model.ppy:5: ppy.Shape arguments must be literals so the build can read them: "
        "ppy.Shape(n)",
        "model.ppy:5: ppy.DType arguments must be literals so the build can read them: "
        "ppy.DType(jax.numpy.int32)",
    )


# -- differentiation ---------------------------------------------------------------------

JAX = "import jax\nimport functools\n"


def differentiated(text: str, name: str) -> tuple[str, int, tuple[str, ...]] | None:
    found = function(discover(JAX + textwrap.dedent(text)), name).differentiated
    return None if found is None else (found.transform, found.lineno, found.via)


def test_grad_of_a_name_and_transitively_what_it_calls() -> None:
    text = """
    def score(x):
        return x

    def loss(x):
        return score(x).sum()

    def unrelated(x):
        return x

    g = jax.grad(loss)
    """
    assert differentiated(text, "loss") == ("jax.grad", 13, ())
    assert differentiated(text, "score") == ("jax.grad", 13, ("loss",))
    assert differentiated(text, "unrelated") is None


@pytest.mark.parametrize(
    ("call", "transform"),
    [
        ("jax.value_and_grad(score)", "jax.value_and_grad"),
        ("jax.vjp(score, 1.0)", "jax.vjp"),
        ("jax.jvp(score, (1.0,), (1.0,))", "jax.jvp"),
        ("jax.jacfwd(score)", "jax.jacfwd"),
        ("jax.jacrev(score)", "jax.jacrev"),
        ("jax.hessian(score)", "jax.hessian"),
        ("jax.linearize(score, 1.0)", "jax.linearize"),
        ("jax.jit(jax.grad(score))", "jax.grad"),
        ("jax.grad(functools.partial(score, 2))", "jax.grad"),
        ("jax.grad(fun=score)", "jax.grad"),
        ("functools.partial(jax.grad, argnums=0)(score)", "jax.grad"),
    ],
)
def test_every_transform_and_form(call: str, transform: str) -> None:
    text = f"def score(x):\n    return x\n\nresult = {call}\n"
    assert differentiated(text, "score") == (transform, 6, ())


def test_renamed_transform_alias_and_lambda() -> None:
    text = """
    from jax import grad as g

    def score(x):
        return x

    def other(x):
        return x

    f = score
    h = g(f)
    k = g(lambda p: other(p) * 2)
    """
    assert differentiated(text, "score") == ("jax.grad", 13, ())
    assert differentiated(text, "other") == ("jax.grad", 14, ("<lambda>",))


def test_transform_inside_a_function_and_nested_target() -> None:
    text = """
    def score(x):
        return x

    def main():
        def local(y):
            return score(y)
        return jax.grad(local)(1.0)
    """
    assert differentiated(text, "main.<locals>.local") == ("jax.grad", 10, ())
    assert differentiated(text, "score") == ("jax.grad", 10, ("local",))
    assert differentiated(text, "main") is None


def test_grad_as_a_decorator() -> None:
    text = """
    def score(x):
        return x

    @jax.grad
    def loss(x):
        return score(x)
    """
    assert differentiated(text, "loss") == ("jax.grad", 7, ())
    assert differentiated(text, "score") == ("jax.grad", 7, ("loss",))


def test_shortest_route_is_reported() -> None:
    text = """
    def a(x):
        return x

    def b(x):
        return a(x)

    def c(x):
        return b(x)

    r = jax.grad(c)
    s = jax.grad(b)
    """
    assert differentiated(text, "a") == ("jax.grad", 14, ("b",))
    assert differentiated(text, "c") == ("jax.grad", 13, ())


PYTREES = """\
from typing import Annotated, Any, Literal, NamedTuple
import functools
import jax
import ppy
from jaxtyping import Array, Float, Float32, Int, Shaped

Batch = Float32[Array, "batch 4"]
F32 = ppy.DType("float32")


class Params(NamedTuple):
    w: Annotated[jax.Array, ppy.Shape(4, 3), F32]
    b: Float[Array, "3"]


def example():
    pass


@functools.partial(jax.jit, static_argnames=("training",), static_argnums=(5,))
def step(params: Params, x: Batch, y: Int[Array, " batch"], opt: Annotated[Any, ppy.Like(example)],
         training: bool, mode: Literal["a", "b"] = "a", *, z: Float[Array, ""]):
    pass


@jax.jit
def odd(x: Float32[Array, "... 4"], y: Shaped[Array, "n"]):
    pass
"""


def test_pytrees_jaxtyping_like_and_flags_are_read_from_the_source() -> None:
    module = discover_source(PYTREES, module="m", path="m.ppy")
    step = next(f for f in module.functions if f.name == "step")
    params = {p.name: p for p in step.parameters}
    assert step.static == {"training", "mode"}
    assert params["params"].tree == "Params"
    assert (params["x"].spec.shape, params["x"].spec.dtype) == (("batch", 4), "float32")
    assert params["x"].spec.jaxtyping
    assert (params["y"].spec.shape, params["y"].spec.dtype) == (("batch",), "int32")
    assert params["opt"].like == "example"
    assert params["training"].choices == (False, True)
    assert params["mode"].choices == ("a", "b")
    assert params["z"].kind == "keyword_only" and params["z"].spec.shape == ()
    fields = {f.name: f for f in module.classes["Params"].fields}
    assert module.classes["Params"].form == "namedtuple"
    assert fields["w"].spec == ArraySpec((4, 3), "float32")
    assert fields["b"].spec.shape == (3,)
    odd = next(f for f in module.functions if f.name == "odd")
    x, y = odd.parameters
    assert "axis 0 '...' is not exportable" in x.spec.problems[0]
    assert "Shaped allows several dtypes" in y.spec.problems[0]


def test_like_axes_are_read_from_the_source_and_a_bad_form_is_a_problem() -> None:
    from ppy.build.policy import signature

    module = discover(
        """
        from typing import Annotated, Any
        import jax, ppy

        AXES = {0: "B"}

        def make(): ...

        Batch = Annotated[Any, ppy.Like(make, axes={0: "B", -1: "T"})]

        @jax.jit
        def f(
            batch: Batch,
            plain: Annotated[Any, ppy.Like("make", axes={})],
            variable: Annotated[Any, ppy.Like(make, axes=AXES)],
            sized: Annotated[Any, ppy.Like(make, dims={"B": 32})],
            number: Annotated[Any, ppy.Like(make, axes={0: 32})],
            keyed: Annotated[Any, ppy.Like(make, axes={"0": "B"})],
            nothing: Annotated[Any, ppy.Like(make, {0: "B"})],
        ): ...
        """
    )
    f = function(module, "f")
    batch, plain, variable, sized, number, keyed, nothing = f.parameters
    assert (batch.like, batch.like_axes, batch.spec.problems) == ("make", ((0, "B"), (-1, "T")), ())
    assert (plain.like, plain.like_axes, plain.spec.problems) == ("make", (), ())
    assert signature(f).startswith("f(batch: Like(make, axes={0: 'B', -1: 'T'}), plain: Like(make)")
    problems = {
        p.name: p.spec.problems for p in (variable, sized, number, keyed, nothing) if p.like is None
    }
    assert problems == {
        "variable": (
            "model.ppy:15: ppy.Like's axes must be a literal dict so the build can read it, "
            'such as axes={0: "B"}: ppy.Like(make, axes=AXES)',
        ),
        "sized": (
            "model.ppy:16: ppy.Like has no dims=; mark axes of every leaf symbolic by their "
            "position, as in axes={0: \"B\"}: ppy.Like(make, dims={'B': 32})",
        ),
        "number": (
            "model.ppy:17: ppy.Like: axes[0] is 32, which is not a symbolic name; a marked axis "
            'takes a name such as "B" (not a size, not an expression), as in axes={0: "B"}',
        ),
        "keyed": (
            "model.ppy:18: ppy.Like: axes key '0' is a str; a key is an axis number (0 for the "
            'first, -1 for the last), as in axes={0: "B"}',
        ),
        "nothing": (
            "model.ppy:19: ppy.Like takes one module-level function, by itself or by its name "
            "as a string, and optionally axes={0: \"B\"}: ppy.Like(make, {0: 'B'})",
        ),
    }


def test_a_sharding_is_read_as_written_and_a_bad_one_is_a_problem() -> None:
    module = discover(
        """
        from typing import Annotated
        import jax, ppy

        AXIS = "data"
        F32 = ppy.DType("float32")

        def f(
            x: Annotated[jax.Array, ppy.Shape(8, 4), F32, ppy.Sharding("data", None)],
            y: Annotated[jax.Array, ppy.Shape(8), F32, ppy.Sharding(("a", "b"))],
            r: Annotated[jax.Array, ppy.Shape(8), F32, ppy.Sharding()],
            v: Annotated[jax.Array, ppy.Shape(8), F32, ppy.Sharding(AXIS)],
            n: Annotated[jax.Array, ppy.Shape(8), F32, ppy.Sharding(3)],
        ): ...
        """
    )
    x, y, r, v, n = module.functions[0].parameters
    assert (x.spec.sharding, y.spec.sharding, r.spec.sharding) == (
        ("data", None),
        (("a", "b"),),
        (),
    )
    assert v.spec.sharding is None and "ppy.Sharding" in v.spec.problems[0]
    assert n.spec.sharding is None and "3 is not a dim's sharding" in n.spec.problems[0]


def test_the_work_a_module_does_when_imported_is_read_from_its_source() -> None:
    module = discover(
        """
        import os, sys
        import jax
        from model_lib import train

        jax.config.update("jax_enable_x64", True)
        os.environ.setdefault("XLA_FLAGS", "")
        sys.path.insert(0, ".")
        print("loading")
        model = train()
        for step in range(3):
            pass
        if sys.argv[1:]:
            os.remove(sys.argv[1])
        with open("log.txt", "a") as log:
            log.write("ran")
        if __name__ == "__main__":
            train()
        """
    )
    assert module.work == (
        "line 11: for step in range(3):",
        "line 14: os.remove(sys.argv[1])",
        "line 15: with open('log.txt', 'a') as log:",
    )
    quiet = discover("import jax\nW = jax.numpy.ones(3)\nif __name__ == '__main__':\n    main()\n")
    assert quiet.work == ()
