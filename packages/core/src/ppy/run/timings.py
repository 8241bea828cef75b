"""Where a run's time went, measured inside the run: what ``ppy doctor
--program`` reports.

The doctor runs ``ppy run --no-warm FILE ARGS`` in a child process with
``PPY_TIMINGS`` naming a file; ``start`` reads (and removes) the variable, so
the program and the processes it starts see the environment python would
give them. Nothing here changes what the program computes or prints: it
only watches.

- ``import jax`` is timed where it happens (in ppy's runtime or in the
  program's own import): a finder at the front of ``sys.meta_path`` notes
  when the top-level import of ``jax`` starts and when its module has run.
- jax's backend start is the first ``xla_bridge.backends()``: the plugins'
  discovery (``jax_plugins``, libtpu's registration) and each platform's
  client (on a TPU, the chip open) are timed apart, by wrapping jax's three
  functions once jax is imported. jax 0.10 and 0.12 report none of it.
- Compiles are jax's own duration events (``jax.monitoring``): the trace,
  the lowering to MLIR and the backend compile of each computation. A
  backend compile that ppy's executable cache (or jax's persistent cache)
  answered is counted as a cache load, not a compile: ppy's unstaged cache
  says so (``cache.unstaged`` with ``source=cache``) just before jax's event
  ends, on the same thread.
- ppy's own events (``ppy.log.observe``) count the rest: executables read
  from ppy's cache, eager ops served before lowering, staged functions
  bound, their calls (the ``run.call`` events, which observing turns on) and
  their fallbacks.

The file is written when the program ends and again at exit, so that the
doctor can tell the program's last line from the process's end.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Final

__all__ = ["ENV", "FORMAT", "Timings", "start"]

#: The variable naming the file the run writes its timings to.
ENV: Final = "PPY_TIMINGS"
#: The version of the file's layout.
FORMAT: Final = 1

_TRACE: Final = "/jax/core/compile/jaxpr_trace_duration"
_LOWER: Final = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_COMPILE: Final = "/jax/core/compile/backend_compile_duration"
#: jax's persistent cache answered the backend compile under way.
_JAX_CACHE_HIT: Final = "/jax/compilation_cache/cache_hits"


class Timings:
    """What one run measured; ``to_json`` is what the file holds."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stamps: dict[str, float] = {"started": time.time()}
        self.spans: dict[str, float] = {}
        self.platforms: dict[str, float] = {}
        self.jax: dict[str, list[float]] = {}
        self.loads: list[float] = []
        self.counts: dict[str, int] = {}
        self.fallbacks: dict[str, int] = {}
        self._pending = threading.local()
        self._lock = threading.Lock()

    # -- what is counted -----------------------------------------------------

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + by

    def event(self, event: str, fields: dict[str, Any]) -> None:
        """One of ppy's log events, of any level (``ppy.log.observe``)."""
        if event == "cache.unstaged":
            source = fields.get("source")
            if source == "cache" and fields.get("lowered") is False:
                self._count("eager_loads")  # served before lowering: no jax event follows
            elif source == "cache":
                self._pending.load = "ppy"  # jax's backend-compile event follows
        elif event == "cache.hit":
            self._count("cache_hits")
        elif event == "run.bind":
            self._count("bound")
        elif event == "run.call":
            self._count("staged_calls" if fields.get("path") == "staged" else "original_calls")
        elif event == "run.fallback":
            category = str(fields.get("category"))
            with self._lock:
                self.fallbacks[category] = self.fallbacks.get(category, 0) + 1

    def duration(self, event: str, duration_secs: float, **_: str | int) -> None:
        """One of jax's duration events."""
        seconds = duration_secs
        if event == _COMPILE:
            answered = getattr(self._pending, "load", None)
            self._pending.load = None
            if answered is not None:
                with self._lock:
                    self.loads.append(seconds)
                return
        if event in (_TRACE, _LOWER, _COMPILE):
            with self._lock:
                self.jax.setdefault(event, []).append(seconds)

    def jax_event(self, event: str, **_: str | int) -> None:
        """One of jax's plain events."""
        if event == _JAX_CACHE_HIT:
            self._pending.load = "jax"

    # -- the file --------------------------------------------------------------

    def mark(self, name: str) -> None:
        self.stamps.setdefault(name, time.time())

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            jax = {name: [len(v), sum(v)] for name, v in self.jax.items()}
            return {
                "format": FORMAT,
                "stamps": dict(self.stamps),
                "spans": dict(self.spans),
                "platforms": dict(self.platforms),
                "trace": jax.get(_TRACE, [0, 0.0]),
                "lower": jax.get(_LOWER, [0, 0.0]),
                "compile": jax.get(_COMPILE, [0, 0.0]),
                "loads": [len(self.loads), sum(self.loads)],
                "counts": dict(self.counts),
                "fallbacks": dict(self.fallbacks),
            }

    def write(self) -> None:
        """Write the file whole (a rename), so the doctor never reads half of it."""
        written = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(OSError):
            with open(written, "w", encoding="utf-8") as file:
                json.dump(self.to_json(), file)
            os.replace(written, self.path)

    def ended(self) -> None:
        """The program's last line has run (``ppy.run.program.Program``'s ``ended``)."""
        self.mark("program_ended")
        self.write()

    def _at_exit(self) -> None:
        self.mark("exit")
        self.write()

    # -- jax -------------------------------------------------------------------

    def jax_imported(self) -> None:
        """Listen to jax's events and time its backend start, now that jax is imported."""
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(self.duration)
        monitoring.register_event_listener(self.jax_event)
        from jax._src import xla_bridge

        self._time(xla_bridge, "backends", "backend_start")
        self._time(xla_bridge, "_discover_and_register_pjrt_plugins", "plugins")
        init = getattr(xla_bridge, "_init_backend", None)
        if callable(init):

            def _init_backend(platform: str) -> Any:
                began = time.perf_counter()
                try:
                    return init(platform)
                finally:
                    self.platforms[platform] = time.perf_counter() - began

            xla_bridge._init_backend = _init_backend

    def _time(self, module: ModuleType, name: str, span: str) -> None:
        """Wrap ``module.name`` so that its first call's time is ``span``."""
        original = getattr(module, name, None)
        if not callable(original):
            return
        spans = self.spans

        def timed(*args: Any, **kwargs: Any) -> Any:
            if span in spans:
                return original(*args, **kwargs)
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spans.setdefault(span, time.perf_counter() - began)

        setattr(module, name, timed)


