"""Static discovery: what a ``.ppy`` module defines, read from its AST alone.

Nothing here imports or runs the user's code: the build must be able to say
what it would stage, and why not, on a machine where the project cannot even
be imported (runtime-only installs, ``build-execution = "deny"``). Names are
resolved through the module's own imports, so ``import jax as j; @j.jit`` and
``from jax import jit`` both read as ``jax.jit``; annotations are followed
through module-level aliases such as ``Batch = Annotated[...]``.

Four descriptions of an input are read: ``ppy.Shape``/``ppy.DType`` inside
``Annotated``; a jaxtyping annotation (``Float32[Array, "B 4"]``, read as
text: jaxtyping is never imported); ``ppy.Like(example)``; and a class
whose annotated fields are themselves described (a ``NamedTuple``, a
``TypedDict`` or a dataclass), which ``ModuleInfo.classes`` records. A
static parameter annotated ``bool`` or ``Literal[...]`` has its values read.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from pathlib import Path

from ppy.discovery.definitions import Definitions
from ppy.discovery.differentiation import differentiated
from ppy.discovery.names import Names, imported_modules
from ppy.discovery.records import ModuleInfo
from ppy.discovery.specs import Specs
from ppy.discovery.work import work
from ppy.layout import module_name

__all__ = ["discover_module", "discover_source"]


def discover_module(root: Path, path: Path, data: bytes | None = None) -> ModuleInfo:
    """Discover one file; the sha256 is of its bytes as they are on disk, or
    of ``data``, its bytes as the command read them (``ppy.snapshot``)."""
    name = module_name(root, path)
    if name is None:
        raise ValueError(f"{path} is not under the project root {root}")
    if data is None:
        data = Path(path).read_bytes()
    relative = Path(path).relative_to(root).as_posix()
    digest = hashlib.sha256(data).hexdigest()
    try:
        source = importlib.util.decode_source(data)
    except (UnicodeDecodeError, SyntaxError) as error:
        return ModuleInfo(name, relative, "", digest, syntax_error=f"{relative}:1: {error}")
    return _discover(source, module=name, path=relative, sha256=digest)


def discover_source(source: str, *, module: str, path: str) -> ModuleInfo:
    """Discover a module from its text; ``path`` is what messages call it."""
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    return _discover(source, module=module, path=path, sha256=digest)


def _discover(source: str, *, module: str, path: str, sha256: str) -> ModuleInfo:
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as error:
        message = f"{path}:{error.lineno or 1}: {error.msg}"
        return ModuleInfo(module, path, source, sha256, syntax_error=message)
    names = Names(tree, module)
    definitions = Definitions(tree, names, Specs(names, path), module=module, path=path)
    return ModuleInfo(
        module,
        path,
        source,
        sha256,
        functions=definitions.functions(differentiated(names, definitions)),
        aliases=names.imports,
        imports=imported_modules(tree, module),
        classes=definitions.classes(),
        work=work(tree, names),
    )
