"""One watched run: a Recorder plus the instruments of whichever frameworks the script imports.

Instruments are installed the moment a framework finishes importing (an import hook on ``sys.meta_path``),
so a PyTorch script never pays for importing JAX and vice versa, and a framework imported before the
session started (a notebook) is instrumented at once.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from twinbench.doctor.recorder import ACTIVE, Recorder

if TYPE_CHECKING:
    from twinbench.doctor.instruments_jax import JaxInstruments

WATCHED = ("jax", "torch", "optax")
#: each framework's instruments ("module:class", imported when the framework is) and the session's options they take
INSTRUMENTS = {"jax": ("twinbench.doctor.instruments_jax:JaxInstruments", ("capture_stderr",)),
               "torch": ("twinbench.doctor.instruments_torch:TorchInstruments", ())}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``on_import(name)`` right after one of ``WATCHED`` has been executed."""

    def __init__(self, on_import: Callable[[str], None]) -> None:
        self.on_import = on_import
        self.busy: set[str] = set()

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in WATCHED or fullname in self.busy:
            return None
        self.busy.add(fullname)
        try:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        finally:
            self.busy.discard(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, on_import = spec.loader, self.on_import

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> ModuleType | None:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)  # type: ignore[union-attr]
                on_import(spec.name)

        spec.loader = Loader()
        return spec


class Instrument(Protocol):
    """What the session asks of a framework's instruments (``JaxInstruments``, ``TorchInstruments``)."""

    def uninstall(self) -> None: ...


class Session:
    """Start recording; ``stop()`` uninstalls everything and returns the observations."""

    def __init__(self, max_steps: int | None = None, capture_stderr: bool = False) -> None:
        self.rec = Recorder(max_steps=max_steps)
        ACTIVE.append(self.rec)
        self.capture_stderr = capture_stderr
        self.instruments: dict[str, Instrument] = {}  # framework -> its instruments
        self.optax = False  # Optax's update is watched (by the JAX instruments)
        self.finder = _AfterImport(self._on_import)
        sys.meta_path.insert(0, self.finder)
        for name in WATCHED:
            if name in sys.modules:
                self._on_import(name)

    def jax(self) -> JaxInstruments | None:
        """The JAX instruments, once JAX is imported."""
        return self.instruments.get("jax")  # type: ignore[return-value]

    def _on_import(self, name: str) -> None:
        if name in self.instruments or (name == "optax" and self.optax):
            return
        try:
            if name == "optax":  # JAX's optimizers: watched by the JAX instruments, once both are imported
                if (jax := self.jax()) is not None:
                    jax.patch_optax()
                    self.optax = True
                return
            target, options = INSTRUMENTS[name]
            module, cls = target.split(":")
            make = getattr(importlib.import_module(module), cls)
            self.instruments[name] = make(self.rec, **{o: getattr(self, o) for o in options})
            if "optax" in sys.modules:
                self._on_import("optax")
        except Exception as e:  # never break the user's import: report what could not be watched
            self.rec.info.instrument_errors.append(f"{name}: {type(e).__name__}: {e}"[:300])

    def stop(self) -> dict[str, Any]:  # observations.Observations, as JSON (summary.observations)
        """Collect static facts, uninstall every hook, and return the observations."""
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if self.rec in ACTIVE:
            ACTIVE.remove(self.rec)
        self.rec.finish()
        for inst in self.instruments.values():
            inst.uninstall()
        return self.rec.observations()
