"""Deferred imports for the cold path: a one-shot `saipling search --mode lexical` should not pay for numpy.

`np` below is a stand-in module that imports numpy on first attribute access and then copies numpy's namespace
into itself, so later lookups are plain attribute hits (no per-call overhead). Annotations such as `np.ndarray`
are strings under `from __future__ import annotations` and never trigger the import.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._lazy_target = name

    def __getattr__(self, attr: str) -> Any:  # only called for names not yet in __dict__
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        module = importlib.import_module(self._lazy_target)
        self.__dict__.update(module.__dict__)
        return getattr(module, attr)


np: Any = LazyModule("numpy")


class LazyPattern:
    """A regular expression compiled on first use. Character classes spanning tens of thousands of code points
    (the CJK ranges) take ~2-6 ms each to compile, paid at import by every one-shot CLI call otherwise."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)

    def __getattr__(self, attr: str) -> Any:  # only for names not yet set: compile, then bind directly
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        import re

        value = getattr(re.compile(*self._args), attr)
        setattr(self, attr, value)
        return value


def onnxruntime() -> Any:
    """`import onnxruntime`, with its telemetry off: ONNX Runtime 1.2x on Linux writes a device id and an event
    store under `~/.cache/Microsoft/DeveloperTools/.onnxruntime/` on its first session (`disable_telemetry_events()`
    does not stop it), outside the project, which saipling never writes. ORT_DISABLE_TELEMETRY does; a value the
    user set is kept. Raises ImportError like the import."""
    import os

    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    return ort