class _JaxImport:
    """A finder that times the top-level ``import jax`` and nothing else."""

    def __init__(self, timings: Timings) -> None:
        self.timings = timings

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != "jax" or "jax" in sys.modules:
            return None
        began = time.perf_counter()
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("jax")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader: Any = spec.loader
        run = loader.exec_module
        timings = self.timings

        def exec_module(module: ModuleType) -> None:
            """The jax package's own loader's, timed (on this loader alone)."""
            del loader.exec_module  # the class's again, for any later use
            run(module)
            timings.spans["import_jax"] = time.perf_counter() - began
            timings.mark("jax_imported")
            with contextlib.suppress(Exception):  # a jax this does not know: untimed
                timings.jax_imported()

        loader.exec_module = exec_module
        return spec


def start() -> Timings | None:
    """The run's timings, where ``PPY_TIMINGS`` asks for them (the variable
    is then removed from the environment); None otherwise."""
    path = os.environ.pop(ENV, None)
    if not path:
        return None
    timings = Timings(path)
    from ppy.log import observe

    observe(timings.event)
    if "jax" in sys.modules:
        timings.spans["import_jax"] = 0.0
        with contextlib.suppress(Exception):
            timings.jax_imported()
    else:
        sys.meta_path.insert(0, _JaxImport(timings))
    atexit.register(timings._at_exit)
    return timings
